"""TorchRL 0.15's ``as_dataset()``: a replay buffer or a storage as a ``torch.utils.data`` dataset.

Two views, with TorchRL 0.15's names and meanings (docs/guide/interop.md, "rb.as_dataset()"):

- :class:`StorageDataset` (``rb.storage.as_dataset()``, or ``rb.as_dataset(map_style=True)``), map-style.
  *Index:* item ``i`` is storage entry ``i``, the position ``rb.sample()`` reports under ``"index"`` and
  ``rb.storage[i]`` reads (on a multi-dimensional storage the flat, time-major position; on a circular buffer
  that has wrapped the slot, not the write order). Items are read as stored: no transform, no sampler.
  ``len(ds)`` is ``len(storage)`` when asked (a DataLoader asks once per epoch, in the main process).
  *Epoch:* one pass of the DataLoader's own sampler over ``range(len(ds))``: every entry once, shuffled by
  the DataLoader's generator with ``shuffle=True``; ``DistributedSampler`` shards it. ``__getitems__`` reads
  a whole index batch with one storage read, so pass :func:`tensordict_collate` as ``collate_fn``.
- :class:`ReplayBufferDataset` (``rb.as_dataset()``), iterable. *Items:* batches of ``rb.batch_size``
  drawn by the buffer's sampler, transforms applied (``iter(rb)``). *Epoch:* one ``iter()`` yields
  ``num_batches`` batches, or, without it, batches until the sampler runs out: one epoch of a
  ``SamplerWithoutReplacement``, never for a uniform or slice sampler. Use ``DataLoader(ds,
  batch_size=None, collate_fn=tensordict_collate)``.
  In the main process (``num_workers=0``) it iterates the buffer itself: the batches are those the same
  number of ``rb.sample()`` calls would give, and they advance the buffer's sampler and generator.
  In a DataLoader worker it iterates the worker's own fork of the buffer (storage and transforms shared,
  sampler copied, no prefetch threads: the DataLoader prefetches), made on the worker's first iteration and
  kept while the worker's seed is unchanged (``persistent_workers=True`` continues the stream). A buffer
  with a ``generator`` is reseeded from the worker's seed (the DataLoader's base seed + worker id); one
  without draws from torch's global generator, which the DataLoader seeds the same way: a seeded loader
  (``torch.manual_seed`` or ``DataLoader(generator=...)``) gives the same batches again.
  ``num_batches`` is split over the workers (worker ``w`` of ``W`` yields ``len(range(w, num_batches, W))``).
  A sampler with ``requires_shared_state`` (without replacement, prioritized) is refused in a worker:
  each copy would keep its own epoch or priorities.

Workers and writes: making either view puts a writable storage's in-memory leaves and counters in shared
memory (``storage.share()``), so rows written after the workers started are seen by them; memory-mapped
storages and hub builds are read through their files (a build travels to a worker as its path, never its
bytes). Reads are not synchronised with writes. A ``ListStorage`` is a Python list: forked workers read a
copy made when they start, and spawned workers get a copy too.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from datasets_hub.errors import InvalidArgument


def stream_seed(*parts: int) -> int:
    """A 63-bit seed mixing ``parts`` (base seed, rank, worker, epoch...) so that streams differing in
    any part are independent (``SeedSequence`` hashing, not ``base + rank``, which would collide
    with ``base + 1`` of the next rank)."""
    return int(np.random.SeedSequence([int(p) % (1 << 64) for p in parts]).generate_state(1, np.uint64)[0] >> 1)


def worker_fork(buffer: Any, seed: int) -> Any:
    """``buffer``'s copy for one DataLoader worker: storage and transforms shared, sampler state its own,
    no prefetch threads. Where the buffer draws from a generator of its own, the copy's is seeded from
    ``seed``. A buffer made of others (an ensemble) forks itself through its ``fork_seeded(seed)``."""
    fork_seeded = getattr(buffer, "fork_seeded", None)
    if fork_seeded is not None:
        return fork_seeded(seed)
    generator = buffer.sampler.generator
    if generator is not None:
        generator = torch.Generator(device=generator.device).manual_seed(seed)
    return buffer.fork(generator, prefetch=0)


def tensordict_collate(batch: Any) -> Any:
    """DataLoader ``collate_fn`` for these views: a TensorDict batch is returned as it is (no copy, no
    re-stacking); a list of TensorDicts is stacked; anything else goes to torch's ``default_collate``."""
    if isinstance(batch, TensorDictBase):
        return batch
    if isinstance(batch, (list, tuple)) and batch and all(isinstance(b, TensorDictBase) for b in batch):
        return torch.stack(list(batch))
    from torch.utils.data import default_collate

    return default_collate(batch)


