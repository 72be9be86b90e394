"""The data a tensor storage holds, as leaves: every kind flattened to ``(kind, keys, leaves, meta, row_batch)``.

Kinds: ``"tensor"``, ``"td"`` (TensorDict), ``"lazy_td"`` (a lazily stacked TensorDict whose stacked
parts differ in shape or keys: each part's leaves are stored under the part's number, ``("0", *key)``, and
``meta`` is ``[number of parts, stack dim within an item]``), ``"tensorclass"`` and ``"pytree"`` (nested
dicts, tuples and lists of tensors, numbers or arrays). ``flatten`` splits written data into its leaves, with the
per-item batch dims (``row_batch``) and ``meta`` (the tensorclass, or the PyTree's treespec) that
:class:`~datasets_hub.buffers.tensor_storages.TensorStorage` needs to rebuild the same kind on reads;
``split_env`` splits the trailing dims of a multi-dimensional storage off the leaves. ``numpy_views``
and ``gather_rows`` are the read side: one gather per leaf, through numpy where it can.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, TensorDictBase, is_tensorclass
from torch.utils import _pytree

#: torch dtypes whose tensors numpy views without a copy, real-valued ones (what a mixture pads and normalises)
REAL_NUMPY_DTYPES = frozenset(
    {
        torch.float16,
        torch.float32,
        torch.float64,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.bool,
    }
)
_NUMPY_DTYPES = REAL_NUMPY_DTYPES | {torch.complex64, torch.complex128}


def numpy_views(leaves: list[torch.Tensor]) -> list[np.ndarray | None]:
    """numpy views of the leaves' memory (None where numpy has no such dtype)."""
    return [t.numpy() if t.dtype in _NUMPY_DTYPES and t.is_contiguous() else None for t in leaves]


def gather_rows(leaf: torch.Tensor, view: np.ndarray | None, index: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    """``leaf[index]`` in one read: through numpy's take when there is a view (less per-call
    overhead than ``index_select``, and no torch thread pool), else ``index_select``."""
    if view is not None:
        return torch.from_numpy(view.take(rows, axis=0))
    return torch.index_select(leaf, 0, index)


def leaves_of(td: TensorDictBase, keys: list[tuple[str, ...]]) -> list[torch.Tensor]:
    return [td.get(k if len(k) > 1 else k[0]) for k in keys]


def decode_meta(kind: str, meta: Any) -> Any:
    """The treespec or tensorclass recorded by ``_meta_json`` (the class is imported by name)."""
    if kind == "pytree":
        return _pytree.treespec_loads(meta)
    if kind == "lazy_td":
        return list(meta)
    if kind == "tensorclass":
        import importlib

        module, _, qualname = meta.partition(":")
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj
    return None


def key_str(key: tuple[str, ...]) -> str:
    return repr(key[0]) if len(key) == 1 else repr(key)


def flatten(data: Any, batched: bool) -> tuple[str, list[tuple[str, ...]], list[torch.Tensor], Any, tuple]:
    """Split data into ``(kind, keys, leaves, meta, row_batch)``; ``meta`` is the class or treespec."""
    if isinstance(data, torch.Tensor):
        return "tensor", [("_data",)], [data], None, ()
    if (
        batched
        and isinstance(data, list)
        and data
        and all(isinstance(x, (torch.Tensor, TensorDictBase)) or is_tensorclass(x) for x in data)
    ):
        return flatten(torch.stack(data), batched)  # a list of TensorDicts/tensors is a batch of items
    if is_tensorclass(data):
        kind, meta, td = "tensorclass", type(data), data._tensordict
    elif isinstance(data, TensorDictBase):
        kind, meta, td = "td", None, data
    else:
        return flatten_pytree(data, batched)
    if batched and td.batch_dims == 0:
        raise ValueError(
            "extend() needs data with a leading batch dimension, got a TensorDict with batch_size=[]: "
            "use add() for a single item, or give the TensorDict a batch_size"
        )
    if kind == "td" and isinstance(td, LazyStackedTensorDict) and not _stacks_alike(td):
        return _flatten_lazy(td, batched)
    keys, leaves = [], []
    for key, value in td.items(include_nested=True, leaves_only=True):
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"entry {key!r} is a {type(value).__name__}, not a tensor: tensor storages hold tensors "
                "only; use ListStorage for arbitrary Python objects"
            )
        keys.append(key if isinstance(key, tuple) else (key,))
        leaves.append(value)
    row_batch = tuple(td.batch_size[1:] if batched else td.batch_size)
    return kind, keys, leaves, meta, row_batch


