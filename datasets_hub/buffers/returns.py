"""Discounted returns over episodes: reward-to-go, episode returns, n-step and Monte-Carlo forms.

Episodes are contiguous row ranges ``[start[e], start[e] + length[e])`` of a flat reward column
(the layout of :class:`~datasets_hub.buffers.episode_index.EpisodeIndex`). All functions are
vectorised over rows and episodes (no Python loop over either) and compute in float64.

Definitions, for a row ``t`` of an episode whose rows end before ``end`` (exclusive):

- reward-to-go ``R_t = sum_{k=t}^{end-1} gamma^(k-t) r_k``: the Monte-Carlo return from ``t``. It
  never crosses into the next episode. Without a bootstrap it is the same for a terminated and a
  truncated episode; with ``bootstrap`` values, a truncated (or unfinished) episode adds
  ``gamma^(end-t) * V_e`` and a terminated one adds nothing.
- n-step return ``G_t^n = sum_{k=t}^{t+m-1} gamma^(k-t) r_k`` with ``m = min(n, end - t)`` steps
  (shorter near the episode end). The full target is ``G_t^n + discount * mask * V(s_{t+m})``
  with ``discount = gamma^m``; ``s_{t+m}`` is ``("next", <obs>)`` of row ``t + m - 1`` and
  ``mask`` is False only when the window reaches the end of a *terminated* episode (no value
  after a true end; a time limit is bootstrapped). From a stored reward-to-go column it is one
  subtraction, ``R_t - gamma^m R_{t+m}`` (``R_{t+m}`` only inside the episode): O(1) per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase

from datasets_hub.errors import InvalidParameter

Key = str | tuple[str, ...]


def _check_gamma(gamma: float) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 <= float(gamma) <= 1.0:
        raise InvalidParameter(f"gamma must be a number in [0, 1] (the discount), got {gamma!r}")
    return float(gamma)


def _episodes(start: Any, length: Any, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    start = torch.as_tensor(start, dtype=torch.int64).reshape(-1)
    length = torch.as_tensor(length, dtype=torch.int64).reshape(-1)
    if start.shape != length.shape:
        raise InvalidParameter(f"start {tuple(start.shape)} and length {tuple(length.shape)} must have the same size")
    if length.numel():
        if bool((length < 1).any()):
            raise InvalidParameter("every episode length must be >= 1")
        end = start + length
        if int(start.min()) < 0 or int(end.max()) > n:
            raise InvalidParameter(
                f"episodes reach rows [{int(start.min())}, {int(end.max())}) of a {n}-row reward column"
            )
        if bool((start[1:] < end[:-1]).any()):
            raise InvalidParameter("episodes must be sorted by start and must not overlap")
    return start, length


def _flat_reward(reward: Any) -> torch.Tensor:
    reward = torch.as_tensor(reward)
    if reward.ndim == 2 and reward.shape[1] == 1:
        reward = reward[:, 0]  # the TED [N, 1] column
    if reward.ndim != 1:
        raise InvalidParameter(f"reward must be [N] or [N, 1], got shape {tuple(reward.shape)}")
    return reward.to(torch.float64)


def _row_episode_end(start: torch.Tensor, length: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every row: the end (exclusive) of its episode, and the episode's ordinal (-1: none)."""
    ordinal = torch.repeat_interleave(torch.arange(start.numel()), length)
    end = torch.repeat_interleave(start + length, length)
    if ordinal.numel() == n:  # episodes cover every row (the usual layout): no scatter needed
        return end, ordinal
    rows = torch.repeat_interleave(start, length) + _ranks(length)
    full_ordinal = torch.full((n,), -1, dtype=torch.int64)
    full_ordinal[rows] = ordinal
    full_end = torch.zeros(n, dtype=torch.int64)
    full_end[rows] = end
    return full_end, full_ordinal


def _ranks(length: torch.Tensor) -> torch.Tensor:
    """0, 1, ..., length[e]-1 for every episode, concatenated."""
    if not length.numel():
        return torch.zeros(0, dtype=torch.int64)
    total = int(length.sum())
    offsets = torch.repeat_interleave(torch.cumsum(length, 0) - length, length)
    return torch.arange(total) - offsets


