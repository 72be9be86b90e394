"""PyTorch ``DataLoader`` datasets over replay buffers and dataset builds, and DDP sharding.

This module holds one concept: a replay buffer seen as a PyTorch dataset.

Two ways to feed a training loop from a buffer (or a build directory):

- :class:`BufferDataset`, map-style: ``ds[i]`` is transition ``i`` as a TED TensorDict; with a
  batch sampler (``DataLoader(ds, batch_size=B)``) the loader calls ``__getitems__`` and the whole
  batch is one gather. Shard it across DDP ranks with ``torch.utils.data.DistributedSampler``
  (transitions dealt to ranks) or :class:`EpisodeShardSampler` (whole episodes dealt to ranks).
- :class:`SampledBatches`, iterable: yields batches drawn by the buffer's own sampler (uniform,
  slices, prioritized...). Every (rank, DataLoader worker) pair samples with its own generator,
  seeded from the DataLoader's base seed (or ``seed=``), the worker id and the rank: workers and
  ranks draw different batches, and the same seeds give the same batches again.

Both pass TensorDicts through :func:`tensordict_collate` unchanged, so ``pin_memory=True`` pins
them with ``TensorDict.pin_memory``. Use ``DataLoader(ds, batch_size=None)`` for
:class:`SampledBatches` (it yields whole batches) — ``ds.dataloader(...)`` sets that up.

Workers and builds: a dataset pickled to a worker (``spawn``/``forkserver``, or a Ray task) holds
a build only by reference (its path and fingerprint, see :func:`dumps_by_reference`); each
process opens the read-only memmaps itself on first use. Pickling never copies the data.
"""

from __future__ import annotations

import copy
import heapq
import io
import os
import pickle
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torch.utils.data import Dataset as _MapStyle
from torch.utils.data import IterableDataset, get_worker_info
from torch.utils.data import Sampler as _TorchSampler

from datasets_hub.buffers.ensemble import ReplayBufferEnsemble
from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.pytorch_datasets import stream_seed, tensordict_collate
from datasets_hub.buffers.storages import Storage
from datasets_hub.build.storage import DatasetStorage, reopen_build
from datasets_hub.errors import InvalidParameter

# ----------------------------------------------------------------------------------------------
# Pickling by reference: a build travels as (path, fingerprint), never as its bytes
# ----------------------------------------------------------------------------------------------

_TAG = "datasets_hub.build.pipeline"
_OPEN: weakref.WeakValueDictionary[tuple[str, Any], DatasetStorage] = weakref.WeakValueDictionary()


def open_build(path: str | Path, fingerprint: str | None = None) -> DatasetStorage:
    """The :class:`DatasetStorage` of the build at ``path``, opened once per process.

    ``fingerprint`` (when given) must match the build's manifest: a build that was rebuilt or
    replaced since the reference was taken is an error, never silently different data.
    """
    key = (str(Path(path)), fingerprint)
    storage = _OPEN.get(key)
    if storage is None:
        storage = _OPEN[key] = reopen_build(str(path), fingerprint)
    return storage


def _pickler_class() -> type[pickle.Pickler]:
    try:  # cloudpickle (shipped with Ray) also pickles lambdas used as transforms
        import cloudpickle

        return cloudpickle.CloudPickler
    except ImportError:
        return pickle.Pickler


