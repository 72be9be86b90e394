"""Goal-conditioned sampling: transitions plus goals drawn from their own episode or the dataset (docs/guide/sampling.md).

Offline goal-conditioned agents (OGBench's GCIVL, GCIQL, QRL, CRL, HIQL; HER-style relabelling) do
not train on uniform transitions alone: each sampled step ``t`` gets a goal that is the current
state, a future state of the same episode, or a random state of the dataset. :class:`GoalSampler`
draws them on any storage with episodes (a hub build, or an online buffer), ``O(batch)`` per call.

Times and goals. An episode of ``L`` transitions has states at times ``0 .. L``: the observation of
row ``t`` is the state at time ``t``, and the final state (time ``L``) is ``("next", key)`` of its
last row. A goal is the state at a time ``g`` of some episode, never beyond the episode's *last goal
time* ``E``, which the ``convention`` sets:

- ``convention="ogbench"`` (default): ``E = L - 1``, the last stored observation, as OGBench's
  ``GCDataset``/``HGCDataset`` (``impls/utils/datasets.py``, ``final_state_idxs``): a goal is always
  some row's observation, and at an episode's last transition a future goal is the current state
  (``distance`` 0: a success).
- ``convention="her"``: ``E = L``, the state after the last action (HER's achieved goals are next
  states); the laws below are then the ones this sampler used before it followed OGBench.

With ``left = E - t`` steps to the last goal time:

- ``current``: ``g = t``.
- ``future``: ``g = t + d``, ``d`` drawn by ``future=``:
  ``"geometric"``: ``d = min(D, left)`` with ``P(D = k) = (1 - gamma) gamma^(k-1)`` (``k >= 1``):
  the geometric law truncated at ``E`` (mass beyond lands on ``E``), as OGBench's ``value_geom_sample``;
  ``"uniform"``: with ``"ogbench"``, ``d = round(left - (left - 1) U)`` for ``U`` uniform on ``[0, 1)``
  (``d = left`` when ``left <= 1``): OGBench's rounded continuous law, where the end offsets ``1`` and
  ``left`` get half the weight of the others; with ``"her"``, ``d`` uniform on ``1 .. left``;
  ``"final"``: ``d = left``; ``"episode"``: ``g`` uniform on ``0 .. E`` (any state of the episode,
  past ones included: HER's "episode" strategy). A future goal never leaves the episode.
- ``random``: the observation of a row drawn uniformly from every row in an episode (OGBench's
  ``get_random_idxs``; never a final next state).

The kind is drawn per row with probabilities ``p_current``, ``p_future``, ``p_random`` (sum 1; the same
marginal law as OGBench's two-step draw). HER's strategies are special cases
(``GoalSampler.her("future" | "final" | "episode" | "random")``, which use ``convention="her"``).

What a sample gains (``TensorDictReplayBuffer`` writes the sampler's info into it), ``[B]`` rows:

- ``("goal", *key)`` for each of ``goal_keys`` (default ``("observation",)``): the goal state
  (OGBench's ``value_goals``).
- ``("goal", "distance")`` int64: ``g - t`` when the goal lies in the row's own episode (negative for
  a past state: ``future="episode"``, or a random goal that fell earlier in the same episode), else -1;
  ``("goal", "in_episode")`` bool tells the two apart.
- ``("goal", "kind")`` int64: 0 current, 1 future, 2 random (the kind drawn: a future goal at the
  last goal time can be the current state).
- ``("goal", "success")`` ``[B, 1]`` bool and ``("goal", "reward")`` ``[B, 1]`` float32: success
  is ``success_fn(state, goal)`` when given (``state`` = the row's ``goal_keys`` values, or their
  ``next`` values with ``success_on="next"``), else ``distance == 0`` (the goal *is* the current
  state: OGBench's ``idxs == value_goal_idxs``); reward is ``success - 1`` with
  ``negative_reward=True`` (OGBench's ``gc_negative``), else ``success``. ``1 - success`` is
  OGBench's ``masks``.
- With ``actor=dict(...)`` (its own ``p_*``, ``future``, ``gamma``): a second, independent goal under
  ``"actor_goal"`` (same sub-keys except success/reward), as OGBench's ``actor_goals`` (the
  ``high_actor_goals`` of ``HGCDataset``).
- With ``subgoal_steps=k``: ``("subgoal", *key)``, the state at ``min(t + k, E)``, and
  ``("subgoal", "distance")`` (``HGCDataset``'s ``low_actor_goals``). With an ``actor`` too:
  ``("actor_target", *key)`` and ``("actor_target", "distance")``, the state at ``min(t + k, g)`` for
  an actor goal ``g`` of the row's own trajectory (current or future kind) and ``min(t + k, E)`` for a
  random one (``HGCDataset``'s ``high_actor_targets``).

All draws use the buffer's generator (the same seed gives the same goals): one ``torch.rand`` call
per batch (after an inner sampler's draws) gives every uniform the batch needs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.samplers.episode_rows import AnchorDraw, AnchorSampler, EpisodeRows
from datasets_hub.buffers.storages import Storage

NestedKey = Any
FUTURE_LAWS = ("geometric", "uniform", "final", "episode")
CONVENTIONS = ("ogbench", "her")
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
        self._log_gamma = math.log(self.gamma) if self.future == "geometric" and self.gamma > 0.0 else 0.0
        # the uniforms a draw uses, one row of [B] each, only where the law needs them: the kind (when
        # more than one kind has mass), the future offset, the random goal's row
        self.draws_kind = sum(p > 0.0 for p in probs) > 1
        self.draws_offset = self.p_future > 0.0 and (
            self.future in ("uniform", "episode") or (self.future == "geometric" and self.gamma > 0.0)
        )
        self.draws_random = self.p_random > 0.0
        self.uniforms = int(self.draws_kind) + int(self.draws_offset) + int(self.draws_random)
        self._random_from = self.p_current + self.p_future  # a kind uniform at or above it: a random goal

    def __repr__(self) -> str:
        law = f"geometric(gamma={self.gamma})" if self.future == "geometric" else self.future
        return f"p_current={self.p_current}, p_future={self.p_future}, p_random={self.p_random}, future={law}"

    def offsets(self, u: np.ndarray | None, left: np.ndarray, step: np.ndarray, convention: str) -> np.ndarray:
        """The future law as a map from uniforms to offsets: ``d`` for rows at time ``step`` with ``left``
        steps to their last goal time, from one uniform per row ``u`` (``[B]`` float64 in ``[0, 1)``,
        ``None`` when the law draws none)."""
        if self.future == "geometric":
            if u is None:  # gamma == 0: always the next state (or the last goal time, when t is it)
                return np.minimum(left, 1)
            # inverse CDF: P(floor(log(1-U) / log(gamma)) >= k) = gamma^k; U < 1, so it is finite
            x = 1.0 - u  # exact: U is a multiple of 2**-53
            np.log(x, out=x)
            x /= self._log_gamma
            offset = x.astype(np.int64)  # >= 0: truncation is floor
            offset += 1
            np.minimum(offset, left, out=offset)
            return offset
        if self.future == "final":
            return left.copy()
        if u is None:
            raise RuntimeError(f"future={self.future!r} draws one uniform per row")
        if self.future == "uniform":
            if convention == "ogbench":  # round((t+1) U + E (1-U)) - t, OGBench's law: ends at half weight
                x = u * (left - np.minimum(left, 1))
                np.subtract(left, x, out=x)
                np.rint(x, out=x)
                return x.astype(np.int64)
            x = u * left
            offset = x.astype(np.int64)
            offset += 1
            np.minimum(offset, left, out=offset)
            return offset
        # episode: any time 0 .. E (E = step + left)
        span = step + left
        x = u * (span + 1)
        offset = x.astype(np.int64)
        np.minimum(offset, span, out=offset)
        offset -= step
        return offset

    def draw(
        self,
        eps: EpisodeRows,
        rows: np.ndarray,
        episode: np.ndarray,
        step: np.ndarray,
        left: np.ndarray,
        convention: str,
        u: np.ndarray,
        goal_rows: np.ndarray,
        after: np.ndarray,
        goal_episode: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Goals for anchor ``rows`` of ``episode`` at time ``step`` with ``left`` steps to their last goal
        time (see ``convention``), from the ``self.uniforms`` rows of uniforms ``u`` (``[k, B]`` float64 in
        ``[0, 1)``: kind, offset, random row). Writes where each goal state is read (``goal_rows``,
        ``after``: the state after the row, ``goal_episode``) and returns ``(distance, in_episode, kind)``."""
        b = rows.size
        i = 0
        # row masks; None: the kind has every row (future) or none (random)
        future: np.ndarray | None = None
        random: np.ndarray | None = None
        if self.draws_kind:  # 0 current, 1 future, 2 random: how many of the thresholds u reaches
            uk = u[0]
            i = 1
            if self.p_current == 0.0:  # future or random (both have mass)
                random = uk >= self._random_from
                kind = random.astype(np.int64)
                kind += 1
                future = ~random
            else:
                future = uk >= self.p_current  # not current, for now
                kind = future.astype(np.int64)
                if self.p_random > 0.0:
                    random = uk >= self._random_from
                    kind += random
                    np.greater(future, random, out=future)  # not current and not random
        else:
            only = CURRENT if self.p_current > 0.0 else FUTURE if self.p_future > 0.0 else RANDOM
            kind = np.full(b, only, dtype=np.int64)
            if only == RANDOM:
                random = np.ones(b, dtype=bool)
        if self.p_future == 0.0:
            offset = np.zeros(b, dtype=np.int64)
        else:
            offset = self.offsets(u[i] if self.draws_offset else None, left, step, convention)
        if self.draws_offset:
            i += 1
        if future is not None and self.p_future > 0.0:
            offset *= future  # 0 for current goals, and for random ones (never "after" their row)
        # the goal's time as a row; with "her", time L of an episode is the state after its last row
        np.add(rows, offset, out=goal_rows)
        if convention == "her":
            np.equal(offset, left, out=after)
        else:
            after[...] = False
        if random is None:
            goal_episode[...] = episode
            distance, in_episode = offset, np.ones(b, dtype=bool)
        else:  # a random goal is the state of its own row
            other = eps.rows_at(u[i])
            np.copyto(goal_rows, other, where=random)
            np.copyto(after, False, where=random)
            goal_episode[...] = episode
            np.copyto(goal_episode, eps.locate(other, drawn=True), where=random)
            in_episode = goal_episode == episode
            distance = np.where(in_episode, goal_rows - rows, -1)
        goal_rows -= after  # time L is read as ("next", key) of the episode's last row
        return distance, in_episode, kind


