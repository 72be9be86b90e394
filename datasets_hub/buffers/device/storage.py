"""A read-only storage whose every leaf and its episode index live in one device's memory.

Two layouts, both gathered on the device with no host synchronisation:

- *lean TED* (a hub build, see :mod:`datasets_hub.build.device`): per-step columns of ``N`` rows,
  observation-like *frames* stored once per episode with ``T + 1`` rows (``observation[t]`` and
  ``("next", observation)[t]`` are rows ``i + e`` and ``i + e + 1`` of the same array, one gather),
  and the derived keys of a build (``episode``, ``step``, root ``done``/``terminated``/``truncated``
  False, ``("next", "done") = terminated | truncated``), exactly as :class:`DatasetStorage` returns them;
- *flat* (:meth:`DeviceStorage.from_storage`): every leaf of any TensorDict storage, ``N`` rows each,
  returned as the source storage returns them.

The copy is refused (:class:`~datasets_hub.errors.InvalidParameter` naming the bytes needed and
free) when it would take more than :data:`~datasets_hub.buffers.device.memory.USABLE_FRACTION` of
the device's free memory. Tensors already on the device are used as they are (no copy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from datasets_hub.buffers.device.memory import as_device, check_fits
from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.storages import ReadOnlyStorage, Storage
from datasets_hub.errors import InvalidParameter

Key = tuple[str, ...]
_ROOT_FLAGS = ("done", "terminated", "truncated")
_COPY_CHUNK_BYTES = 1 << 26  # host -> device copies in 64 MiB pieces: no second full host copy


def _key(key: str | tuple[str, ...]) -> Key:
    return (key,) if isinstance(key, str) else tuple(key)


def _copy_to(value: torch.Tensor, device: torch.device, copy: bool = False) -> torch.Tensor:
    """``value`` on ``device``, copied in row chunks (a memmap is read piece by piece); a tensor
    already on ``device`` is used as it is unless ``copy``."""
    if value.device == device and not copy:
        return value
    out = torch.empty(value.shape, dtype=value.dtype, device=device)
    if value.ndim == 0 or value.numel() == 0:
        out.copy_(value)
        return out
    row_bytes = max(1, value[0].numel() * value.element_size())
    step = max(1, _COPY_CHUNK_BYTES // row_bytes)
    for lo in range(0, value.shape[0], step):
        out[lo : lo + step].copy_(value[lo : lo + step])
    return out


def _nbytes(values: Any, device: torch.device, copy: bool) -> int:
    return sum(v.numel() * v.element_size() for v in values if copy or v.device != device)


def _put(tree: dict[str, Any], key: Key, value: torch.Tensor) -> None:
    for part in key[:-1]:
        tree = tree.setdefault(part, {})
    tree[key[-1]] = value


class DeviceStorage(ReadOnlyStorage):
    """Read-only rows held on ``device`` (see the module docstring for the two layouts).

    ``columns``: per-row leaves (``transitions`` rows); ``frames``: per-episode leaves with
    ``transitions + num_episodes`` rows (lean TED), ``next_frames`` the frame keys that also give
    ``("next", key)``; ``episodes``: the episode index (host tensors, also kept on the device);
    ``episode_ids``: each episode's id (lean TED); ``derive_ted``: add a build's derived keys.
    ``copy=True`` copies tensors that are already on ``device`` too (a memmapped build into
    anonymous memory with ``device="cpu"``); else they are used as they are.
    ``get``/``gather`` take an int64 index on the device and never synchronise; an index given
    on the host (ints, lists, CPU tensors, slices) is checked there and copied over.
    """

    read_only_what = "device copy of a dataset"

    def __init__(
        self,
        device: str | torch.device,
        transitions: int,
        columns: Mapping[Key, torch.Tensor],
        *,
        frames: Mapping[Key, torch.Tensor] | None = None,
        next_frames: frozenset[Key] = frozenset(),
        episodes: EpisodeIndex | None = None,
        episode_ids: torch.Tensor | None = None,
        derive_ted: bool = False,
        what: str = "the device copy",
        copy: bool = False,
    ) -> None:
        dev = as_device(device)
        frames = dict(frames or {})
        n = int(transitions)
        num_eps = episodes.num_episodes if episodes is not None else 0
        for key, value in columns.items():
            if value.shape[0] != n:
                raise ValueError(f"column {'/'.join(key)} has {value.shape[0]} rows, expected {n}")
        if frames:
            if episodes is None:
                raise ValueError("per-episode frames need the episode index")
            for key, value in frames.items():
                if value.shape[0] != n + num_eps:
                    raise ValueError(f"frames {'/'.join(key)} have {value.shape[0]} rows, expected {n + num_eps}")
        if derive_ted and (episodes is None or episode_ids is None):
            raise ValueError("derive_ted=True needs the episode index and the episode ids")
        index_arrays = [episodes.start, episodes.length] if episodes is not None else []
        needed = _nbytes([*columns.values(), *frames.values(), *index_arrays], dev, copy)
        if episode_ids is not None:
            needed += _nbytes([episode_ids], dev, copy)
        check_fits(needed, dev, what)
        self.device = dev
        self.nbytes = needed
        self._n = n
        self._columns = {_key(k): _copy_to(v, dev, copy) for k, v in columns.items()}
        self._frames = {_key(k): _copy_to(v, dev, copy) for k, v in frames.items()}
        self._next_frames = frozenset(_key(k) for k in next_frames)
        self._episodes = (
            EpisodeIndex(episodes.start.to("cpu", torch.int64), episodes.length.to("cpu", torch.int64))
            if episodes is not None
            else None
        )
        self._episodes_dev = (
            EpisodeIndex(_copy_to(self._episodes.start, dev), _copy_to(self._episodes.length, dev))
            if self._episodes is not None
            else None
        )
        self._ids = _copy_to(episode_ids.to(torch.int64), dev, copy) if episode_ids is not None else None
        self._derive = bool(derive_ted)
        self._done: torch.Tensor | None = None
        self._flags: dict[Key, torch.Tensor | None] = {}
        self._zero_one = torch.arange(2, device=dev).unsqueeze(1)
        super().__init__(n)

    # -- construction from another storage --------------------------------------------------------
    @classmethod
    def from_storage(
        cls, storage: Storage, device: str | torch.device, *, episodes: EpisodeIndex | None = None
    ) -> DeviceStorage:
        """Every leaf of ``storage``'s valid rows, copied to ``device`` (one host read of the whole
        storage). ``episodes`` (default: ``storage.episode_index()``) is what slice samplers use."""
        if getattr(storage, "ndim", 1) > 1:
            raise InvalidParameter(
                f"{type(storage).__name__} is multi-dimensional (ndim={storage.ndim}); device sampling "
                "needs one row dimension: keep it on the host, or flatten the data into a 1-D storage first"
            )
        n = len(storage)
        if n == 0:
            raise InvalidParameter("the storage is empty: fill it before moving it to a device")
        data = storage.get(torch.arange(n))
        if not isinstance(data, TensorDictBase):
            raise InvalidParameter(
                f"{type(storage).__name__} returns {type(data).__name__}, not a TensorDict: only tensor "
                "data can live on a device (use a TensorStorage / LazyTensorStorage, or a hub build)"
            )
        columns: dict[Key, torch.Tensor] = {}
        for k, v in data.items(include_nested=True, leaves_only=True):
            if not isinstance(v, torch.Tensor):
                raise InvalidParameter(
                    f"leaf {'/'.join(_key(k))!r} holds {type(v).__name__}, not a tensor: only tensors can live on "
                    "a device (drop or encode that key before moving the buffer)"
                )
            columns[_key(k)] = v
        if episodes is None:
            episodes = storage.episode_index()
        return cls(device, n, columns, episodes=episodes, what=f"the device copy of {type(storage).__name__}")

    # -- the storage contract ---------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def episode_index(self) -> EpisodeIndex | None:
        """The episode index on the host (``start`` and ``length`` CPU tensors)."""
        return self._episodes

    def device_episode_index(self) -> EpisodeIndex | None:
        """The same episode index, its tensors on :attr:`device` (what device samplers read)."""
        return self._episodes_dev

    def keys(self) -> list[Key]:
        """Every key a sample holds."""
        keys = list(self._columns) + list(self._frames) + [("next", *k) for k in self._next_frames]
        if self._derive:
            keys += [("episode",), ("step",), ("next", "done"), *((f,) for f in _ROOT_FLAGS)]
        return keys

    def _rows(self, index: Any) -> tuple[torch.Tensor, tuple[int, ...]]:
        """``index`` as a flat int64 device tensor, plus the shape of the result. An index on the
        device is used as is (a sampler's); anything else is checked on the host first."""
        if isinstance(index, torch.Tensor) and index.device == self.device and index.dtype != torch.bool:
            if index.is_floating_point():
                raise TypeError(f"row indices must be integers, got {index.dtype}")
            return index.reshape(-1).to(torch.int64), tuple(index.shape)
        if isinstance(index, slice):
            rows_np = np.arange(self._n)[index]
        elif isinstance(index, (int, np.integer)):
            rows_np = np.asarray([int(index)])
        else:
            value = index.detach().cpu().numpy() if isinstance(index, torch.Tensor) else np.asarray(index)
            rows_np = np.flatnonzero(value) if value.dtype == np.bool_ else value
        shape = rows_np.shape
        if rows_np.dtype.kind not in "iu":
            raise TypeError(f"row indices must be integers, got {rows_np.dtype}")
        rows_np = rows_np.reshape(-1).astype(np.int64)
        if rows_np.size and (rows_np.max() >= self._n or rows_np.min() < -self._n):
            raise IndexError(f"index out of range for a storage of {self._n} rows")
        rows_np = np.where(rows_np < 0, rows_np + self._n, rows_np)
        return torch.from_numpy(rows_np).to(self.device), shape

    def _episode_of(self, rows: torch.Tensor) -> torch.Tensor:
        eps = self._episodes_dev
        assert eps is not None
        return torch.searchsorted(eps.start, rows, right=True) - 1

    def get(self, index: Any) -> TensorDict:
        single = isinstance(index, (int, np.integer))
        rows, shape = self._rows(index)
        b = rows.shape[0]
        root: dict[str, Any] = {}
        episode = self._episode_of(rows) if (self._frames or self._derive) else None
        if self._frames:
            assert episode is not None
            frame_rows = rows + episode
            both = (frame_rows.unsqueeze(0) + self._zero_one).reshape(-1)  # rows of t, then t+1: one read
            for key, column in self._frames.items():
                gathered = torch.index_select(column, 0, both)
                _put(root, key, gathered[:b])
                if key in self._next_frames:
                    _put(root, ("next", *key), gathered[b:])
        for key, column in self._columns.items():
            _put(root, key, torch.index_select(column, 0, rows))
        if self._derive:
            assert episode is not None and self._ids is not None and self._episodes_dev is not None
            nxt = root.setdefault("next", {})
            nxt["done"] = torch.logical_or(nxt["terminated"], nxt["truncated"])
            root["episode"] = torch.index_select(self._ids, 0, episode)
            root["step"] = rows - torch.index_select(self._episodes_dev.start, 0, episode)
            flags = torch.zeros((len(_ROOT_FLAGS), b, 1), dtype=torch.bool, device=self.device)
            for i, flag in enumerate(_ROOT_FLAGS):
                root[flag] = flags[i]
        out = device_tensordict(root, torch.Size([b]), self.device)
        if single:
            return out[0]
        return out.reshape(shape) if len(shape) != 1 else out

    def read_key(self, key: str | tuple[str, ...]) -> torch.Tensor:
        """One leaf over every row, on the device (``("next", "done")`` of a build is derived once and kept)."""
        key = _key(key)
        if key in self._columns:
            return self._columns[key]
        if self._derive and key == ("next", "done"):
            if self._done is None:
                self._done = self._columns[("next", "terminated")] | self._columns[("next", "truncated")]
            return self._done
        if self._derive and key == ("episode",) and self._episodes_dev is not None and self._ids is not None:
            return torch.repeat_interleave(self._ids, self._episodes_dev.length, output_size=self._n)
        return self.get(slice(None)).get(key)

    def flag_column(self, key: str | tuple[str, ...]) -> torch.Tensor | None:
        """``key`` as one bool per row (``[N]`` on the device) when it is stored or derived with at most one
        value per row, else None; kept after the first call."""
        key = _key(key)
        if key not in self._flags:
            column = None
            if key in self._columns or (self._derive and key == ("next", "done")):
                value = self.read_key(key)
                if value.ndim == 1 or (value.ndim == 2 and value.shape[1] == 1):
                    column = value.reshape(-1).to(torch.bool)
            self._flags[key] = column
        return self._flags[key]

    def __reduce__(self) -> Any:
        raise InvalidParameter(
            "a DeviceStorage is not pickled or deep-copied (it would copy the whole dataset, and CUDA memory does "
            "not travel to DataLoader workers or Ray actors): sample it in this process, or send the host buffer "
            "and move it to the device there"
        )

    def gather_key(self, key: str | tuple[str, ...], rows: torch.Tensor, *, episodes: Any = None) -> torch.Tensor:
        """One leaf at ``rows`` (an int64 device tensor), reading no other leaf where it can."""
        key = _key(key)
        rows, _ = self._rows(rows)
        if key in self._columns:
            return torch.index_select(self._columns[key], 0, rows)
        is_next = key[0] == "next"
        frame_key = key[1:] if is_next else key
        if frame_key in self._frames and (not is_next or frame_key in self._next_frames):
            episode = episodes if isinstance(episodes, torch.Tensor) else self._episode_of(rows)
            return torch.index_select(self._frames[frame_key], 0, rows + episode + int(is_next))
        if self._derive and key == ("next", "done"):
            return torch.index_select(self.read_key(key), 0, rows)
        value = self.get(rows).get(key, None)
        if value is None:
            raise KeyError(key)
        return value

    def device_frame_keys(self) -> frozenset[Key]:
        """The keys stored once per episode with ``T + 1`` rows (empty in the flat layout)."""
        return frozenset(self._frames)

    def frame_rows(self, episode: torch.Tensor, time: torch.Tensor) -> torch.Tensor | None:
        """Rows of the per-episode frames holding time ``time`` (``0 .. length``) of episode ordinals
        ``episode``, or None when this storage keeps no frames (flat layout)."""
        if not self._frames or self._episodes_dev is None:
            return None
        return torch.index_select(self._episodes_dev.start, 0, episode) + episode + time

    def gather_frames(self, key: str | tuple[str, ...], frame_rows: torch.Tensor) -> torch.Tensor:
        """Frames of ``key`` at ``frame_rows`` (from :meth:`frame_rows`)."""
        return torch.index_select(self._frames[_key(key)], 0, frame_rows)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None

    def __repr__(self) -> str:
        eps = self._episodes.num_episodes if self._episodes is not None else None
        return f"DeviceStorage(device={self.device}, transitions={self._n}, episodes={eps}, bytes={self.nbytes:,})"


def device_tensordict(tree: dict[str, Any], batch_size: torch.Size, device: torch.device) -> TensorDict:
    """Nested dict of device tensors of leading size ``batch_size`` -> TensorDict, without the checks
    the constructor would repeat on every sample (shapes and device are right by construction)."""
    source: dict[Any, Any] = {
        k: device_tensordict(v, batch_size, device) if isinstance(v, dict) else v for k, v in tree.items()
    }
    return TensorDict._new_unsafe(source, batch_size=batch_size, device=device)
