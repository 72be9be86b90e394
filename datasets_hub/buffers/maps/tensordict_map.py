"""``TensorMap`` and ``TensorDictMap``: a storage addressed by the contents of TensorDicts.

``tdmap[keys_td] = values_td`` hashes ``keys_td``'s ``in_keys`` row by row (its
:class:`~datasets_hub.buffers.maps.query_module.QueryModule`, which numbers each new combination
of values) and writes row ``i`` of ``values_td`` to the storage row numbered for row ``i`` of
``keys_td``; ``tdmap[keys_td]`` reads those rows back (other entries of ``keys_td`` are ignored);
``tdmap.contains(keys_td)`` is a bool per row. A TensorDict with no batch dim is one row.

- Writes go through the query module as it is configured: with its default ``clone=False`` the
  index (``index_key``) and hash are written into ``keys_td`` too, as in TorchRL.
- ``out_keys`` given: only those entries of ``values_td`` are stored. Not given: the keys of what
  the storage holds, known once a tensor storage has been written (``hasattr(tdmap, "out_keys")``
  is False before, and always for a ``ListStorage``).
- Rows of one write that share their keys are written one after the other, so the last one wins.
- ``write_fn(new)`` / ``write_fn(new, old)``, when given, computes what is stored from the value
  written (and the one already stored, for a row that has one).
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import torch
from tensordict import NestedKey, TensorDictBase
from torch import nn

from datasets_hub.buffers.maps.hashing import RandomProjectionHash, SipHash
from datasets_hub.buffers.maps.query_module import QueryModule
from datasets_hub.buffers.storages import ListStorage, Storage
from datasets_hub.buffers.tensor_storages import LazyTensorStorage, TensorStorage

K = TypeVar("K")
V = TypeVar("V")


class TensorMap(abc.ABC, Generic[K, V]):
    """The map contract: ``map[key]``, ``map[key] = value``, ``len``, ``clear()``, ``contains(key)``
    (a bool tensor, one per row of ``key``) and ``key in map``."""

    @abc.abstractmethod
    def clear(self) -> None: ...

    @abc.abstractmethod
    def __getitem__(self, item: K) -> V: ...

    @abc.abstractmethod
    def __setitem__(self, key: K, value: V) -> None: ...

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def contains(self, item: K) -> torch.Tensor: ...

    def __contains__(self, item: K) -> bool:
        return bool(self.contains(item).all())


def _stack_items(items: Any) -> Any:
    """What a ``ListStorage`` read returns (a list of rows) as one batch."""
    if isinstance(items, list):
        return torch.stack(items) if items else items
    return items


class TensorDictMap(nn.Module, TensorMap[TensorDictBase, TensorDictBase]):
    """A storage addressed by TensorDict contents (contract: :mod:`datasets_hub.buffers.maps.tensordict_map`).

    ``storage``: any datasets_hub storage (``LazyTensorStorage``, ``ListStorage``, ...);
    ``collate_fn`` turns what it returns into a batch (default: stacks a ``ListStorage``'s rows).
    """

    def __init__(
        self,
        *,
        query_module: QueryModule,
        storage: Storage,
        collate_fn: Callable[[Any], Any] | None = None,
        out_keys: list[NestedKey] | None = None,
        write_fn: Callable[..., Any] | None = None,
    ) -> None:
        super().__init__()
        self.query_module = query_module
        self.in_keys = query_module.in_keys
        self.index_key = query_module.index_key
        self.storage = storage
        if collate_fn is None:
            collate_fn = _stack_items if isinstance(storage, ListStorage) else (lambda x: x)
        self.collate_fn = collate_fn
        self.write_fn = write_fn
        self._given_out_keys = None if out_keys is None else list(out_keys)

    @property
    def max_size(self) -> int:
        return self.storage.max_size

    @property
    def out_keys(self) -> list[NestedKey]:
        """The stored entries: the ``out_keys`` given, else those of a written tensor storage."""
        if self._given_out_keys is not None:
            return self._given_out_keys
        if isinstance(self.storage, TensorStorage) and len(self.storage):
            row = self.storage.get(slice(0, 1))
            if isinstance(row, TensorDictBase):
                return list(row.keys(include_nested=True, leaves_only=True))
        raise AttributeError(
            f"no out_keys: none were given and the {type(self.storage).__name__} holds no TensorDict yet"
        )

    def _has_lazy_out_keys(self) -> bool:
        """True when ``out_keys`` are read from the storage rather than given."""
        return self._given_out_keys is None

    @classmethod
    def from_tensordict_pair(
        cls,
        source: TensorDictBase,
        dest: TensorDictBase,
        in_keys: list[NestedKey],
        out_keys: list[NestedKey] | None = None,
        max_size: int = 1000,
        storage_constructor: Callable[[], Storage] | None = None,
        hash_module: Callable[[Any], Any] | list[Callable[[Any], Any]] | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        write_fn: Callable[..., Any] | None = None,
        consolidated: bool | None = None,
    ) -> TensorDictMap:
        """A map keyed by ``in_keys`` of data like ``source`` to values like ``dest`` (examples of each).

        Without ``hash_module``, a key whose rows have more than 16 features is hashed with a
        :class:`RandomProjectionHash`, any other with a :class:`SipHash`. The storage is
        ``storage_constructor()``, by default a ``LazyTensorStorage(max_size)``. ``consolidated=True``
        is refused: datasets_hub storages keep one tensor per entry.
        """
        if consolidated:
            raise NotImplementedError(
                "consolidated=True: datasets_hub storages keep one tensor per entry; drop consolidated="
            )
        if hash_module is None:
            hash_module = []
            for key in in_keys:
                entry = source.get(key)
                features = entry.shape[-1] if entry.ndim > source.batch_dims else 0
                wide = features > RandomProjectionHash._N_COMPONENTS_DEFAULT
                hash_module.append(RandomProjectionHash() if wide else SipHash())
        query_module = QueryModule(in_keys, hash_module=hash_module)
        if storage_constructor is None:
            storage_constructor = functools.partial(LazyTensorStorage, max_size)
        return cls(
            query_module=query_module,
            storage=storage_constructor(),
            collate_fn=collate_fn,
            out_keys=out_keys,
            write_fn=write_fn,
        )

    def clear(self) -> None:
        self.storage.empty()

    def _index(self, keys: TensorDictBase, *, extend: bool, clone: bool | None = None) -> torch.Tensor:
        return self.query_module(keys, extend=extend, clone=clone).get(self.index_key)

    def __getitem__(self, item: TensorDictBase) -> TensorDictBase:
        single = item.batch_dims == 0
        keys = item.copy().unsqueeze(0) if single else item.copy()
        index = self._index(keys, extend=False, clone=False)
        known = index < len(self.storage)
        if not bool(known.all()):
            raise KeyError(
                f"TensorDictMap: {int((~known).sum())} of the {index.numel()} rows asked for were never written "
                "(check with tdmap.contains(keys) first)"
            )
        result = self.collate_fn(self.storage.get(index))
        return result.squeeze(0) if single else result

    def __setitem__(self, item: TensorDictBase, value: TensorDictBase) -> None:
        if self._given_out_keys is not None:
            value = value.select(*self._given_out_keys, strict=False)
        if item.batch_dims == 0:
            item, value = item.unsqueeze(0), value.unsqueeze(0)
        index = self._index(item, extend=True)
        if index.unique().numel() < index.numel():
            # several rows land on one storage row: write them in order, so the last one wins
            for i in range(index.numel()):
                self[item[i : i + 1]] = value[i : i + 1]
            return
        if self.write_fn is not None:
            value = self._apply_write_fn(self.write_fn, index, value)
        self.storage.set(index, value)

    def _apply_write_fn(self, write_fn: Callable[..., Any], index: torch.Tensor, value: TensorDictBase) -> Any:
        """``write_fn(new, old)`` for rows already stored, ``write_fn(new)`` for the others."""
        stored = index < len(self.storage)
        if not bool(stored.any()):
            return write_fn(value)
        result = value.empty()
        result[stored] = write_fn(value[stored], self.collate_fn(self.storage.get(index[stored])))
        if not bool(stored.all()):
            result[~stored] = write_fn(value[~stored])
        return result

    def __len__(self) -> int:
        return len(self.storage)

    def contains(self, item: TensorDictBase) -> torch.Tensor:
        single = item.batch_dims == 0
        keys = item.unsqueeze(0) if single else item
        index = self._index(keys, extend=False, clone=True)
        found = index < len(self.storage)
        return found.squeeze(0) if single else found
