"""Replay buffers: a storage, a sampler and a writer behind TorchRL's API (docs/guide/buffers.md).

This module holds one concept: the replay buffer. ``ReplayBuffer`` works with any data its storage
holds; ``TensorDictReplayBuffer`` adds ``"index"`` (and the sampler's per-item info such as
``"_weight"``) to every sample; ``PrioritizedReplayBuffer`` and ``TensorDictPrioritizedReplayBuffer``
build their own ``PrioritizedSampler``.

Contracts, by section of the class:

- *Draws.* One lock guards writes and draws. With ``prefetch=N`` a thread pool keeps N batches in
  flight; draws take numbered tickets and run in ticket order, so a seeded ``generator`` gives the
  same batches with or without prefetching. Batches in flight are dropped when the contents change
  under them (``empty``, ``load_state_dict``, ``loads``); pickling leaves the threads behind and makes
  new ones. ``sample_many(k)`` draws ``k`` batches under one lock hold and gathers them in one read.
- *Items by position.* ``rb[i]`` and ``rb[i] = x`` apply the transforms as samples and writes do;
  ``read_all_in_order`` / ``write_all`` move the raw storage contents, oldest first. A read-only
  buffer refuses every write with :class:`~datasets_hub.errors.ReadOnlyError`.
- *State.* ``state_dict`` / ``load_state_dict`` in memory; ``dumps(path)`` writes ``buffer.json``
  (format ``datasets_hub.replay_buffer``, version 1), ``storage/`` (the storage's own dump, with its
  checkpointer; absent for read-only builds, which are never copied), ``sampler.pt``, ``generator.pt``
  (when the sampler has a generator) and ``writer.json``; ``loads(path)`` reads them back.
- *Priorities in TensorDicts* (``TensorDictReplayBuffer``): with a prioritized sampler, ``add`` /
  ``extend`` set the priorities the data holds under ``priority_key`` (refusing NaN, infinite or
  negative ones before anything is written), and ``update_tensordict_priority(td)`` reads ``"index"``
  and ``priority_key`` from a sample; extra priority dims are reduced with ``reduction``.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import json
import multiprocessing
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase, is_tensorclass
from torch.utils import _pytree

from datasets_hub.buffers import consumption, prefetch_state
from datasets_hub.buffers import multidim as mdim
from datasets_hub.buffers.batch_size import check_batch_items
from datasets_hub.buffers.generations import ConditionalUpdateResult, update_if_present
from datasets_hub.buffers.samplers.base import Sampler, as_index, check_generator
from datasets_hub.buffers.samplers.consuming import ConsumingSampler
from datasets_hub.buffers.samplers.prioritized import PrioritizedSampler, check_reduction, reduce_trailing
from datasets_hub.buffers.samplers.random import RandomSampler
from datasets_hub.buffers.samplers.sample_units import SampleUnit, Transition
from datasets_hub.buffers.shared_counters import being_spawned
from datasets_hub.buffers.storages import ListStorage, Storage, _as_index, _slice_items, attach_extras
from datasets_hub.buffers.transforms import Compose, as_transform
from datasets_hub.buffers.writers import ImmutableDatasetWriter, RoundRobinWriter, Writer
from datasets_hub.errors import InvalidArgument, ReadOnlyError
from datasets_hub.files import write_json_atomic

_FORMAT = "datasets_hub.replay_buffer"


_COMPONENTS = ("_storage", "_sampler", "_writer", "_collate_fn", "_transform", "_dim_extend")

#: every buffer of this process: a fork waits for their samples in progress, and the child renews their threads
_LIVE_BUFFERS: weakref.WeakSet[ReplayBuffer] = weakref.WeakSet()
#: how long a fork waits for the samples in progress to end before it goes on regardless
FORK_WAIT_S = 2.0
#: after that, how long the fork waits in all for each of the locks still busy, one at a time
FORK_GRACE_S = 0.1
_HELD_FOR_FORK: list[ReplayBuffer] = []


def _live_buffers() -> list[ReplayBuffer]:
    for _ in range(10):
        try:
            return list(_LIVE_BUFFERS)
        except RuntimeError:  # another thread made a buffer meanwhile
            continue
    return []


def _hold_buffers_before_fork() -> None:
    """Take every buffer's lock, so that no thread is inside a sampler when the process forks (the child would
    find its state half-updated). Never blocks while holding one: all are tried at once and, where one is busy,
    let go and tried again, for at most :data:`FORK_WAIT_S`. Then every other lock that is free within
    :data:`FORK_GRACE_S` is taken and the fork goes on: only a buffer whose lock another thread still holds is
    marked in the child (one buffer busy for long, say sampling a stalled remote read, never leaves the others
    unguarded)."""
    buffers = _live_buffers()
    deadline = time.monotonic() + FORK_WAIT_S
    while True:
        held = []
        for buffer in buffers:
            if not buffer._lock.acquire(blocking=False):
                break
            held.append(buffer)
        if len(held) == len(buffers):
            _HELD_FOR_FORK[:] = held
            return
        if time.monotonic() > deadline:
            # the rest, each taken if free within a short grace (bounded: a thread that holds one of them and
            # waits for a lock held here cannot hang the fork), skipping the ones still busy
            grace = time.monotonic() + FORK_GRACE_S
            for buffer in buffers[len(held) + 1 :]:
                if buffer._lock.acquire(timeout=max(0.0, grace - time.monotonic())):
                    held.append(buffer)
            _HELD_FOR_FORK[:] = held
            return
        for buffer in held:
            buffer._lock.release()
        time.sleep(0.001)


def _release_buffers_after_fork() -> None:
    for buffer in _HELD_FOR_FORK:
        buffer._lock.release()
    _HELD_FOR_FORK.clear()


def _renew_threads_after_fork() -> None:
    _HELD_FOR_FORK.clear()  # the child's copies of those locks are made anew below
    for buffer in _live_buffers():
        buffer._renew_threads_in_child()


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere no process is forked
    os.register_at_fork(
        before=_hold_buffers_before_fork,
        after_in_parent=_release_buffers_after_fork,
        after_in_child=_renew_threads_after_fork,
    )


def _collate_list(items: list[Any]) -> Any:
    """Default collate of ListStorage samples: stack TensorDicts/tensors, else torch's default_collate."""
    if not isinstance(items, list) or not items:
        return items  # a storage that already returns a batch (LazyStackStorage's lazy stack)
    first = items[0]
    if isinstance(first, (TensorDictBase, torch.Tensor)) or is_tensorclass(first):
        try:
            return torch.stack(items)
        except (RuntimeError, TypeError):
            return items
    from torch.utils.data import default_collate

    try:
        return default_collate(items)
    except (TypeError, RuntimeError):
        return items  # arbitrary objects: the list itself is the batch


# TorchRL's phrase ("Cannot share prefetched replay buffers") is kept for code that matches it
_PREFETCH_SHARED = (
    "Cannot share prefetched replay buffers: batches drawn ahead in this process would miss the writes of the "
    "other processes. Build the buffer with prefetch=0, or keep prefetch and shared=False"
)


