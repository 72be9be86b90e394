"""The "Python floor" of the sampling benchmark (issue 18): what one ``sample()`` call costs at least in
CPython with our output contract, measured rather than guessed.

:class:`PythonFloor` holds the benchmark's dataset laid out as a hub build lays it out (a ~40-byte packed
record per transition: action, reward, the two stored flags and the episode ordinal; observations once
per episode with ``T + 1`` rows), in anonymous memory, built here from the benchmark's own arrays (never
from a library object). Its samplers are hand-written closures with no checks, no locks, no caches to
validate and no dispatch: a torch draw from a ``torch.Generator``, one ``take`` of the records, one
``take`` of the observations for ``t`` and ``t + 1``, numpy cuts, ``torch.from_numpy`` and an unchecked
TensorDict build. They return exactly the TED batch a ``TensorDictReplayBuffer`` over the build returns
for the same seed (same keys, dtypes, shapes and values): :func:`check_same` proves it once before
anything is timed. The ratio ``TorchRL / floor`` is then the best any Python sampler with this output
could reach on this machine: a target above it is out of reach of per-call work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

#: the record of a transition: action (6 float32), reward (float32), terminated, truncated (bool), the
#: episode ordinal (int32), padded to 8 bytes (the layout a build of this dataset uses)
WIDTH, TERMINATED, TRUNCATED, ORDINAL = 40, 28, 29, 8  # ORDINAL: in int32 items
_AT_T_AND_NEXT = np.array([[0], [1]], dtype=np.int64)


class PythonFloor:
    """The benchmark's dataset (``make_chunk(start, n)`` chunks of TED rows, episodes of ``episode_len``
    rows, ``chunk`` rows per chunk as the benchmark's loader yields them) in build layout, in RAM."""

    def __init__(self, make_chunk: Callable[[int, int], TensorDict], n: int, episode_len: int, chunk: int) -> None:
        if chunk % episode_len or n % episode_len:
            raise ValueError("the floor lays out whole episodes: n and chunk must be multiples of the episode length")
        self.n, self.episode_len = n, episode_len
        num_episodes = n // episode_len
        self.records = np.zeros((n, WIDTH), dtype=np.uint8)
        obs_dim = make_chunk(0, 1)["observation"].shape[1]
        self.frames = np.empty((n + num_episodes, obs_dim), dtype=np.float32)
        for start in range(0, n, chunk):
            td = make_chunk(start, min(chunk, n - start))
            m = td.batch_size[0]
            rec = self.records[start : start + m]
            f = rec.view(np.float32)
            f[:, 0:6] = td["action"].numpy()
            f[:, 6:7] = td["next", "reward"].numpy()
            rec[:, TERMINATED] = td["next", "terminated"].numpy()[:, 0]
            rec[:, TRUNCATED] = td["next", "truncated"].numpy()[:, 0]
            ordinal = td["episode"].numpy()
            rec.view(np.int32)[:, ORDINAL] = ordinal
            obs, nxt = td["observation"].numpy(), td["next", "observation"].numpy()
            for e0 in range(0, m, episode_len):  # T observations, then the final next observation
                e = (start + e0) // episode_len
                lo = start + e0 + e
                self.frames[lo : lo + episode_len] = obs[e0 : e0 + episode_len]
                self.frames[lo + episode_len] = nxt[e0 + episode_len - 1]
        self.start = np.arange(num_episodes, dtype=np.int64) * episode_len  # each episode's first row

    def uniform(self, generator: torch.Generator, batch: int) -> Callable[[], TensorDict]:
        """``RandomSampler`` + ``TensorDictReplayBuffer.sample()``, by hand."""
        n, records, frames, start = self.n, self.records, self.frames, self.start
        new, from_numpy, size = TensorDict._new_unsafe, torch.from_numpy, torch.Size((batch,))

        def sample() -> TensorDict:
            index = torch.randint(n, (batch,), generator=generator)
            rows = index.numpy()
            block = records.take(rows, axis=0)
            episode = block.view(np.int32)[:, ORDINAL].astype(np.int64)
            both = frames.take(rows + episode + _AT_T_AND_NEXT, axis=0)
            f = block.view(np.float32)
            terminated, truncated = (
                block[:, TERMINATED : TERMINATED + 1].copy(),
                block[:, TRUNCATED : TRUNCATED + 1].copy(),
            )
            zeros = np.zeros((3, batch, 1), dtype=np.bool_)
            nxt = new(
                {
                    "observation": from_numpy(both[1]),
                    "reward": from_numpy(f[:, 6:7].copy()),
                    "terminated": from_numpy(terminated.view(np.bool_)),
                    "truncated": from_numpy(truncated.view(np.bool_)),
                    "done": from_numpy((terminated | truncated).view(np.bool_)),
                },
                batch_size=size,
                nested=False,
            )
            return new(
                {
                    "observation": from_numpy(both[0]),
                    "action": from_numpy(f[:, 0:6].copy()),
                    "episode": from_numpy(episode),
                    "step": from_numpy(rows - start.take(episode)),
                    "done": from_numpy(zeros[0]),
                    "terminated": from_numpy(zeros[1]),
                    "truncated": from_numpy(zeros[2]),
                    "index": index,
                    "next": nxt,
                },
                batch_size=size,
                nested=False,
            )

        return sample

    def slices(self, generator: torch.Generator, num_slices: int, slice_len: int) -> Callable[[], TensorDict]:
        """``SliceSampler(num_slices)`` (strict length) + ``TensorDictReplayBuffer.sample()``, by hand:
        uniform over the valid starts (one binary search over the episodes, as for any episode lengths),
        ``next/truncated`` on each slice's last row and ``next/done`` equal to it (this dataset's stored
        done flags lie on episodes' last rows only)."""
        records, frames, start = self.records, self.frames, self.start
        count = np.full(start.size, self.episode_len - slice_len + 1, dtype=np.int64)  # valid starts per episode
        excl = np.cumsum(count) - count
        bounds, base, total = excl[1:].copy(), start - excl, int(count.sum())
        batch = num_slices * slice_len
        offsets = np.arange(slice_len, dtype=np.int64)
        new, from_numpy, size = TensorDict._new_unsafe, torch.from_numpy, torch.Size((batch,))

        def sample() -> TensorDict:
            u = torch.randint(total, (num_slices,), generator=generator).numpy()
            first = u + base.take(bounds.searchsorted(u, side="right"))
            rows = np.add(first[:, None], offsets, out=np.empty((num_slices, slice_len), np.int64)).reshape(-1)
            block = records.take(rows, axis=0)
            episode = block.view(np.int32)[:, ORDINAL].astype(np.int64)
            both = frames.take(rows + episode + _AT_T_AND_NEXT, axis=0)
            f = block.view(np.float32)
            flags = np.zeros((5, batch, 1), dtype=np.bool_)  # root done/terminated/truncated, next truncated/done
            flags[3:].reshape(2, num_slices, slice_len)[:, :, -1] = True
            nxt = new(
                {
                    "observation": from_numpy(both[1]),
                    "reward": from_numpy(f[:, 6:7].copy()),
                    "terminated": from_numpy(block[:, TERMINATED : TERMINATED + 1].copy().view(np.bool_)),
                    "truncated": from_numpy(flags[3]),
                    "done": from_numpy(flags[4]),
                },
                batch_size=size,
                nested=False,
            )
            return new(
                {
                    "observation": from_numpy(both[0]),
                    "action": from_numpy(f[:, 0:6].copy()),
                    "episode": from_numpy(episode),
                    "step": from_numpy(rows - start.take(episode)),
                    "done": from_numpy(flags[0]),
                    "terminated": from_numpy(flags[1]),
                    "truncated": from_numpy(flags[2]),
                    "index": torch.from_numpy(rows),
                    "next": nxt,
                },
                batch_size=size,
                nested=False,
            )

        return sample

    def ensemble(
        self, generator: torch.Generator, member_generators: list[torch.Generator], batch: int
    ) -> Callable[[], TensorDict]:
        """``ReplayBufferEnsemble`` of ``len(member_generators)`` uniform buffers over this dataset, every
        one sampled (``num_buffer_sampled`` = all, drawn uniformly with replacement), by hand: each chosen
        buffer draws its rows once, one read of every row, leaves shaped ``[k, batch // k, ...]``."""
        k = len(member_generators)
        sub = batch // k
        n, records, frames, start = self.n, self.records, self.frames, self.start
        new, from_numpy, size = TensorDict._new_unsafe, torch.from_numpy, torch.Size((k, sub))

        def sample() -> TensorDict:
            ids = torch.randint(k, (k,), generator=generator)
            chosen = ids.tolist()
            draws = {
                b: torch.randint(n, (sub * chosen.count(b),), generator=member_generators[b])
                for b in sorted(set(chosen))
            }
            taken: dict[int, int] = {}
            pieces = []
            for b in chosen:
                j = taken.get(b, 0)
                taken[b] = j + 1
                pieces.append(draws[b][j * sub : (j + 1) * sub])
            index = torch.cat(pieces)
            rows = index.numpy()
            block = records.take(rows, axis=0)
            episode = block.view(np.int32)[:, ORDINAL].astype(np.int64)
            both = frames.take(rows + episode + _AT_T_AND_NEXT, axis=0)
            f = block.view(np.float32)
            terminated, truncated = (
                block[:, TERMINATED : TERMINATED + 1].copy(),
                block[:, TRUNCATED : TRUNCATED + 1].copy(),
            )
            zeros = np.zeros((3, k, sub, 1), dtype=np.bool_)
            obs_dim = both.shape[-1]
            nxt = new(
                {
                    "observation": from_numpy(both[1].reshape(k, sub, obs_dim)),
                    "reward": from_numpy(f[:, 6:7].copy().reshape(k, sub, 1)),
                    "terminated": from_numpy(terminated.view(np.bool_).reshape(k, sub, 1)),
                    "truncated": from_numpy(truncated.view(np.bool_).reshape(k, sub, 1)),
                    "done": from_numpy((terminated | truncated).view(np.bool_).reshape(k, sub, 1)),
                },
                batch_size=size,
                nested=False,
            )
            tree = {
                "observation": from_numpy(both[0].reshape(k, sub, obs_dim)),
                "action": from_numpy(f[:, 0:6].copy().reshape(k, sub, 6)),
                "episode": from_numpy(episode.reshape(k, sub)),
                "step": from_numpy((rows - start.take(episode)).reshape(k, sub)),
                "done": from_numpy(zeros[0]),
                "terminated": from_numpy(zeros[1]),
                "truncated": from_numpy(zeros[2]),
                "next": nxt,
                "index": new(
                    {"index": index.view(k, sub), "buffer_ids": ids.view(k, 1).expand(k, sub).contiguous()},
                    batch_size=size,
                    nested=False,
                ),
            }
            return new(tree, batch_size=size, nested=False)

        return sample


def check_same(label: str, ours: TensorDictBase, floor: TensorDictBase) -> None:
    """Raise unless the two batches hold the same keys, and every leaf the same dtype, shape and values."""
    mine = dict(ours.items(include_nested=True, leaves_only=True))
    hand = dict(floor.items(include_nested=True, leaves_only=True))
    if mine.keys() != hand.keys():
        raise RuntimeError(
            f"{label}: the Python floor returns other keys than our buffer (only ours: "
            f"{sorted(map(str, mine.keys() - hand.keys()))}, only the floor: {sorted(map(str, hand.keys() - mine.keys()))})"
        )
    if ours.batch_size != floor.batch_size:
        raise RuntimeError(f"{label}: batch size {tuple(floor.batch_size)} (floor) != {tuple(ours.batch_size)} (ours)")
    for key, value in mine.items():
        other: Any = hand[key]
        if value.dtype != other.dtype or value.shape != other.shape or not torch.equal(value, other):
            raise RuntimeError(
                f"{label}: the Python floor's {key!r} differs from our buffer's ({other.dtype} {list(other.shape)} "
                f"vs {value.dtype} {list(value.shape)}{'' if value.shape != other.shape else ', values differ'})"
            )
