"""Writers decide where new items go in a storage (TorchRL's ``Writer`` family).

A writer is attached to one storage by the buffer (``register_storage``). ``add(item) -> int`` and
``extend(batch) -> LongTensor`` write and return the positions written; ``indices_in_order()``
lists the valid positions oldest first (what ``read_all_in_order`` reads).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from datasets_hub.buffers import generations
from datasets_hub.buffers.shared_counters import SharedCounters
from datasets_hub.buffers.state_files import dump_state, load_state
from datasets_hub.buffers.storages import Storage, _slice_items
from datasets_hub.errors import InvalidArgument, ReadOnlyError


class Writer:
    """Base contract: ``add``, ``extend``, ``write_count``, ``empty``, ``state_dict``/``load_state_dict``.

    ``may_drop_items``: True for writers that may decline to write an item (``extend`` then returns
    -1 at its place, as TorchRL's ``TensorDictMaxValueWriter``); the buffer tells the sampler only
    about the positions written.
    """

    may_drop_items = False
    #: True for a writer built with ``track_generations=True`` (see ``generations.py``)
    tracks_generations = False

    def __init__(self) -> None:
        self._storage: Storage | None = None

    def register_storage(self, storage: Storage) -> None:
        self._storage = storage

    def generations_of(self, index: Any) -> torch.Tensor:
        """The generation stamps of the slots of ``index`` (``-1``: never written, out of range, or a writer
        that does not track generations)."""
        slots = generations.slots_of(index, getattr(self._storage, "ndim", 1))
        stamps = generations.of_storage(self._storage) if self.tracks_generations else None
        if stamps is None:
            return torch.full(slots.shape, -1, dtype=torch.int64)
        return stamps.of(slots)

    def _stamp(self, slots: torch.Tensor) -> None:
        """Record writes into ``slots``: every writer moves the stamps of a storage someone tracks."""
        stamps = generations.of_storage(self.storage, create=self.tracks_generations)
        if stamps is not None:
            stamps.bump(slots)

    @property
    def storage(self) -> Storage:
        """The storage this writer writes to; ``RuntimeError`` before ``register_storage``."""
        storage = self._storage
        if storage is None:
            raise RuntimeError(
                f"{type(self).__name__} has no storage yet: a replay buffer registers its storage with its "
                "writer (or call writer.register_storage(storage) before writing)"
            )
        return storage

    def add(self, data: Any) -> int:
        raise NotImplementedError

    def extend(self, data: Any) -> torch.Tensor:
        raise NotImplementedError

    @property
    def write_count(self) -> int:
        return 0

    def indices_in_order(self) -> torch.Tensor:
        return torch.arange(len(self.storage))

    def empty(self) -> None:
        return None

    def keep_write_count(self, count: int) -> None:
        """Set ``write_count`` back to ``count`` (``rb.empty(empty_write_count=False)``); writers that do
        not count writes ignore it."""
        return None

    def share(self) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None

    def dumps(self, path: str | Path) -> None:
        """Write :meth:`state_dict` to ``<path>/writer_state.pt`` (the directory is created)."""
        dump_state(self, "writer", path)

    def loads(self, path: str | Path) -> None:
        """Restore what :meth:`dumps` wrote (refused from another kind of writer)."""
        load_state(self, "writer", path)


class RoundRobinWriter(SharedCounters, Writer):
    """Circular writes: item ``k`` (counting from the first write) goes to row ``k % max_size``.

    ``extend`` with more items than the capacity writes only the last ``max_size`` of them (the
    others would be overwritten by the same call) and returns their positions. On a
    multi-dimensional storage the writer cycles over dim 0 (whole rows of ``n_envs`` items).
    ``compilable=True`` keeps the cursor in plain ints (``torch.compile`` traces them; the writer
    cannot be shared between processes), as in TorchRL. ``track_generations=True`` stamps every slot it writes
    (``generations_of``, ``"index_generation"`` in samples, ``rb.update_if_present``; see ``generations.py``).
    """

    def __init__(self, compilable: bool = False, *, track_generations: bool = False) -> None:
        super().__init__()
        self._compilable = bool(compilable)
        self.tracks_generations = bool(track_generations)
        self._loaded_stamps: list[int] | None = None  # a state loaded before a storage was registered
        self._init_counters(2, plain=self._compilable)  # [cursor, write_count]

    def register_storage(self, storage: Storage) -> None:
        """Attach to ``storage``; where children see its rows (memory-mapped files), they see the cursor too."""
        super().register_storage(storage)
        if getattr(storage, "rows_visible_to_children", False) and not self._compilable:
            self._fork_share_counters()
        if self._loaded_stamps is not None:
            generations.on_storage(storage).load(self._loaded_stamps)
            self._loaded_stamps = None

    @property
    def cursor(self) -> int:
        return int(self._counts[0])

    @property
    def write_count(self) -> int:
        return int(self._counts[1])

    # TorchRL's attribute names, read and set by code written against it (checkpoint tools, tests)
    @property
    def _cursor(self) -> int:
        return self.cursor

    @_cursor.setter
    def _cursor(self, value: int) -> None:
        self._counts[0] = int(value)

    @property
    def _write_count(self) -> int:
        return self.write_count

    @_write_count.setter
    def _write_count(self, value: int) -> None:
        self._counts[1] = int(value)

    def add(self, data: Any) -> int:
        storage = self.storage
        index = int(self._counts[0])
        cap = storage.max_size_along_dim0(data, batched=False)
        storage.set(index, self._prepare(data, index))
        self._counts[0] = (index + 1) % cap
        self._counts[1] += 1
        self._stamp(torch.tensor([index]))
        return index

    def extend(self, data: Any) -> torch.Tensor:
        storage = self.storage
        n = storage.num_items(data)
        cap = storage.max_size_along_dim0(data)
        skipped, first = 0, int(self._counts[0])
        if n > cap:
            skipped = n - cap
            data, n = _slice_items(data, skipped, skipped + cap), cap
        start = (int(self._counts[0]) + skipped) % cap
        if start + n <= cap:  # no wrap: one contiguous range
            index = torch.arange(start, start + n)
        else:
            index = (torch.arange(n) + start) % cap
        storage.set(index, self._prepare(data, index))
        self._counts[0] = (start + n) % cap
        self._counts[1] += n + skipped
        # items skipped because later ones of the same call overwrite them still count as writes of their slot
        self._stamp((torch.arange(n + skipped) + first) % cap if skipped else index)
        return index

    def _prepare(self, data: Any, index: Any) -> Any:
        """Hook: the data as written at ``index`` (``TensorDictRoundRobinWriter`` adds ``"index"``)."""
        return data

    def indices_in_order(self) -> torch.Tensor:
        storage = self.storage
        n = storage.len_along_dim0()
        if n < storage.max_size_along_dim0() or self.write_count <= n:
            return torch.arange(n)
        return (torch.arange(n) + self.cursor) % n

    def empty(self) -> None:
        self._reset_counters()
        stamps = generations.of_storage(self._storage)
        if stamps is not None:  # handles taken before empty() go stale at once
            stamps.invalidate()

    def keep_write_count(self, count: int) -> None:
        self._counts[1] = int(count)

    def share(self) -> None:
        if self.tracks_generations:
            raise InvalidArgument(
                "track_generations=True keeps the slot stamps in this process: it cannot be shared between "
                "processes. Drop track_generations or shared=True"
            )
        self._share_counters()

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"_cursor": self.cursor, "_write_count": self.write_count}
        stamps = generations.of_storage(self._storage) if self.tracks_generations else None
        if stamps is not None:
            state["_generation"] = stamps.state()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._counts[0] = int(state_dict["_cursor"])
        # states saved before write counts existed (TorchRL's older ones): at least the cursor's items were written
        self._counts[1] = int(state_dict.get("_write_count", state_dict["_cursor"]))
        saved = state_dict.get("_generation")  # absent from states saved without tracking
        if saved is not None and self.tracks_generations:
            if self._storage is None:
                self._loaded_stamps = list(saved)
            else:
                generations.on_storage(self._storage).load(saved)

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
