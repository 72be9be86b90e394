"""find_start_stop_traj: trajectories of a circular storage from ids or end flags, wrap-around and cursor."""

from __future__ import annotations

import pytest
import torch

import datasets_hub as dh
from datasets_hub.buffers.trajectory_bounds import find_start_stop_traj


def flat(result):
    start, stop, lengths = result
    return start.squeeze(-1).tolist(), stop.squeeze(-1).tolist(), lengths.tolist()


def test_end_flags_of_a_full_storage_wrap_and_the_cursor_truncates():
    end = torch.zeros(10, dtype=torch.bool)
    end[[2, 7]] = True
    # rows 8, 9, 0, 1, 2 are one trajectory across the storage edge; the cursor (row 4) ends another
    assert flat(find_start_stop_traj(end=end, at_capacity=True, cursor=4)) == ([8, 3, 5], [2, 4, 7], [5, 2, 3])
    for cursor in (torch.tensor([2, 3, 4]), torch.tensor(4), range(2, 5)):  # the last row written counts
        assert flat(find_start_stop_traj(end=end, at_capacity=True, cursor=cursor))[1] == [2, 4, 7]
    assert flat(find_start_stop_traj(end=end, at_capacity=True)) == ([8, 3], [2, 7], [5, 5])
    assert not end[4]  # the input is not modified


def test_ids_give_the_same_bounds_and_a_partly_filled_storage_ends_at_its_last_row():
    ids = torch.tensor([5, 5, 5, 0, 0, 1, 1, 1, 5, 5])  # 5 continues from row 9 into row 0
    assert flat(find_start_stop_traj(trajectory=ids, at_capacity=True)) == ([8, 3, 5], [2, 4, 7], [5, 2, 3])
    assert flat(find_start_stop_traj(trajectory=ids, at_capacity=False)) == ([0, 3, 5, 8], [2, 4, 7, 9], [3, 2, 3, 2])
    end = torch.zeros(6, dtype=torch.bool)
    end[2] = True
    assert flat(find_start_stop_traj(end=end, at_capacity=False)) == ([0, 3], [2, 5], [3, 3])
    assert flat(find_start_stop_traj(end=torch.zeros(4, dtype=torch.bool), at_capacity=True)) == ([0], [3], [4])
    assert flat(find_start_stop_traj(trajectory=torch.tensor([3]), at_capacity=True)) == ([0], [0], [1])


def test_time_first_columns_are_cut_separately():
    ids = torch.tensor([[0, 3], [0, 3], [1, 3], [1, 4], [1, 4]])  # [T=5, 2 envs]
    start, stop, lengths = find_start_stop_traj(trajectory=ids, at_capacity=False)
    assert start.tolist() == [[0, 0], [2, 0], [0, 1], [3, 1]]
    assert stop.tolist() == [[1, 0], [4, 0], [2, 1], [4, 1]]
    assert lengths.tolist() == [2, 3, 3, 2]


def test_refusals():
    with pytest.raises(TypeError, match="Exactly one"):
        find_start_stop_traj(at_capacity=True)
    with pytest.raises(RuntimeError, match="empty input"):
        find_start_stop_traj(end=torch.zeros(0, dtype=torch.bool), at_capacity=True)
    with pytest.raises(ValueError, match="cursor must not be empty"):
        find_start_stop_traj(end=torch.zeros(3, dtype=torch.bool), at_capacity=True, cursor=range(0))
    assert dh.find_start_stop_traj is find_start_stop_traj
