"""Prioritized replay buffers: a buffer that builds its own ``PrioritizedSampler`` (docs/reference/hub.md).

Samples' info carry ``"_weight"`` (importance weights); ``update_priority(index, priority)`` and,
for TensorDicts, ``update_tensordict_priority(td)`` (priorities read from ``priority_key``, reduced
per item with ``reduction``) feed the sampler. ``extend`` reads priorities from the data when it
holds ``priority_key``.
"""

from __future__ import annotations

from typing import Any

import torch

from datasets_hub.buffers.replay_buffers import ReplayBuffer, TensorDictReplayBuffer
from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.storages import ListStorage, Storage


def _prioritized_sampler(
    storage: Storage, alpha: float, beta: float, eps: float, reduction: str, dtype: torch.dtype
) -> Sampler:
    try:
        from datasets_hub.buffers.samplers.prioritized import PrioritizedSampler
    except ImportError as exc:  # the module belongs to the samplers layer
        raise ImportError(
            f"PrioritizedSampler is unavailable (datasets_hub.buffers.samplers.prioritized failed to import: {exc})"
        ) from exc
    return PrioritizedSampler(storage.max_size, alpha, beta, eps=eps, dtype=dtype, reduction=reduction)


class PrioritizedReplayBuffer(ReplayBuffer):
    """``ReplayBuffer`` with a ``PrioritizedSampler(alpha, beta, eps)``; samples' info carry ``"_weight"``."""

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        storage: Storage | None = None,
        **kwargs: Any,
    ) -> None:
        if "sampler" in kwargs:
            raise TypeError("PrioritizedReplayBuffer builds its own PrioritizedSampler: do not pass sampler=")
        storage = ListStorage(1000) if storage is None else storage
        super().__init__(
            storage=storage, sampler=_prioritized_sampler(storage, alpha, beta, eps, "max", dtype), **kwargs
        )


class TensorDictPrioritizedReplayBuffer(TensorDictReplayBuffer):
    """``TensorDictReplayBuffer`` with a ``PrioritizedSampler``; priorities come from ``priority_key``."""

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        priority_key: str | tuple[str, ...] = "td_error",
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        storage: Storage | None = None,
        reduction: str = "max",
        **kwargs: Any,
    ) -> None:
        if "sampler" in kwargs:
            raise TypeError("TensorDictPrioritizedReplayBuffer builds its own PrioritizedSampler: do not pass sampler=")
        storage = ListStorage(1000) if storage is None else storage
        super().__init__(
            storage=storage,
            sampler=_prioritized_sampler(storage, alpha, beta, eps, reduction, dtype),
            priority_key=priority_key,
            reduction=reduction,
            **kwargs,
        )
