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
        self._thresholds = np.array([self.p_current, self.p_current + self.p_future])
        self._log_gamma = math.log(self.gamma) if self.future == "geometric" and self.gamma > 0.0 else 0.0

    def __repr__(self) -> str:
        law = f"geometric(gamma={self.gamma})" if self.future == "geometric" else self.future
        return f"p_current={self.p_current}, p_future={self.p_future}, p_random={self.p_random}, future={law}"

    def draw(
        self,
        eps: EpisodeRows,
        rows: np.ndarray,
        episode: np.ndarray,
        left: np.ndarray,
        u: np.ndarray,
        generator: torch.Generator | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
        """``(offset, kind, random, other, other_episode)`` for anchor ``rows`` of ``episode`` with
        ``left`` steps to their episode's final state, from the uniforms ``u`` (``[2, B]``: kind,
        offset). ``offset`` is the goal time minus the anchor's for in-episode goals; ``random`` marks
        the rows whose goal is instead the state of row ``other`` (of ``other_episode``); the three
        are ``None`` when no row has a random goal."""
        b = rows.size
        if self.p_future == 1.0:
            kind = np.ones(b, dtype=np.int64)
        else:  # 0 current, 1 future, 2 random: how many thresholds u[0] reaches
            kind = np.searchsorted(self._thresholds, u[0], side="right")
        if self.p_future == 0.0:
            offset = np.zeros(b, dtype=np.int64)
        elif self.future == "geometric":
            if self.gamma == 0.0:
                offset = np.ones(b, dtype=np.int64)
            else:  # inverse CDF: P(floor(log(1-U) / log(gamma)) >= k) = gamma^k; U < 1, so it is finite
                offset = (np.log1p(-u[1]) / self._log_gamma).astype(np.int64)  # >= 0: truncation is floor
                offset += 1
                np.minimum(offset, left, out=offset)
        elif self.future == "uniform":
            offset = (u[1] * left).astype(np.int64)
            offset += 1
            np.minimum(offset, left, out=offset)
        elif self.future == "final":
            offset = left.copy()
        else:  # episode: any state 0..L
            length = eps.length.take(episode)
            offset = np.minimum((u[1] * (length + 1)).astype(np.int64), length)
            offset -= rows - eps.start.take(episode)
        if self.p_current > 0.0 and self.p_future > 0.0:
            offset *= kind != CURRENT
        if self.p_random == 0.0:
            return offset, kind, None, None, None
        random = kind == RANDOM
        if not random.any():
            return offset, kind, None, None, None
        other = eps.draw(b, generator)  # drawn for every row: the stream does not depend on the kinds
        return offset, kind, random, other, eps.locate(other, drawn=True)


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

    # -- sampling ------------------------------------------------------------------------------------
    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[NestedKey, Any]]:
        index, rows, episode, info = self.anchors(storage, batch_size)
        eps = self.episodes
        b = rows.size
        left = eps.end.take(episode) - rows  # >= 1: steps to the episode's final state
        mixes = [("goal", self.value)] + ([("actor_goal", self.actor)] if self.actor is not None else [])
        # every state the batch needs, as (row, after, episode): one read per goal key serves them all;
        # the final state (offset == left) is ("next", key) of the episode's last row
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        distances = []
        for name, mix in mixes:
            u = torch.rand((2, b), dtype=torch.float64, generator=self.generator).numpy()
            offset, kind, random, other, other_episode = mix.draw(eps, rows, episode, left, u, self.generator)
            after = offset == left
            goal_rows = rows + offset
            goal_rows -= after
            if random is None or other is None or other_episode is None:
                goal_episode, in_episode, distance = episode, np.ones(b, dtype=bool), offset
            else:  # a random goal is the state of its own row: never a final state
                after &= ~random
                np.copyto(goal_rows, other, where=random)
                goal_episode = np.where(random, other_episode, episode)
                in_episode = goal_episode == episode
                distance = np.where(random, np.where(in_episode, other - rows, -1), offset)
            parts.append((goal_rows, after, goal_episode))
            distances.append(distance)
            info[(name, "distance")] = torch.from_numpy(distance)
            info[(name, "in_episode")] = torch.from_numpy(in_episode)
            info[(name, "kind")] = torch.from_numpy(kind)
        if self.subgoal_steps is not None:
            ahead = np.minimum(self.subgoal_steps, left)
            after = ahead == left
            parts.append((rows + ahead - after, after, episode))
            info[("subgoal", "distance")] = torch.from_numpy(ahead)
        if self.success_fn is not None:  # the row's own state (or its next one), read with the goals
            parts.append((rows, np.full(b, self.success_on == "next"), episode))
        states = self._states(storage, parts)
        names = [name for name, _ in mixes] + (["subgoal"] if self.subgoal_steps is not None else [])
        for key, value in states.items():
            for j, name in enumerate(names):
                info[(name, *key)] = value[j * b : (j + 1) * b]
        if self.success_fn is None:
            hit = distances[0] == 0
        else:
            own = {key: value[len(names) * b :] for key, value in states.items()}
            goals = {key: value[:b] for key, value in states.items()}
            hit = self._success(own, goals, b).numpy()
        reward = hit.astype(np.float32)
        if self.negative_reward:
            reward -= 1.0
        info[("goal", "success")] = torch.from_numpy(hit.reshape(b, 1))
        info[("goal", "reward")] = torch.from_numpy(reward.reshape(b, 1))
        return index, info

    def _states(
        self, storage: Storage, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    ) -> dict[tuple[str, ...], torch.Tensor]:
        """The goal keys' states at every requested (row, after) of ``parts``, concatenated in order."""
        if len(parts) == 1:
            rows, after, episodes = parts[0]
        else:
            rows, after, episodes = (np.concatenate([p[i] for p in parts]) for i in range(3))
        hint = self.episodes.hint(episodes)
        out = {}
        for key in self.goal_keys:
            try:
                out[key] = storage.gather_states(key, rows, after, **hint)
            except KeyError:
                raise KeyError(
                    f"goal key {'/'.join(key)!r} (and its ('next', ...) value for final states) must be stored: "
                    "pass goal_keys=[...] naming the observation keys goals are made of"
                ) from None
        return out

    def _success(self, state: dict, goals: dict, b: int) -> torch.Tensor:
        fn = self.success_fn
        if fn is None:  # sample() calls this only with a success_fn
            raise RuntimeError("GoalSampler._success needs a success_fn")
        if len(self.goal_keys) == 1:
            key = self.goal_keys[0]
            result = fn(state[key], goals[key])
        else:
            result = fn({_flat(k): v for k, v in state.items()}, {_flat(k): v for k, v in goals.items()})
        success = torch.as_tensor(result)
        if success.shape not in ((b,), (b, 1)):
            raise ValueError(
                f"success_fn returned shape {tuple(success.shape)}; it must return one flag per row ({b},)"
            )
        return success.reshape(-1).to(torch.bool)

    def __repr__(self) -> str:
        actor = f", actor=({self.actor})" if self.actor is not None else ""
        sub = f", subgoal_steps={self.subgoal_steps}" if self.subgoal_steps is not None else ""
        return f"GoalSampler({self.value}{actor}{sub})"
