"""Goal-conditioned sampling: transitions plus goals drawn from their own episode or the dataset (docs/guide/sampling.md).

Offline goal-conditioned agents (OGBench's GCIVL, GCIQL, QRL, CRL, HIQL; HER-style relabelling) do
not train on uniform transitions alone: each sampled step ``t`` gets a goal that is the current
state, a future state of the same episode, or a random state of the dataset. :class:`GoalSampler`
draws them on any storage with episodes (a hub build, or an online buffer), ``O(batch)`` per call.

Times and goals. An episode of ``L`` transitions has states at times ``0 .. L``: the observation of
row ``t`` is the state at time ``t``, and the final state (time ``L``) is ``("next", key)`` of its
last row. A goal is the state at a time ``g`` of some episode:

- ``current``: ``g = t``.
- ``future``: ``g = t + d`` with ``d >= 1`` drawn by ``future=``:
  ``"geometric"``: ``d = min(D, L - t)`` with ``P(D = k) = (1 - gamma) gamma^(k-1)`` (``k >= 1``):
  the geometric law clipped at the episode end, as OGBench's ``GCDataset`` does (mass beyond the
  end lands on the final state); ``"uniform"``: ``d`` uniform on ``1 .. L - t``; ``"final"``:
  ``d = L - t`` (the final state); ``"episode"``: ``g`` uniform on ``0 .. L`` (any state of the
  episode, past ones included: HER's "episode" strategy). A future goal never leaves the episode.
- ``random``: the observation of a row drawn uniformly from every row in an episode.

The kind is drawn per row with probabilities ``p_current``, ``p_future``, ``p_random`` (sum 1).
HER's strategies are special cases (``GoalSampler.her("future" | "final" | "episode" | "random")``).

What a sample gains (``TensorDictReplayBuffer`` writes the sampler's info into it), ``[B]`` rows:

- ``("goal", *key)`` for each of ``goal_keys`` (default ``("observation",)``): the goal state.
- ``("goal", "distance")`` int64: ``g - t`` when the goal lies in the row's own episode (negative for
  a past state: ``future="episode"``, or a random goal that fell earlier in the same episode), else -1;
  ``("goal", "in_episode")`` bool tells the two apart.
- ``("goal", "kind")`` int64: 0 current, 1 future, 2 random.
- ``("goal", "success")`` ``[B, 1]`` bool and ``("goal", "reward")`` ``[B, 1]`` float32: success
  is ``success_fn(state, goal)`` when given (``state`` = the row's ``goal_keys`` values, or their
  ``next`` values with ``success_on="next"``), else ``distance == 0`` (the goal *is* the current
  state: OGBench's rule); reward is ``success - 1`` with ``negative_reward=True`` (OGBench's
  ``gc_negative``), else ``success``. ``1 - success`` is OGBench's bootstrap mask.
- With ``actor=dict(...)`` (its own ``p_*``, ``future``, ``gamma``): a second, independent goal under
  ``"actor_goal"`` (same sub-keys except success/reward), as OGBench's value and actor goals.
- With ``subgoal_steps=k``: ``("subgoal", *key)``, the state at ``min(t + k, L)``, and
  ``("subgoal", "distance")``.

All draws use the buffer's generator (the same seed gives the same goals).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.samplers.episode_rows import AnchorSampler, EpisodeRows
from datasets_hub.buffers.storages import Storage

NestedKey = Any
FUTURE_LAWS = ("geometric", "uniform", "final", "episode")
CURRENT, FUTURE, RANDOM = 0, 1, 2


def _key(key: NestedKey) -> tuple[str, ...]:
    if isinstance(key, str):
        return (key,)
    if isinstance(key, tuple) and key and all(isinstance(k, str) for k in key):
        return key
    raise TypeError(f"a goal key is a string or a tuple of strings, got {key!r}")


def _flat(key: tuple[str, ...]) -> NestedKey:
    return key[0] if len(key) == 1 else key


class GoalMix:
    """One goal distribution: kind probabilities and the law of future offsets (checked once)."""

    def __init__(
        self,
        p_current: float = 0.0,
        p_future: float = 1.0,
        p_random: float = 0.0,
        future: str = "geometric",
        gamma: float = 0.99,
    ) -> None:
        probs = []
        for name, p in (("p_current", p_current), ("p_future", p_future), ("p_random", p_random)):
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
            probs.append(float(p))
        if not math.isclose(sum(probs), 1.0, abs_tol=1e-6):
            raise ValueError(
                f"p_current + p_future + p_random must sum to 1, got {probs[0]} + {probs[1]} + {probs[2]} = {sum(probs)}"
            )
        if future not in FUTURE_LAWS:
            raise ValueError(f"future must be one of {FUTURE_LAWS}, got {future!r}")
        if future == "geometric" and not (isinstance(gamma, (int, float)) and 0.0 <= float(gamma) < 1.0):
            raise ValueError(
                f"future='geometric' needs gamma in [0, 1) (offsets have mean 1 / (1 - gamma)), got {gamma!r}"
            )
        self.p_current, self.p_future, self.p_random = probs
        self.future, self.gamma = future, float(gamma)

    def __repr__(self) -> str:
        law = f"geometric(gamma={self.gamma})" if self.future == "geometric" else self.future
        return f"p_current={self.p_current}, p_future={self.p_future}, p_random={self.p_random}, future={law}"

    def draw(
        self,
        eps: EpisodeRows,
        rows: np.ndarray,
        episode: np.ndarray,
        step: np.ndarray,
        generator: torch.Generator | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(goal_episode, goal_time, kind)`` for anchors at ``step`` of ``episode``."""
        b = rows.size
        length = eps.length[episode]
        u = torch.rand((2, b), dtype=torch.float64, generator=generator).numpy()
        kind = np.where(u[0] < self.p_current, CURRENT, np.where(u[0] < self.p_current + self.p_future, FUTURE, RANDOM))
        left = length - step  # >= 1: the final state is time L
        if self.future == "geometric":
            if self.gamma == 0.0:
                d = np.ones(b, dtype=np.int64)
            else:  # inverse CDF: P(floor(log(1-U) / log(gamma)) >= k) = gamma^k
                with np.errstate(divide="ignore"):
                    d = 1 + np.floor(np.log1p(-u[1]) / math.log(self.gamma))
                d = np.minimum(d, left).astype(np.int64)
            time = step + d
        elif self.future == "uniform":
            time = step + 1 + np.minimum(np.floor(u[1] * left).astype(np.int64), left - 1)
        elif self.future == "final":
            time = length.copy()
        else:  # episode: any state 0..L
            time = np.minimum(np.floor(u[1] * (length + 1)).astype(np.int64), length)
        time = np.where(kind == CURRENT, step, time)
        goal_episode = episode.copy()
        random = kind == RANDOM
        if random.any():
            other = eps.draw(b, generator)  # drawn for every row: the stream does not depend on the kinds
            other_episode = eps.locate(other)
            goal_episode = np.where(random, other_episode, goal_episode)
            time = np.where(random, other - eps.start[other_episode], time)
        return goal_episode, time.astype(np.int64), kind


