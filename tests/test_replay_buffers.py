"""ReplayBuffer / TensorDictReplayBuffer: TorchRL's documented behaviours, on rows that identify themselves."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
import torch.multiprocessing as mp
from tensordict import TensorDict

from datasets_hub.buffers.memmap_storage import LazyMemmapStorage
from datasets_hub.buffers.replay_buffers import ReplayBuffer, TensorDictReplayBuffer
from datasets_hub.buffers.samplers import PrioritizedSampler, RandomSampler, Sampler, SamplerWithoutReplacement
from datasets_hub.buffers.storages import ListStorage
from datasets_hub.buffers.tensor_storages import LazyTensorStorage, TensorStorage
from datasets_hub.buffers.transforms import Compose
from datasets_hub.buffers.writers import ImmutableDatasetWriter, RoundRobinWriter


def rows(n: int, start: int = 0) -> TensorDict:
    """Row r has obs == r and ("next", "obs") == r + 1000, so a sample tells which row it is."""
    r = torch.arange(start, start + n)
    return TensorDict({"obs": r.float(), "next": {"obs": r.float() + 1000, "done": (r % 5 == 4)[:, None]}}, [n])


def sampler_without_replacement(**kw):
    from datasets_hub.buffers.samplers import SamplerWithoutReplacement

    return SamplerWithoutReplacement(**kw)


STORAGES = [
    pytest.param(lambda tmp: ListStorage(100), id="list"),
    pytest.param(lambda tmp: LazyTensorStorage(100), id="lazy"),
    pytest.param(lambda tmp: LazyMemmapStorage(100, scratch_dir=tmp / "mm"), id="memmap"),
]


# -- TorchRL tutorial basics ---------------------------------------------------------------------


def test_default_buffer_is_a_list_storage_of_1000():
    rb = ReplayBuffer()
    assert isinstance(rb.storage, ListStorage) and isinstance(rb.sampler, RandomSampler)
    assert isinstance(rb.writer, RoundRobinWriter)
    rb.extend(range(2000))
    assert len(rb) == 1000 and rb.write_count == 2000
    sample = rb.sample(64)
    assert isinstance(sample, torch.Tensor) and sample.shape == (64,)
    assert (sample >= 1000).all()  # the first 1000 items were overwritten


def test_extend_returns_indices_and_wraps():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    assert rb.extend(rows(6)).tolist() == [0, 1, 2, 3, 4, 5]
    assert rb.extend(rows(6, start=6)).tolist() == [6, 7, 8, 9, 0, 1]
    assert rb.add(rows(1, start=12)[0]) == 2
    assert len(rb) == 10 and rb.write_count == 13
    assert rb[:]["obs"].tolist() == [10, 11, 12, 3, 4, 5, 6, 7, 8, 9]
    # more items than the capacity: only the last 10 are kept
    idx = rb.extend(rows(25, start=100))
    assert sorted(rb[:]["obs"].tolist()) == list(range(115, 125)) and idx.numel() == 10


@pytest.mark.parametrize("make", STORAGES)
def test_tensordict_samples_carry_index(make, tmp_path):
    rb = TensorDictReplayBuffer(storage=make(tmp_path), batch_size=16)
    rb.extend(rows(50))
    s = rb.sample()
    assert s.batch_size == (16,)
    assert (s["obs"] == s["index"].float()).all()
    assert (s["next", "obs"] == s["index"].float() + 1000).all()
    data, info = rb.sample(8, return_info=True)
    assert (info["index"] == data["index"]).all() and data.batch_size == (8,)


def test_sampler_info_entries_are_written_into_tensordict_samples():
    class Tagging(Sampler):
        def sample(self, storage, batch_size):
            index = torch.arange(batch_size)
            trunc = torch.zeros(batch_size, 1, dtype=torch.bool)
            trunc[-1] = True
            return index, {
                "_weight": torch.full((batch_size,), 0.5),
                ("next", "truncated"): trunc,
                "not_per_item": torch.ones(3),
            }

    for storage in (LazyTensorStorage(20), ListStorage(20)):
        rb = TensorDictReplayBuffer(storage=storage, sampler=Tagging())
        rb.extend(rows(10))
        s = rb.sample(4)
        assert s["_weight"].tolist() == [0.5] * 4
        assert s["next", "truncated"].flatten().tolist() == [False, False, False, True]
        assert "not_per_item" not in s.keys()
        assert s["next", "obs"].tolist() == [1000.0, 1001.0, 1002.0, 1003.0]


def test_written_samples_drop_bookkeeping_and_extend_sets_index():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20))
    data = rows(5)
    rb.extend(data)
    assert data["index"].tolist() == [0, 1, 2, 3, 4]  # as TorchRL does
    other = TensorDictReplayBuffer(storage=LazyTensorStorage(20))
    other.extend(rb.sample(3))  # a sample carries "index": it is not part of the schema
    other.extend(rows(2))
    assert len(other) == 5


def test_getitem_setitem_and_columns():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(rows(6))
    assert rb[2]["obs"] == 2.0
    assert rb[-1]["obs"] == 5.0
    assert rb[1:3]["obs"].tolist() == [1.0, 2.0]
    assert rb[torch.tensor([4, 0])]["obs"].tolist() == [4.0, 0.0]
    assert rb["obs"].tolist() == [0, 1, 2, 3, 4, 5]
    assert rb["next", "obs"][0] == 1000.0
    with pytest.raises(IndexError):
        rb[6]
    with pytest.raises(IndexError):
        rb[torch.tensor([1, 7])]
    rb[:] = rows(6, start=50)
    assert rb["obs"].tolist() == [50, 51, 52, 53, 54, 55] and len(rb) == 6
    rb[torch.tensor([0, 5])] = rows(2, start=90)
    assert rb["obs"].tolist() == [90, 51, 52, 53, 54, 91]
    empty = ReplayBuffer(storage=LazyTensorStorage(10))
    empty[:] = rows(4)  # fills an empty buffer
    assert len(empty) == 4 and empty.write_count == 4


def test_list_storage_items_and_collation():
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.add("first")
    rb.extend([{"a": 1}, {"a": 2}])
    assert rb[0] == "first" and rb[2] == {"a": 2}
    rb2 = ReplayBuffer(storage=ListStorage(10), batch_size=3)
    rb2.extend([torch.full((2,), float(i)) for i in range(5)])
    assert rb2.sample().shape == (3, 2)
    rb3 = ReplayBuffer(storage=ListStorage(10), collate_fn=lambda x: x)  # TorchRL's tuple recipe
    rb3.add((0, 1, 2))
    assert rb3.sample(2) == [(0, 1, 2), (0, 1, 2)]


def test_read_all_in_order_and_write_all_after_wrap():
    rb = ReplayBuffer(storage=LazyTensorStorage(5))
    rb.extend(torch.arange(7))  # storage holds [5, 6, 2, 3, 4]
    assert rb.read_all_in_order().tolist() == [2, 3, 4, 5, 6]
    assert rb.read_all_in_order(end=3).tolist() == [2, 3, 4]
    rb.write_all(rb.read_all_in_order() * 10)
    assert rb.read_all_in_order().tolist() == [20, 30, 40, 50, 60]
    assert rb[:].tolist() == [50, 60, 20, 30, 40] and rb.write_count == 7
    rb.write_all(torch.tensor([-1, -2]), end=2)
    assert rb.read_all_in_order().tolist() == [-1, -2, 40, 50, 60]
    with pytest.raises(ValueError, match="read_all_in_order"):
        rb.write_all(torch.arange(3))
    fresh = ReplayBuffer(storage=LazyTensorStorage(5))
    fresh.write_all(torch.arange(10, 14))
    assert fresh.read_all_in_order().tolist() == [10, 11, 12, 13]


def test_read_all_in_order_is_a_view_when_contiguous(tmp_path):
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(100, scratch_dir=tmp_path / "mm"))
    rb.extend(rows(40))
    out = rb.read_all_in_order()
    assert out["obs"].data_ptr() == rb.storage._plain[0].data_ptr()
    assert out["obs"].tolist() == list(range(40))


def test_empty_resets_everything():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(12))
    rb.empty()
    assert len(rb) == 0 and rb.write_count == 0
    assert rb.extend(torch.arange(3)).tolist() == [0, 1, 2]
    with pytest.raises(RuntimeError, match="empty"):
        ReplayBuffer(storage=LazyTensorStorage(5)).sample(2)


# -- iteration --------------------------------------------------------------------------------------


def test_iteration_needs_a_batch_size_and_is_endless_with_random_sampling():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(10))
    with pytest.raises(RuntimeError, match="batch_size"):
        next(iter(rb))
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
    rb.extend(torch.arange(10))
    assert len(list(itertools.islice(rb, 7))) == 7


@pytest.mark.parametrize("prefetch", [0, 2])
def test_iterating_without_replacement_gives_four_batches_of_32(prefetch):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(128), batch_size=32, prefetch=prefetch, sampler=sampler_without_replacement()
    )
    rb.extend(rows(128))
    for _epoch in range(2):
        batches = list(rb)
        assert len(batches) == 4
        seen = torch.cat([b["obs"] for b in batches])
        assert sorted(seen.tolist()) == list(range(128))  # every item exactly once per epoch


# -- transforms -----------------------------------------------------------------------------------


def test_transforms_run_on_samples_and_inverses_on_writes():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=lambda x: x * 2)
    rb.extend(torch.arange(5))
    assert rb[:].tolist() == [0, 2, 4, 6, 8]
    assert set(rb.sample(20).tolist()) <= {0, 2, 4, 6, 8}
    rb.append_transform(lambda x: x + 1)
    assert rb[1].item() == 3  # (1 * 2) + 1: appended transforms run after
    rb.insert_transform(0, lambda x: x - 1)
    assert rb[1].item() == 1  # ((1 - 1) * 2) + 1
    rb.append_transform(lambda x: x * 100, invert=True)  # runs on writes only
    rb.extend(torch.tensor([7]))
    assert rb.storage[5].item() == 700 and rb[5].item() == (699 * 2) + 1
    assert len(rb.transform) == 4 and isinstance(rb.transform, Compose)


def test_compose_transform_on_tensordict_buffer():
    from datasets_hub.buffers.transforms import Exclude, Rename

    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10), transform=Compose(Rename("obs", "observation"), Exclude(("next", "done")))
    )
    rb.extend(rows(4))
    s = rb.sample(3)
    assert "observation" in s.keys() and "obs" not in s.keys() and ("next", "done") not in s.keys(True)
    assert (s["observation"] == s["index"].float()).all()


# -- randomness -----------------------------------------------------------------------------------


def _draws(prefetch: int, seed: int, batches: int = 8, **kw) -> list[list[float]]:
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(1000),
        batch_size=16,
        prefetch=prefetch,
        generator=torch.Generator().manual_seed(seed),
        **kw,
    )
    rb.extend(rows(1000))
    torch.manual_seed(1234 + prefetch)  # the global RNG must not matter
    return [rb.sample()["obs"].tolist() for _ in range(batches)]


def test_generator_gives_the_same_batches_for_the_same_seed():
    assert _draws(0, 7) == _draws(0, 7)
    assert _draws(0, 7) != _draws(0, 8)
    rb = ReplayBuffer(storage=LazyTensorStorage(10), generator=torch.Generator().manual_seed(0))
    assert rb.sampler.generator is not None


def test_prefetch_is_deterministic_and_matches_no_prefetch():
    plain = _draws(0, 3, batches=12)
    assert _draws(3, 3, batches=12) == plain
    assert _draws(1, 3, batches=12) == plain


def test_prefetch_with_a_different_batch_size_stays_ordered():
    def run(prefetch):
        rb = ReplayBuffer(
            storage=LazyTensorStorage(500), batch_size=8, prefetch=prefetch, generator=torch.Generator().manual_seed(5)
        )
        rb.extend(torch.arange(500))
        return [rb.sample().tolist(), rb.sample(3).tolist(), rb.sample().tolist(), rb.sample(5).tolist()]

    got = run(2)
    assert [len(b) for b in got] == [8, 3, 8, 5]
    assert got == run(2)


# -- writers --------------------------------------------------------------------------------------


def test_immutable_dataset_writer_refuses_every_write():
    rb = TensorDictReplayBuffer(storage=TensorStorage(rows(10)), writer=ImmutableDatasetWriter())
    assert len(rb) == 10 and rb.sample(4).batch_size == (4,)
    for write in (
        lambda: rb.add(rows(1)[0]),
        lambda: rb.extend(rows(2)),
        lambda: rb.__setitem__(0, rows(1)[0]),
        rb.empty,
        lambda: rb.write_all(rows(10)),
    ):
        with pytest.raises(RuntimeError, match="read-only dataset") as err:
            write()
        assert "LazyMemmapStorage" in str(err.value) and "rb[:]" in str(err.value)
    # the recipe in the message works
    copy = TensorDictReplayBuffer(storage=LazyMemmapStorage(len(rb)))
    copy.extend(rb[:])
    copy.add(rows(1, start=77)[0])
    assert copy[0]["obs"] == 77.0


def test_read_only_storage_gets_an_immutable_writer_by_default():
    storage = TensorStorage(rows(5))
    storage.read_only = True
    rb = ReplayBuffer(storage=storage)
    assert isinstance(rb.writer, ImmutableDatasetWriter)


def test_schema_mismatch_surfaces_through_the_buffer():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(rows(3))
    with pytest.raises(ValueError, match=r"'obs'.*\(2,\)"):
        rb.extend(TensorDict({"obs": torch.zeros(3, 2), "next": rows(3)["next"]}, [3]))
    with pytest.raises(ValueError, match=r"add\(\)"):
        rb.extend(rows(1)[0])


def test_pytree_data_through_the_buffer():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4, generator=torch.Generator().manual_seed(0))
    rb.extend({"obs": torch.arange(6.0), "pair": (torch.arange(6) * 2, torch.arange(6) * 3)})
    s = rb.sample()
    assert (s["pair"][0] == 2 * s["obs"].long()).all() and (s["pair"][1] == 3 * s["obs"].long()).all()
    rb.extend([{"obs": torch.tensor(6.0), "pair": (torch.tensor(12), torch.tensor(18))}])
    assert len(rb) == 7 and rb[6]["pair"][1] == 18


# -- state ----------------------------------------------------------------------------------------

STORAGE_KINDS = ["list", "tensor", "lazy", "memmap"]


def _buffer(kind: str, tmp_path, seed: int = 0) -> TensorDictReplayBuffer:
    storage = {
        "list": lambda: ListStorage(30),
        "tensor": lambda: TensorStorage(rows(30, start=500)),
        "lazy": lambda: LazyTensorStorage(30),
        "memmap": lambda: LazyMemmapStorage(30, scratch_dir=tmp_path / f"mm{seed}"),
    }[kind]()
    return TensorDictReplayBuffer(storage=storage, batch_size=6, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", STORAGE_KINDS)
def test_dumps_loads_restores_storage_sampler_writer_and_cursor(kind, tmp_path):
    rb = _buffer(kind, tmp_path, seed=0)
    rb.extend(rows(40))  # wraps: cursor at 10 (or past the pre-filled rows)
    rb.sample()
    rb.dumps(tmp_path / "dump")
    meta = json.loads((tmp_path / "dump" / "buffer.json").read_text())
    assert meta["len"] == 30 and meta["write_count"] == 40
    expected = [rb.sample()["obs"].tolist() for _ in range(3)]
    expected_idx = rb.extend(rows(3, start=900)).tolist()

    other = _buffer(kind, tmp_path, seed=99)
    other.loads(tmp_path / "dump")
    assert len(other) == 30 and other.write_count == 40
    assert other.writer.state_dict() == {"_cursor": 10, "_write_count": 40}
    assert [other.sample()["obs"].tolist() for _ in range(3)] == expected  # generator state restored too
    assert other.extend(rows(3, start=900)).tolist() == expected_idx == [10, 11, 12]
    assert other["obs"].tolist() == rb["obs"].tolist()


def test_loads_refuses_a_different_sampler(tmp_path):
    rb = _buffer("lazy", tmp_path)
    rb.extend(rows(5))
    rb.dumps(tmp_path / "d")

    class Other(RandomSampler):
        pass

    with pytest.raises(ValueError, match="RandomSampler"):
        TensorDictReplayBuffer(storage=LazyTensorStorage(30), sampler=Other()).loads(tmp_path / "d")
    with pytest.raises(FileNotFoundError, match="dumps"):
        rb.loads(tmp_path / "nowhere")


def test_dumped_files_are_memmaps_json_and_weights_only_state(tmp_path):
    rb = _buffer("memmap", tmp_path)
    rb.extend(rows(5))
    rb.dumps(tmp_path / "d")
    names = {p.relative_to(tmp_path / "d").as_posix() for p in (tmp_path / "d").rglob("*") if p.is_file()}
    assert {"buffer.json", "writer.json", "sampler.pt", "generator.pt", "storage/storage.json"} <= names
    assert any(n.endswith("obs.memmap") for n in names)
    torch.load(tmp_path / "d" / "sampler.pt", weights_only=True)


def test_state_dict_round_trip():
    rb = ReplayBuffer(storage=LazyTensorStorage(8))
    rb.extend(torch.arange(11))
    other = ReplayBuffer(storage=LazyTensorStorage(8))
    other.load_state_dict(rb.state_dict())
    assert other[:].tolist() == rb[:].tolist() and other.write_count == 11
    assert other.extend(torch.tensor([99])).tolist() == [3]


# -- sharing across processes -----------------------------------------------------------------------


def _child_extend(buffers, start):
    for rb in buffers:
        rb.extend(rows(5, start=start))


def test_shared_memmap_buffer_extended_in_a_spawned_child(tmp_path):
    """One spawned child (spawning costs seconds) extends two shared buffers: one already allocated
    by the parent, one whose memmap files the child allocates itself."""
    allocated = TensorDictReplayBuffer(storage=LazyMemmapStorage(50, scratch_dir=tmp_path / "a"), shared=True)
    allocated.extend(rows(3))
    lazy = TensorDictReplayBuffer(storage=LazyMemmapStorage(50, scratch_dir=tmp_path / "b"), shared=True)
    in_ram = TensorDictReplayBuffer(storage=LazyTensorStorage(50))
    in_ram.extend(rows(3))  # RAM storages share once allocated
    in_ram.share()
    proc = mp.get_context("spawn").Process(target=_child_extend, args=([allocated, lazy, in_ram], 100))
    proc.start()
    proc.join(120)
    assert proc.exitcode == 0
    for rb, base in ((allocated, 3), (lazy, 0), (in_ram, 3)):
        assert len(rb) == base + 5 and rb.write_count == base + 5
        assert rb["obs"][base:].tolist() == [100, 101, 102, 103, 104]
        assert rb.sample(200)["obs"].max() == 104  # samples see the child's rows
        assert rb.extend(rows(1, start=7)).tolist() == [base + 5]  # the cursor moved in the child too


def test_shared_needs_a_shareable_storage():
    with pytest.raises(ValueError, match="LazyMemmapStorage"):
        ReplayBuffer(storage=ListStorage(10), shared=True)
    unallocated = ReplayBuffer(storage=LazyTensorStorage(10), shared=True)
    with pytest.raises(RuntimeError, match="extend it once first"):
        mp.get_context("spawn").Process(target=_child_extend, args=([unallocated], 0)).start()


def test_tensorclass_and_list_of_tensordicts():
    from tensordict import tensorclass

    @tensorclass
    class MyData:
        images: torch.Tensor
        labels: torch.Tensor

    rb = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=12)
    rb.extend(MyData(images=torch.arange(30.0).view(10, 3), labels=torch.arange(10), batch_size=[10]))
    s = rb.sample()
    assert type(s).__name__ == "MyData" and s.batch_size == (12,)
    assert (s.images[:, 0] == s.labels * 3).all()
    tdrb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    tdrb.extend([rows(1, start=i)[0] for i in range(4)])  # a list of TensorDicts is a batch
    assert tdrb["obs"].tolist() == [0, 1, 2, 3]


def test_setitem_slice_needs_matching_length():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(6))
    with pytest.raises(ValueError, match="needs 6 items, got 2"):
        rb[:] = torch.arange(2)


def test_items_can_be_whole_trajectories():
    """Each item a [T] TensorDict (TorchRL's 'storing trajectories'): samples are [B, T], index expanded."""
    traj = TensorDict({"obs": torch.arange(40.0).view(8, 5)}, [8, 5])  # item i holds 5i..5i+4
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), batch_size=3, generator=torch.Generator().manual_seed(1))
    rb.extend(traj)
    s = rb.sample()
    assert s.batch_size == (3, 5) and s["index"].shape == (3, 5)
    assert (s["obs"][:, 0] == s["index"][:, 0] * 5).all()