class ReplayBuffer:
    """A composable replay buffer (TorchRL's ``ReplayBuffer``).

    Defaults: ``ListStorage(1000)``, ``RandomSampler()``, ``RoundRobinWriter()`` (an
    ``ImmutableDatasetWriter`` when the storage is read-only). ``sample()`` draws ``batch_size``
    items (the constructor's when not given); ``extend`` returns the positions written; iterating
    yields batches until the sampler has ``ran_out`` (forever with a uniform sampler).
    Transforms run on samples and ``rb[idx]``; their inverses run on ``add``/``extend``/``rb[idx] = x``.
    ``read_all_in_order``/``write_all`` move raw storage contents, without transforms.
    ``consume_after_n_samples=n`` (TorchRL's keyword): a row sampled ``n`` times is consumed, ``len`` drops,
    and new writes fill its slot first (``consumption.py``).
    """

    def __init__(
        self,
        *,
        storage: Storage | Callable[[], Storage] | None = None,
        sampler: Sampler | Callable[[], Sampler] | None = None,
        writer: Writer | Callable[[], Writer] | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = 0,
        transform: Any = None,
        transform_factory: Callable[[], Any] | None = None,
        batch_size: int | None = None,
        dim_extend: int | None = None,
        checkpointer: Any = None,
        generator: torch.Generator | None = None,
        shared: bool = False,
        compilable: bool | None = None,
        delayed_init: bool | None = None,
        sample_unit: SampleUnit | None = None,
        consume_after_n_samples: int | None = None,
    ) -> None:
        if sample_unit is not None and not isinstance(sample_unit, SampleUnit):
            raise TypeError(
                f"sample_unit must be a SampleUnit (Transition(), Sequence(length=...)) or None, got "
                f"{type(sample_unit).__name__}"
            )
        # Transition() is the identity: no unit to call
        self._sample_unit = None if isinstance(sample_unit, Transition) else sample_unit
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
            raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
        if batch_size is not None:
            check_batch_items(batch_size, f"batch_size={batch_size}")
        self._batch_size = batch_size
        prefetch = 0 if prefetch is None else prefetch
        if not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be an int >= 0 (batches kept in flight), got {prefetch!r}")
        self._prefetch = prefetch
        if prefetch and shared:
            raise InvalidArgument(_PREFETCH_SHARED)
        if dim_extend is not None and (not isinstance(dim_extend, int) or dim_extend < 0):
            raise ValueError(f"dim_extend must be an int >= 0 (the data dim extend() writes along), got {dim_extend!r}")
        if pin_memory and not torch.cuda.is_available():
            raise RuntimeError(
                "pin_memory=True pins every sample in page-locked memory for fast copies to a CUDA device, "
                "and this machine has none: drop pin_memory (or move samples with sample().to(device))"
            )
        if transform is not None and transform_factory is not None:
            raise TypeError("transform and transform_factory are exclusive: pass one of them")
        self._pin_memory = bool(pin_memory)
        self._compilable = bool(compilable)
        if self._compilable and shared:
            raise ValueError("compilable=True keeps the write cursor in plain ints (as TorchRL): it cannot be shared")
        self._init_threading()
        self._shared = False
        # writers in other processes of a shared buffer take turns through it (share() makes it a process lock)
        self._process_lock: Any = contextlib.nullcontext()
        self._pending = {
            "storage": storage,
            "sampler": sampler,
            "writer": writer,
            "collate_fn": collate_fn,
            "transform": transform,
            "transform_factory": transform_factory,
            "dim_extend": dim_extend,
            "checkpointer": checkpointer,
            "generator": generator,
            "shared": shared,
            "consume_after_n_samples": consume_after_n_samples,
        }
        # TorchRL: delayed by default when a transform factory is given
        self._delayed_init = transform_factory is not None if delayed_init is None else bool(delayed_init)
        if not self._delayed_init:
            self._init_components()

    @property
    def initialized(self) -> bool:
        """False until the components exist (``delayed_init=True`` builds them at first use)."""
        return "_pending" not in self.__dict__

    def _init_components(self) -> None:
        """Build storage, sampler, writer and transform (at construction, or at first use when delayed).

        ``storage``, ``sampler`` and ``writer`` may be given as zero-argument constructors, as in TorchRL.
        """
        spec = self.__dict__.pop("_pending")
        storage, sampler, writer = spec["storage"], spec["sampler"], spec["writer"]
        storage = storage() if callable(storage) and not isinstance(storage, Storage) else storage
        sampler = sampler() if callable(sampler) and not isinstance(sampler, Sampler) else sampler
        writer = writer() if callable(writer) and not isinstance(writer, Writer) else writer
        self._storage: Storage = ListStorage(1000) if storage is None else storage
        sampler = consumption.consuming_sampler(sampler, spec["consume_after_n_samples"])
        self._sampler: Sampler = RandomSampler() if sampler is None else sampler
        if writer is None:
            if getattr(self._storage, "read_only", False):
                writer = ImmutableDatasetWriter()
            else:
                writer = RoundRobinWriter(compilable=self._compilable)
        self._writer = writer
        writer.register_storage(self._storage)
        consumption.check_consuming(self._sampler, self._storage, writer, self._prefetch)
        collate_fn = spec["collate_fn"]
        if collate_fn is None and isinstance(self._storage, ListStorage):
            collate_fn = _collate_list
        self._collate_fn = collate_fn
        transform = spec["transform"] if spec["transform_factory"] is None else spec["transform_factory"]()
        if transform is None:
            self._transform = Compose()
        elif isinstance(transform, Compose):
            self._transform = transform
        else:
            self._transform = Compose(transform)
        self._bind(self._transform)
        ndim = getattr(self._storage, "ndim", 1)
        dim_extend = spec["dim_extend"]
        self._dim_extend = ndim - 1 if dim_extend is None else dim_extend
        if self._dim_extend and ndim == 1:
            raise ValueError(
                f"dim_extend={dim_extend} writes along a data dim other than the first, which needs a storage "
                f"with ndim > {dim_extend} (e.g. LazyTensorStorage(max_size, ndim={dim_extend + 1}))"
            )
        if spec["checkpointer"] is not None:
            self._storage.checkpointer = spec["checkpointer"]
        if spec["generator"] is not None:
            self.set_rng(spec["generator"])
        if spec["shared"]:
            self.share()

    def __getattr__(self, name: str) -> Any:
        # only reached for missing attributes: the components of a delayed buffer, built on first use
        if name in _COMPONENTS and "_pending" in self.__dict__:
            self._init_components()
            return getattr(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def dim_extend(self) -> int:
        """The data dim ``extend`` writes along (TorchRL's ``dim_extend``; default ``storage.ndim - 1``)."""
        return self._dim_extend

    # -- components ------------------------------------------------------------------------------
    @property
    def storage(self) -> Storage:
        return self._storage

    @property
    def sampler(self) -> Sampler:
        return self._sampler

    @property
    def writer(self) -> Writer:
        return self._writer

    @property
    def transform(self) -> Compose:
        return self._transform

    @property
    def episodes(self) -> Any:
        """The buffer's episodes: iterate, filter (a view, no copy), split by episode
        (:class:`~datasets_hub.buffers.episodes.Episodes`). Computed once per state of the storage
        and reused (the same object) until a write (``add``, ``extend``, ``empty``) changes it."""
        from datasets_hub.buffers.episodes import Episodes

        storage = self.storage
        version = getattr(storage, "write_version", None)
        key = (id(storage), version, len(self))
        cached = getattr(self, "_episodes_cache", None)
        if version is not None and cached is not None and cached[0] == key:
            return cached[1]
        table = Episodes(self)
        self._episodes_cache = (key, table)
        return table

    @property
    def batch_size(self) -> int | None:
        return self._batch_size

    @property
    def prefetch(self) -> int:
        """How many batches are sampled ahead in background threads (0: none)."""
        return self._prefetch

    @property
    def write_count(self) -> int:
        """Items written through ``add``/``extend`` since creation or the last ``empty()``."""
        return self._writer.write_count

    def __len__(self) -> int:
        """Items stored; with a ``ConsumingSampler``, those not consumed yet (``consumption.py``)."""
        sampler = self._sampler
        if isinstance(sampler, ConsumingSampler):
            return sampler.num_sampleable(self._storage)
        return len(self._storage)

    def set_rng(self, generator: torch.Generator | None) -> None:
        """Make ``generator`` the sampler's only source of randomness (``None``: torch's global generator)."""
        check_generator(generator)
        self._sampler.generator = generator

    @property
    def _rng(self) -> torch.Generator | None:
        """TorchRL's attribute name for the buffer's generator (``rb._rng.set_state(...)`` in ported code)."""
        return self._sampler.generator

    def set_storage(self, storage: Storage, collate_fn: Callable | None = None) -> Storage:
        """Replace the storage and return the previous one, as TorchRL.

        ``storage`` must be empty: the writer (registered with it) and the sampler start afresh, since their
        cursor, priorities and epochs described the previous storage's rows. (TorchRL also takes a filled
        storage and keeps the old cursor; build a new buffer around a filled storage instead.)
        ``collate_fn`` replaces the collate function; by default it is reset to the default for ``storage``.
        Batches already prefetched from the previous storage are collected first.
        """
        if len(storage):
            raise InvalidArgument(
                f"set_storage takes an empty storage, this one holds {len(storage)} items: the writer's cursor "
                "and the sampler's state would describe other rows. Build a buffer around it instead: "
                "ReplayBuffer(storage=storage, sampler=..., writer=...)"
            )
        consumption.check_consuming(self._sampler, storage, self._writer, self._prefetch)
        self._drain()
        with self._lock:
            previous, self._storage = self._storage, storage
            self._writer.register_storage(storage)
            self._writer.empty()
            self._sampler.empty()
            if collate_fn is None and isinstance(storage, ListStorage):
                collate_fn = _collate_list
            self._collate_fn = collate_fn
        return previous

    def set_sampler(self, sampler: Sampler) -> Sampler:
        """Replace the sampler and return the previous one (the buffer's generator, if set, moves to it).

        The new sampler is told about the items already stored, oldest first (a ``PrioritizedSampler`` gives
        them the default priority), so none of them is left out of its draws.
        """
        consumption.check_consuming(sampler, self._storage, self._writer, self._prefetch)
        self._drain()
        with self._lock:
            previous, self._sampler = self._sampler, sampler
            if sampler.generator is None and previous.generator is not None:
                sampler.generator = previous.generator
            if len(self._storage):
                sampler.extend(self._items_of_rows(self._writer.indices_in_order()))
        return previous

    def set_writer(self, writer: Writer) -> Writer:
        """Replace the writer (registered with the storage) and return the previous one."""
        consumption.check_consuming(self._sampler, self._storage, writer, self._prefetch)
        self._drain()
        with self._lock:
            previous, self._writer = self._writer, writer
            writer.register_storage(self._storage)
        return previous

    def register_save_hook(self, hook: Callable[..., Any]) -> None:
        """Run ``hook(data, path=path)`` on the storage's data before :meth:`dumps` writes it (e.g. ``TED2Flat()``).

        Hooks belong to the storage's checkpointer and are not saved: register them again on a new buffer.
        """
        self._storage.register_save_hook(hook)

    def register_load_hook(self, hook: Callable[..., Any]) -> None:
        """Run ``hook(data, path=path)`` on the data :meth:`loads` read, before the storage takes it."""
        self._storage.register_load_hook(hook)

    def update_if_present(
        self,
        *,
        index: Any,
        generation: Any,
        patch: Any,
        version_key: Any = None,
        version: Any = None,
        require_newer: bool = False,
    ) -> ConditionalUpdateResult:
        """Write ``patch`` into the items of ``index`` whose slots still hold the ``generation`` a sample reported
        (``"index_generation"``); items overwritten since are left alone. With ``version_key``/``version``, a
        live item is written only when the incoming version is not older than its stored one (newer with
        ``require_newer=True``). Needs a writer with ``track_generations=True``; see ``generations.py``."""
        self._drain()
        with self._lock:
            return update_if_present(
                self._storage, self._writer, index, generation, patch, version_key, version, require_newer
            )

    def save(self, path: str | Path) -> None:
        """TorchRL's alias of :meth:`dumps`."""
        self.dumps(path)

    def dump(self, path: str | Path) -> None:
        """TorchRL's alias of :meth:`dumps`."""
        self.dumps(path)

    def load(self, path: str | Path) -> None:
        """TorchRL's alias of :meth:`loads`."""
        self.loads(path)

    def read_only_view(self, storage: Storage, *, transform: Any = None, prefetch: int | None = None) -> Any:
        """A read-only ``TensorDictReplayBuffer`` over ``storage`` (data derived from this buffer's: an
        episode subset, a preprocessing result) with a copy of this buffer's sampler (its caches follow
        the new storage; the generator is shared), its batch size and prefetch, and ``transform``
        (none by default: some transforms are bound to this buffer's storage, e.g. ``FrameStack``)."""
        sampler = self._sampler
        generator = getattr(sampler, "generator", None)
        sampler = copy.deepcopy(sampler, memo={id(generator): generator} if generator is not None else None)
        return TensorDictReplayBuffer(
            storage=storage,
            sampler=sampler,
            writer=ImmutableDatasetWriter(),
            batch_size=self._batch_size,
            transform=transform,
            prefetch=self._prefetch if prefetch is None else prefetch,
        )

    def fork(self, generator: torch.Generator | None, *, prefetch: int | None = None) -> ReplayBuffer:
        """A shallow copy sharing this buffer's storage, writer and transforms, with its own copy of
        the sampler (epoch position, caches) drawing from ``generator`` (``None``: torch's global one),
        and its own lock and prefetch queue (``prefetch`` batches in flight; ``None``: this buffer's
        setting): one independent sample stream per DataLoader worker or DDP rank."""
        consumption.refuse_split(self._sampler, "fork()")
        self._refuse_after_fork(copying=True)
        clone = copy.copy(self)  # through __getstate__: a fresh lock
        # a copy (pickle) carries the batches drawn ahead; a fork draws its own stream, never the parent's
        clone._queue.clear()
        if prefetch is not None:
            if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
                raise ValueError(f"prefetch must be an int >= 0 (batches kept in flight), got {prefetch!r}")
            clone._prefetch = prefetch
        clone._sampler = copy.deepcopy(self._sampler)
        clone.set_rng(generator)
        return clone

    def share(self, shared: bool = True) -> ReplayBuffer:
        """Share the storage and write cursor with ``torch.multiprocessing`` children (``shared=True``);
        returns the buffer (TorchRL's signature). Sharing cannot be undone: ``share(False)`` on a shared
        buffer is refused, on another it does nothing. A prefetching buffer cannot be shared (batches
        drawn ahead would not see other processes' writes)."""
        if not shared:
            if self._shared:
                raise InvalidArgument("this buffer's storage is already in shared memory: sharing cannot be undone")
            return self
        if self._prefetch:
            raise InvalidArgument(_PREFETCH_SHARED)
        consumption.refuse_split(self._sampler, "shared=True")
        if not hasattr(self._storage, "share"):
            raise ValueError(
                f"shared=True needs a storage that lives outside one process; {type(self._storage).__name__} "
                "does not. Use LazyMemmapStorage(max_size) (or LazyTensorStorage, allocated before sharing)"
            )
        self._storage.share()
        self._writer.share()
        # two processes extending at once would take the same rows; a lock of the spawn context also goes to
        # spawned and forkserver children (one of the fork context cannot), and forked ones inherit it
        self._process_lock = multiprocessing.get_context("spawn").Lock()
        self._shared = True
        return self

    def append_transform(self, transform: Any, *, invert: bool = False) -> ReplayBuffer:
        """Add a transform at the end; ``invert=True`` runs it on writes instead of on samples."""
        self._transform.append(self._bind(as_transform(transform, invert=invert)))
        return self

    def insert_transform(self, index: int, transform: Any, *, invert: bool = False) -> ReplayBuffer:
        self._transform.insert(index, self._bind(as_transform(transform, invert=invert)))
        return self

    def _bind(self, transform: Any) -> Any:
        """Attach transforms that read the buffer's storage (e.g. ``FrameStack``) to this buffer."""
        for inner in getattr(transform, "transforms", ()):
            self._bind(inner)
        if callable(getattr(transform, "bind", None)):
            transform.bind(self)
        return transform

    def _inv(self, data: Any) -> Any:
        return self._transform.inv(data) if self._transform.transforms else data

    def _fwd(self, data: Any) -> Any:
        return self._transform(data) if self._transform.transforms else data

    # -- writes ----------------------------------------------------------------------------------
    def add(self, data: Any) -> int:
        """Write one item; returns its position."""
        data = self._inv(data)
        with self._lock, self._process_lock:
            sampler = self._sampler
            if isinstance(sampler, ConsumingSampler):  # consumed slots are filled first
                index = consumption.add_consuming(self._writer, sampler, self._storage, data)
            else:
                index = self._writer.add(data)
            if index < 0:  # declined by the writer (TensorDictMaxValueWriter)
                return index
            if getattr(self._storage, "ndim", 1) > 1:
                self._sampler.extend(self._items_of_rows(torch.tensor([index])))
            else:
                self._sampler.add(index)
        return index

    def extend(self, data: Any) -> torch.Tensor:
        """Write a batch (leading dim = items; a list at the root is a list of items); returns positions.

        With a multi-dimensional storage, data dim ``dim_extend`` is the one written along (the others
        are the storage's trailing dims), and the positions are ``[n_items, ndim]`` tensors of indices.
        """
        data = self._inv(data)
        if data is None:  # a write-side transform held it back (MultiStepTransform awaiting later steps)
            ndim = getattr(self._storage, "ndim", 1)
            return torch.zeros((0, ndim) if ndim > 1 else (0,), dtype=torch.long)
        if self._dim_extend:
            data = mdim.transpose_data(data, self._dim_extend)
        with self._lock, self._process_lock:
            sampler = self._sampler
            if isinstance(sampler, ConsumingSampler):  # consumed slots are filled first
                index = consumption.extend_consuming(self._writer, sampler, self._storage, data)
            else:
                index = self._writer.extend(data)
            items = self._items_of_rows(index)
            if self._writer.may_drop_items:  # -1 marks an item the writer declined
                self._sampler.extend(items[items >= 0])
            else:
                self._sampler.extend(items)
        if items is not index:
            return torch.stack(mdim.unravel(items, self._storage.shape), -1)
        return index

    def empty(self, empty_write_count: bool = True) -> None:
        """Remove every item and reset the write cursor and the sampler; ``write_count`` too unless
        ``empty_write_count=False`` (TorchRL's keyword: a monitor's cumulative count goes on)."""
        self._refuse_if_read_only()
        self._drain()
        with self._lock:
            count = self._writer.write_count
            self._writer.empty()
            self._storage.empty()
            self._sampler.empty()
            if not empty_write_count:
                self._writer.keep_write_count(count)

    def stats(self) -> dict[str, int | float | bool]:
        """A JSON-able snapshot of counters (TorchRL's ``stats``): ``size`` (``len``), ``write_count`` (0 for
        writers that do not count), ``prefetch_queue_size`` (batches in flight), ``initialized``, and, when the
        storage's capacity is known, ``capacity`` and ``utilization`` (``size / capacity``). It changes nothing
        and does not build a buffer built with ``delayed_init=True``."""
        if not self.initialized:
            pending = self.__dict__["_pending"]["storage"]
            out: dict[str, int | float | bool] = {"size": 0, "write_count": 0, "prefetch_queue_size": 0}
            out["initialized"] = False
            if isinstance(pending, Storage):
                out["capacity"], out["utilization"] = int(pending.max_size), 0.0
            return out
        size = len(self)
        capacity = int(self._storage.max_size)
        return {
            "size": size,
            "write_count": int(self._writer.write_count),
            "prefetch_queue_size": len(self._queue),
            "initialized": True,
            "capacity": capacity,
            "utilization": size / capacity if capacity else 0.0,
        }

    # -- in-place writes of single keys (TensorDict's set_ / set_at_ / update_) ---------------------
    def set_(self, key: Any, value: torch.Tensor) -> ReplayBuffer:
        """Overwrite entry ``key`` of every stored item in place (``value``: one row per item)."""
        self._refuse_if_read_only()
        with self._lock:
            self._storage.set_key_(key, value, None)
        return self

    def set_at_(self, key: Any, value: torch.Tensor, index: Any) -> ReplayBuffer:
        """Overwrite entry ``key`` of the items at ``index`` in place (``value``: one row per index)."""
        self._refuse_if_read_only()
        with self._lock:
            self._storage.set_key_(key, value, index)
        return self

    def update_(self, data: Any) -> ReplayBuffer:
        """Overwrite, in place, every entry ``data`` (a TensorDict of one row per stored item) holds."""
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"update_ takes a TensorDict of entries to overwrite, got {type(data).__name__}")
        self._refuse_if_read_only()
        with self._lock:
            for key, value in data.items(include_nested=True, leaves_only=True):
                self._storage.set_key_(key, value, None)
        return self

    def _gather(
        self,
        index: torch.Tensor,
        info: dict[str, Any],
        items: torch.Tensor | None = None,
        rows: np.ndarray | None = None,
    ) -> Any:
        """Read the sampled ``index``; ``items`` are the sampler's flat positions on a multi-dim storage;
        ``rows``, when not None, the sampler's promise of ``Sampler.sample_rows`` (valid rows, per-item info)."""
        data = self._storage.get(index) if items is None else self._storage.get_items(items)
        return self._collate_fn(data) if self._collate_fn is not None else data

    def _sample_now(self, batch_size: int) -> tuple[Any, dict[str, Any], bool]:
        """Draw and gather one batch; callers hold the lock."""
        sampler, storage = self._sampler, self._storage
        drawn, info, rows = sampler.sample_rows(storage, batch_size)
        if self._sample_unit is not None:  # the anchors become the records read: no promise on them is kept
            drawn, info = self._sample_unit.expand_in_buffer(
                drawn, info, storage, getattr(self._writer, "cursor", None)
            )
            rows = None
        index: Any = drawn
        ran_out = sampler.ran_out
        items = None
        if getattr(storage, "ndim", 1) > 1:  # items -> (t, e, ...) as TorchRL reports them
            items, index, rows = index, mdim.unravel(index, storage.shape), None
        info = {**info, "index": index}
        if getattr(self._writer, "tracks_generations", False):  # read under the lock: the stamps of the rows gathered
            info["index_generation"] = self._writer.generations_of(index)
        data = self._gather(index, info, items, rows)
        if self._pin_memory:
            data = data.pin_memory()
        return data, info, ran_out

    def sample(self, batch_size: int | None = None, return_info: bool = False, include_info: bool | None = None) -> Any:
        """A batch of ``batch_size`` items (default: the constructor's), and its info if ``return_info``.

        ``include_info=False`` (TorchRL's keyword): a TensorDict sample without the sampler's bookkeeping
        entries (``"index"``, ``"_weight"``, ...); entries that are data in TED, such as the slice ends in
        ``("next", "truncated")``, stay. ``None``/``True``: TensorDict buffers write them (the default).
        """
        if batch_size is None:
            batch_size = self._batch_size
            if batch_size is None:
                raise RuntimeError(
                    "batch_size not specified: pass sample(batch_size=...) or build the buffer with batch_size=..."
                )
        elif not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")  # 0 gave an empty batch
        else:
            check_batch_items(batch_size, f"sample({batch_size})")
        data, info, _ = self._draw(batch_size)
        if include_info is False and isinstance(data, TensorDictBase):
            data = data.exclude(*[k for k in info if isinstance(k, str) and (k == "index" or k.startswith("_"))])
        return (data, info) if return_info else data

    def __iter__(self) -> Iterator[Any]:
        if self._batch_size is None:
            raise RuntimeError(
                "cannot iterate over a buffer without a batch size: build it with batch_size=..., "
                "or call sample(batch_size) in a loop"
            )
        while True:
            data, _, ran_out = self._draw(self._batch_size)
            yield data
            if ran_out:
                return

    # -- preprocessing (datasets_hub/preprocess/pipeline.py owns it) ---------------------------------------
    def preprocess(
        self,
        fn: Callable,
        *,
        by: str | None = None,
        num_workers: int | None = None,
        chunk_size: int | None = None,
        version: Any = None,
        backend: str = "process",
    ) -> TensorDictReplayBuffer:
        """Map ``fn(batch of n transitions) -> TensorDict of n rows`` over every stored transition once,
        cached by fingerprint; returns a read-only buffer over the result (see :mod:`datasets_hub.preprocess.pipeline`).
        ``by="episode"`` hands fn whole episodes (returns-to-go); the default ``"row"`` needs a row-wise fn."""
        from datasets_hub.preprocess.pipeline import preprocess

        return preprocess(
            self, fn, by=by, num_workers=num_workers, chunk_size=chunk_size, version=version, backend=backend
        )

    # -- priorities ------------------------------------------------------------------------------
    def update_priority(self, index: Any, priority: Any) -> None:
        """Set the priorities of the items at ``index`` (prioritized samplers only).

        On a multi-dimensional storage ``index`` is what samples carry: a tuple of ``ndim`` tensors or
        a ``[B, ndim]`` tensor."""
        if getattr(self._storage, "ndim", 1) > 1:
            index = mdim.ravel(index, self._storage.shape)
            priority = torch.as_tensor(priority)
            if self._dim_extend and priority.ndim > 1:  # given in the layout extend() takes
                priority = mdim.transpose_data(priority, self._dim_extend).reshape(-1)
        if not isinstance(index, int) or isinstance(index, bool):
            index = as_index(index).reshape(-1)  # a float index is an error, never truncated to a row
        with self._lock:
            self._sampler.update_priority(index, torch.as_tensor(priority))

    # -- interop (datasets_hub/interop/) ---------------------------------------------------------
    def to_torchrl(self, **kwargs: Any) -> Any:
        """A TorchRL ``TensorDictReplayBuffer`` over this buffer's build, no copy (see ``torchrl_interop.to_torchrl``)."""
        from datasets_hub.interop.torchrl import to_torchrl

        return to_torchrl(self, **kwargs)

    def as_map_dataset(self, **kwargs: Any) -> Any:
        """A map-style PyTorch dataset: ``ds[i]`` is the sample at anchor ``i`` (``sample_at``; windows, goals
        and n-step returns included), or with ``view="rows"`` the stored row (``torch_data.BufferDataset``)."""
        from datasets_hub.interop.torch_data import BufferDataset

        return BufferDataset(self, **kwargs)

    def as_iterable_dataset(self, batch_size: int | None = None, **kwargs: Any) -> Any:
        """A PyTorch iterable over sampled batches, seeded per worker and rank (``torch_data.SampledBatches``)."""
        from datasets_hub.interop.torch_data import SampledBatches

        return SampledBatches(self, batch_size, **kwargs)

    def as_dataset(self, *, num_batches: int | None = None, map_style: bool = False) -> Any:
        """TorchRL 0.15's ``rb.as_dataset()``: an iterable over this buffer's batches, or with ``map_style=True``
        the map-style view of its storage (``rb.storage.as_dataset()``); see :mod:`datasets_hub.buffers.pytorch_datasets`."""
        from datasets_hub.buffers.pytorch_datasets import ReplayBufferDataset, StorageDataset

        if map_style:
            if num_batches is not None:
                raise InvalidArgument(
                    "num_batches counts the batches of the iterable view; a map-style view has one item per "
                    "storage entry and its DataLoader's sampler decides the batches: drop num_batches"
                )
            return StorageDataset(self._storage)
        return ReplayBufferDataset(self, num_batches=num_batches)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(storage={self._storage!r}, sampler={type(self._sampler).__name__}(), "
            f"writer={self._writer!r}, batch_size={self._batch_size}, transform={self._transform!r})"
        )

    # -- draws: under the lock, or prefetched in ticket order ------------------------------------

    def _init_threading(self) -> None:
        _LIVE_BUFFERS.add(self)  # a forked child renews these (_renew_threads_in_child)
        self._fork_torn: str | None = None
        self._fork_lost: str | None = None
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._next_ticket = 0  # next draw number to hand out
        self._turn = 0  # draw number allowed to use the sampler now
        self._queue: collections.deque = collections.deque()
        self._executor: ThreadPoolExecutor | None = None
        # held while the queue of prefetched batches is changed or read whole (state capture, restore)
        self._futures_lock = threading.RLock()

    def _renew_threads_in_child(self) -> None:
        """Run in a forked child (``os.register_at_fork``) before its own code: the parent's threads do not exist
        here, so the locks they may have held and the prefetch executor are made anew. Batches drawn ahead that
        had finished are kept. One still in flight is lost with its thread: this buffer then refuses to sample
        here (its sampler moved past rows it would never serve), though copies for workers (:meth:`fork`, which
        draw their own streams) are fine. A lock another thread held at the fork means the sampler state may be
        half-updated: then copies are refused too (:meth:`_refuse_after_fork`)."""
        torn = not self._lock.acquire(blocking=False)  # the forking thread itself may hold it (re-entrant)
        if not torn:
            self._lock.release()
        finished = [future for future in self._queue if future.done()]
        lost = len(self._queue) - len(finished)
        self._init_threading()
        self._queue.extend(finished)
        advice = (
            "Fork when no thread samples it and no batch is in flight, give each process its own copy "
            "(rb.fork(generator), or rb.as_dataset() for a DataLoader), or start processes with the 'spawn' method"
        )
        name = type(self).__name__
        if torn:
            self._fork_torn = (
                f"this {name} was forked into this process while another thread was sampling it: its sampler state "
                f"may be half-updated here, so it cannot be sampled or copied in this process. {advice}"
            )
        if lost:
            self._fork_lost = (
                f"this {name} was forked into this process while {lost} batch(es) it drew ahead on threads "
                f"(prefetch={self._prefetch}) were in flight: they are lost with those threads, and its sampler "
                f"has moved past them, so it cannot sample here. {advice}"
            )

    def _refuse_after_fork(self, *, copying: bool = False) -> None:
        """Refuse to sample (or, with ``copying``, to copy) a buffer a fork left unusable in this process."""
        if self._fork_torn is not None:
            raise InvalidArgument(self._fork_torn)
        if not copying and self._fork_lost is not None:
            raise InvalidArgument(self._fork_lost)

    @property
    def _prefetch_queue(self) -> collections.deque:
        """TorchRL's name of the queue of batches drawn ahead (futures, oldest first)."""
        return self._queue

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
        if self._fork_torn is not None or self._fork_lost is not None:
            self._refuse_after_fork()
        if self._compilable and torch.compiler.is_compiling():
            data, info, ran_out = self._sample_now(batch_size)  # no lock: dynamo cannot trace one
            return self._fwd(data), info, ran_out
        if not self._prefetch:
            with self._lock:
                data, info, ran_out = self._sample_now(batch_size)
            transform = self._transform  # inlined _fwd: this runs for every batch
            return (transform(data) if transform.transforms else data), info, ran_out
        with self._futures_lock:
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

    def _settled_queue(self) -> list[Any]:
        """The results of every batch in flight, oldest first (waits for them; hold ``_futures_lock``)."""
        return [future.result() for future in self._queue]

    @contextlib.contextmanager
    def _settled_then_locked(self) -> Iterator[list[Any]]:
        """Wait for the batches in flight (they sample under ``_lock``), then hold ``_lock``; yields their
        results. Callers hold ``_futures_lock``, so no new batch is queued meanwhile."""
        settled = self._settled_queue()
        with self._lock:
            yield settled

    def sample_many(self, k: int, batch_size: int | None = None) -> Any:
        """``k`` batches in one call, stacked: a ``[k, batch_size]`` TensorDict (or tensor).

        The values are exactly those of ``k`` successive ``sample(batch_size)`` calls (the sampler draws
        the same indices from the same generator, ``Sampler.sample_many_rows``), but the storage gathers
        all ``k * batch_size`` items at once, and anchor samplers (goals, n-step returns, windows) do
        their per-row work once over all of them, so the per-call work is paid once. Buffers with
        transforms, a ``collate_fn``, ``prefetch`` or a multi-dimensional storage (and data that is not
        a tensor or TensorDict) stack ``k`` ``sample()`` calls. Batches must have equal sizes: an epoch sampler's short last batch
        is refused (use ``drop_last=True``).
        """
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"sample_many needs a number of batches k >= 1, got {k!r}")
        batch_size = self._batch_size if batch_size is None else batch_size
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(
                f"sample_many needs a positive batch_size (here or in the constructor), got {batch_size!r}"
            )
        check_batch_items(k * batch_size, f"sample_many({k}, batch_size={batch_size})")
        self._refuse_after_fork()
        if not self._plain_gathers():
            return _stack([self.sample(batch_size) for _ in range(k)])
        with self._lock:
            index, info, rows = self._sampler.sample_many_rows(self._storage, k, batch_size)
            info = {**info, "index": index}
            if rows is not None and getattr(self._storage, "gathers_batches", False):
                # promised rows (every info entry per item) of a storage that gathers [k, m] batches: shaped
                # before the gather, so the batch comes out [k, batch_size] with no reshape of the result
                lead = (k, batch_size)
                info = {key: value.reshape(*lead, *value.shape[1:]) for key, value in info.items()}
                return self._gather(index.reshape(lead), info, None, rows.reshape(lead))
            data = self._gather(index, info, None, rows)
        if isinstance(data, (torch.Tensor, TensorDictBase)):
            return data.reshape(k, batch_size, *data.shape[1:])
        return _stack([data[i * batch_size : (i + 1) * batch_size] for i in range(k)])

    def _plain_gathers(self) -> bool:
        """True when a batch is exactly the storage's gather of the sampled index: no prefetch, pinning,
        ``collate_fn``, transform, sample unit or multi-dimensional storage in between."""
        return (
            self._sample_unit is None
            and not self._prefetch
            and not self._pin_memory
            and self._collate_fn is None
            and not self._transform.transforms
            and getattr(self._storage, "ndim", 1) == 1
        )

    def sample_at(self, index: Any, *, generator: torch.Generator | None = None, return_info: bool = False) -> Any:
        """The batch ``sample()`` returns where the sampler's draw lands on the rows ``index``: one item per
        row with a sampled row's keys and shapes (a window with its ``<key>_is_pad`` masks, goals, n-step
        returns), transforms applied. What the sampler draws beyond the anchor (goals, a random ``n``)
        comes from ``generator`` (default: the buffer's). A sampler with no item at a given row (slices,
        ``FullStackSampler``, ``WindowSampler(pad=False)``, priorities) refuses by name
        (``Sampler.sample_at``): this is what a map-style view (``as_map_dataset``) serves at ``ds[i]``."""
        if self._sample_unit is not None:
            raise ValueError(
                f"sample_at serves one item per row, and this buffer's sample_unit ({self._sample_unit!r}) expands "
                "each drawn row into several: use sample()"
            )
        if getattr(self._storage, "ndim", 1) > 1:
            raise ValueError(
                "sample_at indexes the rows of a one-dimensional storage; a multi-dimensional one (ndim > 1) has "
                "items of several rows: index it with rb[...], or sample()"
            )
        with self._lock:
            rows = self._check_index(as_index(index).reshape(-1))
            sampler = self._sampler
            drawn, info = sampler.sample_at(
                self._storage, rows, generator if generator is not None else sampler.generator
            )
            info = {**info, "index": drawn}
            data = self._gather(drawn, info)
            if self._pin_memory:
                data = data.pin_memory()
        data = self._fwd(data)
        return (data, info) if return_info else data

    def draw_index(self, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]] | None:
        """The sampler's ``(index, info)`` for one batch of ``batch_size``, drawn under the buffer's lock
        exactly as ``sample`` draws it, without reading the storage; ``None`` (nothing drawn) when a
        batch is more than a plain gather (see ``sample_many``). With :meth:`gather_drawn`, a caller
        that reads several buffers over one storage (``ReplayBufferEnsemble``) reads it once."""
        if not self._plain_gathers():
            return None
        with self._lock:
            return self._sampler.sample(self._storage, batch_size)

    def draw_rows(self, batch_size: int) -> tuple[torch.Tensor, dict[str, Any], np.ndarray | None] | None:
        """:meth:`draw_index` with the sampler's promise (``Sampler.sample_rows``): ``(index, info, rows)``,
        ``rows`` the index as numpy rows, all valid, and every ``info`` entry a per-item tensor (``None``:
        no promise); ``None`` (nothing drawn) where :meth:`draw_index` gives ``None``."""
        if not self._plain_gathers():
            return None
        with self._lock:
            return self._sampler.sample_rows(self._storage, batch_size)

    def draw_many_rows(self, k: int, batch_size: int) -> tuple[torch.Tensor, dict[str, Any], np.ndarray | None] | None:
        """:meth:`draw_rows` of ``k`` successive batches as one draw of ``k * batch_size`` items, in draw
        order (``Sampler.sample_many_rows``: the values of ``k`` calls, under one lock hold); ``None``
        (nothing drawn) where :meth:`draw_index` gives ``None``."""
        if not self._plain_gathers():
            return None
        with self._lock:
            return self._sampler.sample_many_rows(self._storage, k, batch_size)

    def gather_drawn(self, index: torch.Tensor, info: dict[str, Any], rows: np.ndarray | None = None) -> Any:
        """What ``sample`` returns for a drawn 1-D ``index`` and its ``info`` (:meth:`draw_index`;
        the index of several draws of buffers sharing this storage may be concatenated). ``rows``: the
        index as numpy rows (shaped as ``index``) when every draw came with the promise of :meth:`draw_rows` (then ``info``
        must hold only per-item tensors), for a storage that can skip its checks (``Storage.gather_valid``)."""
        with self._lock:
            return self._gather(index, info, None, rows)

    def _drain(self) -> None:
        """Wait for in-flight prefetches and drop them (after empty/load, they would be stale)."""
        with self._futures_lock:
            while self._queue:
                try:
                    self._queue.popleft().result()
                except Exception:  # noqa: BLE001 - a failed stale batch is dropped with the others
                    pass

    def __getstate__(self) -> dict[str, Any]:
        self._refuse_after_fork(copying=True)  # a copy would carry a sampler state that may be half-updated
        with self._futures_lock:  # the batches in flight travel with the sampler that moved past them
            queued = prefetch_state.capture(self._settled_queue(), self._prefetch, clone=False)
            state = self.__dict__.copy()
        for k in ("_lock", "_cond", "_queue", "_executor", "_next_ticket", "_turn", "_futures_lock"):
            state.pop(k)
        state.pop("_episodes_cache", None)  # derived (ReplayBuffer.episodes); recomputed on first use
        state["_prefetch_state"] = queued
        if not being_spawned():  # a plain copy writes on its own (a process lock only travels to a spawned child)
            state["_process_lock"] = contextlib.nullcontext()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        queued = state.pop("_prefetch_state", None)
        self.__dict__.update(state)
        self._init_threading()
        if queued is not None:
            self._queue.extend(prefetch_state.settled(queued["queue"]))

    def __del__(self) -> None:
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=False)

    # -- items by position: rb[i], rb[i] = x, all of them in write order --------------------------

    def _items_of_rows(self, rows: Any) -> Any:
        """Samplers number items; the writer of a multi-dimensional storage returns whole rows."""
        if getattr(self._storage, "ndim", 1) == 1:
            return rows
        return mdim.rows_to_items(torch.as_tensor(rows), self._storage.shape[1:].numel())

    def _refuse_if_read_only(self) -> None:
        if isinstance(self._writer, ImmutableDatasetWriter) or getattr(self._storage, "read_only", False):
            raise ReadOnlyError("buffer (a read-only dataset: ImmutableDatasetWriter)")

    def __setitem__(self, index: Any, data: Any) -> None:
        """Overwrite items in place (``rb[:] = data`` on an empty buffer fills it like ``extend``)."""
        self._refuse_if_read_only()
        data = self._inv(data)
        if getattr(self._storage, "ndim", 1) > 1 and not (len(self) == 0 and index == slice(None)):
            if isinstance(index, list):
                index = torch.as_tensor(index)
            with self._lock:  # as TorchRL: index the data in the layout extend() takes
                self._storage.set_in_layout(index, data, self._dim_extend)
            return
        with self._lock:
            if len(self) == 0 and isinstance(index, slice) and index == slice(None):
                if self._dim_extend:
                    data = mdim.transpose_data(data, self._dim_extend)
                self._sampler.extend(self._items_of_rows(self._writer.extend(data)))
                return
            index = self._check_index(index)
            if isinstance(index, slice):
                want, got = len(range(index.start, index.stop, index.step)), self._storage.num_items(data)
                if want != got:
                    raise ValueError(f"rb[{index.start}:{index.stop}] = data needs {want} items, got {got}")
            self._storage.set(index, data)

    def write_all(self, data: Any, end: int | None = None) -> torch.Tensor:
        """Overwrite the items ``read_all_in_order(end)`` returns, in that order (raw, no transforms).

        On an empty buffer this writes ``data[:end]`` like ``extend``. Length and write cursor are
        unchanged otherwise; returns the positions written.
        """
        self._refuse_if_read_only()
        if getattr(self._storage, "ndim", 1) > 1:
            raise NotImplementedError(
                "write_all on a multi-dimensional storage is not supported: overwrite rows with rb[idx] = data "
                "(indexed in the layout extend() takes)"
            )
        with self._lock:
            if len(self) == 0:
                if end is not None:
                    data = _slice_items(data, 0, end)
                index = self._writer.extend(data)
                self._sampler.extend(index)
                return index
            order = self._writer.indices_in_order()
            if end is not None:
                order = order[:end]
            n = self._storage.num_items(data)
            if n != order.numel():
                raise ValueError(
                    f"write_all got {n} items but the buffer's in-order range holds {order.numel()}: "
                    "pass exactly what read_all_in_order(end) returned, transformed item by item"
                )
            self._storage.set(order, data)
            return order

    def _check_index(self, index: Any) -> Any:
        n = len(self)
        index = _as_index(index, n)
        if isinstance(index, torch.Tensor) and index.numel():
            if int(index.min()) < -n or int(index.max()) >= n:
                raise IndexError(f"index out of range for a buffer holding {n} items")
            if int(index.min()) < 0:
                index = torch.where(index < 0, index + n, index)
        return index

    def __getitem__(self, index: Any) -> Any:
        """``rb[i]`` one item, ``rb[a:b]``/``rb[tensor]`` a batch, ``rb["key"]`` one column of ``rb[:]``."""
        if isinstance(index, str) or (isinstance(index, tuple) and index and all(isinstance(k, str) for k in index)):
            return self[:][index]
        if getattr(self._storage, "ndim", 1) > 1:
            return self._fwd(self._get_md(index))
        with self._lock:
            index = self._check_index(index)
            data = self._storage.get(index)
        if not isinstance(index, int) and self._collate_fn is not None:
            data = self._collate_fn(data)
        return self._fwd(data)

    def _get_md(self, index: Any) -> Any:
        """``rb[idx]`` on a multi-dimensional storage, as TorchRL: the storage read as the data was
        given to ``extend`` (dim ``dim_extend`` back in place), then indexed along its first dim."""
        if isinstance(index, tuple):
            return self[:][index]
        if isinstance(index, list):
            index = torch.as_tensor(index)
        full = (slice(None),) * self._dim_extend + (index,)
        with self._lock:
            data = self._storage.get(full)
        # the batch dims left after indexing (a PyTree's leaves also have their per-item dims)
        batch_dims = torch.empty(self._storage.shape, device="meta")[full].ndim
        return mdim.transpose_data(data, self._dim_extend) if batch_dims > self._dim_extend else data

    def query(self, predicate: Callable[[Any], bool] | None = None, *, trajectory_key: Any = None) -> list[Any]:
        """The stored trajectories for which ``predicate`` holds (all without one), oldest first, as
        :class:`~datasets_hub.buffers.trajectories.Trajectory` s with the buffer's transforms applied
        (TorchRL 0.14's ``ReplayBuffer.query``; the rules in :mod:`datasets_hub.buffers.trajectories`).

        Trajectories are read in write order, so one written across the wrap point of a full buffer
        comes back whole, and one partly overwritten comes back as what is left of it. With a
        multi-dimensional storage each column (environment) is split on its own, columns in order.
        Raises ``TypeError`` when the storage holds no TensorDicts.
        """
        from datasets_hub.buffers.trajectories import query_trajectories

        with self._lock:
            order = self._writer.indices_in_order()
            if order.numel() == 0:
                return []
            data = self._storage.get(order)
        if self._collate_fn is not None:
            data = self._collate_fn(data)
        return query_trajectories(data, predicate, transforms=list(self._transform), trajectory_key=trajectory_key)

    def read_all_in_order(self, end: int | None = None) -> Any:
        """Every item oldest first (the first ``end`` of them), raw from storage (no transforms).

        When the items are contiguous in storage this is one slice read (zero-copy for tensor storages).
        """
        with self._lock:
            order = self._writer.indices_in_order()
            if end is not None:
                order = order[:end]
            n = order.numel()
            if n and int(order[-1]) - int(order[0]) == n - 1:
                first = int(order[0])
                data = self._storage.get(slice(first, first + n))
            else:
                data = self._storage.get(order)
        if self._dim_extend:
            data = mdim.transpose_data(data, self._dim_extend)
        if self._collate_fn is not None:
            data = self._collate_fn(data)
        return data

    # -- state: state_dict / load_state_dict, dumps / loads ---------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Storage, sampler, writer, batch size, the generator's state (``"_rng"``: ``(state, device)``, or
        None without a generator) and the batches drawn ahead by ``prefetch`` (``"_prefetch_state"``, see
        ``prefetch_state.py``), all at one point in time: a buffer loading it gives the same batches next."""
        with self._futures_lock:  # batches in flight settle first: they use the sampler under _lock
            queued = self._settled_queue()
            with self._lock:
                gen = self._sampler.generator
                return {
                    "_storage": self._storage.state_dict(),
                    "_sampler": self._sampler.state_dict(),
                    "_writer": self._writer.state_dict(),
                    "_batch_size": self._batch_size,
                    "_rng": (gen.get_state().clone(), str(gen.device)) if gen is not None else None,
                    "_prefetch_state": prefetch_state.capture(queued, self._prefetch),
                }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; one without ``"_prefetch_state"`` (older states) leaves no batch in
        flight. A prefetch state saved with another ``prefetch`` is refused before anything changes."""
        queued = state_dict.get("_prefetch_state")
        prefetch_state.check(queued, self._prefetch)
        with self._futures_lock:
            self._drain()
            with self._lock:
                self._storage.load_state_dict(state_dict["_storage"])
                self._sampler.load_state_dict(state_dict["_sampler"])
                self._writer.load_state_dict(state_dict["_writer"])
                rng = state_dict.get("_rng")
                if rng is not None:
                    gen = self._sampler.generator
                    if gen is None:
                        gen = torch.Generator(device=rng[1])
                        self.set_rng(gen)
                    gen.set_state(rng[0])
                if queued is not None:
                    self._queue.extend(prefetch_state.settled(queued["queue"]))

    def dumps(self, path: str | Path) -> None:
        """Save storage, sampler, writer (and generator) state under the directory ``path``.

        Tensor storages are written as a tensordict memmap tree, metadata as JSON, sampler state with
        ``torch.save`` (loaded back with ``weights_only=True``). Read-only dataset storages are not
        copied: only the sampler and writer state are saved. With ``prefetch``, the batches already in
        flight are saved too (``prefetch.pt``; not when they hold objects other than tensors and
        TensorDicts), so the loaded buffer gives the same batches next.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        # batches in flight settle before _lock is taken (they sample under it)
        with self._futures_lock, self._settled_then_locked() as settled:
            queued = prefetch_state.to_file_form(prefetch_state.capture(settled, self._prefetch, False))
            if queued is not None:
                torch.save(queued, path / "prefetch.pt")
            else:  # batches of Python objects: not saved (the loaded buffer samples on from the sampler)
                (path / "prefetch.pt").unlink(missing_ok=True)
            if not getattr(self._storage, "read_only", False):  # read-only builds are not copied
                self._storage.dumps(path / "storage")  # with the storage's checkpointer
            torch.save(self._sampler.state_dict(), path / "sampler.pt")
            gen = self._sampler.generator
            if gen is not None:
                torch.save({"state": gen.get_state()}, path / "generator.pt")
            write_json_atomic(path / "writer.json", self._writer.state_dict())
            write_json_atomic(
                path / "buffer.json",
                {
                    "format": _FORMAT,
                    "version": 1,
                    "storage": type(self._storage).__name__,
                    "sampler": type(self._sampler).__name__,
                    "writer": type(self._writer).__name__,
                    "batch_size": self._batch_size,
                    "len": len(self),
                    "write_count": self.write_count,
                },
            )

    def loads(self, path: str | Path) -> None:
        """Restore what :meth:`dumps` saved into this buffer (built with the same component kinds)."""
        path = Path(path)
        meta_path = path / "buffer.json"
        if not meta_path.exists():
            raise FileNotFoundError(
                f"{path} holds no dumped replay buffer (no buffer.json): pass a path written by dumps()"
            )
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != _FORMAT:
            raise ValueError(f"{meta_path} is not a datasets_hub replay-buffer dump")
        for part, obj in (("sampler", self._sampler), ("writer", self._writer)):
            if meta[part] != type(obj).__name__:
                raise ValueError(
                    f"{path} was dumped with a {meta[part]} but this buffer has a {type(obj).__name__}: "
                    f"build the buffer with a {meta[part]} to load it"
                )
        queued = None
        if (path / "prefetch.pt").exists():
            queued = prefetch_state.from_file_form(torch.load(path / "prefetch.pt", weights_only=True))
            prefetch_state.check(queued, self._prefetch)
        self._drain()
        with self._futures_lock, self._lock:
            if queued is not None:
                self._queue.extend(prefetch_state.settled(queued["queue"]))
            if (path / "storage").exists() and not getattr(self._storage, "read_only", False):
                self._storage.loads(path / "storage")
            self._sampler.load_state_dict(torch.load(path / "sampler.pt", weights_only=True))
            gen = self._sampler.generator
            if gen is not None and (path / "generator.pt").exists():
                gen.set_state(torch.load(path / "generator.pt", weights_only=True)["state"])
            self._writer.load_state_dict(json.loads((path / "writer.json").read_text()))


class TensorDictReplayBuffer(ReplayBuffer):
    """A ``ReplayBuffer`` of TensorDicts whose samples carry ``"index"`` and the sampler's info.

    Every tensor in the sampler's info whose first dim equals the batch (``"_weight"``,
    ``("next", "truncated")``, ...) is written into the sample. ``"index"`` and ``"_weight"`` in
    data being written are dropped (they describe a previous sample), and ``extend`` sets
    ``"index"`` in the caller's TensorDict, as TorchRL does, so ``update_tensordict_priority`` works.
    When the data holds ``priority_key`` and the sampler is prioritized, ``extend`` sets the priorities.
    """

    def __init__(
        self, *, priority_key: str | tuple[str, ...] = "td_error", reduction: str = "max", **kwargs: Any
    ) -> None:
        check_reduction(reduction)
        self._priority_key = priority_key
        self._reduction = reduction
        super().__init__(**kwargs)

    def _gather(
        self,
        index: torch.Tensor,
        info: dict[str, Any],
        items: torch.Tensor | None = None,
        rows: np.ndarray | None = None,
    ) -> Any:
        if rows is not None and self._collate_fn is None:  # the sampler vouched: every info entry is per item
            return self._storage.gather_valid(index, rows, info)
        if isinstance(index, tuple):  # a multi-dimensional storage: (t, e, ...) of each item
            n = index[0].shape[0]
            info = {**info, "index": torch.stack(index, -1)}
            if items is not None:
                index = items  # the same items, flat: one read per leaf, no index conversion
        else:
            n = index.shape[0] if index.ndim else None
        extra = {k: v for k, v in info.items() if isinstance(v, torch.Tensor) and v.ndim and v.shape[0] == n}
        if self._collate_fn is None:
            return self._storage.gather(index, extra)  # the storage's contract: one build with the extras
        return attach_extras(self._collate_fn(self._storage.get(index)), extra)

    def _strip(self, data: Any) -> Any:
        if isinstance(data, TensorDictBase):
            drop = [k for k in ("index", "_weight") if k in data.keys()]
            if drop:
                data = data.exclude(*drop)
        return data

    def add(self, data: Any) -> int:
        raw = data
        self._check_priorities(raw)  # before writing: a refused add writes nothing
        index = super().add(self._strip(data))
        self._priorities_from(raw, torch.tensor([index]), single=True)
        return index

    def extend(self, data: Any) -> torch.Tensor:
        raw = data
        self._check_priorities(raw)  # before writing: a refused extend writes nothing (a retry never doubles rows)
        index = super().extend(self._strip(data))
        self._priorities_from(raw, index)
        if isinstance(raw, TensorDictBase) and not raw.is_locked and raw.batch_dims >= 1:
            n = raw.batch_size[0]
            if index.numel() == n:  # an extend longer than the capacity kept only its tail
                try:
                    value = index.reshape(n, *([1] * (raw.batch_dims - 1))).expand(raw.batch_size)
                    raw.set("index", value.clone())
                except (RuntimeError, ValueError):
                    pass  # a read-only or exotic TensorDict: the index is still returned
        return index

    # -- priorities carried by TensorDicts --------------------------------------------------------

    @property
    def priority_key(self) -> str | tuple[str, ...]:
        return self._priority_key

    def _has_priorities(self) -> bool:
        return type(self._sampler).update_priority is not Sampler.update_priority

    def _check_priorities(self, data: Any) -> None:
        """Refuse NaN, infinite or negative priorities in ``data`` before anything is written."""
        if not isinstance(data, TensorDictBase) or not self._has_priorities():
            return
        priority = data.get(self._priority_key, None)
        if priority is None:
            return
        priority = torch.as_tensor(priority).detach()
        if priority.is_floating_point() and (not torch.isfinite(priority).all() or (priority < 0).any()):
            raise ValueError(
                f"{self._priority_key!r} holds NaN, inf or a negative value: priorities must be finite and >= 0 "
                "(pass absolute TD errors, e.g. td_error.abs()); nothing was written"
            )

    def _priorities_from(self, data: Any, index: torch.Tensor, single: bool = False) -> None:
        if not isinstance(data, TensorDictBase) or not self._has_priorities():
            return
        priority = data.get(self._priority_key, None)
        if priority is None:
            return
        priority = priority.reshape(1, *priority.shape) if single else priority
        if getattr(self._storage, "ndim", 1) > 1:
            raise NotImplementedError(
                f"priorities in the data ({self._priority_key!r}) on a multi-dimensional storage are not supported: "
                "extend without them, then call update_priority(index, priority) with the returned index"
            )
        priority = _reduce(priority, self._reduction)[-index.numel() :]
        if self._writer.may_drop_items:  # items a TensorDictMaxValueWriter declined have no row
            kept = index >= 0
            index, priority = index[kept], priority[kept]
        self.update_priority(index, priority)

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Update priorities from a sample: reads ``"index"`` and ``priority_key``, one value per item
        (extra dims reduced with ``reduction``)."""
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"update_tensordict_priority needs a TensorDict, got {type(data).__name__}")
        index = data.get("index", None)
        if index is None:
            raise KeyError(
                "the TensorDict has no 'index' entry: pass a sample from this buffer (samples carry 'index')"
            )
        priority = data.get(self._priority_key, None)
        if priority is None:
            raise KeyError(
                f"the TensorDict has no {self._priority_key!r} entry (this buffer's priority_key): "
                "write the new priorities there, e.g. td.set('td_error', loss.detach())"
            )
        if index.ndim > 1 and getattr(self._storage, "ndim", 1) == 1:
            index = index.reshape(index.shape[0], -1)[:, 0]
        priority = _reduce(priority.detach(), self._reduction)
        anchors = data.get("anchor_index", None)
        if anchors is not None:  # a Sequence sample: one priority per anchor, the max over its valid records
            index, priority = _per_anchor(anchors, priority, data.get("validity_mask", None))
        self.update_priority(index, priority)