def dumps_by_reference(obj: Any) -> bytes:
    """Pickle ``obj`` with every :class:`DatasetStorage` inside it replaced by a reference.

    The reference is (path, fingerprint): a buffer over a 10 GB build pickles to a few KB, and
    :func:`loads_by_reference` reopens the memmaps in the receiving process (the build must be on
    a filesystem that process sees). Everything else (sampler state, transforms, in-memory
    storages) is pickled as usual.
    """
    base = _pickler_class()

    class _ByReference(base):  # type: ignore[misc, valid-type]  # base is chosen at run time (cloudpickle or pickle)
        def persistent_id(self, item: Any) -> Any:
            # exactly a DatasetStorage: a subclass (a partially resident remote copy) has state of its
            # own and pickles itself by reference (its __reduce__); a plain reopen would serve its holes
            if type(item) is DatasetStorage:
                return (_TAG, str(item.path), item.manifest.get("fingerprint"))
            return None

    buffer = io.BytesIO()
    _ByReference(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


def loads_by_reference(blob: bytes) -> Any:
    """Inverse of :func:`dumps_by_reference` (builds reopened with :func:`open_build`)."""

    class _Reopen(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> Any:
            if not (isinstance(pid, tuple) and len(pid) == 3 and pid[0] == _TAG):
                raise pickle.UnpicklingError(f"unknown persistent reference {pid!r}")
            return open_build(pid[1], pid[2])

    return _Reopen(io.BytesIO(blob)).load()


class _LazyBuffer:
    """Holds a replay buffer; pickles it by reference and unpickles it on first use (per process)."""

    def __init__(self, buffer: Any) -> None:
        self._buffer = buffer
        self._blob: bytes | None = None

    def get(self) -> Any:
        if self._buffer is None:
            if self._blob is None:
                raise RuntimeError("_LazyBuffer holds neither a buffer nor its pickled form")
            self._buffer = loads_by_reference(self._blob)
            self._blob = None
        return self._buffer

    def __getstate__(self) -> dict[str, Any]:
        blob = self._blob if self._buffer is None else dumps_by_reference(self._buffer)
        return {"_buffer": None, "_blob": blob}


def as_buffer(source: Any) -> Any:
    """A replay buffer for ``source``: a buffer as is, a :class:`Storage` or a build directory wrapped
    in a read-only ``TensorDictReplayBuffer``."""
    from datasets_hub.buffers.replay_buffers import ReplayBuffer, TensorDictReplayBuffer

    if isinstance(source, ReplayBuffer) or hasattr(source, "sample"):
        return source  # a buffer, an ensemble, or another object with the buffer API
    if isinstance(source, (str, os.PathLike)):
        source = open_build(os.fspath(source))
    if isinstance(source, Storage):
        return TensorDictReplayBuffer(storage=source)
    raise TypeError(
        f"expected a replay buffer, a storage or the path of a dataset build, got {type(source).__name__}; "
        "e.g. BufferDataset(datasets_hub.load('d4rl/hopper-medium-v2'))"
    )


# ----------------------------------------------------------------------------------------------
# Ranks, seeds (tensordict_collate lives with the buffer layer's views: pytorch_datasets)
# ----------------------------------------------------------------------------------------------


def resolve_rank(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """``(rank, world_size)``: the explicit arguments, else the initialised ``torch.distributed``
    process group, else torchrun's ``RANK``/``WORLD_SIZE`` variables, else ``(0, 1)``."""
    if rank is None or world_size is None:
        found: tuple[int, int] | None = None
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            found = dist.get_rank(), dist.get_world_size()
        elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            found = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if found is None:
            found = (0, 1)
        rank = found[0] if rank is None else rank
        world_size = found[1] if world_size is None else world_size
    if not isinstance(world_size, int) or world_size < 1:
        raise InvalidParameter(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, int) or not 0 <= rank < world_size:
        raise InvalidParameter(f"rank must be an int in [0, {world_size}), got {rank!r}")
    return rank, world_size


def loader_base_seed(generator: torch.Generator | None) -> int:
    """The base seed a ``DataLoader(generator=generator)`` draws when an iteration starts its workers
    (one ``random_`` over int64, torch's own draw): worker ``w`` then gets ``base + w``. Thread workers
    draw it the same way, so one generator gives the same batches with threads and with processes."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


# ----------------------------------------------------------------------------------------------
# Map-style
# ----------------------------------------------------------------------------------------------


class BufferDataset(_MapStyle):
    """Map-style dataset over a buffer's valid items (or a build directory).

    ``view="sample"`` (default): ``ds[i]`` is what ``buffer.sample()`` gives for a draw landing on row
    ``i`` (``ReplayBuffer.sample_at``): the same keys and per-row shapes, so with a window sampler the
    window at anchor ``i`` with its ``<key>_is_pad`` flags (LeRobot's ``dataset[i]``), with a goal sampler
    the goals of anchor ``i``, with an n-step sampler its return. Samplers with no item at a given row
    (slices, ``FullStackSampler``, ``WindowSampler(pad=False)``, priorities) are refused by name when the
    dataset is made. What the sampler draws beyond the anchor (goals, a random ``n``) comes from a
    generator of each DataLoader worker, seeded from the loader's base seed and the worker id (or from
    ``seed=`` and the worker id), in the main process from the buffer's own generator.
    ``view="rows"``: ``ds[i]`` is the stored row ``buffer[i]``, whatever the sampler.

    Every item carries an ``"index"`` entry (``with_index``); ``ds.__getitems__(indices)`` gathers a whole
    batch in one read per stored leaf, which ``DataLoader(ds, batch_size=B, collate_fn=tensordict_collate)``
    uses (see :meth:`dataloader`). ``len(ds)`` is fixed when the dataset is made, so an online buffer that
    keeps growing is seen as of that moment. Pickled to a worker, a build travels by reference (no copy).
    """

    def __init__(self, source: Any, *, with_index: bool = True, view: str = "sample", seed: int | None = None) -> None:
        buffer = as_buffer(source)
        from datasets_hub.buffers.ensemble import ReplayBufferEnsemble

        if isinstance(buffer, ReplayBufferEnsemble) or not hasattr(buffer, "storage"):
            raise TypeError(
                f"BufferDataset indexes one buffer's items; a {type(buffer).__name__} has none of its own. "
                "Use SampledBatches(ensemble, batch_size) to iterate over its sampled batches"
            )
        if view not in ("sample", "rows"):
            raise InvalidParameter(
                f"view must be 'sample' (ds[i] = the sample at anchor i) or 'rows' (the stored row), got {view!r}"
            )
        if view == "sample" and not hasattr(buffer, "sample_at"):
            raise InvalidParameter(
                f"a {type(buffer).__name__} has no sample_at(): view='sample' needs a datasets_hub replay buffer; "
                "pass view='rows' for its stored rows"
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InvalidParameter(f"seed must be an int or None, got {seed!r}")
        self._ref = _LazyBuffer(buffer)
        self._len = len(self._ref.get())
        self.with_index = with_index
        self.view, self.seed = view, seed
        self._draws: tuple[tuple[int, int | None], torch.Generator] | None = None
        if view == "sample" and self._len:
            # refuse a sampler with no item at a given row now, not in the middle of an epoch (a generator
            # of its own: the probe leaves the buffer's stream as it was)
            buffer.sample_at(torch.zeros(1, dtype=torch.int64), generator=torch.Generator().manual_seed(0))

    @property
    def buffer(self) -> Any:
        """The underlying buffer (reopened by reference in each worker process)."""
        return self._ref.get()

    def __len__(self) -> int:
        return self._len

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_draws"] = None  # each process seeds its own
        return state

    def _generator(self) -> torch.Generator | None:
        """The generator of this process's draws beyond the anchors (``None``: the buffer's own)."""
        info = get_worker_info()
        if info is None and self.seed is None:
            return None
        key = (os.getpid(), info.id if info is not None else None)
        if self._draws is None or self._draws[0] != key:
            worker = info.id if info is not None else 0
            if self.seed is not None:
                seed = stream_seed(self.seed, worker)
            else:  # no seed= here means a worker process (the early return above): its seed is the loader's
                seed = stream_seed(info.seed if info is not None else 0)
            self._draws = (key, torch.Generator().manual_seed(seed))
        return self._draws[1]

    def _check(self, index: torch.Tensor) -> torch.Tensor:
        if index.numel() and (int(index.min()) < -self._len or int(index.max()) >= self._len):
            raise IndexError(f"index out of range for a dataset of {self._len} items")
        return torch.where(index < 0, index + self._len, index)

    def _read(self, index: torch.Tensor) -> Any:
        if self.view == "rows":
            batch = self.buffer[index]
            if self.with_index and isinstance(batch, TensorDictBase):
                batch.set("index", index)
            return batch
        batch = self.buffer.sample_at(index, generator=self._generator())
        if isinstance(batch, TensorDictBase):
            if self.with_index:
                batch.set("index", index)
            elif "index" in batch.keys():
                batch = batch.exclude("index")
        return batch

    def __getitem__(self, index: int) -> Any:
        if isinstance(index, (list, tuple, torch.Tensor, np.ndarray)):
            return self.__getitems__(index)
        return self._read(self._check(torch.tensor([int(index)])))[0]

    def __getitems__(self, indices: Any) -> Any:
        return self._read(self._check(torch.as_tensor(indices, dtype=torch.int64).reshape(-1)))

    def dataloader(self, batch_size: int = 1, **kwargs: Any) -> torch.utils.data.DataLoader:
        """``DataLoader(self, batch_size, collate_fn=tensordict_collate, **kwargs)``."""
        kwargs.setdefault("collate_fn", tensordict_collate)
        return torch.utils.data.DataLoader(self, batch_size=batch_size, **kwargs)


class EpisodeShardSampler(_TorchSampler):
    """A ``DistributedSampler`` that deals whole episodes to ranks (disjoint sets covering all).

    Every epoch the episodes are permuted with ``(seed, epoch)`` (the same on every rank), then
    dealt in that order, each to the rank holding the fewest transitions so far, so rank sizes
    differ by at most one episode's length. This rank yields the transition rows of its
    episodes (shuffled when ``shuffle``). DDP needs every rank to run the same number of steps:
    ``len`` is the largest rank's size and smaller ranks repeat rows of their own episodes
    (``drop_last=False``), or the smallest rank's size with the others truncated
    (``drop_last=True``). Call :meth:`set_epoch` every epoch, as with ``DistributedSampler``.
    ``rank``/``world_size`` default as in :func:`resolve_rank`.
    """

    def __init__(
        self,
        source: Any,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self.episodes = _episode_index_of(source)
        if self.episodes.num_episodes < self.world_size:
            raise InvalidParameter(
                f"{self.episodes.num_episodes} episodes cannot be dealt to {self.world_size} ranks without "
                "leaving a rank empty; use DistributedSampler (transitions) or fewer ranks"
            )
        self.shuffle, self.seed, self.drop_last = bool(shuffle), int(seed), bool(drop_last)
        self.epoch = 0
        self._cache: tuple[int, list[torch.Tensor]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def assignment(self) -> list[torch.Tensor]:
        """Episode ordinals (rows of the episode index) of every rank for the current epoch."""
        cached = self._cache
        if cached is not None and cached[0] == self.epoch:
            return cached[1]
        n = self.episodes.num_episodes
        if self.shuffle:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(stream_seed(self.seed, self.epoch)))
        else:
            order = torch.arange(n)
        heap = [(0, r) for r in range(self.world_size)]  # (transitions so far, rank): least loaded first
        owned: list[list[int]] = [[] for _ in range(self.world_size)]
        lengths = self.episodes.length.tolist()
        for e in order.tolist():
            load, r = heapq.heappop(heap)
            owned[r].append(e)
            heapq.heappush(heap, (load + lengths[e], r))
        result = [torch.tensor(sorted(o), dtype=torch.int64) for o in owned]
        self._cache = (self.epoch, result)
        return result

    def rows(self, rank: int | None = None) -> torch.Tensor:
        """All transition rows of ``rank``'s episodes this epoch (before shuffling and padding)."""
        mine = self.assignment()[self.rank if rank is None else rank]
        starts, lengths = self.episodes.start[mine], self.episodes.length[mine]
        offsets = torch.repeat_interleave(starts - (torch.cumsum(lengths, 0) - lengths), lengths)
        return torch.arange(int(lengths.sum())) + offsets

    def _sizes(self) -> list[int]:
        return [int(self.episodes.length[a].sum()) for a in self.assignment()]

    def __len__(self) -> int:
        sizes = self._sizes()
        return min(sizes) if self.drop_last else max(sizes)

    def __iter__(self) -> Iterator[int]:
        rows = self.rows()
        if self.shuffle:
            gen = torch.Generator().manual_seed(stream_seed(self.seed, self.epoch, self.rank))
            rows = rows[torch.randperm(rows.numel(), generator=gen)]
        target = len(self)
        if rows.numel() < target:  # repeat our own rows: every rank must run the same number of steps
            rows = rows.repeat(-(-target // rows.numel()))
        return iter(rows[:target].tolist())


def _episode_index_of(source: Any) -> EpisodeIndex:
    if isinstance(source, EpisodeIndex):
        return source
    if isinstance(source, BufferDataset):
        source = source.buffer
    buffer = as_buffer(source)
    storage = buffer.storage
    index = storage.episode_index()
    if index is None:
        try:
            index = EpisodeIndex.from_episode_ids(storage.read_key("episode")[: len(storage)])
        except KeyError:
            index = EpisodeIndex.from_done(storage.read_key(("next", "done"))[: len(storage)])
    return index


# ----------------------------------------------------------------------------------------------
# Iterable over sampled batches
# ----------------------------------------------------------------------------------------------


class SampledBatches(IterableDataset):
    """Iterable dataset yielding ``buffer.sample(batch_size)`` batches (TensorDicts with ``"index"``).

    - Seeds (per-rank, per-worker generators): each iteration samples with a private copy of the
      buffer's sampler driven by ``torch.Generator().manual_seed(stream_seed(base, rank, epoch))``.
      ``base`` is the DataLoader worker's seed (the loader's base seed + worker id: fresh every
      epoch, reproducible with ``DataLoader(generator=...)``/``torch.manual_seed``), or, in the
      main process, a draw from torch's global generator. With ``seed=`` the base is
      ``stream_seed(seed, worker id)`` instead and :meth:`set_epoch` changes the stream.
      Sampling is i.i.d. per stream (docs/guide/interop.md: DDP shards with per-rank generators), so
      streams never repeat each other's batches, but an index may appear in two streams' batches.
    - ``num_batches``: batches per iteration on this rank, split over the workers (the first
      ``num_batches % num_workers`` workers yield one more). ``None``: until the sampler runs out
      (never, for a uniform or slice sampler). An epoch-style sampler (``SamplerWithoutReplacement``)
      runs its epochs in every worker: for exactly-once epochs use :class:`BufferDataset` with a
      ``DistributedSampler`` or :class:`EpisodeShardSampler` instead.
    - Priority updates made through the parent's buffer after the workers started are not seen by
      them (each worker has its own sampler copy); use the Ray buffer for shared priorities.
    """

    def __init__(
        self,
        source: Any,
        batch_size: int | None = None,
        *,
        num_batches: int | None = None,
        seed: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        buffer = as_buffer(source)
        batch_size = batch_size if batch_size is not None else getattr(buffer, "batch_size", None)
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InvalidParameter(
                f"SampledBatches needs a positive batch_size (got {batch_size!r}): pass batch_size=... "
                "or build the buffer with batch_size=..."
            )
        if num_batches is not None and (not isinstance(num_batches, int) or num_batches < 0):
            raise InvalidParameter(f"num_batches must be an int >= 0 or None, got {num_batches!r}")
        self._ref = _LazyBuffer(buffer)
        self.batch_size = batch_size
        self.num_batches = num_batches
        self.seed = seed
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self.epoch = 0
        if type(getattr(buffer, "sampler", None)).__name__ == "SamplerWithoutReplacement":
            warnings.warn(
                "SampledBatches over a SamplerWithoutReplacement runs a full epoch in every worker and rank "
                "(rows repeat across them); for exactly-once epochs use BufferDataset with DistributedSampler",
                stacklevel=2,
            )

    @property
    def buffer(self) -> Any:
        return self._ref.get()

    def set_epoch(self, epoch: int) -> None:
        """Mixed into the stream seed (matters with a fixed ``seed=``; workers see it if set before
        ``iter(loader)`` starts them)."""
        self.epoch = int(epoch)

    def _stream(self) -> tuple[int, int, int]:
        """(seed of this stream, worker id, number of workers)."""
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if self.seed is not None:
            base = stream_seed(self.seed, worker)
        elif info is not None:
            base = info.seed  # the DataLoader's base seed + worker id
        else:
            base = loader_base_seed(None)
        return stream_seed(base, self.rank, self.epoch), worker, workers

    def base_seed(self, generator: torch.Generator | None = None) -> int:
        """The base of a set of worker streams (``seed=``, else a draw from ``generator`` or torch's
        global generator, exactly as a DataLoader draws its base seed: see :func:`loader_base_seed`)."""
        if self.seed is not None:
            return self.seed
        return loader_base_seed(generator)

    def stream(self, base: int, worker: int, workers: int) -> Iterator[Any]:
        """The batches of worker ``worker`` of ``workers`` sampling from base seed ``base`` (what a
        DataLoader worker with that id yields; :class:`~datasets_hub.interop.threaded_batches.ThreadedBatches` runs these in threads)."""
        start = stream_seed(self.seed, worker) if self.seed is not None else base + worker
        return self._batches(stream_seed(start, self.rank, self.epoch), worker, workers)

    def _private_buffer(self, seed: int) -> Any:
        return _private_copy(self.buffer, seed)

    def __iter__(self) -> Iterator[Any]:
        return self._batches(*self._stream())

    def _batches(self, seed: int, worker: int, workers: int) -> Iterator[Any]:
        buffer = self._private_buffer(seed)
        if self.num_batches is None:
            count = None
        else:
            count = self.num_batches // workers + (1 if worker < self.num_batches % workers else 0)
        produced = 0
        while count is None or produced < count:
            data = buffer.sample(self.batch_size)
            produced += 1
            yield data
            if _ran_out(buffer):
                return

    def __len__(self) -> int:
        if self.num_batches is None:
            raise TypeError("this SampledBatches is endless (num_batches=None); it has no len()")
        return self.num_batches

    def dataloader(self, num_workers: int = 0, *, workers: str = "auto", **kwargs: Any) -> Any:
        """An iterable of batches with ``num_workers`` parallel samplers.

        ``workers="processes"``: ``DataLoader(self, batch_size=None, collate_fn=tensordict_collate,
        num_workers=num_workers, **kwargs)``. ``workers="threads"``: :class:`~datasets_hub.interop.threaded_batches.ThreadedBatches`, the
        samplers run in threads of this process and no batch crosses processes (``kwargs``:
        ``prefetch_factor``, ``pin_memory``, ``generator`` for the base seed, as a DataLoader's; other
        DataLoader options are refused). ``"auto"`` (default) takes threads for a read-only
        storage (a hub build, a preprocessing result: every sample is a gather that releases the
        GIL) unless a process-only option is passed (``multiprocessing_context``, ...), processes
        otherwise. With ``num_workers=0`` both sample in the calling thread."""
        if workers not in ("auto", "threads", "processes"):
            raise InvalidParameter(f"workers must be 'auto', 'threads' or 'processes', got {workers!r}")
        storage = getattr(self.buffer, "storage", None)
        allowed = {"prefetch_factor", "pin_memory", "generator"}
        extra = sorted(set(kwargs) - allowed)
        if workers == "auto":  # process-only options (multiprocessing_context, ...) ask for processes
            workers = "threads" if getattr(storage, "read_only", False) and not extra else "processes"
        if workers == "threads" and num_workers > 0:
            from datasets_hub.interop.threaded_batches import ThreadedBatches

            if extra:
                raise InvalidParameter(
                    f"thread workers take only {sorted(allowed)} (got {extra}); pass workers='processes' "
                    "for a torch DataLoader with those options"
                )
            return ThreadedBatches(
                self,
                num_workers,
                prefetch_factor=kwargs.get("prefetch_factor") or 2,
                pin_memory=kwargs.get("pin_memory", False),
                generator=kwargs.get("generator"),
            )
        kwargs.setdefault("collate_fn", tensordict_collate)
        kwargs.setdefault("batch_size", None)
        return torch.utils.data.DataLoader(self, num_workers=num_workers, **kwargs)


def _private_copy(buffer: Any, seed: int) -> Any:
    """A copy of ``buffer`` sharing its storage and transforms, with its own sampler state and
    generator seeded by ``seed`` (an ensemble: its own choice generator and private members)."""
    generator = torch.Generator().manual_seed(seed)
    if isinstance(buffer, ReplayBufferEnsemble):
        return buffer.fork(generator, [_private_copy(buffer[i], stream_seed(seed, i + 1)) for i in range(len(buffer))])
    if hasattr(buffer, "fork"):
        return buffer.fork(generator)
    clone = copy.copy(buffer)  # another object with the buffer API: a copy with its own generator
    clone.set_rng(generator)
    return clone


def _ran_out(buffer: Any) -> bool:
    if isinstance(buffer, ReplayBufferEnsemble):
        return any(_ran_out(buffer[i]) for i in range(len(buffer)))
    return bool(getattr(getattr(buffer, "sampler", None), "ran_out", False))


__all__ = [
    "BufferDataset",
    "EpisodeShardSampler",
    "SampledBatches",
    "as_buffer",
    "dumps_by_reference",
    "loader_base_seed",
    "loads_by_reference",
    "open_build",
    "resolve_rank",
    "stream_seed",
    "tensordict_collate",
]