# ------------------------------------------------------------------------- write_all with a new key
STORAGES_FOR_NEW_KEYS = {
    "list (default)": lambda: None,
    "tensor": lambda: LazyTensorStorage(10),
    "memmap": lambda: LazyMemmapStorage(10),
}


@pytest.mark.parametrize("buffer_cls", [ReplayBuffer, TensorDictReplayBuffer])
@pytest.mark.parametrize("storage", sorted(STORAGES_FOR_NEW_KEYS))
def test_write_all_adds_a_key_to_every_stored_item(buffer_cls, storage):
    """The seeds' documented example: recompute a target for every stored row after collection."""
    made = STORAGES_FOR_NEW_KEYS[storage]()
    rb = buffer_cls() if made is None else buffer_cls(storage=made)
    rb.extend(TensorDict({"obs": torch.arange(3)}, [3]))
    data = rb.read_all_in_order()
    data["target"] = data["obs"] + 1
    rb.write_all(data)
    assert (rb[:] == data).all()
    assert rb[:]["target"].tolist() == [1, 2, 3] and rb[:]["obs"].tolist() == [0, 1, 2]
    rb.extend(TensorDict({"obs": torch.tensor([7]), "target": torch.tensor([70])}, [1]))  # the new schema holds
    assert rb[:]["target"].tolist() == [1, 2, 3, 70]


