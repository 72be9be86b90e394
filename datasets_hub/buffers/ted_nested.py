"""``TED2Nested`` / ``Nested2TED`` and ``H5Split`` / ``H5Combine``: TED data as one row per trajectory.

Storage save/load hooks under TorchRL's names, built on :mod:`~datasets_hub.buffers.ted_flat`'s flat form (runs
of consecutive items whose observations are stored once; a run is a trajectory, or its part between two cuts).

- ``TED2Nested()(data)``: TED data ``[N]`` or ``[T, n_envs]`` -> a TensorDict of batch ``[R]`` (one row per run)
  whose leaves are jagged ``torch.nested`` tensors: component ``r`` of a per-step key holds the run's ``L_r``
  steps, of an observation stored once its ``L_r + 1`` observations (the last one is the final next value).
  The ``shift_key`` leaf (True at each run's first step) keeps the run layout; the storage's batch shape is kept
  as the non-tensor entry ``is_full_key``. ``Nested2TED()`` rebuilds the TED data exactly.
- ``H5Split()(nested)``: the ``[R]`` TensorDict -> one sub-TensorDict per run under ``"traj_<r>"`` (``r``
  zero-padded to the width of ``R - 1``, so names sort in run order), non-tensor entries kept at the root: the
  layout of one HDF5 group per trajectory. ``H5Combine()`` joins them back into the ``[R]`` TensorDict.

The results are in memory; ``path`` (the save-hook signature) is accepted and not used: a checkpointer writes them.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase

from datasets_hub.buffers.ted_flat import Flat2TED, TED2Flat
from datasets_hub.errors import InvalidArgument, WrongDataType

_TRAJ = "traj_"


class TED2Nested(TED2Flat):
    """Save hook: TED data -> one row per run, leaves as jagged nested tensors (see the module docstring)."""

    def __call__(self, data: TensorDictBase, path: Any = None) -> TensorDictBase:
        flat = super().__call__(data, path=path)
        run_start = flat.get(self.shift_key)
        n = run_start.shape[0]
        if n == 0:
            raise InvalidArgument("TED2Nested: the data has no items, so no trajectory to write")
        starts = torch.nonzero(run_start).reshape(-1)
        lengths = torch.diff(torch.cat([starts, torch.tensor([n])]))
        step_offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        once_offsets = torch.cat([torch.zeros(1, dtype=torch.int64), (lengths + 1).cumsum(0)])
        out = TensorDict(batch_size=[lengths.numel()])
        for key, value in flat.items(include_nested=True, leaves_only=True):
            if key == self.shift_key or _tuple(key) == _tuple(self.is_full_key):
                continue
            rows = value.shape[0] if value.ndim else -1
            offsets = step_offsets if rows == n else once_offsets if rows == n + lengths.numel() else None
            if offsets is None:
                raise InvalidArgument(
                    f"TED2Nested: {key!r} has shape {list(value.shape)}, neither one row per item ({n}) nor one "
                    f"per item and trajectory ({n + lengths.numel()}): it is not TED data"
                )
            out.set(key, torch.nested.nested_tensor_from_jagged(cast(torch.Tensor, value), offsets))
        out.set(self.shift_key, torch.nested.nested_tensor_from_jagged(run_start, step_offsets))
        out.set_non_tensor(self.is_full_key, flat.get(self.is_full_key).tolist())
        return out


class Nested2TED(Flat2TED):
    """Load hook: the ``[R]`` TensorDict of :class:`TED2Nested` -> the TED data it came from."""

    def __call__(self, data: TensorDictBase, path: Any = None) -> TensorDictBase:
        if not isinstance(data, TensorDictBase) or data.batch_dims != 1:
            raise WrongDataType(
                f"Nested2TED reads the one-row-per-trajectory TensorDict TED2Nested writes, got {type(data).__name__}"
            )
        run_start = data.get(self.shift_key, None)
        shape = data.get_non_tensor(self.is_full_key, None)
        if run_start is None or shape is None:
            raise KeyError(
                f"this TensorDict has no {self.shift_key!r} / {self.is_full_key!r} entries: it was not written "
                "by TED2Nested"
            )
        flat = TensorDict()
        for key, value in data.items(include_nested=True, leaves_only=True):
            if isinstance(value, torch.Tensor):
                flat.set(key, value.values() if value.is_nested else value)
        flat.set(self.is_full_key, torch.tensor(shape, dtype=torch.int64))
        return super().__call__(flat, path=path)


class H5Split:
    """The ``[R]`` TensorDict of :class:`TED2Nested` -> one entry ``"traj_<r>"`` per run (module docstring)."""

    def __call__(self, data: TensorDictBase, path: Any = None) -> TensorDictBase:
        if not isinstance(data, TensorDictBase) or data.batch_dims != 1:
            raise WrongDataType(f"H5Split splits a one-row-per-trajectory TensorDict, got {type(data).__name__}")
        width = len(str(max(data.batch_size[0] - 1, 0)))
        tensors = data.filter_non_tensor_data()
        out = TensorDict({f"{_TRAJ}{str(r).zfill(width)}": row for r, row in enumerate(tensors.unbind(0))})
        for key, value in data.non_tensor_items():
            out.set_non_tensor(key, value)
        return out


class H5Combine:
    """The ``"traj_<r>"`` entries of :class:`H5Split` -> the ``[R]`` TensorDict with jagged leaves."""

    def __call__(self, data: TensorDictBase, path: Any = None) -> TensorDictBase:
        if not isinstance(data, TensorDictBase):
            raise WrongDataType(f"H5Combine joins a TensorDict of 'traj_<r>' entries, got {type(data).__name__}")
        names = sorted(k for k in data.keys() if isinstance(k, str) and k.startswith(_TRAJ))
        if not names:
            raise InvalidArgument(
                f"H5Combine: no '{_TRAJ}<r>' entry in the data (keys: {sorted(map(str, data.keys()))})"
            )
        runs = [data.get(name) for name in names]
        out = TensorDict(batch_size=[len(runs)])
        for key in runs[0].keys(include_nested=True, leaves_only=True):
            parts = [run.get(key) for run in runs]
            if any(isinstance(p, NonTensorData) or not isinstance(p, torch.Tensor) for p in parts):
                continue
            offsets = torch.tensor([0, *torch.tensor([p.shape[0] for p in parts]).cumsum(0).tolist()])
            out.set(key, torch.nested.nested_tensor_from_jagged(torch.cat(parts), offsets))
        for key, value in data.non_tensor_items():
            if not (isinstance(key, str) and key.startswith(_TRAJ)):
                out.set_non_tensor(key, value)
        return out


def _tuple(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)
