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