def test_write_all_after_a_wrap_adds_the_key_in_write_order():
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    rb.extend(TensorDict({"obs": torch.arange(6)}, [6]))  # rows hold 4, 5, 2, 3; oldest first is 2, 3, 4, 5
    data = rb.read_all_in_order()
    data["target"] = data["obs"] * 10
    rb.write_all(data)
    stored = rb[:]
    assert stored["obs"].tolist() == [4, 5, 2, 3] and stored["target"].tolist() == [40, 50, 20, 30]


def test_a_new_memmap_key_is_a_real_file_that_survives_pickling_and_dumps(tmp_path):
    import pickle

    storage = LazyMemmapStorage(10, scratch_dir=tmp_path / "scratch")
    rb = ReplayBuffer(storage=storage)
    rb.extend(TensorDict({"obs": torch.arange(3), "next": {"obs": torch.arange(1, 4)}}, [3]))
    data = rb.read_all_in_order()
    data["next", "target"] = data["obs"].double() / 2
    rb.write_all(data)
    files = sorted(
        p.relative_to(tmp_path / "scratch" / "data").as_posix() for p in (tmp_path / "scratch").rglob("*.memmap")
    )
    assert files == ["next/obs.memmap", "next/target.memmap", "obs.memmap"]
    target_file = tmp_path / "scratch" / "data" / "next" / "target.memmap"
    assert target_file.stat().st_size == 10 * 8 and target_file.stat().st_blocks * 512 >= 10 * 8  # blocks reserved
    again = pickle.loads(pickle.dumps(storage))  # another process reopens the files, new key included
    assert again.get(torch.arange(3))["next", "target"].tolist() == [0.0, 0.5, 1.0]
    rb.dumps(tmp_path / "dump")
    loaded = ReplayBuffer(storage=LazyMemmapStorage(10))
    loaded.loads(tmp_path / "dump")
    assert loaded[:]["next", "target"].tolist() == [0.0, 0.5, 1.0]


