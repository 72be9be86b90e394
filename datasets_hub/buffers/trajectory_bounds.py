"""``find_start_stop_traj``: where the trajectories of a (circular) storage start and stop, as TorchRL's function.

Given per-row trajectory ids or end-of-trajectory flags along dim 0 (time first; further dims are separate
columns, e.g. one per environment), it returns every trajectory's first row, last row and length:

- a row ends a trajectory when its end flag is set, or when the next row has another trajectory id;
- ``at_capacity=False`` (the storage is not full): the last row ends a trajectory (the write head truncates it);
- ``at_capacity=True`` (a full circular storage): the last row continues into row 0 unless it ends, so a
  trajectory may wrap (its start row is then after its stop row); with no end at all, the last row ends one;
- ``cursor`` (the rows last written, the last of them counts), in a full storage: that row ends a trajectory
  (the write cursor truncates what was there).

Results: ``start`` and ``stop`` of shape ``[n, ndim]`` (coordinates ``(t, column...)``), ``lengths`` of shape
``[n]``, grouped by column (the first non-time dim varying fastest), each column's trajectories ordered by stop
row. The inputs are not modified.
"""

from __future__ import annotations

from typing import Any

import torch

from datasets_hub.errors import InvalidArgument, WrongDataType


def find_start_stop_traj(
    *,
    trajectory: torch.Tensor | None = None,
    end: torch.Tensor | None = None,
    at_capacity: bool,
    cursor: Any = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(start, stop, lengths)`` of every trajectory (see the module docstring for the contract)."""
    if (trajectory is None) == (end is None):
        raise WrongDataType("Exactly one of trajectory (per-row ids) or end (per-row end flags) must be given")
    rows = torch.as_tensor(trajectory if trajectory is not None else end)
    if rows.numel() == 0:
        raise InvalidArgument("find_start_stop_traj got an empty input: there are no rows to cut into trajectories")
    shape = rows.shape
    # [T, B] with the first non-time dim varying fastest: the order TorchRL lists the columns in
    columns = rows.permute(0, *range(rows.ndim - 1, 0, -1)).reshape(shape[0], -1)
    if trajectory is not None:
        ends = torch.zeros(columns.shape, dtype=torch.bool)
        ends[:-1] = columns[:-1] != columns[1:]
        ends[-1] = columns[-1] != columns[0] if at_capacity else True
    else:
        ends = columns.bool().clone()
        if not at_capacity:
            ends[-1] = True
    if cursor is not None:
        last = torch.as_tensor(list(cursor) if isinstance(cursor, range) else cursor).reshape(-1)
        if last.numel() == 0:
            raise InvalidArgument("cursor must not be empty: pass the row (or rows) last written")
        if at_capacity:  # below capacity the rows after the cursor were never written: the last row ends
            ends[int(last[-1]) % shape[0]] = True
    ends[-1] |= ~ends.any(0)  # a column without any end holds one trajectory ending at its last row
    return _bounds(ends, shape)


def _bounds(ends: torch.Tensor, shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    T = ends.shape[0]
    column, stop_t = ends.T.nonzero(as_tuple=True)  # grouped by column, ascending rows within each
    previous = torch.roll(stop_t, 1)
    first_of_column = torch.ones_like(column, dtype=torch.bool)
    first_of_column[1:] = column[1:] != column[:-1]
    # a column's first trajectory starts after that column's last stop (wrapping round the storage)
    last_of_column = torch.zeros_like(column, dtype=torch.bool)
    last_of_column[:-1] = column[1:] != column[:-1]
    last_of_column[-1] = True
    previous[first_of_column] = stop_t[last_of_column]
    start_t = (previous + 1) % T
    lengths = (stop_t - start_t) % T + 1
    batch = [torch.as_tensor(i) for i in torch.unravel_index(column, shape[1:][::-1])][::-1] if len(shape) > 1 else []
    start = torch.stack([start_t, *batch], -1)
    stop = torch.stack([stop_t, *batch], -1)
    return start, stop, lengths
