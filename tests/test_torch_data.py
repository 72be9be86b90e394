"""PyTorch DataLoader datasets and DDP sharding over dataset builds (issue 5, interop)."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch
from torch.utils.data import DistributedSampler

from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers import (
    FullStackSampler,
    GoalSampler,
    NStepReturnSampler,
    PrioritizedSampler,
    WindowSampler,
)
from datasets_hub.buffers.samplers.slice import SliceSampler
from datasets_hub.build.pipeline import build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import InvalidParameter
from datasets_hub.interop.torch_data import (
    BufferDataset,
    EpisodeShardSampler,
    SampledBatches,
    dumps_by_reference,
    loads_by_reference,
    resolve_rank,
    tensordict_collate,
)
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader, fake_episodes

LENGTHS = [7, 3, 12, 5, 9, 1, 4, 15, 6, 8, 2, 11, 5, 10, 3, 6]  # 107 transitions, 16 episodes
OBS_DIM = 256


@pytest.fixture
def build_path():
    class ChunkLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            yield fake_episodes(LENGTHS[:8], obs_dim=OBS_DIM)
            yield fake_episodes(LENGTHS[8:], obs_dim=OBS_DIM, first_episode=8, first_row=sum(LENGTHS[:8]) + 8)

    return build(DatasetSpec(id="fake/interop", loader="fake", params={}), ChunkLoader(), {}, [])


@pytest.fixture
def rb(build_path):
    return TensorDictReplayBuffer(storage=DatasetStorage(build_path), batch_size=8)


def _same(a, b):
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in b.keys(True, True):
        torch.testing.assert_close(a.get(key), b.get(key), rtol=0, atol=0, msg=f"key {key}")


def _check_rows(batch, storage):
    """Every row of ``batch`` is exactly the stored transition its ``index`` names."""
    expected = storage.get(batch["index"])
    _same(batch.exclude("index"), expected)
    # the fake data tell rows apart: next observation is the following observation row
    torch.testing.assert_close(batch["next", "observation"], batch["observation"] + 100)


# -- map-style ------------------------------------------------------------------------------------


def test_map_dataset_items_and_one_gather_per_batch(rb, monkeypatch):
    ds = BufferDataset(rb)
    n = sum(LENGTHS)
    assert len(ds) == n
    item = ds[5]
    assert item.batch_size == torch.Size([]) and int(item["index"]) == 5
    _same(item.exclude("index"), rb.storage.get(5))
    assert int(ds[-1]["index"]) == n - 1
    with pytest.raises(IndexError):
        ds[n]

    calls = []
    real_get, real_gather = rb.storage.get, rb.storage.gather
    monkeypatch.setattr(rb.storage, "get", lambda index: calls.append(index) or real_get(index))
    monkeypatch.setattr(
        rb.storage, "gather", lambda index, extras=None: calls.append(index) or real_gather(index, extras)
    )
    loader = ds.dataloader(batch_size=10, shuffle=True, generator=torch.Generator().manual_seed(0))
    seen = []
    for batch in loader:
        assert batch.batch_size[0] <= 10
        _check_rows(batch, DatasetStorage(rb.storage.path))
        seen.append(batch["index"])
    assert len(calls) == len(loader) == -(-n // 10)  # __getitems__: one gather per batch, not per item
    assert sorted(torch.cat(seen).tolist()) == list(range(n))


# samplers whose item at anchor i is a whole sample row: the map-style view gives exactly that row
ANCHORED = {
    "window": lambda: WindowSampler(range(-2, 6), keys=["observation", "action"]),
    "window with stride and burn-in": lambda: WindowSampler(
        {"observation": [-1, 0], "action": range(4)}, stride=2, burn_in=1
    ),
    "n-step, fixed n": lambda: NStepReturnSampler(0.9, 3, rtg_key=("next", "reward")),
    "goals, current only": lambda: GoalSampler(p_current=1.0, p_future=0.0, subgoal_steps=3),
}


@pytest.mark.parametrize("name", sorted(ANCHORED))
def test_map_dataset_gives_the_sample_at_each_anchor(build_path, name):
    """Issue 27: DataLoader(rb.as_map_dataset()) with a window sampler gave single steps ((16, 6) where
    rb.sample() gives (16, 8, 6)) with no pad flags. Now item i is rb.sample()'s row for anchor i."""
    rb = TensorDictReplayBuffer(
        storage=DatasetStorage(build_path),
        sampler=ANCHORED[name](),
        batch_size=16,
        generator=torch.Generator().manual_seed(3),
    )
    sampled = rb.sample(64)
    ds = rb.as_map_dataset()
    for j in range(64):  # every sampled row is the dataset's item at its anchor, key by key
        i = int(sampled["index"][j])
        _same(ds[i], sampled[j])
    batches = list(ds.dataloader(batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(0)))
    assert sorted(torch.cat([b["index"] for b in batches]).tolist()) == list(range(len(ds)))
    for batch in batches[:-1]:  # same keys and per-row shapes as rb.sample()
        assert set(batch.keys(True, True)) == set(sampled.keys(True, True))
        for key in sampled.keys(True, True):
            assert batch.get(key).shape[1:] == sampled.get(key).shape[1:], key
    if name.startswith("window"):  # the pad flags come along
        assert "observation_is_pad" in batches[0].keys() and batches[0]["observation_is_pad"].any()


