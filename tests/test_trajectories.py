"""Trajectory views and queries (datasets_hub/buffers/trajectories.py, ReplayBuffer.query)."""

from __future__ import annotations

import warnings

import pytest
import torch
from tensordict import TensorDict, lazy_stack

from datasets_hub import (
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
    Trajectory,
    filter_trajectories,
    iter_trajectories,
    traj,
)
from datasets_hub.buffers.transforms import Transform


def steps(ids: list[int], *, done: bool = True, with_ids: bool = True) -> TensorDict:
    """Transitions of the trajectories ``ids`` (one id per step); step ``t`` has observation ``10 * t``,
    reward ``id + 1 + t / 100`` (distinct per step), and done on each trajectory's last step."""
    n = len(ids)
    traj_ids = torch.tensor(ids)
    last = torch.ones(n, dtype=torch.bool)
    last[:-1] = traj_ids[1:] != traj_ids[:-1]
    td = TensorDict(
        {
            "observation": torch.arange(n, dtype=torch.float32).unsqueeze(-1) * 10,
            "action": torch.arange(n).unsqueeze(-1),
            "next": {"reward": (traj_ids.float() + 1 + torch.arange(n) / 100).unsqueeze(-1)},
        },
        batch_size=[n],
    )
    if done:
        td["next", "done"] = last.unsqueeze(-1)
    if with_ids:
        td["collector", "traj_ids"] = traj_ids
    return td


def test_trajectory_attributes_fall_back_to_next_and_keep_the_type():
    t = Trajectory(steps([4, 4, 4]))
    assert t.length == len(t) == 3
    assert torch.equal(t.observation[:, 0], torch.tensor([0.0, 10.0, 20.0]))
    assert torch.equal(t.reward, t["next", "reward"])
    assert torch.isclose(t.total_reward, torch.tensor(15.03))
    assert isinstance(t[1:], Trajectory) and t[1:].length == 2
    assert isinstance(t.clone(), Trajectory)
    with pytest.raises(AttributeError, match="no entry 'pixels'"):
        _ = t.pixels
    stacked = lazy_stack([t, Trajectory(steps([7, 7]))])
    assert isinstance(stacked[1], Trajectory) and stacked[1].length == 2


def test_trajectory_refuses_two_batch_dims():
    with pytest.raises(ValueError, match="single batch dimension"):
        Trajectory(steps([0, 0, 1, 1]).reshape(2, 2))


def test_split_by_ids_and_by_end_flags():
    data = steps([0, 0, 1, 2, 2, 2])
    assert [t.length for t in iter_trajectories(data)] == [2, 1, 3]
    no_ids = steps([0, 0, 1, 2, 2, 2], with_ids=False)
    with pytest.warns(UserWarning, match="end-of-episode"):
        assert [t.length for t in iter_trajectories(no_ids)] == [2, 1, 3]
    with pytest.raises(KeyError, match="Cannot split"):
        list(iter_trajectories(steps([0, 1], done=False, with_ids=False)))
    with pytest.raises(KeyError, match="trajectory_key"):
        list(iter_trajectories(data, trajectory_key="nope"))
    with pytest.raises(TypeError, match="TensorDictBase"):
        list(iter_trajectories(torch.zeros(3)))


def test_query_language_predicates_and_required_keys():
    data = steps([0, 0, 1, 2, 2, 2])  # rewards: 1.00 1.01 | 2.02 | 3.03 3.04 3.05
    assert [t.length for t in filter_trajectories(data, traj.reward.sum() > 3)] == [3]
    assert [t.length for t in filter_trajectories(data, (traj.length < 3) & (traj.reward.max() > 1.5))] == [1]
    assert [t.length for t in filter_trajectories(data, ~(traj.reward > 2.5).any())] == [2, 1]
    assert [t.length for t in filter_trajectories(data, traj.observation.first() == 20)] == [1]
    assert len(filter_trajectories(data, lambda t: t.length == 2)) == 1
    with pytest.raises(TypeError, match=r"\.any\(\) or \.all\(\)"):
        filter_trajectories(data, traj.reward > 2.5)
    predicate = (traj.reward.sum() > 1) | (traj.action.last() == 0)
    assert predicate.required_keys() == frozenset({"reward", "action"})
    assert (traj.length > 1).required_keys() == frozenset()
    assert [t.length for t in filter_trajectories(data)] == [2, 1, 3]


def test_buffer_query_reads_in_write_order_across_the_wrap():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(6))
    rb.extend(steps([0, 0, 0, 1, 1]))
    rb.extend(steps([2, 2, 2]))  # rows 5, 0, 1: overwrites the head of trajectory 0
    assert [t.length for t in rb.query()] == [1, 2, 3]
    (third,) = rb.query(traj[("collector", "traj_ids")].first() == 2)
    assert torch.equal(third.observation[:, 0], torch.tensor([0.0, 10.0, 20.0]))


class CountingDouble(Transform):
    """Doubles ``key`` in samples and counts its calls."""

    def __init__(self, key):
        super().__init__(in_keys=[key], out_keys=[key])
        self.calls = 0

    def forward(self, data):
        self.calls += 1
        data = data.copy()
        data[self.in_keys[0]] = data[self.in_keys[0]] * 2
        return data


def test_buffer_query_applies_only_the_transforms_a_predicate_needs():
    doubles_obs = CountingDouble("observation")
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), transform=doubles_obs)
    rb.extend(steps([0, 0, 1, 2, 2, 2]))
    assert rb.query(traj.reward.sum() > 100) == []
    assert doubles_obs.calls == 0
    (kept,) = rb.query(traj.reward.sum() > 3)
    assert doubles_obs.calls == 1 and torch.equal(kept.observation[:, 0], torch.tensor([60.0, 80.0, 100.0]))
    # a plain callable sees transformed values (raw observation 20 of trajectory 1 is 40 once doubled)
    assert [t.length for t in rb.query(lambda t: bool(t.observation.max() > 30))] == [1, 3]
    assert doubles_obs.calls == 2


def test_buffer_query_on_lists_multidim_and_empty_buffers():
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.extend(list(steps([0, 1, 1]).unbind(0)))
    assert [t.length for t in rb.query()] == [1, 2]
    assert TensorDictReplayBuffer(storage=LazyTensorStorage(4)).query() == []
    ints = ReplayBuffer(storage=ListStorage(4))
    ints.extend([1, 2])
    with pytest.raises(TypeError, match="tensordict-backed"):
        ints.query()
    grid = TensorDict(
        {"collector": {"traj_ids": torch.tensor([[0, 0, 1], [5, 5, 5]])}, "obs": torch.arange(6).reshape(2, 3)},
        batch_size=[2, 3],
    )
    rb2 = TensorDictReplayBuffer(storage=LazyTensorStorage(6, ndim=2))
    rb2.extend(grid)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [t.obs.tolist() for t in rb2.query()] == [[0, 1], [2], [3, 4, 5]]
