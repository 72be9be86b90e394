"""Storages hold items; samplers choose indices and storages gather them (DESIGN.md §6).

This file starts with the ``Storage`` contract shared by the in-memory storages, the memmap
storage and the read-only :class:`~datasets_hub.dataset_storage.DatasetStorage`.
"""
from __future__ import annotations

from typing import Any

import torch

from .episode_index import EpisodeIndex


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
    """

    max_size: int
    read_only: bool = False

    def __init__(self, max_size: int) -> None:
        self.max_size = int(max_size)
        self.write_version = 0

    def __len__(self) -> int:
        raise NotImplementedError

    def get(self, index: Any) -> Any:
        raise NotImplementedError

    def set(self, cursor: Any, data: Any) -> None:
        raise NotImplementedError

    def __getitem__(self, index: Any) -> Any:
        return self.get(index)

    def __setitem__(self, index: Any, data: Any) -> None:
        self.set(index, data)

    def episode_index(self) -> EpisodeIndex | None:
        return None

    def read_key(self, key: str | tuple[str, ...]) -> torch.Tensor:
        raise KeyError(key)

    def empty(self) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        raise NotImplementedError

    def _bump_version(self) -> None:
        self.write_version += 1
