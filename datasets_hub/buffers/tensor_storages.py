"""Tensor storages: every leaf is one preallocated tensor ``[max_size, *row_shape]``.

``TensorStorage`` wraps given tensors; ``LazyTensorStorage`` allocates RAM from the first write;
``LazyMemmapStorage`` allocates memory-mapped files. Data kinds: plain tensors, TensorDicts,
tensorclasses and PyTrees (nested dicts/tuples/lists of tensors).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as _pytree
from tensordict import TensorDict, TensorDictBase, is_tensorclass

from datasets_hub.buffers.disk_space import full_disk_error, memmap_filenames, reserve_files
from datasets_hub.buffers.shared_counters import SharedCounters
from datasets_hub.buffers.storages import _FORMAT, Storage, _as_index, _check_meta, _write_json

_NUMPY_DTYPES = {
    torch.float16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
}


def _numpy_views(leaves: list[torch.Tensor]) -> list[np.ndarray | None]:
    """numpy views of the leaves' memory (None where numpy has no such dtype)."""
    return [t.numpy() if t.dtype in _NUMPY_DTYPES and t.is_contiguous() else None for t in leaves]


def gather_rows(leaf: torch.Tensor, view: np.ndarray | None, index: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    """``leaf[index]`` in one read: through numpy's take when there is a view (less per-call
    overhead than ``index_select``, and no torch thread pool), else ``index_select``."""
    if view is not None:
        return torch.from_numpy(view.take(rows, axis=0))
    return torch.index_select(leaf, 0, index)


# ---------------------------------------------------------------------------------------------
# Tensor storages: every leaf is one preallocated tensor [max_size, *row_shape].
# Data kinds: "tensor", "td" (TensorDict), "tensorclass", "pytree" (nested dicts/tuples/lists).
# ---------------------------------------------------------------------------------------------


def _nest(keys: list[tuple[str, ...]], tensors: list[Any], source: dict | None = None) -> dict[str, Any]:
    """Nested dict ``{"next": {"obs": t}}`` from tuple keys (merged into ``source`` when given)."""
    source = {} if source is None else source
    for key, t in zip(keys, tensors, strict=True):
        d = source
        for p in key[:-1]:
            d = d.setdefault(p, {})
        d[key[-1]] = t
    return source


def _leaves_of(td: TensorDictBase, keys: list[tuple[str, ...]]) -> list[torch.Tensor]:
    return [td.get(k if len(k) > 1 else k[0]) for k in keys]


def _decode_meta(kind: str, meta: Any) -> Any:
    """The treespec or tensorclass recorded by ``_meta_json`` (the class is imported by name)."""
    if kind == "pytree":
        return _pytree.treespec_loads(meta)
    if kind == "tensorclass":
        import importlib

        module, _, qualname = meta.partition(":")
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj
    return None


def _key_str(key: tuple[str, ...]) -> str:
    return repr(key[0]) if len(key) == 1 else repr(key)


def _flatten(data: Any, batched: bool) -> tuple[str, list[tuple[str, ...]], list[torch.Tensor], Any, tuple]:
    """Split data into ``(kind, keys, leaves, meta, row_batch)``; ``meta`` is the class or treespec."""
    if isinstance(data, torch.Tensor):
        return "tensor", [("_data",)], [data], None, ()
    if (
        batched
        and isinstance(data, list)
        and data
        and all(isinstance(x, (torch.Tensor, TensorDictBase)) or is_tensorclass(x) for x in data)
    ):
        return _flatten(torch.stack(data), batched)  # a list of TensorDicts/tensors is a batch of items
    if is_tensorclass(data):
        kind, meta, td = "tensorclass", type(data), data._tensordict
    elif isinstance(data, TensorDictBase):
        kind, meta, td = "td", None, data
    else:
        return _flatten_pytree(data, batched)
    if batched and td.batch_dims == 0:
        raise ValueError(
            "extend() needs data with a leading batch dimension, got a TensorDict with batch_size=[]: "
            "use add() for a single item, or give the TensorDict a batch_size"
        )
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


def _flatten_pytree(data: Any, batched: bool) -> tuple:
    if batched and isinstance(data, list):  # a list at the root is several items: stack them
        if not data:
            raise ValueError("cannot extend with an empty list")
        flats = [_flatten_pytree(item, False) for item in data]
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


class TensorStorage(SharedCounters, Storage):
    """Preallocated tensor storage over a tensor, TensorDict, tensorclass or PyTree of tensors.

    ``TensorStorage(storage, max_size=None)`` wraps existing data whose leading dim is the capacity;
    every row counts as valid (``len == max_size``). The lazy subclasses allocate from the first
    write instead. Writes must match the schema of the first batch (keys, per-row shapes, dtypes);
    reads gather each leaf with one ``index_select`` and rebuild the data kind that was written.
    Slice reads (``storage[a:b]``) are zero-copy views: write through the buffer, not through them.
    """

    def __init__(self, storage: Any = None, max_size: int | None = None, *, ndim: int = 1, device: Any = None) -> None:
        if device is not None and torch.device(device).type != "cpu":
            raise NotImplementedError(
                f"device={device!r}: storages hold data on the CPU; move samples with sample().to(device)"
            )
        if ndim != 1:
            raise NotImplementedError(
                f"ndim={ndim} is not supported: store transitions flat (ndim=1, e.g. td.reshape(-1)) and "
                "sample sub-trajectories with SliceSampler, which reads episode boundaries"
            )
        if storage is None and max_size is None:
            raise ValueError("TensorStorage needs data to wrap (or use LazyTensorStorage(max_size))")
        self._init_counters(2)  # [len, write_version]
        self._kind: str | None = None
        self._keys: list[tuple[str, ...]] = []
        self._schema: list[tuple[tuple[int, ...], torch.dtype]] = []
        self._plain: list[torch.Tensor] = []
        self._np: list[np.ndarray | None] = []
        self._td: TensorDictBase | None = None
        self._meta: Any = None
        self._row_batch: tuple = ()
        self._shared = False
        if storage is not None:
            kind, keys, leaves, meta, row_batch = _flatten(storage, batched=True)
            n = leaves[0].shape[0] if leaves[0].ndim else 0
            if max_size is not None and int(max_size) != n:
                raise ValueError(f"max_size={max_size} but the data has {n} rows along its first dim")
            max_size = n
        super().__init__(max_size)
        if storage is not None:
            self._attach(kind, keys, leaves, meta, row_batch)
            self._counts[0] = self.max_size

    # -- counters (a numpy view of a tensor, so ``share()`` can put them in shared memory) -------
    @property
    def write_version(self) -> int:
        return int(self._counts[1])

    @write_version.setter
    def write_version(self, value: int) -> None:
        self._counts[1] = value

    def __len__(self) -> int:
        return int(self._counts[0])

    @property
    def initialized(self) -> bool:
        return self._kind is not None

    # -- allocation ------------------------------------------------------------------------------
    def _attach(self, kind, keys, leaves, meta, row_batch) -> None:
        """Adopt ``leaves`` (each ``[max_size, *row]``) as the storage."""
        self._kind, self._keys, self._meta, self._row_batch = kind, list(keys), meta, tuple(row_batch)
        self._schema = [(tuple(t.shape[1:]), t.dtype) for t in leaves]
        self._plain = [t.as_subclass(torch.Tensor) if type(t) is not torch.Tensor else t for t in leaves]
        # numpy views of the same memory (None where numpy has no dtype): np.take gathers with less
        # per-call overhead than index_select and never spins up torch's thread pool
        self._np = _numpy_views(self._plain)
        self._td = None
        self._build_template()

    def _build_template(self) -> None:
        # nested-dict layout used by get(): (parent path, leaf name) per key, precomputed once
        self._paths = [(k[:-1], k[-1]) for k in self._keys]
        self._flat = all(len(k) == 1 for k in self._keys)

    def _allocate(self, kind, keys, leaves, meta, row_batch, batched) -> None:
        shapes = [(tuple(t.shape[1:] if batched else t.shape), t.dtype) for t in leaves]
        tensors = self._alloc_leaves(keys, shapes, row_batch)
        self._attach(kind, keys, tensors, meta, row_batch)

    def _alloc_leaves(self, keys, shapes, row_batch) -> list[torch.Tensor]:
        raise RuntimeError("TensorStorage wraps existing data; use LazyTensorStorage to allocate lazily")

    def _check(self, kind, keys, leaves, row_batch, batched) -> list[torch.Tensor]:
        """Return the incoming leaves in storage order, or raise naming what differs."""
        if kind != self._kind:
            raise TypeError(f"this storage holds {self._kind} data; cannot write {kind} data")
        if keys == self._keys:
            ordered = leaves
        else:
            incoming = dict(zip(keys, leaves, strict=True))
            missing = [k for k in self._keys if k not in incoming]
            extra = [k for k in keys if k not in set(self._keys)]
            if missing or extra:
                raise ValueError(
                    "data does not match the storage schema (set by the first write): "
                    + (f"missing {', '.join(map(_key_str, missing))}" if missing else "")
                    + ("; " if missing and extra else "")
                    + (f"unexpected {', '.join(map(_key_str, extra))}" if extra else "")
                    + ". Write the same keys every time (Select/Exclude transforms can align them)"
                )
            ordered = [incoming[k] for k in self._keys]
        for key, value, (shape, dtype) in zip(self._keys, ordered, self._schema, strict=True):
            got = tuple(value.shape[1:] if batched else value.shape)
            if got != shape or value.dtype != dtype:
                raise ValueError(
                    f"entry {_key_str(key)} has per-item shape {got} and dtype {value.dtype}, but the storage "
                    f"was allocated for shape {shape} and dtype {dtype} from the first write: convert the "
                    "data (e.g. .to(dtype)) or use a new buffer"
                )
        return ordered

    # -- reads -----------------------------------------------------------------------------------
    def get(self, index: Any) -> Any:
        if type(index) is not torch.Tensor or index.dtype != torch.int64 or not self._plain:
            return self._get_other(index)
        flat = index.reshape(-1)
        rows = flat.numpy()
        out = [gather_rows(t, a, flat, rows) for a, t in zip(self._np, self._plain, strict=True)]
        if index.ndim != 1:
            out = [t.reshape(*index.shape, *t.shape[1:]) for t in out]
        return self._wrap(out, index.shape)

    def _get_extra(self, index: torch.Tensor, extra: dict) -> TensorDictBase:
        """``get`` for 1-D int64 ``index`` plus ``extra`` entries (key -> tensor) in the same TensorDict."""
        rows = index.numpy()
        out = [gather_rows(t, a, index, rows) for a, t in zip(self._np, self._plain, strict=True)]
        return self._wrap(out, index.shape, extra)

    def _get_other(self, index: Any) -> Any:
        if not self.initialized:
            self._maybe_attach_shared()
            if not self.initialized:
                raise RuntimeError("the storage is empty: write data before reading it")
        index = _as_index(index, len(self))
        if isinstance(index, int):
            return self._wrap([t[index].clone() for t in self._plain], torch.Size([]))
        if isinstance(index, slice):
            out = [t[index] for t in self._plain]
            return self._wrap(out, out[0].shape[:1])
        return self.get(index)

    def _maybe_attach_shared(self) -> None:
        return None

    def _wrap(self, out: list[torch.Tensor], batch: torch.Size, extra: dict | None = None) -> Any:
        kind = self._kind
        if kind == "tensor":
            return out[0]
        if kind == "pytree":
            return _pytree.tree_unflatten(out, self._meta)
        source: Any
        if self._flat and not extra:
            source = {p[1]: t for p, t in zip(self._paths, out, strict=True)}
        else:
            source = _nest(self._keys, out)
            if extra:
                _nest([k if isinstance(k, tuple) else (k,) for k in extra], list(extra.values()), source)
        td = TensorDict._new_unsafe(source=source, batch_size=torch.Size(batch) + self._row_batch)
        return self._meta._from_tensordict(td) if kind == "tensorclass" else td

    def read_key(self, key: str | tuple[str, ...]) -> torch.Tensor:
        key = key if isinstance(key, tuple) else (key,)
        if not self.initialized:
            self._maybe_attach_shared()
        if not self.initialized or key not in self._keys:
            raise KeyError(key)
        return self._plain[self._keys.index(key)][: len(self)]

    def gather_key(
        self, key: str | tuple[str, ...], rows: torch.Tensor, *, episodes: np.ndarray | None = None
    ) -> torch.Tensor:
        key = key if isinstance(key, tuple) else (key,)
        if not self.initialized:
            self._maybe_attach_shared()
        if not self.initialized or key not in self._keys or self._row_batch:
            return super().gather_key(key, rows)
        i = self._keys.index(key)
        return gather_rows(self._plain[i], self._np[i], rows, rows.numpy())

    # -- writes ----------------------------------------------------------------------------------
    def _num_items(self, data: Any) -> int:
        if isinstance(data, list):
            return len(data)
        if isinstance(data, TensorDictBase) or is_tensorclass(data):
            if not data.batch_size:
                raise ValueError("extend() needs data with a leading batch dimension; use add() for one item")
            return data.batch_size[0]
        leaves = _pytree.tree_leaves(data)
        if not leaves or not hasattr(leaves[0], "shape") or not leaves[0].shape:
            raise ValueError("extend() needs data with a leading batch dimension; use add() for one item")
        return leaves[0].shape[0]

    def set(self, cursor: Any, data: Any) -> None:
        batched = not isinstance(cursor, (int, np.integer))
        kind, keys, leaves, meta, row_batch = _flatten(data, batched)
        if not self.initialized:
            self._maybe_attach_shared()
        if not self.initialized:
            self._allocate(kind, keys, leaves, meta, row_batch, batched)
            ordered = leaves
        else:
            ordered = self._check(kind, keys, leaves, row_batch, batched)
        n = len(self)
        index: Any
        if not batched:
            index = int(cursor)
            if not 0 <= index < self.max_size:
                raise IndexError(f"write position {index} is outside the storage capacity {self.max_size}")
            top = index + 1
        elif isinstance(cursor, slice):
            index = slice(*cursor.indices(n or self.max_size))
            top = index.stop if index.step > 0 else index.start + 1
        else:
            index = torch.as_tensor(cursor, dtype=torch.int64).reshape(-1)
            if index.numel() == 0:
                return
            top = int(index.max()) + 1
            if int(index.min()) < 0 or top > self.max_size:
                raise IndexError(
                    f"write positions must lie in the storage capacity [0, {self.max_size}), got {index.min()}..{top - 1}"
                )
        for t, v in zip(self._plain, ordered, strict=True):
            t[index] = v
        if top > n:
            self._counts[0] = top
        self._bump_version()

    def empty(self) -> None:
        """Forget every item; the allocation and the schema stay."""
        self._counts[0] = 0
        self._bump_version()

    # -- sharing, state, dumps -------------------------------------------------------------------
    def share(self) -> None:
        """Put the counters (and in-memory leaves) in shared memory for ``torch.multiprocessing`` children."""
        self._share_counters()
        self._shared = True
        for t in self._plain:
            t.share_memory_()
        self._np = _numpy_views(self._plain)  # share_memory_ moved in-memory leaves: refresh the views

    def _as_td(self, stop: int | None = None) -> TensorDict:
        stop = len(self) if stop is None else stop
        src = _nest(self._keys, [t[:stop] for t in self._plain])
        return TensorDict(src, batch_size=[stop, *self._row_batch])

    def _meta_json(self) -> dict[str, Any]:
        meta = None
        if self._kind == "pytree":
            meta = _pytree.treespec_dumps(self._meta)
        elif self._kind == "tensorclass":
            meta = f"{self._meta.__module__}:{self._meta.__qualname__}"
        return {
            "format": _FORMAT,
            "version": 1,
            "class": type(self).__name__,
            "kind": self._kind,
            "keys": [list(k) for k in self._keys],
            "row_batch": list(self._row_batch),
            "meta": meta,
            "len": len(self),
            "max_size": self.max_size,
            "write_version": self.write_version,
        }

    def _restore(self, info: dict[str, Any], td: TensorDictBase) -> None:
        """Allocate from a saved schema and copy ``td`` (the first ``len`` rows) in."""
        if info["len"] > self.max_size:
            raise ValueError(f"the saved storage holds {info['len']} items; this one only {self.max_size}")
        kind = info["kind"]
        if kind is None:
            self.empty()
            return
        keys = [tuple(k) for k in info["keys"]]
        leaves = _leaves_of(td, keys)
        meta = _decode_meta(kind, info["meta"])
        if not self.initialized:
            shapes = [(tuple(t.shape[1:]), t.dtype) for t in leaves]
            self._attach(
                kind, keys, self._alloc_leaves(keys, shapes, tuple(info["row_batch"])), meta, tuple(info["row_batch"])
            )
        else:
            self._check(kind, keys, leaves, tuple(info["row_batch"]), True)
            leaves = _leaves_of(td, self._keys)
        n = int(info["len"])
        for t, v in zip(self._plain, leaves, strict=True):
            t[:n] = v[:n]
        self._counts[0] = n
        self._counts[1] = max(self.write_version + 1, int(info.get("write_version", 0)))

    def state_dict(self) -> dict[str, Any]:
        return {"info": self._meta_json(), "data": self._as_td().to_dict() if self.initialized else {}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        info = state_dict["info"]
        td = TensorDict(state_dict["data"], batch_size=[info["len"]]) if info["kind"] else None
        self._restore(info, td)

    def dumps(self, path: str | Path) -> None:
        """Write the valid rows as a tensordict memmap tree plus ``storage.json`` (no pickle)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.initialized:
            self._as_td().memmap(prefix=path / "data", existsok=True)
        _write_json(path / "storage.json", self._meta_json())

    def loads(self, path: str | Path) -> None:
        path = Path(path)
        info = _check_meta(path, ("TensorStorage", "LazyTensorStorage", "LazyMemmapStorage"))
        td = TensorDict.load_memmap(path / "data", allow_pickle=False) if info["kind"] else None
        self._restore(info, td)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(len={len(self)}, max_size={self.max_size}, kind={self._kind})"


class LazyTensorStorage(TensorStorage):
    """In-RAM tensors allocated from the first write: ``max_size`` rows of its per-item schema."""

    def __init__(self, max_size: int, *, ndim: int = 1, device: Any = None) -> None:
        super().__init__(None, max_size, ndim=ndim, device=device)

    def _alloc_leaves(self, keys, shapes, row_batch) -> list[torch.Tensor]:
        out = [torch.zeros((self.max_size, *shape), dtype=dtype) for shape, dtype in shapes]
        if self._shared:
            for t in out:
                t.share_memory_()
        return out

    def __getstate__(self) -> dict[str, Any]:
        if self._shared and not self.initialized:
            raise RuntimeError(
                "a shared LazyTensorStorage must be allocated before it is sent to another process "
                "(extend it once first), or use LazyMemmapStorage, which children can allocate"
            )
        return super().__getstate__()


class LazyMemmapStorage(TensorStorage):
    """Memory-mapped files allocated from the first write under ``scratch_dir``.

    ``scratch_dir=None`` uses a fresh temporary directory removed when this storage object is
    garbage-collected in the process that created it. The files hold ``max_size`` rows, their disk
    blocks reserved at allocation (a full disk is a ``CacheError`` then, never a SIGBUS later). ``existsok=False`` refuses to overwrite a scratch dir already holding a storage.
    Sent to another process, the storage reopens the same files; after ``share()`` its length and
    version live in shared memory, so writes in a child are visible in the parent.
    """

    def __init__(
        self,
        max_size: int,
        scratch_dir: str | Path | None = None,
        ndim: int = 1,
        existsok: bool = False,
        *,
        device: Any = None,
    ) -> None:
        super().__init__(None, max_size, ndim=ndim, device=device)
        self._existsok = existsok
        if scratch_dir is None:
            scratch_dir = tempfile.mkdtemp(prefix="datasets_hub_memmap_")
            self._finalizer = weakref.finalize(self, shutil.rmtree, scratch_dir, True)
        else:
            self._finalizer = None
        self.scratch_dir = Path(scratch_dir)

    @property
    def _data_dir(self) -> Path:
        return self.scratch_dir / "data"

    def _alloc_leaves(self, keys, shapes, row_batch) -> list[torch.Tensor]:
        data_dir = self._data_dir
        if (self.scratch_dir / "storage.json").exists() and not self._existsok:
            raise FileExistsError(
                f"{self.scratch_dir} already holds a memmap storage; pass existsok=True to overwrite it, "
                "or choose another scratch_dir"
            )
        src = _nest(keys, [torch.empty((), dtype=dtype).expand(self.max_size, *shape) for shape, dtype in shapes])
        template = TensorDict(src, batch_size=[self.max_size, *row_batch])
        data_dir.mkdir(parents=True, exist_ok=True)
        what = f"LazyMemmapStorage(max_size={self.max_size})"
        try:
            td = template.memmap_like(prefix=data_dir, existsok=True)
        except (OSError, RuntimeError) as exc:
            error = full_disk_error(exc, what, data_dir)
            if error is None:
                raise
            shutil.rmtree(data_dir, ignore_errors=True)
            raise error from exc
        try:  # real blocks now: a full disk is a CacheError here, never a SIGBUS at some later write
            reserve_files(memmap_filenames(td), what)
        except BaseException:
            del td
            shutil.rmtree(data_dir, ignore_errors=True)
            raise
        self._mm_td = td  # keeps the mappings alive
        return _leaves_of(td, keys)

    def _attach(self, kind, keys, leaves, meta, row_batch) -> None:
        super()._attach(kind, keys, leaves, meta, row_batch)
        info = self._meta_json()
        info.pop("len"), info.pop("write_version")
        _write_json(self.scratch_dir / "storage.json", info)

    def _maybe_attach_shared(self) -> None:
        # another process may have allocated the files (shared buffers): adopt them
        meta_path = self.scratch_dir / "storage.json"
        if self._shared and meta_path.exists():
            self._reopen(json.loads(meta_path.read_text()))

    def _reopen(self, info: dict[str, Any]) -> None:
        td = TensorDict.load_memmap(self._data_dir, allow_pickle=False)
        self._mm_td = td
        keys = [tuple(k) for k in info["keys"]]
        TensorStorage._attach(
            self,
            info["kind"],
            keys,
            _leaves_of(td, keys),
            _decode_meta(info["kind"], info["meta"]),
            tuple(info["row_batch"]),
        )

    def share(self) -> None:
        self._share_counters()
        self._shared = True

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for k in (
            "_plain",
            "_np",
            "_mm_td",
            "_td",
            "_counts",
            "_finalizer",
            "_meta",
            "_paths",
            "_flat",
            "_kind",
            "_keys",
            "_schema",
            "_row_batch",
        ):
            state.pop(k, None)
        state["_was_initialized"] = self.initialized
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        was = state.pop("_was_initialized")
        self.__dict__.update(state)
        self._refresh_counters()
        self._finalizer = None  # only the creating process removes the scratch dir
        self._kind, self._keys, self._schema, self._plain, self._td, self._meta = None, [], [], [], None, None
        self._np = []
        self._row_batch = ()
        if was or self._shared:
            meta_path = self.scratch_dir / "storage.json"
            if meta_path.exists():
                self._reopen(json.loads(meta_path.read_text()))
