"""The bound on how many items one call may ask for: a batch the machine cannot hold is refused by name
before anything is drawn, instead of ending in an allocation failure deep inside torch, or in swap."""

from __future__ import annotations

import torch

#: items one call may produce at most (torch's int32-indexed kernels, and any sane batch, stay below it)
MAX_BATCH_ITEMS = 2**31 - 1
_INDEX_BYTES = 8  # every item costs at least its int64 index
_ALWAYS_FITS = 1 << 24  # items whose indices (128 MiB) are not worth a look at the free memory


def check_batch_items(items: int, what: str) -> None:
    """Raise ``ValueError`` when ``items`` (a batch size, or ``k * batch_size``) exceeds
    :data:`MAX_BATCH_ITEMS` or its indices alone exceed the free memory; ``what`` names the call."""
    if items > MAX_BATCH_ITEMS:
        raise ValueError(
            f"{what} asks for {items:,} items in one call, more than {MAX_BATCH_ITEMS:,}: use smaller batches"
        )
    if items <= _ALWAYS_FITS:  # the hot path: no /proc read per sample()
        return
    from datasets_hub.buffers.device.memory import free_bytes  # here: the device package imports the buffers

    free = free_bytes(torch.device("cpu"))
    if free is not None and items * _INDEX_BYTES > free:
        raise ValueError(
            f"{what} asks for {items:,} items: their indices alone need {items * _INDEX_BYTES:,} bytes, more than "
            f"the {free:,} bytes of free memory: use smaller batches"
        )
