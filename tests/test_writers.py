"""Writers: the storage a writer writes to is registered first, and an unregistered writer says so."""

from __future__ import annotations

import pytest
import torch

from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.buffers.writers import RoundRobinWriter


def test_a_writer_without_a_storage_names_the_fix():
    writer = RoundRobinWriter()
    with pytest.raises(RuntimeError, match="register_storage"):
        writer.extend(torch.arange(3))
    with pytest.raises(RuntimeError, match="has no storage yet"):
        writer.indices_in_order()


def test_a_registered_writer_writes_round_robin():
    storage = LazyTensorStorage(4)
    writer = RoundRobinWriter()
    writer.register_storage(storage)
    assert writer.storage is storage
    assert writer.extend(torch.arange(3)).tolist() == [0, 1, 2]
    assert writer.extend(torch.arange(10, 13)).tolist() == [3, 0, 1]
    assert storage.get(torch.arange(4)).tolist() == [11, 12, 2, 10]
    assert writer.indices_in_order().tolist() == [2, 3, 0, 1]


def test_torchrl_cursor_names_are_settable_and_old_states_load(tmp_path):
    writer = RoundRobinWriter()
    writer._cursor, writer._write_count = 3, 23
    writer.dumps(tmp_path)
    other = RoundRobinWriter()
    other.loads(tmp_path)
    assert (other.cursor, other.write_count) == (3, 23)
    other.load_state_dict({"_cursor": 5})
    assert (other.cursor, other.write_count) == (5, 5)
