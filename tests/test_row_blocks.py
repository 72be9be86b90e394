"""fill_rows/take_rows: values land in the leading entries of wider rows, never broadcast."""

from __future__ import annotations

import numpy as np
import pytest

from datasets_hub.buffers.row_blocks import ROW_COPY_MIN_ROWS, fill_rows, take_rows


def test_fill_rows_same_shape_and_wider_rows_leave_the_rest_alone():
    dst = np.full((3, 5), -1, dtype=np.int64)
    fill_rows(dst, np.arange(9).reshape(3, 3))
    assert dst.tolist() == [[0, 1, 2, -1, -1], [3, 4, 5, -1, -1], [6, 7, 8, -1, -1]]
    same = np.zeros(4)
    fill_rows(same, np.arange(4.0))
    assert same.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("shape", [(3, 3), (3,), (2, 2), (3, 2, 1)])
def test_fill_rows_refuses_what_would_broadcast_or_not_fit(shape):
    with pytest.raises(ValueError, match="cannot write"):
        fill_rows(np.zeros((3, 2)), np.ones(shape))


def test_take_rows_gathers_into_contiguous_and_into_wider_rows():
    column = np.arange(20, dtype=np.float32).reshape(10, 2)
    rows = np.array([9, 0, 4])
    exact = np.empty((3, 2), dtype=np.float32)
    take_rows(column, rows, exact)
    assert exact.tolist() == column[rows].tolist()
    wide = np.zeros((3, 4), dtype=np.float32)
    take_rows(column, rows, wide)
    assert wide[:, :2].tolist() == column[rows].tolist() and not wide[:, 2:].any()


def test_batch_memory_reuses_a_block_and_its_arrays_only_when_nothing_references_them():
    import torch

    from datasets_hub.buffers.row_blocks import BatchMemory

    memory = BatchMemory([("a", (3,), np.dtype(np.float32)), ("b", (), np.dtype(np.int64))])
    first = memory.arrays(4)
    first["a"][:] = 1
    address = first["a"].__array_interface__["data"][0]
    kept = torch.from_numpy(first["a"])  # a batch's tensor, alive
    del first
    second = memory.arrays(4)
    assert second["a"].__array_interface__["data"][0] != address  # not the memory the kept tensor sees
    second["a"][:] = 2
    assert (kept == 1).all()
    del kept, second
    third = memory.arrays(4)  # nothing references the second block: reused, arrays and all
    assert (third["a"] == 2).all()
    part = third["b"][1:3]  # a view of a view: it holds the block, not the array
    del third
    fourth = memory.arrays(4)
    assert not np.shares_memory(fourth["b"], part)
    other = memory.arrays(8)  # another size: another block (the 4-row one is referenced by ``fourth``)
    assert other["a"].shape == (8, 3) and not np.shares_memory(other["a"], fourth["a"])


@pytest.mark.parametrize("n", [7, ROW_COPY_MIN_ROWS + 5], ids=["few rows", "row-wise copy"])
def test_fill_rows_copies_strided_rows_bit_for_bit_as_numpy_does(n):
    """Rows whose last dimension is contiguous but whose rows are strided (a field cut from packed records,
    values into the leading entries of wider rows, windows of vectors) are copied (from ROW_COPY_MIN_ROWS
    rows on, row by row as opaque items): the same bytes as numpy's copy, NaN payloads and signed zeros
    included, the rest untouched."""
    rng = np.random.default_rng(0)
    records = rng.integers(0, 256, (n, 24), dtype=np.uint8)  # any bit pattern: NaNs with payloads, -0.0
    field = records.view(np.float32)[:, 1:4]  # 3 float32 values per row, rows 24 bytes apart
    wide = np.full((n, 8), -1, dtype=np.float32)
    fill_rows(wide, field)
    assert np.array_equal(wide[:, :3].view(np.uint32), field.view(np.uint32))
    assert (wide[:, 3:] == -1).all()
    same = np.full((n, 3), -1, dtype=np.float32)
    fill_rows(same, field)
    assert np.array_equal(same.view(np.uint32), field.view(np.uint32))
    windows = rng.standard_normal((n, 3, 2))  # [B, T, D] into [B, T, D_max]
    into = np.zeros((n, 3, 5))
    fill_rows(into, windows)
    assert np.array_equal(into[..., :2], windows) and not into[..., 2:].any()
    flags, source = np.zeros((n, 4), dtype=bool), rng.integers(0, 2, (n, 6)).astype(bool)
    fill_rows(flags, source[:, 1:5])
    assert np.array_equal(flags, source[:, 1:5])
    casted = np.zeros((n, 4), dtype=np.float64)  # another dtype: numpy's casting copy, as before
    ints = np.arange(4 * n, dtype=np.int32).reshape(n, 4)[:, :3]
    fill_rows(casted, ints)
    assert np.array_equal(casted[:, :3], ints) and not casted[:, 3].any()
    transposed = np.arange(3.0 * n).reshape(n, 3).T  # rows not contiguous along the last dimension
    out = np.zeros((3, n))
    fill_rows(out, transposed)
    assert np.array_equal(out, transposed)
