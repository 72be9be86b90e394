"""Writers decide where new items go in a storage (TorchRL's ``Writer`` family).

A writer is attached to one storage by the buffer (``register_storage``). ``add(item) -> int`` and
``extend(batch) -> LongTensor`` write and return the positions written; ``indices_in_order()``
lists the valid positions oldest first (what ``read_all_in_order`` reads).
"""

from __future__ import annotations

from typing import Any

import torch

from datasets_hub.buffers.shared_counters import SharedCounters
from datasets_hub.buffers.storages import Storage, _slice_items
from datasets_hub.errors import ReadOnlyError


class Writer:
    """Base contract: ``add``, ``extend``, ``write_count``, ``empty``, ``state_dict``/``load_state_dict``."""

    def __init__(self) -> None:
        self._storage: Storage | None = None

    def register_storage(self, storage: Storage) -> None:
        self._storage = storage

    def add(self, data: Any) -> int:
        raise NotImplementedError

    def extend(self, data: Any) -> torch.Tensor:
        raise NotImplementedError

    @property
    def write_count(self) -> int:
        return 0

    def indices_in_order(self) -> torch.Tensor:
        return torch.arange(len(self._storage))

    def empty(self) -> None:
        return None

    def share(self) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None


class RoundRobinWriter(SharedCounters, Writer):
    """Circular writes: item ``k`` (counting from the first write) goes to row ``k % max_size``.

    ``extend`` with more items than the capacity writes only the last ``max_size`` of them (the
    others would be overwritten by the same call) and returns their positions.
    """

    def __init__(self) -> None:
        super().__init__()
        self._init_counters(2)  # [cursor, write_count]

    @property
    def cursor(self) -> int:
        return int(self._counts[0])

    @property
    def write_count(self) -> int:
        return int(self._counts[1])

    def add(self, data: Any) -> int:
        storage = self._storage
        index = int(self._counts[0])
        storage.set(index, data)
        self._counts[0] = (index + 1) % storage.max_size
        self._counts[1] += 1
        return index

    def extend(self, data: Any) -> torch.Tensor:
        storage = self._storage
        n = storage.num_items(data)
        cap = storage.max_size
        skipped = 0
        if n > cap:
            skipped = n - cap
            data, n = _slice_items(data, skipped, skipped + cap), cap
        start = (int(self._counts[0]) + skipped) % cap
        if start + n <= cap:  # no wrap: one contiguous range
            index = torch.arange(start, start + n)
        else:
            index = (torch.arange(n) + start) % cap
        storage.set(index, data)
        self._counts[0] = (start + n) % cap
        self._counts[1] += n + skipped
        return index

    def indices_in_order(self) -> torch.Tensor:
        n = len(self._storage)
        if n < self._storage.max_size or self.write_count <= n:
            return torch.arange(n)
        return (torch.arange(n) + self.cursor) % n

    def empty(self) -> None:
        self._counts[:] = 0

    def share(self) -> None:
        self._share_counters()

    def state_dict(self) -> dict[str, Any]:
        return {"_cursor": self.cursor, "_write_count": self.write_count}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._counts[0] = int(state_dict["_cursor"])
        self._counts[1] = int(state_dict["_write_count"])

    def __repr__(self) -> str:
        return f"RoundRobinWriter(cursor={self.cursor}, write_count={self.write_count})"


class ImmutableDatasetWriter(Writer):
    """The writer of read-only datasets: every write raises, telling how to get a writable copy."""

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise ReadOnlyError("buffer (a read-only dataset: ImmutableDatasetWriter)")

    add = _refuse
    extend = _refuse

    def empty(self) -> None:
        self._refuse()

    def __repr__(self) -> str:
        return "ImmutableDatasetWriter()"
