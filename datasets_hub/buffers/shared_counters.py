"""Counters that sampling and writing touch on every call, and that ``share()`` can move to shared memory.

Storages and writers keep a few ``int64`` counters (length, write version, cursor, write count).
They live in a torch tensor, so ``share()`` can put them in shared memory for
``torch.multiprocessing`` children, and are read and written through a numpy view of it (a
scalar access on a numpy array costs a fraction of one on a tensor). The view must be refreshed
whenever the tensor's memory moves (``share_memory_``) and is rebuilt after unpickling.

``compilable=True`` (TorchRL's keyword on storages, writers and buffers) keeps the counters in a
plain Python list instead: ``torch.compile`` reads them as constants (no graph break), and, as
TorchRL documents, such a storage or writer cannot be shared between processes.
"""

from __future__ import annotations

from typing import Any

import torch


class SharedCounters:
    """Mixin: ``self._counts`` (numpy view) over ``self._counts_t`` (torch tensor), kept coherent."""

    _counts: Any  # a numpy view of ``_counts_t``, or a list of ints when compilable
    _counts_t: torch.Tensor | None

    def _init_counters(self, n: int, plain: bool = False) -> None:
        if plain:  # compilable: Python ints, which torch.compile traces; never shared
            self._counts_t = None
            self._counts = [0] * n
            return
        self._counts_t = torch.zeros(n, dtype=torch.int64)
        self._counts = self._counts_t.numpy()

    def _reset_counters(self) -> None:
        for i in range(len(self._counts)):
            self._counts[i] = 0

    def _share_counters(self) -> None:
        if self._counts_t is None:
            raise RuntimeError(
                f"this {type(self).__name__} was built with compilable=True: its counters are plain Python "
                "ints that torch.compile can trace, so it cannot be shared between processes (as in TorchRL). "
                "Build it with compilable=False to share it"
            )
        self._counts_t.share_memory_()
        self._refresh_counters()  # share_memory_ moved the bytes: the old view points at freed memory

    def _refresh_counters(self) -> None:
        if self._counts_t is not None:
            self._counts = self._counts_t.numpy()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if state.get("_counts_t") is not None:
            state.pop("_counts")  # a view: rebuilt from the pickled tensor
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._refresh_counters()
