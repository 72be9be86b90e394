"""Counters that sampling and writing touch on every call, and that other processes can see.

Storages and writers keep a few ``int64`` counters (length, write version, cursor, write count).
They live in a torch tensor, read and written through a numpy view of it (a scalar access on a
numpy array costs a fraction of one on a tensor). Where the counters live decides who sees them:

- private memory (the default): this process only;
- fork-visible memory (``_fork_share_counters``, an anonymous shared mapping): also every child
  forked afterwards, both ways. Parts whose rows are themselves visible to forked children (a
  ``LazyMemmapStorage``'s files, and the writer of such a storage) keep their counters there from
  the start, so a child's ``extend`` moves the parent's length and cursor as in TorchRL, whose
  counters are ``multiprocessing.Value`` objects;
- torch shared memory (``share()``, or being sent to a process being spawned): also every process
  the part is sent to through ``torch.multiprocessing``.

Pickled outside ``torch.multiprocessing`` (``copy.deepcopy``, ``pickle``, ``torch.save``), a part
carries the values of its counters, never a link to them: the copy counts on its own.

``compilable=True`` (TorchRL's keyword on storages, writers and buffers) keeps the counters in a
plain Python list instead: ``torch.compile`` reads them as constants (no graph break), and, as
TorchRL documents, such a storage or writer cannot be shared between processes.
"""

from __future__ import annotations

import mmap
from multiprocessing.context import get_spawning_popen
from typing import Any

import numpy as np
import torch


def being_spawned() -> bool:
    """True while ``multiprocessing`` pickles the arguments of a process it is starting (spawn, forkserver)."""
    return get_spawning_popen() is not None


class SharedCounters:
    """Mixin: ``self._counts`` (numpy view) over ``self._counts_t`` (torch tensor), kept coherent."""

    _counts: Any  # a numpy view of ``_counts_t``, or a list of ints when compilable
    _counts_t: torch.Tensor | None
    _counts_map: mmap.mmap | None = None  # the fork-visible mapping holding the counters, if any

    def _init_counters(self, n: int, plain: bool = False, fork_visible: bool = False) -> None:
        self._counts_map = None
        if plain:  # compilable: Python ints, which torch.compile traces; never shared
            self._counts_t = None
            self._counts = [0] * n
            return
        self._counts_t = torch.zeros(n, dtype=torch.int64)
        self._counts = self._counts_t.numpy()
        if fork_visible:
            self._fork_share_counters()

    def _reset_counters(self) -> None:
        for i in range(len(self._counts)):
            self._counts[i] = 0

    @property
    def counters_shared(self) -> bool:
        """True when other processes (forked children, or processes it was sent to) see these counters."""
        return self._counts_map is not None or (self._counts_t is not None and self._counts_t.is_shared())

    def _fork_share_counters(self) -> None:
        """Move the counters (values kept) into an anonymous shared mapping that forked children inherit."""
        if self._counts_t is None or self.counters_shared:
            return
        values = [int(v) for v in self._counts]
        mapping = mmap.mmap(-1, 8 * len(values))  # MAP_SHARED | MAP_ANONYMOUS: a fork keeps it shared
        view = np.frombuffer(mapping, dtype=np.int64)
        view[:] = values
        self._counts_map = mapping
        self._counts = view
        self._counts_t = torch.from_numpy(view)

    def _share_counters(self) -> None:
        """Put the counters in torch shared memory (values kept): processes the part is sent to through
        ``torch.multiprocessing`` see them."""
        if self._counts_t is None:
            raise RuntimeError(
                f"this {type(self).__name__} was built with compilable=True: its counters are plain Python "
                "ints that torch.compile can trace, so it cannot be shared between processes (as in TorchRL). "
                "Build it with compilable=False to share it"
            )
        if self._counts_t.is_shared():
            return
        shared = torch.tensor([int(v) for v in self._counts], dtype=torch.int64).share_memory_()
        # a fork-visible mapping stays mapped in children forked before: they keep seeing it, not this
        self._counts_map = None
        self._counts_t = shared
        self._refresh_counters()

    def _refresh_counters(self) -> None:
        if self._counts_t is not None:
            self._counts = self._counts_t.numpy()

    def __getstate__(self) -> dict[str, Any]:
        if being_spawned() and self._counts_t is not None:
            self._share_counters()  # the child must count with us (TorchRL sends its counters shared)
        state = self.__dict__.copy()
        state.pop("_counts_map", None)
        counts_t = state.get("_counts_t")
        if counts_t is not None:
            state.pop("_counts")  # a view: rebuilt from the pickled tensor
            if not counts_t.is_shared():  # a copy counts on its own: carry the values, not the memory
                state["_counts_t"] = torch.tensor([int(v) for v in self._counts], dtype=torch.int64)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._counts_map = None
        self._refresh_counters()
