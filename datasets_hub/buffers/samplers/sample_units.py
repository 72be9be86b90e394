"""What each sampled anchor expands into (TorchRL 0.14's sample units): :class:`SampleUnit`, the identity
:class:`Transition` and the window :class:`Sequence`.

A sampler decides which anchors a batch is built from; a sample unit (``ReplayBuffer(sample_unit=...)``)
decides what each anchor becomes: itself (:class:`Transition`, the default behaviour) or a window of records
around it (:class:`Sequence`, for recurrent learners with burn-in and bootstrap steps). The buffer calls
``expand`` after the sampler and before reading the storage (docs/guide/sampling.md).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from datasets_hub.buffers.samplers.base import as_index
from datasets_hub.buffers.storages import Storage
from datasets_hub.errors import InvalidArgument

NestedKey = Any
_BOUNDARIES = ("pad", "stop", "include_reset")


class SampleUnit:
    """Base contract of a sample unit.

    - ``expand(index, info, storage) -> (index, info)``: the anchor rows a sampler drew (a 1-D int64 tensor)
      and its info become the rows the batch is read from and their info. Info entries with one value per
      anchor must come back with one value per returned row (a unit that changes the number of rows expands
      them); entries it adds with one value per row are written into TensorDict samples. It never writes
      the storage. The buffer reports the expanded rows as the sample's ``"index"``.
    - ``expand_in_buffer(index, info, storage, cursor)`` is what a buffer calls, ``cursor`` being its writer's
      next write row (``None`` for writers without one); by default it is ``expand``. A unit that needs the
      write seam of a circular buffer overrides it.
    """

    def expand(
        self, index: torch.Tensor, info: dict[Any, Any], storage: Storage
    ) -> tuple[torch.Tensor, dict[Any, Any]]:
        raise NotImplementedError

    def expand_in_buffer(
        self, index: torch.Tensor, info: dict[Any, Any], storage: Storage, cursor: int | None
    ) -> tuple[torch.Tensor, dict[Any, Any]]:
        return self.expand(index, info, storage)


class Transition(SampleUnit):
    """The identity unit: every anchor is one record and the info is returned as it came (the buffer's
    behaviour without ``sample_unit``)."""

    def expand(
        self, index: torch.Tensor, info: dict[Any, Any], storage: Storage
    ) -> tuple[torch.Tensor, dict[Any, Any]]:
        return index, info


class Sequence(SampleUnit):
    """Each anchor becomes a window of ``burn_in + length + bootstrap`` records, ``dilation`` rows apart:
    ``burn_in`` before the anchor, the ``length`` records of the learning region starting at it, then
    ``bootstrap`` after (TorchRL 0.14's ``Sequence``). A batch of ``B`` anchors reads ``B * window`` records.

    - Episodes end after the rows whose ``done_key`` flag (one per item, default ``("next", "done")``) is set;
      the write seam of a circular buffer (between the newest and the oldest row: the buffer passes its writer's
      cursor) always separates records, and rows never written are never read. ``done_key=None``: only the seam.
      Called directly, ``expand(index, info, storage)`` takes the rows as written in order from row 0 (true
      until a circular buffer wraps): pass ``cursor=rb.writer.cursor`` for a buffer that wrapped.
    - ``episode_boundary="pad"``: a record beyond the anchor's episode repeats the episode's nearest row and
      is marked invalid. ``"stop"``: the window is moved back (by at most the anchor's distance to its episode's
      first row) so that it ends at the episode's end, then padded if still too long. ``"include_reset"``:
      windows cross episode ends, never the write seam (records beyond it are clamped and invalid).
    - Burn-in never moves the anchor: its records before the episode's start are clamped and invalid.
    - Info added, one value per record: ``"sequence_id"`` (which anchor, ``0..B-1``), ``"step_in_sequence"``,
      ``"learning_mask"`` (True on the ``length`` learning records), ``"validity_mask"`` (False on clamped
      records), ``"anchor_index"`` (the anchor's row: ``update_tensordict_priority`` writes one priority per
      anchor, the max over its valid records). Per-anchor info entries (e.g. ``"_weight"``) are repeated per
      record; scalars pass through.
    - One-dimensional storages whose ``read_key`` serves the done flags (tensor, memmap, list and lazy-stack
      storages); a storage without ``done_key`` is a ``KeyError`` naming it, ``ndim > 1`` a
      ``NotImplementedError``.
    """

    def __init__(
        self,
        length: int,
        episode_boundary: str = "pad",
        done_key: NestedKey | None = ("next", "done"),
        burn_in: int = 0,
        bootstrap: int = 0,
        dilation: int = 1,
    ) -> None:
        for name, value, low in (("length", length, 1), ("burn_in", burn_in, 0), ("bootstrap", bootstrap, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidArgument(f"{name} must be an int >= {low}, got {value!r}")
        if isinstance(dilation, bool) or not isinstance(dilation, int) or dilation < 1:
            raise InvalidArgument(f"dilation must be an int >= 1, got {dilation!r}")
        if episode_boundary not in _BOUNDARIES:
            raise InvalidArgument(
                f"Unknown episode_boundary {episode_boundary!r}: expected one of {', '.join(map(repr, _BOUNDARIES))}"
            )
        if done_key is not None and not isinstance(done_key, str):
            done_key = tuple(done_key)
        self.length, self.episode_boundary, self.done_key = length, episode_boundary, done_key
        self.burn_in, self.bootstrap, self.dilation = burn_in, bootstrap, dilation
        self._cache: tuple[Any, ...] | None = None  # (storage ref, (version, n, oldest), first, last)

    @property
    def window(self) -> int:
        """Records per anchor: ``burn_in + length + bootstrap``."""
        return self.burn_in + self.length + self.bootstrap

    @staticmethod
    def _oldest(storage: Storage, n: int, cursor: int | None) -> int:
        """The row of the oldest record: the write cursor once a circular buffer is full, else (or without a
        cursor) row 0."""
        if n < storage.max_size or cursor is None:  # not wrapped yet, or the caller's rows are in write order
            return 0
        return int(cursor) % n

    def _episode_bounds(self, storage: Storage, n: int, oldest: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Per record in age order (0 = oldest): the age of its episode's first and last record."""
        key = (getattr(storage, "write_version", None), n, oldest)
        cached = self._cache
        if cached is not None and cached[0]() is storage and cached[1] == key and key[0] is not None:
            return cached[2], cached[3]
        ends = torch.zeros(n, dtype=torch.bool)
        ends[-1] = True  # the newest record: the write seam follows it
        if self.done_key is not None and self.episode_boundary != "include_reset":
            try:
                done = storage.read_key(self.done_key)
            except KeyError:
                raise KeyError(
                    f"Sequence: the stored items have no {self.done_key!r} entry: pass done_key=<the key of the "
                    "end-of-episode flags>, or done_key=None to treat the written rows as one trajectory"
                ) from None
            if done.numel() != n:
                raise InvalidArgument(
                    f"Sequence: {self.done_key!r} holds {done.numel()} values for {n} items: one flag per item is needed"
                )
            ends |= torch.roll(done.reshape(n).to(torch.bool), -oldest)
        age = torch.arange(n)
        last = torch.where(ends, age, torch.full_like(age, n))
        last = torch.flip(torch.cummin(torch.flip(last, [0]), 0).values, [0])  # first end at or after each age
        after_end = torch.zeros(n, dtype=torch.int64)
        after_end[1:] = torch.where(ends[:-1], age[1:], torch.zeros_like(age[1:]))
        first = torch.cummax(after_end, 0).values  # the record after the latest end before each age
        self._cache = (weakref.ref(storage), key, first, last)
        return first, last

    def expand_in_buffer(
        self, index: torch.Tensor, info: dict[Any, Any], storage: Storage, cursor: int | None
    ) -> tuple[torch.Tensor, dict[Any, Any]]:
        return self.expand(index, info, storage, cursor=cursor)

    def expand(
        self, index: torch.Tensor, info: dict[Any, Any], storage: Storage, *, cursor: int | None = None
    ) -> tuple[torch.Tensor, dict[Any, Any]]:
        """The window records of the anchor rows ``index`` (see the class docstring); ``cursor``: the next row
        the writer writes, needed once the storage is full."""
        ndim = getattr(storage, "ndim", 1)
        if ndim > 1:
            raise NotImplementedError(f"Sequence expands anchors of one-dimensional storages only, got ndim={ndim}")
        if isinstance(index, tuple):
            raise NotImplementedError("Sequence expands 1-D anchor rows, got a tuple of coordinates")
        anchors = as_index(index).reshape(-1)
        n = len(storage)
        if n == 0:
            raise RuntimeError("Cannot sample from an empty storage: add or extend data first")
        b, window = anchors.numel(), self.window
        oldest = self._oldest(storage, n, cursor)
        age = (anchors - oldest) % n
        if self.episode_boundary == "include_reset" or self.done_key is None:
            to_start, to_stop = age, n - 1 - age
        else:
            first, last = self._episode_bounds(storage, n, oldest)
            to_start, to_stop = age - first[age], last[age] - age
        if self.episode_boundary == "stop":
            shortfall = self.dilation * (self.length + self.bootstrap - 1) - to_stop
            shift = torch.minimum(shortfall.clamp_min(0), to_start)
            age, to_start, to_stop = age - shift, to_start - shift, to_stop + shift
        steps = torch.arange(window)
        offset = ((steps - self.burn_in) * self.dilation).unsqueeze(0)  # [1, window]
        low, high = -to_start.unsqueeze(1), to_stop.unsqueeze(1)
        valid = (offset >= low) & (offset <= high)
        rows = (age.unsqueeze(1) + torch.minimum(torch.maximum(offset, low), high) + oldest) % n
        out: dict[Any, Any] = {}
        for key, value in info.items():
            per_anchor = isinstance(value, torch.Tensor) and value.ndim > 0 and value.shape[0] == b
            out[key] = value.repeat_interleave(window, dim=0) if per_anchor else value
        learning = (steps >= self.burn_in) & (steps < self.burn_in + self.length)
        out["sequence_id"] = torch.arange(b).repeat_interleave(window)
        out["step_in_sequence"] = steps.repeat(b)
        out["learning_mask"] = learning.repeat(b)
        out["validity_mask"] = valid.reshape(-1)
        out["anchor_index"] = anchors.repeat_interleave(window)
        return rows.reshape(-1), out

    def __repr__(self) -> str:
        return (
            f"Sequence(length={self.length}, episode_boundary={self.episode_boundary!r}, done_key={self.done_key!r}, "
            f"burn_in={self.burn_in}, bootstrap={self.bootstrap}, dilation={self.dilation})"
        )
