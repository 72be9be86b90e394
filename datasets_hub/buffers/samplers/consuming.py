"""``ConsumingSampler``: uniform draws that retire each row after it was returned ``max_sample_count`` times.

TorchRL 0.14's semantics (``ReplayBuffer(consume_after_n_samples=n)`` builds one, see docs/guide/buffers.md):

- Each row carries a sample count. A batch draws distinct live rows uniformly (no row twice in one batch); a row
  whose count reaches ``max_sample_count`` is consumed: no later draw returns it and ``len(rb)`` no longer counts
  it, until a write puts a new item in its slot.
- Consumed slots are queued in a free list, oldest first; a consuming buffer writes new items there before it
  moves its writer's cursor (``datasets_hub/buffers/consumption.py``), so consumed rows are freed for reuse.
- A batch holds ``min(batch_size, live rows)`` items; with no live row, ``sample`` raises ``RuntimeError``.
  ``ran_out`` is True once a batch leaves no live row, so iterating a buffer stops when everything is consumed.
- Rows already in the storage when the sampler first sees it (a prefilled ``TensorStorage``) are live.

The state keeps TorchRL's attribute and ``state_dict`` key names (``_sample_count``, ``_live_mask``,
``_free_indices``, ``_known_storage_len``, ``_ran_out``), so code and checkpoints written against TorchRL work.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.storages import Storage


def check_sample_count(value: Any, name: str) -> int:
    """``value`` as a positive int; a bool or non-integer is a ``TypeError``, ``< 1`` a ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a positive integer (samples after which a row is consumed), got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer (samples after which a row is consumed), got {value}")
    return int(value)


