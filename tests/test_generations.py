"""Generation stamps (track_generations=True) and update_if_present: stale handles are told apart from live ones."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.replay_buffers import ReplayBuffer, TensorDictReplayBuffer
from datasets_hub.buffers.storages import ListStorage
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.buffers.tensordict_writers import TensorDictMaxValueWriter
from datasets_hub.buffers.writers import RoundRobinWriter


def tracked(size: int, **kwargs) -> ReplayBuffer:
    return ReplayBuffer(storage=LazyTensorStorage(size), writer=RoundRobinWriter(track_generations=True), **kwargs)


def test_stamps_count_writes_per_slot_and_minus_one_means_never():
    rb = tracked(4)
    rb.extend(torch.arange(2))
    assert rb.writer.generations_of(torch.arange(4)).tolist() == [0, 0, -1, -1]
    rb.extend(torch.arange(8))  # 8 items into 4 slots from slot 2: slots 2, 3 twice, slots 0, 1 twice
    assert rb.writer.generations_of(torch.arange(4)).tolist() == [2, 2, 1, 1]
    rb.add(torch.tensor(9))
    assert rb.writer.generations_of(torch.tensor([2, -1, 4, 100])).tolist() == [2, -1, -1, -1]


def test_sample_carries_the_stamps_of_its_rows_and_overwrites_make_them_stale():
    rb = tracked(8)
    rb.extend(torch.arange(8))
    _, info = rb.sample(8, return_info=True)
    index, stamp = info["index"], info["index_generation"]
    assert torch.equal(stamp, rb.writer.generations_of(index))
    rb.extend(torch.arange(3))  # overwrites slots 0, 1, 2
    assert torch.equal(rb.writer.generations_of(index) != stamp, index < 3)
    td = TensorDictReplayBuffer(storage=LazyTensorStorage(8), writer=RoundRobinWriter(track_generations=True))
    td.extend(TensorDict(a=torch.arange(8), batch_size=[8]))
    assert td.sample(4)["index_generation"].shape == (4,)


def test_untracked_buffers_are_unchanged():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(TensorDict(a=torch.arange(10), batch_size=[10]))
    assert "index_generation" not in rb.sample(4).keys()
    assert rb.storage.slot_generations is None
    assert rb.writer.generations_of(torch.arange(3)).tolist() == [-1, -1, -1]
    assert TensorDictMaxValueWriter(rank_key="a").generations_of(torch.arange(2)).tolist() == [-1, -1]


def test_stamps_live_on_the_storage_and_every_writer_moves_them():
    storage = LazyTensorStorage(4)
    a = ReplayBuffer(storage=storage, writer=RoundRobinWriter(track_generations=True))
    b = ReplayBuffer(storage=storage)  # does not track, but writes the same slots
    index = a.extend(torch.arange(4))
    before = a.writer.generations_of(index)
    b.extend(torch.arange(2))
    assert (a.writer.generations_of(index) != before).tolist() == [True, True, False, False]
    b.empty()
    assert (a.writer.generations_of(index) > before).all()  # empty() invalidates every handle


def test_empty_keeps_never_written_slots_at_minus_one_and_stamps_only_grow():
    rb = tracked(4)
    rb.extend(torch.arange(2))
    rb.empty()
    assert rb.writer.generations_of(torch.arange(4)).tolist() == [1, 1, -1, -1]
    rb.extend(torch.arange(2))
    assert rb.writer.generations_of(torch.arange(2)).tolist() == [2, 2]


def test_state_dict_and_dumps_keep_the_stamps(tmp_path):
    rb = tracked(4)
    rb.extend(torch.arange(5))
    rb2 = tracked(4)
    rb2.load_state_dict(rb.state_dict())
    assert torch.equal(rb2.writer.generations_of(torch.arange(4)), rb.writer.generations_of(torch.arange(4)))
    rb.dumps(tmp_path / "rb")
    rb3 = tracked(4)
    rb3.loads(tmp_path / "rb")
    assert rb3.writer.generations_of(torch.arange(4)).tolist() == [1, 0, 0, 0]
    rb.writer.dumps(tmp_path / "w")
    lone = RoundRobinWriter(track_generations=True)  # loaded before it has a storage
    lone.loads(tmp_path / "w")
    lone.register_storage(LazyTensorStorage(4))
    assert lone.generations_of(torch.arange(4)).tolist() == [1, 0, 0, 0]


def make_td_buffer():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), writer=RoundRobinWriter(track_generations=True))
    data = TensorDict({"obs": torch.arange(30.0).reshape(10, 3), "info": {"label": torch.arange(10)}}, [10])
    index = rb.extend(data)
    return rb, data, index, rb.writer.generations_of(index)


def test_update_if_present_writes_live_items_only():
    rb, _, index, generation = make_td_buffer()
    rb.extend(TensorDict({"obs": torch.full((4, 3), -1.0), "info": {"label": torch.ones(4, dtype=torch.int64)}}, [4]))
    order = torch.tensor([7, 0, 5, 2, 9, 1])
    result = rb.update_if_present(
        index=index[order], generation=generation[order], patch={"obs": torch.full((6, 3), 42.0)}
    )
    assert result.updated.tolist() == [True, False, True, False, True, False]
    assert (result.updated_count, result.stale_count) == (3, 3)
    assert rb[:]["obs"][[5, 7, 9]].eq(42).all() and rb[:]["obs"][[0, 1, 2]].eq(-1).all()
    assert rb[:]["obs"][6].tolist() == [18.0, 19.0, 20.0]  # not in the patch's index
    again = rb.update_if_present(  # an update is not a new write: the handles stay live
        index=index[order], generation=generation[order], patch={("info", "label"): torch.full((6,), 7)}
    )
    assert again.updated.tolist() == result.updated.tolist()


def test_update_if_present_checks_everything_before_writing():
    rb, data, index, generation = make_td_buffer()
    with pytest.raises(KeyError, match="no entry"):
        rb.update_if_present(index=index, generation=generation, patch={"not_a_key": torch.zeros(10, 3)})
    with pytest.raises(ValueError, match="dtype"):
        rb.update_if_present(
            index=index,
            generation=generation,
            patch={"obs": torch.full((10, 3), 1.0), ("info", "label"): torch.zeros(10, 5, dtype=torch.int64)},
        )
    assert torch.equal(rb[:]["obs"], data["obs"])  # nothing was written
    untracked = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
    untracked.extend(TensorDict(obs=torch.zeros(4, 3), batch_size=[4]))
    with pytest.raises(RuntimeError, match="conditional write"):
        untracked.update_if_present(index=torch.arange(4), generation=torch.zeros(4), patch={"obs": torch.ones(4, 3)})
    listed = ReplayBuffer(storage=ListStorage(4), writer=RoundRobinWriter(track_generations=True))
    listed.extend([torch.zeros(3)] * 2)
    with pytest.raises(TypeError, match="conditional write"):
        listed.update_if_present(index=torch.arange(2), generation=torch.zeros(2), patch={"obs": torch.ones(2, 3)})


def versioned_buffer():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(6), writer=RoundRobinWriter(track_generations=True))
    index = rb.extend(
        TensorDict({"obs": torch.arange(6.0), "meta": {"v": torch.tensor([5, 5, 5, 2, 2, 2])}}, batch_size=[6])
    )
    return rb, index, rb.writer.generations_of(index)


def test_update_if_present_with_a_version_writes_only_newer_and_records_it():
    rb, index, generation = versioned_buffer()
    rb.extend(TensorDict({"obs": torch.tensor([-1.0]), "meta": {"v": torch.tensor([0])}}, batch_size=[1]))  # slot 0
    result = rb.update_if_present(
        index=index,
        generation=generation,
        patch={"obs": torch.full((6,), 9.0)},
        version_key=("meta", "v"),
        version=torch.tensor([7, 4, 5, 3, 2, 1]),
        require_newer=True,
    )
    # slot 0 was rewritten (stale); 1 (4 < 5) and 2 (5 == 5, newer required) and 4, 5 lose; 3 (3 > 2) wins
    assert result.updated.tolist() == [False, False, False, True, False, False]
    assert result.version_rejected.tolist() == [False, True, True, False, True, True]
    assert (result.updated_count, result.version_rejected_count, result.stale_count) == (1, 4, 1)
    assert rb[:]["obs"].tolist() == [-1.0, 1.0, 2.0, 9.0, 4.0, 5.0]
    assert rb[:]["meta", "v"].tolist() == [0, 5, 5, 3, 2, 2]  # the accepted version is written with the patch
    ties = rb.update_if_present(
        index=index[4:], generation=generation[4:], patch={"obs": torch.zeros(2)}, version_key=("meta", "v"), version=2
    )
    assert ties.updated.tolist() == [True, True]  # without require_newer a tie is accepted


def test_an_item_addressed_twice_keeps_the_row_with_the_highest_version():
    rb, index, generation = versioned_buffer()
    slots = index[[4, 4, 4]]
    result = rb.update_if_present(
        index=slots,
        generation=generation[[4, 4, 4]],
        patch={"obs": torch.tensor([10.0, 30.0, 20.0])},
        version_key=("meta", "v"),
        version=torch.tensor([3, 8, 8]),
    )
    assert result.updated.tolist() == [False, False, True]  # the last of the two highest
    assert result.version_rejected.tolist() == [True, True, False]
    assert rb[4]["obs"].item() == 20.0 and rb[4]["meta", "v"].item() == 8


def test_version_arguments_are_checked_before_anything_is_written():
    rb, index, generation = versioned_buffer()
    before = rb[:].clone()
    bad = [
        ({"version_key": ("meta", "v")}, ValueError, "together"),
        ({"version_key": "meta.v", "version": 9}, ValueError, "Dotted-string"),
        ({"version_key": "nope", "version": 9}, KeyError, "no version entry"),
        ({"version_key": ("meta", "v"), "version": torch.ones(4, dtype=torch.int64)}, ValueError, "one per item"),
    ]
    for kwargs, error, match in bad:
        with pytest.raises(error, match=match):
            rb.update_if_present(index=index, generation=generation, patch={"obs": torch.zeros(6)}, **kwargs)
    with pytest.raises(ValueError, match="may not appear in patch"):
        rb.update_if_present(
            index=index,
            generation=generation,
            patch={("meta", "v"): torch.zeros(6, dtype=torch.int64)},
            version_key=("meta", "v"),
            version=9,
        )
    assert (rb[:] == before).all()
