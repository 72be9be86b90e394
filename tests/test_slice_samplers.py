"""Slice samplers: episodes, uniform starts, masks, caching, circular buffers, epochs, priorities."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers.prioritized import PrioritizedSliceSampler
from datasets_hub.buffers.samplers.slice import SliceSampler, SliceSamplerWithoutReplacement
from datasets_hub.buffers.samplers.slice_layout import SliceLayout
from datasets_hub.buffers.storages import Storage
from datasets_hub.buffers.tensor_storages import LazyTensorStorage

LENGTHS = [50, 3, 20, 100, 7, 40]


class EpisodeStorage(Storage):
    """Episodes laid end to end: ``episode`` ids, ``step``, ``("next", "done")`` at each episode end.

    ``with_index=True`` exposes a build-time index and refuses ``read_key`` (as a dataset build
    would not need it); ``keys`` picks which leaves ``read_key`` offers. ``reads`` counts calls.
    """

    def __init__(self, lengths, with_index=False, keys=("episode", ("next", "done")), vouched=False):
        self.index = EpisodeIndex.from_lengths(lengths)
        n = int(sum(lengths))
        super().__init__(n)
        self.n = n
        self.episode = torch.repeat_interleave(torch.arange(len(lengths)), torch.as_tensor(lengths))
        self.step = torch.arange(n) - torch.repeat_interleave(self.index.start, self.index.length)
        self.done = torch.zeros(n, dtype=torch.bool)
        self.done[self.index.end - 1] = True
        self.with_index, self.keys, self.reads = with_index, [k if isinstance(k, tuple) else (k,) for k in keys], 0
        self.vouched = vouched

    def __len__(self):
        return self.n

    def done_only_at_episode_ends(self):
        return self.vouched

    def episode_index(self):
        return self.index if self.with_index else None

    def read_key(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if self.with_index and key not in (("next", "done"), ("next", "terminated"), ("is_init",)):  # flags, not ids
            raise AssertionError("a storage with an episode index must not be scanned")
        if key not in self.keys:
            raise KeyError(key)
        self.reads += 1
        return {("episode",): self.episode, ("next", "done"): self.done.unsqueeze(-1)}[key]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def check_slices(storage, index, slice_len):
    slices = index.reshape(-1, slice_len)
    assert (slices[:, 1:] - slices[:, :-1] == 1).all(), "slices must be contiguous"
    ep = storage.episode[slices]
    assert (ep == ep[:, :1]).all(), "a slice crossed an episode boundary"
    return slices


@pytest.mark.parametrize("with_index", [False, True])
def test_slices_are_contiguous_and_inside_episodes(with_index):
    storage = EpisodeStorage(LENGTHS, with_index=with_index)
    s = SliceSampler(slice_len=8)
    s.generator = gen()
    index, info = s.sample(storage, 256)
    assert index.shape == (256,) and index.dtype == torch.int64
    check_slices(storage, index, 8)
    trunc = info[("next", "truncated")]
    assert trunc.shape == (256, 1) and trunc.dtype == torch.bool
    assert torch.equal(trunc.reshape(32, 8), torch.arange(8).expand(32, 8) == 7)
    assert torch.equal(info[("next", "done")], trunc | storage.done[index].unsqueeze(-1))
    s2 = SliceSampler(num_slices=32)
    s2.generator = gen()
    assert torch.equal(s2.sample(storage, 256)[0], index)  # num_slices=32 <=> slice_len=8 at batch 256


def test_starts_are_uniform_over_valid_starts():
    lengths = [10, 40, 25, 5]  # valid starts for slices of 8: 3 + 33 + 18 + 0 = 54
    storage = EpisodeStorage(lengths)
    s = SliceSampler(slice_len=8)
    s.generator = gen(1)
    index, _ = s.sample(storage, 8 * 108_000)
    starts = index.reshape(-1, 8)[:, 0]
    valid = torch.cat([torch.arange(0, 3), torch.arange(10, 43), torch.arange(50, 68)])
    counts = torch.bincount(starts, minlength=storage.n)
    assert counts.sum() == counts[valid].sum(), "a start outside the valid starts was drawn"
    freq = counts[valid].double() / starts.numel()
    # 108k draws over 54 starts: std of each frequency ~ 0.0004; 0.002 is 5 sigma
    assert (freq - 1 / 54).abs().max() < 0.002


def test_strict_length_false_gives_short_slices_of_short_episodes():
    storage = EpisodeStorage([3, 20])
    s = SliceSampler(slice_len=8, strict_length=False)
    s.generator = gen(2)
    index, info = s.sample(storage, 800)  # 100 slices; 1 of the 14 valid starts is the short episode
    trunc = info[("next", "truncated")].reshape(-1)
    assert index.numel() == trunc.numel() and index.numel() < 800
    ends = torch.nonzero(trunc).reshape(-1)
    lengths = torch.diff(torch.cat([torch.tensor([-1]), ends]))
    assert len(lengths) == 100 and set(lengths.tolist()) <= {3, 8} and 3 in lengths.tolist()
    pos = 0
    for n in lengths.tolist():
        piece = index[pos : pos + n]
        assert (torch.diff(piece) == 1).all() and storage.episode[piece].unique().numel() == 1
        if n == 3:
            assert piece.tolist() == [0, 1, 2]
        pos += n


def test_no_episode_long_enough_names_the_longest():
    with pytest.raises(RuntimeError, match=r"slices of 8 rows.*has 5 rows.*row 3"):
        SliceSampler(slice_len=8).sample(EpisodeStorage([3, 5, 2]), 16)


def test_argument_errors():
    with pytest.raises(ValueError, match="exactly one"):
        SliceSampler()
    with pytest.raises(ValueError, match="exactly one"):
        SliceSampler(num_slices=2, slice_len=4)
    with pytest.raises(ValueError, match="not divisible by slice_len=8"):
        SliceSampler(slice_len=8).sample(EpisodeStorage(LENGTHS), 250)
    with pytest.raises(ValueError, match="not divisible by num_slices=3"):
        SliceSampler(num_slices=3).sample(EpisodeStorage(LENGTHS), 250)
    with pytest.raises(KeyError, match="traj_key"):
        SliceSampler(slice_len=4, traj_key="traj").sample(EpisodeStorage(LENGTHS), 8)
    with pytest.raises(KeyError, match="no episode index"):
        SliceSampler(slice_len=4).sample(EpisodeStorage(LENGTHS, keys=()), 8)


def test_episode_index_is_preferred_and_boundaries_are_cached():
    storage = EpisodeStorage(LENGTHS, with_index=True)
    s = SliceSampler(slice_len=4)
    for _ in range(5):
        s.sample(storage, 64)
    assert storage.reads == 1  # only the done flags, once

    online = EpisodeStorage(LENGTHS)
    s = SliceSampler(slice_len=4)
    for _ in range(5):
        s.sample(online, 64)
    assert online.reads == 2  # episode ids + done flags, once each
    online.write_version += 1  # a write invalidates the cache
    s.sample(online, 64)
    assert online.reads == 4
    nocache = SliceSampler(slice_len=4, cache_values=False)
    online.reads = 0
    for _ in range(3):
        nocache.sample(online, 64)
    assert online.reads >= 3


def test_end_key_and_traj_key():
    storage = EpisodeStorage(LENGTHS, keys=(("next", "done"),))  # no episode ids: cut at done flags
    s = SliceSampler(slice_len=8)
    s.generator = gen(4)
    check_slices(storage, s.sample(storage, 512)[0], 8)
    storage = EpisodeStorage(LENGTHS)
    s = SliceSampler(slice_len=8, traj_key="episode")
    check_slices(storage, s.sample(storage, 512)[0], 8)


def test_done_is_stored_done_or_truncated():
    storage = EpisodeStorage([50, 30])
    storage.done[10] = True  # a done flag inside an episode (episodes come from the ids here)
    s = SliceSampler(slice_len=8, traj_key="episode")
    s.generator = gen(3)
    index, info = s.sample(storage, 800)
    done, trunc = info[("next", "done")].reshape(-1), info[("next", "truncated")].reshape(-1)
    inside = (index == 10) & ~trunc
    assert inside.any() and done[inside].all()
    assert torch.equal(done, trunc | storage.done[index])


@pytest.mark.parametrize("strict", [True, False])
def test_a_storage_vouching_for_its_done_flags_is_not_scanned(strict):
    # vouched, over its own episode index: done = truncated, and the flags are never read (O(rows) at 10^8 rows)
    storage = EpisodeStorage(LENGTHS, with_index=True, vouched=True)
    s = SliceSampler(slice_len=8, strict_length=strict)
    s.generator = gen(6)
    for _ in range(3):
        index, info = s.sample(storage, 512)
        done, trunc = info[("next", "done")].reshape(-1), info[("next", "truncated")].reshape(-1)
        assert torch.equal(done, trunc) and torch.equal(done, trunc | storage.done[index])
        assert done.any()
    assert storage.reads == 0
    # the same storage without the promise: its flags are read once, and give the same done
    plain = EpisodeStorage(LENGTHS, with_index=True)
    p = SliceSampler(slice_len=8, strict_length=strict)
    p.generator = gen(6)
    for _ in range(3):
        assert torch.equal(p.sample(plain, 512)[1][("next", "done")], s.sample(storage, 512)[1][("next", "done")])
    assert plain.reads == 1


def test_a_vouching_storage_without_an_index_is_still_scanned():
    # the promise is about the storage's own episode index; episodes derived from ids are checked as before
    storage = EpisodeStorage([50, 30], vouched=True)
    storage.done[10] = True
    s = SliceSampler(slice_len=8, traj_key="episode")
    s.generator = gen(3)
    index, info = s.sample(storage, 800)
    assert torch.equal(
        info[("next", "done")].reshape(-1), info[("next", "truncated")].reshape(-1) | storage.done[index]
    )
    assert storage.reads == 2  # the ids, then the flags


def test_truncated_key_none_gives_no_info():
    s = SliceSampler(slice_len=4, truncated_key=None)
    assert s.sample(EpisodeStorage(LENGTHS), 8)[1] == {}


# -- SliceSamplerWithoutReplacement ------------------------------------------------------------------
def run_epoch(s, storage, batch_size):
    batches = []
    while True:
        batches.append(s.sample(storage, batch_size))
        if s.ran_out:
            return batches
        assert len(batches) < 1000


def test_without_replacement_epoch_rule():
    storage = EpisodeStorage(LENGTHS)
    s = SliceSamplerWithoutReplacement(slice_len=8)
    s.generator = gen(5)
    # floor(L / 8) slices per episode: 6 + 0 + 2 + 12 + 0 + 5 = 25 slices, batches of 4 slices
    batches = run_epoch(s, storage, 32)
    assert [b[0].numel() for b in batches] == [32] * 6 + [8]
    rows = torch.cat([b[0] for b in batches])
    assert rows.unique().numel() == rows.numel() == 200, "a row was visited twice in one epoch"
    check_slices(storage, rows, 8)
    per_episode = torch.bincount(storage.episode[rows], minlength=len(LENGTHS))
    assert per_episode.tolist() == [48, 0, 16, 96, 0, 40]
    last = batches[-1][1][("next", "truncated")]
    assert last.shape == (8, 1) and last.reshape(-1).tolist() == [False] * 7 + [True]
    # offsets change between epochs, so over epochs every row of a long episode is visited
    covered = set(rows.tolist())
    for _ in range(30):
        covered |= set(torch.cat([b[0] for b in run_epoch(s, storage, 32)]).tolist())
    assert len(covered) == sum(n for n in LENGTHS if n >= 8)


def test_without_replacement_is_deterministic_and_resumable():
    storage = EpisodeStorage(LENGTHS)
    a = SliceSamplerWithoutReplacement(num_slices=4)
    b = SliceSamplerWithoutReplacement(num_slices=4)
    a.generator, b.generator = gen(6), gen(6)
    for _ in range(10):
        assert torch.equal(a.sample(storage, 32)[0], b.sample(storage, 32)[0])
    state, gstate = a.state_dict(), a.generator.get_state()
    expected = [a.sample(storage, 32)[0] for _ in range(12)]
    c = SliceSamplerWithoutReplacement(num_slices=4)
    c.generator = torch.Generator()
    c.load_state_dict(state)
    c.generator.set_state(gstate)
    assert all(torch.equal(c.sample(storage, 32)[0], e) for e in expected)


def test_without_replacement_drop_last_and_short_episodes():
    storage = EpisodeStorage(LENGTHS)
    s = SliceSamplerWithoutReplacement(slice_len=8, drop_last=True)
    s.generator = gen()
    assert [b[0].numel() for b in run_epoch(s, storage, 32)] == [32] * 6
    s = SliceSamplerWithoutReplacement(slice_len=8, strict_length=False)
    s.generator = gen()
    rows = torch.cat([b[0] for b in run_epoch(s, storage, 32)])
    assert rows.numel() == 200 + 3 + 7 and rows.unique().numel() == rows.numel()


# -- PrioritizedSliceSampler -------------------------------------------------------------------------
def test_prioritized_slices_follow_start_priorities():
    lengths = [10, 12]  # slices of 4: starts 0..6 and 10..18
    storage = EpisodeStorage(lengths)
    s = PrioritizedSliceSampler(22, alpha=1.0, beta=0.5, slice_len=4)
    s.generator = gen(7)
    s.extend(torch.arange(22))
    s.update_priority(torch.tensor([3, 9, 15]), torch.tensor([50.0, 1e6, 20.0]))  # row 9 is no valid start
    index, info = s.sample(storage, 4 * 50_000)
    check_slices(storage, index, 4)
    starts = index.reshape(-1, 4)[:, 0]
    assert not (starts == 9).any() and not (starts == 7).any()
    q = torch.ones(22, dtype=torch.float64)
    q[3], q[15] = 50.0, 20.0
    valid = torch.cat([torch.arange(0, 7), torch.arange(10, 19)])
    expected = q[valid] / q[valid].sum()
    freq = torch.bincount(starts, minlength=22)[valid].double() / starts.numel()
    assert (freq - expected).abs().max() < 0.01  # std <= 0.0022 at 50k draws
    w = info["_weight"].reshape(-1, 4)
    assert (w == w[:, :1]).all()  # one weight per slice
    prob = q[starts] / q[valid].sum()
    expected_w = (prob * valid.numel()) ** -0.5
    expected_w /= (q[valid].min() / q[valid].sum() * valid.numel()) ** -0.5
    assert torch.allclose(w[:, 0].double(), expected_w, rtol=1e-5)


def test_prioritized_slices_state_round_trip():
    storage = EpisodeStorage(LENGTHS)
    s = PrioritizedSliceSampler(220, alpha=0.6, beta=0.4, num_slices=8)
    s.extend(torch.arange(220))
    s.update_priority(torch.arange(0, 220, 3), torch.linspace(0.1, 5, 74))
    t = PrioritizedSliceSampler(220, alpha=0.6, beta=0.4, num_slices=8)
    t.load_state_dict(s.state_dict())
    s.generator, t.generator = gen(8), gen(8)
    a, ia = s.sample(storage, 64)
    b, ib = t.sample(storage, 64)
    assert torch.equal(a, b) and torch.equal(ia["_weight"], ib["_weight"])


# -- through the real buffers and a dataset build -----------------------------------------------------
def _online_buffer(capacity, sampler):
    from datasets_hub.buffers import replay_buffers as rbs
    from datasets_hub.buffers.tensor_storages import LazyTensorStorage

    return rbs.TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sampler=sampler, generator=gen(9))


def _episodes(lengths, first_episode=0, first_write=0, last_done=True):
    n = sum(lengths)
    episode = torch.repeat_interleave(torch.arange(first_episode, first_episode + len(lengths)), torch.tensor(lengths))
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[torch.cumsum(torch.tensor(lengths), 0) - 1] = True
    if not last_done:
        done[-1] = False
    return TensorDict(
        {
            "episode": episode,
            "write": torch.arange(first_write, first_write + n),
            "next": {"done": done, "truncated": torch.zeros(n, 1, dtype=torch.bool)},
        },
        batch_size=[n],
    )


@pytest.mark.parametrize("key", ["traj", "end"])
def test_circular_buffer_never_mixes_old_and_new_rows(key):
    sampler = (
        SliceSampler(slice_len=5, traj_key="episode")
        if key == "traj"
        else SliceSampler(slice_len=5, end_key=("next", "done"))
    )
    rb = _online_buffer(100, sampler)
    rb.extend(_episodes([30, 30, 40]))
    # an unfinished episode overwrites rows 0..34: its newest row 34 sits next to row 35 of an old one
    rb.extend(_episodes([35], first_episode=3, first_write=100, last_done=False))
    if key == "traj":  # make the ids collide too: only the write cursor separates them
        rb.storage.read_key("episode")[35:60] = 3
        rb.storage._bump_version()
    for _ in range(20):
        sample = rb.sample(200)
        write = sample["write"].reshape(-1, 5)
        assert (torch.diff(write, dim=1) == 1).all(), "a slice mixed rows written at different times"
        assert torch.equal(sample[("next", "truncated")].reshape(-1, 5)[:, -1], torch.ones(40, dtype=torch.bool))


def test_buffer_sample_carries_masks_and_episode_ids():
    rb = _online_buffer(1000, SliceSampler(num_slices=4))
    rb.extend(_episodes([30, 30, 40]))
    sample = rb.sample(40)
    assert sample.shape == (40,)
    ep = sample["episode"].reshape(4, 10)
    assert (ep == ep[:, :1]).all()
    trunc = sample["next", "truncated"].reshape(4, 10)
    assert trunc[:, -1].all() and not trunc[:, :-1].any()
    stored_done = torch.isin(sample["write"] + 1, torch.tensor([30, 60, 100]))
    assert torch.equal(sample["next", "done"].reshape(-1), trunc.reshape(-1) | stored_done)


def test_dataset_build_slices_use_its_episode_index():
    from datasets_hub.build.pipeline import build
    from datasets_hub.build.storage import DatasetStorage
    from datasets_hub.loader import DatasetSpec
    from datasets_hub.testing import FakeLoader, fake_episodes

    chunks = [fake_episodes([12, 3, 9, 20], first_episode=0, first_row=0)]

    class ChunkLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            yield from (c.clone() for c in chunks)

    storage = DatasetStorage(build(DatasetSpec(id="fake/slices", loader="fake", params={}), ChunkLoader(), {}, []))
    s = SliceSampler(slice_len=6)
    s.generator = gen(10)
    index, _info = s.sample(storage, 60)
    data = storage.get(index)
    ep = data["episode"].reshape(10, 6)
    assert (ep == ep[:, :1]).all() and (ep != 1).all()  # episode 1 has 3 steps
    assert (torch.diff(data["step"].reshape(10, 6), dim=1) == 1).all()
    # a build vouches that its done flags end episodes: a slice's done is its truncated mark, never a scan
    assert storage.done_only_at_episode_ends()
    read_key = storage.read_key

    def no_done_scan(key):
        assert key not in (("next", "done"), "next/done"), "the done flags of a build were scanned"
        return read_key(key)

    get = storage.get

    def no_whole_build(index):
        assert not isinstance(index, slice), "the whole build was gathered"
        return get(index)

    # nor is the whole build gathered to look for a key it lacks (TorchRL's "is_init")
    storage.read_key, storage.get = no_done_scan, no_whole_build
    rb = TensorDictReplayBuffer(storage=storage, sampler=SliceSampler(slice_len=3), batch_size=300)
    sample = rb.sample()
    stored = get(sample["index"])["next", "done"]  # the build's own flags at those rows
    mask = torch.zeros(100, 3, dtype=torch.bool)
    mask[:, -1] = True
    assert torch.equal(sample["next", "truncated"], mask.reshape(-1, 1))
    assert stored.any() and torch.equal(sample["next", "done"], mask.reshape(-1, 1) | stored)


def test_prioritized_slices_through_the_buffer():
    rb = _online_buffer(100, PrioritizedSliceSampler(100, alpha=1.0, beta=0.5, slice_len=5))
    rb.extend(_episodes([30, 30, 40]))
    sample = rb.sample(50)
    assert sample["_weight"].shape == (50,)
    start = int(sample["index"][0])  # a valid start: raise its priority far above the others
    sample["td_error"] = torch.where(sample["index"] == start, 1e5, 1e-3)
    rb.update_tensordict_priority(sample)
    again = rb.sample(500)
    starts = again["index"].reshape(-1, 5)[:, 0]
    assert (starts == start).float().mean() > 0.9
    assert (torch.diff(again["write"].reshape(-1, 5), dim=1) == 1).all()


def test_replacement_false_is_the_sampler_without_replacement():
    sampler = SliceSampler(slice_len=4, replacement=False, drop_last=True, shuffle=False)
    assert type(sampler) is SliceSamplerWithoutReplacement
    assert sampler.drop_last and not sampler.shuffle and sampler.slice_len == 4
    assert type(SliceSampler(slice_len=4, replacement=True)) is SliceSampler
    with pytest.raises(ValueError, match="for replacement=True use SliceSampler"):
        SliceSamplerWithoutReplacement(slice_len=4, replacement=True)
    assert type(pickle.loads(pickle.dumps(sampler))) is SliceSamplerWithoutReplacement
    assert type(copy.deepcopy(SliceSampler(slice_len=2))) is SliceSampler


def test_end_keys_or_the_flags_of_every_key_present():
    r = torch.arange(12)
    data = TensorDict(
        {
            "obs": r.float(),
            "next": {"done": (r == 3)[:, None], "truncated": (r == 7)[:, None]},  # episodes 0-3, 4-7, 8-11
        },
        [12],
    )
    sampler = SliceSampler(slice_len=4, end_keys=[("next", "done"), ("next", "truncated"), ("next", "absent")])
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(12), sampler=sampler, batch_size=12)
    rb.extend(data)
    for _ in range(5):
        slices = rb.sample()["obs"].reshape(3, 4)
        assert (slices[:, 0] % 4 == 0).all()  # 4-row slices fit only at episode starts: cut at both flags
    only_done = TensorDictReplayBuffer(
        storage=LazyTensorStorage(12), sampler=SliceSampler(slice_len=4, end_key=("next", "done")), batch_size=12
    )
    only_done.extend(data)
    starts = {int(only_done.sample()["obs"].reshape(3, 4)[i, 0]) for _ in range(20) for i in range(3)}
    assert starts - {0, 4, 8}  # without the truncated flags, slices start inside the 4-11 episode
    with pytest.raises(RuntimeError, match="exclusive"):
        SliceSampler(slice_len=2, end_key=("next", "done"), end_keys=[("next", "done")])
    bad = TensorDictReplayBuffer(
        storage=LazyTensorStorage(12), sampler=SliceSampler(slice_len=4, end_keys=[("next", "x")]), batch_size=4
    )
    bad.extend(data)
    with pytest.raises(KeyError, match="none of end_keys"):
        bad.sample()


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize(
    "lengths, slice_len",
    [
        ([500] * 40, 4),
        (LENGTHS, 8),
        ([9, 9, 30, 9, 12, 9], 9),
        ([1] + [300] * 5, 4),
        ([5], 5),
        (list(range(1, 60)), 3),
        ([1, 10_000], 4),
    ],
)
def test_the_bucket_lookup_gives_the_binary_search_rows(lengths, slice_len, strict):
    # every start number, and the rows the binary search gives: the bucket table must agree on each one
    layout = SliceLayout(EpisodeIndex.from_lengths(lengths), slice_len, strict)
    if layout.total == 0:
        return
    u = torch.arange(layout.total)
    assert layout.rows_of_np(u.numpy()).tolist() == layout.rows_of(u).tolist()
    if lengths == [500] * 40:
        assert layout.width == 497  # mt30's shape: one bucket per episode
    if lengths == [1] + [300] * 5 and strict:
        assert layout.width == 297  # the 1-row episode has no start and is not kept
    if lengths == [1, 10_000]:  # one start in the short episode: a table of 10^4 buckets for 2 episodes
        assert layout.width == (9997 if strict else 0)  # ... is not made: the binary search serves


# -- TorchRL 0.14's slice keywords ----------------------------------------------------------------


def _td_buffer(sampler, data, batch_size):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(len(data)),
        sampler=sampler,
        batch_size=batch_size,
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(data)
    return rb


def _traj_data(lengths, init=True, terminated_at=()):
    ids = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    n = ids.numel()
    first = torch.ones(n, dtype=torch.bool)
    first[1:] = ids[1:] != ids[:-1]
    terminated = torch.zeros(n, 1, dtype=torch.bool)
    terminated[list(terminated_at)] = True
    data = {"traj": ids, "obs": torch.arange(n) * 10, ("next", "terminated"): terminated}
    if init:
        data["is_init"] = first.unsqueeze(-1)
    return TensorDict(data, [n])


def test_terminated_is_in_the_info_as_stored():
    data = _traj_data([4, 4], terminated_at=[3])
    sampler = SliceSampler(slice_len=4, traj_key="traj")
    index, info = sampler.sample(_td_buffer(sampler, data, 4).storage, 4)
    assert info[("next", "terminated")].reshape(-1).tolist() == data["next", "terminated"][index].reshape(-1).tolist()
    bare = SliceSampler(slice_len=2, traj_key="traj")
    plain = TensorDict({"traj": torch.tensor([0, 0, 1, 1])}, [4])
    _, info = bare.sample(_td_buffer(bare, plain, 2).storage, 2)
    assert not info[("next", "terminated")].any()  # no stored flags: False


def test_pad_output_fills_short_slices_and_masks_them():
    data = _traj_data([2, 5, 3])
    sampler = SliceSampler(slice_len=4, traj_key="traj", strict_length=False, pad_output=True)
    rb = _td_buffer(sampler, data, 12)
    for _ in range(10):
        sample = rb.sample()
        assert sample.shape == (12,)
        mask = sample["collector", "mask"].reshape(3, 4)
        obs = sample["obs"].reshape(3, 4)
        truncated = sample["next", "truncated"].reshape(3, 4)
        for row in range(3):
            real = int(mask[row].sum())
            assert mask[row, :real].all() and not mask[row, real:].any()
            assert (obs[row, real:] == obs[row, real - 1]).all()  # padding repeats the last real row
            assert truncated[row].nonzero().reshape(-1).tolist() == [real - 1]
            assert (sample["is_init"].reshape(3, 4)[row, 0]).item()


def test_pad_output_without_short_episodes_adds_no_mask_and_needs_strict_length_false():
    sampler = SliceSampler(slice_len=2, traj_key="traj", strict_length=False, pad_output=True)
    assert ("collector", "mask") not in _td_buffer(sampler, _traj_data([4, 4]), 4).sample().keys(True)
    with pytest.raises(ValueError, match="pad_output=True is incompatible"):
        SliceSampler(slice_len=2, strict_length=True, pad_output=True)


def test_is_init_marks_every_slice_start_and_keeps_stored_resets():
    data = _traj_data([3, 6, 2])
    sampler = SliceSampler(num_slices=3, traj_key="traj", strict_length=False)
    rb = _td_buffer(sampler, data, 12)
    for _ in range(10):
        sample = rb.sample()
        is_init = sample["is_init"].reshape(-1)
        starts = torch.cat([torch.tensor([0]), sample["next", "truncated"].reshape(-1).nonzero().reshape(-1)[:-1] + 1])
        assert is_init[starts].all()
        assert is_init.sum() == starts.numel()  # one reset per slice: every slice lies in one episode
    no_init = SliceSampler(slice_len=2, traj_key="traj")
    assert "is_init" not in _td_buffer(no_init, _traj_data([4, 4], init=False), 4).sample().keys()


def test_traj_key_found_automatically_prefers_collector_ids_and_is_recorded():
    data = TensorDict(
        {
            ("collector", "traj_ids"): torch.tensor([0, 0, 0, 1, 1, 1]),
            "episode": torch.zeros(6, dtype=torch.long),  # disagrees: one episode
        },
        [6],
    )
    sampler = SliceSampler(num_slices=2)
    assert sampler._traj_key_auto and sampler.traj_key is None
    sample = _td_buffer(sampler, data, 6).sample()
    assert sampler.traj_key == ("collector", "traj_ids") and sampler._fetch_traj and not sampler._traj_key_auto
    assert (sample["collector", "traj_ids"].reshape(2, 3) == sample["collector", "traj_ids"].reshape(2, 3)[:, :1]).all()

    done = torch.zeros(6, 1, dtype=torch.bool)
    done[[2, 5]] = True
    by_done = SliceSampler(num_slices=2)
    _td_buffer(by_done, TensorDict({("next", "done"): done}, [6]), 6).sample()
    assert by_done._fetch_traj is False and by_done.traj_key is None


def test_end_flags_must_be_one_per_item():
    flags = torch.zeros(6, 2, 1, dtype=torch.bool)  # per-agent dones
    sampler = SliceSampler(num_slices=2, end_key=("next", "done"))
    rb = _td_buffer(sampler, TensorDict({("next", "done"): flags}, [6]), 6)
    with pytest.raises(RuntimeError, match="Expected the end-of-trajectory signal to be 1-dimensional"):
        rb.sample()


def test_span_lets_slices_hang_over_episode_ends_cut_to_the_episode():
    data = _traj_data([6, 6, 6], init=False)
    sampler = SliceSampler(slice_len=4, traj_key="traj", span=(2, 1))
    rb = _td_buffer(sampler, data, 40)
    seen_short = set()
    for _ in range(20):
        sample = rb.sample()
        ends = sample["next", "truncated"].reshape(-1).nonzero().reshape(-1)
        lengths = torch.diff(torch.cat([torch.tensor([-1]), ends])).tolist()
        starts = [0, *(ends[:-1] + 1).tolist()]
        for first, length in zip(starts, lengths, strict=True):
            ids = sample["traj"][first : first + length]
            assert (ids == ids[0]).all()
            assert 2 <= length <= 4  # at least slice_len - 2 rows (left), slice_len - 1 (right)
            step = (sample["obs"][first] // 10) % 6
            if length < 4:
                seen_short.add("left" if step == 0 else "right")
    assert seen_short == {"left", "right"}
    with pytest.raises(ValueError, match="strictly lower than the sequence length"):
        _td_buffer(SliceSampler(slice_len=2, traj_key="traj", span=2), data, 4).sample()
    with pytest.raises(ValueError, match="span must be"):
        SliceSampler(slice_len=2, span=(1, -1))


def test_slice_sampler_without_replacement_is_a_sampler_without_replacement():
    from datasets_hub.buffers.samplers.random import SamplerWithoutReplacement

    sampler = SliceSampler(replacement=False, slice_len=2, traj_key="traj")
    assert isinstance(sampler, SliceSamplerWithoutReplacement) and isinstance(sampler, SamplerWithoutReplacement)
    rb = _td_buffer(sampler, _traj_data([4, 4]), 2)
    rb.sample()
    assert sampler._sample_list.numel() == 3  # four slices of two rows this epoch, one served
    with pytest.raises(ValueError, match="no item at a given row"):
        sampler.sample_at(rb.storage, torch.tensor([0]))


def test_sample_many_rows_of_full_slices_is_k_successive_draws():
    """One draw of k times the slices (slice_len given, every slice full) gives the values, the info and the
    generator state of k draws."""
    storage = LazyTensorStorage(200)
    episode = torch.arange(200) // 50
    done = (torch.arange(200) % 50 == 49).unsqueeze(-1)
    storage.set(torch.arange(200), TensorDict({"episode": episode, ("next", "done"): done}, batch_size=[200]))

    def sampler(seed):
        s = SliceSampler(slice_len=5, traj_key="episode")
        s.generator = torch.Generator().manual_seed(seed)
        return s

    one, many = sampler(3), sampler(3)
    draws = [one.sample_rows(storage, 20) for _ in range(4)]
    index, info, rows = many.sample_many_rows(storage, 4, 20)
    assert torch.equal(index, torch.cat([d[0] for d in draws]))
    assert np.array_equal(rows, np.concatenate([d[2] for d in draws]))
    assert set(info) == set(draws[0][1]) and info
    for key, value in info.items():
        assert torch.equal(value, torch.cat([d[1][key] for d in draws])), key
    assert torch.equal(one.generator.get_state(), many.generator.get_state())
