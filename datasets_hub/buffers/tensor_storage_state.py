"""Saving and restoring a tensor storage: ``state_dict`` / ``load_state_dict`` and the checkpointers' hooks.

:class:`TensorStorageState` is a part of :class:`~datasets_hub.buffers.tensor_storages.TensorStorage`.
The saved schema (``format`` ``datasets_hub.storage``, version 1) names the data kind, the keys, the
per-item batch dims, the PyTree treespec or the tensorclass (imported by name on restore), the
length, capacity, ``ndim`` and trailing dims and the write version; the data is the valid items as
one TensorDict. Restoring allocates a storage that has not been written yet, or checks the schema
of one that has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils import _pytree

from datasets_hub.buffers import multidim as mdim
from datasets_hub.buffers.nested_keys import nest
from datasets_hub.buffers.storages import _FORMAT
from datasets_hub.buffers.tensor_leaves import decode_meta, leaves_of


class TensorStorageState:
    """The state of a tensor storage (a mixin: the storage holds what it reads)."""

    ndim: int
    max_size: int
    _kind: str | None
    _keys: list[tuple[str, ...]]
    _schema: list[tuple[tuple[int, ...], torch.dtype]]
    _plain: list[torch.Tensor]
    _meta: Any
    _row_batch: tuple
    _env: tuple[int, ...]
    _counts: Any

    if TYPE_CHECKING:

        def __len__(self) -> int: ...
        @property
        def initialized(self) -> bool: ...
        @property
        def write_version(self) -> int: ...
        @property
        def _per_row(self) -> int: ...
        def empty(self) -> None: ...
        def _attach(self, kind: Any, keys: Any, leaves: Any, meta: Any, row_batch: Any) -> None: ...
        def _alloc_leaves(self, keys: Any, shapes: Any, row_batch: Any) -> list[torch.Tensor]: ...
        def _check(self, kind: Any, keys: Any, leaves: Any, row_batch: Any, batched: Any) -> list[torch.Tensor]: ...

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
        self._counts[0] = n
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
