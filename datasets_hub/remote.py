"""Open a published build from a URL, and sample from it before the download ends.

``load("hf://datasets/<org>/<repo>[@rev]")``, ``load("https://…/")``, ``load("s3://…/")`` and
``load("file:///…/")`` open a folder written by :func:`datasets_hub.publish.export`. Files are read through
fsspec (huggingface_hub's ``HfFileSystem``, fsspec's HTTP filesystem, ``s3fs``, the local filesystem).

The local copy is the same memory-mapped build the hub makes itself (``manifest.json`` + ``data/``),
under ``<cache>/remote/<url-hash>/<published-hash>/``, plus one residency map per leaf (one byte per
chunk). Opening fetches ``published.json``, the manifest and the episode index (kilobytes); chunks follow:

- ``resident="full"`` (default): a background thread fetches every chunk; a batch that needs a chunk
  not yet there fetches it first. When all chunks are in and every leaf matches the manifest's sha256,
  the build is complete and later opens need no network.
- ``resident="lazy"``: only the chunks that batches touch are fetched; ``max_bytes`` bounds the resident
  data with least-recently-used eviction (holes are punched back into the sparse files).

Sampling is exactly uniform over the whole dataset in both modes: samplers see the full episode index,
and a batch waits for the chunks it needs. Trust and crash rules: every fetched chunk is checked against
the sha256 in ``published.json`` before it is written, a chunk's residency byte is set only after its
rows are written, so a process killed at any point leaves a map that claims only complete chunks; a
corrupt chunk is fetched again (3 tries) and never served. Processes on one machine share the local copy:
chunk writes and evictions hold an exclusive lock, gathers that could race an eviction hold a shared one.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import importlib.util
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from tensordict import TensorDict

from datasets_hub.cache import cache_root, file_lock
from datasets_hub.dataset_storage import DatasetStorage
from datasets_hub.errors import CacheError, DownloadError, InvalidParameter, MissingDependency
from datasets_hub.files import sha256_file, write_bytes_atomic
from datasets_hub.published_format import PUBLISHED, PUBLISHED_FORMAT, PUBLISHED_VERSION, numpy_dtype, require_zarr

REMOTE_SCHEMES = ("hf://", "http://", "https://", "s3://", "file://")
RESIDENT_MODES = ("full", "lazy")
COMPLETE = "complete"
_FETCH_TRIES = 3


def is_remote_url(dataset_id: str) -> bool:
    """Whether ``dataset_id`` names a published build by URL rather than a catalogue id."""
    return isinstance(dataset_id, str) and dataset_id.startswith(REMOTE_SCHEMES)


def redact_url(url: str) -> str:
    """``url`` without credentials or query string (signatures live there): safe to show and to hash."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}"


