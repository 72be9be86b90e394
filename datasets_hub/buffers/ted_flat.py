"""``TED2Flat`` / ``Flat2TED``: TorchRL Episode Data with observations stored once (TorchRL's hooks).

In TED, ``("next", "observation")[t]`` is ``"observation"[t + 1]`` inside a trajectory, so a
storage dump holds every observation twice. ``TED2Flat`` keeps each *shared* key (a root key that
also exists under ``"next"``, other than the done and reward keys) once per run of consecutive
items whose next value is the following item's value, plus one final next value per run: ``N +
R`` rows for ``N`` items in ``R`` runs, the layout of our dataset builds (``T + 1`` rows per
episode). ``Flat2TED`` rebuilds the TED data exactly.

Where we differ from TorchRL on purpose: runs are found by comparing the values, not assumed from
the done flags, so the round trip is exact on any data (a multi-step transform, a circular buffer
whose cursor cuts a trajectory, a next value that differs after a done); ``done_key`` still forces
a cut where it is set. Two bookkeeping entries are written: ``shift_key`` (bool per item: a run
starts there) and ``is_full_key`` (the storage's batch shape, int64). Multi-dimensional data
``[T, n_envs, ...]`` is laid out environment by environment (column-major) before flattening.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

NestedKey = Any
DEFAULT_DONE_KEYS = ("done", "truncated", "terminated")


def _key(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def _names(keys: Any) -> set[str]:
    return {_key(k)[-1] for k in keys}


class TED2Flat:
    """Storage save hook: TED ``[N]`` or ``[T, n_envs]`` -> flat TensorDict (batch ``[]``), see module doc."""

    def __init__(
        self,
        done_key: NestedKey = ("next", "done"),
        shift_key: NestedKey = "shift",
        is_full_key: NestedKey = "is_full",
        done_keys: Any = DEFAULT_DONE_KEYS,
        reward_keys: Any = ("reward",),
    ) -> None:
        self.done_key = _key(done_key)
        self.shift_key, self.is_full_key = _key(shift_key), _key(is_full_key)
        self.done_names, self.reward_names = _names(done_keys), _names(reward_keys)

    def shared_keys(self, td: TensorDictBase) -> list[tuple[str, ...]]:
        """Root keys stored once (they also exist under ``"next"`` with the same shape and dtype)."""
        out = []
        for name, value in td.items(include_nested=True, leaves_only=True):
            key = _key(name)
            if key[0] == "next" or key[-1] in self.done_names | self.reward_names:
                continue
            other = td.get(("next", *key), None)
            if isinstance(other, torch.Tensor) and other.shape == value.shape and other.dtype == value.dtype:
                out.append(key)
        return out

    def __call__(self, data: TensorDictBase, path: Any = None) -> TensorDictBase:
        if not isinstance(data, TensorDictBase) or data.batch_dims == 0:
            raise TypeError("TED2Flat needs a TensorDict with a leading batch dim (TED data)")
        shape = torch.tensor(list(data.batch_size[:2] if data.batch_dims > 1 else data.batch_size), dtype=torch.int64)
        td = data.transpose(0, 1) if data.batch_dims > 1 else data  # column-major: env after env
        td = td.reshape(-1) if data.batch_dims > 1 else td
        if data.batch_dims > 2:
            raise ValueError("TED2Flat handles storages with ndim <= 2")
        n = td.batch_size[0]
        rows = int(shape[0])
        shared = self.shared_keys(td)
        run_start = torch.zeros(n, dtype=torch.bool)
        if n:
            run_start[::rows] = True  # each environment's column starts a run
            done = td.get(self.done_key, None)
            if isinstance(done, torch.Tensor):
                run_start[1:] |= done.reshape(n, -1).any(1)[:-1].to(torch.bool)
            for key in shared:
                x, y = td.get(key), td.get(("next", *key))
                same = (y[:-1] == x[1:]).reshape(n - 1, -1).all(1) if n > 1 else torch.zeros(0, dtype=torch.bool)
                run_start[1:] |= ~same
        run_id = torch.cumsum(run_start.to(torch.int64), 0) - 1
        last = torch.ones(n, dtype=torch.bool)
        last[:-1] = run_start[1:]  # the last item of each run
        out: dict[Any, Any] = {}
        for name, value in td.items(include_nested=True, leaves_only=True):
            key = _key(name)
            if key[0] == "next" and key[1:] in shared:
                continue
            if key in shared:  # N + R rows: each run's values, then its final next value
                flat = torch.empty((n + int(run_start.sum()), *value.shape[1:]), dtype=value.dtype)
                pos = torch.arange(n) + run_id
                flat[pos] = cast(torch.Tensor, value)
                nxt = cast(torch.Tensor, td.get(("next", *key)))
                flat[pos[last] + 1] = nxt[last]
                out[key] = flat
            else:
                out[key] = value
        out[self.shift_key] = run_start
        out[self.is_full_key] = shape
        return _from_flat_keys(out)


class Flat2TED:
    """Storage load hook: the flat TensorDict of :class:`TED2Flat` -> the TED data it came from."""

    def __init__(
        self,
        done_key: NestedKey = "done",
        shift_key: NestedKey = "shift",
        is_full_key: NestedKey = "is_full",
        done_keys: Any = DEFAULT_DONE_KEYS,
        reward_keys: Any = ("reward",),
    ) -> None:
        self.done_key = _key(done_key)  # accepted for TorchRL's signature: runs are recorded, not inferred
        self.shift_key, self.is_full_key = _key(shift_key), _key(is_full_key)

    def __call__(self, data: TensorDictBase, path: Any = None) -> TensorDictBase:
        run_start = data.get(self.shift_key, None)
        shape = data.get(self.is_full_key, None)
        if run_start is None or shape is None:
            raise KeyError(
                f"this TensorDict has no {self.shift_key!r} / {self.is_full_key!r} entries: it was not written by TED2Flat"
            )
        n = run_start.shape[0]
        shape = [int(s) for s in shape.tolist()]
        run_id = torch.cumsum(run_start.to(torch.int64), 0) - 1
        pos = torch.arange(n) + run_id
        n_runs = int(run_start.sum())
        out = {}
        for name, value in data.items(include_nested=True, leaves_only=True):
            key = _key(name)
            if key in (self.shift_key, self.is_full_key):
                continue
            if key[0] != "next" and value.shape[:1] == (n + n_runs,) and n_runs:
                out[key] = value[pos]
                out[("next", *key)] = value[pos + 1]
            else:
                out[key] = value
        td = TensorDict(_nested(out), batch_size=[n])
        if len(shape) == 2:  # back from column-major [n_envs * T] to [T, n_envs]
            td = td.reshape(shape[1], shape[0]).transpose(0, 1).contiguous()
        return td


def _nested(flat: dict) -> dict:
    tree: dict = {}
    for key, value in flat.items():
        d = tree
        for part in key[:-1]:
            d = d.setdefault(part, {})
        d[key[-1]] = value
    return tree


def _from_flat_keys(flat: dict) -> TensorDict:
    return TensorDict(_nested(flat), batch_size=[])
