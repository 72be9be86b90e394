"""Per-step leaves packed into one record per transition, so that a batch reads them with one gather.

A build stores each per-step leaf (``action``, ``next/reward``, the flags, small ``info/...``) in
its own file, so a batch of B rows costs one random read per leaf and per row. A packed record lays
the small fixed-size leaves side by side in one ``[N, width]`` byte array, plus each row's episode
ordinal (its position in the episode index, which otherwise costs a binary search per row): one
``take`` fetches all of them, and each leaf is cut from the gathered block as a contiguous copy.

Builds of format version 2 carry the records on disk (``steps/_packed``, described by
``layout["packed"]``: :class:`RecordLayout`); for older builds opened with ``in_memory=True`` the
records are packed at open time. Values are bit-identical to the per-leaf gathers.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from datasets_hub.buffers.nested_keys import Key, key_to_str, parse_key
from datasets_hub.build.memory import check_fits
from datasets_hub.errors import CacheError

#: leaves wider than this (bytes per row) keep their own gather: packing them would make every
#: record long and a gather of the small leaves read bytes it does not need
MAX_FIELD_BYTES = 256
#: the schema name of the records in a build (a per-step leaf that is no data key)
RECORD_NAME = "steps/_packed"


@dataclass(frozen=True)
class PackedField:
    key: Key
    dtype: np.dtype
    shape: tuple[int, ...]  # per row
    offset: int  # bytes from the start of a record
    nbytes: int


@dataclass(frozen=True)
class RecordLayout:
    """Where each packed leaf and the episode ordinal lie in a record of ``width`` bytes."""

    fields: tuple[PackedField, ...]
    width: int
    ordinal_offset: int
    ordinal_dtype: np.dtype

    @classmethod
    def plan(cls, columns: Sequence[tuple[Key, np.dtype, tuple[int, ...]]], num_episodes: int) -> RecordLayout | None:
        """The layout for the small ones of ``columns`` (key, numpy dtype, per-row shape); ``None`` when
        none is small enough. Widest items first, so that every field starts at a multiple of its item size."""
        chosen = [(k, np.dtype(d), tuple(s)) for k, d, s in columns]
        chosen = [c for c in chosen if 0 < c[1].itemsize * int(np.prod(c[2], dtype=np.int64)) <= MAX_FIELD_BYTES]
        if not chosen:
            return None
        chosen.sort(key=lambda c: -c[1].itemsize)
        fields, offset = [], 0
        for key, dtype, shape in chosen:
            offset += -offset % dtype.itemsize
            nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            fields.append(PackedField(key, dtype, shape, offset, nbytes))
            offset += nbytes
        ordinal_dtype = np.dtype(np.int32 if num_episodes < 2**31 else np.int64)
        offset += -offset % ordinal_dtype.itemsize
        width = offset + ordinal_dtype.itemsize
        return cls(tuple(fields), width + (-width % 8), offset, ordinal_dtype)

    def pack(self, columns: Mapping[Key, np.ndarray], starts: np.ndarray, first_row: int) -> np.ndarray:
        """Records of the rows ``first_row .. first_row + len`` given each field's values at those rows."""
        n = len(next(iter(columns.values())))
        records = np.zeros((n, self.width), dtype=np.uint8)
        for f in self.fields:
            values = np.ascontiguousarray(columns[f.key], dtype=f.dtype)
            records[:, f.offset : f.offset + f.nbytes] = values.view(np.uint8).reshape(n, f.nbytes)
        ordinal = np.searchsorted(starts, np.arange(first_row, first_row + n), side="right") - 1
        size = self.ordinal_dtype.itemsize
        records[:, self.ordinal_offset : self.ordinal_offset + size] = (
            ordinal.astype(self.ordinal_dtype).view(np.uint8).reshape(n, size)
        )
        return records

    def to_json(self) -> dict[str, Any]:
        return {
            "name": RECORD_NAME,
            "width": self.width,
            "ordinal": {"offset": self.ordinal_offset, "dtype": self.ordinal_dtype.name},
            "fields": [
                {"key": key_to_str(f.key), "dtype": f.dtype.name, "shape": list(f.shape), "offset": f.offset}
                for f in self.fields
            ],
        }

    @classmethod
    def from_json(cls, spec: Any, steps: Mapping[Key, tuple[str, tuple[int, ...]]], where: Any) -> RecordLayout:
        """The layout a manifest describes, checked against the build's per-step columns (``key ->
        (dtype name, shape)``): every field names a column with its dtype and shape and lies inside the
        record, without overlapping another. Anything else is a :class:`CacheError`."""
        try:
            width = int(spec["width"])
            ordinal = (int(spec["ordinal"]["offset"]), np.dtype(spec["ordinal"]["dtype"]))
            fields = []
            for entry in spec["fields"]:
                key, dtype, shape = parse_key(entry["key"]), np.dtype(entry["dtype"]), tuple(entry["shape"])
                nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
                fields.append(PackedField(key, dtype, shape, int(entry["offset"]), nbytes))
        except (KeyError, TypeError, ValueError) as exc:
            raise _damaged(where, f"layout.packed is malformed ({exc!r})") from exc
        spans = sorted([(f.offset, f.offset + f.nbytes, key_to_str(f.key)) for f in fields] + [
            (ordinal[0], ordinal[0] + ordinal[1].itemsize, "the episode ordinal")
        ])  # fmt: skip
        for f in fields:
            if steps.get(f.key) != (f.dtype.name, f.shape):
                raise _damaged(where, f"layout.packed names {key_to_str(f.key)!r} as {f.dtype.name} {list(f.shape)}, "
                                      f"which is not a per-step column of the build")  # fmt: skip
        if ordinal[1] not in (np.dtype(np.int32), np.dtype(np.int64)) or spans[0][0] < 0 or spans[-1][1] > width:
            raise _damaged(where, f"layout.packed places a field outside its {width}-byte record")
        for (_, end, name), (start, _, other) in itertools.pairwise(spans):
            if start < end:
                raise _damaged(where, f"layout.packed overlaps {name!r} and {other!r}")
        return cls(tuple(fields), width, ordinal[0], ordinal[1])