# -- reading files through fsspec -------------------------------------------------------------------
class RemoteFolder:
    """The files of one published folder, read through fsspec; ``read`` returns bytes."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.shown = redact_url(url)
        self.fs, self.root = _filesystem(url)

    def path(self, relpath: str) -> str:
        return f"{self.root.rstrip('/')}/{relpath}"

    def read(self, relpath: str) -> bytes:
        if _offline():
            raise DownloadError(
                f"{self.shown}/{relpath} is needed but DATASETS_HUB_OFFLINE=1: load it once with the network on "
                "(resident='full' keeps a complete copy), or unset DATASETS_HUB_OFFLINE"
            )
        try:
            return bytes(self.fs.cat_file(self.path(relpath)))
        except FileNotFoundError as exc:
            raise DownloadError(
                f"{self.shown}/{relpath} does not exist: is {self.shown} a build published by `datasets-hub export`?"
            ) from exc
        except Exception as exc:
            raise DownloadError(f"could not read {self.shown}/{relpath}: {type(exc).__name__}: {exc}") from exc

    def read_many(self, relpaths: list[str]) -> dict[str, bytes | Exception]:
        """Fetch several files concurrently (one fsspec call); errors are returned per file, not raised."""
        if len(relpaths) == 1:
            try:
                return {relpaths[0]: self.read(relpaths[0])}
            except DownloadError as exc:
                return {relpaths[0]: exc}
        if _offline():
            offline: Exception = DownloadError(f"chunks of {self.shown} are needed but DATASETS_HUB_OFFLINE=1")
            return dict.fromkeys(relpaths, offline)
        paths = {self.path(p): p for p in relpaths}
        try:
            got = self.fs.cat(list(paths), on_error="return")
        except Exception as exc:  # noqa: BLE001  (a backend that fails the whole call: reported per file)
            return dict.fromkeys(relpaths, exc)
        return {paths.get(k, k): (v if isinstance(v, Exception) else bytes(v)) for k, v in got.items()}


def _offline() -> bool:
    return os.environ.get("DATASETS_HUB_OFFLINE", "") not in ("", "0")


def _filesystem(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as exc:
        raise MissingDependency("loading a published build needs fsspec: pip install 'datasets-hub[remote]'") from exc
    if url.startswith("hf://"):
        from huggingface_hub import HfFileSystem

        rest = url[len("hf://") :].rstrip("/")
        if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
            raise DownloadError(
                f"{url} is on the Hugging Face Hub but HF_HUB_OFFLINE=1; unset it, or load with DATASETS_HUB_OFFLINE=1 "
                "to use a complete local copy"
            )
        if not rest.startswith(("datasets/", "models/", "spaces/")):
            raise InvalidParameter(f"{url!r}: a Hugging Face URL reads hf://datasets/<org>/<repo>[@revision]")
        return HfFileSystem(endpoint=os.environ.get("HF_ENDPOINT") or None), rest  # read at call time
    if url.startswith(("http://", "https://")):
        if importlib.util.find_spec("aiohttp") is None:  # fsspec's HTTP filesystem needs it
            raise MissingDependency("loading a build over HTTP needs aiohttp: pip install 'datasets-hub[remote]'")
        return fsspec.filesystem("http", block_size=0), url.rstrip("/")
    if url.startswith("s3://"):
        if importlib.util.find_spec("s3fs") is None:  # fsspec loads it by protocol
            raise MissingDependency("loading a build from S3 needs s3fs: pip install s3fs")
        # a fresh client per open: endpoint and credentials come from the AWS environment at call time
        return fsspec.filesystem("s3", skip_instance_cache=True), url[len("s3://") :].rstrip("/")
    if url.startswith("file://"):
        return fsspec.filesystem("file"), url[len("file://") :].rstrip("/")
    raise InvalidParameter(
        f"{url!r} is not a published-build URL; it must start with one of {', '.join(REMOTE_SCHEMES)}"
    )


# -- the local, partially resident copy -------------------------------------------------------------
def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _url_key(url: str) -> str:
    """The folder name of a URL's local copies (credentials and query signatures left out)."""
    return hashlib.sha256(redact_url(url).encode()).hexdigest()[:16]


def local_dir(url: str, published_sha256: str) -> Path:
    """Where the local copy of the build published at ``url`` (with this ``published.json``) lives."""
    return cache_root() / "remote" / _url_key(url) / published_sha256[:16]


def open_remote(url: str, *, resident: str = "full", max_bytes: int | None = None) -> DatasetStorage:
    """A read-only storage over the build published at ``url`` (see the module docstring)."""
    if resident not in RESIDENT_MODES:
        raise InvalidParameter(f"resident={resident!r}: choose one of {', '.join(map(repr, RESIDENT_MODES))}")
    if max_bytes is not None:
        if resident != "lazy":
            raise InvalidParameter("max_bytes= bounds a lazily resident build: pass resident='lazy' with it")
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
            raise InvalidParameter(f"max_bytes must be a positive integer number of bytes, got {max_bytes!r}")
    complete = _complete_copy(url)
    if complete is not None:
        return DatasetStorage(complete)
    require_zarr()
    folder = RemoteFolder(url)
    published_bytes = folder.read(PUBLISHED)
    published = _parse_published(published_bytes, folder.shown)
    path = local_dir(url, _sha256(published_bytes))
    _prepare(path, folder, published, published_bytes)
    if (path / COMPLETE).exists():
        return DatasetStorage(path)
    return ResidentStorage(path, folder, published, fill=resident == "full", max_bytes=max_bytes)


def _complete_copy(url: str) -> Path | None:
    """Offline (or any time): the newest complete local copy of ``url``, if one exists."""
    if not _offline():
        return None
    base = cache_root() / "remote" / _url_key(url)
    done = sorted((p.parent for p in base.glob(f"*/{COMPLETE}")), key=lambda p: p.stat().st_mtime)
    return done[-1] if done else None


