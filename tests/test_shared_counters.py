"""Counters that other processes see: forked children of a memmap buffer, spawned processes, plain copies."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.multiprocessing as mp
from tensordict import TensorDict

from datasets_hub import LazyMemmapStorage, ListStorage, NotShareable, ReplayBuffer, TensorDictMaxValueWriter
from datasets_hub.buffers.shared_counters import being_spawned


def _extend_from_child(rb, start):
    rb.extend(torch.arange(start, start + 3, dtype=torch.float32))


def test_a_forked_child_writing_a_memmap_buffer_is_seen_by_the_parent():
    rb = ReplayBuffer(storage=LazyMemmapStorage(8))
    rb.extend(torch.tensor([1.0, 2.0]))
    child = mp.get_context("fork").Process(target=_extend_from_child, args=(rb, 10))
    child.start()
    child.join()
    assert child.exitcode == 0
    assert len(rb) == 5 and rb.write_count == 5
    rb.extend(torch.tensor([20.0]))  # the cursor moved too: no row of the child is overwritten
    assert rb[:].tolist() == [1.0, 2.0, 10.0, 11.0, 12.0, 20.0]


def test_a_forked_child_may_allocate_a_memmap_buffer_the_parent_never_wrote():
    rb = ReplayBuffer(storage=LazyMemmapStorage(8))
    child = mp.get_context("fork").Process(target=_extend_from_child, args=(rb, 30))
    child.start()
    child.join()
    assert child.exitcode == 0
    assert rb[:].tolist() == [30.0, 31.0, 32.0]


@pytest.mark.slow  # a spawned child imports torch: seconds on a loaded machine (make test-faults runs it)
def test_a_spawned_child_shares_the_counters_and_rows():
    rb = ReplayBuffer(storage=LazyMemmapStorage(8))
    rb.extend(torch.tensor([1.0]))
    child = mp.get_context("spawn").Process(target=_extend_from_child, args=(rb, 40))
    child.start()
    child.join()
    assert child.exitcode == 0
    assert rb[:].tolist() == [1.0, 40.0, 41.0, 42.0]


def test_what_cannot_be_shared_is_refused_when_spawning(monkeypatch):
    monkeypatch.setattr("datasets_hub.buffers.shared_counters.get_spawning_popen", object)
    assert being_spawned()
    with pytest.raises(NotShareable, match="Cannot share a storage of type ListStorage"):
        pickle.dumps(ListStorage(3))
    with pytest.raises(NotShareable, match="cannot be shared between processes"):
        pickle.dumps(TensorDictMaxValueWriter(rank_key="r"))
    with pytest.raises(RuntimeError, match="it has not been initialized yet"):
        pickle.dumps(LazyMemmapStorage(4))


def test_a_plain_copy_counts_on_its_own():
    rb = ReplayBuffer(storage=LazyMemmapStorage(8))
    rb.extend(TensorDict({"x": torch.tensor([5.0, 6.0])}, [2]))
    twin = copy.deepcopy(rb.writer)
    twin.keep_write_count(99)
    assert rb.write_count == 2 and twin.write_count == 99
