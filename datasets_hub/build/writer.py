"""The writer of the on-disk build format (lean TED, docs/design/on-disk.md): :class:`LeanTEDWriter`.

It appends loader chunks to the leaf files of a build's ``data/`` folder and returns the manifest's
content; the layout itself (constants, paths, the manifest checksum) belongs to
:mod:`datasets_hub.build.format`, the one reader (:func:`~datasets_hub.build.reader.open_build`) to
:mod:`datasets_hub.build.reader`. This module holds one concept: the build writer.

The writer knows nothing about any loader; chunks are checked against the TED contract as they
arrive, and each leaf is appended to its own file, so memory use is bounded by one chunk.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
import torch
from tensordict import MemoryMappedTensor, TensorDict, TensorDictBase

from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.feature_stats import FeatureStats
from datasets_hub.buffers.nested_keys import Key, as_key, key_to_str, parse_key
from datasets_hub.build import frame_h264
from datasets_hub.build.format import EPISODES, FRAMES, HISTORY, LEAF_SUFFIX, OBS, STEPS
from datasets_hub.build.frames import FrameCodec, FrameColumn, FrameEncoder, image_layout
from datasets_hub.build.memory import mapped_file, page_out
from datasets_hub.build.packed_steps import RECORD_NAME, RecordLayout
from datasets_hub.errors import InvalidParameter, TEDError

# -- the chunk keys the writer reads ------
FLAG_KEYS = (("next", "terminated"), ("next", "truncated"))
# keys the core derives itself; if a loader sends them they are ignored
DERIVED_KEYS = {("done",), ("terminated",), ("truncated",), ("step",), ("next", "done"), ("episode",)}
# optional bool [N] key of a chunk: True on rows that are only history frames of their episode
HISTORY_KEY = ("history",)


def equal_rows(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.is_floating_point():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


def _next_follows(now: torch.Tensor, nxt: torch.Tensor, episodes: EpisodeIndex) -> bool:
    """Whether ``nxt[t] == now[t + 1]`` inside every episode (NaN equal to NaN)."""
    if episodes.num_episodes <= 256:
        # long episodes: one allocation-free comparison per episode
        spans = zip(episodes.start.tolist(), episodes.end.tolist(), strict=True)
        if all(torch.equal(nxt[s : e - 1], now[s + 1 : e]) for s, e in spans):
            return True
    inner = torch.ones(now.shape[0], dtype=torch.bool)
    inner[episodes.end - 1] = False
    rows = torch.nonzero(inner).reshape(-1)
    return equal_rows(nxt[rows], now[rows + 1])


_RELEASE_MIN = 8 * 2**20  # smaller buffers are not worth a look at the process's mappings
_WRITE_SLICE = 32 * 2**20


def _release(buffer: memoryview | np.ndarray) -> None:
    """Drop the pages of a file-backed buffer from this process (the build's peak RSS stays one slice
    of the frames a loader hands over memory-mapped, not a whole episode of them); anything else is
    left alone. Best effort: nothing happens where the kernel lacks ``MADV_PAGEOUT``."""
    array = np.asarray(buffer)
    if array.nbytes >= _RELEASE_MIN and mapped_file(array.ctypes.data, array.nbytes):
        page_out(array.ctypes.data, array.nbytes)


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy()


class _BackgroundIO:
    """One worker thread that hashes and writes chunks while the loader reads the next ones
    (hashlib and file writes release the GIL). Writes run in submission order; at most
    ``max_pending`` writes and ``max_bytes`` bytes are queued (the newest write always is), so
    memory stays bounded by a few chunks, however large a chunk of image frames is."""

    def __init__(self, max_pending: int = 64, max_bytes: int = 64 << 20) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="datasets_hub-build-io")
        self._pending: deque[tuple[Future, int]] = deque()
        self._pending_bytes = 0
        self._max_pending = max_pending
        self._max_bytes = max_bytes

    def submit(self, fn: Callable[[], None], nbytes: int = 0) -> None:
        self._pending.append((self._pool.submit(fn), nbytes))
        self._pending_bytes += nbytes
        while len(self._pending) > 1 and (
            len(self._pending) > self._max_pending or self._pending_bytes > self._max_bytes
        ):
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        future, nbytes = self._pending.popleft()
        self._pending_bytes -= nbytes
        future.result()

    def drain(self) -> None:
        """Wait for every queued write; re-raise the first error (e.g. a full disk)."""
        while self._pending:
            self._wait_oldest()

    def close(self) -> None:
        try:
            self.drain()
        finally:
            self._pool.shutdown(wait=True)


class _LeafFile:
    """One append-only binary file per stored leaf, written by the background IO thread."""

    def __init__(self, path: Path, dtype: torch.dtype, row_shape: tuple[int, ...], io: _BackgroundIO) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.dtype = dtype
        self.row_shape = row_shape
        self.rows = 0
        self.sha256 = hashlib.sha256()  # recorded in the manifest so `datasets-hub verify` can spot tampering
        self._fh: BinaryIO = open(path, "wb")  # noqa: SIM115 - the column writer owns the handle until close()
        self._io = io

    @classmethod
    def resumed(
        cls, path: Path, dtype: torch.dtype, row_shape: tuple[int, ...], io: _BackgroundIO, rows: int, sha256: str
    ) -> _LeafFile | None:
        """The file as a checkpoint left it: cut back to ``rows`` rows and re-hashed (one sequential read);
        None when it is shorter or its bytes do not hash to ``sha256``."""
        leaf = cls.__new__(cls)
        leaf.path, leaf.dtype, leaf.row_shape, leaf.rows, leaf._io = path, dtype, row_shape, rows, io
        size = rows * int(np.prod(row_shape, dtype=np.int64)) * torch.empty(0, dtype=dtype).element_size()
        if not path.is_file() or path.stat().st_size < size:
            return None
        leaf._fh = open(path, "r+b")  # noqa: SIM115 - the column writer owns the handle until close()
        leaf._fh.truncate(size)
        leaf.sha256 = hashlib.sha256()
        while chunk := leaf._fh.read(_WRITE_SLICE):
            leaf.sha256.update(chunk)
        if leaf.sha256.hexdigest() != sha256:
            leaf._fh.close()
            return None
        return leaf

    def append(self, values: torch.Tensor) -> None:
        """Queue ``values`` for writing; the caller must not modify them afterwards."""
        buffer = _to_numpy(values).data.cast("B")
        mapped = buffer.nbytes >= _RELEASE_MIN and mapped_file(np.asarray(buffer).ctypes.data, buffer.nbytes)

        def write() -> None:
            if not mapped:
                self.sha256.update(buffer)
                self._fh.write(buffer)
                return
            for start in range(0, buffer.nbytes, _WRITE_SLICE):  # memory-mapped frames: slice by slice,
                part = buffer[start : start + _WRITE_SLICE]  # each slice's pages dropped once written
                self.sha256.update(part)
                self._fh.write(part)
                page_out(np.asarray(part).ctypes.data, part.nbytes)

        self._io.submit(write, buffer.nbytes)
        self.rows += values.shape[0]

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            self._fh.close()

    def read_back(self) -> torch.Tensor:
        """What was written so far."""
        self._io.drain()
        self._fh.flush()
        numel = self.rows * int(np.prod(self.row_shape, dtype=np.int64))
        flat = torch.from_file(str(self.path), shared=False, size=numel, dtype=self.dtype)
        return flat.view(self.rows, *self.row_shape)

    def mapped(self, dtype: np.dtype) -> np.ndarray:
        """What was written so far, mapped read-only (no copy in memory), as ``dtype``."""
        self._io.drain()
        self._fh.flush()
        if not self.rows:
            return np.zeros((0, *self.row_shape), dtype=dtype)
        return np.memmap(self.path, dtype=dtype, mode="r", shape=(self.rows, *self.row_shape))


class _FrameFile:
    """A compressed frame leaf being written (:mod:`datasets_hub.build.frames`): every row encoded on its own
    into ``frames/<key>/blob``, its end offset into ``frames/<key>/offsets`` (which starts with a 0)."""

    def __init__(self, data_dir: Path, key: Key, encoder: FrameEncoder, io: _BackgroundIO) -> None:
        folder = data_dir.joinpath(FRAMES, *key)
        self.key, self.encoder = key, encoder
        self.blob = _LeafFile(folder / ("blob" + LEAF_SUFFIX), torch.uint8, (), io)
        self.offsets = _LeafFile(folder / ("offsets" + LEAF_SUFFIX), torch.int64, (), io)
        self.offsets.append(torch.zeros(1, dtype=torch.int64))
        self.end = 0
        self.rows = 0

    @classmethod
    def resumed(cls, key: Key, encoder: FrameEncoder, blob: _LeafFile, offsets: _LeafFile) -> _FrameFile:
        """The leaf going on from its checkpointed files (the frames already encoded stay as they are)."""
        frame_file = cls.__new__(cls)
        frame_file.key, frame_file.encoder, frame_file.blob, frame_file.offsets = key, encoder, blob, offsets
        frame_file.end, frame_file.rows = blob.rows, offsets.rows - 1
        return frame_file

    def append(self, values: torch.Tensor) -> None:
        blobs, lengths = self.encoder.encode_rows(_to_numpy(values))
        ends = self.end + np.cumsum(lengths)
        self.end = int(ends[-1]) if ends.size else self.end
        self.blob.append(torch.frombuffer(bytearray(b"".join(blobs)), dtype=torch.uint8))
        self.offsets.append(torch.from_numpy(ends))
        self.rows += values.shape[0]

    def read_back(self) -> torch.Tensor:
        """Every frame written so far, decoded."""
        column = FrameColumn(
            "/".join(self.key),
            self.blob.read_back().numpy(),
            self.offsets.read_back().numpy(),
            self.encoder.codec.codec,
            self.encoder.layout,
            self.encoder.frame_shape,
        )
        return torch.from_numpy(column.take(np.arange(self.rows)))

    def leaves(self) -> dict[tuple[str, Key], _LeafFile]:
        return {(FRAMES, (*self.key, "blob")): self.blob, (FRAMES, (*self.key, "offsets")): self.offsets}

    def close(self) -> None:
        self.blob.close()
        self.offsets.close()


class LeanTEDWriter:
    """Append TED chunks (see :mod:`datasets_hub.loader`) to ``data_dir``; ``finish()`` seals it.

    Contract: chunks hold whole episodes; an episode id never repeats; done flags are only set
    on an episode's last row; every chunk has the same keys, dtypes and per-row shapes as the first.
    Violations raise :class:`TEDError` naming the key and what differs.
    """

    def __init__(self, data_dir: Path, frames: FrameCodec | None = None) -> None:
        self.data_dir = Path(data_dir)
        # camera keys (uint8 images, see frames.image_layout) are encoded row by row with this codec
        self.frames = frames if frames is not None and frames.compressed else None
        self.frame_files: dict[Key, _FrameFile] = {}
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.files: dict[tuple[str, Key], _LeafFile] = {}
        self._io = _BackgroundIO()
        self.obs_keys: list[Key] = []
        self.step_keys: list[Key] = []
        self.split_next: list[Key] = []  # obs-like keys whose next values are stored per step too
        self.num_transitions = 0
        self.episode_starts: list[torch.Tensor] = []
        self.episode_lengths: list[torch.Tensor] = []
        self.episode_ids: list[torch.Tensor] = []
        self.episode_returns: list[torch.Tensor] = []
        self.flag_counts = {"terminated": 0, "truncated": 0, "unflagged_end": 0}
        self._seen_ids: set[int] = set()
        self._schema: dict[Key, tuple[torch.dtype, tuple[int, ...]]] = {}  # from the first chunk
        self.history_rows = 0
        self.feature_stats = FeatureStats()  # per-key statistics, in the same pass as the writes
        # computed in a thread of their own, beside the loader and the writes (numpy and torch release
        # the GIL in their loops); one chunk in flight at most, so memory stays bounded
        self._stats_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="datasets_hub-build-stats")
        self._stats_pending: Future | None = None

    # -- schema -------------------------------------------------------------------------------
    def _classify(self, chunk: TensorDictBase) -> None:
        keys = [as_key(k) for k in chunk.keys(include_nested=True, leaves_only=True)]
        keyset = set(keys)
        for required in (("episode",), ("next", "reward"), *FLAG_KEYS):
            if required not in keyset:
                raise TEDError(
                    f"a TED chunk must have the key {key_to_str(required)!r}; the loader sent {sorted(map(key_to_str, keys))}"
                )
        for key in keys:
            if key in DERIVED_KEYS:
                continue
            if key[0] == "next":
                inner = key[1:]
                if inner in keyset and inner not in DERIVED_KEYS:
                    self.obs_keys.append(inner)
                else:
                    self.step_keys.append(key)
            elif ("next", *key) not in keyset:
                self.step_keys.append(key)
        self.obs_keys.sort()
        self.step_keys.sort()
        self._schema = {}
        for key in keys:
            value = chunk.get(key)
            if not isinstance(value, torch.Tensor):
                raise TEDError(f"key {key_to_str(key)!r} holds {type(value).__name__}; only tensors can be stored")
            self._schema[key] = (value.dtype, tuple(value.shape[1:]))
        for key in self.obs_keys:
            if self._schema[key] != self._schema[("next", *key)]:
                raise TEDError(
                    f"{key_to_str(key)!r} and {key_to_str(('next', *key))!r} differ in dtype/shape "
                    f"({self._schema[key]} vs {self._schema[('next', *key)]}); they must match"
                )
        if self.frames is not None:
            for key in self.obs_keys:
                dtype, shape = self._schema[key]
                layout = image_layout(dtype, shape)
                if layout is not None:
                    encoder = FrameEncoder(self.frames, layout, shape)
                    self.frame_files[key] = _FrameFile(self.data_dir, key, encoder, self._io)
            if not self.frame_files:  # asked for, and nothing to honour it on: never ignored silently
                found = {key_to_str(k): f"{str(self._schema[k][0]).replace('torch.', '')} {list(self._schema[k][1])}"
                         for k in self.obs_keys}  # fmt: skip
                raise InvalidParameter(
                    f"frames={self.frames.codec!r} (asked for, or chosen by frames=None from the loader's estimate "
                    "of the frame bytes): this dataset has no camera key to store compressed (an "
                    "observation-like uint8 image [H, W], [H, W, 1|3] or [1|3, H, W], at least 8 pixels a side); its "
                    f"observation-like keys are {found}. Load it with frames='raw'"
                )

    def _check_schema(self, chunk: TensorDictBase) -> None:
        keys = {as_key(k) for k in chunk.keys(include_nested=True, leaves_only=True)}
        if keys != set(self._schema):
            missing = sorted(map(key_to_str, set(self._schema) - keys))
            extra = sorted(map(key_to_str, keys - set(self._schema)))
            raise TEDError(f"chunk keys changed from the first chunk: missing {missing}, unexpected {extra}")
        for key, (dtype, shape) in self._schema.items():
            value = chunk.get(key)
            if value.dtype != dtype or tuple(value.shape[1:]) != shape:
                raise TEDError(
                    f"key {key_to_str(key)!r} is {value.dtype} {tuple(value.shape[1:])} per row in this chunk "
                    f"but was {dtype} {shape} in the first chunk"
                )

    def _file(self, group: str, key: Key) -> _LeafFile | _FrameFile:
        if group == OBS and key in self.frame_files:
            return self.frame_files[key]
        handle = self.files.get((group, key))
        if handle is None:
            source_key = ("next", *key[1:]) if group == STEPS and key[0] == "next" else key
            dtype, shape = self._schema[source_key]
            path = self.data_dir.joinpath(group, *key[:-1], key[-1] + LEAF_SUFFIX)
            handle = self.files[(group, key)] = _LeafFile(path, dtype, shape, self._io)
        return handle

    # -- writing ------------------------------------------------------------------------------
    def write(self, chunk: TensorDictBase) -> None:
        if chunk.batch_dims != 1 or chunk.batch_size[0] == 0:
            raise TEDError(f"a TED chunk must have batch size [N] with N >= 1, got {list(chunk.batch_size)}")
        history = None
        if HISTORY_KEY[0] in chunk.keys():
            chunk, history = _split_history(chunk)
        if not self._schema:  # the first chunk: classify its keys
            self._classify(chunk)
        else:
            self._check_schema(chunk)
        if history is not None and history.batch_size[0]:
            self._write_history(history)
        n = chunk.batch_size[0]
        episode = chunk.get("episode").reshape(n).to(torch.int64)
        local = EpisodeIndex.from_episode_ids(episode)
        ids = episode[local.start]
        self._check_episodes(ids)
        ends = local.end - 1
        terminated = chunk.get(("next", "terminated")).reshape(n).to(torch.bool)
        truncated = chunk.get(("next", "truncated")).reshape(n).to(torch.bool)
        done = terminated | truncated
        inner = done.clone()
        inner[ends] = False
        if inner.any():
            row = int(torch.nonzero(inner)[0])
            raise TEDError(
                f"episode {int(episode[row])} has a done flag at row {row} of its chunk but goes on; "
                "a loader must end an episode where terminated or truncated is set"
            )
        self.flag_counts["terminated"] += int(terminated[ends].sum())
        self.flag_counts["truncated"] += int((truncated[ends] & ~terminated[ends]).sum())
        self.flag_counts["unflagged_end"] += int((~done[ends]).sum())

        self._queue_stats(chunk)
        ep_local = torch.repeat_interleave(torch.arange(local.num_episodes), local.length)
        obs_rows = torch.arange(n) + ep_local  # where each time-t value lands in the T+1 layout
        final_rows = ends + torch.arange(local.num_episodes) + 1
        for key in self.obs_keys:
            now, nxt = chunk.get(key), chunk.get(("next", *key))
            if key not in self.split_next and not _next_follows(now, nxt, local):
                self._split(key)
            if now.device.type == "cpu" and now.is_contiguous() and nxt.is_contiguous():
                _release(_to_numpy(now))  # the comparison read every frame: drop memory-mapped ones
                _release(_to_numpy(nxt))
            if local.num_episodes == 1:
                # one episode (e.g. a long one of camera frames, possibly memory-mapped): append the rows
                # as views, without a T+1-row copy in memory
                self._file(OBS, key).append(now)
                self._file(OBS, key).append(nxt[n - 1 :])
            else:
                merged = torch.empty((n + local.num_episodes, *now.shape[1:]), dtype=now.dtype)
                merged.index_copy_(0, obs_rows, now)
                merged.index_copy_(0, final_rows, nxt[ends])
                self._file(OBS, key).append(merged)
            if key in self.split_next:
                self._file(STEPS, ("next", *key)).append(nxt)
        for key in self.step_keys:
            self._file(STEPS, key).append(chunk.get(key))

        reward = chunk.get(("next", "reward")).reshape(n, -1).sum(-1).to(torch.float64)
        returns = torch.zeros(local.num_episodes, dtype=torch.float64).index_add_(0, ep_local, reward)
        self.episode_starts.append(local.start + self.num_transitions)
        self.episode_lengths.append(local.length)
        self.episode_ids.append(ids)
        self.episode_returns.append(returns)
        self.num_transitions += n
        if len(self.episode_ids) >= 1024:  # one small tensor per chunk adds up over DROID's 95k episodes
            for entries in (self.episode_starts, self.episode_lengths, self.episode_ids, self.episode_returns):
                entries[:] = [torch.cat(entries)]

    def _queue_stats(self, chunk: TensorDictBase) -> None:
        if self._stats_pending is not None:
            self._stats_pending.result()  # re-raises its error
        self._stats_pending = self._stats_thread.submit(self._stats_of, chunk)

    def _stats_of(self, chunk: TensorDictBase) -> None:
        """The statistics of a chunk, then its memory-mapped frames dropped from memory again: the
        statistics may read them after the writes did (the build's RSS stays one chunk of frames)."""
        self.feature_stats.update(chunk)
        for key in self.obs_keys:
            for value in (chunk.get(key), chunk.get(("next", *key))):
                if value.device.type == "cpu" and value.is_contiguous():
                    _release(_to_numpy(value))

    def _write_history(self, history: TensorDictBase) -> None:
        """Append history rows (already checked by :func:`_split_history`): the root values of the
        observation-like keys, their episode id and their time (-k..-1 before the first transition)."""
        n = history.batch_size[0]
        episode = history.get("episode").reshape(n).to(torch.int64)
        local = EpisodeIndex.from_episode_ids(episode)
        time = torch.arange(n) - torch.repeat_interleave(local.end, local.length)
        for key in self.obs_keys:
            self._file(HISTORY, key).append(history.get(key))
        for name, values in (("episode", episode), ("time", time)):
            handle = self.files.get((HISTORY, (name,)))
            if handle is None:
                handle = self.files[(HISTORY, (name,))] = _LeafFile(
                    self.data_dir / HISTORY / (name + LEAF_SUFFIX), torch.int64, (), self._io
                )
            handle.append(values)
        self.history_rows += n

    def _check_episodes(self, ids: torch.Tensor) -> None:
        id_list = ids.tolist()
        if len(set(id_list)) != len(id_list):
            raise TEDError(
                "a chunk holds an episode in two separate runs of rows; rows of an episode must be contiguous"
            )
        repeated = self._seen_ids.intersection(id_list)
        if repeated:
            raise TEDError(
                f"episode id {min(repeated)} appears in two chunks; a loader must yield whole episodes "
                "with ids unique over the dataset"
            )
        self._seen_ids.update(id_list)

    def _split(self, key: Key) -> None:
        """Upstream next values of ``key`` differ from the following rows: store them per step from
        now on, and backfill the rows already written (where they did follow) from the obs file."""
        self.split_next.append(key)
        target = self._file(STEPS, ("next", *key))
        if self.num_transitions:
            stored = self._file(OBS, key).read_back()
            starts = torch.cat(self.episode_starts)
            lengths = torch.cat(self.episode_lengths)
            ep = torch.repeat_interleave(torch.arange(starts.numel()), lengths)
            target.append(stored[torch.arange(self.num_transitions) + ep + 1])

    # -- checkpoints (datasets_hub.build.resume) ------------------------------------------------
    def checkpoint(self) -> dict[str, Any]:
        """The state after every chunk written so far, with each queued write done and flushed: tensors
        and plain values that :meth:`resume` goes on from (each leaf's rows and the sha256 of its bytes,
        the episode index, the statistics, the frame encoders' counts)."""
        self._io.drain()
        if self._stats_pending is not None:
            self._stats_pending.result()
        leaves = {**self.files}
        for frame_file in self.frame_files.values():
            leaves.update(frame_file.leaves())
        for handle in leaves.values():
            handle.flush()
        starts, lengths = torch.cat(self.episode_starts), torch.cat(self.episode_lengths)
        return {
            "schema": [(list(k), str(d).replace("torch.", ""), list(shape)) for k, (d, shape) in self._schema.items()],
            "obs_keys": [list(k) for k in self.obs_keys],
            "step_keys": [list(k) for k in self.step_keys],
            "split_next": [list(k) for k in self.split_next],
            "files": [
                (group, list(key), str(h.dtype).replace("torch.", ""), list(h.row_shape), h.rows, h.sha256.hexdigest())
                for (group, key), h in leaves.items()
            ],
            "encoders": [(list(key), f.encoder.state()) for key, f in self.frame_files.items()],
            "num_transitions": self.num_transitions,
            "history_rows": self.history_rows,
            "flag_counts": dict(self.flag_counts),
            "episodes": {
                "start": starts,
                "length": lengths,
                "id": torch.cat(self.episode_ids),
                "return": torch.cat(self.episode_returns),
            },
            "feature_stats": self.feature_stats.state(),
        }

    @classmethod
    def resume(cls, data_dir: Path, state: dict[str, Any], frames: FrameCodec | None = None) -> LeanTEDWriter | None:
        """A writer going on from ``state`` (a :meth:`checkpoint`) over the files it describes.

        Each leaf file is cut back to its checkpointed length and re-hashed against its recorded sha256;
        files the checkpoint does not know (written after it, or by a ``finish`` that did not complete)
        are deleted. None when a file is missing, short or hashes otherwise: the build must start over.
        """
        writer = cls(data_dir, frames)
        writer._schema = {tuple(k): (getattr(torch, d), tuple(shape)) for k, d, shape in state["schema"]}
        writer.obs_keys = [tuple(k) for k in state["obs_keys"]]
        writer.step_keys = [tuple(k) for k in state["step_keys"]]
        writer.split_next = [tuple(k) for k in state["split_next"]]
        codec = writer.frames
        if state["encoders"] and codec is None:  # not this build's checkpoint (the codec is in the fingerprint)
            writer.abort()
            return None
        leaves: dict[tuple[str, Key], _LeafFile] = {}
        for group, parts, dtype, shape, rows, sha256 in state["files"]:
            path = writer.data_dir.joinpath(group, *parts[:-1], parts[-1] + LEAF_SUFFIX)
            leaf = _LeafFile.resumed(path, getattr(torch, dtype), tuple(shape), writer._io, rows, sha256)
            if leaf is None:
                for opened in leaves.values():
                    opened.close()
                writer.abort()
                return None
            leaves[(group, tuple(parts))] = leaf
        for parts, encoder_state in state["encoders"]:
            key = tuple(parts)
            layout, shape = image_layout(*writer._schema[key]) or "", writer._schema[key][1]
            encoder = FrameEncoder(cast(FrameCodec, codec), layout, shape)  # not None: checked above
            encoder.restore(encoder_state)
            blob, offsets = leaves.pop((FRAMES, (*key, "blob"))), leaves.pop((FRAMES, (*key, "offsets")))
            writer.frame_files[key] = _FrameFile.resumed(key, encoder, blob, offsets)
        writer.files = leaves
        kept = {leaf.path for leaf in leaves.values()}
        kept |= {leaf.path for f in writer.frame_files.values() for leaf in f.leaves().values()}
        for path in sorted(writer.data_dir.rglob("*"), reverse=True):  # children before their folders
            if path.is_file() and path not in kept:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
        writer.num_transitions = int(state["num_transitions"])
        writer.history_rows = int(state["history_rows"])
        writer.flag_counts = {k: int(v) for k, v in state["flag_counts"].items()}
        episodes = state["episodes"]
        writer.episode_starts, writer.episode_lengths = [episodes["start"]], [episodes["length"]]
        writer.episode_ids, writer.episode_returns = [episodes["id"]], [episodes["return"]]
        writer._seen_ids = set(episodes["id"].tolist())
        writer.feature_stats = FeatureStats.from_state(state["feature_stats"])
        return writer

    # -- sealing ------------------------------------------------------------------------------
    def finish(self) -> dict[str, Any]:
        """Close the files, write the tensordict metadata and the episode index; return the
        counts, schema and statistics for the manifest."""
        if self.num_transitions == 0:
            raise TEDError("the loader produced no transitions; check the dataset's parameters")
        starts = torch.cat(self.episode_starts)
        lengths = torch.cat(self.episode_lengths)
        returns = torch.cat(self.episode_returns)
        episodes = {"start": starts, "length": lengths, "id": torch.cat(self.episode_ids), "return": returns}
        for name, values in episodes.items():
            self.files[(EPISODES, (name,))] = _LeafFile(
                self.data_dir / EPISODES / (name + LEAF_SUFFIX), values.dtype, (), self._io
            )
            self.files[(EPISODES, (name,))].append(values)
        packed = self._write_packed(starts.numpy())
        for frame_file in self.frame_files.values():
            self.files.update(frame_file.leaves())
        if self._stats_pending is not None:
            self._stats_pending.result()
        self.close()
        tree: dict[str, Any] = {}
        for (group, key), handle in self.files.items():
            node = tree.setdefault(group, {})
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = MemoryMappedTensor.from_filename(
                str(handle.path), dtype=handle.dtype, shape=torch.Size([handle.rows, *handle.row_shape])
            )
        TensorDict(tree, batch_size=[]).memmap_(prefix=str(self.data_dir), existsok=True, robust_key=False)
        summary = self._summary(lengths, returns)
        if packed is not None:
            summary["layout"]["packed"] = packed.to_json()
        if self.frame_files:  # format 3: compressed frame leaves (datasets_hub.build.frames)
            summary["layout"]["frames"] = {
                key_to_str(key): {
                    "codec": f.encoder.codec.codec,
                    "quality": f.encoder.codec.quality,
                    "layout": f.encoder.layout,
                    "dtype": "uint8",
                    "shape": list(f.encoder.frame_shape),
                }
                for key, f in self.frame_files.items()
            }
            summary["stats"]["frames"] = {key_to_str(key): f.encoder.stats() for key, f in self.frame_files.items()}
        return summary

    def _write_packed(self, starts: np.ndarray, block: int = 1 << 20) -> RecordLayout | None:
        """Write the packed per-step records (``packed_steps.py``), block by block from the step files."""
        columns = {}
        for (group, key), handle in self.files.items():
            if group != STEPS:
                continue
            try:
                columns[key] = (handle, torch.empty(0, dtype=handle.dtype).numpy().dtype)
            except TypeError:  # no numpy twin (bfloat16): the leaf keeps its own gather
                continue
        layout = RecordLayout.plan(
            [(key, dtype, handle.row_shape) for key, (handle, dtype) in columns.items()], len(starts)
        )
        if layout is None:
            return None
        mapped = {f.key: columns[f.key][0].mapped(columns[f.key][1]) for f in layout.fields}
        record = self.files[(STEPS, parse_key(RECORD_NAME)[1:])] = _LeafFile(
            self.data_dir.joinpath(*parse_key(RECORD_NAME)).with_suffix(LEAF_SUFFIX),
            torch.uint8,
            (layout.width,),
            self._io,
        )
        for a in range(0, self.num_transitions, block):
            b = min(self.num_transitions, a + block)
            record.append(torch.from_numpy(layout.pack({k: v[a:b] for k, v in mapped.items()}, starts, a)))
        return layout

    def close(self) -> None:
        """Finish every queued write and close the files (also after a failed build)."""
        try:
            self._stats_thread.shutdown(wait=True)
            self._io.close()
        finally:
            for handle in self.files.values():
                handle.close()
            for frame_file in self.frame_files.values():
                frame_file.close()
            if self.frames is not None and self.frames.codec == "h264":
                frame_h264.release_encoders()  # the frame threads outlive the build; its encoders need not

    def abort(self) -> None:
        """Stop after a failure: wait for the IO thread, ignore its errors, close the files."""
        try:
            self.close()
        except Exception:  # noqa: BLE001 - the error that made us abort is the one worth reporting
            pass

    def _summary(self, lengths: torch.Tensor, returns: torch.Tensor) -> dict[str, Any]:
        def describe(values: torch.Tensor) -> dict[str, float]:
            values = values.to(torch.float64)
            return {
                "mean": float(values.mean()),
                "std": float(values.std(unbiased=False)),
                "min": float(values.min()),
                "max": float(values.max()),
            }

        schema = {}
        for (group, key), handle in sorted(self.files.items()):
            schema[f"{group}/{key_to_str(key)}"] = {
                "dtype": str(handle.dtype).replace("torch.", ""),
                "shape": list(handle.row_shape),
                "rows": handle.rows,
                "sha256": handle.sha256.hexdigest(),
            }
        return {
            "counts": {
                "transitions": self.num_transitions,
                "episodes": int(lengths.numel()),
                "episodes_terminated": self.flag_counts["terminated"],
                "episodes_truncated": self.flag_counts["truncated"],
                "episodes_unflagged_end": self.flag_counts["unflagged_end"],
            },
            "schema": schema,
            "layout": {
                "obs": [key_to_str(k) for k in self.obs_keys],
                "steps": [key_to_str(k) for k in self.step_keys],
                "next_stored_per_step": [key_to_str(k) for k in self.split_next],
                **({"history": [key_to_str(k) for k in self.obs_keys]} if self.history_rows else {}),
            },
            "stats": {
                "episode_return": describe(returns),
                "episode_length": describe(lengths),
                "features": self.feature_stats.result(),
            },
        }


def _split_history(chunk: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
    """``chunk`` without its history rows (and without the history key), and those rows.

    History rows must lead their episode: an episode's rows are k >= 0 history rows, then at least
    one transition. Anything else raises :class:`TEDError`.
    """
    n = chunk.batch_size[0]
    flag = chunk.get(HISTORY_KEY[0])
    if not isinstance(flag, torch.Tensor) or flag.dtype != torch.bool or flag.numel() != n:
        raise TEDError(
            f"the chunk key 'history' must be a bool tensor [N] (True on history-only rows), got "
            f"{getattr(flag, 'dtype', type(flag).__name__)} {list(getattr(flag, 'shape', []))}"
        )
    flag = flag.reshape(n)
    rest = chunk.exclude(HISTORY_KEY[0])
    if not flag.any():
        return rest, rest[:0]
    episode = chunk.get("episode").reshape(n).to(torch.int64)
    local = EpisodeIndex.from_episode_ids(episode)
    same = torch.zeros(n, dtype=torch.bool)
    same[1:] = episode[1:] == episode[:-1]
    late = flag & same & ~torch.cat([torch.zeros(1, dtype=torch.bool), flag[:-1]])
    if late.any():
        row = int(torch.nonzero(late)[0])
        raise TEDError(
            f"episode {int(episode[row])} has a history row (row {row} of its chunk) after one of its "
            "transitions; history rows must come before an episode's first transition"
        )
    only = flag[local.end - 1]
    if only.any():
        raise TEDError(
            f"episode {int(episode[local.start[torch.nonzero(only)[0]]])} holds history rows but no "
            "transition; history frames belong to the episode whose first transition follows them"
        )
    return rest[~flag], rest[flag]