def reward_to_go(
    reward: Any, start: Any, length: Any, gamma: float, *, terminated: Any = None, bootstrap: Any = None
) -> torch.Tensor:
    """``R_t`` for every row (module docstring), float64 ``[N]``; rows outside every episode get 0.

    ``reward``: ``[N]`` or ``[N, 1]``; ``start``/``length``: ``[E]`` episode layout; ``gamma`` in
    ``[0, 1]``. ``bootstrap`` (optional ``[E]``): the value of each episode's final next state,
    added (discounted) only where ``terminated`` (``[E]`` bool, default all False) is False.

    A log-depth scan over the linear recurrence ``R_t = r_t + c_t R_{t+1}`` (``c_t = gamma`` inside
    an episode, 0 at its last row): ``ceil(log2(longest episode))`` vectorised passes, and no
    ``gamma^-t`` rescaling, so it neither overflows nor loses precision on long episodes.
    """
    gamma = _check_gamma(gamma)
    r = _flat_reward(reward)
    n = r.numel()
    start, length = _episodes(start, length, n)
    end, ordinal = _row_episode_end(start, length, n)
    inside = ordinal >= 0
    b = torch.where(inside, r, torch.zeros((), dtype=torch.float64))
    if bootstrap is not None:
        value = torch.as_tensor(bootstrap, dtype=torch.float64).reshape(-1)
        if value.numel() != start.numel():
            raise InvalidParameter(f"bootstrap has {value.numel()} values for {start.numel()} episodes")
        keep = ~_episode_flags(terminated, start.numel(), "terminated")
        last = start + length - 1
        b[last] += gamma * value * keep
    a = (inside & (torch.arange(n) + 1 < end)).to(torch.float64) * gamma  # float64 gamma (not a float32 rounding)
    longest = int(length.max()) if length.numel() else 0
    shift = 1
    while shift < longest:
        # compose each row's affine map with the one `shift` rows later: (a, b) o (a', b') = (a a', b + a b')
        b[:-shift] += a[:-shift] * b[shift:]  # the right side is materialised before the in-place add
        a_next = a[:-shift] * a[shift:]
        a[-shift:] = 0.0
        a[:-shift] = a_next
        shift *= 2
        if not bool(a.any()):
            break
    return b


def _episode_flags(flags: Any, num_episodes: int, name: str) -> torch.Tensor:
    if flags is None:
        return torch.zeros(num_episodes, dtype=torch.bool)
    flags = torch.as_tensor(flags).reshape(-1)
    if flags.dtype != torch.bool:
        raise InvalidParameter(f"{name} must be a bool tensor (one flag per episode), got {flags.dtype}")
    if flags.numel() != num_episodes:
        raise InvalidParameter(f"{name} has {flags.numel()} flags for {num_episodes} episodes")
    return flags


def episode_returns(reward: Any, start: Any, length: Any, gamma: float = 1.0) -> torch.Tensor:
    """Each episode's (discounted) return ``R_start``, float64 ``[E]``; ``gamma=1`` is the plain sum."""
    r = _flat_reward(reward)
    start, length = _episodes(start, length, r.numel())
    if _check_gamma(gamma) == 1.0:  # a segment sum, no scan
        if not start.numel():
            return torch.zeros(0, dtype=torch.float64)
        ordinal = torch.repeat_interleave(torch.arange(start.numel()), length)
        rows = torch.repeat_interleave(start, length) + _ranks(length)
        return torch.zeros(start.numel(), dtype=torch.float64).index_add_(0, ordinal, r[rows])
    return reward_to_go(r, start, length, gamma)[start]


@dataclass(frozen=True)
class NStepReturn:
    """An n-step return per row: target = ``value + discount * mask * V(next_observation[bootstrap_row])``.

    ``value`` float64: the discounted sum of the ``steps`` rewards; ``steps`` int64: ``min(n, end - t)``;
    ``discount`` float64: ``gamma ** steps``; ``bootstrap_row`` int64: the row whose ``next`` state
    is ``s_{t+steps}``; ``mask`` bool: False where the window ends a terminated episode.
    """

    value: torch.Tensor
    steps: torch.Tensor
    discount: torch.Tensor
    bootstrap_row: torch.Tensor
    mask: torch.Tensor


