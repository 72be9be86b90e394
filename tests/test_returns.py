"""Returns over episodes (datasets_hub.buffers.returns) against plain Python loops."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

import datasets_hub as dh
from datasets_hub.buffers.returns import (
    ReturnToGo,
    episode_layout,
    episode_returns,
    monte_carlo_returns,
    n_step_from_reward_to_go,
    n_step_returns,
    reward_to_go,
)
from datasets_hub.errors import InvalidParameter


def _layout(lengths, gap=0):
    start, pos = [], 0
    for length in lengths:
        start.append(pos)
        pos += length + gap
    return torch.tensor(start), torch.tensor(lengths), pos


def _loop_rtg(r, start, length, gamma, terminated=None, bootstrap=None):
    out = [0.0] * len(r)
    for e, (s, n) in enumerate(zip(start.tolist(), length.tolist(), strict=True)):
        g = 0.0
        if bootstrap is not None and not (terminated is not None and bool(terminated[e])):
            g = float(bootstrap[e])
        for t in reversed(range(s, s + n)):
            g = float(r[t]) + gamma * g
            out[t] = g
    return torch.tensor(out, dtype=torch.float64)


def _loop_nstep(r, start, length, gamma, n, terminated):
    value, steps, boot, mask = [], [], [], []
    for e, (s, L) in enumerate(zip(start.tolist(), length.tolist(), strict=True)):
        for t in range(s, s + L):
            m = min(n, s + L - t)
            value.append(sum(gamma**k * float(r[t + k]) for k in range(m)))
            steps.append(m)
            boot.append(t + m - 1)
            mask.append(not (t + m == s + L and bool(terminated[e])))
    return value, steps, boot, mask


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.99, 1.0])
def test_reward_to_go_matches_loop(gamma):
    g = torch.Generator().manual_seed(0)
    start, length, n = _layout([1, 7, 3, 40, 2, 129], gap=0)
    r = torch.randn(n, generator=g)
    got = reward_to_go(r, start, length, gamma)
    assert torch.allclose(got, _loop_rtg(r, start, length, gamma), atol=1e-9)
    # the TED [N, 1] column gives the same
    assert torch.equal(reward_to_go(r[:, None], start, length, gamma), got)


def test_reward_to_go_gaps_and_long_episode_no_overflow():
    start, length, n = _layout([5, 3000, 4], gap=2)  # rows between episodes belong to none
    r = torch.arange(n, dtype=torch.float32) % 7 - 3
    got = reward_to_go(r, start, length, 0.9)
    assert torch.allclose(got, _loop_rtg(r, start, length, 0.9), atol=1e-9)
    gaps = torch.ones(n, dtype=torch.bool)
    for s, L in zip(start.tolist(), length.tolist(), strict=True):
        gaps[s : s + L] = False
    assert torch.all(got[gaps] == 0) and torch.isfinite(got).all()


def test_terminated_vs_truncated_bootstrap():
    start, length, n = _layout([4, 6, 3])
    r = torch.arange(1, n + 1, dtype=torch.float64)
    terminated = torch.tensor([True, False, True])
    value = torch.tensor([100.0, 200.0, 300.0])
    got = monte_carlo_returns(r, start, length, 0.9, terminated=terminated, bootstrap=value)
    assert torch.allclose(got, _loop_rtg(r, start, length, 0.9, terminated, value))
    # without a bootstrap both kinds of end give the same (pure Monte-Carlo) return
    assert torch.allclose(reward_to_go(r, start, length, 0.9), _loop_rtg(r, start, length, 0.9))
    assert got[start[1]] != reward_to_go(r, start, length, 0.9)[start[1]]  # truncated: value added
    assert got[start[0]] == reward_to_go(r, start, length, 0.9)[start[0]]  # terminated: nothing added


@pytest.mark.parametrize("n", [1, 3, 10])
def test_n_step_matches_loop_incl_short_episodes(n):
    g = torch.Generator().manual_seed(1)
    start, length, rows = _layout([2, 9, 1, 15, 4])  # episodes shorter than n included
    r = torch.randn(rows, generator=g, dtype=torch.float64)
    terminated = torch.tensor([True, False, True, False, True])
    got = n_step_returns(r, start, length, 0.95, n, terminated=terminated)
    value, steps, boot, mask = _loop_nstep(r, start, length, 0.95, n, terminated)
    assert torch.allclose(got.value, torch.tensor(value, dtype=torch.float64), atol=1e-9)
    assert got.steps.tolist() == steps and got.bootstrap_row.tolist() == boot and got.mask.tolist() == mask
    assert torch.allclose(got.discount, 0.95 ** torch.tensor(steps, dtype=torch.float64))


def test_n_step_per_row_n_from_stored_column():
    start, length, rows = _layout([6, 8])
    r = torch.arange(rows, dtype=torch.float64) - 5
    rtg = reward_to_go(r, start, length, 0.8)
    sel = torch.tensor([0, 3, 5, 6, 12, 13])
    end = torch.tensor([6, 6, 6, 14, 14, 14])
    n = torch.tensor([2, 5, 1, 20, 1, 3])
    got = n_step_from_reward_to_go(rtg, sel, end, 0.8, n)
    for i, t in enumerate(sel.tolist()):
        m = min(int(n[i]), int(end[i]) - t)
        assert math.isclose(float(got.value[i]), sum(0.8**k * float(r[t + k]) for k in range(m)), abs_tol=1e-9)
    assert got.mask.all()  # nothing terminated: every end bootstraps


def test_episode_returns():
    start, length, n = _layout([3, 5])
    r = torch.arange(n, dtype=torch.float32)
    assert episode_returns(r, start, length).tolist() == [3.0, 25.0]
    assert torch.allclose(episode_returns(r, start, length, 0.5), _loop_rtg(r, start, length, 0.5)[start])


def test_bad_input_refused():
    with pytest.raises(InvalidParameter, match="gamma"):
        reward_to_go(torch.ones(3), [0], [3], 1.5)
    with pytest.raises(InvalidParameter, match="overlap"):
        reward_to_go(torch.ones(5), [0, 2], [3, 3], 0.9)
    with pytest.raises(InvalidParameter, match="rows"):
        reward_to_go(torch.ones(3), [0], [4], 0.9)
    with pytest.raises(InvalidParameter, match="n must be"):
        n_step_returns(torch.ones(3), [0], [3], 0.9, 0)


def _chunk(lengths, reward):
    episode = torch.repeat_interleave(torch.arange(len(lengths)) + 10, torch.tensor(lengths))
    n = int(sum(lengths))
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[torch.cumsum(torch.tensor(lengths), 0) - 1] = True
    return TensorDict({"episode": episode, "next": {"reward": reward[:, None], "done": done}}, batch_size=[n])


def test_return_to_go_callable_over_episodes():
    lengths = [3, 4, 2]
    reward = torch.arange(9, dtype=torch.float32)
    td = ReturnToGo(0.5)(_chunk(lengths, reward))
    start, length, _ = _layout(lengths)
    expected = _loop_rtg(reward, start, length, 0.5).float()
    assert td["return_to_go"].shape == (9, 1) and td["return_to_go"].dtype == torch.float32
    assert torch.allclose(td["return_to_go"][:, 0], expected)
    # boundaries from done flags when episode ids were dropped
    no_ids = _chunk(lengths, reward).exclude("episode")
    assert torch.equal(episode_layout(no_ids)[1], torch.tensor(lengths))
    assert torch.allclose(ReturnToGo(0.5, dtype=torch.float64)(no_ids)["return_to_go"][:, 0], expected.double())
    assert dh.ReturnToGo is ReturnToGo and ReturnToGo.by == "episode"