def test_a_new_key_on_part_of_the_items_is_refused_naming_the_fix():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(TensorDict({"obs": torch.arange(3)}, [3]))
    with pytest.raises(ValueError, match=r"unexpected 'target'.*every stored item.*write_all"):
        rb[0:2] = TensorDict({"obs": torch.arange(2), "target": torch.arange(2)}, [2])
    with pytest.raises(ValueError, match="missing 'obs'"):  # a key dropped is still a schema mismatch
        rb.write_all(TensorDict({"target": torch.arange(3)}, [3]))
    assert list(rb[:].keys()) == ["obs"]


# -- TorchRL's constructor keywords (issue 19) ------------------------------------------------------


def test_pin_memory_is_refused_without_a_cuda_device():
    if torch.cuda.is_available():
        rb = ReplayBuffer(storage=LazyTensorStorage(8), pin_memory=True, batch_size=2)
        rb.extend(torch.arange(8.0))
        assert rb.sample().is_pinned()
    else:
        with pytest.raises(RuntimeError, match="pin_memory"):
            ReplayBuffer(pin_memory=True)


def test_delayed_init_builds_components_at_first_use_and_accepts_constructors():
    from datasets_hub.buffers.samplers import SamplerWithoutReplacement

    made = []

    def make_storage():
        made.append("storage")
        return LazyTensorStorage(8)

    rb = ReplayBuffer(storage=make_storage, sampler=SamplerWithoutReplacement, batch_size=2, delayed_init=True)
    assert not rb.initialized and made == []
    rb.extend(torch.arange(4.0))
    assert rb.initialized and made == ["storage"]
    assert isinstance(rb.sampler, SamplerWithoutReplacement)
    assert sorted(torch.cat([rb.sample(), rb.sample()]).tolist()) == [0.0, 1.0, 2.0, 3.0]
    eager = ReplayBuffer(storage=make_storage)
    assert eager.initialized and made == ["storage", "storage"]