class GoalSampler(AnchorSampler):
    """Transitions plus value goals, optional actor goals and subgoals (see the module docstring).

    ``sampler`` draws the anchor transitions (default: uniform over every row in an episode);
    ``traj_key`` / ``end_key`` say where episodes are in an online buffer (as for ``SliceSampler``).
    """

    def __init__(
        self,
        p_current: float = 0.0,
        p_future: float = 1.0,
        p_random: float = 0.0,
        *,
        future: str = "geometric",
        gamma: float = 0.99,
        actor: dict[str, Any] | None = None,
        subgoal_steps: int | None = None,
        goal_keys: Iterable[NestedKey] = ("observation",),
        success_fn: Callable[[Any, Any], torch.Tensor] | None = None,
        success_on: str = "observation",
        negative_reward: bool = False,
        sampler: Sampler | None = None,
        traj_key: NestedKey | None = None,
        end_key: NestedKey | None = None,
    ) -> None:
        super().__init__(sampler=sampler, traj_key=traj_key, end_key=end_key)
        self.value = GoalMix(p_current, p_future, p_random, future, gamma)
        if actor is not None:
            if not isinstance(actor, dict):
                raise TypeError("actor must be a dict of GoalMix settings, e.g. dict(p_future=1.0, future='uniform')")
            self.actor: GoalMix | None = GoalMix(**actor)
        else:
            self.actor = None
        if subgoal_steps is not None and (
            isinstance(subgoal_steps, bool) or not isinstance(subgoal_steps, int) or subgoal_steps < 1
        ):
            raise ValueError(f"subgoal_steps must be a positive int (steps ahead), got {subgoal_steps!r}")
        self.subgoal_steps = subgoal_steps
        if isinstance(goal_keys, str):
            goal_keys = [goal_keys]
        self.goal_keys = [_key(k) for k in goal_keys]
        if not self.goal_keys:
            raise ValueError("goal_keys must name at least one observation key")
        if success_on not in ("observation", "next"):
            raise ValueError(
                f"success_on must be 'observation' (state at t) or 'next' (state at t+1), got {success_on!r}"
            )
        if success_fn is not None and not callable(success_fn):
            raise TypeError("success_fn must be callable: success_fn(state, goal) -> bool tensor [B]")
        self.success_fn, self.success_on = success_fn, success_on
        self.negative_reward = bool(negative_reward)

    @classmethod
    def her(cls, strategy: str, **kwargs: Any) -> GoalSampler:
        """HER's relabelling strategies: ``"future"`` (a uniformly drawn later state of the episode),
        ``"final"`` (its final state), ``"episode"`` (any of its states), ``"random"`` (any state of
        the dataset). Other keywords (``goal_keys``, ``success_fn``, ...) pass through."""
        laws: dict[str, dict[str, Any]] = {
            "future": {"p_future": 1.0, "future": "uniform"},
            "final": {"p_future": 1.0, "future": "final"},
            "episode": {"p_future": 1.0, "future": "episode"},
            "random": {"p_future": 0.0, "p_random": 1.0},
        }
        if strategy not in laws:
            raise ValueError(f"HER strategy must be one of {sorted(laws)}, got {strategy!r}")
        return cls(**{**laws[strategy], **kwargs})

    # -- gathers ------------------------------------------------------------------------------------
    def _states(self, storage: Storage, episode: np.ndarray, time: np.ndarray) -> dict[NestedKey, torch.Tensor]:
        """The states at ``time`` of ``episode`` for each goal key: rows ``start + time``, and the
        final state (``time == L``) from ``("next", key)`` of the last row."""
        eps = self.episodes
        length = eps.length[episode]
        final = time >= length
        rows = eps.start[episode] + np.minimum(time, length - 1)
        out = {}
        for key in self.goal_keys:
            try:
                value = storage.gather_key(_flat(key), torch.from_numpy(rows), **eps.hint(episode))
                if final.any():
                    where = np.flatnonzero(final)
                    last = storage.gather_key(("next", *key), torch.from_numpy(rows[where]), **eps.hint(episode[where]))
                    value = value.clone() if not value.is_contiguous() else value
                    value[torch.from_numpy(where)] = last
            except KeyError:
                raise KeyError(
                    f"goal key {'/'.join(key)!r} (and its ('next', ...) value for final states) must be stored: "
                    "pass goal_keys=[...] naming the observation keys goals are made of"
                ) from None
            out[key] = value
        return out

    def _goal(
        self,
        storage: Storage,
        name: str,
        mix: GoalMix,
        rows: np.ndarray,
        episode: np.ndarray,
        step: np.ndarray,
        info: dict[NestedKey, Any],
    ) -> tuple[np.ndarray, dict]:
        goal_episode, time, kind = mix.draw(self.episodes, rows, episode, step, self.generator)
        in_episode = goal_episode == episode
        distance = np.where(in_episode, time - step, -1)
        states = self._states(storage, goal_episode, time)
        for key, value in states.items():
            info[(name, *key)] = value
        info[(name, "distance")] = torch.from_numpy(distance.astype(np.int64))
        info[(name, "in_episode")] = torch.from_numpy(in_episode)
        info[(name, "kind")] = torch.from_numpy(kind.astype(np.int64))
        return distance, states

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[NestedKey, Any]]:
        index, rows, episode, info = self.anchors(storage, batch_size)
        eps = self.episodes
        step = rows - eps.start[episode]
        distance, goals = self._goal(storage, "goal", self.value, rows, episode, step, info)
        if self.success_fn is None:
            success = torch.from_numpy(distance == 0)
        else:
            prefix = ("next",) if self.success_on == "next" else ()
            hint = eps.hint(episode)
            state = {k: storage.gather_key(_flat((*prefix, *k)), index, **hint) for k in self.goal_keys}
            if len(self.goal_keys) == 1:
                key = self.goal_keys[0]
                result = self.success_fn(state[key], goals[key])
            else:
                result = self.success_fn(
                    {_flat(k): v for k, v in state.items()}, {_flat(k): v for k, v in goals.items()}
                )
            success = torch.as_tensor(result)
            if success.shape not in ((batch_size,), (batch_size, 1)):
                raise ValueError(
                    f"success_fn returned shape {tuple(success.shape)}; it must return one flag per row ({batch_size},)"
                )
            success = success.reshape(-1).to(torch.bool)
        success = success.reshape(-1, 1)
        info[("goal", "success")] = success
        info[("goal", "reward")] = success.to(torch.float32) - (1.0 if self.negative_reward else 0.0)
        if self.actor is not None:
            self._goal(storage, "actor_goal", self.actor, rows, episode, step, info)
        if self.subgoal_steps is not None:
            time = np.minimum(step + self.subgoal_steps, eps.length[episode])
            for key, value in self._states(storage, episode, time).items():
                info[("subgoal", *key)] = value
            info[("subgoal", "distance")] = torch.from_numpy(time - step)
        return index, info

    def __repr__(self) -> str:
        actor = f", actor=({self.actor})" if self.actor is not None else ""
        sub = f", subgoal_steps={self.subgoal_steps}" if self.subgoal_steps is not None else ""
        return f"GoalSampler({self.value}{actor}{sub})"