def _per_anchor(
    anchors: torch.Tensor, priority: torch.Tensor, valid: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The anchors of a windowed sample (``Sequence``) and, for each, the max priority of its valid records
    (of all its records when none is valid): padding never lowers or raises another anchor's priority."""
    anchors = as_index(anchors).reshape(-1)
    priority = priority.reshape(-1).to(torch.float64)
    unique, group = torch.unique(anchors, return_inverse=True)
    fill = torch.full((unique.numel(),), -torch.inf, dtype=torch.float64)
    best_any = fill.scatter_reduce(0, group, priority, reduce="amax")
    if valid is None:
        return unique, best_any
    masked = torch.where(valid.reshape(-1).to(torch.bool), priority, torch.full_like(priority, -torch.inf))
    best_valid = fill.scatter_reduce(0, group, masked, reduce="amax")
    return unique, torch.where(torch.isinf(best_valid), best_any, best_valid)


def _prioritized_sampler(
    storage: Storage, alpha: float, beta: float, eps: float, reduction: str, dtype: torch.dtype
) -> Sampler:
    return PrioritizedSampler(storage.max_size, alpha, beta, eps=eps, dtype=dtype, reduction=reduction)


class PrioritizedReplayBuffer(ReplayBuffer):
    """``ReplayBuffer`` with a ``PrioritizedSampler(alpha, beta, eps)``; samples' info carry ``"_weight"``."""

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        storage: Storage | None = None,
        **kwargs: Any,
    ) -> None:
        if "sampler" in kwargs:
            raise TypeError("PrioritizedReplayBuffer builds its own PrioritizedSampler: do not pass sampler=")
        storage = ListStorage(1000) if storage is None else storage
        super().__init__(
            storage=storage, sampler=_prioritized_sampler(storage, alpha, beta, eps, "max", dtype), **kwargs
        )


