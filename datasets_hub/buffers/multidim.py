"""Index arithmetic of multi-dimensional storages (``ndim > 1``, TorchRL's ``ndim=`` keyword).

A storage built with ``ndim=2`` holds ``[capacity_along_dim0, n_envs]`` items: the trajectories of
parallel environments side by side, time along dim 0. Its leaves are allocated flat, ``[capacity,
*row]`` with ``capacity = capacity_along_dim0 * n_envs``, so that item ``(t, e)`` lives at flat
position ``t * n_envs + e`` ("time-major"). Samplers number items that way: ``len(storage)`` counts
items (time steps of every environment), a uniform sampler draws from ``range(len(storage))``, and
the buffer turns the drawn positions into ``(t, e)`` tuples before gathering.

Slice samplers need each environment's column as one sequence: :func:`column_order` gives, for
every position ``p`` of the column-major order (``e * rows + t``), the time-major item it is, and
:func:`column_boundaries` the episode starts within the columns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch


def prod(shape: Sequence[int]) -> int:
    return int(math.prod(shape))


def rows_capacity(max_size: int, env_shape: Sequence[int]) -> int:
    """Rows along dim 0 for ``max_size`` items of ``env_shape`` each (rounded up, as TorchRL does)."""
    per_row = prod(env_shape)
    if per_row < 1:
        raise ValueError(f"a multi-dimensional storage needs non-empty trailing dims, got {tuple(env_shape)}")
    return -(-int(max_size) // per_row)


def rows_to_items(rows: torch.Tensor, per_row: int) -> torch.Tensor:
    """Flat items of whole rows: ``rows[i] * per_row + j`` for ``j < per_row``, row after row."""
    rows = torch.as_tensor(rows, dtype=torch.int64).reshape(-1)
    return (rows.unsqueeze(1) * per_row + torch.arange(per_row)).reshape(-1)


def unravel(items: torch.Tensor, shape: Sequence[int]) -> tuple[torch.Tensor, ...]:
    """``(t, e, ...)`` index tensors of flat time-major ``items`` in a storage of ``shape``."""
    out = []
    rest = items
    for size in reversed(tuple(shape)[1:]):
        out.append(rest % size)
        rest = torch.div(rest, size, rounding_mode="floor")
    out.append(rest)
    return tuple(reversed(out))


def ravel(index: Any, shape: Sequence[int]) -> torch.Tensor:
    """Flat time-major items of a ``(t, e, ...)`` tuple of tensors or a ``[B, ndim]`` tensor."""
    if isinstance(index, torch.Tensor):
        if index.ndim < 1 or index.shape[-1] != len(shape):
            raise ValueError(
                f"an index of a {len(shape)}-dimensional storage is a tuple of {len(shape)} tensors or a "
                f"[..., {len(shape)}] tensor (as returned in samples' 'index'), got shape {tuple(index.shape)}"
            )
        index = tuple(index.unbind(-1))
    if len(index) != len(shape):
        raise ValueError(f"expected {len(shape)} index tensors for a storage of shape {tuple(shape)}, got {len(index)}")
    flat = torch.zeros_like(torch.as_tensor(index[0], dtype=torch.int64))
    for size, given in zip(shape, index, strict=True):
        part = torch.as_tensor(given, dtype=torch.int64)
        if part.numel() and (int(part.min()) < 0 or int(part.max()) >= size):
            raise IndexError(f"index out of range for a storage of shape {tuple(shape)}")
        flat = flat * size + part
    return flat


def column_order(rows: int, per_row: int) -> torch.Tensor:
    """For each column-major position ``p = e * rows + t``, the time-major item ``t * per_row + e``."""
    return (torch.arange(rows).unsqueeze(0) * per_row + torch.arange(per_row).unsqueeze(1)).reshape(-1)


def column_boundaries(new_episode: torch.Tensor, rows: int, per_row: int, cursor: int | None) -> torch.Tensor:
    """Episode starts (column-major positions) from a per-position "starts an episode" mask.

    Every column starts an episode, and so does the write cursor row of every column (the newest
    rows of a wrapped circular buffer never join the oldest ones).
    """
    starts = new_episode.clone().reshape(per_row, rows)
    starts[:, 0] = True
    if cursor is not None and 0 < cursor < rows:
        starts[:, cursor] = True
    return torch.nonzero(starts.reshape(-1)).reshape(-1)


def transpose_data(data: Any, dim: int) -> Any:
    """Swap dims 0 and ``dim`` of a TensorDict, tensorclass, tensor or PyTree of tensors."""
    if dim == 0:
        return data
    if isinstance(data, torch.Tensor) or (hasattr(data, "transpose") and hasattr(data, "batch_size")):
        if data.ndim <= dim:  # e.g. one environment's row: nothing to swap
            return data
        return data.transpose(dim, 0)
    import torch.utils._pytree as pytree

    return pytree.tree_map(lambda x: x.transpose(dim, 0), data)