def test_transform_factory_is_called_once_and_delays_init_by_default():
    calls = []

    def factory():
        calls.append(1)
        return lambda x: x * 2

    rb = ReplayBuffer(storage=LazyTensorStorage(4), transform_factory=factory, batch_size=2)
    assert not rb.initialized
    rb.extend(torch.ones(4))
    assert (rb.sample() == 2).all() and calls == [1]
    with pytest.raises(TypeError, match="exclusive"):
        ReplayBuffer(transform=lambda x: x, transform_factory=factory)


def test_sampler_without_replacement_without_a_batch_size():
    from datasets_hub.buffers.samplers import SamplerWithoutReplacement

    rb = ReplayBuffer(storage=LazyTensorStorage(6), sampler=SamplerWithoutReplacement())
    rb.extend(torch.arange(6.0))
    seen = torch.cat([rb.sample(4), rb.sample(4)])
    assert sorted(seen.tolist()) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # an epoch, then a short last batch
    # TorchRL refuses drop_last=True without a buffer batch size; here each call's size decides the cut
    drop = ReplayBuffer(storage=LazyTensorStorage(6), sampler=SamplerWithoutReplacement(drop_last=True))
    drop.extend(torch.arange(3.0))
    assert drop.sample(2).numel() == 2
    with pytest.raises(ValueError, match=r"The batch size \(4\) is greater than the storage capacity \(3\)"):
        drop.sample(4)


