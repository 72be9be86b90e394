"""WindowSampler: every window compared with a plain loop over the episodes, on a build and online."""

from __future__ import annotations

import pytest
import torch

from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers import RandomSampler
from datasets_hub.buffers.samplers.window import WindowSampler, pad_key
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.testing import FakeLoader, fake_episodes

LENGTHS = [12, 3, 1, 9, 20]


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def build_buffer(lengths=LENGTHS, sampler=None):
    from datasets_hub.build.pipeline import build
    from datasets_hub.build.storage import DatasetStorage
    from datasets_hub.loader import DatasetSpec

    chunk = fake_episodes(lengths)

    class ChunkLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            yield chunk.clone()

    path = build(DatasetSpec(id="fake/windows", loader="fake", params={}), ChunkLoader(), {}, [])
    return TensorDictReplayBuffer(storage=DatasetStorage(path), sampler=sampler, generator=gen(3)), chunk


def online_buffer(lengths=LENGTHS, sampler=None):
    chunk = fake_episodes(lengths)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), sampler=sampler, generator=gen(3))
    rb.extend(chunk.clone())
    return rb, chunk


def expected_window(chunk, key, row, offsets):
    """Plain loop: rows of the anchor's episode at the offsets, edges repeated, pad flags."""
    episode = chunk["episode"]
    first = row
    while first > 0 and episode[first - 1] == episode[row]:
        first -= 1
    last = row
    while last + 1 < len(episode) and episode[last + 1] == episode[row]:
        last += 1
    values, pads = [], []
    for o in offsets:
        r = row + o
        pads.append(not first <= r <= last)
        values.append(chunk.get(key)[min(max(r, first), last)])
    return torch.stack(values), torch.tensor(pads)


@pytest.mark.parametrize("make", [build_buffer, online_buffer])
def test_windows_match_a_plain_loop(make):
    offsets = {
        "observation": [-2, -1, 0],
        "action": list(range(6)),
        ("next", "reward"): [0, 1],
        ("next", "observation"): [-1, 0, 2],
    }
    rb, chunk = make(sampler=WindowSampler(offsets))
    for _ in range(5):
        sample = rb.sample(64)
        assert sample.batch_size == (64,)
        for row_i, row in enumerate(sample["index"].tolist()):
            for key, offs in offsets.items():
                want, pads = expected_window(chunk, key, row, offs)
                assert torch.equal(sample[key][row_i], want), (key, row)
                assert torch.equal(sample[pad_key(key)][row_i], pads), (key, row)
        # every other key stays at the anchor
        assert torch.equal(sample["episode"], chunk["episode"][sample["index"]])


def test_stride_and_burn_in():
    s = WindowSampler([0, 1, 2], keys=["observation"], stride=2, burn_in=2)
    assert s.windows[("observation",)].tolist() == [-4, -2, 0, 2, 4]
    rb, chunk = online_buffer(sampler=s)
    sample = rb.sample(40)
    for i, row in enumerate(sample["index"].tolist()):
        want, pads = expected_window(chunk, "observation", row, [-4, -2, 0, 2, 4])
        assert torch.equal(sample["observation"][i], want)
        assert torch.equal(sample["observation_is_pad"][i], pads)


def test_every_anchor_row_is_drawn_uniformly():
    rb, chunk = online_buffer(sampler=WindowSampler([0], keys=["action"]))
    counts = torch.bincount(rb.sample(45_000)["index"], minlength=len(chunk)).double()
    expected = 45_000 / len(chunk)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 90  # 44 degrees of freedom: p ~ 1e-4


@pytest.mark.parametrize("make", [build_buffer, online_buffer])
def test_pad_false_draws_only_fitting_anchors(make):
    rb, _chunk = make(sampler=WindowSampler({"observation": [-1, 0], "action": range(8)}, pad=False))
    seen = set()
    for _ in range(20):
        sample = rb.sample(128)
        assert not sample["observation_is_pad"].any() and not sample["action_is_pad"].any()
        seen.update(sample["index"].tolist())
    # fitting anchors: step >= 1 and step + 7 <= length - 1, in episodes of 12, 9 and 20 rows
    starts = [0, 12, 15, 16, 25]
    valid = {s + t for s, n in zip(starts, LENGTHS, strict=True) for t in range(1, n - 7)}
    assert seen == valid


def test_inner_sampler_gives_the_anchors_and_shares_the_generator():
    inner = RandomSampler()
    s = WindowSampler([0, 1], keys=["action"], sampler=inner)
    rb, _ = online_buffer(sampler=s)
    assert inner.generator is s.generator is not None
    a = rb.sample(16)["index"]
    rb2, _ = online_buffer(sampler=WindowSampler([0, 1], keys=["action"], sampler=RandomSampler()))
    assert torch.equal(a, rb2.sample(16)["index"])


def test_same_seed_same_windows_and_online_growth():
    rb1, _ = online_buffer(sampler=WindowSampler(range(-1, 4)))
    rb2, _ = online_buffer(sampler=WindowSampler(range(-1, 4)))
    assert (rb1.sample(32) == rb2.sample(32)).all()
    rb1.extend(fake_episodes([7], first_episode=5, first_row=100))  # new episode: boundaries re-derived
    sample = rb1.sample(400)
    assert (sample["episode"] == 5).any()
    new = sample["episode"] == 5
    assert (sample["action"][new] <= -950).all()  # actions of transitions >= 95 only: no older row leaks in


def test_argument_errors():
    with pytest.raises(ValueError, match="non-empty"):
        WindowSampler([])
    with pytest.raises(ValueError, match="stride"):
        WindowSampler([0], stride=0)
    with pytest.raises(ValueError, match="not both"):
        WindowSampler({"action": [0]}, keys=["action"])
    with pytest.raises(ValueError, match="inner sampler"):
        WindowSampler([0], pad=False, sampler=RandomSampler())
    rb, _ = online_buffer(sampler=WindowSampler([0], keys=["nope"]))
    with pytest.raises(KeyError, match="nope"):
        rb.sample(4)
    rb, _ = online_buffer(lengths=[3, 2], sampler=WindowSampler(range(5), keys=["action"], pad=False))
    with pytest.raises(RuntimeError, match="long enough"):
        rb.sample(4)


def test_pad_key_names():
    assert pad_key("action") == "action_is_pad"
    assert pad_key(("next", "observation")) == ("next", "observation_is_pad")