@pytest.mark.parametrize("name", sorted(ANCHORED))
def test_iterable_view_gives_the_samplers_batches(build_path, name):
    """The iterable view samples with the buffer's own sampler: the batches rb.sample() gives, seed for seed."""
    rb = TensorDictReplayBuffer(storage=DatasetStorage(build_path), sampler=ANCHORED[name](), batch_size=16)
    batches = list(rb.as_iterable_dataset(num_batches=2, seed=4).dataloader())
    again = list(rb.as_iterable_dataset(num_batches=2, seed=4).dataloader())
    sampled = rb.sample(16)
    for batch, same in zip(batches, again, strict=True):
        _same(batch, same)
        assert set(batch.keys(True, True)) == set(sampled.keys(True, True))
        for key in sampled.keys(True, True):
            assert batch.get(key).shape == sampled.get(key).shape, key


def test_map_dataset_draws_goals_per_anchor(build_path):
    """Goals of item i are drawn for anchor i (from the worker's generator): valid goals of its episode,
    the same with the same seed, other goals with another seed."""
    sampler = GoalSampler(0.2, 0.5, 0.3, actor={"future": "uniform"}, subgoal_steps=4)
    rb = TensorDictReplayBuffer(storage=DatasetStorage(build_path), sampler=sampler, batch_size=8)
    sampled = rb.sample(8)

    def goals(seed, workers=0):
        ds = rb.as_map_dataset(seed=seed)
        loader = ds.dataloader(batch_size=20, num_workers=workers)
        return torch.cat([b["goal", "observation"] for b in loader]), next(iter(loader))

    a, first = goals(1)
    b, _ = goals(1)
    assert torch.equal(a, b) and not torch.equal(a, goals(2)[0])
    # worker processes: each draws with its own generator (seed, worker id), the same again with the same seed
    w1, w2 = goals(1, workers=2)[0], goals(1, workers=2)[0]
    assert torch.equal(w1, w2) and w1.shape == a.shape
    assert set(first.keys(True, True)) == set(sampled.keys(True, True))
    # a future or current goal is a state of the anchor's own episode, distance steps ahead
    in_episode = first["goal", "in_episode"]
    want = (first["observation"] + 100 * first["goal", "distance"][:, None])[in_episode]
    assert torch.equal(first["goal", "observation"][in_episode], want)
    assert torch.equal(first["index"], torch.arange(20))


@pytest.mark.parametrize(
    "sampler, name",
    [
        (lambda: SliceSampler(slice_len=4), "SliceSampler"),
        (lambda: PrioritizedSampler(1000, alpha=0.7, beta=0.5), "PrioritizedSampler"),
        (lambda: FullStackSampler(3), "FullStackSampler"),
        (lambda: WindowSampler(range(4), pad=False), "pad=False"),
        (lambda: GoalSampler(sampler=SliceSampler(slice_len=4)), "SliceSampler"),
    ],
)
def test_map_dataset_refuses_samplers_without_an_item_at_a_row(build_path, sampler, name):
    rb = TensorDictReplayBuffer(storage=DatasetStorage(build_path), sampler=sampler(), batch_size=8)
    with pytest.raises(InvalidParameter, match=name):
        rb.as_map_dataset()
    rows = rb.as_map_dataset(view="rows")  # the stored rows, whatever the sampler
    _same(rows[5].exclude("index"), rb.storage.get(5))


def test_map_dataset_with_workers_visits_every_row_once(rb):
    loader = BufferDataset(rb).dataloader(
        batch_size=16, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(1)
    )
    seen = []
    for batch in loader:
        _check_rows(batch, rb.storage)
        seen.append(batch["index"])
    assert sorted(torch.cat(seen).tolist()) == list(range(sum(LENGTHS)))


