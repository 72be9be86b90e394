"""``HERReplayBuffer``: hindsight goal relabelling at sample time, as TorchRL 0.14's buffer of that name.

A ``TensorDictReplayBuffer`` whose samples have their first ``int(batch_size * her_ratio)`` transitions
relabelled: ``goal_key`` (and ``("next", *goal_key)`` when stored) becomes the ``achieved_goal_key``
value of another row of the same episode, chosen by the strategy, and ``reward_key`` becomes
``reward_fn(relabelled transitions)``. The other transitions keep their stored goals and rewards.

- ``"future"``: a row from the sampled one to the episode's last, uniformly; ``"final"``: the episode's
  last row; ``"episode"``: any row of the episode, uniformly; ``"random"``: any stored row.
- Episodes are cut where ``end_key`` (default ``("next", "done")``) or its ``terminated`` sibling is
  set, and at the newest row. They are read in write order, so an episode written across the wrap
  point of a full storage stays one episode, and one whose head was overwritten keeps what is left.
- The episode table is computed at the first relabelled sample after a write and reused until the
  next write (``_last_cache_key`` changes then); ``state_dict`` carries it under ``"_her"``.
- Relabelling happens on the stored values, before the buffer's transforms run; the goal rows are
  drawn with the sampler's ``generator``. One-dimensional storages only.

:class:`~datasets_hub.buffers.samplers.goal.GoalSampler` is the general form (value and actor goals,
geometric offsets, success functions, any sampler); this buffer gives TorchRL's API for the common case.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import NestedKey, TensorDictBase

from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.samplers.random import RandomSampler
from datasets_hub.buffers.trajectory_bounds import find_start_stop_traj
from datasets_hub.errors import InvalidParameter, WrongDataType

_NO_CACHE: tuple = (-1, -1)


class HindsightStrategy(str, enum.Enum):
    """Where a relabelled goal comes from (see :mod:`datasets_hub.buffers.her`)."""

    FUTURE = "future"
    FINAL = "final"
    EPISODE = "episode"
    RANDOM = "random"


def _as_tuple(key: NestedKey) -> tuple[Any, ...]:
    return key if isinstance(key, tuple) else (key,)


class HERReplayBuffer(TensorDictReplayBuffer):
    """Hindsight Experience Replay over a TensorDict buffer (contract: :mod:`datasets_hub.buffers.her`).

    ``reward_fn(td) -> Tensor`` gets the relabelled transitions (new goals set) and returns their
    rewards, shaped ``[n, 1]`` or ``[n]``. ``her_ratio`` in ``[0, 1]``; ``strategy`` a
    :class:`HindsightStrategy` or its value. Other keywords go to ``TensorDictReplayBuffer``;
    ``sampler`` defaults to ``RandomSampler()``. A sample from a storage without ``goal_key`` or
    ``achieved_goal_key`` raises ``KeyError`` naming them; without either end flag, ``KeyError`` too.
    """

    def __init__(
        self,
        reward_fn: Callable[[TensorDictBase], torch.Tensor],
        *,
        her_ratio: float = 0.8,
        strategy: HindsightStrategy | str = "future",
        goal_key: NestedKey = "desired_goal",
        achieved_goal_key: NestedKey = "achieved_goal",
        reward_key: NestedKey = ("next", "reward"),
        end_key: NestedKey = ("next", "done"),
        sampler: Sampler | None = None,
        **kwargs: Any,
    ) -> None:
        if not callable(reward_fn):
            raise WrongDataType(f"reward_fn must be a callable td -> rewards, got {type(reward_fn).__name__}")
        if isinstance(her_ratio, bool) or not isinstance(her_ratio, (int, float)) or not 0.0 <= her_ratio <= 1.0:
            raise InvalidParameter(
                f"her_ratio must be a fraction in [0, 1] of each batch to relabel, got {her_ratio!r}"
            )
        try:
            self.strategy = HindsightStrategy(strategy)
        except ValueError:
            raise InvalidParameter(
                f"strategy must be one of {[s.value for s in HindsightStrategy]}, got {strategy!r}"
            ) from None
        self.reward_fn = reward_fn
        self.her_ratio = float(her_ratio)
        self.goal_key = goal_key
        self.achieved_goal_key = achieved_goal_key
        self.reward_key = reward_key
        self.end_key = end_key
        self._episodes: dict[str, torch.Tensor] | None = None
        self._last_cache_key: tuple = _NO_CACHE
        super().__init__(sampler=RandomSampler() if sampler is None else sampler, **kwargs)

    @property
    def terminated_key(self) -> NestedKey:
        """The ``terminated`` flag beside ``end_key`` (its last name replaced)."""
        return (*self.end_key[:-1], "terminated") if isinstance(self.end_key, tuple) else "terminated"

    # -- the episode table ----------------------------------------------------------------------

    def _stored(self) -> TensorDictBase:
        """Every stored row, in storage order (a view for tensor storages: only the leaves read are copied)."""
        data = self._storage.get(slice(0, len(self._storage)))
        if self._collate_fn is not None:
            data = self._collate_fn(data)
        if not isinstance(data, TensorDictBase):
            raise WrongDataType(
                f"HERReplayBuffer needs TensorDict transitions, the storage holds {type(data).__name__}"
            )
        return data

    def _episode_table(self) -> dict[str, torch.Tensor]:
        """Per stored row: the first row of its episode and the episode's length; recomputed after writes."""
        key = (len(self._storage), self.write_count)
        if self._episodes is not None and key == self._last_cache_key:
            return self._episodes
        stored = self._stored()
        flags = [stored.get(k, None) for k in (self.end_key, self.terminated_key)]
        present = [f.reshape(-1).bool() for f in flags if f is not None]
        if not present:
            raise KeyError(
                f"HERReplayBuffer finds episodes through end_key={self.end_key!r} or {self.terminated_key!r}, "
                "and the storage has neither: store the done flags, or pass end_key="
            )
        end = present[0] if len(present) == 1 else present[0] | present[1]
        order = self._writer.indices_in_order()
        wrapped = order.numel() > 0 and int(order[0]) != 0
        start, stop, _ = find_start_stop_traj(
            end=end.cpu(), at_capacity=wrapped, cursor=int(order[-1]) if wrapped else None
        )
        table = self._set_episodes(start[:, 0], stop[:, 0], len(end))
        self._last_cache_key = key
        return table

    def _set_episodes(self, starts: torch.Tensor, stops: torch.Tensor, n: int) -> dict[str, torch.Tensor]:
        lengths = (stops - starts) % n + 1
        first_of_row = torch.empty(n, dtype=torch.long)
        length_of_row = torch.empty(n, dtype=torch.long)
        rows = (starts.repeat_interleave(lengths) + _offsets(lengths)) % n
        first_of_row[rows] = starts.repeat_interleave(lengths)
        length_of_row[rows] = lengths.repeat_interleave(lengths)
        self._episodes = {"starts": starts, "stops": stops, "first": first_of_row, "length": length_of_row}
        return self._episodes

    # -- relabelling ----------------------------------------------------------------------------

    def _goal_rows(self, rows: torch.Tensor) -> torch.Tensor:
        generator = self._sampler.generator
        n = len(self._storage)
        if self.strategy is HindsightStrategy.RANDOM:
            return torch.randint(n, rows.shape, generator=generator)
        table = self._episode_table()
        first, length = table["first"][rows], table["length"][rows]
        if self.strategy is HindsightStrategy.FINAL:
            return (first + length - 1) % n
        u = torch.rand(rows.shape, generator=generator)
        if self.strategy is HindsightStrategy.EPISODE:
            step = (u * length).long().clamp(max=length - 1)
        else:  # FUTURE: from this row's own step to the episode's last
            own = (rows - first) % n
            step = own + (u * (length - own)).long().clamp(max=length - own - 1)
        return (first + step) % n

    def _relabel(self, data: TensorDictBase, rows: torch.Tensor) -> TensorDictBase:
        missing = [
            f"{role}={key!r}"
            for role, key in (("goal_key", self.goal_key), ("achieved_goal_key", self.achieved_goal_key))
            if data.get(key, None) is None
        ]
        if missing:
            raise KeyError(f"HERReplayBuffer: the stored transitions have no {' and no '.join(missing)}")
        n_her = int(rows.shape[0] * self.her_ratio)
        if n_her == 0:
            return data
        goal_rows = self._goal_rows(rows[:n_her].cpu())
        achieved = self._stored().get(self.achieved_goal_key)[goal_rows.to(self._device_of(data))]
        for key in (self.goal_key, ("next", *_as_tuple(self.goal_key))):
            current = data.get(key, None)
            if current is not None:
                relabelled = current.clone()
                relabelled[:n_her] = achieved.to(current.dtype)
                data.set(key, relabelled)
        rewards = self.reward_fn(data[:n_her])
        stored = data.get(self.reward_key, None)
        if stored is None:
            raise KeyError(f"HERReplayBuffer writes rewards to reward_key={self.reward_key!r}, which the data lacks")
        updated = stored.clone()
        updated[:n_her] = torch.as_tensor(rewards).reshape(updated[:n_her].shape).to(updated.dtype)
        data.set(self.reward_key, updated)
        return data

    @staticmethod
    def _device_of(data: TensorDictBase) -> torch.device:
        return data.device if data.device is not None else torch.device("cpu")

    def _gather(
        self,
        index: torch.Tensor,
        info: dict[str, Any],
        items: torch.Tensor | None = None,
        rows: np.ndarray | None = None,
    ) -> Any:
        if getattr(self._storage, "ndim", 1) != 1:
            raise NotImplementedError("HERReplayBuffer works on one-dimensional storages (ndim=1)")
        data = super()._gather(index, info, items, rows)
        return self._relabel(data, torch.as_tensor(index).reshape(-1))

    def _plain_gathers(self) -> bool:
        return False  # every batch is relabelled: sample_many and ensembles go through sample()

    # -- state ------------------------------------------------------------------------------------

    def empty(self, empty_write_count: bool = True) -> None:
        super().empty(empty_write_count)
        self._episodes = None
        self._last_cache_key = _NO_CACHE

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        episodes = self._episodes
        state["_her"] = {
            "goal_key": self.goal_key,
            "achieved_goal_key": self.achieved_goal_key,
            "reward_key": self.reward_key,
            "her_ratio": self.her_ratio,
            "strategy": self.strategy.value,
            "episode_starts_cache": None if episodes is None else episodes["starts"],
            "episode_ends_cache": None if episodes is None else episodes["stops"],
            "last_cache_key": self._last_cache_key,
        }
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)  # the caller's dict is left as it was
        her = state.pop("_her", None)
        super().load_state_dict(state)
        self._episodes, self._last_cache_key = None, _NO_CACHE
        if her is not None and her.get("episode_ends_cache") is not None:
            self._set_episodes(her["episode_starts_cache"], her["episode_ends_cache"], len(self._storage))
            self._last_cache_key = tuple(her["last_cache_key"])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(strategy={self.strategy.value!r}, her_ratio={self.her_ratio}, "
            f"goal_key={self.goal_key!r}, achieved_goal_key={self.achieved_goal_key!r}, "
            f"reward_key={self.reward_key!r}, storage={self._storage!r})"
        )


def _offsets(lengths: torch.Tensor) -> torch.Tensor:
    """``[0..l0-1, 0..l1-1, ...]`` for episode lengths ``[l0, l1, ...]``."""
    total = int(lengths.sum())
    ends = torch.cumsum(lengths, 0)
    return torch.arange(total) - (ends - lengths).repeat_interleave(lengths)