def _parse_published(data: bytes, shown: str) -> dict[str, Any]:
    try:
        published = json.loads(data)
    except ValueError as exc:
        raise CacheError(
            f"{shown}/{PUBLISHED} is not JSON ({exc}): is this a folder written by `datasets-hub export`?"
        ) from exc
    if not isinstance(published, dict) or published.get("format") != PUBLISHED_FORMAT:
        raise CacheError(f"{shown}/{PUBLISHED} is not a datasets_hub publishing record; export the build again")
    if published.get("version") != PUBLISHED_VERSION:
        raise CacheError(
            f"{shown} was published in format version {published.get('version')}, this datasets_hub reads "
            f"{PUBLISHED_VERSION}: upgrade datasets_hub (pip install -U datasets-hub) or export the build again"
        )
    return published


def _safe_leaf(name: str, base: Path) -> Path:
    target = (base / (name + ".memmap")).resolve()
    if not str(target).startswith(str(base.resolve()) + os.sep):
        raise CacheError(f"the published schema names a leaf {name!r} outside the build: refusing it")
    return target


def _prepare(path: Path, folder: RemoteFolder, published: dict[str, Any], published_bytes: bytes) -> None:
    """Create the local copy's skeleton once (under a lock): manifest, sparse leaves, empty maps, episode index."""
    path.mkdir(parents=True, exist_ok=True)
    with file_lock(path.with_name(path.name + ".lock")):
        if (path / PUBLISHED).exists():
            return
        manifest_bytes = folder.read("manifest.json")
        if _sha256(manifest_bytes) != published.get("manifest_sha256"):
            raise DownloadError(
                f"{folder.shown}/manifest.json does not match the sha256 in {PUBLISHED}: the "
                "folder was modified after export or is being re-uploaded; retry later"
            )
        manifest = json.loads(manifest_bytes)
        if set(manifest.get("schema", {})) != set(published.get("arrays", {})):
            raise CacheError(f"{folder.shown}: manifest and {PUBLISHED} list different leaves; export it again")
        data = path / "data"
        resident = path / "resident"
        for name, spec in published["arrays"].items():
            leaf = _safe_leaf(name, data)
            leaf.parent.mkdir(parents=True, exist_ok=True)
            row_bytes = int(np.prod(spec["shape"], dtype=np.int64)) * numpy_dtype(spec["dtype"]).itemsize
            with open(leaf, "wb") as handle:  # sparse: only fetched chunks take disk space
                handle.truncate(int(spec["rows"]) * row_bytes)
            map_path = _safe_leaf(name, resident).with_suffix(".map")
            map_path.parent.mkdir(parents=True, exist_ok=True)
            with open(map_path, "wb") as handle:
                handle.truncate(max(1, int(spec["chunks"])))
        write_bytes_atomic(path / "manifest.json", manifest_bytes)
        # every leaf's zarr metadata in one concurrent fetch (a few hundred bytes each), kept locally
        metadata_files = [f"data.zarr/{name}/zarr.json" for name in published["arrays"]]
        chunks = Chunks(path, folder, published)
        for relpath, payload in folder.read_many(metadata_files).items():
            if isinstance(payload, BaseException):
                raise DownloadError(f"could not read {folder.shown}/{relpath}: {payload}") from payload
            chunks.keep_metadata(relpath, payload)
        # the episode index (kilobytes) comes now: samplers need all of it before the first batch
        chunks.ensure(
            {name: np.arange(spec["chunks"]) for name, spec in published["arrays"].items() if always_resident(name)}
        )
        chunks.close()
        write_bytes_atomic(path / PUBLISHED, published_bytes)  # last: a skeleton without it is redone


def always_resident(name: str) -> bool:
    """Leaves fetched whole when a copy is opened and never evicted: the episode index (samplers need all
    of it) and history frames (a few per episode at most)."""
    return name.startswith(("episodes/", "history/"))