def test_collate_leaves_tensordicts_alone(rb):
    batch = rb[torch.arange(4)]
    assert tensordict_collate(batch) is batch
    stacked = tensordict_collate([rb[0], rb[1]])
    assert stacked.batch_size == torch.Size([2])
    assert tensordict_collate([1, 2]).tolist() == [1, 2]


# -- iterable -------------------------------------------------------------------------------------


def _collect(loader):
    return [batch["index"].clone() for batch in loader]


def test_iterable_workers_are_seeded_distinctly_and_reproducibly(rb):
    ds = SampledBatches(rb, batch_size=8, num_batches=10)
    first = _collect(ds.dataloader(num_workers=2, generator=torch.Generator().manual_seed(7)))
    assert len(first) == 10
    # no two batches alike: workers that shared a seed would yield identical pairs of batches
    assert len({tuple(b.tolist()) for b in first}) == 10
    again = _collect(ds.dataloader(num_workers=2, generator=torch.Generator().manual_seed(7)))
    assert [b.tolist() for b in again] == [b.tolist() for b in first]
    other = _collect(ds.dataloader(num_workers=2, generator=torch.Generator().manual_seed(8)))
    assert [b.tolist() for b in other] != [b.tolist() for b in first]
    # the parent's sampler generator is untouched by the workers
    assert rb.sampler.generator is None