def _stacks_alike(td: LazyStackedTensorDict) -> bool:
    """True where every stacked part has the same keys and leaf shapes (a dense stack holds them)."""
    parts = [dict(p.items(include_nested=True, leaves_only=True)) for p in td.tensordicts]
    first = {k: v.shape for k, v in parts[0].items()} if parts else {}
    return all({k: v.shape for k, v in p.items()} == first for p in parts[1:])


def _flatten_lazy(td: LazyStackedTensorDict, batched: bool) -> tuple:
    """The leaves of each stacked part under its number; the stack dim must lie within the items."""
    stack_dim = td.stack_dim - (1 if batched else 0)
    if stack_dim < 0:
        raise ValueError(
            "these items differ in shape (a lazy stack along the batch dim): a tensor storage preallocates "
            "one shape per item; store them in a LazyStackStorage (or ListStorage)"
        )
    keys, leaves = [], []
    for i, part in enumerate(td.tensordicts):
        for key, value in part.items(include_nested=True, leaves_only=True):
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"entry {key!r} is a {type(value).__name__}, not a tensor: tensor storages hold tensors only"
                )
            keys.append((str(i), *(key if isinstance(key, tuple) else (key,))))
            leaves.append(value)
    part_batch = td.tensordicts[0].batch_size
    return "lazy_td", keys, leaves, [len(td.tensordicts), stack_dim], tuple(part_batch[1:] if batched else part_batch)


def flatten_pytree(data: Any, batched: bool) -> tuple:
    if batched and isinstance(data, list):  # a list at the root is several items: stack them
        if not data:
            raise ValueError("cannot extend with an empty list")
        flats = [flatten_pytree(item, False) for item in data]
        spec = flats[0][3]
        for i, f in enumerate(flats[1:], 1):
            if f[3] != spec or f[1] != flats[0][1]:
                raise ValueError(f"item {i} of the list has a different structure than item 0: {f[1]} vs {flats[0][1]}")
        leaves = [torch.stack([f[2][j] for f in flats]) for j in range(len(flats[0][1]))]
        return "pytree", flats[0][1], leaves, spec, ()
    with_path, spec = _pytree.tree_flatten_with_path(data)
    keys, leaves = [], []
    for path, leaf in with_path:
        key = tuple(str(getattr(p, "key", getattr(p, "idx", p))) for p in path) or ("_data",)
        if not isinstance(leaf, (torch.Tensor, int, float, bool, np.ndarray, np.generic)):
            raise TypeError(
                f"entry {key!r} is a {type(leaf).__name__}: tensor storages hold tensors (nested dicts and "
                "tuples of tensors, numbers or arrays); use ListStorage for arbitrary Python objects"
            )
        keys.append(key)
        leaves.append(leaf if isinstance(leaf, torch.Tensor) else torch.as_tensor(leaf))
    if len(set(keys)) != len(keys):
        raise ValueError("two entries of this data map to the same key once converted to strings")
    return "pytree", keys, leaves, spec, ()


def split_env(
    leaves: list[torch.Tensor], row_batch: tuple, ndim: int, batched: bool
) -> tuple[tuple[int, ...], list[torch.Tensor], tuple]:
    """Split the trailing storage dims (``ndim - 1`` after the leading one) off the leaves.

    Returns ``(env_shape, leaves flattened to [items, *row], row_batch without those dims)``.
    """
    lead = 1 if batched else 0
    k = ndim - 1
    if row_batch or not leaves:
        if len(row_batch) < k:
            raise ValueError(
                f"a storage with ndim={ndim} needs data with at least {k + lead} batch dims, got "
                f"batch_size={[*([leaves[0].shape[0]] if batched and leaves else []), *row_batch]}: "
                "give the data its environment dims (e.g. [T, n_envs]) or use ndim=1"
            )
        env = tuple(row_batch[:k])
    else:
        shapes = {tuple(t.shape[lead : lead + k]) for t in leaves}
        env = next(iter(shapes))
        if len(shapes) != 1 or len(env) < k:
            raise ValueError(
                f"a storage with ndim={ndim} needs every leaf to share its first {k + lead} dims, got {shapes}"
            )
    flat = [t.reshape(-1, *t.shape[lead + k :]) for t in leaves]
    return env, flat, tuple(row_batch[k:])
