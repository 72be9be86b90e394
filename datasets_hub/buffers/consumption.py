"""Consuming buffers: ``ReplayBuffer(consume_after_n_samples=n)`` or ``sampler=ConsumingSampler(n)``.

A row sampled ``n`` times is consumed: it is no longer drawn, ``len(rb)`` stops counting it, and its slot is
freed: the next writes fill freed slots (oldest first) before the writer's cursor moves, and the cursor then
passes over the slots the same write fills (TorchRL 0.14's semantics; docs/guide/buffers.md). The sampler is
in ``samplers/consuming.py``; this module checks a buffer's parts can consume, and writes into freed slots.
"""

from __future__ import annotations

from typing import Any

import torch

from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.samplers.consuming import ConsumingSampler, check_sample_count
from datasets_hub.buffers.samplers.random import RandomSampler
from datasets_hub.buffers.storages import ListStorage, Storage
from datasets_hub.buffers.tensor_storages import TensorStorage
from datasets_hub.buffers.writers import Writer
from datasets_hub.errors import ReadOnlyError


def consuming_sampler(sampler: Sampler | None, consume_after_n_samples: Any) -> Sampler | None:
    """The sampler a buffer built with ``consume_after_n_samples`` uses: ``sampler`` unchanged when the
    keyword is ``None``; else a :class:`ConsumingSampler` in place of the default ``RandomSampler`` (or the
    given ``ConsumingSampler`` when its count agrees). Any other sampler is a ``ValueError``."""
    if consume_after_n_samples is None:
        return sampler
    count = check_sample_count(consume_after_n_samples, "consume_after_n_samples")
    if isinstance(sampler, ConsumingSampler):
        if sampler.max_sample_count != count:
            raise ValueError(
                f"consume_after_n_samples={count} conflicts with the ConsumingSampler's "
                f"max_sample_count={sampler.max_sample_count}: give one of them"
            )
        return sampler
    if sampler is not None and type(sampler) is not RandomSampler:
        raise ValueError(
            f"consume_after_n_samples only supports the default RandomSampler or an explicit ConsumingSampler, "
            f"got {type(sampler).__name__}: prioritized, slice and without-replacement samplers cannot consume rows"
        )
    return ConsumingSampler(max_sample_count=count)


def check_consuming(sampler: Sampler, storage: Storage, writer: Writer, prefetch: int) -> bool:
    """True when ``sampler`` consumes rows and the other parts allow it; refuse the combinations that cannot
    (prefetch, a read-only build, a multi-dimensional or other storage, a writer without ``write_at``)."""
    if not isinstance(sampler, ConsumingSampler):
        return False
    if prefetch:
        raise ValueError(
            "Prefetching is not supported with ConsumingSampler (consume_after_n_samples): batches drawn ahead "
            "would consume rows before they are asked for; drop prefetch"
        )
    if getattr(storage, "read_only", False):
        raise ReadOnlyError(
            "dataset build (consume_after_n_samples / ConsumingSampler frees consumed rows for new writes, and a "
            "build cannot be written)"
        )
    if getattr(storage, "ndim", 1) != 1:
        raise ValueError(
            f"ConsumingSampler only supports 1-dimensional storages, got storage.ndim={storage.ndim}: "
            "use a 1-dimensional storage, or another sampler"
        )
    if not isinstance(storage, (ListStorage, TensorStorage)):
        raise TypeError(
            "ConsumingSampler only supports ListStorage, TensorStorage, LazyTensorStorage and LazyMemmapStorage, "
            f"got {type(storage).__name__}"
        )
    if not callable(getattr(writer, "write_at", None)):
        raise TypeError(
            f"ConsumingSampler requires a writer with a callable write_at(index, data) method to reuse consumed "
            f"slots; {type(writer).__name__} has none: use RoundRobinWriter (the default)"
        )
    return True


def add_consuming(writer: Any, sampler: ConsumingSampler, storage: Storage, data: Any) -> int:
    """Write one item into the oldest freed slot, or where the writer's cursor is when none is free."""
    freed = sampler.pop_consumed(storage, 1)
    if freed.numel():
        return int(writer.write_at(int(freed[0]), data))
    return int(writer.add(data))


def extend_consuming(writer: Any, sampler: ConsumingSampler, storage: Storage, data: Any) -> torch.Tensor:
    """Write a batch: freed slots first (oldest first), then slots from the cursor that this write does not
    already fill; returns the slots in the order of ``data``'s items."""
    count = storage.num_items(data)
    if count >= storage.max_size_along_dim0(data):  # every slot is written: none is left to prefer
        return writer.extend(data)
    freed = sampler.pop_consumed(storage, count)
    if freed.numel() == 0:
        return writer.extend(data)
    index = freed
    if freed.numel() < count:
        index = torch.cat([freed, writer.claim_slots(count - freed.numel(), freed, data)])
    return writer.write_at(index, data)


def refuse_split(sampler: Sampler, what: str) -> None:
    """Refuse ``what`` (``fork()``, ``shared=True``) for a consuming buffer: the sample counts live in one
    sampler, so copies or other processes would each consume rows on their own and return them too often."""
    if isinstance(sampler, ConsumingSampler):
        raise ValueError(
            f"{what} is not supported with ConsumingSampler (consume_after_n_samples): the sample counts live "
            "in this buffer's sampler, so another copy would return consumed rows again. Sample from this buffer"
        )
