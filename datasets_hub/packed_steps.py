"""Per-step leaves packed into one record per transition, so that a batch reads them with one gather.

A build stores each per-step leaf (``action``, ``next/reward``, the flags, small ``info/...``) in
its own file, so a batch of B rows costs one random read per leaf and per row. :class:`PackedSteps`
lays the small fixed-size leaves side by side in one ``[N, width]`` byte array, plus each row's
episode ordinal (its position in the episode index, which otherwise costs a binary search per row):
one ``take`` fetches all of them, and each leaf is cut from the gathered block as a contiguous copy.

It is built when a build is copied into RAM (``in_memory=True``): packing costs one pass over the
per-step leaves, which the copy pays anyway. Values are bit-identical to the per-leaf gathers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from datasets_hub.buffers.nested_keys import Key
from datasets_hub.ram import check_fits

#: leaves wider than this (bytes per row) keep their own gather: packing them would make every
#: record long and a gather of the small leaves read bytes it does not need
MAX_FIELD_BYTES = 256


@dataclass(frozen=True)
class PackedField:
    key: Key
    dtype: np.dtype
    shape: tuple[int, ...]  # per row
    offset: int  # bytes from the start of a record
    nbytes: int


class PackedSteps:
    """``[N, width]`` uint8 records holding ``fields`` and each row's episode ordinal.

    ``gather(rows)`` returns ``(ordinal, [(key, tensor), ...])``: the episode ordinals of ``rows``
    (int64) and every packed leaf at ``rows``, contiguous, with its stored dtype and shape.
    """

    def __init__(self, records: np.ndarray, fields: Sequence[PackedField], ordinal_offset: int, ordinal_dtype) -> None:
        self.records = records
        self.fields = list(fields)
        self._ordinal = (ordinal_offset, np.dtype(ordinal_dtype))

    @property
    def keys(self) -> list[Key]:
        return [f.key for f in self.fields]

    @classmethod
    def from_columns(
        cls, columns: Sequence[tuple[Key, np.ndarray]], starts: np.ndarray, rows: int
    ) -> PackedSteps | None:
        """Pack the small leaves of ``columns`` (``[rows, ...]`` arrays) with the episode ordinal each row
        has given the episode ``starts``; ``None`` when nothing is small enough to pack."""
        chosen = [(k, c) for k, c in columns if 0 < c.dtype.itemsize * int(np.prod(c.shape[1:])) <= MAX_FIELD_BYTES]
        if not chosen:
            return None
        ordinal_dtype = np.dtype(np.int32 if len(starts) < 2**31 else np.int64)
        # widest items first, so that every field starts at a multiple of its item size
        chosen.sort(key=lambda kc: -kc[1].dtype.itemsize)
        fields, offset = [], 0
        for key, column in chosen:
            nbytes = column.dtype.itemsize * int(np.prod(column.shape[1:]))
            if offset % column.dtype.itemsize:
                offset += column.dtype.itemsize - offset % column.dtype.itemsize
            fields.append(PackedField(key, column.dtype, tuple(column.shape[1:]), offset, nbytes))
            offset += nbytes
        offset += -offset % ordinal_dtype.itemsize
        ordinal_offset = offset
        width = offset + ordinal_dtype.itemsize
        width += -width % 8
        check_fits(rows * width, f"packing the per-step leaves ({width} bytes per transition)")
        records = np.zeros((rows, width), dtype=np.uint8)
        for field, (_, column) in zip(fields, chosen, strict=True):
            records[:, field.offset : field.offset + field.nbytes] = (
                np.ascontiguousarray(column).view(np.uint8).reshape(rows, field.nbytes)
            )
        step = 1 << 22  # ordinals in blocks: no [rows] int64 temporary for a 100M-row build
        for a in range(0, rows, step):
            b = min(rows, a + step)
            ordinal = np.searchsorted(starts, np.arange(a, b), side="right") - 1
            records[a:b, ordinal_offset : ordinal_offset + ordinal_dtype.itemsize] = (
                ordinal.astype(ordinal_dtype).view(np.uint8).reshape(b - a, ordinal_dtype.itemsize)
            )
        return cls(records, fields, ordinal_offset, ordinal_dtype)

    def gather(self, rows: np.ndarray) -> tuple[np.ndarray, list[tuple[Key, torch.Tensor]]]:
        block = self.records.take(rows, axis=0)  # the one random read
        b = rows.shape[0]
        at, dtype = self._ordinal
        ordinal = block[:, at : at + dtype.itemsize].view(dtype).reshape(b).astype(np.int64)
        out = []
        for f in self.fields:
            part = np.ascontiguousarray(block[:, f.offset : f.offset + f.nbytes]).view(f.dtype)
            out.append((f.key, torch.from_numpy(part.reshape(b, *f.shape))))
        return ordinal, out
