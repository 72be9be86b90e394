"""Packed per-step records: one gather returns exactly what a gather per leaf returns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datasets_hub import ram
from datasets_hub.errors import InvalidParameter
from datasets_hub.packed_steps import MAX_FIELD_BYTES, PackedSteps


def _columns(n: int) -> list:
    rng = np.random.default_rng(0)
    return [
        (("action",), rng.standard_normal((n, 6)).astype(np.float32)),
        (("next", "reward"), rng.standard_normal((n, 1)).astype(np.float32)),
        (("next", "terminated"), rng.random((n, 1)) < 0.1),
        (("info", "count"), np.arange(n, dtype=np.int64)),
        (("info", "small"), rng.integers(0, 255, (n, 3), dtype=np.uint8)),
        (("info", "wide"), rng.standard_normal((n, MAX_FIELD_BYTES // 8 + 1))),  # too wide: not packed
    ]


def test_gather_equals_one_take_per_leaf_and_the_episode_search():
    n = 500
    columns = _columns(n)
    starts = np.array([0, 7, 100, 101, 350])
    packed = PackedSteps.from_columns(columns, starts, n)
    assert packed is not None and ("info", "wide") not in packed.keys and len(packed.keys) == 5
    assert packed.records.shape[1] % 8 == 0
    rows = np.array([0, 6, 7, 99, 100, 101, 349, 350, 499, 3, 3])
    ordinal, leaves = packed.gather(rows)
    assert np.array_equal(ordinal, np.searchsorted(starts, rows, side="right") - 1)
    by_key = dict(leaves)
    for key, column in columns[:-1]:
        got = by_key[key]
        assert got.is_contiguous() and got.dtype == torch.from_numpy(column).dtype
        assert torch.equal(got, torch.from_numpy(column.take(rows, axis=0))), key


def test_nothing_small_enough_gives_no_record():
    n = 10
    wide = [(("x",), np.zeros((n, MAX_FIELD_BYTES + 1), dtype=np.uint8))]
    assert PackedSteps.from_columns(wide, np.array([0]), n) is None


def test_records_that_do_not_fit_are_refused(monkeypatch):
    monkeypatch.setattr(ram, "available_memory", lambda: (ram.MIN_MARGIN, None))
    with pytest.raises(InvalidParameter, match="packing the per-step leaves"):
        PackedSteps.from_columns(_columns(100), np.array([0]), 100)
