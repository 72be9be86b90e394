"""Storages hold items; samplers choose indices and storages gather them (docs/guide/sampling.md).

This file holds the ``Storage`` contract shared by every storage (the tensor and memmap storages
in ``tensor_storages.py``, the read-only :class:`~datasets_hub.build.storage.DatasetStorage`)
and ``ListStorage`` for arbitrary Python objects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as _pytree
from tensordict import TensorDict, TensorDictBase, is_tensorclass

from datasets_hub.buffers.checkpointers import STORAGE_FORMAT
from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.shared_counters import being_spawned
from datasets_hub.errors import NotShareable, ReadOnlyError


class Storage:
    """Base contract of every storage.

    - ``len(storage)`` is the number of valid items, ``storage.max_size`` the capacity.
    - ``get(index)`` gathers the items at ``index`` (int, slice, or 1-D int64 tensor) in one read
      per stored leaf; ``set(cursor, data)`` writes them. ``storage[index]`` is ``get``.
    - ``write_version`` grows with every write or ``empty()``; anything derived from the contents
      (a sampler's episode boundaries, say) is valid while it is unchanged.
    - ``episode_index()`` returns the build-time :class:`EpisodeIndex` when the storage has one
      (read-only dataset builds do), else ``None``.
    - ``read_key(key)`` returns one leaf for the first ``len(storage)`` items (used to derive
      episode boundaries from ``episode`` or ``("next", "done")``); ``KeyError`` if absent.
    - ``num_items(data)`` is how many items ``data`` holds as this storage counts them (what a
      write of ``data`` fills); ``gather(index, extras)`` reads the items a sampler drew (a 1-D int64
      index of flat items, also for multi-dimensional storages), with
      per-item tensors ``extras`` (key -> ``[len(index), ...]``) set on the TensorDict result (a
      replay buffer adds ``index`` and sampler info this way, in one TensorDict build where it can).
    - ``frame_keys()`` / ``episode_frames(keys, episode, times)``: a storage that keeps
      observation-like keys once per episode (a hub build) serves values by (episode id, time)
      without a row index; others return ``None`` from ``frame_keys()`` and callers gather rows
      through ``get`` (:class:`~datasets_hub.buffers.frame_stack.FrameStack` does both).
    - ``gathers_batches``: True where ``gather`` also takes a 2-D ``[k, m]`` int64 index and returns
      ``[k, m]`` items (extras shaped ``[k, m, ...]``) as cheaply as a flat one (an ensemble's
      ``[k, n // k]`` batch read at once); elsewhere callers gather flat and reshape.
    - ``gather_key(key, rows)`` returns one leaf at the 1-D int64 ``rows`` (leading dim
      ``len(rows)``), reading no other leaf where the storage can (samplers that need a few keys at
      extra rows, e.g. sequence windows and goals, use it); ``KeyError`` if absent. ``episodes``, when
      given, holds each row's episode ordinal in ``episode_index()`` (a hint a storage may use).
    - ``gather_states(key, rows, after)``: the states of an observation-like ``key`` at ``rows`` (a
      numpy int64 array), the state right after the row (``("next", key)``) where the bool array
      ``after`` is True: an episode's final state is the one after its last row. One read where the
      storage keeps observations once per episode (hub builds), two ``gather_key`` reads elsewhere.
    """

    max_size: int
    read_only: bool = False
    gathers_batches: bool = False

    def __init__(self, max_size: int) -> None:
        self.max_size = int(max_size)
        self.write_version = 0

    def __len__(self) -> int:
        raise NotImplementedError

    def get(self, index: Any) -> Any:
        raise NotImplementedError

    def set(self, cursor: Any, data: Any) -> None:
        raise NotImplementedError

    def set_in_layout(self, index: Any, data: Any, dim: int = 0) -> None:
        """Overwrite items through ``index`` into the storage seen with dims 0 and ``dim`` swapped
        (``rb[idx] = data`` on a multi-dimensional storage); storages with ``ndim > 1`` implement it."""
        raise NotImplementedError(f"{type(self).__name__} has no multi-dimensional layout to index")

    def __getitem__(self, index: Any) -> Any:
        return self.get(index)

    def __setitem__(self, index: Any, data: Any) -> None:
        self.set(index, data)

    ndim: int = 1  # dims counted in the capacity (TorchRL's ``ndim``; see multidim.py)
    _checkpointer: Any = None
    #: per-slot write stamps, made by the first writer with ``track_generations=True`` (``generations.py``)
    slot_generations: Any = None

    @property
    def rows_visible_to_children(self) -> bool:
        """True where processes the storage is sent to, and children forked from this one, see its rows (a
        writer then keeps its cursor where they see it too: ``shared_counters.py``)."""
        return False

    @property
    def checkpointer(self) -> Any:
        """How ``dumps``/``loads`` write this storage (see ``checkpointers.py``); settable, as in TorchRL."""
        if self._checkpointer is None:
            self._checkpointer = self._default_checkpointer()
        return self._checkpointer

    @checkpointer.setter
    def checkpointer(self, value: Any) -> None:
        from datasets_hub.buffers.checkpointers import as_checkpointer

        self._checkpointer = None if value is None else as_checkpointer(value)

    def _default_checkpointer(self) -> Any:
        from datasets_hub.buffers.checkpointers import TensorStorageCheckpointer

        return TensorStorageCheckpointer()

    def register_save_hook(self, hook: Any) -> None:
        """Run ``hook(data, path=path)`` on the data before :meth:`dumps` writes it (kept by the checkpointer)."""
        self.checkpointer.register_save_hook(hook)

    def register_load_hook(self, hook: Any) -> None:
        """Run ``hook(data, path=path)`` on the data :meth:`loads` read, before this storage takes it."""
        self.checkpointer.register_load_hook(hook)

    def dumps(self, path: str | Path) -> None:
        """Write the storage under the directory ``path`` with its ``checkpointer``."""
        self.checkpointer.dumps(self, path)

    def loads(self, path: str | Path) -> None:
        """Restore what :meth:`dumps` wrote (with the same kind of checkpointer)."""
        self.checkpointer.loads(self, path)

    def len_along_dim0(self) -> int:
        """Rows written along dim 0; ``len(self)`` when ``ndim == 1``."""
        return len(self)

    @property
    def shape(self) -> torch.Size:
        """``[capacity along dim 0, *trailing dims]`` (``[max_size]`` when ``ndim == 1``)."""
        return torch.Size([self.max_size])

    def get_items(self, items: torch.Tensor) -> Any:
        """Items by flat position (what samplers draw; time-major when ``ndim > 1``)."""
        return self.get(items)

    def as_dataset(self) -> Any:
        """TorchRL 0.15's map-style view of this storage: item ``i`` is entry ``i`` (flat position), read
        without transforms (:class:`~datasets_hub.buffers.pytorch_datasets.StorageDataset`)."""
        from datasets_hub.buffers.pytorch_datasets import StorageDataset

        return StorageDataset(self)

    def max_size_along_dim0(self, data: Any = None, batched: bool = True) -> int:
        """Capacity along dim 0 (writers cycle over it); ``max_size`` when ``ndim == 1``."""
        return self.max_size

    def episode_index(self) -> EpisodeIndex | None:
        return None

    def done_only_at_episode_ends(self) -> bool:
        """Whether every set ``("next", "done")`` flag sits, by construction, on the last row of an episode of
        :meth:`episode_index`: a slice sampler then takes a slice's ``done`` from its ``truncated`` mark
        without scanning the stored flags (``O(rows)`` on its first call). Default: not known (False)."""
        return False

    def num_items(self, data: Any) -> int:
        """How many items ``data`` holds (its leading batch size, or ``len``)."""
        if isinstance(data, TensorDictBase) or is_tensorclass(data):
            if not data.batch_size:
                raise ValueError("extend() needs data with a leading batch dimension; use add() for one item")
            return data.batch_size[0]
        return len(data)

    def gather(self, index: torch.Tensor, extras: dict[Any, torch.Tensor] | None = None) -> Any:
        """``get(index)`` with ``extras`` set on the result when it is a TensorDict (see the class docstring)."""
        return attach_extras(self.get(index), extras)

    def gather_valid(self, index: torch.Tensor, rows: np.ndarray, extras: dict[Any, torch.Tensor]) -> Any:
        """``gather(index, extras)`` where a sampler vouched (``Sampler.sample_rows``) that ``rows``, the
        numpy twin of ``index`` (same values and shape: 1-D, or ``[k, m]`` for a storage that
        ``gathers_batches``), holds only valid rows and ``extras`` only per-item tensors: a storage may
        skip its own conversion and checks. By default it does not."""
        return self.gather(index, extras)

    def read_key(self, key: str | tuple[str, ...]) -> torch.Tensor:
        raise KeyError(key)

    def frame_keys(self) -> frozenset[tuple[str, ...]] | None:
        """The keys :meth:`episode_frames` serves, or ``None`` when this storage keeps no per-episode frames."""
        return None

    def episode_frames(
        self, keys: list[tuple[str, ...]], episode: torch.Tensor, times: torch.Tensor
    ) -> tuple[dict[tuple[str, ...], torch.Tensor], dict[tuple[str, ...], torch.Tensor]]:
        """Values of ``keys`` at times ``times`` (``[B, W]``, ``t <= length``, ``t = length`` the final next
        value; a negative time is before the episode's first transition) of the episodes with ids
        ``episode`` (``[B]``), each ``[B, W, *shape]``, and per key a ``[B, W]`` mask of the real frames
        (a time the storage keeps no frame for holds the episode's first frame, masked False)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no per-episode frames (frame_keys() is None)")

    def gather_key(
        self, key: str | tuple[str, ...], rows: torch.Tensor, *, episodes: np.ndarray | None = None
    ) -> torch.Tensor:
        data = self.get(rows)
        if isinstance(data, list):  # ListStorage: one item per row
            return torch.stack([torch.as_tensor(item[key]) for item in data])
        try:
            value = data.get(key)
        except (KeyError, AttributeError):
            value = None
        if value is None:
            raise KeyError(key)
        return value

    def gather_states(
        self,
        key: tuple[str, ...],
        rows: np.ndarray,
        after: np.ndarray | None = None,
        *,
        episodes: np.ndarray | None = None,
    ) -> torch.Tensor:
        """``key`` at ``rows``, and ``("next", *key)`` at the rows where ``after`` is True (see the class
        docstring); ``episodes`` is the same hint as for :meth:`gather_key`."""
        if after is not None and after.all():  # every state is a next value: one read
            return self.gather_key(("next", *key), torch.from_numpy(rows), episodes=episodes)
        value = self.gather_key(_flat_key(key), torch.from_numpy(rows), episodes=episodes)
        if after is not None and after.any():
            where = np.flatnonzero(after)
            hint = episodes[where] if episodes is not None else None
            last = self.gather_key(("next", *key), torch.from_numpy(rows[where]), episodes=hint)
            value = value.clone()  # a view into the storage must not be written
            value[torch.from_numpy(where)] = last
        return value

    def empty(self) -> None:
        raise NotImplementedError

    def set_key_(self, key: Any, value: Any, index: Any = None) -> None:
        """Overwrite one stored entry in place: of every valid item (``index=None``) or of the items at
        ``index``; ``value`` has one row per item written (``rb.set_``/``set_at_``/``update_``)."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot overwrite a single entry in place: use a tensor storage "
            "(LazyTensorStorage, LazyMemmapStorage), or rewrite whole items with rb[index] = data"
        )

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        raise NotImplementedError

    def _bump_version(self) -> None:
        self.write_version += 1


def _flat_key(key: tuple[str, ...]) -> Any:
    return key[0] if len(key) == 1 else key


def attach_extras(data: Any, extras: dict[Any, torch.Tensor] | None) -> Any:
    """Set each per-item tensor of ``extras`` on TensorDict ``data`` (broadcast over trailing batch
    dims); other data is returned as it is."""
    if extras and isinstance(data, TensorDictBase):
        for key, value in extras.items():
            trailing = [1] * (data.batch_dims - value.ndim)
            data.set(key, value.reshape(*value.shape, *trailing).expand(data.batch_size) if trailing else value)
    return data


class ReadOnlyStorage(Storage):
    """Base of the storages over published, immutable data (dataset builds, preprocessing results):
    ``read_only`` is True and every write or ``empty()`` raises :class:`ReadOnlyError` naming
    ``read_only_what``."""

    read_only = True
    read_only_what = "storage"

    def set(self, cursor: Any, data: Any) -> None:
        raise ReadOnlyError(self.read_only_what)

    def empty(self) -> None:
        raise ReadOnlyError(self.read_only_what)


# ----------------------------------------------------------------------------------------------
# Concrete storages. Which rows are valid is ``[0, len)``; writers decide where new rows go.
# ----------------------------------------------------------------------------------------------

_FORMAT = STORAGE_FORMAT  # defined with the checkpointers that write it


def _as_index(index: Any, length: int) -> Any:
    """Normalise a user index as Python and NumPy do, against the ``length`` valid rows.

    Ints pass (negative ones count from the end); slices resolve, a negative step (``rb[::-1]``,
    ``rb[5::-1]``) as an index tensor in that order; integer tensors, arrays and lists pass as int64;
    a boolean mask must have exactly ``length`` entries and becomes the rows where it is True. A
    float (``rb[1.5]``, ``rb[tensor([1.5])]``) or any other non-integer index is a ``TypeError``,
    never silently truncated to a row.
    """
    if isinstance(index, (bool, np.bool_)):
        raise TypeError(f"a buffer index must be an int, a slice, an int tensor or a boolean mask, not {index!r}")
    if isinstance(index, (int, np.integer)):
        i = int(index)
        if i < 0:
            i += length
        if not 0 <= i < length:
            raise IndexError(f"index {int(index)} is out of range for a storage holding {length} items")
        return i
    if isinstance(index, slice):
        for part in (index.start, index.stop, index.step):
            if part is not None and not isinstance(part, (int, np.integer)):
                raise TypeError(f"slice bounds must be ints or None, got {index!r}")
        start, stop, step = index.indices(length)
        if step < 0:
            return torch.arange(start, stop, step, dtype=torch.int64)  # tensors cannot take a negative step
        return slice(start, stop, step)
    if not isinstance(index, torch.Tensor):
        array = np.asarray(index)
        if array.dtype == object or array.dtype.kind not in "biu":
            raise TypeError(
                f"a buffer index must hold integers or booleans, got {array.dtype} ({index!r:.60}); "
                "cast it with .long() / int() if you meant row numbers"
            )
        index = torch.from_numpy(np.ascontiguousarray(array))
    if index.dtype == torch.bool:
        if tuple(index.shape) != (length,):
            raise IndexError(
                f"a boolean mask must have one entry per stored item ({length}), got shape {tuple(index.shape)}"
            )
        return torch.nonzero(index).reshape(-1)
    if index.is_floating_point() or index.is_complex():
        raise TypeError(
            f"a buffer index must hold integers or booleans, got a {index.dtype} tensor; "
            "cast it with .long() if you meant row numbers"
        )
    return index.to(torch.int64)


def _slice_items(data: Any, start: int, stop: int) -> Any:
    """Items ``start:stop`` of batched data (any kind a storage accepts)."""
    if isinstance(data, (torch.Tensor, TensorDictBase, list, range)) or is_tensorclass(data):
        return data[start:stop]
    if isinstance(data, (dict, tuple)):
        return _pytree.tree_map(lambda x: x[start:stop], data)
    return list(data)[start:stop]


_GAP = object()


class ListStorage(Storage):
    """Any Python objects, one list slot per item (TorchRL's ``ListStorage``).

    ``get`` with an int returns the item, with a slice, list or tensor a Python list of items
    (the buffer collates it). Writing at ``len(storage)`` appends; beyond it is an error.
    """

    def __init__(self, max_size: int | None = 1000, *, compilable: bool = False, device: Any = None) -> None:
        if device is not None and torch.device(device).type != "cpu":
            raise NotImplementedError(f"device={device!r}: ListStorage keeps Python objects in host memory")
        if max_size is None:  # TorchRL: no bound
            max_size = 2**63 - 1
        super().__init__(max_size)
        self.compilable = bool(compilable)  # a Python list: nothing to share, nothing to change for compile
        self._storage: list[Any] = []

    def __len__(self) -> int:
        return len(self._storage)

    def num_items(self, data: Any) -> int:
        return len(data) if hasattr(data, "__len__") else len(list(data))

    def get(self, index: Any) -> Any:
        items = self._storage
        index = _as_index(index, len(items))
        if isinstance(index, int):
            return items[index]
        if isinstance(index, slice):
            return items[index]
        return [items[i] for i in index.reshape(-1).tolist()]

    def set(self, cursor: Any, data: Any) -> None:
        if isinstance(cursor, (int, np.integer)):
            cursors, values = [int(cursor)], [data]
        else:
            if isinstance(cursor, slice):
                cursors = list(range(*cursor.indices(len(self) or self.max_size)))
            else:
                cursors = torch.as_tensor(cursor).reshape(-1).tolist()
            if isinstance(data, (torch.Tensor, TensorDictBase)):
                values = list(data.unbind(0))
            else:
                values = list(data)
            if len(values) != len(cursors):
                raise ValueError(f"cannot write {len(values)} items at {len(cursors)} positions")
        items = self._storage
        top = max(cursors, default=-1) + 1
        if min(cursors, default=0) < 0 or top > self.max_size:
            raise IndexError(
                f"write positions must lie in the storage capacity [0, {self.max_size}), got {min(cursors)}..{top - 1}"
            )
        n = len(items)
        if top > n:  # a batch may fill rows past the end in any order, as long as it leaves no gap
            items.extend([_GAP] * (top - n))
        for c, v in zip(cursors, values, strict=True):
            items[c] = v
        if top > n and any(x is _GAP for x in items[n:]):
            del items[n:]
            raise IndexError(f"ListStorage holds {n} items: writing at {sorted(set(cursors))} would leave a gap")
        self._bump_version()

    def read_key(self, key: str | tuple[str, ...]) -> torch.Tensor:
        if not self._storage:
            raise KeyError(key)
        return torch.stack([torch.as_tensor(item[key]) for item in self._storage])

    def __getstate__(self) -> dict[str, Any]:
        if being_spawned():  # the child would write into its own copy of the list: its writes would be lost
            raise NotShareable(
                "Cannot share a storage of type ListStorage between processes: its items are Python objects "
                "of this process. Use LazyMemmapStorage(max_size) for a buffer other processes write to"
            )
        return self.__dict__.copy()

    def empty(self) -> None:
        self._storage = []
        self._bump_version()

    def state_dict(self) -> dict[str, Any]:
        return {"_storage": [_encode_item(x) for x in self._storage], "max_size": self.max_size}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the items of ``state_dict`` as copies: changing the source afterwards (another storage's
        live items, a checkpoint loaded with ``mmap=True``) never changes this storage."""
        items = [_decode_item(x, copy=True) for x in state_dict["_storage"]]
        if len(items) > self.max_size:
            raise ValueError(f"state holds {len(items)} items but this ListStorage holds {self.max_size}")
        self._storage = items
        self._bump_version()

    def _default_checkpointer(self) -> Any:
        from datasets_hub.buffers.checkpointers import ListStorageCheckpointer

        return ListStorageCheckpointer()  # the items with torch.save (tensors, numbers, strings, TensorDicts)


def _encode_item(x: Any) -> Any:
    if isinstance(x, TensorDictBase):
        return {"__tensordict__": x.to_dict(), "batch_size": list(x.batch_size)}
    if x is None or isinstance(x, (torch.Tensor, int, float, bool, str)):
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_encode_item(v) for v in x)
    if isinstance(x, dict) and all(isinstance(k, str) for k in x):
        return {k: _encode_item(v) for k, v in x.items()}
    raise TypeError(
        f"ListStorage can only save tensors, numbers, strings, containers of them and TensorDicts, "
        f"not {type(x).__name__}; store such data as tensors in a LazyMemmapStorage to save it"
    )


def _decode_item(x: Any, copy: bool = False) -> Any:
    if isinstance(x, dict):
        if "__tensordict__" in x:
            td = TensorDict(x["__tensordict__"], batch_size=x["batch_size"])
            return td.clone() if copy else td
        return {k: _decode_item(v, copy) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_decode_item(v, copy) for v in x)
    if copy and isinstance(x, (torch.Tensor, TensorDictBase)):
        return x.clone()
    return x


def _check_meta(path: Path, expected: str | tuple[str, ...]) -> dict[str, Any]:
    meta_path = path / "storage.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"{path} holds no dumped storage (no storage.json): pass a path written by dumps()")
    meta = json.loads(meta_path.read_text())
    expected = (expected,) if isinstance(expected, str) else expected
    if meta.get("format") != _FORMAT or meta.get("class") not in expected:
        raise ValueError(
            f"{path} holds a {meta.get('class')!r} dump; it cannot be loaded into a {expected[0]}: "
            "build the buffer with the same storage kind it was dumped from"
        )
    return meta