class Chunks:
    """Residency of the chunks of one local copy: which are in, fetching and writing the missing ones,
    and least-recently-used eviction under a byte budget."""

    def __init__(
        self, path: Path, folder: RemoteFolder, published: dict[str, Any], max_bytes: int | None = None
    ) -> None:
        self.path = path
        self.folder = folder
        self.arrays: dict[str, dict[str, Any]] = published["arrays"]
        self.files: dict[str, dict[str, Any]] = published["files"]
        self.max_bytes = max_bytes
        self.maps: dict[str, np.memmap] = {}
        self.row_bytes: dict[str, int] = {}
        self._decoders: dict[str, tuple[Any, dict[str, Any]]] = {}
        self._prototype: Any = None
        self._lru: OrderedDict[tuple[str, int], int] = OrderedDict()
        self._lock_fd = os.open(path / "residency.lock", os.O_RDWR | os.O_CREAT, 0o644)
        self._thread_lock = threading.RLock()
        self.fetched_bytes = 0
        for name, spec in self.arrays.items():
            self.maps[name] = np.memmap(
                _safe_leaf(name, path / "resident").with_suffix(".map"),
                dtype=np.uint8,
                mode="r+",
                shape=(max(1, int(spec["chunks"])),),
            )
            self.row_bytes[name] = int(np.prod(spec["shape"], dtype=np.int64)) * numpy_dtype(spec["dtype"]).itemsize

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)

    @contextlib.contextmanager
    def locked(self, exclusive: bool) -> Iterator[None]:
        """The cross-process residency lock: exclusive to change residency, shared to read rows safely."""
        with self._thread_lock:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def chunk_file(self, name: str, chunk: int) -> str:
        array, _ = self._decoder(name)
        key = array.metadata.encode_chunk_key((int(chunk),) + (0,) * (len(self.arrays[name]["shape"])))
        return f"data.zarr/{name}/{key}"

    def _decoder(self, name: str) -> tuple[Any, dict[str, Any]]:
        """A zarr array over an in-memory store holding only this leaf's metadata, and that store's dict:
        a verified chunk is put into the dict to be decoded by zarr itself, then taken out again."""
        found = self._decoders.get(name)
        if found is not None:
            return found
        zarr = require_zarr()
        from zarr.core.buffer import default_buffer_prototype
        from zarr.storage import MemoryStore

        meta_path = f"data.zarr/{name}/zarr.json"
        meta = self._local_metadata(name)
        if meta is None:
            self.keep_metadata(meta_path, self.folder.read(meta_path))
            meta = self._local_metadata(name)
        meta = self._verified(meta_path, meta or b"")
        self._prototype = default_buffer_prototype()
        contents: dict[str, Any] = {"zarr.json": self._prototype.buffer.from_bytes(meta)}
        array = zarr.open_array(MemoryStore(contents), mode="r")
        self._decoders[name] = (array, contents)
        return array, contents

    def _metadata_path(self, name: str) -> Path:
        return self.path / "zarr-meta" / (name.replace("/", "__") + ".json")

    def _local_metadata(self, name: str) -> bytes | None:
        try:
            return self._metadata_path(name).read_bytes()
        except OSError:
            return None

    def keep_metadata(self, relpath: str, data: bytes) -> None:
        """Verify one leaf's ``zarr.json`` (``data.zarr/<leaf>/zarr.json``) and keep it in the local copy."""
        name = relpath[len("data.zarr/") : -len("/zarr.json")]
        self._verified(relpath, data)
        target = self._metadata_path(name)
        target.parent.mkdir(exist_ok=True)
        write_bytes_atomic(target, data)

    def _verified(self, relpath: str, data: bytes) -> bytes:
        expected = self.files.get(relpath)
        if expected is None:
            raise CacheError(f"{self.folder.shown}: {relpath} is not listed in {PUBLISHED}; export the build again")
        if _sha256(data) != expected["sha256"]:
            raise _Corrupt(relpath)
        return data

    def missing(self, name: str, chunks: np.ndarray) -> np.ndarray:
        """The chunks among ``chunks`` (repeats allowed) that are not resident, without repeats."""
        absent = chunks[self.maps[name][chunks] == 0]
        return np.unique(absent) if len(absent) else absent

    def chunks_of_rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        """The chunk of each row (repeats kept: checking residency is cheaper than deduplicating)."""
        return rows // int(self.arrays[name]["chunk_rows"])

    def ensure(self, needed: dict[str, np.ndarray]) -> None:
        """Make every chunk in ``needed`` (leaf -> chunk numbers) resident; fetch what is missing. Under a
        byte budget, chunks are evicted least recently used first, never one that ``needed`` names."""
        needed = {name: np.asarray(chunks, dtype=np.int64) for name, chunks in needed.items()}
        if self.max_bytes is not None:  # the LRU order wants each chunk once
            needed = {name: np.unique(chunks) for name, chunks in needed.items()}
            for name, chunks in needed.items():
                for chunk in chunks.tolist():
                    self._touch(name, chunk)
        todo = {name: self.missing(name, chunks) for name, chunks in needed.items()}
        if not any(len(c) for c in todo.values()):
            return
        with self.locked(exclusive=True):
            todo = {name: self.missing(name, c) for name, c in todo.items() if len(c)}  # another process may have
            wanted = [(name, int(c)) for name, cs in todo.items() for c in cs.tolist()]
            if not wanted:
                return
            if self.max_bytes is not None:
                keep = {(name, int(c)) for name, cs in needed.items() for c in cs.tolist()}
                batch_bytes = sum(self.chunk_bytes(n, c) for n, c in keep if not always_resident(n))
                if batch_bytes > self.max_bytes:
                    raise InvalidParameter(
                        f"one read needs {batch_bytes:,} bytes of chunks but max_bytes={self.max_bytes:,}: raise "
                        "max_bytes (a few batches' worth at least) or sample smaller batches"
                    )
                self._make_room(sum(self.chunk_bytes(n, c) for n, c in wanted), keep=keep)
            self._fetch(wanted)

    def chunk_bytes(self, name: str, chunk: int) -> int:
        spec = self.arrays[name]
        rows = min(int(spec["chunk_rows"]), int(spec["rows"]) - chunk * int(spec["chunk_rows"]))
        return max(0, rows) * self.row_bytes[name]

    def _touch(self, name: str, chunk: int) -> None:
        self._lru[(name, chunk)] = self.chunk_bytes(name, chunk)
        self._lru.move_to_end((name, chunk))

    def resident_bytes(self) -> int:
        total = 0
        for name, residency in self.maps.items():
            chunks = int(self.arrays[name]["chunks"])
            full = int(self.arrays[name]["chunk_rows"]) * self.row_bytes[name]
            count = int(np.count_nonzero(residency[:chunks]))
            total += count * full
            if chunks and residency[chunks - 1]:  # the last chunk may be short
                total -= full - self.chunk_bytes(name, chunks - 1)
        return total

    def _make_room(self, incoming: int, keep: set[tuple[str, int]]) -> None:
        if self.max_bytes is None:
            return
        over = self.resident_bytes() + incoming - self.max_bytes
        for key in list(self._lru):
            if over <= 0:
                break
            name, chunk = key
            if key in keep or always_resident(name) or not self.maps[name][chunk]:
                continue
            self.maps[name][chunk] = 0  # first unclaim, then drop the bytes
            self.maps[name].flush()
            _punch_hole(
                _safe_leaf(name, self.path / "data"),
                chunk * int(self.arrays[name]["chunk_rows"]) * self.row_bytes[name],
                self.chunk_bytes(name, chunk),
            )
            self._lru.pop(key, None)
            over -= self.chunk_bytes(name, chunk)
        # chunks resident from other processes (not in this LRU) are evicted too, oldest chunk number first
        if over > 0:
            for name, residency in self.maps.items():
                if always_resident(name):
                    continue
                for chunk in np.flatnonzero(residency).tolist():
                    if over <= 0:
                        return
                    if (name, chunk) in keep:
                        continue
                    residency[chunk] = 0
                    _punch_hole(
                        _safe_leaf(name, self.path / "data"),
                        chunk * int(self.arrays[name]["chunk_rows"]) * self.row_bytes[name],
                        self.chunk_bytes(name, chunk),
                    )
                    over -= self.chunk_bytes(name, chunk)

    def _fetch(self, wanted: list[tuple[str, int]]) -> None:
        pending = {self.chunk_file(name, chunk): (name, chunk) for name, chunk in wanted}
        errors: dict[str, BaseException] = {}
        for _ in range(_FETCH_TRIES):
            if not pending:
                break
            got = self.folder.read_many(list(pending))
            for relpath, data in got.items():
                if relpath not in pending:
                    continue
                if isinstance(data, BaseException):
                    errors[relpath] = data
                    continue
                try:
                    self._verified(relpath, data)
                except _Corrupt as exc:
                    errors[relpath] = exc
                    continue
                name, chunk = pending.pop(relpath)
                self._write(name, chunk, relpath, data)
                errors.pop(relpath, None)
        if pending:
            relpath, error = next((p, errors.get(p)) for p in pending)
            raise DownloadError(
                f"{len(pending)} chunk(s) of {self.folder.shown} could not be fetched intact after {_FETCH_TRIES} "
                f"tries (first: {relpath}: {error}); nothing unverified was served. Check the server, or retry"
            )

    def _write(self, name: str, chunk: int, relpath: str, data: bytes) -> None:
        """Decode one verified chunk into the leaf's file, then mark it resident (that order)."""
        array, contents = self._decoder(name)
        key = relpath[len(f"data.zarr/{name}/") :]
        contents[key] = self._prototype.buffer.from_bytes(data)
        spec = self.arrays[name]
        rows = int(spec["chunk_rows"])
        start = chunk * rows
        try:
            values = np.ascontiguousarray(array[start : min(start + rows, int(spec["rows"]))])
        finally:
            contents.pop(key, None)
        fd = os.open(_safe_leaf(name, self.path / "data"), os.O_WRONLY | os.O_NOFOLLOW)
        try:  # a plain write, not a store through a mapping: a full disk is an error here, never a SIGBUS
            os.pwrite(fd, values.tobytes(), start * self.row_bytes[name])
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise CacheError(
                    f"the disk holding {self.path} is full while writing a chunk of {self.folder.shown}; free "
                    "space, load with resident='lazy' and a smaller max_bytes, or point DATASETS_HUB_CACHE elsewhere"
                ) from exc
            raise
        finally:
            os.close(fd)
        self.maps[name][chunk] = 1
        self.fetched_bytes += len(data)

    def all_resident(self) -> bool:
        return all(
            bool(m[: max(1, int(self.arrays[n]["chunks"]))].all()) or int(self.arrays[n]["chunks"]) == 0
            for n, m in self.maps.items()
        )


