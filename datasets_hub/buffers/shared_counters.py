"""Counters that sampling and writing touch on every call, and that ``share()`` can move to shared memory.

Storages and writers keep a few ``int64`` counters (length, write version, cursor, write count).
They live in a torch tensor, so ``share()`` can put them in shared memory for
``torch.multiprocessing`` children, and are read and written through a numpy view of it (a
scalar access on a numpy array costs a fraction of one on a tensor). The view must be refreshed
whenever the tensor's memory moves (``share_memory_``) and is rebuilt after unpickling.
"""

from __future__ import annotations

from typing import Any

import torch


class SharedCounters:
    """Mixin: ``self._counts`` (numpy view) over ``self._counts_t`` (torch tensor), kept coherent."""

    def _init_counters(self, n: int) -> None:
        self._counts_t = torch.zeros(n, dtype=torch.int64)
        self._counts = self._counts_t.numpy()

    def _share_counters(self) -> None:
        self._counts_t.share_memory_()
        self._refresh_counters()  # share_memory_ moved the bytes: the old view points at freed memory

    def _refresh_counters(self) -> None:
        self._counts = self._counts_t.numpy()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_counts")  # a view: rebuilt from the pickled tensor
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._refresh_counters()