def test_iterable_batches_are_correct_and_pin_memory_works(rb):
    ds = SampledBatches(rb, batch_size=6, num_batches=4, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no accelerator is found" on a CPU-only machine
        batches = list(ds.dataloader(num_workers=2, pin_memory=True))
    assert len(batches) == 4
    for batch in batches:
        assert batch.batch_size == torch.Size([6])
        _check_rows(batch, rb.storage)


def test_iterable_in_the_main_process_and_with_slices(rb):
    torch.manual_seed(0)
    a = _collect(SampledBatches(rb, num_batches=3).dataloader())
    torch.manual_seed(0)
    b = _collect(SampledBatches(rb, num_batches=3).dataloader())
    assert [x.tolist() for x in a] == [x.tolist() for x in b] and len(a) == 3
    slices = TensorDictReplayBuffer(storage=rb.storage, sampler=SliceSampler(slice_len=4), batch_size=12)
    for batch in SampledBatches(slices, num_batches=3, seed=0).dataloader(num_workers=2):
        episodes = batch["episode"].reshape(3, 4)
        steps = batch["step"].reshape(3, 4)
        assert (episodes == episodes[:, :1]).all()
        assert (steps[:, 1:] - steps[:, :-1] == 1).all()


def test_simulated_ranks_draw_different_batches(rb):
    per_rank = []
    for rank in range(4):
        ds = SampledBatches(rb, batch_size=8, num_batches=5, seed=11, rank=rank, world_size=4)
        per_rank.append([b["index"].tolist() for b in ds.dataloader()])
    flat = [tuple(b) for batches in per_rank for b in batches]
    assert len(set(flat)) == len(flat) == 20
    again = SampledBatches(rb, batch_size=8, num_batches=5, seed=11, rank=2, world_size=4)
    assert [b["index"].tolist() for b in again.dataloader()] == per_rank[2]
    again.set_epoch(1)
    assert [b["index"].tolist() for b in again.dataloader()] != per_rank[2]


def test_bad_arguments_teach(rb, monkeypatch):
    with pytest.raises(InvalidParameter, match="batch_size"):
        SampledBatches(TensorDictReplayBuffer(storage=rb.storage))
    with pytest.raises(InvalidParameter, match="rank"):
        SampledBatches(rb, rank=4, world_size=4)
    with pytest.raises(TypeError, match="path of a dataset build"):
        BufferDataset(42)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert resolve_rank() == (1, 3)
    assert resolve_rank(0, 2) == (0, 2)


# -- DDP: episodes dealt to ranks -----------------------------------------------------------------


@pytest.mark.parametrize("world_size", [1, 3, 4])
def test_episode_shards_are_disjoint_cover_everything_and_equal_in_length(rb, world_size):
    samplers = [EpisodeShardSampler(rb, rank=r, world_size=world_size, seed=5) for r in range(world_size)]
    owned = samplers[0].assignment()
    assert sorted(torch.cat(owned).tolist()) == list(range(len(LENGTHS)))  # disjoint and complete
    lengths = torch.tensor(LENGTHS)
    sizes = [int(lengths[o].sum()) for o in owned]
    assert max(sizes) - min(sizes) <= max(LENGTHS)
    assert len({len(s) for s in samplers}) == 1 and len(samplers[0]) == max(sizes)
    episode_of_row = rb.storage.read_key("episode")
    for rank, sampler in enumerate(samplers):
        rows = list(sampler)
        assert len(rows) == len(sampler)
        assert set(episode_of_row[rows].tolist()) == set(owned[rank].tolist())  # only its own episodes
        assert set(rows) == set(sampler.rows().tolist())  # and all of their rows
    truncated = EpisodeShardSampler(rb, rank=0, world_size=world_size, seed=5, drop_last=True)
    assert len(truncated) == min(sizes) == len(list(truncated))


def test_episode_shards_reshuffle_per_epoch_and_feed_a_dataloader(rb):
    sampler = EpisodeShardSampler(rb, rank=1, world_size=2, seed=0)
    first = [o.tolist() for o in sampler.assignment()]
    sampler.set_epoch(1)
    assert [o.tolist() for o in sampler.assignment()] != first
    loader = BufferDataset(rb).dataloader(batch_size=9, sampler=sampler)
    rows = torch.cat([b["index"] for b in loader])
    assert set(rb.storage.read_key("episode")[rows].tolist()) == set(sampler.assignment()[1].tolist())
    with pytest.raises(InvalidParameter, match="episodes"):
        EpisodeShardSampler(rb, rank=0, world_size=len(LENGTHS) + 1)


def test_map_dataset_works_with_torch_distributed_sampler(rb):
    n = sum(LENGTHS)
    seen = []
    for rank in range(2):
        sampler = DistributedSampler(BufferDataset(rb), num_replicas=2, rank=rank, seed=0)
        seen.append(torch.cat([b["index"] for b in BufferDataset(rb).dataloader(batch_size=10, sampler=sampler)]))
    assert set(seen[0].tolist()) | set(seen[1].tolist()) == set(range(n))


# -- pickling: builds travel by reference ---------------------------------------------------------


def test_pickling_a_dataset_does_not_copy_the_build(rb, build_path):
    data_bytes = sum(f.stat().st_size for f in (build_path / "data").rglob("*.memmap"))
    assert data_bytes > 100_000
    assert len(pickle.dumps(rb)) < 20_000  # DatasetStorage itself pickles by reference
    for ds in (BufferDataset(rb), SampledBatches(rb, num_batches=2, seed=0)):
        blob = pickle.dumps(ds)
        assert len(blob) < 20_000
        copy = pickle.loads(blob)
        assert copy.buffer.storage.path == build_path
    ds = pickle.loads(pickle.dumps(BufferDataset(rb)))
    _same(ds[torch.arange(5)], BufferDataset(rb)[torch.arange(5)])
    # one open build per process, however many references arrive
    assert loads_by_reference(dumps_by_reference(rb.storage)) is loads_by_reference(dumps_by_reference(rb.storage))


def test_spawned_workers_reopen_the_build(rb):
    ds = BufferDataset(rb)
    loader = ds.dataloader(batch_size=32, num_workers=1, multiprocessing_context="spawn")
    rows = []
    for batch in loader:
        _check_rows(batch, rb.storage)
        rows.append(batch["index"])
    assert torch.cat(rows).tolist() == list(range(sum(LENGTHS)))


def test_an_ensemble_iterates_with_private_seeded_members(rb):
    from datasets_hub.buffers.ensemble import ReplayBufferEnsemble

    ensemble = ReplayBufferEnsemble(
        rb, TensorDictReplayBuffer(storage=rb.storage, sampler=SliceSampler(slice_len=2)), batch_size=8
    )
    batches = list(
        SampledBatches(ensemble, num_batches=6).dataloader(num_workers=2, generator=torch.Generator().manual_seed(0))
    )
    assert len(batches) == 6 and batches[0].batch_size == torch.Size([2, 4])
    assert len({tuple(b["index", "index"].reshape(-1).tolist()) for b in batches}) == 6
    with pytest.raises(TypeError, match="SampledBatches"):
        BufferDataset(ensemble)


def test_a_reference_to_a_replaced_build_is_refused(rb, build_path):
    from datasets_hub.errors import CacheError
    from datasets_hub.interop.torch_data import open_build

    assert open_build(build_path, rb.storage.manifest["fingerprint"]).path == build_path
    with pytest.raises(CacheError, match="rebuilt or replaced"):
        open_build(build_path, "0" * 16)


def test_buffer_convenience_methods(rb):
    ds = rb.as_map_dataset()
    assert isinstance(ds, BufferDataset) and len(ds) == len(rb)
    batches = rb.as_iterable_dataset(num_batches=2, seed=0)
    assert isinstance(batches, SampledBatches) and batches.batch_size == rb.batch_size == 8
    assert [b.batch_size[0] for b in batches.dataloader()] == [8, 8]
