"""Where the valid slice starts of one storage's episodes are, for one slice length (docs/guide/sampling.md).

Shared by :class:`~datasets_hub.buffers.samplers.slice.SliceSampler` and
:class:`~datasets_hub.buffers.samplers.prioritized.PrioritizedSliceSampler`.
"""

from __future__ import annotations

import numpy as np
import torch

from datasets_hub.buffers.episode_index import EpisodeIndex


def check_slice_shape(num_slices: int | None, slice_len: int | None) -> None:
    """Refuse a slice sampler's shape unless exactly one of ``num_slices`` (slices per batch) and
    ``slice_len`` (rows per slice) is given, as a positive int (host and device slice samplers)."""
    if (num_slices is None) == (slice_len is None):
        raise ValueError(
            "pass exactly one of num_slices (slices per batch) or slice_len (rows per slice), "
            f"got num_slices={num_slices}, slice_len={slice_len}"
        )
    for name, value in (("num_slices", num_slices), ("slice_len", slice_len)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive int, got {value!r}")


_ARANGES: dict[int, torch.Tensor] = {}
_ARANGES_NP: dict[int, np.ndarray] = {}


def cached_arange(n: int) -> torch.Tensor:
    """A cached ``torch.arange(n)`` (read-only use: one allocation less per call)."""
    t = _ARANGES.get(n)
    if t is None:
        t = _ARANGES[n] = torch.arange(n)
    return t


def cached_arange_np(n: int) -> np.ndarray:
    """A cached int64 ``numpy.arange(n)`` (read-only use)."""
    a = _ARANGES_NP.get(n)
    if a is None:
        a = _ARANGES_NP[n] = np.arange(n, dtype=np.int64)
    return a


class SliceLayout:
    """Episodes of one storage version and, for one slice length, where the valid slice starts are.

    Valid starts of an episode of length ``L`` for slices of ``s`` rows: ``L - s + 1`` of them when
    ``L >= s``; when ``L < s`` none (``strict_length=True``) or one, the episode's first row,
    giving a slice of ``L`` rows (``strict_length=False``). Starts are numbered episode after
    episode; ``base[e] + u`` maps start number ``u`` of (kept) episode ``e`` to its storage row.

    ``span=(left, right)`` (TorchRL's ``span``, each ``< s``) lets a slice hang over the episode's
    first row by up to ``left`` rows and over its last row by up to ``right``: ``L - s + 1 + left +
    right`` starts, each slice cut to the rows inside the episode (so at least ``s - left``, resp.
    ``s - right``, rows); :meth:`spans_of` gives each slice's first row and length.
    """

    def __init__(self, episodes: EpisodeIndex, slice_len: int, strict: bool, span: tuple[int, int] = (0, 0)) -> None:
        start, length = episodes.start, episodes.length
        self.start, self.length = start, length
        self.slice_len, self.strict = slice_len, strict
        left, right = self.span = span
        count = length - slice_len + 1 + left + right
        count = count.clamp_min(0) if strict else torch.where(count > 0, count, torch.ones_like(count))
        keep = count > 0
        self.uniform_len = not (left or right) and (bool((length[keep] >= slice_len).all()) if keep.any() else True)
        self.k_start, self.k_length, k_count = start[keep], length[keep], count[keep]
        excl = torch.cumsum(k_count, 0) - k_count
        self.excl = excl.contiguous()
        self.bounds = excl[1:].contiguous()  # searchsorted(bounds, u, right=True) is u's episode
        self.base = (self.k_start - excl - left).contiguous()  # with a span: the row a slice would start at
        # numpy twins for the per-call path: on arrays of a few slices numpy ops cost ~1 us, torch ~5
        self.bounds_np, self.base_np = self.bounds.numpy(), self.base.numpy()
        self.total = int(k_count.sum()) if k_count.numel() else 0
        self.count = k_count
        self._plan_lookup()

    def _plan_lookup(self) -> None:
        """A bucket table for :meth:`rows_of_np`: start numbers in buckets of ``width`` (the fewest starts of
        any kept episode), ``first[b]`` the episode of bucket ``b``'s first number. A bucket then crosses at
        most one episode boundary, and a start's episode is ``first[b]`` or the next one: two reads per
        slice, where a binary search over 10^6 episodes makes ~20 dependent cache misses (~0.6 us a slice at
        mt30's 690,000 episodes). Kept only while the table is small (no more buckets than 4x the
        episodes + 4096); otherwise the binary search serves."""
        self.width = 0
        if not self.total:
            return
        width = int(self.count.min())
        buckets = -(-self.total // width)
        if buckets > 4 * self.count.numel() + 4096:
            return  # a few very short episodes would make the table as large as the storage
        self.width = width
        self.first_np = self.bounds_np.searchsorted(np.arange(0, self.total, width, dtype=np.int64), side="right")
        # the first start number of each kept episode, and the total after the last one (a sentinel)
        self.next_first_np = np.append(self.excl.numpy(), self.total)

    def rows_of_np(self, u: np.ndarray) -> np.ndarray:
        """Storage rows of start numbers ``u`` (int64 numpy, each in ``[0, total)``): :meth:`rows_of` in numpy,
        ``O(1)`` reads per start through the bucket table where there is one."""
        if not self.width:
            return u + self.base_np[self.bounds_np.searchsorted(u, side="right")]
        e = self.first_np[u // self.width]
        e += u >= self.next_first_np[e + 1]
        return u + self.base_np[e]

    def valid_start_mask(self, size: int) -> torch.Tensor:
        """Bool ``[size]``: True at the rows that are valid slice starts."""
        mask = torch.zeros(size, dtype=torch.bool)
        if self.total:
            rows = torch.arange(self.total) + torch.repeat_interleave(self.base, self.count)
            mask[rows] = True
        return mask

    def rows_of(self, u: torch.Tensor) -> torch.Tensor:
        """Storage rows of start numbers ``u`` (each in ``[0, total)``)."""
        e = torch.searchsorted(self.bounds, u, right=True)
        return u + torch.index_select(self.base, 0, e)

    def spans_of(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """First storage row and length of the slices of start numbers ``u``, each cut to its episode."""
        e = torch.searchsorted(self.bounds, u, right=True)
        first, end = self.k_start[e], self.k_start[e] + self.k_length[e]
        virtual = u + torch.index_select(self.base, 0, e)
        rows = torch.maximum(virtual, first)
        return rows, torch.minimum(virtual + self.slice_len, end) - rows

    def slice_lengths(self, rows: torch.Tensor) -> torch.Tensor | None:
        """Length of the slice starting at each row, or None when every slice is full."""
        if self.uniform_len:
            return None
        e = torch.searchsorted(self.k_start, rows, right=True) - 1
        return torch.minimum(self.k_start[e] + self.k_length[e] - rows, torch.tensor(self.slice_len))
