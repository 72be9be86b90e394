"""Rows and their episodes, for samplers that look beyond the row they draw (docs/guide/sampling.md).

Window, goal and return samplers all need, for a batch of rows, the episode each row belongs to
and where that episode starts and ends. :class:`EpisodeRows` gives that in ``O(batch)`` (one
``searchsorted`` over the episodes) from the same episode boundaries slice samplers use: the
build-time index of a hub build, or boundaries derived from ``episode`` ids / ``("next", "done")``
flags of an online buffer, cached until the next write. :class:`AnchorSampler` is the shared base
of those samplers: it draws anchor rows (uniformly over the rows that lie in an episode, or from an
inner sampler the user passes) and forwards the buffer's hooks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.samplers.base import Sampler, WrapsSampler, check_full_batch, concat_info
from datasets_hub.buffers.samplers.slice import SliceSampler
from datasets_hub.buffers.storages import Storage

NestedKey = Any
_BLOCK_SHIFT = 6  # the row -> episode lookup table has one entry per 64 rows


class EpisodeRows:
    """The episodes of one storage and ``O(batch)`` lookups of rows in them.

    ``refresh(storage)`` (cheap when nothing was written since the last call) makes ``start``,
    ``length`` and ``end`` (numpy int64, one entry per episode) describe the storage's current
    episodes; ``locate(rows)`` maps rows to episode ordinals; ``draw(n, generator)`` draws rows
    uniformly among all rows that lie inside an episode.
    """

    def __init__(self, traj_key: NestedKey | None = None, end_key: NestedKey | None = None) -> None:
        # the slice sampler owns boundary derivation for online buffers (ids, done flags, write cursor)
        self._finder = SliceSampler(slice_len=1, traj_key=traj_key, end_key=end_key, truncated_key=None)
        self.index: EpisodeIndex | None = None
        self.version = 0  # grows whenever the episodes change

    # buffer hooks
    def add(self, index: int) -> None:
        self._finder.add(index)

    def extend(self, index: torch.Tensor) -> None:
        self._finder.extend(index)

    def empty(self) -> None:
        self._finder.empty()
        self.index = None

    def state_dict(self) -> dict[str, Any]:
        return self._finder.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._finder.load_state_dict(state_dict)
        self.index = None

    def refresh(self, storage: Storage) -> EpisodeIndex:
        index = self._finder.episodes(storage)
        if index is not self.index:
            self.index = index
            self.start = index.start.numpy().astype(np.int64, copy=False)
            self.length = index.length.numpy().astype(np.int64, copy=False)
            self.end = self.start + self.length
            self.cum = np.cumsum(self.length)  # rows in episodes 0..e inclusive
            self.total = int(self.cum[-1]) if self.cum.size else 0
            self.version += 1
            # rows 0..total-1 all in episodes, in order: a uniform row is a uniform integer
            self.dense = bool(self.start.size) and self.start[0] == 0 and bool((self.start[1:] == self.end[:-1]).all())
            # row -> episode in O(1): the episode holding each block's first row, then at most `_hops`
            # steps forward (episode starts inside one block); no binary search per row
            last = int(self.end[-1]) if self.end.size else 0
            blocks = (last >> _BLOCK_SHIFT) + 1
            first_rows = np.arange(blocks, dtype=np.int64) << _BLOCK_SHIFT
            self._block = np.searchsorted(self.start, first_rows, side="right") - 1
            per_block = np.bincount(self.start >> _BLOCK_SHIFT, minlength=blocks) if self.start.size else np.zeros(1)
            self._hops = int(per_block.max())
            self._next_start = np.append(self.start, np.iinfo(np.int64).max)  # start of episode e + 1, at e + 1
            self._last = last
            # episodes of one length laid end to end (OGBench's fixed-length trajectories): row // length
            same = self.dense and bool((self.length == self.length[0]).all())
            self._period = int(self.length[0]) if same else 0
        # the ordinals are those of storage.episode_index(): storages may use them as a lookup hint
        self.storage_ordinals = storage.episode_index() is index
        return index

    def hint(self, episode: np.ndarray) -> dict[str, Any]:
        """``gather_key`` keywords telling the storage the rows' episode ordinals, when they are its own."""
        return {"episodes": episode} if self.storage_ordinals else {}

    def locate(self, rows: np.ndarray, *, drawn: bool = False) -> np.ndarray:
        """Episode ordinal of each row; a row outside every episode is an error naming it.
        ``drawn=True``: the rows come from :meth:`draw` (inside an episode by construction): no check."""
        if not drawn and rows.size and (int(rows.min()) < 0 or int(rows.max()) >= self._last):
            self._outside(rows[(rows < 0) | (rows >= self._last)])
        if self._period:
            return rows // self._period
        e = self._block.take(rows >> _BLOCK_SHIFT)
        for _ in range(self._hops):
            step = self._next_start.take(e + 1) <= rows
            if not step.any():
                break
            e = e + step
        if not self.dense and not drawn:
            bad = (e < 0) | (rows >= self.end.take(np.maximum(e, 0)))
            if bad.any():
                self._outside(rows[bad])
        return e

    @staticmethod
    def _outside(rows: np.ndarray) -> None:
        raise IndexError(
            f"row {int(rows[0])} lies in no complete episode of the storage: the anchor sampler drew a row that "
            "episode boundaries do not cover (an unfinished episode of an online buffer?)"
        )

    def draw(self, n: int, generator: torch.Generator | None) -> np.ndarray:
        """``n`` rows drawn uniformly among the rows that lie inside an episode."""
        if self.total == 0:
            raise RuntimeError("the buffer holds no episode to sample from: add data first")
        u = torch.randint(self.total, (n,), generator=generator).numpy()
        if self.dense:
            return u
        e = np.searchsorted(self.cum, u, side="right")
        return u - (self.cum[e] - self.length[e]) + self.start[e]

    def rows_at(self, u: np.ndarray) -> np.ndarray:
        """The rows that uniforms ``u`` (float64 in ``[0, 1)``) pick among the rows inside an episode:
        row ``floor(u * total)`` of them (a bias of at most ``total / 2**53`` per row)."""
        if self.total == 0:
            raise RuntimeError("the buffer holds no episode to sample from: add data first")
        x = u * self.total  # < total: u <= 1 - 2**-53 and total < 2**53 (float64 rounding cannot reach it)
        drawn = x.astype(np.int64)
        if self.dense:
            return drawn
        e = np.searchsorted(self.cum, drawn, side="right")
        return drawn - (self.cum[e] - self.length[e]) + self.start[e]


