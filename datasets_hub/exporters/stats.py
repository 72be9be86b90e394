"""Running min / max / mean / std / count, merged episode by episode (the statistics LeRobot keeps)."""

from __future__ import annotations

from typing import Any

import numpy as np


class RunningStats:
    """Statistics of rows added in parts: ``add`` one episode, ``merge`` another part's.

    Plain values keep their per-row shape (statistics over rows). Images come as ``[T, C, P]``
    (channels, pixels) with ``per_channel=True`` and keep LeRobot's ``[C, 1, 1]`` shape. Sums are
    float64, so merging many episodes loses no precision that matters for normalisation.
    """

    def __init__(self) -> None:
        self.count = 0
        self.total: np.ndarray | None = None
        self.squares: np.ndarray | None = None
        self.low: np.ndarray | None = None
        self.high: np.ndarray | None = None

    def add(self, values: np.ndarray, *, per_channel: bool = False) -> None:
        if len(values) == 0:
            return
        raw = np.asarray(values)
        if raw.ndim == 1:  # scalars: LeRobot's statistics have shape [1]
            raw = raw[:, None]
        data = raw.astype(np.float64)
        axes: tuple[int, ...] = (0, 2) if per_channel else (0,)
        keep = (lambda a: a.reshape(-1, 1, 1)) if per_channel else (lambda a: a)
        part = RunningStats()
        part.count = int(data.shape[0] * (data.shape[2] if per_channel else 1))
        part.total = keep(data.sum(axis=axes))
        # one pass for the squares (no [T, ...] temporary); min and max in the values' own dtype (exact)
        squares = np.einsum("tcp,tcp->c", data, data) if per_channel else np.einsum("t...,t...->...", data, data)
        part.squares = keep(squares)
        low, high = raw.min(axis=axes).astype(np.float64), raw.max(axis=axes).astype(np.float64)
        part.low, part.high = keep(low), keep(high)
        self.merge(part)

    def merge(self, other: RunningStats) -> None:
        if not other.count:
            return
        if self.total is None or self.squares is None or self.low is None or self.high is None:
            self.count, self.total, self.squares, self.low, self.high = (
                other.count, other.total, other.squares, other.low, other.high,
            )  # fmt: skip
            return
        if other.total is None or other.squares is None or other.low is None or other.high is None:
            return  # a part with a count has all of them (add sets them together)
        self.count += other.count
        self.total = self.total + other.total
        self.squares = self.squares + other.squares
        self.low = np.minimum(self.low, other.low)
        self.high = np.maximum(self.high, other.high)

    def as_lists(self) -> dict[str, Any]:
        """``{min, max, mean, std, count}`` as JSON-ready lists (empty dict before any row)."""
        if not self.count or self.total is None or self.squares is None:
            return {}
        mean = self.total / self.count
        std = np.sqrt(np.maximum(self.squares / self.count - mean * mean, 0.0))
        return {
            "min": np.asarray(self.low).tolist(),
            "max": np.asarray(self.high).tolist(),
            "mean": np.asarray(mean).tolist(),
            "std": np.asarray(std).tolist(),
            "count": [self.count],
        }