class ConsumingSampler(Sampler):
    """Uniform sampling over the live rows; a row is consumed after ``max_sample_count`` returns (default 1).

    Only 1-dimensional storages are supported (a ``ValueError`` otherwise). ``num_sampleable(storage)`` is the
    number of live rows (what ``len(rb)`` reports); ``pop_consumed(storage, n)`` hands out up to ``n`` consumed
    slots, oldest first, for a writer to fill (each slot once).
    """

    requires_shared_state = True  # the per-row counts change with every draw

    def __init__(self, max_sample_count: int = 1) -> None:
        self.max_sample_count = check_sample_count(max_sample_count, "max_sample_count")
        self._sample_count = torch.zeros(0, dtype=torch.long)
        self._live_mask = torch.zeros(0, dtype=torch.bool)
        self._known_storage_len = 0
        self._free_indices: torch.Tensor | None = None  # consumed slots not yet handed out, oldest first
        self._ran_out = False

    # -- state kept per slot --------------------------------------------------------------------
    def _grow(self, capacity: int) -> None:
        extra = capacity - self._sample_count.numel()
        if extra > 0:
            self._sample_count = torch.cat([self._sample_count, torch.zeros(extra, dtype=torch.long)])
            self._live_mask = torch.cat([self._live_mask, torch.zeros(extra, dtype=torch.bool)])

    def _sync(self, storage: Storage) -> None:
        """Follow ``len(storage)``: rows it gained without a write seen here are live, rows it lost are gone."""
        if getattr(storage, "ndim", 1) != 1:
            raise ValueError(
                f"ConsumingSampler only supports 1-dimensional storages, got storage.ndim={storage.ndim}: "
                "use a 1-dimensional storage, or another sampler"
            )
        n, known = len(storage), self._known_storage_len
        self._grow(n)
        if n > known:
            self._sample_count[known:n] = 0
            self._live_mask[known:n] = True
        elif n < known:
            self._sample_count[n:known] = 0
            self._live_mask[n:known] = False
        self._known_storage_len = n

    def _append_free_indices(self, index: torch.Tensor) -> None:
        """Queue consumed slots (TorchRL's name): writes fill them before the writer's cursor moves."""
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1)
        if index.numel():
            previous = self._free_indices
            self._free_indices = index.clone() if previous is None else torch.cat([previous, index])

    def _mark_live(self, index: Any) -> None:
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1)
        if index.numel() == 0:
            return
        top = int(index.max()) + 1
        self._grow(top)
        self._sample_count[index] = 0
        self._live_mask[index] = True
        self._known_storage_len = max(self._known_storage_len, top)
        self._ran_out = False

    def add(self, index: int) -> None:
        self._mark_live(index)

    def extend(self, index: torch.Tensor) -> None:
        self._mark_live(index)

    # -- what the buffer asks -------------------------------------------------------------------
    def num_sampleable(self, storage: Storage) -> int:
        """Live rows of ``storage``: stored and not consumed (``len(rb)`` of a consuming buffer)."""
        self._sync(storage)
        return int(self._live_mask[: self._known_storage_len].sum())

    _num_sampleable = num_sampleable  # TorchRL's name

    def pop_consumed(self, storage: Storage, max_count: int) -> torch.Tensor:
        """Up to ``max_count`` consumed slots of ``storage``, oldest first, removed from the free list: the
        caller writes a new item into each. Slots rewritten meanwhile (live again) or past the end are dropped."""
        self._sync(storage)
        free = self._free_indices
        if free is None:
            return torch.zeros(0, dtype=torch.long)
        in_range = free[free < self._known_storage_len]
        still_free = in_range[~self._live_mask[in_range]]
        taken, rest = still_free[:max_count], still_free[max_count:]
        self._free_indices = rest if rest.numel() else None
        return taken

    _pop_consumed_indices = pop_consumed  # TorchRL's name

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        self._sync(storage)
        live = torch.nonzero(self._live_mask[: self._known_storage_len]).flatten()
        if live.numel() == 0:
            self._ran_out = True
            raise RuntimeError(
                "Cannot sample from an empty storage: every row has been consumed "
                f"(sampled {self.max_sample_count} time(s)); add or extend data first"
            )
        take = min(batch_size, live.numel())
        index = live[torch.randperm(live.numel(), generator=self.generator)[:take]]
        self._sample_count[index] += 1
        consumed = self._sample_count[index] >= self.max_sample_count
        self._live_mask[index] = ~consumed
        self._append_free_indices(index[consumed])
        self._ran_out = not bool(self._live_mask.any())
        return index, {}

    def empty(self) -> None:
        self._sample_count = torch.zeros(0, dtype=torch.long)
        self._live_mask = torch.zeros(0, dtype=torch.bool)
        self._known_storage_len = 0
        self._free_indices = None
        self._ran_out = False

    def state_dict(self) -> dict[str, Any]:
        free = self._free_indices
        return OrderedDict(
            max_sample_count=self.max_sample_count,
            _sample_count=self._sample_count.clone(),
            _live_mask=self._live_mask.clone(),
            _known_storage_len=self._known_storage_len,
            _free_indices=None if free is None else free.clone(),
            _free_head=0,  # TorchRL keeps a read position into its free list; ours is always consumed from 0
            _ran_out=self._ran_out,
        )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (ours or TorchRL's); tensors are copied, so the source (maybe memory
        mapped by ``torch.load(mmap=True)``) can change afterwards without touching this sampler."""
        self.max_sample_count = check_sample_count(state_dict["max_sample_count"], "max_sample_count")
        count, live = state_dict["_sample_count"], state_dict["_live_mask"]
        self._sample_count = torch.zeros(0, dtype=torch.long) if count is None else count.to(torch.long).clone()
        self._live_mask = torch.zeros(0, dtype=torch.bool) if live is None else live.to(torch.bool).clone()
        self._known_storage_len = int(state_dict["_known_storage_len"])
        self._grow(self._known_storage_len)
        free = state_dict.get("_free_indices")
        head = int(state_dict.get("_free_head", 0))
        self._free_indices = None
        if free is not None and free.numel() > head:
            self._free_indices = free[head:].to(torch.long).clone()
        self._ran_out = bool(state_dict.get("_ran_out", False))

    def __repr__(self) -> str:
        return f"ConsumingSampler(max_sample_count={self.max_sample_count})"