@dataclass
class AnchorDraw:
    """Everything random about one or more batches of an :class:`AnchorSampler`: the anchors
    (``index`` tensor and its numpy ``rows``, their ``episode`` ordinals), the inner sampler's
    ``info``, the sampler's own per-row random ``draws`` (batch along the last axis; ``None`` when it
    draws nothing more), whether the rows are vouched for (``Sampler.sample_rows``) and the size of
    each batch they hold (``None``: one batch of all the rows)."""

    index: torch.Tensor
    rows: np.ndarray
    episode: np.ndarray
    info: dict
    draws: np.ndarray | None
    promised: bool
    batch: int | None = None

    def batches(self) -> range:
        """Where each batch starts among the rows (``range(0, rows, batch)``)."""
        return range(0, self.rows.size, self.batch or max(self.rows.size, 1))

    @staticmethod
    def concat(parts: list[AnchorDraw], batch_size: int) -> AnchorDraw:
        """``parts`` (draws of ``batch_size`` anchors each, in draw order) as one draw."""
        for part in parts:
            check_full_batch(part.rows.size, batch_size)
        first = parts[0]
        if len(parts) == 1:
            return first
        draws = None
        if first.draws is not None:
            draws = np.concatenate([p.draws for p in parts], axis=-1)
        return AnchorDraw(
            torch.cat([p.index for p in parts]),
            np.concatenate([p.rows for p in parts]),
            np.concatenate([p.episode for p in parts]),
            concat_info([p.info for p in parts], batch_size),
            draws,
            all(p.promised for p in parts),
            batch_size,
        )