def n_step_from_reward_to_go(
    rtg: torch.Tensor,
    rows: torch.Tensor,
    episode_end: torch.Tensor,
    gamma: float,
    n: int | torch.Tensor,
    *,
    terminated: torch.Tensor | None = None,
) -> NStepReturn:
    """n-step returns of ``rows`` from a stored reward-to-go column, O(1) per row.

    ``rtg``: the ``[N]`` (or ``[N, 1]``) column from :func:`reward_to_go` with the same ``gamma``
    and no bootstrap; ``rows``: ``[B]`` rows; ``episode_end``: ``[B]`` end (exclusive) of each row's
    episode; ``n``: an int >= 1 or a ``[B]`` tensor (per-row n); ``terminated``: ``[B]`` bool, whether
    each row's episode ended by termination (default False: bootstrap at every end). Precision:
    the subtraction loses about ``eps(rtg.dtype) * |R|``; store the column as float64 when that matters.
    """
    gamma = _check_gamma(gamma)
    column = rtg[:, 0] if rtg.ndim == 2 and rtg.shape[1] == 1 else rtg
    rows = torch.as_tensor(rows, dtype=torch.int64, device=column.device).reshape(-1)
    episode_end = torch.as_tensor(episode_end, dtype=torch.int64, device=column.device).reshape(-1)
    n_t = torch.as_tensor(n, dtype=torch.int64, device=column.device)
    if bool((n_t < 1).any()):
        raise InvalidParameter(f"n must be >= 1 (steps of the return), got {n!r}")
    steps = torch.minimum(n_t.expand_as(rows), episode_end - rows)
    if bool((steps < 1).any()):
        raise InvalidParameter("every row must lie inside its episode (rows < episode_end)")
    discount = torch.pow(torch.tensor(gamma, dtype=torch.float64, device=column.device), steps.to(torch.float64))
    inside = rows + steps < episode_end
    later = column[torch.where(inside, rows + steps, rows)].to(torch.float64)
    value = column[rows].to(torch.float64) - torch.where(inside, discount * later, torch.zeros_like(later))
    ended = (
        torch.zeros_like(inside)
        if terminated is None
        else torch.as_tensor(terminated, dtype=torch.bool, device=column.device).reshape(-1)
    )
    return NStepReturn(value, steps, discount, rows + steps - 1, inside | ~ended)


def n_step_returns(
    reward: Any, start: Any, length: Any, gamma: float, n: int | torch.Tensor, *, terminated: Any = None
) -> NStepReturn:
    """n-step returns of every row of every episode (rows outside episodes are dropped: the
    result has ``sum(length)`` rows, in episode order); ``terminated`` is per episode ``[E]``."""
    r = _flat_reward(reward)
    start, length = _episodes(start, length, r.numel())
    rtg = reward_to_go(r, start, length, gamma)
    rows = torch.repeat_interleave(start, length) + _ranks(length)
    ended = _episode_flags(terminated, start.numel(), "terminated")
    return n_step_from_reward_to_go(
        rtg,
        rows,
        torch.repeat_interleave(start + length, length),
        gamma,
        n,
        terminated=torch.repeat_interleave(ended, length),
    )


def monte_carlo_returns(
    reward: Any, start: Any, length: Any, gamma: float, *, terminated: Any = None, bootstrap: Any = None
) -> torch.Tensor:
    """The Monte-Carlo return of every row (Cal-QL's ``mc_return``): :func:`reward_to_go`, with an
    optional value bootstrapped at the end of truncated episodes only."""
    return reward_to_go(reward, start, length, gamma, terminated=terminated, bootstrap=bootstrap)


def episode_layout(td: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
    """``(start, length)`` of the whole episodes in a TED chunk: runs of equal ``episode`` ids, or,
    without that key, runs ending at ``("next", "done")``."""
    from datasets_hub.buffers.episode_index import EpisodeIndex

    keys = td.keys(include_nested=True)
    if "episode" in keys:
        index = EpisodeIndex.from_episode_ids(td.get("episode"))
    elif ("next", "done") in keys:
        index = EpisodeIndex.from_done(td.get(("next", "done")))
    else:
        raise InvalidParameter("cannot find episode boundaries: the chunk has neither 'episode' nor ('next', 'done')")
    return index.start, index.length


class ReturnToGo:
    """Preprocessing function: adds the discounted reward-to-go ``R_t`` (``[n, 1]``) as ``out_key``.

    Use it over whole episodes: ``rb.preprocess(ReturnToGo(0.99))`` or ``load(id,
    preprocess=ReturnToGo(0.99))`` (its ``by = "episode"`` tells preprocess so). ``gamma=1.0`` gives
    Decision Transformer's undiscounted return-to-go. ``dtype`` defaults to the reward's dtype;
    choose ``torch.float64`` when n-step returns are later taken as ``R_t - gamma^n R_{t+n}``.
    Episode boundaries come from ``episode`` ids (or ``("next", "done")``); a chunk must hold
    whole episodes, otherwise the last one is cut short and its values are wrong.
    """

    by = "episode"

    def __init__(
        self,
        gamma: float,
        *,
        reward_key: Key = ("next", "reward"),
        out_key: Key = "return_to_go",
        dtype: torch.dtype | None = None,
    ) -> None:
        self.gamma = _check_gamma(gamma)
        self.reward_key = reward_key
        self.out_key = out_key
        self.dtype = dtype

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        reward = td.get(self.reward_key)
        start, length = episode_layout(td)
        rtg = reward_to_go(reward, start, length, self.gamma)
        td.set(self.out_key, rtg.to(self.dtype or reward.dtype).unsqueeze(-1))
        return td

    def __repr__(self) -> str:
        return f"ReturnToGo(gamma={self.gamma}, reward_key={self.reward_key!r}, out_key={self.out_key!r})"
