"""Batches sampled by worker threads in the training process: no batch crosses a process boundary.

A DataLoader worker is a process: whatever it samples reaches the training process pickled through
shared memory, one segment per tensor, copied on the way. For a hub build a batch is a gather from
memory-mapped files, so that trip costs more than the sample itself (an ALOHA-shaped batch of 32
windows of 8 frames from 4 cameras is about 1 GB). :class:`ThreadedBatches` runs ``num_workers``
sampling loops in threads of the training process instead. The gathers (NumPy ``take`` on the
memmaps) release the GIL, so the threads copy frames in parallel, and each batch is handed over as
it is: no pickling, no second copy.

Seeds and order follow :class:`~datasets_hub.interop.torch_data.SampledBatches` with DataLoader
workers: worker ``w`` samples with its own private copy of the buffer (own sampler state and
generator, seeded from the base seed, ``w``, the rank and the epoch), ``num_batches`` is split over
the workers the same way, and batches come out round-robin over the workers (worker 0's first batch,
worker 1's first, ...), so the same seed gives the same batches in the same order.
"""

from __future__ import annotations

import queue
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import torch

_DONE = object()


def _accelerator() -> bool:
    acc = getattr(torch, "accelerator", None)
    return bool(acc.is_available()) if acc is not None else torch.cuda.is_available()


class ThreadedBatches:
    """Iterate ``batches`` (a :class:`~datasets_hub.interop.torch_data.SampledBatches`) with
    ``num_workers`` sampling threads, each keeping up to ``prefetch_factor`` batches ready.
    ``pin_memory=True`` pins each batch (in the worker thread) before it is handed over; ``generator``
    draws the base seed when ``batches`` has no ``seed=`` (a DataLoader's ``generator`` does the same)."""

    def __init__(
        self,
        batches: Any,
        num_workers: int,
        *,
        prefetch_factor: int = 2,
        pin_memory: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be a positive int (threads), got {num_workers!r}")
        if isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, int) or prefetch_factor < 1:
            raise ValueError(f"prefetch_factor must be a positive int, got {prefetch_factor!r}")
        self.batches = batches
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = bool(pin_memory)
        if self.pin_memory and not _accelerator():
            # as a DataLoader does: pinning needs an accelerator; without one it warns and does not pin
            warnings.warn("pin_memory=True but no accelerator is found: batches are not pinned", stacklevel=2)
            self.pin_memory = False
        self.generator = generator

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Any]:
        base = self.batches.base_seed(self.generator)
        stop = threading.Event()
        queues: list[queue.Queue] = [queue.Queue(self.prefetch_factor) for _ in range(self.num_workers)]
        threads = [
            threading.Thread(
                target=self._work,
                args=(base, w, queues[w], stop),
                name=f"datasets_hub_sampler_{w}",
                daemon=True,
            )
            for w in range(self.num_workers)
        ]
        for thread in threads:
            thread.start()
        live = list(range(self.num_workers))
        try:
            while live:
                for w in list(live):
                    item = queues[w].get()
                    if item is _DONE:
                        live.remove(w)
                        continue
                    if isinstance(item, BaseException):
                        raise item
                    yield item
        finally:
            stop.set()
            for q in queues:  # unblock workers waiting on a full queue
                while not q.empty():
                    q.get_nowait()
            for thread in threads:
                thread.join(timeout=10)

    def _work(self, base: int, worker: int, out: queue.Queue, stop: threading.Event) -> None:
        def put(item: Any) -> bool:
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        try:
            torch.set_num_threads(1)  # one core per sampling thread, as in a DataLoader worker
            for batch in self.batches.stream(base, worker, self.num_workers):
                if not put(batch.pin_memory() if self.pin_memory else batch):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consuming thread, which re-raises it
            put(exc)
            return
        put(_DONE)
