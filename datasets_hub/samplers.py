"""Samplers return indices into a storage; they never read data they do not need (DESIGN.md §6).

This file starts with the ``Sampler`` contract that every sampler follows.
"""
from __future__ import annotations

from typing import Any

import torch

from .storages import Storage


class Sampler:
    """Base contract of every sampler.

    - ``sample(storage, batch_size) -> (index, info)``: ``index`` is a 1-D int64 tensor of storage
      rows; ``info`` is a dict whose tensor entries of leading size ``len(index)`` are written into
      TensorDict samples by the buffer (e.g. ``"_weight"``, ``("next", "truncated")``).
    - ``generator`` (a ``torch.Generator`` or ``None``) is the only source of randomness: the same
      seed gives the same batches, in every process.
    - ``add(index)`` / ``extend(index)`` are called by the buffer after its writer wrote rows.
    - ``ran_out`` is True when an epoch-style sampler has nothing left for the current epoch.
    """

    generator: torch.Generator | None = None

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        raise NotImplementedError

    def add(self, index: int) -> None:
        return None

    def extend(self, index: torch.Tensor) -> None:
        return None

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        raise RuntimeError(
            f"{type(self).__name__} has no priorities; use PrioritizedSampler or PrioritizedSliceSampler"
        )

    @property
    def ran_out(self) -> bool:
        return False

    def empty(self) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None


class RandomSampler(Sampler):
    """Uniform sampling with replacement over the ``len(storage)`` valid rows."""

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        n = len(storage)
        if n == 0:
            raise RuntimeError("cannot sample from an empty buffer: add or extend data first")
        index = torch.randint(n, (batch_size,), generator=self.generator)
        return index, {}
