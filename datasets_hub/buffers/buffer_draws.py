"""How a replay buffer draws batches: one at a time under its lock, or prefetched in ticket order.

:class:`OrderedDraws` is a part of :class:`~datasets_hub.buffers.replay_buffers.ReplayBuffer`. One lock
guards writes and draws. With ``prefetch=N`` a thread pool keeps N batches in flight; draws take
numbered tickets and run in ticket order, so a seeded ``generator`` gives the same batches with or
without prefetching. Batches in flight are dropped (``_drain``) when the contents change under them
(``empty``, ``load_state_dict``, ``loads``); pickling leaves the threads behind and makes new ones.
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch


class OrderedDraws:
    """The drawing part of a replay buffer (a mixin: the buffer holds the state it reads)."""

    _prefetch: int
    _batch_size: int | None
    _compilable: bool

    if TYPE_CHECKING:

        def _sample_now(self, batch_size: int) -> tuple[Any, dict[str, Any], bool]: ...
        def _fwd(self, data: Any) -> Any: ...

    def _init_threading(self) -> None:
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._next_ticket = 0  # next draw number to hand out
        self._turn = 0  # draw number allowed to use the sampler now
        self._queue: collections.deque = collections.deque()
        self._executor: ThreadPoolExecutor | None = None

    def _job(self, batch_size: int, ticket: int) -> tuple[Any, dict[str, Any], bool]:
        with self._cond:
            while self._turn != ticket:
                self._cond.wait()
            try:
                data, info, ran_out = self._sample_now(batch_size)
            finally:
                self._turn += 1
                self._cond.notify_all()
        return self._fwd(data), info, ran_out

    def _ticket(self) -> int:
        with self._lock:
            t = self._next_ticket
            self._next_ticket += 1
            return t

    def _draw(self, batch_size: int) -> tuple[Any, dict[str, Any], bool]:
        if self._compilable and torch.compiler.is_compiling():
            data, info, ran_out = self._sample_now(batch_size)  # no lock: dynamo cannot trace one
            return self._fwd(data), info, ran_out
        if not self._prefetch:
            with self._lock:
                data, info, ran_out = self._sample_now(batch_size)
            return self._fwd(data), info, ran_out
        if batch_size != self._batch_size or not self._queue:
            result = self._job(batch_size, self._ticket())
        else:
            result = self._queue.popleft().result()
        if batch_size == self._batch_size:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._prefetch, thread_name_prefix="datasets_hub_prefetch")
            while len(self._queue) < self._prefetch:
                self._queue.append(self._executor.submit(self._job, batch_size, self._ticket()))
        return result

    def _drain(self) -> None:
        """Wait for in-flight prefetches and drop them (after empty/load, they would be stale)."""
        while self._queue:
            try:
                self._queue.popleft().result()
            except Exception:  # noqa: BLE001 - a failed stale batch is dropped with the others
                pass

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for k in ("_lock", "_cond", "_queue", "_executor", "_next_ticket", "_turn"):
            state.pop(k)
        state.pop("_episodes_cache", None)  # derived (ReplayBuffer.episodes); recomputed on first use
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_threading()

    def __del__(self) -> None:
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=False)