def test_writer_keywords():
    w = RoundRobinWriter(compilable=True)
    with pytest.raises(RuntimeError, match="compilable=True"):
        w.share()
    with pytest.raises(RuntimeError, match="cannot be shared between processes"):
        RoundRobinWriter(track_generations=True).share()


def _episodes_td(n: int = 200) -> TensorDict:
    rows = torch.arange(n)
    last = ((rows % 20) == 19).unsqueeze(-1)
    return TensorDict(
        {"obs": rows.float().unsqueeze(-1), "episode": rows // 20, "next": {"done": last, "truncated": last}},
        batch_size=[n],
    )


@pytest.mark.parametrize("sampler", ["random", "slice", "without_replacement"])
def test_sample_many_equals_k_successive_samples_under_the_same_seed(sampler):
    from datasets_hub.buffers.samplers import SamplerWithoutReplacement, SliceSampler

    def buffer(transform=None):
        make = {
            "random": RandomSampler,
            "slice": lambda: SliceSampler(slice_len=4),
            "without_replacement": lambda: SamplerWithoutReplacement(drop_last=True),
        }[sampler]
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(200),
            sampler=make(),
            batch_size=16,
            transform=transform,
            generator=torch.Generator().manual_seed(7),
        )
        rb.extend(_episodes_td())
        return rb

    expected = torch.stack(_k_samples(buffer(), 5))
    many = buffer().sample_many(5)
    assert many.batch_size == (5, 16)
    for key in expected.keys(True, True):
        assert torch.equal(many.get(key), expected.get(key)), key
    # with a transform the batches are stacked sample() calls: the same values, transformed
    shifted = buffer(transform=lambda td: td.set("obs", td["obs"] + 1000)).sample_many(5)
    assert torch.equal(shifted["obs"], expected["obs"] + 1000)


def _k_samples(rb, k):
    return [rb.sample() for _ in range(k)]


def test_sample_many_refuses_a_short_batch_and_a_bad_k():
    from datasets_hub.buffers.samplers import SamplerWithoutReplacement

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(200), sampler=SamplerWithoutReplacement(), batch_size=64)
    rb.extend(_episodes_td())
    with pytest.raises(ValueError, match="shorter than batch_size"):
        rb.sample_many(4)  # 200 rows: the fourth batch of the epoch holds 8
    with pytest.raises(ValueError, match="k >= 1"):
        rb.sample_many(0)


