"""Per-feature statistics computed in one pass: mean, std, min, max and the 1st/99th percentiles.

This module holds one concept: the running statistics of a dataset's keys, and their readings.

:class:`FeatureStats` takes TED batches (a build's chunks as a loader hands them over, or the rows of
any storage) one after the other and never looks at a row twice; :meth:`FeatureStats.result` gives,
per numeric key (``"observation"``, ``"action"``, ``"next/reward"``, ``"observation/image"``, ...)::

    {"mean": [...], "std": [...], "min": [...], "max": [...], "q01": [...], "q99": [...],
     "shape": [...], "dtype": "float32", "count": rows, "nonfinite": values left out, "q_rel_error": 0.0 or 0.0039}

How each value is computed (the contract the tests check against numpy over the whole data):

- Which keys: every tensor leaf that is neither bool (flags) nor derived by the build (``episode``,
  ``step``, ``done``/``terminated``/``truncated``), and not ``next/<key>`` of a key also stored at the
  root (``next/observation`` has the statistics of ``observation``). Statistics are over the rows of
  the transitions (``observation`` at every ``t``: what ``rb[:]["observation"]`` holds).
- Which axis: per element for scalars and for items of at most :data:`MAX_ELEMENTS` values (a state
  of 17 values has 17 means); per channel for images (3-d items with 1, 3 or 4 channels first or
  last: HWC gives shape ``[1, 1, C]``, CHW ``[C, 1, 1]``, so the arrays broadcast against an item);
  over all values for any other large item (shape ``[]``). ``shape`` records which.
- mean and std (population, numpy's ``ddof=0``): float64 moments of each block of values, as sums of
  the values minus a shift (the previous block's mean; a block far from it, relative to its spread, is
  summed again about its own mean), merged with Chan's pairwise update (numerically stable; equal to
  numpy's two-pass results to about 1e-9 relative or better).
- min, max: exact.
- percentiles: numpy's default (linear interpolation between order statistics) at 1 and 99.
  *Exact* for integer dtypes of at most 16 bits (uint8 images: a 256-bin count per channel) and, for
  other dtypes, while each channel has at most :data:`EXACT_DISTINCT` distinct values (counts of
  every distinct value). Past that, values are counted in buckets of relative width 2**-7 (a
  float64's exponent and the 7 leading bits of its mantissa; an HDR-histogram-like scheme; a float32
  key of at most :data:`HIGH_HALF_CHANNELS` channels counts each value's high 16 bits, its sign,
  exponent and 7 leading mantissa bits, which are the same bucket): each order statistic comes back
  within ``q_rel_error`` = :data:`RELATIVE_ERROR` (about 0.39%) of its
  magnitude, plus :data:`ZERO_BAND` (7.5e-9) absolute near zero, and inside the exact [min, max];
  numpy's interpolation between two order statistics keeps that bound relative to the larger of
  the two. ``q_rel_error`` records which case a key is in.
- NaN and +-inf values are left out of every statistic and counted in ``nonfinite`` (as numpy's
  ``nan*`` functions do for NaN).

Memory is bounded per key whatever the dataset size (per channel: the counts of
:data:`EXACT_DISTINCT` values, or a few thousand buckets, or for float32 keys 65,536 counts of 8 bytes
of which only the pages holding counted values are ever touched). Each batch is read in blocks of at
most :data:`_BLOCK_VALUES` values (:data:`_COUNT_BLOCK_VALUES` for small integers and while a key may
still have few distinct values) as rows of channel values, as they lie in memory (no transposed copy):
each reduction runs down rows of :data:`_TILE_VALUES` values, wide contiguous loops. The statistics run
beside a build's writes in a thread of their own (``datasets_hub.build.writer``): each numpy call
hands the GIL back and must take it again, so a few large calls per block keep that thread from
waiting on the writer's Python code more than it computes.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from datasets_hub.buffers.nested_keys import Key, as_key, key_to_str

#: percentiles every key gets, with the names they are stored under
PERCENTILES = {"q01": 1.0, "q99": 99.0}
#: items with more values than this (and not images) get one statistic over all their values
MAX_ELEMENTS = 4096
#: per channel: distinct values counted exactly before switching to buckets
EXACT_DISTINCT = 1 << 14
#: relative error bound of an order statistic once a channel is in buckets: half a bucket
RELATIVE_ERROR = 2**-8
#: values of smaller magnitude share the zero bucket (absolute error bound there)
ZERO_BAND = 2.0**-27
#: keys the build derives itself (never statistics: ids, time, flags)
DERIVED = frozenset({("episode",), ("step",), ("done",), ("terminated",), ("truncated",), ("next", "done")})
_BLOCK_VALUES = 1 << 19  # values per block past the few-distinct-values stage (see the module docstring)
_COUNT_BLOCK_VALUES = 1 << 22  # small integers take one counting pass per block: no cache to keep
_MANTISSA_SHIFT = 52 - 7  # a float64's bits past its 7 leading mantissa bits
_ZERO_BUCKET = int(np.array(ZERO_BAND, np.float64).view(np.int64)) >> _MANTISSA_SHIFT  # first above the zero band
_MANTISSA_SHIFT_32 = 23 - 7  # the same 7 leading mantissa bits of a float32
_ZERO_BUCKET_32 = _ZERO_BUCKET - ((1023 - 127) << 7)  # float32 buckets above ZERO_BAND (a normal float32)
_COVER_MARGIN = 128  # bucket columns added beyond a new extreme: one power of two's worth
#: float32 keys of at most this many channels count their values' high 16 bits (65,536 int64 counts,
#: 512 KiB, per channel; see the module docstring); wider keys count buckets over the range seen
HIGH_HALF_CHANNELS = 64
_HALVES = 1 << 16  # high halves of a float32
# a channel's counts start one 64-byte line past a multiple of 512 KiB: at exactly 512 KiB apart, the
# counts of equal values in different channels (read in turn) would share a cache set, and miss
_HIGH_STRIDE = _HALVES + 8
_HIGH_HALF = 1 if sys.byteorder == "little" else 0  # which uint16 of a float32 holds its high bits
_SIGN = 1 << 15  # a high half's sign bit
_INFINITY_32 = 0x7F80  # the high half of +inf: finite magnitudes are below it
_TILE_VALUES = 1024  # a block's rows are reduced in tiles of this many values: wide inner loops
_SHIFT_RATIO = 64.0  # a block whose mean is further than sqrt(this) of its std from the shift is re-centred
_SMALL_INTS = {np.dtype(t): (int(np.iinfo(t).min), 1 << (8 * np.dtype(t).itemsize)) for t in ("u1", "i1", "u2", "i2")}


def stats_keys(keys: Iterable[Any], dtypes: Mapping[Key, torch.dtype]) -> list[Key]:
    """The keys of a TED batch (``keys``, with their ``dtypes``) that get statistics (module docstring)."""
    keyset = {as_key(k) for k in keys}
    out = []
    for key in sorted(keyset):
        if key in DERIVED or key == ("history",) or dtypes[key] == torch.bool:
            continue
        if key[0] == "next" and key[1:] in keyset:
            continue
        if dtypes[key].is_complex:
            continue
        out.append(key)
    return out


def _layout(item_shape: tuple[int, ...]) -> tuple[list[int], int, list[int]]:
    """``(axes, channels, stats shape)``: how an item of ``item_shape`` is read as rows of channels.

    ``axes`` is the permutation of the item axes that puts the channel axis last (empty: no change).
    """
    numel = math.prod(item_shape)
    if len(item_shape) == 3:
        if item_shape[-1] in (1, 3, 4):
            return [], item_shape[-1], [1, 1, item_shape[-1]]
        if item_shape[0] in (1, 3, 4):
            return [1, 2, 0], item_shape[0], [item_shape[0], 1, 1]
    if numel <= MAX_ELEMENTS:
        return [], max(1, numel), list(item_shape)
    return [], 1, []


class _KeyStats:
    """The running statistics of one key (see the module docstring)."""

    def __init__(self, item_shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.item_shape = item_shape
        self.axes, self.channels, self.shape = _layout(item_shape)
        self.dtype = dtype
        self.rows = 0
        self.nonfinite = 0
        c = self.channels
        small = _SMALL_INTS.get(dtype)  # (offset, bins): exact counts of every value
        self.small = small is not None
        self.offset, self.bins = small if small is not None else (0, 0)
        if self.small:
            self.hist = np.zeros((c, self.bins), dtype=np.int64)
            return
        self.count = np.zeros(c, dtype=np.int64)
        self.mean = np.zeros(c)
        self.m2 = np.zeros(c)
        self.min = np.full(c, np.inf)
        self.max = np.full(c, -np.inf)
        self.exact: list[tuple[np.ndarray, np.ndarray]] | None = [(np.zeros(0), np.zeros(0, np.int64))] * c
        self.buckets = np.zeros((c, 0), dtype=np.int64)
        self.lo = 0  # bucket index of column 0
        self.shift: np.ndarray | None = None  # what the next block's moments are summed about (_update_block)
        self.high: np.ndarray | None = None  # float32 keys in buckets: counts of each high half (_count_high)
        self.high_counted = 0  # values per channel counted in ``high``

    def state(self) -> dict[str, Any]:
        """The attributes :meth:`restored` goes on from, with the float32 counts folded into the buckets:
        the layout of the states written before those counts existed, plus ``shift``."""
        if not self.small:
            self.fold()
        return {name: value for name, value in vars(self).items() if name not in ("high", "high_counted")}

    @classmethod
    def restored(cls, attrs: Mapping[str, Any]) -> _KeyStats:
        stats = cls.__new__(cls)
        # a state written before the shifted sums lacks ``shift``: the next block picks one, as a first
        # block does (the values stay within the contract; only their last bits may differ)
        stats.shift, stats.high, stats.high_counted = None, None, 0
        vars(stats).update(attrs)
        return stats

    def _by_channel(self, values: np.ndarray) -> np.ndarray:
        """``[channels, values]``, each channel's values contiguous (small integers: one count per channel)."""
        return np.ascontiguousarray(self._channels_last(values).T)

    def _channels_last(self, values: np.ndarray) -> np.ndarray:
        """``[values, channels]``, C-contiguous: a view of rows of items, a copy for channel-first images."""
        if self.axes:
            values = values.transpose(0, *[a + 1 for a in self.axes])
        return np.ascontiguousarray(values.reshape(-1, self.channels))

    def update(self, values: np.ndarray) -> None:
        n = values.shape[0]
        if self.rows == 0 and not self.small and self.exact is not None:
            self._settle_exact(values)  # once: a key whose first rows have few distinct values keeps them
        self.rows += n
        per_row = max(1, math.prod(self.item_shape))
        tile = _tile_rows(self.channels)
        a = 0
        while a < n:
            # large blocks while counting small integers, or while telling whether a key has few distinct
            # values (a prefix of a large block settles that, see _settle_exact); cache-sized blocks after
            large = self.small or self.exact is not None
            step = max(1, (_COUNT_BLOCK_VALUES if large else _BLOCK_VALUES) // per_row)
            if per_row == self.channels and step > tile:
                step -= step % tile  # an item is one value per channel: blocks of whole tiles
            if self.small:
                self._count_small(self._by_channel(values[a : a + step]))
            else:
                self._update_block(self._channels_last(values[a : a + step]))
            a += step

    # -- integers of at most 16 bits: every value counted ---------------------------------------------
    def _count_small(self, block: np.ndarray) -> None:
        if self.offset:  # signed: flipping the sign bit orders the values from 0 (value - offset)
            unsigned = np.uint8 if self.bins == 256 else np.uint16
            block = np.bitwise_xor(block.view(unsigned), np.array(-self.offset).astype(unsigned))
        values = torch.from_numpy(block.astype(np.int32) if block.dtype == np.uint16 else block)
        # torch's bincount per channel: in a build, cheaper than one numpy count over channels x values
        # on the untransposed block (docs/results/mixtures.md)
        for c in range(self.channels):
            self.hist[c] += torch.bincount(values[c], minlength=self.bins).numpy()

    # -- other dtypes: merged moments, then exact or bucketed counts ---------------------------------
    def _update_block(self, block: np.ndarray) -> None:
        """Add ``block`` (``[values, channels]``, C-contiguous): its whole tiles, then the rows left over,
        to the moments; then every value to the counts (exact ones: one merge for the whole block)."""
        c = self.channels
        tile = _tile_rows(c)
        whole = block.shape[0] - block.shape[0] % tile
        parts = [(block[:whole].reshape(-1, tile * c), tile)] if whole else []
        if whole < block.shape[0]:
            parts.append((block[whole:], 1))
        added = [self._add_moments(part, part_tile) for part, part_tile in parts]
        if self.exact is not None:
            columns = [np.concatenate([part_columns[i] for _, part_columns, _ in added]) for i in range(c)]
            if self._count_exact(columns):
                return
            self._to_buckets()
        for (part, part_tile), (all_finite, part_columns, extremes) in zip(parts, added, strict=True):
            if not all_finite:
                for channel, column in enumerate(part_columns):
                    self._bucket(column, None, channel=channel)
            elif part.dtype == np.float32 and c <= HIGH_HALF_CHANNELS:
                self._count_high(part, part_tile)
            else:
                self._bucket_all(part, part_tile, extremes)

    def _add_moments(
        self, tiled: np.ndarray, tile: int
    ) -> tuple[bool, list[np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Merge the moments and extremes of ``tiled`` (``[rows, tile * channels]``, C-contiguous, each row
        ``tile`` consecutive rows of channel values): every reduction runs down the rows (wide, contiguous
        inner loops: no transposed copy) and folds its ``tile`` partial results per channel after. Returns
        whether every value is finite, each channel's finite values (where they are counted exactly, or
        some are not finite; else empty) and each channel's min and max."""
        c = self.channels
        n = tiled.shape[0] * tile  # values per channel
        if self.shift is None:
            first = tiled[0, :c].astype(np.float64)
            self.shift = np.where(np.isfinite(first), first, 0.0)
        with np.errstate(invalid="ignore", over="ignore"):
            sums, squares = _shifted_sums(tiled, self.shift, tile, c)  # NaN and inf show in their channel's sums
            all_finite = bool(np.isfinite(sums).all() and np.isfinite(squares).all())
        if all_finite:
            # Moments about the shift K: with d = S1/n the block's mean minus K, M2 = S2 - S1 * d. Each
            # sum runs over at most _TILE_VALUES + _BLOCK_VALUES / _TILE_VALUES terms (down a tile column,
            # then across the tile), so S2 is within about 1.5e3 eps of itself, and M2 within that times
            # (1 + d**2 / var) of itself: the subtraction cancels when the block sits far from K. K is the
            # previous block's mean, close for steady data; a block past _SHIFT_RATIO (a drifting key: a
            # clock, a counter) is summed again about its own mean, where d is a rounding error and the
            # sums are numpy's two passes. Either way M2 is within about 1e-11 relative (65 * 1.5e3 eps).
            offset = sums / n
            m2 = squares - sums * offset
            if (offset * offset * n > _SHIFT_RATIO * m2).any():
                self.shift = self.shift + offset
                sums, squares = _shifted_sums(tiled, self.shift, tile, c)
                offset = sums / n
                m2 = squares - sums * offset
            mean = self.shift + offset
            m2 = np.maximum(m2, 0.0)  # a constant channel's rounding
            self.shift = mean
            count = np.full(c, n, dtype=np.int64)
            # on the block's own dtype (exact: a float64 copy orders values the same), fewer bytes to read
            lo = np.minimum.reduce(tiled.min(axis=0).reshape(tile, c), axis=0).astype(np.float64)
            hi = np.maximum.reduce(tiled.max(axis=0).reshape(tile, c), axis=0).astype(np.float64)
            columns = list(tiled.reshape(-1, c).T.astype(np.float64)) if self.exact is not None else []
        else:
            # [channels, values]: numpy's pairwise sums along each channel's contiguous values (sums down
            # the rows would add up to a block of values in sequence); a rare path, the copy is no matter
            x = np.ascontiguousarray(tiled.reshape(-1, c).T, dtype=np.float64)
            finite = np.isfinite(x)
            self.nonfinite += int((~finite).sum())
            count = finite.sum(axis=1)
            safe = np.where(finite, x, 0.0)
            mean = np.divide(safe.sum(axis=1), count, out=np.zeros(c), where=count > 0)
            m2 = (np.where(finite, x - mean[:, None], 0.0) ** 2).sum(axis=1)
            lo = np.where(finite, x, np.inf).min(axis=1)
            hi = np.where(finite, x, -np.inf).max(axis=1)
            columns = [x[i, finite[i]] for i in range(c)]
        # Chan et al.'s merge of (count, mean, M2): stable for any split of the data
        total = self.count + count
        delta = mean - self.mean
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(total > 0, count / np.maximum(total, 1), 0.0)
            self.m2 = self.m2 + m2 + delta**2 * self.count * share
        self.mean = self.mean + delta * share
        self.count = total
        self.min = np.minimum(self.min, lo)
        self.max = np.maximum(self.max, hi)
        return all_finite, columns, (lo, hi)

    def _count_exact(self, columns: list[np.ndarray]) -> bool:
        """Merge each channel's ``columns`` (finite values) into its exact counts; False (counts left as
        they were) once a channel would pass :data:`EXACT_DISTINCT` distinct values."""
        merged: list[tuple[np.ndarray, np.ndarray]] = []
        for (values, counts), column in zip(self.exact or [], columns, strict=True):
            # a prefix with too many distinct values settles it for the price of a small sort
            if column.size > EXACT_DISTINCT and np.unique(column[: EXACT_DISTINCT + 1]).size > EXACT_DISTINCT:
                return False
            new, new_counts = np.unique(column, return_counts=True)
            both, inverse = np.unique(np.concatenate([values, new]), return_inverse=True)
            total = np.bincount(inverse, weights=np.concatenate([counts, new_counts]), minlength=both.size)
            if both.size > EXACT_DISTINCT:
                return False
            merged.append((both, total.astype(np.int64)))
        self.exact = merged
        return True

    def _to_buckets(self) -> None:
        """Too many distinct values: the exact counts go into buckets, and every value from now on."""
        for c, (values, counts) in enumerate(self.exact or []):
            self._bucket(values, counts, channel=c)
        self.exact = None

    def _settle_exact(self, values: np.ndarray) -> None:
        """Go to buckets now if a channel's first values in ``values`` (rows of items) are already more
        than :data:`EXACT_DISTINCT` distinct finite values: the key would go there anyway, with the same
        counts, and the rest of the batch is then read in cache-sized blocks. Per channel tried: a count of
        its values' distinct low 16 bits, and a sort only when that does not already prove it."""
        per_channel_row = max(1, math.prod(self.item_shape) // self.channels)
        rows = -(-2 * EXACT_DISTINCT // per_channel_row)  # twice the bound: a few repeated values still tell
        if values.shape[0] < rows:
            return
        prefix = values[:rows]
        if self.axes:
            prefix = prefix.transpose(0, *[a + 1 for a in self.axes])
        prefix = prefix.reshape(rows, -1, self.channels)  # one channel: [:, :, c], read only as needed
        for c in range(self.channels):
            # distinct as the exact counts see them: float64 values (float32 ones convert exactly)
            column = prefix[:, :, c]
            seen = column.astype(np.float32 if column.dtype == np.float32 else np.float64).reshape(-1)
            seen = seen[np.isfinite(seen)]
            if _distinct_bit_patterns(seen) > EXACT_DISTINCT + 1:  # +1: 0.0 and -0.0, one value
                self._to_buckets()  # proven without a sort (distinct patterns of the low 16 bits)
                return
            seen = np.sort(seen)
            if seen.size and 1 + np.count_nonzero(seen[1:] != seen[:-1]) > EXACT_DISTINCT:
                self._to_buckets()
                return

    def _cover(self, lo: int, hi: int) -> None:
        """Grow the bucket columns to hold bucket indices ``lo..hi``, and :data:`_COVER_MARGIN` more on the
        side that grows (extremes grow a little at a time early on: one copy of the counts, not one per
        block; empty columns change no statistic)."""
        width = self.buckets.shape[1]
        if width == 0:
            self.lo = lo
        start = self.lo if lo >= self.lo else lo - _COVER_MARGIN
        stop = self.lo + width if hi < self.lo + width else hi + 1 + _COVER_MARGIN
        if start < self.lo or stop > self.lo + width:
            grown = np.zeros((self.channels, stop - start), dtype=np.int64)
            grown[:, self.lo - start : self.lo - start + width] = self.buckets
            self.buckets, self.lo = grown, start

    def _bucket(self, values: np.ndarray, weights: np.ndarray | None, channel: int) -> None:
        """Count one channel's ``values`` (each ``weights`` times, or once) in buckets."""
        if not values.size:
            return
        index = _bucket_index(values)
        self._cover(int(index.min()), int(index.max()))
        counted = np.bincount(index - self.lo, weights=weights, minlength=self.buckets.shape[1])
        self.buckets[channel] += counted.astype(np.int64)

    def _bucket_all(self, tiled: np.ndarray, tile: int, extremes: tuple[np.ndarray, np.ndarray]) -> None:
        """Count every value of ``tiled`` (see :meth:`_update_block`; all finite) in buckets; ``extremes``
        holds each channel's min and max, whose buckets bound the block's (the bucket index grows with
        the value), so no pass looks for them."""
        lo, hi = _bucket_index(np.array([extremes[0].min(), extremes[1].max()]))
        self._cover(int(lo), int(hi))
        width = self.buckets.shape[1]
        self.buckets = np.ascontiguousarray(self.buckets)  # (a no-op) so that the flat view below is a view
        # each channel's buckets at bucket + channel * width of the flat counts, in one add; the index
        # as intp: numpy's counting loops take intp, and a smaller index is converted several times slower
        flat = np.add(_bucket_index(tiled), _channel_offsets(self.channels, tile, width) - self.lo, dtype=np.intp)
        np.add.at(self.buckets.reshape(-1), flat.reshape(-1), 1)  # into the counts: no block of zeros

    def _count_high(self, tiled: np.ndarray, tile: int) -> None:
        """Count every float32 value of ``tiled`` (all finite) by its high 16 bits (sign, exponent and 7
        leading mantissa bits: its bucket, see :meth:`fold`), 65,536 counts per channel: one add for the
        index, no bucket arithmetic, no extremes to cover."""
        if self.high is None:
            self.high = np.zeros((self.channels, _HIGH_STRIDE), dtype=np.int64)  # pages stay unmapped until counted
        self.high_counted += tiled.shape[0] * tile  # values per channel in ``high``
        halves = tiled.view(np.uint16)[:, _HIGH_HALF::2]
        index = np.add(halves, _channel_offsets(self.channels, tile, _HIGH_STRIDE), dtype=np.intp)
        np.add.at(self.high.reshape(-1), index.reshape(-1), 1)

    def fold(self) -> None:
        """Move the counts of float32 high halves into the buckets. A finite float32 whose high half is
        ``h`` (magnitude bits ``p = h & 0x7FFF``) falls in bucket ``p - (_ZERO_BUCKET_32 - 1)`` signed
        as the value, or 0 for ``p < _ZERO_BUCKET_32`` (:func:`_bucket_index`): positive halves from
        ``_ZERO_BUCKET_32`` on are buckets 1, 2, ... in order, negative ones the same buckets negated.
        Only the columns between the buckets of the exact extremes are read (the rest were never counted)."""
        high = self.high
        if high is None:
            return
        lowest, highest = _bucket_index(np.array([self.min.min(), self.max.max()]))
        top, bottom = max(int(highest), 0), max(-int(lowest), 0)
        positive = high[:, _ZERO_BUCKET_32 : _ZERO_BUCKET_32 + top]  # column j: bucket j + 1
        negative = high[:, _SIGN + _ZERO_BUCKET_32 : _SIGN + _ZERO_BUCKET_32 + bottom]  # column j: bucket -(j + 1)
        zero = self.high_counted - positive.sum(axis=1) - negative.sum(axis=1)  # the zero band's columns unread
        self._cover(-bottom, top)
        zero_column = -self.lo
        self.buckets[:, zero_column] += zero
        self.buckets[:, zero_column + 1 : zero_column + 1 + top] += positive
        self.buckets[:, zero_column - bottom : zero_column] += negative[:, ::-1]
        self.high, self.high_counted = None, 0

    # -- the result -----------------------------------------------------------------------------------
    def result(self) -> dict[str, Any]:
        if self.small:
            out = self._small_result()
        else:
            self.fold()
            out = self._moment_result()
        # NaN (a channel with no finite value) is written null: manifests are strict JSON
        shaped = {k: _json_values(v, self.shape) for k, v in out.items()}
        return {
            **shaped,
            "shape": list(self.shape),
            "dtype": self.dtype.name,
            "count": self.rows,
            "nonfinite": self.nonfinite,
            "q_rel_error": 0.0 if (self.small or self.exact is not None) else RELATIVE_ERROR,
        }

    def _small_result(self) -> dict[str, np.ndarray]:
        offset, bins = self.offset, self.bins
        values = np.arange(bins, dtype=np.float64) + offset
        hist = self.hist.astype(np.float64)
        total = hist.sum(axis=1)
        mean = (hist * values).sum(axis=1) / total
        var = (hist * (values - mean[:, None]) ** 2).sum(axis=1) / total
        seen = self.hist > 0
        out = {
            "mean": mean,
            "std": np.sqrt(var),
            "min": np.array([values[np.argmax(row)] for row in seen]),
            "max": np.array([values[bins - 1 - np.argmax(row[::-1])] for row in seen]),
        }
        for name, q in PERCENTILES.items():
            out[name] = np.array(
                [_percentile(values[row > 0], self.hist[c][row > 0], q) for c, row in enumerate(self.hist)]
            )
        return out

    def _moment_result(self) -> dict[str, np.ndarray]:
        empty = self.count == 0
        with np.errstate(invalid="ignore", divide="ignore"):
            std = np.sqrt(self.m2 / self.count)
        out = {
            "mean": np.where(empty, np.nan, self.mean),
            "std": np.where(empty, np.nan, std),
            "min": np.where(empty, np.nan, self.min),
            "max": np.where(empty, np.nan, self.max),
        }
        exact = self.exact
        if exact is not None:
            for name, q in PERCENTILES.items():
                out[name] = np.array([_percentile(values, counts, q) for values, counts in exact])
            return out
        # bucket counts: one running sum per channel, every channel's order statistics found at once; only
        # the buckets they fall in are valued
        cumulative = np.cumsum(self.buckets, axis=1)
        for name, q in PERCENTILES.items():
            out[name] = self._bucket_percentiles(cumulative, q)
        return out

    def _bucket_percentiles(self, cumulative: np.ndarray, q: float) -> np.ndarray:
        """Per channel, numpy's default percentile ``q`` of the bucketed values whose running counts are
        ``cumulative`` (``[channels, columns]``): :func:`_percentile_of`'s arithmetic, on arrays."""
        if cumulative.shape[1] == 0:
            return np.full(self.channels, np.nan)
        total = cumulative[:, -1]
        h = (total - 1) * q / 100.0
        below = np.floor(h)
        above = np.minimum(below + 1, total - 1)
        last = cumulative.shape[1] - 1
        # the first column whose running count passes each rank (searchsorted, side="right", per row)
        a = self._bucket_values(np.minimum((cumulative <= below[:, None]).sum(axis=1), last))
        b = self._bucket_values(np.minimum((cumulative <= above[:, None]).sum(axis=1), last))
        t = h - below
        with np.errstate(invalid="ignore"):  # empty channels, NaN below
            value = np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t)
        return np.where(total > 0, value, np.nan)

    def _bucket_values(self, columns: np.ndarray) -> np.ndarray:
        """The value standing for each channel's bucket column ``columns[c]``, inside its exact [min, max]."""
        with np.errstate(invalid="ignore"):  # an empty channel's [inf, -inf]: its value is unused
            return np.clip(_bucket_value(columns + self.lo), self.min, self.max)


def _tile_rows(channels: int) -> int:
    """Rows of ``channels`` values reduced as one row of a tile (see :meth:`_KeyStats._update_block`)."""
    return max(1, _TILE_VALUES // channels)


@functools.lru_cache(maxsize=256)
def _channel_offsets(channels: int, tile: int, width: int) -> np.ndarray:
    """``channel * width`` for each value of a row of a tile: where each channel's counts start in its
    key's flat counts (read-only, shared)."""
    offsets = np.tile(np.arange(channels, dtype=np.intp) * width, tile)
    offsets.setflags(write=False)
    return offsets


def _shifted_sums(tiled: np.ndarray, shift: np.ndarray, tile: int, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Per channel, the sum and the sum of squares of ``tiled``'s values minus ``shift``, in float64."""
    centred = np.subtract(tiled, np.tile(shift, tile), dtype=np.float64)
    sums = centred.sum(axis=0).reshape(tile, channels).sum(axis=0)
    squares = np.einsum("ij,ij->j", centred, centred).reshape(tile, channels).sum(axis=0)
    return sums, squares


def _json_values(values: np.ndarray, shape: list[int]) -> Any:
    """Nested lists of ``shape``, NaN as None."""
    numbers = np.asarray(values, dtype=np.float64).reshape(shape)
    out = numbers.astype(object)
    out[np.isnan(numbers)] = None
    return out.tolist()


def _bucket_index(values: np.ndarray) -> np.ndarray:
    """The signed bucket of each value: 0 for ``|x| < ZERO_BAND``, else ``sign(x) * k``, ``k >= 1``
    growing with ``|x|``. A bucket is a float64 exponent and the 7 leading bits of its mantissa (the
    upper 18 bits of ``|x|``), so it spans at most 2**-7 of its lower bound: integer work, no logarithm."""
    if values.dtype == np.float32:  # the same buckets from a float32's 32 bits: no float64 copy
        bits = values.view(np.int32)
        k = (bits & 0x7FFFFFFF) >> _MANTISSA_SHIFT_32
        k -= _ZERO_BUCKET_32 - 1  # its exponent's bias differs from a float64's by 896: same buckets
    else:
        bits = values.astype(np.float64, copy=False).view(np.int64)
        k = (bits & 0x7FFFFFFFFFFFFFFF) >> _MANTISSA_SHIFT
        k -= _ZERO_BUCKET - 1
    np.maximum(k, 0, out=k)
    sign = bits >> (8 * bits.itemsize - 1)  # -1 where the sign bit is set, else 0
    k ^= sign  # two's complement negation where negative, without a masked ufunc (several times slower)
    k -= sign
    return k


def _distinct_bit_patterns(values: np.ndarray) -> int:
    """How many distinct low 16 bits the float32 or float64 ``values`` (finite) have: a lower bound of
    their distinct bit patterns, so of their distinct values plus one (0.0 and -0.0 are one value with
    two patterns). Counting 65,536 bins is several times cheaper than the sort that counts exactly."""
    bits = values.view(np.uint32 if values.dtype == np.float32 else np.uint64)
    low = np.bitwise_and(bits, 0xFFFF).astype(np.intp)
    return int(np.count_nonzero(np.bincount(low, minlength=1 << 16)))


def _bucket_value(index: np.ndarray) -> np.ndarray:
    """The value standing for each bucket: the middle of its range, within 2**-8 of every value in it."""
    upper = np.abs(index).astype(np.int64) + _ZERO_BUCKET - 1
    low = (upper << _MANTISSA_SHIFT).view(np.float64)
    high = ((upper + 1) << _MANTISSA_SHIFT).view(np.float64)
    return np.where(index == 0, 0.0, np.sign(index) * (low + high) / 2)


def _percentile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """numpy's default percentile (linear interpolation) of the multiset ``values`` (sorted) x ``counts``."""
    return _percentile_of(np.cumsum(counts), lambda i: float(values[i]), q)


def _percentile_of(cumulative: np.ndarray, value_at: Callable[[int], float], q: float) -> float:
    """numpy's default percentile of a multiset given as the running sum of its counts (sorted values,
    zero counts allowed) and ``value_at(i)``, the value counted at position ``i``."""
    total = int(cumulative[-1]) if cumulative.size else 0
    if total == 0:
        return math.nan
    h = (total - 1) * q / 100.0
    below = math.floor(h)
    above = min(below + 1, total - 1)
    # the first position whose running count passes the rank: always one with a count
    a = value_at(int(np.searchsorted(cumulative, below, side="right")))
    b = value_at(int(np.searchsorted(cumulative, above, side="right")))
    t = h - below
    # numpy's own lerp (numpy/lib/_function_base_impl.py: _lerp): the same float result
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


class FeatureStats:
    """One pass of per-feature statistics over TED batches (see the module docstring).

    ``update(batch)`` adds the rows of a TensorDict whose batch dimension is the rows; the first
    batch fixes the keys (later ones must hold them with the same per-row shapes). ``result()`` gives
    ``{key: {"mean": ..., ...}}`` with keys written ``"next/reward"``.
    """

    def __init__(self) -> None:
        self._keys: dict[Key, _KeyStats] | None = None

    def update(self, batch: TensorDictBase) -> None:
        if batch.batch_dims < 1:
            raise ValueError(f"FeatureStats takes batches of rows, got batch size {list(batch.batch_size)}")
        if self._keys is None:
            leaves = {as_key(k): batch.get(k) for k in batch.keys(include_nested=True, leaves_only=True)}
            tensors = {k: v for k, v in leaves.items() if isinstance(v, torch.Tensor)}
            chosen = stats_keys(tensors, {k: v.dtype for k, v in tensors.items()})
            self._keys = {
                k: _KeyStats(tuple(tensors[k].shape[batch.batch_dims :]), _numpy(tensors[k][:0]).dtype) for k in chosen
            }
        for key, stats in self._keys.items():
            value = batch.get(key, None)
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"FeatureStats: this batch lacks {key_to_str(key)!r}, which the first batch held")
            value = value.reshape(-1, *value.shape[batch.batch_dims :])
            if tuple(value.shape[1:]) != stats.item_shape:
                raise ValueError(
                    f"FeatureStats: {key_to_str(key)!r} has per-row shape {list(value.shape[1:])} here but "
                    f"{list(stats.item_shape)} in the first batch"
                )
            stats.update(_numpy(value))

    def result(self) -> dict[str, dict[str, Any]]:
        return {key_to_str(k): s.result() for k, s in (self._keys or {}).items()}

    def state(self) -> dict[str, Any]:
        """The running state as tensors and plain values (``torch.load(..., weights_only=True)`` reads it
        back): :meth:`from_state` goes on exactly where this left off, so the statistics of a resumed build
        equal those of an uninterrupted one."""
        if self._keys is None:
            return {"keys": None}
        return {"keys": [(list(k), _plain(s.state())) for k, s in self._keys.items()]}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> FeatureStats:
        stats = cls()
        if state["keys"] is not None:
            stats._keys = {}
            for key, attrs in state["keys"]:
                stats._keys[tuple(key)] = _KeyStats.restored(_unplain(attrs))
        return stats


def _plain(value: Any) -> Any:
    """``value`` with numpy arrays as tensors and dtypes as tagged names (see :meth:`FeatureStats.state`)."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value))
    if isinstance(value, np.dtype):
        return {"numpy_dtype": value.str}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _unplain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        if set(value) == {"numpy_dtype"}:
            return np.dtype(value["numpy_dtype"])
        return {k: _unplain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_unplain(v) for v in value)
    return value


def _numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.to(torch.float32)
    return t.numpy()


def compute_feature_stats(storage: Any, block_rows: int = 65536) -> dict[str, dict[str, Any]]:
    """The statistics of every row of ``storage`` (anything that reads ``storage[a:b]`` as a TED
    TensorDict of rows, e.g. a build's storage or a buffer): what a build records, computed on demand
    for a build made before statistics were recorded (it reads all of the data once)."""
    stats = FeatureStats()
    n = len(storage)
    if n == 0:
        raise ValueError("cannot compute statistics of an empty storage")
    for a in range(0, n, block_rows):
        stats.update(storage[a : min(n, a + block_rows)])
    return stats.result()


def stats_arrays(entry: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """One key's statistics as float64 arrays of their recorded ``shape`` (broadcastable against an item)."""
    shape = tuple(entry.get("shape", ()))
    return {
        name: np.asarray(entry[name], dtype=np.float64).reshape(shape)
        for name in ("mean", "std", "min", "max", *PERCENTILES)
        if name in entry
    }


def lerobot_stats(features: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``features`` in the layout of LeRobot's ``meta/stats.json``: keys with dots
    (``observation.state``), per key ``mean``/``std``/``min``/``max``/``q01``/``q99`` as nested lists and
    ``count`` as ``[rows]``; per-channel image statistics as ``[C, 1, 1]`` and, for uint8 images, on
    the [0, 1] scale LeRobot computes them on (divided by 255)."""
    out: dict[str, dict[str, Any]] = {}
    for key, entry in features.items():
        arrays = stats_arrays(entry)
        shape = list(entry.get("shape", []))
        image = len(shape) == 3 and shape.count(1) == 2
        if image:
            channels = max(shape)
            arrays = {k: v.reshape(channels, 1, 1) for k, v in arrays.items()}
            if entry.get("dtype") == "uint8":
                arrays = {k: v / 255.0 for k, v in arrays.items()}  # std scales with the values too
        record: dict[str, Any] = {k: v.tolist() for k, v in arrays.items()}
        record["count"] = [int(entry.get("count", 0))]
        out[key.replace("/", ".")] = record
    return out
