"""TorchRL interop: a TorchRL ``TensorDictReplayBuffer`` over a dataset build, without copying it.

``to_torchrl(rb)`` (or ``rb.to_torchrl()``) wraps the buffer's read-only :class:`DatasetStorage`
in a TorchRL ``Storage`` subclass, ``TEDBuildStorage`` (made when torchrl is first imported), whose ``get`` is our gather: every
TorchRL sample reads the rows it needs straight from the build's memmap files, and
``("next", "observation")`` is gathered from row ``t + 1`` of the same observation file as
``observation`` (the lean-TED layout, docs/design/on-disk.md). Nothing is written, nothing is copied up front.

What is materialised, precisely:

- per sample: the sampled rows only (as with our own buffer);
- ``trb[:]`` / ``storage[:]``: the whole dataset as TED (observations gathered twice), because a
  TorchRL storage slice must be a TensorDict; avoid it on large builds;
- for a TorchRL ``SliceSampler`` passed in: its trajectory boundaries, once, from the build's
  ``episode`` column (8 bytes per transition). TorchRL's SliceSampler would otherwise read
  ``storage[:]`` on every ``sample()`` (unless ``cache_values=True``, then once); since a build
  never changes, :func:`to_torchrl` precomputes what the sampler's own ``trajectories=...,
  cache_values=True`` constructor path computes, and the sampler then samples exactly as TorchRL
  samples (its own code picks trajectories, starts and ``truncated`` markers). With ``end_key``,
  every episode's last row counts as an end too (an upstream episode may end without a done
  flag), so slices never cross episodes.

Needs ``torchrl`` (``pip install torchrl``), imported on first use only.
"""

from __future__ import annotations

import functools
import json
import warnings
from pathlib import Path
from typing import Any

import torch

from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import MissingDependency

_INSTALL = "pip install torchrl  (a torchrl release matching your tensordict, e.g. torchrl 0.14 with tensordict 0.14)"


def _torchrl():
    try:
        import torchrl.data as rl_data
        from torchrl.data.replay_buffers.samplers import SliceSampler
        from torchrl.data.replay_buffers.storages import Storage
        from torchrl.data.replay_buffers.writers import ImmutableDatasetWriter
    except ImportError as exc:
        raise MissingDependency(f"to_torchrl() needs TorchRL, which is not installed ({exc}); run: {_INSTALL}") from exc
    return rl_data, Storage, SliceSampler, ImmutableDatasetWriter


@functools.cache
def _storage_class() -> type:
    _, RLStorage, _, _ = _torchrl()

    class TEDBuildStorage(RLStorage):
        """A read-only TorchRL storage over one lean-TED build (see the module docstring).

        ``get`` delegates to :class:`DatasetStorage` (same memmap files, same TED samples);
        writes raise. Pickled, it holds the build by (path, fingerprint) and each process reopens
        the memmaps itself; ``dumps`` records that reference, not the data.
        """

        def __init__(self, storage: DatasetStorage) -> None:
            super().__init__(max_size=len(storage))
            self._build = storage
            self._ref = (str(storage.path), storage.manifest.get("fingerprint"))

        @property
        def build(self) -> DatasetStorage:
            """Our storage underneath (reopened by reference after unpickling)."""
            if self._build is None:
                from datasets_hub.interop.torch_data import open_build

                self._build = open_build(*self._ref)
            return self._build

        def get(self, index: Any) -> Any:
            if isinstance(index, tuple) and len(index) == 1:
                index = index[0]
            return self.build.get(index)

        def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
            raise RuntimeError(_READ_ONLY)

        def _empty(self) -> None:
            self.set(None, None)

        def __len__(self) -> int:
            return self.max_size

        def contains(self, item: Any) -> Any:
            if isinstance(item, int):
                return 0 <= item < len(self)
            item = torch.as_tensor(item)
            return (item >= 0) & (item < len(self))

        def state_dict(self) -> dict[str, Any]:
            return {"path": self._ref[0], "fingerprint": self._ref[1]}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            if state_dict.get("fingerprint") != self._ref[1]:
                raise ValueError(
                    f"this state belongs to build {state_dict.get('fingerprint')!r}, not {self._ref[1]!r}: "
                    "load it into a buffer over the same dataset build"
                )

        def dumps(self, path: str | Path) -> None:
            path = Path(path)
            path.mkdir(parents=True, exist_ok=True)
            (path / "build_reference.json").write_text(json.dumps(self.state_dict()))

        def loads(self, path: str | Path) -> None:
            self.load_state_dict(json.loads((Path(path) / "build_reference.json").read_text()))

        def __getstate__(self) -> dict[str, Any]:
            state = super().__getstate__()
            state["_build"] = None  # travel by reference: never pickle the memmapped columns
            return state

        def __repr__(self) -> str:
            return f"TEDBuildStorage(path={self._ref[0]!r}, transitions={self.max_size})"

    return _as_module_level(TEDBuildStorage)


def _as_module_level(cls: type) -> type:
    """Name a class made on first use as ``datasets_hub.interop.torchrl.<name>`` so pickle finds it
    (through the module ``__getattr__`` below, which makes it again in a fresh process)."""
    cls.__module__ = __name__
    cls.__qualname__ = cls.__name__
    return cls


