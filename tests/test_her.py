"""HERReplayBuffer (datasets_hub/buffers/her.py)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub import HERReplayBuffer, HindsightStrategy, LazyTensorStorage


def episodes(lengths: list[int], start_step: int = 0) -> TensorDict:
    """Episodes back to back; step ``s`` (counted over all of them) achieves goal ``[s, -s]``, wants
    ``[-1, -1]``, and has the stored reward ``-7``."""
    n = sum(lengths)
    step = torch.arange(start_step, start_step + n, dtype=torch.float32)
    achieved = torch.stack([step, -step], -1)
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[torch.tensor(lengths).cumsum(0) - 1] = True
    return TensorDict(
        {
            "achieved_goal": achieved,
            "desired_goal": torch.full((n, 2), -1.0),
            "next": {"desired_goal": torch.full((n, 2), -1.0), "reward": torch.full((n, 1), -7.0), "done": done},
        },
        batch_size=[n],
    )


def reached(td):
    return (td["achieved_goal"] == td["desired_goal"]).all(-1, keepdim=True).float()


def buffer(strategy, her_ratio=1.0, size=100, seed=0):
    return HERReplayBuffer(
        reward_fn=reached,
        storage=LazyTensorStorage(size),
        batch_size=8,
        her_ratio=her_ratio,
        strategy=strategy,
        generator=torch.Generator().manual_seed(seed),
    )


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_goals_come_from_the_sampled_transitions_episode(strategy):
    rb = buffer(strategy)
    rb.extend(episodes([3, 5, 2]))  # steps 0-2 | 3-7 | 8-9
    ends = {0: 2, 1: 2, 2: 2, 3: 7, 4: 7, 5: 7, 6: 7, 7: 7, 8: 9, 9: 9}
    starts = {i: {2: 0, 7: 3, 9: 8}[e] for i, e in ends.items()}
    for _ in range(5):
        batch, info = rb.sample(return_info=True)
        goal_steps = batch["desired_goal"][:, 0].long().tolist()
        for row, goal in zip(info["index"].tolist(), goal_steps, strict=True):
            low = {"future": row, "final": ends[row], "episode": starts[row]}[strategy]
            assert low <= goal <= ends[row]
        assert torch.equal(batch["next", "desired_goal"], batch["desired_goal"])
        # the reward is recomputed: the goal achieved at the sampled row itself gives 1
        assert torch.equal(batch["next", "reward"], reached(batch))


def test_her_ratio_relabels_only_the_head_of_a_batch():
    rb = buffer("final", her_ratio=0.5)
    rb.extend(episodes([10]))
    batch = rb.sample()
    assert (batch["desired_goal"][:4] == torch.tensor([9.0, -9.0])).all()
    assert (batch["desired_goal"][4:] == -1).all() and (batch["next", "reward"][4:] == -7).all()


def test_episodes_follow_write_order_across_the_wrap():
    rb = buffer("final", size=6)
    rb.extend(episodes([4]))  # rows 0-3
    rb.extend(episodes([4], start_step=100))  # rows 4, 5, 0, 1: one episode ending at step 103
    batch, info = rb.sample(return_info=True)
    for row, goal in zip(info["index"].tolist(), batch["desired_goal"][:, 0].tolist(), strict=True):
        assert goal == (3.0 if row in (2, 3) else 103.0)


def test_cache_follows_writes_and_state_round_trips():
    rb = buffer("future")
    rb.extend(episodes([3]))
    rb.sample()
    first = rb.state_dict()["_her"]["last_cache_key"]
    rb.add(episodes([1])[0])
    rb.sample()
    state = rb.state_dict()
    assert state["_her"]["last_cache_key"] != first
    other = buffer("future")
    other.load_state_dict(state)
    assert "_her" in state  # the caller's dict is not changed
    assert other.state_dict()["_her"]["last_cache_key"] == state["_her"]["last_cache_key"]
    assert len(other) == 4


def test_refusals_name_the_problem():
    with pytest.raises(ValueError, match="her_ratio"):
        buffer("future", her_ratio=1.5)
    with pytest.raises(ValueError, match="strategy must be one of"):
        buffer("sometimes")
    assert buffer("random").strategy is HindsightStrategy.RANDOM
    rb = buffer("future")
    rb.extend(episodes([2]).exclude("desired_goal"))
    with pytest.raises(KeyError, match="goal_key='desired_goal'"):
        rb.sample()
    no_done = buffer("future")
    no_done.extend(episodes([2]).exclude(("next", "done")))
    with pytest.raises(KeyError, match="end_key"):
        no_done.sample()
    assert "HERReplayBuffer(strategy='future'" in repr(rb)
