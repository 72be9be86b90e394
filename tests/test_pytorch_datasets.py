"""TorchRL 0.15's ``as_dataset()``: the map-style storage view and the iterable buffer view (issue 33, item 4)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader

from datasets_hub.buffers.device.samplers import DevicePrioritizedSampler, DeviceSamplerWithoutReplacement
from datasets_hub.buffers.ensemble_parts import SamplerEnsemble
from datasets_hub.buffers.memmap_storage import LazyMemmapStorage
from datasets_hub.buffers.pytorch_datasets import ReplayBufferDataset, StorageDataset, tensordict_collate
from datasets_hub.buffers.replay_buffers import ReplayBuffer, TensorDictReplayBuffer
from datasets_hub.buffers.samplers import PrioritizedSampler, WindowSampler
from datasets_hub.buffers.samplers.prompt_group import PromptGroupSampler
from datasets_hub.buffers.samplers.random import RandomSampler, SamplerWithoutReplacement
from datasets_hub.buffers.samplers.slice import SliceSampler, SliceSamplerWithoutReplacement
from datasets_hub.buffers.samplers.staleness import StalenessAwareSampler
from datasets_hub.buffers.storages import ListStorage
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.build.pipeline import build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import InvalidArgument
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader

LENGTHS = [7, 3, 12, 5, 9, 1, 4, 15]  # 56 transitions


def _rb(n=40, capacity=None, **kwargs):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity or n), **kwargs)
    rb.extend(TensorDict({"obs": torch.arange(n) * 10, "episode": torch.arange(n) // 5}, [n]))
    return rb


@pytest.fixture
def build_rb():
    spec = DatasetSpec(id="fake/as-dataset", loader="fake", params={"lengths": LENGTHS})
    path = build(spec, FakeLoader(), {}, [])
    return TensorDictReplayBuffer(storage=DatasetStorage(path), batch_size=8)


def _obs(batches):
    return [b["obs"].tolist() for b in batches]


# -- map-style: rb.storage.as_dataset() / rb.as_dataset(map_style=True) ---------------------------------


def test_an_index_is_the_storage_slot_not_the_write_order():
    rb = _rb(15, capacity=10)  # wrapped: slot 0 holds the 11th write
    ds = rb.as_dataset(map_style=True)
    assert isinstance(ds, StorageDataset) and len(ds) == 10
    assert ds[0]["obs"].item() == 100 and ds[9]["obs"].item() == 90 and ds[-1]["obs"].item() == 90
    assert ds.__getitems__([4, 5, 6])["obs"].tolist() == [140, 50, 60]
    assert rb.storage.as_dataset()[0]["obs"].item() == 100  # TorchRL's spelling, the same view
    with pytest.raises(IndexError):
        ds[10]
    with pytest.raises(IndexError):
        ds.__getitems__([3, -11])
    with pytest.raises(TypeError, match="integers"):
        ds.__getitems__(torch.tensor([0.0, 1.0]))


def test_items_are_read_as_stored_without_transforms():
    rb = _rb(10, batch_size=4)
    rb.append_transform(lambda td: td.set("obs", td["obs"] + 1))
    assert rb.sample()["obs"].remainder(10).eq(1).all()  # samples see the transform
    assert rb.as_dataset(map_style=True).__getitems__([2, 3])["obs"].tolist() == [20, 30]


def test_a_multidimensional_storage_is_read_flat_time_major():
    rb = ReplayBuffer(storage=LazyTensorStorage(60, ndim=2), batch_size=4)
    data = TensorDict({"obs": torch.arange(3 * 20).reshape(3, 20)}, [3, 20])  # [envs, time]
    rb.extend(data)
    ds = rb.as_dataset(map_style=True)
    assert len(ds) == 60
    got = ds.__getitems__(torch.arange(60))["obs"]
    t, e = torch.arange(60) // 3, torch.arange(60) % 3
    assert got.tolist() == data["obs"][e, t].tolist()


def test_a_dataloader_epoch_visits_every_entry_once_with_workers(tmp_path):
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(50, scratch_dir=tmp_path / "mm"))
    rb.extend(TensorDict({"obs": torch.arange(50) * 3}, [50]))
    loader = DataLoader(
        rb.as_dataset(map_style=True), batch_size=7, shuffle=True, num_workers=2, collate_fn=tensordict_collate
    )
    batches = list(loader)
    assert all(isinstance(b, TensorDict) for b in batches) and len(batches) == 8
    assert sorted(torch.cat([b["obs"] for b in batches]).tolist()) == list(range(0, 150, 3))


def test_persistent_workers_see_rows_written_after_they_started():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20))
    rb.extend(TensorDict({"obs": torch.zeros(20, dtype=torch.int64)}, [20]))
    loader = DataLoader(
        rb.as_dataset(map_style=True),
        batch_size=5,
        num_workers=1,
        persistent_workers=True,
        collate_fn=tensordict_collate,
        multiprocessing_context="fork",
    )
    assert torch.cat([b["obs"] for b in loader]).eq(0).all()
    rb.extend(TensorDict({"obs": torch.arange(1, 21)}, [20]))  # overwrites every slot
    assert torch.cat([b["obs"] for b in loader]).tolist() == list(range(1, 21))


def test_a_hub_build_reaches_spawned_workers_by_reference(build_rb):
    ds = build_rb.as_dataset(map_style=True)
    loader = DataLoader(
        ds, batch_size=16, num_workers=1, multiprocessing_context="spawn", collate_fn=tensordict_collate
    )
    batches = list(loader)
    whole = build_rb.storage.get(torch.arange(sum(LENGTHS)))
    got = torch.cat([b["observation"] for b in batches])
    assert torch.equal(got, whole["observation"])
    assert torch.equal(torch.cat([b["next", "observation"] for b in batches]), whole["next", "observation"])


def test_a_list_storage_item_and_batch():
    rb = ReplayBuffer(storage=ListStorage(5))
    rb.extend([TensorDict({"a": torch.tensor(i)}, []) for i in range(5)])
    ds = rb.as_dataset(map_style=True)
    assert ds[3]["a"].item() == 3
    assert tensordict_collate(ds.__getitems__([1, 4]))["a"].tolist() == [1, 4]


# -- iterable: rb.as_dataset() ------------------------------------------------------------------------


def test_in_the_main_process_it_iterates_the_buffer_itself():
    a = _rb(40, batch_size=4, generator=torch.Generator().manual_seed(3))
    b = _rb(40, batch_size=4, generator=torch.Generator().manual_seed(3))
    ds = a.as_dataset(num_batches=3)
    assert isinstance(ds, ReplayBufferDataset)
    assert _obs(DataLoader(ds, batch_size=None, collate_fn=tensordict_collate)) == _obs(b.sample() for _ in range(3))
    assert a.sample()["obs"].tolist() == b.sample()["obs"].tolist()  # the buffer's generator advanced


def test_without_num_batches_an_iteration_is_one_epoch_of_an_epoch_sampler():
    rb = _rb(23, batch_size=5, sampler=SamplerWithoutReplacement())
    epochs = [torch.cat([b["obs"] for b in rb.as_dataset()]) for _ in range(2)]
    for seen in epochs:
        assert sorted(seen.tolist()) == list(range(0, 230, 10))


def test_batches_carry_the_transforms():
    rb = _rb(10, batch_size=4)
    rb.append_transform(lambda td: td.set("obs", td["obs"] + 1))
    assert all(b["obs"].remainder(10).eq(1).all() for b in rb.as_dataset(num_batches=2))


@pytest.mark.parametrize("seeded_buffer", [True, False])
def test_workers_split_num_batches_and_a_seeded_loader_repeats_them(seeded_buffer):
    gen = torch.Generator().manual_seed(0) if seeded_buffer else None
    rb = _rb(200, batch_size=6, generator=gen)

    def run(seed):
        loader = DataLoader(
            rb.as_dataset(num_batches=5),
            batch_size=None,
            num_workers=2,
            collate_fn=tensordict_collate,
            generator=torch.Generator().manual_seed(seed),
        )
        return _obs(loader)

    first = run(1)
    assert len(first) == 5  # workers 0, 1 yield 3 and 2 batches, interleaved
    assert first == run(1)
    assert first != run(2)
    worker0, worker1 = first[0::2], first[1::2]
    assert worker0[:2] != worker1  # each worker draws its own stream


def test_slice_samplers_work_in_workers():
    rb = _rb(100, batch_size=12, sampler=SliceSampler(slice_len=4, traj_key="episode"))
    for batch in DataLoader(
        rb.as_dataset(num_batches=4), batch_size=None, num_workers=2, collate_fn=tensordict_collate
    ):
        obs = batch["obs"].reshape(3, 4)
        assert (obs[:, 1:] - obs[:, :-1] == 10).all() and (obs // 50 == obs[:, :1] // 50).all()


@pytest.mark.parametrize(
    "sampler", [SamplerWithoutReplacement(), PrioritizedSampler(40, 0.7, 0.5)], ids=["epochs", "priorities"]
)
def test_a_sampler_with_shared_state_is_refused_in_workers(sampler):
    rb = _rb(40, batch_size=4, sampler=sampler)
    assert len(list(rb.as_dataset(num_batches=2))) == 2  # fine in the main process
    loader = DataLoader(rb.as_dataset(num_batches=2), batch_size=None, num_workers=1, collate_fn=tensordict_collate)
    with pytest.raises(RuntimeError, match="cannot share"):
        list(loader)


def test_a_prefetching_buffer_feeds_forked_workers():
    rb = _rb(60, batch_size=4, prefetch=3, generator=torch.Generator().manual_seed(0))
    rb.sample()  # batches now in flight in this process's threads
    loader = DataLoader(
        rb.as_dataset(num_batches=4),
        batch_size=None,
        num_workers=2,
        collate_fn=tensordict_collate,
        multiprocessing_context="fork",
        timeout=60,
    )
    batches = list(loader)
    assert len(batches) == 4 and all(b["obs"].shape == (4,) for b in batches)


def test_bad_arguments_are_refused_before_anything_runs():
    with pytest.raises(InvalidArgument, match="batch_size"):
        _rb(10).as_dataset()
    rb = _rb(10, batch_size=2)
    with pytest.raises(InvalidArgument, match="num_batches"):
        rb.as_dataset(num_batches=-1)
    with pytest.raises(InvalidArgument, match="num_batches"):
        rb.as_dataset(num_batches=2.5)
    with pytest.raises(InvalidArgument, match="map-style"):
        rb.as_dataset(num_batches=3, map_style=True)
    with pytest.raises(TypeError, match="storage"):
        StorageDataset([1, 2, 3])


def test_which_samplers_require_shared_state():
    stateful = [
        SamplerWithoutReplacement(),
        SliceSamplerWithoutReplacement(slice_len=2),
        PrioritizedSampler(10, 0.7, 0.5),
        DeviceSamplerWithoutReplacement(),
        DevicePrioritizedSampler(10, 0.7, 0.5),
        WindowSampler([-1, 0], sampler=SamplerWithoutReplacement()),
        SamplerEnsemble(RandomSampler(), SamplerWithoutReplacement()),
        StalenessAwareSampler(),
        PromptGroupSampler(num_groups=2),
    ]
    stateless = [RandomSampler(), SliceSampler(slice_len=2), WindowSampler([-1, 0]), SamplerEnsemble(RandomSampler())]
    assert all(s.requires_shared_state for s in stateful)
    assert not any(s.requires_shared_state for s in stateless)


def test_a_fork_never_takes_its_parents_prefetched_batches():
    rb = _rb(60, batch_size=4, prefetch=2, generator=torch.Generator().manual_seed(0))
    rb.sample()  # two batches in flight
    child = rb.fork(torch.Generator().manual_seed(5))  # keeps prefetch=2, with its own queue
    twin = _rb(60, batch_size=4, generator=torch.Generator().manual_seed(5))
    assert _obs(child.sample() for _ in range(3)) == _obs(twin.sample() for _ in range(3))
    quiet = rb.fork(torch.Generator().manual_seed(5), prefetch=0)
    assert quiet.prefetch == 0 and rb.prefetch == 2
    assert (
        quiet.sample()["obs"].tolist()
        == _rb(60, batch_size=4, generator=torch.Generator().manual_seed(5)).sample()["obs"].tolist()
    )


# -- an ensemble's iterable view ---------------------------------------------------------------------------


def _ensemble(member_sampler=None, seeded=True):
    from datasets_hub.buffers.ensemble import ReplayBufferEnsemble

    def generator(seed):
        return torch.Generator().manual_seed(seed) if seeded else None

    small = _rb(20, generator=generator(1))  # obs 0..190
    large = TensorDictReplayBuffer(storage=LazyTensorStorage(30), generator=generator(2), sampler=member_sampler)
    large.extend(TensorDict({"obs": 1000 + torch.arange(30) * 10, "episode": torch.arange(30) // 5}, [30]))
    return ReplayBufferEnsemble(small, large, batch_size=8, generator=generator(3))


@pytest.mark.parametrize("seeded", [True, False])
def test_an_ensemble_feeds_workers_each_with_its_own_streams(seeded):
    ensemble = _ensemble(seeded=seeded)

    def run(seed):
        loader = DataLoader(
            ensemble.as_dataset(num_batches=6),
            batch_size=None,
            num_workers=2,
            collate_fn=tensordict_collate,
            generator=torch.Generator().manual_seed(seed),
        )
        return [b["obs"].reshape(-1).tolist() for b in loader]

    first = run(1)
    assert len(first) == 6 and first == run(1) and first != run(2)
    drawn = {o for obs in first for o in obs}
    assert drawn <= {10 * i for i in range(20)} | {1000 + 10 * i for i in range(30)}
    assert min(drawn) < 1000 <= max(drawn)  # both members are drawn from
    worker0, worker1 = first[0::2], first[1::2]
    assert worker0 != worker1  # the two workers draw different streams
    # in the main process it iterates the ensemble itself
    assert len(list(ensemble.as_dataset(num_batches=3))) == 3


def test_an_ensemble_member_with_shared_sampler_state_is_refused_in_workers():
    ensemble = _ensemble(member_sampler=SamplerWithoutReplacement())
    loader = DataLoader(
        ensemble.as_dataset(num_batches=2), batch_size=None, num_workers=1, collate_fn=tensordict_collate
    )
    with pytest.raises(RuntimeError, match="cannot share"):
        list(loader)
