"""Rows written into a batch allocated once: how a mixture fills its batch member by member.

A mixture allocates each key's array for the whole batch, then every member writes its rows straight
into its slice (``DatasetStorage.gather_into``, or its own sampled batch copied in): no per-member
arrays to join afterwards. A member's values may be narrower in the last dimension than the batch's
(a 6-value action in a batch padded to 8): they fill the leading entries and the rest stays as the
batch was allocated (zeros). Batches drawn ahead together are laid one after the other in one block;
:func:`batch_tensors` and :func:`batch_tensordict` turn the written arrays into each batch's TensorDict.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict

from datasets_hub.buffers.nested_keys import NestPlan

#: rows below which numpy's own strided copy is as fast as the row-wise one with its set-up (measured:
#: about 1.5 us of set-up against 2.5-5 ns saved per row of 3 to 17 float32 values)
ROW_COPY_MIN_ROWS = 1024
_ROW_TYPES: dict[int, np.dtype] = {}  # bytes per row -> the opaque item of that size


def fill_rows(dst: np.ndarray, value: np.ndarray) -> None:
    """``value`` written into ``dst``: the same shape, or ``dst`` wider in its last dimension (the
    values fill ``[..., :width]``). Any other shape is a ``ValueError``, never a broadcast."""
    if dst.shape == value.shape:
        if not _copied_as_rows(dst, value):
            np.copyto(dst, value)
    elif value.ndim and dst.shape[:-1] == value.shape[:-1] and dst.shape[-1] >= value.shape[-1]:
        narrow = dst[..., : value.shape[-1]]
        if not _copied_as_rows(narrow, value):
            narrow[...] = value
    else:
        raise ValueError(f"cannot write values of shape {list(value.shape)} into rows of shape {list(dst.shape)}")


def _copied_as_rows(dst: np.ndarray, value: np.ndarray) -> bool:
    """Copy ``value`` into ``dst`` (the same shape) row by row, each row one opaque item (a void view of
    it) rather than value by value, where that pays: at least ``ROW_COPY_MIN_ROWS`` rows of several
    values, strided in one of them (contiguous ones are one block copy already), the same dtype, and
    each row's last dimension contiguous in both. The same bytes, in about half the time of numpy's
    per-value strided loop (a batch's narrow rows inside its padded ones, a field cut from packed
    records). False (nothing written) where that does not apply."""
    width = value.shape[-1] if value.ndim else 0
    if (
        width < 2
        or value.size < ROW_COPY_MIN_ROWS * width
        or value.dtype != dst.dtype
        or value.dtype.hasobject
        or value.strides[-1] != value.itemsize
        or dst.strides[-1] != dst.itemsize
        or (dst.flags.c_contiguous and value.flags.c_contiguous)
    ):
        return False
    nbytes = width * value.itemsize
    row = _ROW_TYPES.get(nbytes)
    if row is None:
        row = _ROW_TYPES.setdefault(nbytes, np.dtype((np.void, nbytes)))
    np.copyto(dst.view(row), value.view(row))
    return True


def take_rows(column: np.ndarray, rows: np.ndarray, dst: np.ndarray) -> None:
    """``column[rows]`` written into ``dst`` (see :func:`fill_rows`), gathered straight into it when its
    layout allows. ``rows`` must be valid rows of ``column`` (they are not checked here)."""
    if dst.shape[1:] == column.shape[1:] and dst.dtype == column.dtype and dst.flags.c_contiguous:
        column.take(rows, axis=0, out=dst, mode="clip")  # valid rows: "clip" gathers with no buffer
    else:
        fill_rows(dst, column.take(rows, axis=0))


class BatchMemory:
    """The arrays of one batch as views of a single block of memory, the block reused for the next batch
    when nothing references it any more (the caller dropped that batch: no tensor of it is alive to see
    the change). A fresh block each time would cost the kernel a page fault per 4 KiB written, more than
    the gathers themselves on large batches. The arrays themselves are reused too when the same number
    of rows is asked for and none of them, nor any other view of the block, is referenced."""

    def __init__(self, layout: Sequence[tuple[Any, tuple[int, ...], np.dtype]]) -> None:
        self.layout = [(key, tuple(shape), np.dtype(dtype)) for key, shape, dtype in layout]
        self._row_bytes = [int(np.prod(shape, dtype=np.int64)) * dtype.itemsize for _, shape, dtype in self.layout]
        self._offsets: dict[int, tuple[list[int], int]] = {}  # total rows -> each array's offset, block size
        self._spare: np.ndarray | None = None
        self._views: tuple[int, dict[Any, np.ndarray]] | None = None  # the spare block's arrays, their rows

    @property
    def row_bytes(self) -> int:
        """Bytes of one row of every array together."""
        return sum(self._row_bytes)

    def arrays(self, total: int) -> dict[Any, np.ndarray]:
        """Every key's array for a ``total``-row batch (uninitialised memory: every row must be written)."""
        planned = self._offsets.get(total)
        if planned is None:
            ends = np.cumsum([0] + [-(-total * size // 64) * 64 for size in self._row_bytes]).tolist()
            planned = (ends[:-1], ends[-1])  # each array 64-byte aligned
            if len(self._offsets) < 64:
                self._offsets[total] = planned
        offsets, nbytes = planned
        spare, views = self._spare, self._views
        # references to a block nobody else holds: self._spare, ``spare``, getrefcount's argument, and one
        # per kept array (a view's base is the block itself: numpy collapses views of views)
        held = 3 + (len(views[1]) if views is not None else 0)
        # each kept array: its place in the dict, ``a`` and getrefcount's argument (a tensor made from it,
        # or a view of such a tensor, holds one more)
        free = (
            spare is not None
            and sys.getrefcount(spare) == held
            and (views is None or all(sys.getrefcount(a) == 3 for a in views[1].values()))
        )
        if free and views is not None and views[0] == total:
            return dict(views[1])
        if free and spare is not None and spare.nbytes == nbytes:
            block = spare
        else:
            block = self._spare = np.empty(nbytes, dtype=np.uint8)
        self._views = None  # before the new views exist: the old ones no longer count towards ``held``
        arrays = {
            key: block[at : at + total * size].view(dtype).reshape(total, *shape)
            for (key, shape, dtype), at, size in zip(self.layout, offsets, self._row_bytes, strict=True)
        }
        self._views = (total, arrays)
        return dict(arrays)


def batch_tensors(arrays: Iterable[np.ndarray], k: int, batch_size: int) -> list[tuple[torch.Tensor, ...]]:
    """The leaves of ``k`` batches laid one after the other (each array ``[k * batch_size, ...]``): per batch,
    a view of every array, in their order. One ``[k, batch]`` tensor per array, unbound into the ``k`` views
    in one call: a view costs a little less than a tensor made from an array, and no batch pays a numpy
    slice per key."""
    per_array = [torch.from_numpy(a.reshape(k, batch_size, *a.shape[1:])).unbind(0) for a in arrays]
    return list(zip(*per_array, strict=True))


def batch_tensordict(plan: NestPlan, leaves: Sequence[Any], batch_size: int) -> TensorDict:
    """The TensorDict of a batch's ``leaves`` (one per key of ``plan``, in its order), which must already hold
    the batch's schema: no validation per batch, and each inner TensorDict made as its dict is (what
    ``nested=True`` makes, without looking at every value)."""
    size = torch.Size([batch_size])
    tree = plan.build(leaves, lambda d: TensorDict._new_unsafe(source=cast(Any, d), batch_size=size, nested=False))
    return TensorDict._new_unsafe(source=cast(Any, tree), batch_size=size, nested=False)
