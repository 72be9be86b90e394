"""The device twin of :class:`~datasets_hub.buffers.samplers.goal.GoalSampler`: goal-conditioned index math on the device.

Anchors (uniform over the rows in an episode, or the device twin of an inner sampler), the goal kind of
each row (current / future / random with the mixture's probabilities), future offsets (geometric,
uniform, final, episode), random goals, subgoals, distances, success and reward are all tensor ops on
the storage's device with host-known shapes; goal states are gathered from the build's per-episode
frames (time ``L`` is the final next observation, one gather). The rules are the host sampler's (see
its module docstring), under either ``convention`` (OGBench's goals end at the last stored observation,
``L - 1``; HER's at ``L``); with the same seed on ``device="cpu"`` the batches equal the host sampler's.
A ``success_fn`` runs on device tensors: it must not synchronise itself.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

import torch

from datasets_hub.buffers.device.samplers import DeviceSampler
from datasets_hub.buffers.device.storage import DeviceStorage
from datasets_hub.buffers.samplers.base import WrapsSampler
from datasets_hub.buffers.storages import Storage
from datasets_hub.errors import InvalidParameter

NestedKey = Any
CURRENT, FUTURE, RANDOM = 0, 1, 2
FUTURE_LAWS = ("geometric", "uniform", "final", "episode")


def _flat(key: tuple[str, ...]) -> NestedKey:
    return key[0] if len(key) == 1 else key


class DeviceGoalMix:
    """One goal distribution (kind probabilities, future law) as the host ``GoalMix`` checked it, with
    the host's layout of uniforms (kind, offset, random row; each only where the law needs it)."""

    def __init__(self, p_current: float, p_future: float, p_random: float, future: str, gamma: float) -> None:
        if future not in FUTURE_LAWS:
            raise ValueError(f"future must be one of {FUTURE_LAWS}, got {future!r}")
        self.p_current, self.p_future, self.p_random = float(p_current), float(p_future), float(p_random)
        self.future, self.gamma = future, float(gamma)
        self.draws_kind = sum(p > 0.0 for p in (self.p_current, self.p_future, self.p_random)) > 1
        self.draws_offset = self.p_future > 0.0 and (
            future in ("uniform", "episode") or (future == "geometric" and self.gamma > 0.0)
        )
        self.draws_random = self.p_random > 0.0
        self.uniforms = int(self.draws_kind) + int(self.draws_offset) + int(self.draws_random)


