"""TED2Nested / Nested2TED and H5Split / H5Combine: one row per trajectory, and back exactly."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import datasets_hub as dh
from datasets_hub.errors import InvalidArgument


def _ted() -> TensorDict:
    """Two trajectories (3 then 2 steps), observations distinct per step, each next obs the following obs."""
    obs = torch.tensor([0.0, 1, 2, 10, 11]).unsqueeze(-1)
    nxt = torch.tensor([1.0, 2, 3, 11, 12]).unsqueeze(-1)
    done = torch.tensor([False, False, True, False, True]).unsqueeze(-1)
    reward = torch.tensor([0.5, 1.5, 2.5, 3.5, 4.5]).unsqueeze(-1)
    return TensorDict(
        {"obs": obs, "action": torch.arange(5) + 20, "next": {"obs": nxt, "done": done, "reward": reward}}, [5]
    )


def test_one_row_per_trajectory_with_observations_stored_once():
    nested = dh.TED2Nested()(_ted())
    assert nested.batch_size == (2,)
    assert nested[0]["obs"].squeeze(-1).tolist() == [0, 1, 2, 3], "3 steps, 4 observations"
    assert nested[1]["obs"].squeeze(-1).tolist() == [10, 11, 12]
    assert nested[1]["action"].tolist() == [23, 24]
    assert nested[0]["next", "reward"].squeeze(-1).tolist() == [0.5, 1.5, 2.5]
    assert ("next", "obs") not in nested.keys(include_nested=True)


def test_nested_to_ted_round_trips_exactly_also_two_dimensional():
    td = _ted()
    assert (dh.Nested2TED()(dh.TED2Nested()(td)) == td).all()
    two_envs = torch.stack([td[:4], td[1:]], 1)  # [T=4, n_envs=2]
    back = dh.Nested2TED()(dh.TED2Nested()(two_envs))
    assert back.batch_size == (4, 2)
    assert (back == two_envs).all()


def test_h5_split_and_combine():
    nested = dh.TED2Nested()(_ted())
    split = dh.H5Split()(nested)
    assert sorted(k for k in split.keys() if k.startswith("traj_")) == ["traj_0", "traj_1"]
    assert split["traj_1", "obs"].squeeze(-1).tolist() == [10, 11, 12]
    assert split.get_non_tensor("is_full") == [5]
    combined = dh.H5Combine()(split)
    assert (dh.Nested2TED()(combined) == _ted()).all()


def test_split_names_sort_in_run_order():
    obs = torch.arange(12.0).unsqueeze(-1)
    done = torch.ones(12, 1, dtype=torch.bool)  # 12 one-step trajectories
    td = TensorDict({"obs": obs, "next": {"obs": obs + 100, "done": done}}, [12])
    split = dh.H5Split()(dh.TED2Nested()(td))
    names = sorted(k for k in split.keys() if k.startswith("traj_"))
    assert names[:3] == ["traj_00", "traj_01", "traj_02"] and names[-1] == "traj_11"
    assert (dh.Nested2TED()(dh.H5Combine()(split)) == td).all()


def test_refusals():
    with pytest.raises(InvalidArgument, match="no items"):
        dh.TED2Nested()(_ted()[:0])
    with pytest.raises(KeyError, match="TED2Nested"):
        dh.Nested2TED()(TensorDict({"obs": torch.zeros(2)}, [2]))
    with pytest.raises(InvalidArgument, match="traj_"):
        dh.H5Combine()(TensorDict({"obs": torch.zeros(2)}, []))
