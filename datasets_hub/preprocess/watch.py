"""Liveness and progress of preprocessing worker processes (see :mod:`datasets_hub.preprocess.pipeline`).

A worker that is stopped (SIGSTOP, a debugger, a frozen container), stuck in native code holding
the GIL, or gone without the pool noticing would make the parent wait forever. Each worker runs a
heartbeat thread that reports through a queue every :data:`BEAT` seconds, and says which chunk it
starts; the parent (:class:`WorkerWatch`) fails with a :class:`~datasets_hub.errors.PreprocessError`
naming the worker (PID, state, chunk) when

- a worker has not been heard from for ``heartbeat`` seconds (``DATASETS_HUB_PREPROCESS_HEARTBEAT``,
  default 30), or
- one chunk has run for longer than ``chunk_timeout`` seconds (``DATASETS_HUB_PREPROCESS_TIMEOUT``,
  default 3600: a worker alive but making no progress, e.g. ``fn`` blocked on a lock),

and the pool's owner (``workers._map_processes``) kills every process of the pool on that error, so nothing
is left stopped or hung behind.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from datasets_hub.errors import PreprocessError

BEAT = 0.5
_QUEUE: dict[str, Any] = {}  # in a worker: the queue to the parent


def _seconds(var: str, default: float) -> float:
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise PreprocessError(f"{var}={raw!r} is not a number of seconds; set a number or unset it") from None
    if not value > 0:
        raise PreprocessError(f"{var}={raw!r} must be a positive number of seconds")
    return value


def start_heartbeat(queue: Any) -> None:
    """In a worker (pool initializer): report ``("beat", pid)`` every BEAT seconds from a thread."""
    _QUEUE["queue"] = queue
    pid = os.getpid()

    def beat() -> None:
        while True:
            try:
                queue.put(("beat", pid, None, None))
            except (OSError, ValueError):  # the parent is gone: the parent watch ends this process
                return
            time.sleep(BEAT)

    threading.Thread(target=beat, daemon=True, name="datasets_hub-heartbeat").start()


def report_chunk(start: int, stop: int) -> None:
    """In a worker: say which rows it starts (no-op outside a watched pool)."""
    queue = _QUEUE.get("queue")
    if queue is not None:
        queue.put(("chunk", os.getpid(), start, stop))


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return "gone"
    code = stat.rsplit(")", 1)[1].split()[0]
    return {
        "T": "stopped (SIGSTOP?)",
        "t": "stopped by a debugger",
        "Z": "a zombie (it died)",
        "D": "in uninterruptible IO",
    }.get(code, f"running (state {code})")


class WorkerWatch:
    """Parent side: collect heartbeats, and raise when a worker stopped beating or a chunk overruns."""

    def __init__(
        self, ctx: Any, fn_name: str, *, heartbeat: float | None = None, chunk_timeout: float | None = None
    ) -> None:
        # SimpleQueue: put() writes to the pipe at once (a Queue's feeder thread would be frozen by a
        # SIGSTOP with the worker's last message still unsent)
        self.queue = ctx.SimpleQueue()
        self.fn_name = fn_name
        self.heartbeat = heartbeat or _seconds("DATASETS_HUB_PREPROCESS_HEARTBEAT", 30.0)
        self.chunk_timeout = chunk_timeout or _seconds("DATASETS_HUB_PREPROCESS_TIMEOUT", 3600.0)
        self.seen: dict[int, float] = {}
        self.running: dict[int, tuple[int, int, float]] = {}

    def _drain(self) -> None:
        now = time.monotonic()
        while True:
            try:
                if self.queue.empty():
                    return
                kind, pid, start, stop = self.queue.get()
            except (OSError, ValueError, EOFError):
                return
            self.seen[pid] = now
            if kind == "chunk":
                self.running[pid] = (start, stop, now)

    def check(self) -> None:
        """Raise :class:`PreprocessError` when a worker is stopped or stuck; the caller kills the pool's
        processes on that error (all of them: those not heard from yet too)."""
        self._drain()
        now = time.monotonic()
        # a stopped worker first: the others may only be waiting on it (the queue's write lock)
        order = sorted(self.seen.items(), key=lambda item: not _state(item[0]).startswith("stopped"))
        for pid, last in order:
            chunk = self.running.get(pid)
            where = f" on transitions [{chunk[0]}, {chunk[1]})" if chunk else ""
            if now - last > self.heartbeat:
                self._fail(
                    f"preprocess worker PID {pid} running {self.fn_name}{where} has not been heard from for "
                    f"{now - last:.0f} s: it is {_state(pid)}. The workers were stopped and nothing was published. "
                    "Resume or restart whatever stopped it and run again (DATASETS_HUB_PREPROCESS_HEARTBEAT "
                    f"sets this limit, now {self.heartbeat:g} s)"
                )
            if chunk and now - chunk[2] > self.chunk_timeout:
                self._fail(
                    f"preprocess worker PID {pid} has run {self.fn_name}{where} for {now - chunk[2]:.0f} s without "
                    f"finishing it (limit {self.chunk_timeout:g} s, DATASETS_HUB_PREPROCESS_TIMEOUT): fn is hung "
                    "(a deadlock, a blocking read?) or far slower than expected. The workers were stopped and "
                    "nothing was published; fix fn, lower chunk_size, or raise the limit"
                )

    def chunk_done(self, start: int) -> None:
        for pid, chunk in list(self.running.items()):
            if chunk[0] == start:
                del self.running[pid]

    def _fail(self, message: str) -> None:
        raise PreprocessError(message)  # the pool's owner kills every worker on the way out (_map_processes)

    def close(self) -> None:
        self.queue.close()