def test_sample_many_of_plain_tensors_is_k_by_batch():
    rb = ReplayBuffer(storage=LazyTensorStorage(50), batch_size=8, generator=torch.Generator().manual_seed(1))
    rb.extend(torch.arange(50))
    many = rb.sample_many(3)
    rb2 = ReplayBuffer(storage=LazyTensorStorage(50), batch_size=8, generator=torch.Generator().manual_seed(1))
    rb2.extend(torch.arange(50))
    assert many.shape == (3, 8) and torch.equal(many, torch.stack([rb2.sample() for _ in range(3)]))


def test_draw_index_then_gather_drawn_is_sample():
    from datasets_hub.buffers.samplers import SliceSampler

    def buffer(**kw):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(200),
            sampler=SliceSampler(slice_len=4),
            generator=torch.Generator().manual_seed(3),
            **kw,
        )
        rb.extend(_episodes_td())
        return rb

    a, b = buffer(), buffer()
    for _ in range(3):
        drawn = a.draw_index(16)
        assert drawn is not None
        index, info = drawn
        got, want = a.gather_drawn(index, info), b.sample(16)
        assert torch.equal(index, want["index"])
        for key in ("obs", ("next", "truncated"), ("next", "done")):
            assert torch.equal(got[key], want[key]), key
    # a batch that is more than a gather (a transform here) draws nothing: the caller samples
    assert buffer(transform=lambda td: td).draw_index(16) is None


def test_set_storage_sampler_writer_return_the_previous_part_and_rewire():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
    rb.extend(rows(5))
    old_storage = rb.set_storage(LazyTensorStorage(10))
    assert len(old_storage) == 5 and len(rb) == 0
    rb.extend(rows(3, start=100))  # the writer writes into the new storage
    assert len(rb) == 3 and sorted(rb.sample()["obs"].tolist())[0] >= 100
    gen = torch.Generator().manual_seed(0)
    rb.set_rng(gen)
    old_sampler = rb.set_sampler(SamplerWithoutReplacement())
    assert isinstance(old_sampler, RandomSampler)
    assert rb.sampler.generator is gen  # the buffer's generator follows the sampler change
    assert sorted(rb.sample(3)["obs"].tolist()) == [100.0, 101.0, 102.0]  # one epoch: every row once
    with pytest.raises(ValueError, match="set_storage takes an empty storage"):
        rb.set_storage(old_storage)
    rb.set_sampler(PrioritizedSampler(max_capacity=10, alpha=1.0, beta=1.0))
    drawn = torch.cat([rb.sample(3)["obs"] for _ in range(30)])
    assert set(drawn.tolist()) == {100.0, 101.0, 102.0}  # the rows stored before the swap are drawn
    old_writer = rb.set_writer(RoundRobinWriter())
    assert isinstance(old_writer, RoundRobinWriter) and old_writer is not rb.writer
    rb.extend(rows(1, start=200))
    assert rb.writer.storage is rb.storage


def test_save_and_hooks_run_on_dumps_and_loads(tmp_path):
    calls = []

    def on_save(data, path):
        calls.append(("save", path))
        return data.clone().apply(lambda x: x * 2 if x.dtype.is_floating_point else x)

    def on_load(data, path):
        calls.append(("load", path))
        return data.apply(lambda x: x / 2 if x.dtype.is_floating_point else x)

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(rows(4))
    rb.register_save_hook(on_save)
    rb.save(tmp_path / "ckpt")
    assert torch.equal(rb[:4]["obs"], torch.arange(4.0))  # the hook saw a copy
    rb2 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb2.register_load_hook(on_load)
    rb2.loads(tmp_path / "ckpt")
    assert [c[0] for c in calls] == ["save", "load"]
    assert torch.equal(rb2[:4]["obs"], torch.arange(4.0))  # doubled on disk, halved back
    rb3 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb3.load(tmp_path / "ckpt")  # TorchRL's alias; no load hook: what the save hook wrote
    assert torch.equal(rb3[:4]["obs"], torch.arange(4.0) * 2)


def test_sample_include_info_false_drops_bookkeeping_only():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
    rb.extend(rows(6))
    assert "index" in rb.sample().keys()
    sample, info = rb.sample(include_info=False, return_info=True)
    assert "index" not in sample.keys() and "index" in info
    assert ("next", "obs") in sample.keys(include_nested=True)


def test_rng_is_torchrls_name_for_the_generator():
    rb = ReplayBuffer(storage=LazyTensorStorage(100), generator=torch.Generator())
    rb.extend(torch.arange(100))
    state = torch.random.get_rng_state()
    rb._rng.set_state(state)
    a = rb.sample(32)
    rb._rng.set_state(state)
    assert torch.equal(rb.sample(32), a)
    assert ReplayBuffer(storage=LazyTensorStorage(4))._rng is None  # no generator: torch's global one


# -- issue 27: sizes that cannot be allocated, and generators that are not torch's, refused up front ----
def _small_buffer(**kw):
    rb = ReplayBuffer(storage=LazyTensorStorage(100), **kw)
    rb.extend(torch.arange(100))
    return rb