class AnchorSampler(WrapsSampler):
    """Base of samplers that draw anchor rows and add what they need around them to the sample's info.

    Anchors come from ``sampler`` when given (its index and info are kept, so these samplers compose:
    a goal sampler over slices, windows around prioritized rows), else uniformly from every row that
    lies inside an episode. Episode boundaries come from ``traj_key`` / ``end_key`` as in
    :class:`~datasets_hub.buffers.samplers.slice.SliceSampler`. The buffer's generator reaches the
    inner sampler too, so one seed fixes every draw.

    A subclass implements :meth:`draw_batch` (every random draw of one batch; the default draws the
    anchors alone) and :meth:`finish` (the row-wise rest: reads and arithmetic, no draws). Then
    ``sample`` is ``finish(draw_batch(...))`` and ``sample_many_rows`` (``rb.sample_many(k)``) is one
    ``finish`` over ``k`` draws, with the values of ``k`` calls. A subclass that overrides ``sample``
    instead keeps working, one call per batch.
    """

    def __init__(
        self, sampler: Sampler | None = None, traj_key: NestedKey | None = None, end_key: NestedKey | None = None
    ) -> None:
        if sampler is not None and not isinstance(sampler, Sampler):
            raise TypeError(f"sampler must be a datasets_hub Sampler (or None), got {type(sampler).__name__}")
        self.sampler = sampler
        self.episodes = EpisodeRows(traj_key=traj_key, end_key=end_key)
        self._generator: torch.Generator | None = None

    def add(self, index: int) -> None:
        self.episodes.add(index)
        if self.sampler is not None:
            self.sampler.add(index)

    def extend(self, index: torch.Tensor) -> None:
        self.episodes.extend(index)
        if self.sampler is not None:
            self.sampler.extend(index)

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        if self.sampler is None:
            super().update_priority(index, priority)
        else:
            self.sampler.update_priority(index, priority)

    def empty(self) -> None:
        self.episodes.empty()
        if self.sampler is not None:
            self.sampler.empty()

    def state_dict(self) -> dict[str, Any]:
        return {
            "episodes": self.episodes.state_dict(),
            "sampler": self.sampler.state_dict() if self.sampler is not None else {},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.episodes.load_state_dict(state_dict["episodes"])
        if self.sampler is not None:
            self.sampler.load_state_dict(state_dict["sampler"])

    # -- one batch, or k batches in one pass -----------------------------------------------------------
    def draw_batch(self, storage: Storage, batch_size: int) -> AnchorDraw:
        """Every random draw of one batch, in the order ``sample`` makes them (the default: the anchors
        alone). Subclasses that draw more per row override it and put those draws in ``draws``."""
        index, rows, episode, info, promised = self.anchor_rows(storage, batch_size)
        return AnchorDraw(index, rows, episode, info, None, promised)

    def finish(self, storage: Storage, drawn: AnchorDraw) -> tuple[torch.Tensor, dict[NestedKey, Any], Any]:
        """``sample_rows``'s result for the anchors and draws of ``drawn``. Row-wise: the result for
        several draws concatenated is the concatenation of their results (``sample_many_rows`` relies
        on it), so nothing here may draw from the generator or mix rows."""
        raise NotImplementedError(f"{type(self).__name__} must implement finish() (or its own sample())")

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[NestedKey, Any]]:
        index, info, _ = self.sample_rows(storage, batch_size)
        return index, info

    def sample_rows(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[NestedKey, Any], Any]:
        """``sample`` plus the anchors as numpy rows when they are vouched for (``Sampler.sample_rows``)."""
        if type(self).sample is not AnchorSampler.sample:  # a subclass with its own sample(): no promise
            return Sampler.sample_rows(self, storage, batch_size)
        return self.finish(storage, self.draw_batch(storage, batch_size))

    def sample_many_rows(self, storage: Storage, k: int, batch_size: int) -> tuple[torch.Tensor, dict, Any]:
        """``k`` batches drawn one after the other (the generator's stream of ``k`` ``sample`` calls),
        then the per-row work (goals, returns, windows: reads and index arithmetic) once over all
        ``k * batch_size`` rows. A subclass with its own ``sample`` or ``sample_rows`` gets ``k`` calls."""
        cls = type(self)
        if cls.sample is not AnchorSampler.sample or cls.sample_rows is not AnchorSampler.sample_rows:
            return Sampler.sample_many_rows(self, storage, k, batch_size)
        return self.finish(storage, self.draw_batches(storage, k, batch_size))

    def draw_batches(self, storage: Storage, k: int, batch_size: int) -> AnchorDraw:
        """``k`` :meth:`draw_batch` draws as one (a sampler may draw them in fewer generator calls, as
        long as the values are those of ``k`` draws). Anchors alone, drawn here (no inner sampler), come
        from one draw of ``k * batch_size`` rows: ``torch.randint`` fills in order, so that is the stream
        of ``k`` draws."""
        if self.sampler is None and type(self).draw_batch is AnchorSampler.draw_batch:
            index, rows, episode, info, promised = self.anchor_rows(storage, k * batch_size)
            return AnchorDraw(index, rows, episode, info, None, promised, batch_size)
        return AnchorDraw.concat([self.draw_batch(storage, batch_size) for _ in range(k)], batch_size)

    def draws_at(self, rows: int, generator: torch.Generator | None) -> np.ndarray | None:
        """The per-row draws (``AnchorDraw.draws``) of ``rows`` anchors that are given, not drawn, from
        ``generator`` (the default draws nothing more)."""
        return None

    def sample_at(
        self, storage: Storage, index: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[NestedKey, Any]]:
        """The sample at anchors ``index`` (rows inside an episode): the inner sampler's item at those rows
        (refused by name where it has none), then this sampler's work around them (windows, goals,
        returns), with its per-row draws (goals, a random ``n``) from ``generator``."""
        if len(storage) == 0:
            raise RuntimeError("cannot sample from an empty buffer: add or extend data first")
        info: dict[NestedKey, Any] = {}
        if self.sampler is not None:
            index, inner = self.sampler.sample_at(storage, index, generator)
            info = dict(inner)
        index = torch.as_tensor(index, dtype=torch.int64).reshape(-1)
        rows = index.numpy()
        eps = self.episodes
        eps.refresh(storage)
        drawn = AnchorDraw(index, rows, eps.locate(rows), info, self.draws_at(rows.size, generator), False)
        index, info, _ = self.finish(storage, drawn)
        return index, info

    def anchors(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, np.ndarray, np.ndarray, dict]:
        """``(index, rows, episode, info)``: the anchors as a tensor and numpy rows, their episode
        ordinals, and the inner sampler's info (empty without one)."""
        index, rows, episode, info, _ = self.anchor_rows(storage, batch_size)
        return index, rows, episode, info

    def anchor_rows(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, np.ndarray, np.ndarray, dict, bool]:
        """:meth:`anchors` plus whether the rows are vouched for (valid rows of ``storage``, as
        ``Sampler.sample_rows`` promises them): drawn here, or promised by the inner sampler."""
        if len(storage) == 0:
            raise RuntimeError("Cannot sample from an empty storage: add or extend data first")
        eps = self.episodes
        eps.refresh(storage)
        if self.sampler is None:
            rows = eps.draw(batch_size, self._generator)
            return torch.from_numpy(rows), rows, eps.locate(rows, drawn=True), {}, True
        index, info, rows, promised = self._inner_rows(storage, batch_size)
        return index, rows, self._locate(storage, rows, promised), info, promised

    def anchors_and_uniforms(
        self, storage: Storage, batch_size: int, uniforms: int, batches: int = 1
    ) -> tuple[torch.Tensor, np.ndarray, np.ndarray, dict, np.ndarray, bool]:
        """:meth:`anchor_rows` plus ``uniforms`` rows of ``[B]`` float64 uniforms in ``[0, 1)``, all from
        one draw of the generator (after the inner sampler's): without an inner sampler its first row
        picks the anchors (:meth:`EpisodeRows.rows_at`). ``batches=k`` (only without an inner sampler):
        ``k`` such draws from one generator call (the same stream), as ``k * B`` anchors and
        ``[uniforms, k * B]`` uniforms."""
        if len(storage) == 0:
            raise RuntimeError("Cannot sample from an empty storage: add or extend data first")
        eps = self.episodes
        eps.refresh(storage)
        if self.sampler is None:
            shape = (uniforms + 1, batch_size) if batches == 1 else (batches, uniforms + 1, batch_size)
            u = torch.rand(shape, dtype=torch.float64, generator=self._generator).numpy()
            if batches == 1:
                first, rest = u[0], u[1:]
            else:  # torch fills in order: batch after batch, each [uniforms + 1, B]
                first, rest = u[:, 0].reshape(-1), u[:, 1:].transpose(1, 0, 2).reshape(uniforms, batches * batch_size)
            rows = eps.rows_at(first)
            return torch.from_numpy(rows), rows, eps.locate(rows, drawn=True), {}, rest, True
        if batches != 1:
            raise ValueError("anchors_and_uniforms draws several batches at once only without an inner sampler")
        index, info, rows, promised = self._inner_rows(storage, batch_size)
        u = torch.rand((uniforms, rows.size), dtype=torch.float64, generator=self._generator).numpy()
        return index, rows, self._locate(storage, rows, promised), info, u, promised

    def _inner_rows(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict, np.ndarray, bool]:
        """The inner sampler's index, info, numpy rows, and whether it vouched for them."""
        assert self.sampler is not None
        index, info, rows = self.sampler.sample_rows(storage, batch_size)
        if rows is None:
            index = torch.as_tensor(index, dtype=torch.int64).reshape(-1)
            return index, dict(info), index.numpy(), False
        return index, dict(info), rows, True

    def _locate(self, storage: Storage, rows: np.ndarray, promised: bool) -> np.ndarray:
        """Episode ordinals of the anchors: promised rows of a storage whose every row lies in an
        episode (a build) need no check."""
        eps = self.episodes
        return eps.locate(rows, drawn=promised and eps.dense and eps.total == len(storage))