def __getattr__(name: str) -> Any:
    if name == "TEDBuildStorage":
        return _storage_class()
    if name == "BuildWriter":
        return _writer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_READ_ONLY = (
    "this TorchRL buffer reads a read-only dataset build; to write, copy it into a TorchRL "
    "LazyMemmapStorage: trb2 = TensorDictReplayBuffer(storage=LazyMemmapStorage(n)); trb2.extend(trb[:n])"
)


@functools.cache
def _writer_class() -> type:
    _, _, _, immutable = _torchrl()

    class BuildWriter(immutable):
        """TorchRL's ImmutableDatasetWriter, with an error that says what to do instead."""

        WRITING_ERR = _READ_ONLY

    return _as_module_level(BuildWriter)


def _dataset_storage(source: Any) -> DatasetStorage:
    if isinstance(source, DatasetStorage):
        return source
    if isinstance(source, (str, Path)):
        from datasets_hub.interop.torch_data import open_build

        return open_build(source)
    storage = getattr(source, "storage", None)
    if isinstance(storage, DatasetStorage):
        return storage
    raise TypeError(
        f"to_torchrl() serves read-only dataset builds (a buffer from datasets_hub.load, a DatasetStorage or a "
        f"build directory); this buffer holds a {type(storage or source).__name__}. For an online buffer, build a "
        "TorchRL buffer directly and extend it with rb[:]"
    )


def _as_gathered(batch: Any) -> Any:
    return batch


def _end_signal(storage: DatasetStorage, keys: Any) -> torch.Tensor:
    """The sampler's end keys OR-ed, plus every episode's last row: an episode whose upstream end
    carries no done flag (end of data) still ends there, so no slice crosses into the next one."""
    done = torch.zeros(len(storage), dtype=torch.bool)
    done[storage.episode_index().end - 1] = True
    for key in keys:
        done |= storage.read_key(key).reshape(len(storage), -1).any(-1)
    return done


def _precompute_boundaries(sampler: Any, storage: DatasetStorage, slice_sampler_cls: type) -> None:
    """Give a TorchRL SliceSampler its trajectory boundaries from the build's cheap columns (see the
    module docstring); on any surprise leave it alone: it then reads ``storage[:]`` itself."""
    if not isinstance(sampler, slice_sampler_cls) or getattr(sampler, "fragmented", False):
        return
    cache = getattr(sampler, "_cache", None)
    if not isinstance(cache, dict) or "static-stop-and-length" in cache:
        return
    try:
        if getattr(sampler, "_fetch_traj", True):
            traj_key = sampler.traj_key if sampler.traj_key is not None else "episode"
            if traj_key not in ("episode", ("episode",)):
                return  # only the episode column is cheap; other keys would need a full read
            vals = sampler._find_start_stop_traj(trajectory=storage.read_key("episode"), at_capacity=True)
            sampler.traj_key = "episode"
            sampler._traj_key_auto = False
        else:
            keys = sampler.end_keys if getattr(sampler, "end_keys", None) is not None else (sampler.end_key,)
            vals = sampler._find_start_stop_traj(end=_end_signal(storage, keys), at_capacity=True)
        cache["static-stop-and-length"] = vals
        sampler.cache_values = True  # a build never changes: the boundaries stay valid
    except (AttributeError, KeyError, TypeError, RuntimeError) as exc:
        warnings.warn(
            f"could not precompute the SliceSampler's trajectories ({type(exc).__name__}: {exc}); it will read "
            "the whole build on each sample. Pass cache_values=True to read it once",
            stacklevel=3,
        )


def to_torchrl(source: Any, *, sampler: Any = None, batch_size: int | None = None, **kwargs: Any) -> Any:
    """A TorchRL ``TensorDictReplayBuffer`` over the same build as ``source``, without copying it.

    ``source``: a read-only buffer (``datasets_hub.load(...)``), a :class:`DatasetStorage` or a build
    directory. ``sampler``: any TorchRL sampler (default TorchRL's ``RandomSampler``); a TorchRL
    ``SliceSampler`` gets its trajectory boundaries from the build's episode index up front.
    ``batch_size`` defaults to the buffer's. Other keyword arguments (``transform``, ``prefetch``,
    ``pin_memory``, ``generator``...) go to TorchRL's constructor. Our buffer's own transforms and
    sampler are not carried over (they are datasets_hub objects); samples are the build's TED rows
    with TorchRL's ``"index"`` (and the sampler's info) added.
    """
    rl_data, _, slice_sampler_cls, _ = _torchrl()
    storage = _dataset_storage(source)
    if batch_size is None:
        batch_size = getattr(source, "batch_size", None)
    if sampler is None:
        sampler = rl_data.RandomSampler()
    _precompute_boundaries(sampler, storage, slice_sampler_cls)
    kwargs.setdefault("collate_fn", _as_gathered)  # our gathers already return one TensorDict per batch
    return rl_data.TensorDictReplayBuffer(
        storage=_storage_class()(storage), sampler=sampler, writer=_writer_class()(), batch_size=batch_size, **kwargs
    )
