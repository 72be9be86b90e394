"""Reward/observation alignment: is ``reward[t]`` the reward of the step from ``s[t]`` to ``s[t+1]``?

Rewards are functions of states: the reward of transition t is best explained by the state it leads
to, ``s[t+1]`` (and by the change ``s[t+1] - s[t]``). When the rows are shifted by one step, the
reward is better explained by ``s[t]`` (it belongs to the previous transition: RoboSet's
``rewards[0]`` is the value at reset) or by ``s[t+2]`` (it belongs to the next one). The check fits
one least-squares model per lag (the state, its square and its change, standardised) on the same
rows (at most :data:`MAX_ROWS`, spread over the rows read) and compares how much of the reward's
variance each explains. It reports only a clear winner other than lag 0: a lag that explains at least
half of the variance, 10 points more than lag 0, and leaves at most half of lag 0's unexplained variance. Rewards that no lag explains (sparse, or from hidden state) give no finding.
"""

from __future__ import annotations

import numpy as np

from datasets_hub.doctor.findings import Finding, Severity, defect
from datasets_hub.doctor.steps import StepTable

FAMILY = "alignment"

REWARD_SHIFTED = defect(
    "reward-shifted",
    FAMILY,
    Severity.WARNING,
    "reward[t] is explained much better by the state one step before or after s[t+1] than by s[t+1]",
    "the reward is credited to the wrong action: value estimates and advantages lag the behaviour by one "
    "step, and the last reward of an episode is lost or made up",
)

#: at most this many state dimensions enter the fit (the most variable ones)
MAX_DIMS = 32
#: at most this many rows enter the fit (evenly spaced over the rows read): plenty for ~100 features
MAX_ROWS = 20_000
LAGS = (-1, 0, 1)


def _stack(parts: list[np.ndarray], n: int) -> np.ndarray:
    return np.concatenate([np.asarray(v, dtype=np.float64).reshape(n, -1) for v in parts], axis=1)


def _r2(features: np.ndarray, target: np.ndarray) -> float:
    std = features.std(axis=0)
    x = (features[:, std > 0] - features[:, std > 0].mean(axis=0)) / std[std > 0]
    x = np.concatenate([x, np.ones((x.shape[0], 1))], axis=1)
    ridge = 1e-6 * x.shape[0]
    coef = np.linalg.solve(x.T @ x + ridge * np.eye(x.shape[1]), x.T @ target)
    residual = target - x @ coef
    return float(1.0 - residual.var() / target.var())


def check(table: StepTable) -> list[Finding]:
    """Needs ``reward`` and numeric observations; episodes of at least 3 steps."""
    if table.reward is None or not table.observations or len(table) < 16:
        return []
    keys = [k for k, v in table.observations.items() if np.issubdtype(np.asarray(v).dtype, np.number)]
    if not keys:
        return []
    n = len(table)
    successors = [table.successor(k, stored=True) for k in keys]
    has_next = np.logical_and.reduce([valid for _, valid in successors])
    reward = np.asarray(table.reward, dtype=np.float64).reshape(n)
    # the sequence s[t-1], s[t], s[t+1], s[t+2] exists for rows with one row before and after in the episode
    same_before = np.zeros(n, bool)
    same_before[1:] = table.episode[1:] == table.episode[:-1]
    same_after = np.zeros(n, bool)
    same_after[:-1] = (table.episode[1:] == table.episode[:-1]) & has_next[1:]  # s[t+2] exists
    rows = np.flatnonzero(same_before & same_after & has_next)
    if rows.size < 16:
        return []
    if rows.size > MAX_ROWS:
        rows = rows[np.linspace(0, rows.size - 1, MAX_ROWS).astype(np.int64)]
    # gathered at the fitted rows only: a million-row source costs what 20,000 rows cost
    seq = {
        -1: _stack([table.observations[k][rows - 1] for k in keys], rows.size),
        0: _stack([table.observations[k][rows] for k in keys], rows.size),
        1: _stack([values[rows] for values, _ in successors], rows.size),
        2: _stack([values[rows + 1] for values, _ in successors], rows.size),
    }
    if not (all(np.isfinite(v).all() for v in seq.values()) and np.isfinite(reward[rows]).all()):
        return []  # the numeric check reports it; a fit through NaN says nothing
    if seq[0].shape[1] > MAX_DIMS:  # the most variable dimensions
        keep = np.sort(np.argsort(seq[0].std(axis=0))[::-1][:MAX_DIMS])
        seq = {k: v[:, keep] for k, v in seq.items()}
    target = reward[rows]
    if target.std() == 0:
        return []
    scores = {}
    for lag in LAGS:
        at, before = seq[lag + 1], seq[lag]
        scores[lag] = _r2(np.concatenate([at, at * at, at - before], axis=1), target)
    best = max(scores, key=lambda k: scores[k])
    if best == 0 or scores[best] < 0.5 or (1 - scores[best]) > 0.5 * (1 - scores[0]) or scores[best] - scores[0] < 0.1:
        return []
    where = (
        "s[t]: the reward belongs to the previous step" if best == -1 else "s[t+2]: the reward belongs to the next step"
    )
    return [
        Finding(
            REWARD_SHIFTED,
            count=int(rows.size),
            unit="rows fitted",
            column="reward",
            detail=f"the state explains {scores[best]:.0%} of the reward's variance at {where}, "
            f"{scores[0]:.0%} at s[t+1] (least squares on {rows.size:,} rows)",
            examples=[(int(table.episode[r]), int(table.step[r])) for r in rows[:1]],
        )
    ]