def _share_for_workers(storage: Any) -> None:
    """Let DataLoader workers see later writes (TorchRL does the same when a view is made); an ensemble's
    storage shares each member's."""
    for member in getattr(storage, "storages", ()):
        _share_for_workers(member)
    if not getattr(storage, "read_only", False) and hasattr(storage, "share"):
        storage.share()


class StorageDataset(Dataset):
    """Map-style view of a storage: ``ds[i]`` is entry ``i`` as stored (see the module docstring).

    ``ds[i]`` takes an int (negative counts from the end, as for a sequence); ``ds.__getitems__(indices)``
    (what a DataLoader with a batch sampler calls) reads every index in one storage read. An index outside
    ``[-len(ds), len(ds))`` is an ``IndexError``, never a wrapped or clamped read.
    """

    def __init__(self, storage: Any) -> None:
        if not (hasattr(storage, "get") and hasattr(storage, "__len__")):
            raise TypeError(
                f"StorageDataset reads a storage (get(index), len()); got a {type(storage).__name__}. "
                "For a replay buffer use rb.storage.as_dataset() or rb.as_dataset(map_style=True)"
            )
        _share_for_workers(storage)
        self.storage = storage

    def __len__(self) -> int:
        return len(self.storage)

    def _positions(self, indices: Any) -> torch.Tensor:
        index = torch.as_tensor(indices)
        if index.dtype.is_floating_point or index.dtype == torch.bool:
            raise TypeError(f"storage indices must be integers, got a {index.dtype} index")
        index = index.to(torch.int64).reshape(-1)
        n = len(self.storage)
        if index.numel() and (int(index.min()) < -n or int(index.max()) >= n):
            raise IndexError(f"index out of range for a storage of {n} entries")
        return torch.where(index < 0, index + n, index)

    def _read(self, index: torch.Tensor) -> Any:
        if getattr(self.storage, "ndim", 1) > 1:
            return self.storage.get_items(index)
        return self.storage.get(index)

    def __getitem__(self, index: int) -> Any:
        if isinstance(index, bool) or not isinstance(index, int):
            if isinstance(index, torch.Tensor) and index.ndim == 0:
                index = int(index)
            else:
                return self.__getitems__(index)
        return self._read(self._positions([index]))[0]

    def __getitems__(self, indices: Any) -> Any:
        return self._read(self._positions(indices))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(storage={self.storage!r})"


class ReplayBufferDataset(IterableDataset):
    """Iterable view of a replay buffer: its batches, in the main process or in DataLoader workers (see
    the module docstring for seeds, ``num_batches`` and the samplers refused in workers)."""

    def __init__(self, replay_buffer: Any, *, num_batches: int | None = None) -> None:
        if getattr(replay_buffer, "batch_size", None) is None:
            raise InvalidArgument(
                "rb.as_dataset() yields batches of the buffer's batch_size, and this buffer has none: build it "
                "with batch_size=... (or use rb.as_iterable_dataset(batch_size) for another size)"
            )
        if num_batches is not None and (isinstance(num_batches, bool) or not isinstance(num_batches, int)):
            raise InvalidArgument(f"num_batches must be an int >= 0 or None, got {num_batches!r}")
        if num_batches is not None and num_batches < 0:
            raise InvalidArgument(f"num_batches must be an int >= 0 or None, got {num_batches!r}")
        _share_for_workers(replay_buffer.storage)
        self.replay_buffer = replay_buffer
        self.num_batches = num_batches
        self._worker: tuple[int, Any] | None = None  # (worker seed, the worker's fork of the buffer)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_worker"] = None  # each worker makes its own fork
        return state

    def _worker_buffer(self, seed: int) -> Any:
        if self._worker is None or self._worker[0] != seed:
            buffer = self.replay_buffer
            sampler = buffer.sampler
            if getattr(sampler, "requires_shared_state", False):
                raise InvalidArgument(
                    f"{type(sampler).__name__} keeps sampling state (an epoch's remaining rows, priorities) that "
                    "DataLoader workers cannot share: each would run its own. Use num_workers=0, or a sampler "
                    "without that state (RandomSampler, SliceSampler); for exactly-once epochs over several "
                    "workers use the map-style view, rb.as_dataset(map_style=True), with shuffle=True"
                )
            self._worker = (seed, worker_fork(buffer, seed))
        return self._worker[1]

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        num_batches = self.num_batches
        if info is None:
            buffer = self.replay_buffer
        else:
            buffer = self._worker_buffer(info.seed)
            if num_batches is not None:
                num_batches = len(range(info.id, num_batches, info.num_workers))
        return islice(iter(buffer), num_batches)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(replay_buffer={self.replay_buffer!r}, num_batches={self.num_batches})"


__all__ = ["ReplayBufferDataset", "StorageDataset", "stream_seed", "tensordict_collate", "worker_fork"]
