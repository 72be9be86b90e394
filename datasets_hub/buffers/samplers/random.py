"""Uniform samplers over the valid rows of a storage: with replacement, and epochs without (docs/guide/sampling.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.storages import Storage


class RandomSampler(Sampler):
    """Uniform sampling with replacement over the ``len(storage)`` valid rows."""

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        n = len(storage)
        if n == 0:
            raise RuntimeError("Cannot sample from an empty storage: add or extend data first")
        index = torch.randint(n, (batch_size,), generator=self.generator)
        return index, {}

    def sample_at(
        self, storage: Storage, index: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The item at row ``i`` is row ``i`` (what a draw landing there samples)."""
        return index, {}

    def sample_rows(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any], np.ndarray | None]:
        index, info = self.sample(storage, batch_size)
        if type(self).sample is not RandomSampler.sample:  # a subclass draws its own way: no promise
            return index, info, None
        return index, info, index.numpy()  # randint(len(storage)): every row is valid, info is empty


class SamplerWithoutReplacement(Sampler):
    """Epochs over the valid rows: each row is returned at most once per epoch.

    - An epoch is a permutation of ``range(len(storage))`` drawn with ``generator``
      (``shuffle=False``: in order). Batches are consecutive pieces of it.
    - ``drop_last=False``: the last batch of an epoch holds the remaining rows (may be shorter).
      ``drop_last=True``: an epoch ends as soon as fewer than ``batch_size`` rows remain; those
      rows are skipped this epoch.
    - ``ran_out`` is True right after the batch that ends an epoch (so iterating a buffer is
      finite); the next ``sample`` starts a new epoch and resets it.
    - Growth: rows added since the epoch started (``len(storage)`` grew) join the rows still to
      visit this epoch (shuffled in when ``shuffle``). If the storage shrank (``empty()``), the
      next call starts a new epoch.
    - ``state_dict()`` holds the rows still to visit, so ``load_state_dict`` resumes at the exact
      position (the generator's state belongs to the buffer).
    """

    requires_shared_state = True  # the epoch's remaining rows

    def __init__(self, drop_last: bool = False, shuffle: bool = True) -> None:
        self.drop_last = bool(drop_last)
        self.shuffle = bool(shuffle)
        self._remaining: torch.Tensor | None = None  # rows still to visit this epoch, in order
        self._len_seen = 0  # len(storage) the remaining rows were drawn from
        self._ran_out = False

    def sample_at(
        self, storage: Storage, index: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The item at row ``i`` is row ``i`` (an epoch visits each row once, as a map-style view does)."""
        return index, {}

    def _order(self, rows: torch.Tensor) -> torch.Tensor:
        if not self.shuffle or rows.numel() <= 1:
            return rows
        return rows[torch.randperm(rows.numel(), generator=self.generator)]

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        n = len(storage)
        if n == 0:
            raise RuntimeError("Cannot sample from an empty storage: add or extend data first")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        remaining = self._remaining
        if remaining is not None and n < self._len_seen:
            remaining = None  # emptied or replaced: the old rows may not exist any more
        if remaining is None or remaining.numel() == 0:
            remaining = self._order(torch.arange(n))
        elif n > self._len_seen:
            remaining = self._order(torch.cat([remaining, torch.arange(self._len_seen, n)]))
        self._len_seen = n
        if self.drop_last and remaining.numel() < batch_size:
            raise ValueError(
                f"SamplerWithoutReplacement(drop_last=True) cannot make a batch of {batch_size} from "
                f"{remaining.numel()} rows: lower the batch size or use drop_last=False"
            )
        index, remaining = remaining[:batch_size], remaining[batch_size:]
        self._ran_out = remaining.numel() == 0 or (self.drop_last and remaining.numel() < batch_size)
        self._remaining = None if self._ran_out else remaining
        return index, {}

    def empty(self) -> None:
        self._remaining, self._len_seen, self._ran_out = None, 0, False

    def state_dict(self) -> dict[str, Any]:
        remaining = self._remaining
        return {
            "remaining": remaining.clone() if remaining is not None else torch.zeros(0, dtype=torch.int64),
            "has_epoch": remaining is not None,
            "len_seen": self._len_seen,
            "ran_out": self._ran_out,
            "drop_last": self.drop_last,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._remaining = state_dict["remaining"].clone() if state_dict["has_epoch"] else None
        self._len_seen = int(state_dict["len_seen"])
        self._ran_out = bool(state_dict["ran_out"])
