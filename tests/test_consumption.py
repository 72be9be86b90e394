"""Consuming buffers: ``consume_after_n_samples=`` and ``ConsumingSampler`` (datasets_hub/buffers/consumption.py)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.memmap_storage import LazyMemmapStorage
from datasets_hub.buffers.replay_buffers import ReplayBuffer, TensorDictReplayBuffer
from datasets_hub.buffers.samplers import ConsumingSampler, SamplerWithoutReplacement, SliceSampler
from datasets_hub.buffers.storages import ListStorage
from datasets_hub.buffers.tensor_storages import LazyTensorStorage, TensorStorage
from datasets_hub.buffers.writers import RoundRobinWriter
from datasets_hub.errors import ReadOnlyError


def seeded(seed: int = 3) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_each_row_is_returned_once_then_len_drops_to_zero():
    rb = ReplayBuffer(storage=ListStorage(6), batch_size=4, consume_after_n_samples=1, generator=seeded())
    rb.extend([torch.tensor(10 + i) for i in range(6)])
    first, info = rb.sample(return_info=True)
    assert len(first) == 4 and len(rb) == 2
    assert sorted(first.tolist()) == sorted((info["index"] + 10).tolist())
    second = rb.sample()
    assert len(second) == 2 and len(rb) == 0  # a short batch: only two rows were left
    assert sorted(first.tolist() + second.tolist()) == list(range(10, 16))
    with pytest.raises(RuntimeError, match="Cannot sample from an empty storage"):
        rb.sample()
    assert len(rb.storage) == 6  # consumed rows stay stored until a write fills their slot


def test_rows_are_consumed_after_n_samples():
    rb = ReplayBuffer(storage=LazyTensorStorage(3), batch_size=3, consume_after_n_samples=3, generator=seeded())
    rb.extend(torch.tensor([7, 8, 9]))
    for _ in range(2):
        assert sorted(rb.sample().tolist()) == [7, 8, 9]
        assert len(rb) == 3
    assert sorted(rb.sample().tolist()) == [7, 8, 9]
    assert len(rb) == 0


def test_new_writes_fill_consumed_slots_before_the_cursor():
    rb = ReplayBuffer(storage=LazyTensorStorage(6), consume_after_n_samples=1, generator=seeded())
    rb.extend(torch.tensor([20, 21, 22, 23]))  # cursor at 4
    consumed = rb.sample(2, return_info=True)[1]["index"]
    written = rb.extend(torch.tensor([30, 31, 32, 33]))
    # the two freed slots first (in the order they were consumed), then 4 and 5 from the cursor
    assert written.tolist() == [*consumed.tolist(), 4, 5]
    assert rb.storage.get(written).tolist() == [30, 31, 32, 33]
    assert rb.writer.cursor == 0 and len(rb) == 6 and rb.write_count == 8
    assert rb.add(torch.tensor(40)) == 0  # nothing consumed: the cursor's slot, as without consumption


def test_the_cursor_passes_over_slots_the_same_write_fills():
    rb = ReplayBuffer(storage=LazyTensorStorage(4), consume_after_n_samples=1, generator=seeded(1))
    rb.extend(torch.tensor([50, 51, 52, 53]))  # cursor back at 0
    consumed = rb.sample(1, return_info=True)[1]["index"]
    written = rb.extend(torch.tensor([60, 61, 62]))
    after = [s for s in range(4) if s != int(consumed)][:2]
    assert written.tolist() == [*consumed.tolist(), *after]  # the freed slot is never written twice
    assert len(set(written.tolist())) == 3


def test_add_fills_a_consumed_slot_and_makes_it_sampleable():
    rb = ReplayBuffer(storage=ListStorage(5), consume_after_n_samples=1, generator=seeded())
    rb.extend([torch.tensor(70), torch.tensor(71)])
    assert sorted(rb.sample(2).tolist()) == [70, 71] and len(rb) == 0
    slot = rb.add(torch.tensor(72))
    assert slot in (0, 1) and len(rb) == 1
    assert rb.sample(5).tolist() == [72]


def test_iteration_stops_when_every_row_is_consumed():
    rb = ReplayBuffer(storage=ListStorage(5), batch_size=2, sampler=ConsumingSampler(), generator=seeded())
    rb.extend([torch.tensor(80 + i) for i in range(5)])
    seen = [x for batch in rb for x in batch.tolist()]
    assert sorted(seen) == [80, 81, 82, 83, 84] and len(rb) == 0


def test_prefilled_tensor_storage_rows_are_live():
    rb = ReplayBuffer(storage=TensorStorage(torch.tensor([90, 91, 92])), batch_size=2, consume_after_n_samples=1)
    assert len(rb) == 3
    assert len(rb.sample()) == 2 and len(rb) == 1


def test_tensordict_buffers_on_memmap_storage(tmp_path):
    rb = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(5, scratch_dir=tmp_path), consume_after_n_samples=1, generator=seeded()
    )
    rb.extend(TensorDict({"obs": torch.tensor([100.0, 101.0, 102.0])}, [3]))
    sample = rb.sample(2)
    assert sample["index"].unique().numel() == 2 and len(rb) == 1
    assert (sample["obs"] == sample["index"].float() + 100).all()
    assert rb.sample(5)["index"].numel() == 1 and len(rb) == 0


def test_state_dict_keeps_counts_and_free_slots():
    rb = ReplayBuffer(storage=LazyTensorStorage(5), batch_size=2, consume_after_n_samples=2, generator=seeded())
    rb.extend(torch.tensor([110, 111, 112, 113, 114]))
    rb.sample()
    rb.sample()
    state = rb.state_dict()
    copy = ReplayBuffer(storage=LazyTensorStorage(5), batch_size=2, consume_after_n_samples=2)
    copy.load_state_dict(state)
    assert len(copy) == len(rb)
    state["_sampler"]["_sample_count"].fill_(0)  # the loaded sampler holds its own copy
    assert torch.equal(copy.sampler.state_dict()["_sample_count"], rb.sampler.state_dict()["_sample_count"])
    assert copy.extend(torch.tensor([120])).tolist() == rb.extend(torch.tensor([120])).tolist()


def test_dumps_and_loads(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(4), batch_size=3, consume_after_n_samples=1, generator=seeded())
    rb.extend(torch.tensor([130, 131, 132, 133]))
    left = sorted(set(range(130, 134)) - set(rb.sample().tolist()))
    rb.dumps(tmp_path)
    copy = ReplayBuffer(storage=LazyTensorStorage(4), batch_size=3, consume_after_n_samples=1)
    copy.loads(tmp_path)
    assert len(copy) == 1 and copy.sample().tolist() == left


def test_empty_resets_the_counts():
    rb = ReplayBuffer(storage=ListStorage(3), consume_after_n_samples=1)
    rb.extend([torch.tensor(140), torch.tensor(141)])
    rb.sample(2)
    rb.empty()
    assert len(rb) == 0
    assert rb.extend([torch.tensor(150)]).tolist() == [0] and len(rb) == 1


@pytest.mark.parametrize("bad", [0, -2])
def test_count_must_be_positive(bad):
    with pytest.raises(ValueError, match="positive integer"):
        ReplayBuffer(consume_after_n_samples=bad)
    with pytest.raises(ValueError, match="positive integer"):
        ConsumingSampler(bad)


@pytest.mark.parametrize("bad", [True, 1.5, "2"])
def test_count_must_be_an_int(bad):
    with pytest.raises(TypeError, match="positive integer"):
        ReplayBuffer(consume_after_n_samples=bad)


def test_refused_combinations():
    with pytest.raises(ValueError, match="Prefetching is not supported"):
        ReplayBuffer(storage=ListStorage(4), batch_size=2, consume_after_n_samples=1, prefetch=1)
    with pytest.raises(ValueError, match="only supports the default RandomSampler"):
        ReplayBuffer(sampler=SamplerWithoutReplacement(), consume_after_n_samples=1)
    with pytest.raises(ValueError, match="only supports the default RandomSampler"):
        ReplayBuffer(sampler=SliceSampler(num_slices=2), consume_after_n_samples=1)
    with pytest.raises(ValueError, match="conflicts"):
        ReplayBuffer(sampler=ConsumingSampler(2), consume_after_n_samples=1)
    with pytest.raises(ValueError, match="1-dimensional storages"):
        ReplayBuffer(storage=LazyTensorStorage(8, ndim=2), sampler=ConsumingSampler())

    class NoWriteAt(RoundRobinWriter):
        write_at = None

    with pytest.raises(TypeError, match="requires a writer with a callable"):
        ReplayBuffer(storage=ListStorage(4), writer=NoWriteAt(), consume_after_n_samples=1)
    rb = ReplayBuffer(storage=ListStorage(4), consume_after_n_samples=1)
    with pytest.raises(ValueError, match="fork"):
        rb.fork(None)
    plain = ReplayBuffer(storage=ListStorage(4))
    plain.set_sampler(ConsumingSampler())
    with pytest.raises(TypeError, match="requires a writer"):
        plain.set_writer(NoWriteAt())
    with pytest.raises(TypeError, match="requires a writer"):
        ReplayBuffer(storage=ListStorage(4), writer=NoWriteAt()).set_sampler(ConsumingSampler())


def test_a_read_only_build_refuses_consumption():
    storage = TensorStorage(TensorDict({"obs": torch.tensor([1.0, 2.0])}, [2]))
    storage.read_only = True  # what a hub build reports
    with pytest.raises(ReadOnlyError, match="frees consumed rows"):
        TensorDictReplayBuffer(storage=storage, consume_after_n_samples=1)
    rb = TensorDictReplayBuffer(storage=storage)
    with pytest.raises(ReadOnlyError, match="frees consumed rows"):
        rb.set_sampler(ConsumingSampler())
    assert not isinstance(rb.sampler, ConsumingSampler)  # refused before anything changed


def test_a_write_of_the_whole_capacity_overwrites_every_slot_once():
    rb = ReplayBuffer(storage=LazyTensorStorage(3), consume_after_n_samples=1, generator=seeded())
    rb.extend(torch.tensor([160, 161, 162]))
    rb.sample(2)
    written = rb.extend(torch.tensor([170, 171, 172, 173]))  # longer than the capacity: its last 3 items stay
    assert sorted(written.tolist()) == [0, 1, 2] and len(rb) == 3
    assert sorted(rb.sample(3).tolist()) == [171, 172, 173]


def test_a_hub_build_refuses_consumption():
    import datasets_hub as dh

    with pytest.raises(ReadOnlyError, match="frees consumed rows"):
        dh.load("gym/cartpole-random-v0", steps=40, sampler=ConsumingSampler())
    rb = dh.load("gym/cartpole-random-v0", steps=40)
    with pytest.raises(ReadOnlyError, match="frees consumed rows"):
        rb.set_sampler(ConsumingSampler(2))
    assert len(rb) == 40  # nothing changed


def test_writer_write_at_and_claim_slots():
    storage = LazyTensorStorage(4)
    writer = RoundRobinWriter()
    writer.register_storage(storage)
    writer.extend(torch.tensor([180, 181]))  # cursor at 2
    assert writer.write_at(torch.tensor([0]), torch.tensor([190])).tolist() == [0]
    assert writer.cursor == 2 and writer.write_count == 3 and storage.get(0).item() == 190
    assert writer.claim_slots(2, torch.tensor([3]), None).tolist() == [2, 0]  # 3 is passed over
    assert writer.cursor == 1
    with pytest.raises(ValueError, match="cannot claim 4 slots"):
        writer.claim_slots(4, torch.tensor([1]), None)
