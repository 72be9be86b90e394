"""MultiStep: n-step rewards, next entries read ahead, trajectories cut at done and at the batch end."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import datasets_hub as dh
from datasets_hub.buffers.multi_step import MultiStep


def batch(done_at=(2,), steps=6):
    t = torch.arange(steps)
    done = torch.zeros(steps, 1, dtype=torch.bool)
    done[list(done_at)] = True
    return TensorDict(
        {
            "obs": t.float()[:, None],
            "next": {"obs": t.float()[:, None] + 1, "reward": 10.0 ** t.float()[:, None], "done": done},
        },
        [steps],
    )


def test_rewards_sum_within_the_trajectory_and_next_is_read_ahead():
    td = batch()  # trajectory 0: steps 0-2 (done at 2), trajectory 1: steps 3-5 (cut by the batch end)
    out = MultiStep(gamma=0.5, n_steps=2)(td)
    # step 0: r0 + 0.5 r1 = 1 + 5; step 2: the trajectory ends, r2 alone; step 5: the batch ends
    assert out["next", "reward"].squeeze(-1).tolist() == [1 + 5, 10 + 50, 100, 1000 + 5000, 10000 + 50000, 100000]
    assert out["steps_to_next_obs"].tolist() == [2, 2, 1, 2, 2, 1]
    assert out["next", "obs"].squeeze(-1).tolist() == [2, 3, 3, 5, 6, 6]  # obs of t + k
    assert out["gamma"].tolist() == [0.25, 0.25, 0.5, 0.25, 0.25, 0.5]
    assert out["nonterminal"].tolist() == [True, True, False, True, True, False]
    assert torch.equal(out["next", "original_reward"], td["next", "reward"])
    assert torch.equal(out["next", "done"], td["next", "done"])  # done flags stay those of step t
    assert "steps_to_next_obs" not in td.keys()  # the input is not changed


def test_batched_time_last_and_collector_mask():
    td = torch.stack([batch(done_at=(1,)), batch(done_at=(4,))])  # [2, 6]
    td["collector", "mask"] = torch.tensor([[True] * 6, [True, True, True, False, True, True]])
    out = MultiStep(gamma=1.0, n_steps=3)(td)
    assert out["steps_to_next_obs"].tolist() == [[2, 1, 3, 3, 2, 1], [3, 3, 3, 2, 1, 1]]
    assert out["nonterminal"][1].tolist() == [True, True, True, False, False, False]  # masked step 3
    assert out["next", "reward"][0, 2].item() == 100 + 1000 + 10000


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="n_steps >= 1"):
        MultiStep(0.9, 0)
    with pytest.raises(RuntimeError, match="0 < gamma <= 1"):
        MultiStep(1.5, 2)
    with pytest.raises(ValueError, match="expected the batch shape"):
        MultiStep(0.9, 2)(TensorDict({"next": {"done": torch.zeros(3, 2), "reward": torch.zeros(3)}}, [3]))
    assert dh.MultiStep is MultiStep


def _chunk(start: int, stop: int, done_at: tuple[int, ...] = ()) -> TensorDict:
    """Steps start..stop-1 of one stream: observation t, next observation t + 1, reward t."""
    t = torch.arange(start, stop, dtype=torch.float32)
    done = torch.tensor([s in done_at for s in range(start, stop)]).unsqueeze(-1)
    return TensorDict(
        {"obs": t.unsqueeze(-1), "next": {"obs": (t + 1).unsqueeze(-1), "reward": t.unsqueeze(-1), "done": done}},
        [stop - start],
    )


def test_multi_step_transform_holds_back_the_last_steps_until_the_next_write():
    rb = dh.ReplayBuffer(storage=dh.LazyTensorStorage(20), transform=dh.MultiStepTransform(2, 0.5))
    assert rb.extend(_chunk(0, 2)).tolist() == [] and len(rb) == 0, "2 steps: all still awaiting successors"
    assert rb.extend(_chunk(2, 5, done_at=(3,))).tolist() == [0, 1, 2]
    stored = rb[:]
    assert stored["obs"].squeeze(-1).tolist() == [0, 1, 2]
    # step 1 reads across the two writes; step 3 is done, so step 2's return stops there
    assert stored["next", "reward"].squeeze(-1).tolist() == [0.5, 2, 3.5]
    assert stored["next", "obs"].squeeze(-1).tolist() == [2, 3, 4]
    assert stored["next", "original_reward"].squeeze(-1).tolist() == [0, 1, 2]
    assert stored["steps_to_next_obs"].tolist() == [2, 2, 2]
    rb.extend(_chunk(5, 7))
    assert rb[:]["next", "reward"].squeeze(-1).tolist() == [0.5, 2, 3.5, 3, 6.5]
    assert rb[:]["nonterminal"].tolist() == [True, True, True, False, True]


def test_multi_step_transform_leaves_samples_alone_and_checks_n_steps():
    t = dh.MultiStepTransform(3, 0.9)
    td = _chunk(0, 4)
    assert t(td) is td
    with pytest.raises(dh.InvalidArgument, match="n_steps"):
        t.n_steps = 0
    with pytest.raises(dh.InvalidArgument, match="n_steps"):
        dh.MultiStepTransform(0, 0.9)
    with pytest.raises(dh.WrongDataType, match="batch shape"):
        t.inv(td[0])