def test_a_batch_that_cannot_be_allocated_is_refused_by_name():
    rb = _small_buffer(batch_size=4)
    with pytest.raises(ValueError, match=r"sample\(1000000000000\) asks for 1,000,000,000,000 items"):
        rb.sample(10**12)
    with pytest.raises(ValueError, match=r"sample_many\(10000000, batch_size=256\) asks for 2,560,000,000 items"):
        rb.sample_many(10**7, batch_size=256)
    with pytest.raises(ValueError, match="batch_size=1000000000000 asks for"):
        ReplayBuffer(storage=LazyTensorStorage(10), batch_size=10**12)
    assert rb.sample().shape == (4,) and rb.sample_many(3).shape == (3, 4)


def test_a_generator_that_is_not_torch_s_is_refused_when_given():
    import numpy as np

    for bad in (np.random.default_rng(0), 7):
        with pytest.raises(TypeError, match=r"generator must be a torch\.Generator"):
            _small_buffer(batch_size=4, generator=bad)
    rb = _small_buffer(batch_size=4, generator=torch.Generator().manual_seed(0))
    with pytest.raises(TypeError, match=r"pass torch.Generator\(\).manual_seed\(seed\)"):
        rb.set_rng(3)


def _prefetching(seed, prefetch=2, storage=None):
    rb = ReplayBuffer(
        storage=storage or ListStorage(12),
        batch_size=3,
        prefetch=prefetch,
        generator=torch.Generator().manual_seed(seed),
    )
    rb.extend(torch.arange(12) * 10)
    return rb


@pytest.mark.parametrize("how", ["state_dict", "pickle", "dumps"])
def test_batches_in_flight_travel_with_the_saved_state(how, tmp_path):
    import pickle

    source = _prefetching(0, storage=LazyTensorStorage(12))
    source.sample()  # two more batches are now drawn ahead
    if how == "pickle":
        restored = pickle.loads(pickle.dumps(source))
    else:
        restored = _prefetching(1, storage=LazyTensorStorage(12))
        restored.sample()
        if how == "state_dict":
            restored.load_state_dict(source.state_dict())
        else:
            source.dumps(tmp_path)
            restored.loads(tmp_path)
    for _ in range(4):
        assert torch.equal(source.sample(), restored.sample())


def test_a_prefetch_state_of_another_capacity_is_refused_before_anything_changes():
    state = _prefetching(0).state_dict()
    target = _prefetching(1, prefetch=1)
    target.sample()
    queued = list(target._prefetch_queue)
    with pytest.raises(RuntimeError, match="prefetch queue with capacity 2"):
        target.load_state_dict(state)
    assert list(target._prefetch_queue) == queued
    legacy = dict(state)
    legacy.pop("_prefetch_state")
    other = _prefetching(1)
    other.sample()
    other.load_state_dict(legacy)
    assert not other._prefetch_queue


def test_a_prefetching_buffer_cannot_be_shared():
    with pytest.raises(ValueError, match=r"Cannot share prefetched replay buffers.*prefetch=0.*shared=False"):
        ReplayBuffer(storage=LazyMemmapStorage(4), batch_size=2, prefetch=1, shared=True)
    rb = ReplayBuffer(storage=LazyMemmapStorage(4))
    assert rb.share(True) is rb
    with pytest.raises(RuntimeError, match="cannot be undone"):
        rb.share(False)


def test_stats_snapshot_counts_without_side_effects():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
    rb.extend(torch.arange(15))
    assert rb.stats() == {
        "size": 10,
        "write_count": 15,
        "prefetch_queue_size": 0,
        "initialized": True,
        "capacity": 10,
        "utilization": 1.0,
    }
    json.dumps(rb.stats())
    rb.empty(empty_write_count=False)
    assert (rb.stats()["size"], rb.stats()["write_count"]) == (0, 15)
    rb.empty()
    assert rb.stats()["write_count"] == 0
    delayed = ReplayBuffer(storage=LazyTensorStorage(4), delayed_init=True)
    assert delayed.stats()["initialized"] is False and delayed.stats()["capacity"] == 4
    assert not delayed.initialized


def test_set_set_at_and_update_write_single_entries_in_place():
    rb = ReplayBuffer(storage=LazyTensorStorage(6))
    rb.extend(TensorDict({"a": torch.arange(4.0), "b": torch.arange(4.0) + 10}, [4]))
    rb.set_at_("a", torch.tensor([70.0, 71.0]), torch.tensor([1, 3]))
    assert rb["a"].tolist() == [0.0, 70.0, 2.0, 71.0]
    rb.set_("b", torch.tensor([20.0, 21.0, 22.0, 23.0]))
    assert rb["b"].tolist() == [20.0, 21.0, 22.0, 23.0]
    rb.update_(TensorDict({"a": torch.full((4,), 5.0)}, [4]))
    assert rb["a"].tolist() == [5.0] * 4 and rb["b"].tolist() == [20.0, 21.0, 22.0, 23.0]
    with pytest.raises(ValueError, match="dtype"):
        rb.set_("a", torch.arange(4))
    with pytest.raises(KeyError, match="no entry 'c'"):
        rb.set_("c", torch.zeros(4))