def _damaged(where: Any, problem: str) -> CacheError:
    return CacheError(
        f"{where}: {problem}. The build is damaged or was tampered with: `datasets-hub rm <id>` and load again"
    )


@dataclass(frozen=True)
class FieldCut:
    """How a field is cut from a gathered ``[B, width]`` block: ``block.view(dtype)[:, lo:hi]`` (the
    record seen as items of the field's dtype; ``aligned``), else the bytes ``lo:hi`` copied then
    viewed. ``shape`` is the per-row shape; ``reshape`` says whether ``[B, hi - lo]`` needs one."""

    key: Key
    dtype: np.dtype
    lo: int
    hi: int
    shape: tuple[int, ...]
    aligned: bool
    reshape: bool


def _cut_of(f: PackedField, width: int) -> FieldCut:
    size = f.dtype.itemsize
    if size and width % size == 0 and f.offset % size == 0 and f.nbytes % size == 0:
        lo, hi = f.offset // size, (f.offset + f.nbytes) // size
        return FieldCut(f.key, f.dtype, lo, hi, f.shape, True, f.shape != (hi - lo,))
    return FieldCut(f.key, f.dtype, f.offset, f.offset + f.nbytes, f.shape, False, True)


class PackedSteps:
    """``[N, width]`` uint8 records (see :class:`RecordLayout`).

    ``gather(rows)`` returns ``(ordinal, [(key, tensor), ...])``: the episode ordinals of ``rows``
    (int64) and every packed leaf at ``rows``, contiguous, with its stored dtype and shape. The
    sampling path calls the steps itself: :meth:`take` (the one random read), then :meth:`ordinal`
    and :meth:`cut` on the block (copies of a few hundred bytes each).
    """

    def __init__(self, records: np.ndarray, layout: RecordLayout) -> None:
        self.records = records
        self.layout = layout
        self.cuts = tuple(_cut_of(f, layout.width) for f in layout.fields)
        size = layout.ordinal_dtype.itemsize
        at = layout.ordinal_offset
        # the ordinal as one column of the record seen as ordinal-sized items (always so for our writer)
        self._ordinal_column = at // size if layout.width % size == 0 and at % size == 0 else None

    @property
    def ordinal_column(self) -> tuple[np.dtype, int] | None:
        """``(dtype, column)``: the episode ordinals of a block are ``block.view(dtype)[:, column]``
        (widened to int64); ``None`` when the ordinal is not aligned in the record (then :meth:`ordinal`)."""
        if self._ordinal_column is None:
            return None
        return self.layout.ordinal_dtype, self._ordinal_column

    @property
    def keys(self) -> list[Key]:
        return [f.key for f in self.layout.fields]

    @classmethod
    def from_columns(
        cls, columns: Sequence[tuple[Key, np.ndarray]], starts: np.ndarray, rows: int
    ) -> PackedSteps | None:
        """Pack the small leaves of ``columns`` (``[rows, ...]`` arrays) in memory (an older build opened
        with ``in_memory=True``); ``None`` when nothing is small enough to pack."""
        layout = RecordLayout.plan([(k, c.dtype, c.shape[1:]) for k, c in columns], len(starts))
        if layout is None:
            return None
        check_fits(rows * layout.width, f"packing the per-step leaves ({layout.width} bytes per transition)")
        records = np.empty((rows, layout.width), dtype=np.uint8)
        by_key = dict(columns)
        step = 1 << 20  # in blocks: no [rows] int64 temporaries for a 100M-row build
        for a in range(0, rows, step):
            b = min(rows, a + step)
            records[a:b] = layout.pack({f.key: by_key[f.key][a:b] for f in layout.fields}, starts, a)
        return cls(records, layout)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The records at ``rows`` (1-D int64, valid): a ``[len(rows), width]`` block, one random read."""
        return self.records.take(rows, axis=0)

    def ordinal(self, block: np.ndarray) -> np.ndarray:
        """The episode ordinals (int64 ``[B]``) of the rows of ``block``."""
        layout = self.layout
        column = self._ordinal_column
        if column is not None:
            return block.view(layout.ordinal_dtype)[:, column].astype(np.int64)
        at, size = layout.ordinal_offset, layout.ordinal_dtype.itemsize
        return np.ascontiguousarray(block[:, at : at + size]).view(layout.ordinal_dtype).reshape(-1).astype(np.int64)

    @staticmethod
    def cut(block: np.ndarray, c: FieldCut) -> np.ndarray:
        """Field ``c`` of every row of ``block``: a contiguous ``[B, *shape]`` array of its dtype."""
        if c.aligned:
            part = block.view(c.dtype)[:, c.lo : c.hi]
            return (part.reshape(block.shape[0], *c.shape) if c.reshape else part).copy()
        return np.ascontiguousarray(block[:, c.lo : c.hi]).view(c.dtype).reshape(block.shape[0], *c.shape)

    def gather(self, rows: np.ndarray) -> tuple[np.ndarray, list[tuple[Key, torch.Tensor]]]:
        block = self.take(rows)
        return self.ordinal(block), [(c.key, torch.from_numpy(self.cut(block, c))) for c in self.cuts]
