"""Uniform samplers over the valid rows of a storage: with replacement, and epochs without (docs/guide/sampling.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from datasets_hub.buffers.samplers.base import Sampler, refuse_without_replacement
from datasets_hub.buffers.storages import Storage
from datasets_hub.errors import InvalidArgument


class RandomSampler(Sampler):
    """Uniform sampling with replacement over the ``len(storage)`` valid rows.

    ``RandomSampler(replacement=False, drop_last=..., shuffle=...)`` builds a
    :class:`SamplerWithoutReplacement` with those keywords, as in TorchRL.
    """

    def __new__(cls, *args: Any, replacement: bool = True, **kwargs: Any) -> Any:
        if cls is RandomSampler and not replacement:
            return SamplerWithoutReplacement(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, *, replacement: bool = True) -> None:
        if not replacement:  # a subclass: RandomSampler itself dispatched in __new__
            refuse_without_replacement(type(self), replacement)

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        if getattr(storage, "compilable", False) and hasattr(storage, "length_tensor"):
            return self._sample_traceable(storage.length_tensor(), batch_size), {}
        n = len(storage)
        if n == 0:
            raise RuntimeError("Cannot sample from an empty storage: add or extend data first")
        index = torch.randint(n, (batch_size,), generator=self.generator)
        return index, {}

    def _sample_traceable(self, n: torch.Tensor, batch_size: int) -> torch.Tensor:
        """The draw of a ``compilable`` storage: the length stays a tensor, so ``torch.compile`` does not
        specialise the graph on it (one compile however the storage grows). Uniform over ``range(n)``
        (exact for ``n < 2**53``); not the same stream as ``randint``, in eager and compiled code alike."""
        torch._assert_async(n > 0, "Cannot sample from an empty storage: add or extend data first")
        uniform = torch.rand(batch_size, dtype=torch.float64, generator=self.generator)
        return (uniform * n).to(torch.int64)

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

    def sample_many_rows(
        self, storage: Storage, k: int, batch_size: int
    ) -> tuple[torch.Tensor, dict[str, Any], np.ndarray | None]:
        """One draw of ``k * batch_size`` rows: ``randint`` fills its output in generator order, so these
        are the values (and the generator state after them) of ``k`` draws of ``batch_size``."""
        if type(self).sample is not RandomSampler.sample or getattr(storage, "compilable", False):
            return super().sample_many_rows(storage, k, batch_size)
        return self.sample_rows(storage, k * batch_size)


class SamplerWithoutReplacement(Sampler):
    """Epochs over the valid rows: each row is returned at most once per epoch.

    - An epoch is a permutation of ``range(len(storage))`` drawn with ``generator``
      (``shuffle=False``: in order). Batches are consecutive pieces of it.
    - ``drop_last=False``: the last batch of an epoch holds the remaining rows (may be shorter).
      ``drop_last=True``: an epoch ends as soon as fewer than ``batch_size`` rows remain; those
      rows are skipped this epoch. A batch larger than the storage is a ``ValueError`` ("The batch
      size ... is greater than the storage capacity", as TorchRL says it).
    - ``ran_out`` is True right after the batch that ends an epoch (so iterating a buffer is
      finite); the next ``sample`` resets it. The next epoch's order is drawn as soon as one ends,
      so it is part of the ``state_dict`` (as in TorchRL: the same generator draws give the same
      epochs on both).
    - Growth: rows added since the epoch started (``len(storage)`` grew) join the rows still to
      visit this epoch (shuffled in when ``shuffle``). If the storage shrank (``empty()``), the
      next call starts a new epoch.
    - ``_sample_list`` (TorchRL's name) holds the rows still to visit, in order (``None`` before
      the first sample). ``state_dict()`` holds a copy of it under TorchRL's keys (``len_storage``,
      ``_sample_list``, ``drop_last``, ``_ran_out``), so ``load_state_dict`` (which copies it again:
      the source may be reused or memory-mapped) resumes at the exact position, whatever the
      restoring buffer's generator.
    """

    requires_shared_state = True  # the epoch's remaining rows

    def __init__(self, drop_last: bool = False, shuffle: bool = True, *, replacement: bool = False) -> None:
        if replacement:
            raise InvalidArgument(
                "SamplerWithoutReplacement(replacement=True) would sample with replacement: use RandomSampler()"
            )
        self.drop_last = bool(drop_last)
        self.shuffle = bool(shuffle)
        self._sample_list: torch.Tensor | None = None  # rows still to visit this epoch, in order
        self.len_storage = 0  # len(storage) the rows were drawn from
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
        if self.drop_last and n < batch_size:
            raise ValueError(
                f"The batch size ({batch_size}) is greater than the storage capacity ({n}): "
                "SamplerWithoutReplacement(drop_last=True) cannot make a batch without repeating rows; lower the "
                "batch size or use drop_last=False"
            )
        remaining = self._sample_list
        if remaining is not None and n < self.len_storage:
            remaining = None  # emptied or replaced: the old rows may not exist any more
        if remaining is None or remaining.numel() == 0:
            remaining = self._order(torch.arange(n))
        elif n > self.len_storage:
            remaining = self._order(torch.cat([remaining, torch.arange(self.len_storage, n)]))
        self.len_storage = n
        if self.drop_last and remaining.numel() < batch_size:  # a larger batch than the epoch's last ones
            raise ValueError(
                f"SamplerWithoutReplacement(drop_last=True) cannot make a batch of {batch_size} from the "
                f"{remaining.numel()} rows left in this epoch: keep the batch size of the epoch or use drop_last=False"
            )
        index, remaining = remaining[:batch_size], remaining[batch_size:]
        self._ran_out = remaining.numel() == 0 or (self.drop_last and remaining.numel() < batch_size)
        # the next epoch's order is drawn now, so that a state_dict taken between epochs holds it
        self._sample_list = self._order(torch.arange(n)) if self._ran_out else remaining
        return index, {}

    def empty(self) -> None:
        self._sample_list, self.len_storage, self._ran_out = None, 0, False

    def state_dict(self) -> dict[str, Any]:
        remaining = self._sample_list
        return {
            "len_storage": self.len_storage,
            "_sample_list": remaining.clone() if remaining is not None else None,
            "drop_last": self.drop_last,
            "shuffle": self.shuffle,
            "_ran_out": self._ran_out,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "remaining" in state_dict:  # the keys of datasets_hub's states before TorchRL's names
            remaining = state_dict["remaining"] if state_dict["has_epoch"] else None
            len_storage, ran_out = state_dict["len_seen"], state_dict["ran_out"]
        else:
            remaining, len_storage, ran_out = (
                state_dict["_sample_list"],
                state_dict["len_storage"],
                state_dict["_ran_out"],
            )
        self._sample_list = torch.as_tensor(remaining, dtype=torch.int64).clone() if remaining is not None else None
        self.len_storage = int(len_storage)
        self._ran_out = bool(ran_out)
