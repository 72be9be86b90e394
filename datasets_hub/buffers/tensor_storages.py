"""Tensor storages: every leaf is one preallocated tensor ``[max_size, *row_shape]``.

This module holds one concept: the tensor storage.

``TensorStorage`` wraps given tensors; ``LazyTensorStorage`` allocates RAM from the first write;
``LazyMemmapStorage`` (in ``memmap_storage.py``) allocates memory-mapped files. Data kinds: plain tensors, TensorDicts,
tensorclasses and PyTrees (nested dicts/tuples/lists of tensors), flattened to leaves by
:mod:`~datasets_hub.buffers.tensor_leaves`.

Saving and restoring (``state_dict`` / ``load_state_dict`` and the checkpointers' hooks): the saved
schema (``format`` ``datasets_hub.storage``, version 1) names the data kind, the keys, the per-item
batch dims, the PyTree treespec or the tensorclass (imported by name on restore), the length,
capacity, ``ndim`` and trailing dims and the write version; the data is the valid items as one
TensorDict. Restoring allocates a storage that has not been written yet, or checks the schema of one
that has.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase, is_tensorclass, lazy_stack
from torch.utils import _pytree

from datasets_hub.buffers import multidim as mdim
from datasets_hub.buffers.nested_keys import as_key, nest
from datasets_hub.buffers.row_blocks import fill_rows, take_rows
from datasets_hub.buffers.shared_counters import SharedCounters, being_spawned
from datasets_hub.buffers.storages import _FORMAT, Storage, _as_index, attach_extras
from datasets_hub.buffers.tensor_leaves import (
    decode_meta,
    flatten,
    gather_rows,
    key_str,
    leaves_of,
    numpy_views,
    split_env,
)
from datasets_hub.errors import NotShareable

# ---------------------------------------------------------------------------------------------
# Tensor storages: every leaf is one preallocated tensor [max_size, *row_shape].
# Data kinds: "tensor", "td" (TensorDict), "tensorclass", "pytree" (nested dicts/tuples/lists).
# ---------------------------------------------------------------------------------------------


def _check_device(device: Any) -> None:
    if device is not None and device != "auto" and torch.device(device).type == "cpu":
        return
    raise NotImplementedError(
        f"device={device!r}: storages hold data on the CPU; move samples with sample().to(device)"
    )


class TensorStorage(SharedCounters, Storage):
    """Preallocated tensor storage over a tensor, TensorDict, tensorclass or PyTree of tensors.

    ``TensorStorage(storage, max_size=None)`` wraps existing data whose leading dim is the capacity;
    every row counts as valid (``len == max_size``). The lazy subclasses allocate from the first
    write instead. Writes must match the schema of the first batch (keys, per-row shapes, dtypes),
    with two exceptions: a TensorDict write that covers every valid item (``rb.write_all(data)``)
    may add keys, and each new leaf is allocated for the whole capacity (zeros elsewhere; a new
    file for memmap storages); and a storage wrapping a TensorDict without entries
    (``TensorStorage(TensorDict(batch_size=[n]))``, as TorchRL allows) takes the keys of its first
    write, the rows not written yet holding zeros (all ``n`` rows count as valid, as always here). Reads gather each leaf with one ``index_select`` and rebuild the
    data kind that was written.
    Slice reads (``storage[a:b]``) are zero-copy views: write through the buffer, not through them.
    """

    def __init__(
        self,
        storage: Any = None,
        max_size: int | None = None,
        *,
        device: Any = "cpu",
        ndim: int = 1,
        compilable: bool = False,
    ) -> None:
        _check_device(device)
        if not isinstance(ndim, int) or isinstance(ndim, bool) or ndim < 1:
            raise ValueError(f"ndim must be an int >= 1 (dims counted in the capacity), got {ndim!r}")
        self.ndim = ndim
        self._compilable = bool(compilable)
        self._env: tuple[int, ...] = ()  # dims 1..ndim-1, known from the first write
        self._init_counters(2, plain=self._compilable)  # [len (items), write_version]
        # compilable: the length also as a tensor, which torch.compile reads as a graph input (see length_tensor)
        self._len_t = torch.zeros((), dtype=torch.int64) if self._compilable else None
        self._kind: str | None = None
        self._keys: list[tuple[str, ...]] = []
        self._schema: list[tuple[tuple[int, ...], torch.dtype]] = []
        self._plain: list[torch.Tensor] = []
        self._np: list[np.ndarray | None] = []
        self._columns: tuple[list, dict[tuple[str, ...], np.ndarray] | None] | None = None  # numpy_columns()
        self._td: TensorDictBase | None = None
        self._meta: Any = None
        self._row_batch: tuple = ()
        self._shared = False
        if storage is not None:
            kind, keys, leaves, meta, row_batch = flatten(storage, batched=True)
            if not leaves:  # a TensorDict without entries: only its batch size
                n = int(storage.batch_size[0])
            else:
                n = leaves[0].shape[0] if leaves[0].ndim else 0
            if ndim > 1:
                env, leaves, row_batch = split_env(leaves, row_batch, ndim, batched=True)
                self._env = env
                n *= mdim.prod(env)
            if max_size is not None and int(max_size) != n:
                raise ValueError(f"max_size={max_size} but the data holds {n} items along its first {ndim} dim(s)")
            max_size = n
        elif max_size is None:
            raise ValueError("TensorStorage needs data to wrap (or use LazyTensorStorage(max_size))")
        super().__init__(max_size)
        if storage is not None:
            self._attach(kind, keys, leaves, meta, row_batch)
            self._set_len(self.max_size)

    @property
    def compilable(self) -> bool:
        return self._compilable

    @property
    def shape(self) -> torch.Size:
        """``[capacity along dim 0, *trailing dims]`` (TorchRL's ``storage.shape``); known once allocated."""
        if self.ndim > 1 and not self.initialized:
            raise RuntimeError("the shape of a multi-dimensional storage is known from its first write")
        return torch.Size([self.max_size // self._per_row, *self._env])

    @property
    def _storage(self) -> Any:
        """TorchRL's attribute name for the whole allocated data, read by code written against it
        (``storage._storage[index]``): every slot of the capacity, written or not, as the kind that was
        written, ``[capacity along dim 0, *trailing dims]``; zero-copy views (read them, write through
        the buffer). ``None`` before the first write."""
        if not self.initialized:
            return None
        if self.ndim > 1:
            shape = self.shape
            views = [t.view(*shape, *leaf) for t, (leaf, _) in zip(self._plain, self._schema, strict=True)]
            return self._wrap(views, shape)
        return self._wrap(list(self._plain), torch.Size([self.max_size]))

    @property
    def _per_row(self) -> int:
        return mdim.prod(self._env) if self.ndim > 1 else 1

    def len_along_dim0(self) -> int:
        """Rows written along dim 0 (``len(storage)`` counts items: rows times trailing dims)."""
        return len(self) // self._per_row if self.ndim > 1 else len(self)

    def max_size_along_dim0(self, data: Any = None, batched: bool = True) -> int:
        """Capacity along dim 0; before the first write, computed from ``data``'s trailing dims."""
        if self.ndim == 1:
            return self.max_size
        if self.initialized:
            return self.max_size // self._per_row
        if data is None:
            raise RuntimeError("the capacity along dim 0 of a multi-dimensional storage is known from its first write")
        _, _, leaves, _, row_batch = flatten(data, batched)
        env, _, _ = split_env(leaves, row_batch, self.ndim, batched)
        return mdim.rows_capacity(self.max_size, env)

    # -- counters (a numpy view of a tensor, so ``share()`` can put them in shared memory) -------
    @property
    def write_version(self) -> int:
        return int(self._counts[1])

    @write_version.setter
    def write_version(self, value: int) -> None:
        self._counts[1] = value

    def __len__(self) -> int:
        return int(self._counts[0])

    def _set_len(self, n: int) -> None:
        self._counts[0] = n
        if self._len_t is not None:
            self._len_t.fill_(n)

    def length_tensor(self) -> torch.Tensor:
        """``len(self)`` as a 0-d int64 tensor. With ``compilable=True`` it is the storage's own tensor,
        which ``torch.compile`` reads as a graph input, not a constant: code compiled over it (a
        ``RandomSampler`` draw) is not recompiled when the storage grows. Read it, never write it."""
        return self._len_t if self._len_t is not None else torch.tensor(len(self))

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
        self._np = numpy_views(self._plain)
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
                    + (f"missing {', '.join(map(key_str, missing))}" if missing else "")
                    + ("; " if missing and extra else "")
                    + (f"unexpected {', '.join(map(key_str, extra))}" if extra else "")
                    + ". Write the same keys every time (Select/Exclude transforms can align them)"
                )
            ordered = [incoming[k] for k in self._keys]
        for key, value, (shape, dtype) in zip(self._keys, ordered, self._schema, strict=True):
            got = tuple(value.shape[1:] if batched else value.shape)
            if got != shape or value.dtype != dtype:
                raise ValueError(
                    f"entry {key_str(key)} has per-item shape {got} and dtype {value.dtype}, but the storage "
                    f"was allocated for shape {shape} and dtype {dtype} from the first write: convert the "
                    "data (e.g. .to(dtype)) or use a new buffer"
                )
        return ordered

    # -- reads -----------------------------------------------------------------------------------
    def get(self, index: Any) -> Any:
        """Items at ``index``. With ``ndim > 1``, ints, slices and tensors index dim 0 (whole rows),
        a tuple indexes several dims, and a tuple of ``ndim`` int64 tensors names single items."""
        if self.ndim > 1:
            return self._get_md(index)
        if type(index) is not torch.Tensor or index.dtype != torch.int64 or not self._plain:
            return self._get_other(index)
        return self._gather(index)

    def _gather(self, index: torch.Tensor, extra: dict | None = None) -> Any:
        """Flat items ``index`` (any shape), one read per leaf."""
        flat = index if index.ndim == 1 else index.reshape(-1)  # a torch call costs ~1 us here
        if self._compilable:  # torch ops only: nothing torch.compile cannot trace
            out = [torch.index_select(t, 0, flat) for t in self._plain]
        else:
            rows = flat.numpy()
            out = [gather_rows(t, a, flat, rows) for a, t in zip(self._np, self._plain, strict=True)]
        if index.ndim != 1:
            out = [t.reshape(*index.shape, *t.shape[1:]) for t in out]
        return self._wrap(out, index.shape, extra)

    def get_items(self, items: torch.Tensor) -> Any:
        """Items by flat position (time-major on a multi-dimensional storage: what samplers draw)."""
        return self._gather(items) if self._plain else self._get_other(items)

    def gather(self, index: torch.Tensor, extras: dict[Any, torch.Tensor] | None = None) -> Any:
        """``get`` plus ``extras``; TensorDict rows with a 1-D int64 index are built once with the
        extras inside (no per-key ``set``)."""
        if not (  # flat items (also of a multi-dimensional storage: samplers draw flat items)
            self._kind == "td"
            and not self._row_batch
            and self._plain
            and type(index) is torch.Tensor
            and index.ndim == 1
            and index.dtype == torch.int64
        ):
            return super().gather(index, extras)
        return self._gather(index, extras)

    def gather_into(
        self, rows: np.ndarray, out: dict[tuple[str, ...], np.ndarray], extras: dict[Any, torch.Tensor] | None = None
    ) -> None:
        """The TensorDict items at valid 1-D ``rows`` written straight into ``out`` (the contract of
        ``DatasetStorage.gather_into``: per key an array of ``len(rows)`` rows, the leaf's dtype, its
        per-item shape or wider in the last dimension); ``extras`` replace the stored leaves of their keys.
        Storages that cannot gather leaf by leaf in numpy gather a TensorDict and copy it in."""
        extras = {as_key(k): v for k, v in (extras or {}).items()}
        views = dict(zip(self._keys, self._np, strict=True)) if self._kind == "td" and self.ndim == 1 else {}
        if self._compilable or any(views.get(k) is None for k in out if k not in extras):
            sample = self.gather(torch.from_numpy(rows), extras)
            for key, dst in out.items():
                fill_rows(dst, sample.get(key).numpy())
            return
        for key, dst in out.items():
            view = views.get(key)
            if key in extras:
                fill_rows(dst, extras[key].numpy())
            elif view is not None:  # every key not in extras has one (checked above)
                take_rows(view, rows, dst)

    def numpy_columns(self) -> dict[tuple[str, ...], np.ndarray] | None:
        """Each key's memory as a read-only numpy array ``[max_size, *item shape]``, for a caller that gathers
        rows itself (``take`` with ``out=``: fewer steps per call than :meth:`gather_into`). Only the first
        ``len(self)`` rows hold items (a sampler's rows always do). ``None`` where not every key has one: a
        storage not allocated yet, one that is not a one-dimensional TensorDict storage, a ``compilable``
        one, or a leaf numpy has no dtype for. The same dict is returned until the storage's memory moves
        (its first write, a restore, ``share``), so a caller may keep what it derives from it for as long
        as ``numpy_columns()`` returns that very dict."""
        cached = getattr(self, "_columns", None)
        if cached is not None and cached[0] is self._np:
            return cached[1]
        columns = None
        if self._kind == "td" and self.ndim == 1 and not self._compilable and all(a is not None for a in self._np):
            columns = {}
            for key, array in zip(self._keys, self._np, strict=True):
                view = cast(np.ndarray, array).view()
                view.flags.writeable = False  # the storage's own memory: writes go through the storage
                columns[key] = view
        self._columns = (self._np, columns)
        return columns

    def _get_md(self, index: Any) -> Any:
        if not self.initialized:
            self._maybe_attach_shared()
            if not self.initialized:
                raise RuntimeError("the storage is empty: write data before reading it")
        n0 = self.len_along_dim0()
        if (
            isinstance(index, tuple)
            and len(index) == self.ndim
            and all(type(i) is torch.Tensor and i.dtype == torch.int64 for i in index)
        ):
            return self._gather(mdim.ravel(index, (n0, *self._env)))
        views = [
            t.view(self.shape[0], *self._env, *shape)[:n0]
            for t, (shape, _) in zip(self._plain, self._schema, strict=True)
        ]
        if isinstance(index, torch.Tensor) and index.dtype == torch.bool and index.ndim == 1:
            index = torch.nonzero(index).reshape(-1)
        out = [v[index] for v in views]
        if not out:
            return self._wrap([], torch.Size(torch.empty(n0, *self._env)[index].shape))
        batch = out[0].shape[: out[0].ndim - len(self._schema[0][0])]
        return self._wrap(out, batch)

    def _get_other(self, index: Any) -> Any:
        if not self.initialized:
            self._maybe_attach_shared()
            if not self.initialized:
                raise RuntimeError("the storage is empty: write data before reading it")
        index = _as_index(index, len(self))
        if not self._plain:  # a TensorDict without entries: only the batch size is stored
            return self._wrap([], torch.Size(torch.empty(len(self))[index].shape))
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
        if kind == "lazy_td":
            parts, stack_dim = self._meta
            nested = nest(self._keys, out)
            batch_size = torch.Size(batch) + self._row_batch
            stacked = lazy_stack(
                [TensorDict(nested.get(str(i), {}), batch_size=batch_size) for i in range(parts)],
                dim=len(batch) + stack_dim,
            )
            return attach_extras(stacked, extra)
        source: Any
        if self._flat and not extra:
            source = {p[1]: t for p, t in zip(self._paths, out, strict=True)}
        else:
            source = nest(self._keys, out)
            if extra:
                nest(extra.keys(), extra.values(), source)
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
    def num_items(self, data: Any) -> int:
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
        """Write ``data`` at ``cursor`` (with ``ndim > 1``: rows along dim 0, or a tuple over several dims)."""
        batched = not isinstance(cursor, (int, np.integer))
        kind, keys, leaves, meta, row_batch = flatten(data, batched)
        if not self.initialized:
            self._maybe_attach_shared()
        if kind == "lazy_td":
            self._check_lazy_stack(meta)
        if self.ndim > 1:
            if isinstance(cursor, tuple):
                return self._set_md(cursor, kind, keys, leaves, row_batch)
            env, leaves, row_batch = split_env(leaves, row_batch, self.ndim, batched)
            if not self.initialized:
                self._env = env
                self.max_size = mdim.rows_capacity(self.max_size, env) * mdim.prod(env)
            elif env != self._env:
                raise ValueError(f"this storage holds rows of shape {list(self._env)}, got data with {list(env)}")
            cap0 = self.max_size // self._per_row
            if not batched:
                rows = torch.tensor([int(cursor)])
            elif isinstance(cursor, slice):
                rows = torch.arange(*cursor.indices(self.len_along_dim0() or cap0))
            else:
                rows = torch.as_tensor(cursor, dtype=torch.int64).reshape(-1)
            if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= cap0):
                raise IndexError(f"write rows must lie in [0, {cap0}) along dim 0, got {rows.min()}..{rows.max()}")
            cursor, batched = mdim.rows_to_items(rows, self._per_row), True
        if not self.initialized:
            self._allocate(kind, keys, leaves, meta, row_batch, batched)
            ordered = leaves
        else:
            self._add_new_keys(cursor, kind, keys, leaves, row_batch, batched)
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
            # a view of this very leaf (read_all_in_order is zero-copy) is copied before writing over it
            same = isinstance(v, torch.Tensor) and v.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
            t[index] = v.clone() if same else v
        if top > n:
            self._set_len(top)
        self._bump_version()

    def _check_lazy_stack(self, meta: list[int]) -> None:
        """Lazy stacks of parts that differ in shape are stored part by part (``tensor_leaves``): only on
        one-dimensional storages, and stacked the same way at every write."""
        if self.ndim > 1:
            raise NotImplementedError(
                "a storage with ndim > 1 cannot hold a lazy stack of parts that differ in shape: use ndim=1, "
                "or a LazyStackStorage"
            )
        if self.initialized and self._kind == "lazy_td" and list(meta) != list(self._meta):
            raise ValueError(
                f"this storage holds lazy stacks of {self._meta[0]} parts along item dim {self._meta[1]}; got "
                f"{meta[0]} parts along item dim {meta[1]}: stack the data the same way at every write"
            )

    def _add_new_keys(self, cursor: Any, kind: str, keys: list, leaves: list, row_batch: tuple, batched: bool) -> None:
        """Allocate the keys a write adds when it may add them (see the class docstring); anything
        else is left to ``_check``, which names what differs."""
        known = set(self._keys)
        new = [(k, v) for k, v in zip(keys, leaves, strict=True) if k not in known]
        if not new or kind != "td" or not batched or tuple(row_batch) != self._row_batch:
            return
        if any(k not in set(keys) for k in self._keys):
            return  # keys are missing as well: a schema mismatch, reported by _check
        names = ", ".join(key_str(k) for k, _ in new)
        # a TensorStorage wrapping a TensorDict without entries (TensorStorage(TensorDict(batch_size=[n])))
        # takes its keys from the first write: every row counts as valid, rows not written hold zeros
        if self._keys and not self._covers_every_item(cursor):
            raise ValueError(
                f"data does not match the storage schema (set by the first write): unexpected {names}. A new key "
                "must be written for every stored item at once, or the other items would hold zeros: "
                "data = rb.read_all_in_order(); data[...] = ...; rb.write_all(data)"
            )
        if self._shared:
            raise ValueError(f"cannot add {names} to a storage shared with other processes (share() was called)")
        old = [(k, v) for k, v in zip(keys, leaves, strict=True) if k in known]
        self._check(kind, [k for k, _ in old], [v for _, v in old], row_batch, batched)  # before allocating
        shapes = [(tuple(v.shape[1:]), v.dtype) for _, v in new]
        added = self._alloc_new_leaves([k for k, _ in new], shapes)
        self._attach(self._kind, self._keys + [k for k, _ in new], self._plain + added, self._meta, self._row_batch)

    def _covers_every_item(self, cursor: Any) -> bool:
        n = len(self)
        if isinstance(cursor, slice):
            rows = torch.arange(n)[cursor] if n else torch.zeros(0, dtype=torch.int64)
        else:
            rows = torch.as_tensor(cursor, dtype=torch.int64).reshape(-1)
        rows = rows[(rows >= 0) & (rows < n)]
        return torch.unique(rows).numel() == n

    def _alloc_new_leaves(self, keys: list, shapes: list) -> list[torch.Tensor]:
        """Leaves for keys added after the first write (zeros in RAM here)."""
        return [
            torch.zeros((self.max_size, *self._row_batch, *shape[len(self._row_batch) :]), dtype=dtype)
            for shape, dtype in shapes
        ]

    def set_in_layout(self, index: Any, data: Any, dim: int = 0) -> None:
        """Overwrite existing items through ``index`` into the storage seen with its dims 0 and ``dim``
        swapped: the layout ``extend`` took when the buffer extends along ``dim`` (``rb[0, 3:4] = x``
        with ``dim_extend=1`` is environment 0, time step 3, as in TorchRL). ``data`` broadcasts over
        the indexed batch dims, aligned on the trailing ones (``rb[:, 10:20] = x`` with ``x`` of batch
        ``[10]`` writes every environment). Length and write cursor are unchanged."""
        batched = not (isinstance(data, TensorDictBase) or is_tensorclass(data)) or bool(data.batch_size)
        kind, keys, leaves, _, row_batch = flatten(data, batched)
        if not self.initialized:
            self._maybe_attach_shared()
        self._set_md(index if isinstance(index, tuple) else (index,), kind, keys, leaves, row_batch, dim)

    def _set_md(self, cursor: tuple, kind, keys, leaves, row_batch, dim: int = 0) -> None:
        """Overwrite existing items through a multi-dim index of the storage with dims 0 and ``dim`` swapped."""
        if not self.initialized:
            raise RuntimeError("write rows into an empty multi-dimensional storage with extend() first")
        if not 0 <= dim < self.ndim:
            raise ValueError(f"dim={dim} is not a storage dim of this ndim={self.ndim} storage")
        n0 = self.len_along_dim0()
        target = tuple(torch.empty(n0, *self._env).transpose(0, dim)[cursor].shape)
        shapes = dict(zip(self._keys, (shape for shape, _ in self._schema), strict=True))
        expanded = {}
        for key, value in zip(keys, leaves, strict=True):
            shape = shapes.get(key)
            if shape is None:
                continue  # _check names the unexpected key
            lead = value.shape[: value.ndim - len(shape)]
            if value.ndim < len(shape) or len(lead) > len(target):
                raise ValueError(
                    f"entry {key_str(key)} of shape {tuple(value.shape)} does not fit the indexed items "
                    f"{list(target)} with per-item shape {shape}"
                )
            try:
                expanded[key] = value.reshape((1,) * (len(target) - len(lead)) + tuple(value.shape)).expand(
                    target + shape
                )
            except RuntimeError as exc:
                raise ValueError(
                    f"entry {key_str(key)} of batch shape {list(lead)} cannot broadcast to the indexed items "
                    f"{list(target)} (broadcasting aligns the trailing dims)"
                ) from exc
        flat = [
            expanded[k].reshape((-1, *shapes[k])) if k in expanded else v for k, v in zip(keys, leaves, strict=True)
        ]
        ordered = self._check(kind, keys, flat, row_batch, True)
        for t, v, (shape, _) in zip(self._plain, ordered, self._schema, strict=True):
            view = t.view(self.shape[0], *self._env, *shape)[:n0].transpose(0, dim)
            same = v.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()  # e.g. rb[a] = rb[b]
            view[cursor] = (v.clone() if same else v).reshape(target + shape)
        self._bump_version()

    def set_key_(self, key: Any, value: Any, index: Any = None) -> None:
        """Overwrite entry ``key`` in place, of every valid item (``value`` with ``len(self)`` rows, or
        ``max_size`` rows, the whole allocation, as TorchRL's storage takes it) or of the items at ``index``.
        The key must exist, and ``value`` must have its per-item shape and dtype: nothing is reallocated.
        One-dimensional storages only."""
        path = key if isinstance(key, tuple) else (key,)
        if self.ndim > 1:
            raise NotImplementedError("set_key_ on a multi-dimensional storage: overwrite rows with rb[idx] = data")
        if not self.initialized or path not in self._keys:
            known = ", ".join(key_str(k) for k in self._keys) or "none (nothing written yet)"
            raise KeyError(f"the storage holds no entry {key_str(path)}; its entries: {known}")
        i = self._keys.index(path)
        leaf, (shape, dtype) = self._plain[i], self._schema[i]
        value = torch.as_tensor(value)
        if tuple(value.shape[1:]) != shape or value.dtype != dtype:
            raise ValueError(
                f"entry {key_str(path)} holds items of shape {shape} and dtype {dtype}; got rows of shape "
                f"{tuple(value.shape[1:])} and dtype {value.dtype}: convert the value first"
            )
        n = len(self)
        if index is None:
            if value.shape[0] not in (n, self.max_size):
                raise ValueError(
                    f"set_ of {key_str(path)} needs one row per stored item ({n}) or per slot ({self.max_size}), "
                    f"got {value.shape[0]}: use set_at_ to write some items"
                )
            leaf[: value.shape[0]] = value
        else:
            rows = _as_index(index, n)
            if isinstance(rows, torch.Tensor):
                rows = rows.reshape(-1)
            leaf[rows] = value
        self._bump_version()

    def empty(self) -> None:
        """Forget every item; the allocation and the schema stay."""
        self._set_len(0)
        self._bump_version()

    # -- sharing, state, dumps -------------------------------------------------------------------
    def share(self) -> None:
        """Put the counters (and in-memory leaves) in shared memory for ``torch.multiprocessing`` children."""
        self._share_counters()
        self._shared = True
        for t in self._plain:
            t.share_memory_()
        self._np = numpy_views(self._plain)  # share_memory_ moved in-memory leaves: refresh the views

    # TorchRL's method name, called by code written against it (``_storage`` is above) ------------
    def _init(self, data: Any) -> None:
        """Allocate the storage for items like ``data`` (one item), writing nothing (TorchRL's ``_init``)."""
        if self.initialized:
            raise RuntimeError(f"this {type(self).__name__} is already allocated")
        if self.ndim > 1:
            raise NotImplementedError("_init on a multi-dimensional storage: its first extend() allocates it")
        kind, keys, leaves, meta, row_batch = flatten(data, False)
        self._allocate(kind, keys, leaves, meta, row_batch, False)

    @property
    def rows_visible_to_children(self) -> bool:
        """True when processes this storage is sent to (or forked children) see its rows: after ``share()``."""
        return self._shared

    def __getstate__(self) -> dict[str, Any]:
        if being_spawned():
            # as in TorchRL, a storage sent to a process being spawned is shared with it; sharing moves the
            # leaves into shared memory, which must happen here (not in torch's pickler) to keep our views valid
            if not self.initialized and not self._shared:
                raise NotShareable(
                    f"cannot share this {type(self).__name__} with a process being spawned: it has not been "
                    "initialized yet (its leaves are allocated by the first write). Write data into it first, or "
                    "build it with LazyMemmapStorage(max_size, shared_init=True)"
                )
            self.share()
        state = super().__getstate__()
        # numpy views pickle as copies of their own, apart from the leaves: made again from the leaves
        state.pop("_np", None)
        state["_columns"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._np = numpy_views(self._plain)  # views of this copy's leaves (a write to one is seen by both)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(len={len(self)}, max_size={self.max_size}, kind={self._kind})"

    # -- state: state_dict / load_state_dict and the checkpointers' hooks --------------------------

    def _as_td(self, stop: int | None = None) -> TensorDict:
        stop = len(self) if stop is None else stop
        if self.ndim > 1:  # [rows, *env] as written
            rows = stop // self._per_row
            src = nest(
                self._keys,
                [
                    t[:stop].view(rows, *self._env, *shape)
                    for t, (shape, _) in zip(self._plain, self._schema, strict=True)
                ],
            )
            return TensorDict(src, batch_size=[rows, *self._env, *self._row_batch])
        src = nest(self._keys, [t[:stop] for t in self._plain])
        return TensorDict(src, batch_size=[stop, *self._row_batch])

    def _meta_json(self) -> dict[str, Any]:
        meta: Any = None
        if self._kind == "pytree":
            meta = _pytree.treespec_dumps(self._meta)
        elif self._kind == "lazy_td":
            meta = list(self._meta)
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
            "ndim": self.ndim,
            "env": list(self._env),
            "write_version": self.write_version,
        }

    def _restore(self, info: dict[str, Any], td: TensorDictBase | None) -> None:
        """Allocate from a saved schema and copy ``td`` (the first ``len`` rows) in; ``td`` is
        ``None`` only for a storage saved before its first write."""
        if info["len"] > self.max_size and int(info.get("ndim", 1)) == 1:
            raise ValueError(f"the saved storage holds {info['len']} items; this one only {self.max_size}")
        kind = info["kind"]
        if kind is None:
            self.empty()
            return
        if td is None:
            raise ValueError(
                f"the saved state describes {kind!r} data but holds none: it was saved without its data "
                "(checkpoint_state(with_data=False)); restore a checkpoint saved with its data"
            )
        keys = [tuple(k) for k in info["keys"]]
        leaves = leaves_of(td, keys)
        meta = self._class_for(kind, info)
        ndim, env = int(info.get("ndim", 1)), tuple(info.get("env", ()))
        if ndim != self.ndim:
            raise ValueError(f"the saved storage has ndim={ndim}, this one ndim={self.ndim}: build it with ndim={ndim}")
        if ndim > 1:
            if self.initialized and env != self._env:
                raise ValueError(f"the saved storage holds rows of shape {list(env)}, this one {list(self._env)}")
            leaves = [t.reshape(-1, *t.shape[ndim:]) for t in leaves]
            if not self.initialized:
                self._env = env
                self.max_size = mdim.rows_capacity(self.max_size, env) * mdim.prod(env)
                if info["len"] > self.max_size:
                    raise ValueError(f"the saved storage holds {info['len']} items; this one only {self.max_size}")
        if not self.initialized:
            shapes = [(tuple(t.shape[1:]), t.dtype) for t in leaves]
            self._attach(
                kind, keys, self._alloc_leaves(keys, shapes, tuple(info["row_batch"])), meta, tuple(info["row_batch"])
            )
        else:
            leaves = self._check(kind, keys, leaves, tuple(info["row_batch"]), True)
        n = int(info["len"])
        for t, v in zip(self._plain, leaves, strict=True):
            t[:n] = v[:n]
        self._set_len(n)
        self._counts[1] = max(self.write_version + 1, int(info.get("write_version", 0)))

    def _class_for(self, kind: str, info: dict[str, Any]) -> Any:
        """The treespec or tensorclass of a saved state: the class object itself when the state was
        made in this process (a tensorclass defined inside a function has no importable name),
        else imported by name."""
        if info.get("class_obj") is not None:
            return info["class_obj"]
        try:
            return decode_meta(kind, info["meta"])
        except (ImportError, AttributeError) as exc:
            if (
                kind == "tensorclass"
                and self._kind == kind
                and self._meta is not None
                and f"{self._meta.__module__}:{self._meta.__qualname__}" == info["meta"]
            ):
                return self._meta  # this storage already holds that (local) class
            raise ValueError(
                f"cannot import the tensorclass {info['meta']!r} the storage was saved with ({exc}); define it "
                "at module level, or load into a storage that already holds data of that class"
            ) from exc

    def state_dict(self) -> dict[str, Any]:
        info = self._meta_json()
        if self._kind == "tensorclass":
            info["class_obj"] = self._meta  # in-memory state: keeps classes defined inside functions
        return {"info": info, "data": self._as_td().to_dict() if self.initialized else {}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        info = state_dict["info"]
        td = None
        if info["kind"]:
            ndim, env = int(info.get("ndim", 1)), list(info.get("env", ()))
            rows = info["len"] // mdim.prod(env) if ndim > 1 else info["len"]
            td = TensorDict(state_dict["data"], batch_size=[rows, *env])
        self._restore(info, td)

    def checkpoint_state(self, with_data: bool = True) -> tuple[dict[str, Any], TensorDictBase | None]:
        """``(schema as JSON-able dict, the valid items as a TensorDict or None)`` for checkpointers."""
        td = self._as_td() if with_data and self.initialized else None
        return self._meta_json(), td

    def restore_checkpoint(self, info: dict[str, Any], td: TensorDictBase | None) -> None:
        """Allocate from a saved schema (if needed) and copy a checkpointer's TensorDict in."""
        self._restore(info, td)


class LazyTensorStorage(TensorStorage):
    """In-RAM tensors allocated from the first write: ``max_size`` rows of its per-item schema.

    TorchRL's keywords: ``device`` (CPU only here), ``ndim`` (see :mod:`.multidim`), ``compilable``.
    ``consolidated=True`` and ``shared_init=True`` are refused (use ``LazyMemmapStorage(...,
    shared_init=True)``, whose files other processes adopt); ``cleanup_memmap`` only applies with
    ``shared_init`` and must stay at its default.
    """

    def __init__(
        self,
        max_size: int,
        *,
        device: Any = "cpu",
        ndim: int = 1,
        compilable: bool = False,
        consolidated: bool = False,
        shared_init: bool = False,
        cleanup_memmap: bool = True,
    ) -> None:
        if consolidated:
            raise NotImplementedError(
                "consolidated=True is not supported: leaves are separate preallocated tensors (a sample is "
                "gathered leaf by leaf); call sample().consolidate() if you need one buffer per batch"
            )
        if shared_init:
            raise NotImplementedError(
                "LazyTensorStorage(shared_init=True) is not supported: use LazyMemmapStorage(max_size, "
                "shared_init=True), whose memory-mapped files the other processes adopt at their first access"
            )
        if not cleanup_memmap:
            raise ValueError("cleanup_memmap only applies with shared_init=True, which LazyTensorStorage refuses")
        super().__init__(None, max_size, ndim=ndim, device=device, compilable=compilable)

    def _alloc_leaves(self, keys, shapes, row_batch) -> list[torch.Tensor]:
        out = [torch.zeros((self.max_size, *shape), dtype=dtype) for shape, dtype in shapes]
        if self._shared:
            for t in out:
                t.share_memory_()
        return out

    def __getstate__(self) -> dict[str, Any]:
        if (self._shared or being_spawned()) and not self.initialized:
            raise NotShareable(
                "a shared LazyTensorStorage must be allocated before it is sent to another process: it has not "
                "been initialized yet (extend it once first), or use LazyMemmapStorage(max_size, shared_init=True), "
                "which children can allocate"
            )
        return super().__getstate__()