class _Corrupt(Exception):
    def __init__(self, relpath: str) -> None:
        super().__init__(f"{relpath}: sha256 differs from the published record (corrupt or modified chunk)")


_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_libc: Any = None


def _punch_hole(path: Path, offset: int, length: int) -> None:
    """Give an evicted chunk's disk space back (the file keeps its size; the range reads as zeros)."""
    global _libc
    if length <= 0:
        return
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        if _libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length) != 0:
            os.pwrite(fd, bytes(length), offset)  # no hole punching on this filesystem: zero the range
    finally:
        os.close(fd)


class ResidentStorage(DatasetStorage):
    """A :class:`DatasetStorage` over a partially resident local copy: every read first makes the chunks
    it touches resident. Sampling is unchanged (and uniform): samplers see the whole episode index."""

    def __init__(
        self, path: Path, folder: RemoteFolder, published: dict[str, Any], *, fill: bool, max_bytes: int | None
    ) -> None:
        super().__init__(path)
        self.url = folder.shown
        self.chunks = Chunks(path, folder, published, max_bytes=max_bytes)
        layout = self.manifest["layout"]
        self._obs_leaves = ["obs/" + k for k in layout["obs"]]
        self._step_leaves = [name for name in published["arrays"] if name.startswith("steps/")]
        self._start_rows = np.ascontiguousarray(self.episode_index().start.numpy())
        ids = np.fromfile(path / "data" / "episodes" / "id.memmap", dtype=np.int64)
        self._episode_order = np.argsort(ids, kind="stable")
        self._episode_ids_sorted = ids[self._episode_order]
        self._filler: threading.Thread | None = None
        self._fill_error: BaseException | None = None
        self._stop = threading.Event()
        if fill:
            self._filler = threading.Thread(target=self._fill, name="datasets_hub-remote-fill", daemon=True)
            self._filler.start()

    # chunks a read of these transition rows needs
    def _needed(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        episode = np.searchsorted(self._start_rows, rows, side="right") - 1
        obs_rows = np.concatenate([rows + episode, rows + episode + 1]) if self._obs_leaves else rows
        needed = {name: self.chunks.chunks_of_rows(name, obs_rows) for name in self._obs_leaves}
        needed.update({name: self.chunks.chunks_of_rows(name, rows) for name in self._step_leaves})
        return needed

    def get(self, index: Any) -> TensorDict:
        if isinstance(index, (int, np.integer)):
            return self.get(np.asarray([int(index)]))[0]
        if isinstance(self._fill_error, CacheError):  # the published data is inconsistent: never serve it
            raise self._fill_error
        rows, _ = self._rows(index)
        self.chunks.ensure(self._needed(rows))
        if self.chunks.max_bytes is None:
            return super().get(index)
        with self.chunks.locked(exclusive=False):  # no eviction can drop these rows while we gather
            missing = any(len(self.chunks.missing(n, c)) for n, c in self._needed(rows).items())
            if not missing:
                return super().get(index)
        return self.get(index)  # evicted by another process in between: fetch again

    def read_key(self, key: str | tuple[str, ...]) -> Any:
        wanted = "/".join((key,) if isinstance(key, str) else key)
        self.chunks.ensure(
            {
                name: np.arange(int(self.chunks.arrays[name]["chunks"]))
                for name in self._step_leaves + self._obs_leaves
                if name.split("/", 1)[1] == wanted
            }
        )
        return super().read_key(key)

    def gather_key(self, key: str | tuple[str, ...], rows: Any, **kw: Any) -> Any:
        rows_np, _ = self._rows(rows)
        self.chunks.ensure(self._needed(rows_np))
        return super().gather_key(key, rows, **kw)

    def episode_frames(self, keys: list[Any], episode: Any, times: Any) -> Any:
        """Frames of whole episodes (what FrameStack reads): every chunk of those episodes' frame rows is
        made resident first."""
        ids = np.asarray(episode).reshape(-1)
        index = self.episode_index()
        ordinal = np.searchsorted(np.asarray(self._episode_ids_sorted), ids)
        ordinal = np.asarray(self._episode_order)[np.minimum(ordinal, len(self._episode_order) - 1)]
        starts = index.start.numpy()[ordinal] + ordinal
        lengths = index.length.numpy()[ordinal]
        rows = np.concatenate([np.arange(a, a + n + 1) for a, n in zip(starts.tolist(), lengths.tolist(), strict=True)])
        wanted = {"/".join(k) if not isinstance(k, str) else k for k in keys}
        self.chunks.ensure(
            {name: self.chunks.chunks_of_rows(name, rows) for name in self._obs_leaves if name[len("obs/") :] in wanted}
        )
        return super().episode_frames(keys, episode, times)

    # background fill (resident="full")
    def _fill(self) -> None:
        try:
            for name, spec in self.chunks.arrays.items():
                total = int(spec["chunks"])
                for begin in range(0, total, 16):
                    if self._stop.is_set():
                        return
                    self.chunks.ensure({name: np.arange(begin, min(total, begin + 16))})
            self._finish()
        except BaseException as exc:  # noqa: BLE001  (a thread's error, re-raised by wait_complete/sample)
            self._fill_error = exc

    def _finish(self) -> None:
        """Every chunk is in: check each leaf against the manifest's sha256, then mark the copy complete."""
        for name, spec in self.manifest["schema"].items():
            expected = spec.get("sha256")
            if expected is None:
                continue
            if sha256_file(_safe_leaf(name, self.path / "data")) != expected:
                raise CacheError(
                    f"{self.url}: leaf {name} does not match the manifest's sha256 once complete; "
                    "the published build is inconsistent: export it again"
                )
        write_bytes_atomic(self.path / COMPLETE, b"")

    def fill_status(self) -> dict[str, Any]:
        """Progress of the local copy: resident and total bytes, whether complete, and a fill error if any."""
        total = sum(
            self.chunks.chunk_bytes(n, c) for n, s in self.chunks.arrays.items() for c in range(int(s["chunks"]))
        )
        return {
            "resident_bytes": self.chunks.resident_bytes(),
            "total_bytes": total,
            "complete": (self.path / COMPLETE).exists(),
            "fetched_bytes": self.chunks.fetched_bytes,
            "error": None if self._fill_error is None else repr(self._fill_error),
        }

    def wait_complete(self, timeout: float | None = None) -> None:
        """Block until the background fill is done (``resident="full"``); raise its error if it failed."""
        if self._filler is None:
            raise InvalidParameter("wait_complete() needs resident='full'")
        self._filler.join(timeout)
        if self._fill_error is not None:
            raise self._fill_error
        if self._filler.is_alive():
            raise TimeoutError(f"{self.url} is still filling after {timeout} s")

    def close(self) -> None:
        self._stop.set()
        if self._filler is not None:
            self._filler.join()
        self.chunks.close()

    def __reduce__(self) -> Any:
        raise TypeError("a partially resident remote build cannot be pickled; load the URL in each process")
