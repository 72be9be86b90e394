"""The "Python floor" of goal-conditioned sampling (issue 15): what one ``sample()`` call with
``GoalSampler``'s output costs at least in CPython, measured rather than guessed.

:class:`GoalFloor` holds the goal benchmark's dataset laid out as a hub build lays it out (a 48-byte
packed record per transition: 8 float32 of action, the reward, the two stored flags and the episode
ordinal; observations once per episode with ``T + 1`` rows), in anonymous memory (numpy asks for
transparent huge pages for it, as an ``in_memory=True`` build does), built here from the benchmark's
own chunks (never from a library object). :meth:`GoalFloor.sampler` is a hand-written
closure with no checks, no locks, no dispatch and no plan caches, for the benchmark's sampler
(``GoalSampler(p_current, p_future, p_random, future="geometric", gamma=gamma, actor={"p_future": 1.0,
"future": "uniform"}, negative_reward=True)`` on a ``TensorDictReplayBuffer``): the same one
``torch.rand((5, B), float64)`` per call (row 0 the anchors, rows 1-3 the value goal's kind, geometric
offset and random row, row 4 the actor goal's uniform offset), the laws in numpy (OGBench's: goals end at an
episode's last stored observation, geometric offsets truncated there, uniform ones rounded), one ``take`` of the
records, one ``take`` of the frames for every state of the batch (the anchor's, the next one, the
value goal's and the actor goal's), ``torch.from_numpy`` and unchecked TensorDict builds. It returns
exactly the batch the buffer returns for the same seed (keys, dtypes, shapes, values): :func:`check_same`
proves it before anything is timed. ``reference / floor`` is then the best speedup over the reference
that any CPython sampler with this output could reach on this machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import cast

import numpy as np
import torch
from sampling_floor import check_same as same_batch  # one batch against the buffer's, leaf by leaf
from tensordict import TensorDict, TensorDictBase

#: the record of a transition in a build of this dataset: action (8 float32), next/reward (float32),
#: next/terminated and next/truncated (bool), the episode ordinal (int32), padded to 8 bytes
WIDTH, ACTION, REWARD, TERMINATED, TRUNCATED, ORDINAL = 48, 8, 8, 36, 37, 10  # float32 / byte / int32 items


class GoalFloor:
    """The benchmark's dataset (``chunks``: TED chunks of whole episodes of ``episode_len`` steps, in
    order, as the benchmark's loader yields them) in build layout, in RAM."""

    def __init__(self, chunks: Iterable[TensorDict], episode_len: int) -> None:
        records, frames = [], []
        for td in chunks:
            m = td.batch_size[0]
            if m % episode_len:
                raise ValueError("the floor lays out whole episodes: every chunk holds a multiple of episode_len rows")
            rec = np.zeros((m, WIDTH), dtype=np.uint8)
            f = rec.view(np.float32)
            f[:, 0:ACTION] = td["action"].numpy()
            f[:, REWARD] = td["next", "reward"].numpy()[:, 0]
            rec[:, TERMINATED] = td["next", "terminated"].numpy()[:, 0]
            rec[:, TRUNCATED] = td["next", "truncated"].numpy()[:, 0]
            rec.view(np.int32)[:, ORDINAL] = td["episode"].numpy()
            records.append(rec)
            obs, nxt = td["observation"].numpy(), td["next", "observation"].numpy()
            episodes = m // episode_len
            per_episode = np.empty((episodes, episode_len + 1, obs.shape[1]), dtype=np.float32)
            per_episode[:, :-1] = obs.reshape(episodes, episode_len, -1)  # T observations,
            per_episode[:, -1] = nxt[episode_len - 1 :: episode_len]  # then the final next observation
            frames.append(per_episode.reshape(-1, obs.shape[1]))
        self.records = np.concatenate(records)
        self.frames = np.concatenate(frames)
        self.n, self.episode_len = len(self.records), episode_len
        if np.any(self.records.view(np.int32)[:, ORDINAL] != np.arange(self.n) // episode_len):
            raise ValueError("the floor expects episodes numbered 0, 1, ... in order")

    def sampler(
        self,
        generator: torch.Generator,
        batch: int,
        p_current: float = 0.2,
        p_future: float = 0.5,
        gamma: float = 0.99,
    ) -> Callable[[], TensorDict]:
        """``TensorDictReplayBuffer(sampler=GoalSampler(p_current, p_future, 1 - p_current - p_future,
        future="geometric", gamma=gamma, actor={"p_future": 1.0, "future": "uniform"},
        negative_reward=True)).sample(batch)`` over this dataset, by hand (every probability > 0)."""
        if not (p_current > 0.0 and p_future > 0.0 and p_current + p_future < 1.0 and 0.0 < gamma < 1.0):
            raise ValueError("the floor is written for value goals of all three kinds and 0 < gamma < 1")
        total, length = self.n, self.episode_len
        records, frames = self.records, self.frames
        random_from = p_current + p_future  # as GoalMix sums them: the same threshold to the last bit
        log_gamma = math.log(gamma)
        new, from_numpy, size = TensorDict._new_unsafe, torch.from_numpy, torch.Size((batch,))
        rand, f64 = torch.rand, torch.float64
        # the actor goal's constant leaves (future only: kind 1, always in the anchor's episode)
        actor_kind = np.ones(batch, dtype=np.int64)
        actor_in_episode = np.ones(batch, dtype=np.bool_)

        def sample() -> TensorDict:
            u = rand((5, batch), dtype=f64, generator=generator).numpy()
            x = u[0] * total
            rows = x.astype(np.int64)  # floor(u * total): uniform over every row
            episode = rows // length
            step = rows - episode * length
            left = length - 1 - step  # steps to the episode's last stored observation (>= 0)
            at = np.empty((4, batch), dtype=np.int64)  # frame rows: t, t + 1, value goal, actor goal
            base = np.add(rows, episode, out=at[0])  # the state at time t of episode e is frame row t + e
            np.add(base, 1, out=at[1])
            # value goal: the kind from u[1], a geometric offset from u[2], a random row from u[3]
            future = u[1] >= p_current  # future or random, for now
            random = u[1] >= random_from
            kind = np.add(future, random, dtype=np.int64)  # 0 current, 1 future, 2 random
            x = 1.0 - u[2]
            np.log(x, out=x)
            x /= log_gamma
            offset = x.astype(np.int64)
            offset += 1
            np.minimum(offset, left, out=offset)
            offset *= future  # 0 for current goals (random ones are replaced below)
            goal_time = rows + offset
            x = u[3] * total
            other = x.astype(np.int64)  # a random goal is the state of row floor(u * total)
            np.copyto(goal_time, other, where=random)
            goal_episode = np.where(random, other // length, episode)
            in_episode = goal_episode == episode
            distance = np.where(in_episode, goal_time - rows, -1)
            np.add(goal_time, goal_episode, out=at[2])
            # actor goal: OGBench's rounded uniform offset from u[4] (between 1 and left; 0 when left is 0)
            x = u[4] * (left - np.minimum(left, 1))
            np.subtract(left, x, out=x)
            np.rint(x, out=x)
            actor_offset = x.astype(np.int64)
            np.add(base, actor_offset, out=at[3])
            states = frames.take(at, axis=0)  # every state of the batch in one read
            block = records.take(rows, axis=0)  # every per-step leaf in one read
            f = block.view(np.float32)
            terminated = block[:, TERMINATED : TERMINATED + 1].copy().view(np.bool_)
            truncated = block[:, TRUNCATED : TRUNCATED + 1].copy().view(np.bool_)
            hit = distance == 0
            reward = hit.astype(np.float32)
            reward -= 1.0
            zeros = np.zeros((3, batch, 1), dtype=np.bool_)
            nxt = new(
                {
                    "reward": from_numpy(f[:, REWARD : REWARD + 1].copy()),
                    "terminated": from_numpy(terminated),
                    "truncated": from_numpy(truncated),
                    "observation": from_numpy(states[1]),
                    "done": from_numpy(terminated | truncated),
                },
                batch_size=size,
                nested=False,
            )
            goal = new(
                {
                    "distance": from_numpy(distance),
                    "in_episode": from_numpy(in_episode),
                    "kind": from_numpy(kind),
                    "observation": from_numpy(states[2]),
                    "success": from_numpy(hit.reshape(batch, 1)),
                    "reward": from_numpy(reward.reshape(batch, 1)),
                },
                batch_size=size,
                nested=False,
            )
            actor_goal = new(
                {
                    "distance": from_numpy(actor_offset),
                    "in_episode": from_numpy(actor_in_episode.copy()),
                    "kind": from_numpy(actor_kind.copy()),
                    "observation": from_numpy(states[3]),
                },
                batch_size=size,
                nested=False,
            )
            return new(
                {
                    "action": from_numpy(f[:, 0:ACTION].copy()),
                    "observation": from_numpy(states[0]),
                    "episode": from_numpy(episode),
                    "step": from_numpy(step),
                    "done": from_numpy(zeros[0]),
                    "terminated": from_numpy(zeros[1]),
                    "truncated": from_numpy(zeros[2]),
                    "next": nxt,
                    "goal": goal,
                    "actor_goal": actor_goal,
                    "index": from_numpy(rows),
                },
                batch_size=size,
                nested=False,
            )

        return sample

    def batches(self, generator: torch.Generator, batch: int, k: int) -> Callable[[], TensorDict]:
        """``k`` successive batches of :meth:`sampler` stacked ``[k, batch]``: what ``sample_many(k, batch)``
        returns (checked, not timed: the floor is of one call per batch)."""
        sample = self.sampler(generator, batch)

        def stacked() -> TensorDict:
            return cast(TensorDict, torch.stack([sample() for _ in range(k)]))

        return stacked


def check_same(
    ours: Callable[[int], Callable[[], TensorDictBase]],
    floor: Callable[[int], Callable[[], TensorDictBase]],
    seeds: Iterable[int] = (1, 2, 3),
    calls: int = 3,
    label: str = "goals",
) -> None:
    """Raise unless, for every seed, ``calls`` successive batches of ``ours(seed)`` (a buffer's sample
    function, generator seeded with ``seed``) equal those of ``floor(seed)`` leaf by leaf."""
    for seed in seeds:
        mine, hand = ours(seed), floor(seed)
        for call in range(calls):
            same_batch(f"{label} (seed {seed}, call {call})", mine(), hand())