class TensorDictPrioritizedReplayBuffer(TensorDictReplayBuffer):
    """``TensorDictReplayBuffer`` with a ``PrioritizedSampler``; priorities come from ``priority_key``."""

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        priority_key: str | tuple[str, ...] = "td_error",
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        storage: Storage | None = None,
        reduction: str = "max",
        **kwargs: Any,
    ) -> None:
        if "sampler" in kwargs:
            raise TypeError("TensorDictPrioritizedReplayBuffer builds its own PrioritizedSampler: do not pass sampler=")
        storage = ListStorage(1000) if storage is None else storage
        super().__init__(
            storage=storage,
            sampler=_prioritized_sampler(storage, alpha, beta, eps, reduction, dtype),
            priority_key=priority_key,
            reduction=reduction,
            **kwargs,
        )


def _stack(batches: list[Any]) -> Any:
    """``k`` batches of equal size stacked along a new first dim (``sample_many``)."""
    if isinstance(batches[0], (torch.Tensor, TensorDictBase)):
        return torch.stack(batches)
    return _pytree.tree_map(lambda *xs: torch.stack(xs), *batches)


def _reduce(priority: torch.Tensor, reduction: str) -> torch.Tensor:
    """One priority per item: reduce every dim after the first."""
    return priority if priority.ndim <= 1 else reduce_trailing(priority.reshape(priority.shape[0], -1), reduction)
