"""Locks for module-level state that a forked child gets back unlocked.

A ``threading.Lock`` held by some thread at the moment another thread calls ``fork()`` (a DataLoader
starting its workers while a sampling thread is inside a take, say) stays held forever in the child,
where that thread does not exist: the child's first ``with lock:`` then never returns and the parent
waits on a worker that never answers. :class:`ProcessLock` is a lock whose child copy is a fresh,
unlocked one (``os.register_at_fork``), with optional hooks that reset the state it guards.

Only the standard library: anything may import this module.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import TracebackType


class ProcessLock:
    """A mutex for state kept at module level, safe across ``fork()``.

    Contract: in a child forked at any moment, the lock is unlocked and ``reset_in_child`` (when given) has
    run before the child's own code, with the lock free. The state it guards belongs to the parent's threads,
    so the hook should put it back to what a new process starts with. Each instance registers a fork hook
    that lives as long as the process: make them at module level only, never per object.
    """

    def __init__(self, reset_in_child: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._reset_in_child = reset_in_child
        if hasattr(os, "register_at_fork"):  # POSIX; elsewhere there is no fork to survive
            os.register_at_fork(after_in_child=self._renew)

    def _renew(self) -> None:
        self._lock = threading.Lock()
        if self._reset_in_child is not None:
            self._reset_in_child()

    def __enter__(self) -> ProcessLock:
        self._lock.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lock.release()

    def locked(self) -> bool:
        """Whether some thread of this process holds the lock now."""
        return self._lock.locked()
