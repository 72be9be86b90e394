"""Items of a replay buffer by position: ``rb[i]``, ``rb[i] = x``, and all of them in write order.

:class:`RowAccess` is a part of :class:`~datasets_hub.buffers.replay_buffers.ReplayBuffer`: reads and
writes by index (transforms applied as on samples and writes), and ``read_all_in_order`` /
``write_all``, which move the raw storage contents oldest first. A read-only buffer refuses every
write with :class:`~datasets_hub.errors.ReadOnlyError`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from datasets_hub.buffers import multidim as mdim
from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.storages import Storage, _as_index, _slice_items
from datasets_hub.buffers.writers import ImmutableDatasetWriter, Writer
from datasets_hub.errors import ReadOnlyError


class RowAccess:
    """Indexing and whole-contents reads and writes of a replay buffer (a mixin: the buffer holds the state)."""

    _storage: Storage
    _sampler: Sampler
    _writer: Writer
    _lock: threading.RLock
    _dim_extend: int
    _collate_fn: Callable | None

    if TYPE_CHECKING:

        def __len__(self) -> int: ...
        def _inv(self, data: Any) -> Any: ...
        def _fwd(self, data: Any) -> Any: ...

    def _items_of_rows(self, rows: Any) -> Any:
        """Samplers number items; the writer of a multi-dimensional storage returns whole rows."""
        if getattr(self._storage, "ndim", 1) == 1:
            return rows
        return mdim.rows_to_items(torch.as_tensor(rows), self._storage.shape[1:].numel())

    def _refuse_if_read_only(self) -> None:
        if isinstance(self._writer, ImmutableDatasetWriter) or getattr(self._storage, "read_only", False):
            raise ReadOnlyError("buffer (a read-only dataset: ImmutableDatasetWriter)")

    def __setitem__(self, index: Any, data: Any) -> None:
        """Overwrite items in place (``rb[:] = data`` on an empty buffer fills it like ``extend``)."""
        self._refuse_if_read_only()
        data = self._inv(data)
        if getattr(self._storage, "ndim", 1) > 1 and not (len(self) == 0 and index == slice(None)):
            with self._lock:  # as TorchRL: index the data in the layout extend() takes
                full = index if isinstance(index, tuple) else (slice(None),) * self._dim_extend + (index,)
                self._storage.set(full, mdim.transpose_data(data, self._dim_extend))
            return
        with self._lock:
            if len(self) == 0 and isinstance(index, slice) and index == slice(None):
                if self._dim_extend:
                    data = mdim.transpose_data(data, self._dim_extend)
                self._sampler.extend(self._items_of_rows(self._writer.extend(data)))
                return
            index = self._check_index(index)
            if isinstance(index, slice):
                want, got = len(range(index.start, index.stop, index.step)), self._storage.num_items(data)
                if want != got:
                    raise ValueError(f"rb[{index.start}:{index.stop}] = data needs {want} items, got {got}")
            self._storage.set(index, data)

    def write_all(self, data: Any, end: int | None = None) -> torch.Tensor:
        """Overwrite the items ``read_all_in_order(end)`` returns, in that order (raw, no transforms).

        On an empty buffer this writes ``data[:end]`` like ``extend``. Length and write cursor are
        unchanged otherwise; returns the positions written.
        """
        self._refuse_if_read_only()
        if getattr(self._storage, "ndim", 1) > 1:
            raise NotImplementedError(
                "write_all on a multi-dimensional storage is not supported: overwrite rows with rb[idx] = data "
                "(indexed in the layout extend() takes)"
            )
        with self._lock:
            if len(self) == 0:
                if end is not None:
                    data = _slice_items(data, 0, end)
                index = self._writer.extend(data)
                self._sampler.extend(index)
                return index
            order = self._writer.indices_in_order()
            if end is not None:
                order = order[:end]
            n = self._storage.num_items(data)
            if n != order.numel():
                raise ValueError(
                    f"write_all got {n} items but the buffer's in-order range holds {order.numel()}: "
                    "pass exactly what read_all_in_order(end) returned, transformed item by item"
                )
            self._storage.set(order, data)
            return order

    def _check_index(self, index: Any) -> Any:
        n = len(self)
        index = _as_index(index, n)
        if isinstance(index, torch.Tensor) and index.numel():
            if int(index.min()) < -n or int(index.max()) >= n:
                raise IndexError(f"index out of range for a buffer holding {n} items")
            if int(index.min()) < 0:
                index = torch.where(index < 0, index + n, index)
        return index

    def __getitem__(self, index: Any) -> Any:
        """``rb[i]`` one item, ``rb[a:b]``/``rb[tensor]`` a batch, ``rb["key"]`` one column of ``rb[:]``."""
        if isinstance(index, str) or (isinstance(index, tuple) and index and all(isinstance(k, str) for k in index)):
            return self[:][index]
        if getattr(self._storage, "ndim", 1) > 1:
            return self._fwd(self._get_md(index))
        with self._lock:
            index = self._check_index(index)
            data = self._storage.get(index)
        if not isinstance(index, int) and self._collate_fn is not None:
            data = self._collate_fn(data)
        return self._fwd(data)

    def _get_md(self, index: Any) -> Any:
        """``rb[idx]`` on a multi-dimensional storage, as TorchRL: the storage read as the data was
        given to ``extend`` (dim ``dim_extend`` back in place), then indexed along its first dim."""
        if isinstance(index, tuple):
            return self[:][index]
        if isinstance(index, list):
            index = torch.as_tensor(index)
        full = (slice(None),) * self._dim_extend + (index,)
        with self._lock:
            data = self._storage.get(full)
        return mdim.transpose_data(data, self._dim_extend) if data.ndim > self._dim_extend else data

    def read_all_in_order(self, end: int | None = None) -> Any:
        """Every item oldest first (the first ``end`` of them), raw from storage (no transforms).

        When the items are contiguous in storage this is one slice read (zero-copy for tensor storages).
        """
        with self._lock:
            order = self._writer.indices_in_order()
            if end is not None:
                order = order[:end]
            n = order.numel()
            if n and int(order[-1]) - int(order[0]) == n - 1:
                first = int(order[0])
                data = self._storage.get(slice(first, first + n))
            else:
                data = self._storage.get(order)
        if self._dim_extend:
            data = mdim.transpose_data(data, self._dim_extend)
        if self._collate_fn is not None:
            data = self._collate_fn(data)
        return data
