"""Rows written into a batch allocated once: how a mixture fills its batch member by member.

A mixture allocates each key's array for the whole batch, then every member writes its rows straight
into its slice (``DatasetStorage.gather_into``, or its own sampled batch copied in): no per-member
arrays to join afterwards. A member's values may be narrower in the last dimension than the batch's
(a 6-value action in a batch padded to 8): they fill the leading entries and the rest stays as the
batch was allocated (zeros).
"""

from __future__ import annotations

import numpy as np


def fill_rows(dst: np.ndarray, value: np.ndarray) -> None:
    """``value`` written into ``dst``: the same shape, or ``dst`` wider in its last dimension (the
    values fill ``[..., :width]``). Any other shape is a ``ValueError``, never a broadcast."""
    if dst.shape == value.shape:
        np.copyto(dst, value)
    elif value.ndim and dst.shape[:-1] == value.shape[:-1] and dst.shape[-1] >= value.shape[-1]:
        dst[..., : value.shape[-1]] = value
    else:
        raise ValueError(f"cannot write values of shape {list(value.shape)} into rows of shape {list(dst.shape)}")


def take_rows(column: np.ndarray, rows: np.ndarray, dst: np.ndarray) -> None:
    """``column[rows]`` written into ``dst`` (see :func:`fill_rows`), gathered straight into it when its
    layout allows. ``rows`` must be valid rows of ``column`` (they are not checked here)."""
    if dst.shape[1:] == column.shape[1:] and dst.dtype == column.dtype and dst.flags.c_contiguous:
        np.take(column, rows, axis=0, out=dst, mode="clip")  # valid rows: "clip" gathers with no buffer
    else:
        fill_rows(dst, column.take(rows, axis=0))