class _Episodes:
    """The storage's episodes on the device, and uniform draws of rows that lie inside one."""

    def __init__(self, storage: DeviceStorage) -> None:
        host = storage.episode_index()
        dev = storage.device_episode_index()
        if host is None or dev is None or host.num_episodes == 0:
            raise InvalidParameter(
                "goal sampling needs episodes: the device copy has no episode index (move a storage with "
                "episodes, e.g. a hub build, to the device)"
            )
        self.start, self.length = dev.start, dev.length
        cum = torch.cumsum(host.length, 0)
        self.total = int(cum[-1])
        self.dense = bool(host.start[0] == 0) and bool((host.start[1:] == (host.start + host.length)[:-1]).all())
        self.cum = cum.to(storage.device)
        self.first = (cum - host.length).to(storage.device)

    def rows_at(self, u: torch.Tensor) -> torch.Tensor:
        """The rows uniforms ``u`` pick among the rows inside an episode (the host's ``rows_at``)."""
        drawn = torch.clamp_max((u * self.total).to(torch.int64), self.total - 1)
        if self.dense:
            return drawn
        e = torch.searchsorted(self.cum, drawn, right=True)
        return drawn - torch.index_select(self.first, 0, e) + torch.index_select(self.start, 0, e)

    def locate(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.searchsorted(self.start, rows, right=True) - 1


class DeviceGoalSampler(DeviceSampler, WrapsSampler):
    """Goal-conditioned sampling on the device, with the host ``GoalSampler``'s settings and rules."""

    sampler: DeviceSampler | None

    def __init__(
        self,
        value: DeviceGoalMix,
        *,
        actor: DeviceGoalMix | None = None,
        subgoal_steps: int | None = None,
        goal_keys: list[tuple[str, ...]],
        success_fn: Callable[[Any, Any], torch.Tensor] | None = None,
        success_on: str = "observation",
        negative_reward: bool = False,
        convention: str = "ogbench",
        sampler: DeviceSampler | None = None,
    ) -> None:
        if convention not in ("ogbench", "her"):
            raise ValueError(f"convention must be 'ogbench' or 'her', got {convention!r}")
        self.convention = convention
        self.value, self.actor, self.subgoal_steps = value, actor, subgoal_steps
        self.goal_keys = [tuple(k) for k in goal_keys]
        self.success_fn, self.success_on, self.negative_reward = success_fn, success_on, bool(negative_reward)
        self.sampler = sampler
        self._generator: torch.Generator | None = None
        self._storage: Any = None  # a weak reference: a copied sampler (fork) must not copy the data
        self._episodes: _Episodes | None = None

    def update_priority(self, index: Any, priority: Any) -> None:
        if self.sampler is None:
            super().update_priority(index, priority)
        else:
            self.sampler.update_priority(index, priority)

    def _bind(self, storage: Storage) -> tuple[DeviceStorage, _Episodes]:
        st = self._check(storage)
        if self._storage is None or self._storage() is not st or self._episodes is None:
            episodes = _Episodes(st)
            frames = st.device_frame_keys()
            for key in self.goal_keys:
                if key not in frames:
                    raise InvalidParameter(
                        f"goal key {'/'.join(key)!r} is not an observation stored once per episode in this device "
                        "copy: device goal sampling reads goals from a hub build's per-episode frames "
                        "(load(..., device=...)); pass goal_keys naming them, or sample goals on the host"
                    )
            self._storage, self._episodes = weakref.ref(st), episodes
        assert self._episodes is not None
        return st, self._episodes

    def prepare(self, storage: Storage, batch_size: int) -> None:
        st, _ = self._bind(storage)
        if self.sampler is not None:
            self.sampler.prepare(st, batch_size)

    def _draw(
        self,
        mix: DeviceGoalMix,
        eps: _Episodes,
        u: torch.Tensor,
        episode: torch.Tensor,
        step: torch.Tensor,
        length: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b = episode.shape[0]
        i = 0
        if mix.draws_kind:  # as on the host: how many of the thresholds u reaches (random only with mass)
            kind = (u[0] >= mix.p_current).to(torch.int64)
            if mix.p_random > 0.0:
                kind = kind + (u[0] >= mix.p_current + mix.p_future)
            i = 1
        else:
            only = CURRENT if mix.p_current > 0.0 else FUTURE if mix.p_future > 0.0 else RANDOM
            kind = torch.full((b,), only, dtype=torch.int64, device=episode.device)
        left = self._left(step, length)
        if mix.p_future == 0.0:
            time = step
        elif mix.future == "geometric":
            if mix.gamma == 0.0:
                time = step + torch.clamp_max(left, 1)
            else:  # inverse CDF, as on the host: P(floor(log(1-U) / log(gamma)) >= k) = gamma^k
                d = torch.log(1.0 - u[i]) / math.log(mix.gamma)
                time = step + torch.minimum(d.to(torch.int64) + 1, left)
        elif mix.future == "uniform":
            if self.convention == "ogbench":  # OGBench's rounded law, as on the host (half to even)
                x = left - u[i] * (left - torch.clamp_max(left, 1))
                time = step + torch.round(x).to(torch.int64)
            else:
                time = step + torch.minimum((u[i] * left).to(torch.int64) + 1, left)
        elif mix.future == "final":
            time = step + left
        else:  # episode: any time 0 .. E
            end = step + left
            time = torch.minimum((u[i] * (end + 1)).to(torch.int64), end)
        if mix.draws_offset:
            i += 1
        time = torch.where(kind == CURRENT, step, time)
        goal_episode = episode
        if mix.p_random > 0:  # host-known: drawn for every row, whatever the kinds came out to be
            other = eps.rows_at(u[i])
            other_episode = eps.locate(other)
            random = kind == RANDOM
            goal_episode = torch.where(random, other_episode, episode)
            time = torch.where(random, other - torch.index_select(eps.start, 0, other_episode), time)
        return goal_episode, time, kind

    def _left(self, step: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
        """Steps to the last goal time: ``L - 1`` (OGBench's last stored observation) or ``L`` (HER)."""
        return length - step - (1 if self.convention == "ogbench" else 0)

    def _states(
        self, st: DeviceStorage, episode: torch.Tensor, time: torch.Tensor
    ) -> dict[tuple[str, ...], torch.Tensor]:
        rows = st.frame_rows(episode, time)
        assert rows is not None
        return {key: st.gather_frames(key, rows) for key in self.goal_keys}

    def _goal(
        self,
        st: DeviceStorage,
        eps: _Episodes,
        name: str,
        mix: DeviceGoalMix,
        episode: torch.Tensor,
        step: torch.Tensor,
        length: torch.Tensor,
        info: dict[Any, Any],
        u: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[tuple[str, ...], torch.Tensor], torch.Tensor]:
        goal_episode, time, kind = self._draw(mix, eps, u, episode, step, length)
        in_episode = goal_episode == episode
        distance = torch.where(in_episode, time - step, -1)
        states = self._states(st, goal_episode, time)
        for key, value in states.items():
            info[(name, *key)] = value
        info[(name, "distance")] = distance
        info[(name, "in_episode")] = in_episode
        info[(name, "kind")] = kind.to(torch.int64)
        return distance, states, kind

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[Any, Any]]:
        st, eps = self._bind(storage)
        value, actor = self.value, self.actor
        uniforms = value.uniforms + (actor.uniforms if actor is not None else 0)
        # every uniform of the call in one draw, laid out as on the host: [anchors], value goal, actor goal
        if self.sampler is None:
            u = torch.rand((uniforms + 1, batch_size), dtype=torch.float64, generator=self._generator, device=st.device)
            index = eps.rows_at(u[0])
            u = u[1:]
            info: dict[Any, Any] = {}
        else:
            index, inner = self.sampler.sample(st, batch_size)
            info = dict(inner)
            u = torch.rand((uniforms, index.shape[0]), dtype=torch.float64, generator=self._generator, device=st.device)
        episode = eps.locate(index)
        start = torch.index_select(eps.start, 0, episode)
        length = torch.index_select(eps.length, 0, episode)
        step = index - start
        distance, goals, _ = self._goal(st, eps, "goal", value, episode, step, length, info, u[: value.uniforms])
        if self.success_fn is None:
            success = distance == 0
        else:
            prefix = ("next",) if self.success_on == "next" else ()
            state = {k: st.gather_key(_flat((*prefix, *k)), index, episodes=episode) for k in self.goal_keys}
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
        if actor is not None:
            actor_distance, _, actor_kind = self._goal(
                st, eps, "actor_goal", actor, episode, step, length, info, u[value.uniforms :]
            )
        if self.subgoal_steps is not None:
            ahead = torch.clamp_max(self._left(step, length), self.subgoal_steps)
            aheads = [("subgoal", ahead)]
            if actor is not None:  # HGCDataset's high_actor_targets, as on the host
                toward = torch.where(actor_kind == RANDOM, ahead, torch.clamp_max(actor_distance, self.subgoal_steps))
                aheads.append(("actor_target", toward))
            for name, offset in aheads:
                for key, frames in self._states(st, episode, step + offset).items():
                    info[(name, *key)] = frames
                info[(name, "distance")] = offset
        return index, info

    def empty(self) -> None:
        self._storage = self._episodes = None
        if self.sampler is not None:
            self.sampler.empty()