class GoalSampler(AnchorSampler):
    """Transitions plus value goals, optional actor goals and subgoals (see the module docstring).

    ``sampler`` draws the anchor transitions (default: uniform over every row in an episode);
    ``traj_key`` / ``end_key`` say where episodes are in an online buffer (as for ``SliceSampler``).
    ``convention`` (``"ogbench"``, the default, or ``"her"``) sets the last time a goal may take and the
    uniform law, for the value goal, the actor goal and the subgoals alike.
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
        convention: str = "ogbench",
        sampler: Sampler | None = None,
        traj_key: NestedKey | None = None,
        end_key: NestedKey | None = None,
    ) -> None:
        super().__init__(sampler=sampler, traj_key=traj_key, end_key=end_key)
        if convention not in CONVENTIONS:
            raise ValueError(
                f"convention must be one of {CONVENTIONS} (goals end at the last stored observation, as OGBench, "
                f"or at the state after the last action, as HER), got {convention!r}"
            )
        self.convention = convention
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
        the dataset), with ``convention="her"`` (future goals reach the state after the last action).
        Other keywords (``goal_keys``, ``success_fn``, ...) pass through."""
        laws: dict[str, dict[str, Any]] = {
            "future": {"p_future": 1.0, "future": "uniform"},
            "final": {"p_future": 1.0, "future": "final"},
            "episode": {"p_future": 1.0, "future": "episode"},
            "random": {"p_future": 0.0, "p_random": 1.0},
        }
        if strategy not in laws:
            raise ValueError(f"HER strategy must be one of {sorted(laws)}, got {strategy!r}")
        return cls(**{"convention": "her", **laws[strategy], **kwargs})

    # -- sampling ------------------------------------------------------------------------------------
    def _mixes(self) -> list[tuple[str, GoalMix]]:
        return [("goal", self.value)] + ([("actor_goal", self.actor)] if self.actor is not None else [])

    def draw_batch(self, storage: Storage, batch_size: int) -> AnchorDraw:
        """The anchors and every uniform the batch's goals use, from one ``torch.rand`` call."""
        uniforms = sum(m.uniforms for _, m in self._mixes())
        index, rows, episode, info, u, promised = self.anchors_and_uniforms(storage, batch_size, uniforms)
        return AnchorDraw(index, rows, episode, info, u, promised)

    def draws_at(self, rows: int, generator: torch.Generator | None) -> np.ndarray:
        """The uniforms the goals of ``rows`` given anchors use (the layout ``draw_batch`` draws)."""
        uniforms = sum(m.uniforms for _, m in self._mixes())
        return torch.rand((uniforms, rows), dtype=torch.float64, generator=generator).numpy()

    def draw_batches(self, storage: Storage, k: int, batch_size: int) -> AnchorDraw:
        """``k`` batches' anchors and uniforms; one ``torch.rand`` call without an inner sampler."""
        if self.sampler is not None or k == 1:
            return super().draw_batches(storage, k, batch_size)
        uniforms = sum(m.uniforms for _, m in self._mixes())
        index, rows, episode, info, u, promised = self.anchors_and_uniforms(storage, batch_size, uniforms, k)
        return AnchorDraw(index, rows, episode, info, u, promised, batch_size)

    def finish(self, storage: Storage, drawn: AnchorDraw) -> tuple[torch.Tensor, dict[NestedKey, Any], Any]:
        """The goals of ``drawn``'s anchors (row-wise; ``success_fn`` is called once per batch of ``drawn``)."""
        mixes = self._mixes()
        index, rows, episode, info, u = drawn.index, drawn.rows, drawn.episode, drawn.info, drawn.draws
        assert u is not None  # draw_batch always draws the uniforms (maybe zero rows of them)
        eps = self.episodes
        b = rows.size
        her = self.convention == "her"
        step = rows - eps.start.take(episode)
        left = eps.end.take(episode)
        left -= rows  # >= 1: steps to the episode's final state (time L)
        if not her:
            left -= 1  # >= 0: steps to its last stored observation (time L - 1)
        targets = self.subgoal_steps is not None and self.actor is not None
        # every state the batch needs, as (row, after, episode) rows of one [parts, B] block: one read per
        # goal key serves them all; the final state (after) is ("next", key) of the episode's last row
        parts = len(mixes) + (self.subgoal_steps is not None) + targets + (self.success_fn is not None)
        goal_rows = np.empty((parts, b), dtype=np.int64)
        after = np.empty((parts, b), dtype=bool)
        goal_episode = np.empty((parts, b), dtype=np.int64)
        distances, kinds = [], []
        first = 0
        for j, (name, mix) in enumerate(mixes):
            uses = u[first : first + mix.uniforms]
            first += mix.uniforms
            distance, in_episode, kind = mix.draw(
                eps, rows, episode, step, left, self.convention, uses, goal_rows[j], after[j], goal_episode[j]
            )
            distances.append(distance)
            kinds.append(kind)
            info[(name, "distance")] = torch.from_numpy(distance)
            info[(name, "in_episode")] = torch.from_numpy(in_episode)
            info[(name, "kind")] = torch.from_numpy(kind)
        j = len(mixes)
        if self.subgoal_steps is not None:
            ahead = np.minimum(self.subgoal_steps, left)
            aheads = [("subgoal", ahead)]
            if targets:  # HGCDataset's high_actor_targets: toward the actor goal, no further than it
                toward = np.where(kinds[1] == RANDOM, ahead, np.minimum(self.subgoal_steps, distances[1]))
                aheads.append(("actor_target", toward))
            for name, offset in aheads:
                if her:
                    np.equal(offset, left, out=after[j])
                else:
                    after[j] = False
                np.add(rows, offset, out=goal_rows[j])
                goal_rows[j] -= after[j]
                goal_episode[j] = episode
                info[(name, "distance")] = torch.from_numpy(offset)
                j += 1
        if self.success_fn is not None:  # the row's own state (or its next one), read with the goals
            goal_rows[j] = rows
            after[j] = self.success_on == "next"
            goal_episode[j] = episode
        states = self._states(storage, goal_rows.reshape(-1), after.reshape(-1), goal_episode.reshape(-1))
        names = [name for name, _ in mixes] + (["subgoal"] if self.subgoal_steps is not None else [])
        names += ["actor_target"] if targets else []
        for key, value in states.items():
            for j, name in enumerate(names):
                info[(name, *key)] = value[j * b : (j + 1) * b]
        if self.success_fn is None:
            hit = distances[0] == 0
        else:
            own = {key: value[len(names) * b :] for key, value in states.items()}
            goals = {key: value[:b] for key, value in states.items()}
            # one call per batch, as sample() makes it, whatever success_fn does across rows
            per = drawn.batch or b
            flags = [
                self._success(
                    {k: v[i : i + per] for k, v in own.items()}, {k: v[i : i + per] for k, v in goals.items()}, per
                )
                for i in drawn.batches()
            ]
            hit = (flags[0] if len(flags) == 1 else torch.cat(flags)).numpy()
        reward = hit.astype(np.float32)
        if self.negative_reward:
            reward -= 1.0
        info[("goal", "success")] = torch.from_numpy(hit.reshape(b, 1))
        info[("goal", "reward")] = torch.from_numpy(reward.reshape(b, 1))
        return index, info, rows if drawn.promised else None

    def _states(
        self, storage: Storage, rows: np.ndarray, after: np.ndarray, episodes: np.ndarray
    ) -> dict[tuple[str, ...], torch.Tensor]:
        """The goal keys' states at every (row, after) (see ``Storage.gather_states``)."""
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
        return f"GoalSampler({self.value}{actor}{sub}, convention={self.convention!r})"
