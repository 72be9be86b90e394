"""Which chunks of a local copy are resident: fetching, verifying and writing them, and evicting them.

A local copy of a published build (see :mod:`datasets_hub.remote.open_url`) has the build's sparse leaf files
and, per leaf, a residency map with one byte per chunk. :class:`Chunks` makes chunks resident: it
fetches the missing ones (concurrently, through :class:`~datasets_hub.remote.files.RemoteFolder`),
checks each against the sha256 in ``published.json``, decodes it with zarr, writes its rows, and only
then sets its byte. Under a byte budget (``max_bytes``) it evicts least recently used chunks first
(their disk space is given back by punching holes), never a chunk that is pinned (a pool's episodes)
or that the read in progress needs. Processes share a copy: changing residency holds an exclusive
``flock`` on the copy's ``residency.lock``.

Reads take no lock and make no system call once their chunks are resident (:meth:`Chunks.read`): the
residency maps are shared mappings, checked with one vectorised lookup per leaf (none at all for a leaf
this process saw wholly resident), and evictions are ordered against reads by a sequence counter in the
copy (``resident/evictions.seq``, a seqlock): an evicting process makes it odd before it unclaims a chunk
and even again after the hole is punched; a read that saw an odd value, or a different value after its
gather, reads again. A read that evictions keep racing reads under the shared lock, and after a few lost
races (another process evicting its chunks between each fetch and its read) fetches and reads under the
exclusive lock, so that it always finishes. A chunk is only ever claimed after its bytes are written, so
a chunk written by another process is found in the shared map, and one that is half written is never
claimed. A process killed during an eviction leaves the counter odd; the next exclusive lock repairs it.

A copy that some process fills wholly (``resident="full"``) is never evicted from: the filling process
holds a shared ``flock`` on ``resident/full.lock`` from before its first fetch until the copy is marked
complete (:meth:`Chunks.holding_full`), and an eviction first checks that nobody holds it, and that the
copy is not complete. Another process's ``max_bytes`` is then not enforced on the shared copy (the copy
is becoming whole anyway); without this, its evictions punched holes into chunks the fill had counted in,
and the fill's final check against the manifest's sha256 failed.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from datasets_hub.build.format import EPISODES, FRAMES, HISTORY, leaf_path
from datasets_hub.cache.remote_copies import COMPLETE
from datasets_hub.errors import CacheError, DownloadError, InvalidParameter
from datasets_hub.files import open_rw_nofollow, real_dirs, write_bytes_atomic
from datasets_hub.remote.files import RemoteFolder
from datasets_hub.remote.format import PUBLISHED, numpy_dtype, require_zarr

FETCH_TRIES = 3
_GROUP_BYTES = 64 << 20  # decoded bytes fetched before they are written: bounds the memory a large read takes
_OPTIMISTIC_READS = 4  # lock-free tries of a read that evictions keep racing, before it takes the shared lock
_SHARED_READS = 4  # tries under the shared lock, before the read fetches and reads under the exclusive lock
_FULL_CHECK_EVERY = 64  # reads of a leaf between two checks of whether all its chunks are resident
SEQUENCE = "evictions.seq"  #: under ``resident/``: the eviction sequence counter (int64, even when no eviction runs)
FULL_HOLD = "full.lock"  #: under ``resident/``: share-locked by every process filling the copy (``resident="full"``)

T = TypeVar("T")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def map_path(copy: Path, name: str) -> Path:
    """The residency map of leaf ``name`` in the local copy at ``copy`` (one byte per chunk)."""
    leaf_path(copy, name)  # refuses a name that would leave the copy
    return copy / "resident" / (name + ".map")


def row_bytes_of(spec: dict[str, Any]) -> int:
    """Bytes of one row of a published array (``published.json``'s ``arrays`` entry)."""
    return int(np.prod(spec["shape"], dtype=np.int64)) * numpy_dtype(spec["dtype"]).itemsize


def always_resident(name: str) -> bool:
    """Leaves fetched whole when a copy is opened and never evicted: the episode index (samplers need all
    of it), history frames (a few per episode at most) and the offsets of compressed frames (8 bytes a
    frame: a read must know which bytes of the blob hold its frames before it can fetch them)."""
    return name.startswith((EPISODES + "/", HISTORY + "/")) or (
        name.startswith(FRAMES + "/") and name.endswith("/offsets")
    )


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
        self._pid = -1
        self._lock_fd = -1
        self._thread_lock = threading.RLock()
        self._decode_lock = threading.Lock()
        self._after_fork()
        self.fetched_bytes = 0
        # chunks a pool holds (count of its episodes that need each): eviction never takes them
        self.pins: dict[str, np.ndarray] = {
            name: np.zeros(int(s["chunks"]), np.int32) for name, s in self.arrays.items()
        }
        self.chunk_rows: dict[str, int] = {}
        # plain views of the shared maps (indexing an np.memmap costs a subclass wrap per call)
        self._views: dict[str, np.ndarray] = {}
        # least recently used order under a budget: the tick of each chunk's last use in this process (0: never)
        self._used: dict[str, np.ndarray] = {}
        self._tick = 0
        for name, spec in self.arrays.items():
            residency = map_path(path, name)
            real_dirs(path, residency.parent)  # refuses a symlinked folder on the way (and the leaf's, below)
            real_dirs(path, leaf_path(path, name).parent)
            with open_rw_nofollow(residency) as handle:  # a planted link is refused, never written through
                self.maps[name] = np.memmap(handle, dtype=np.uint8, mode="r+", shape=(max(1, int(spec["chunks"])),))
            self._views[name] = self.maps[name].view(np.ndarray)
            self._used[name] = np.zeros(max(1, int(spec["chunks"])), np.int64)
            self.row_bytes[name] = row_bytes_of(spec)
            self.chunk_rows[name] = int(spec["chunk_rows"])
        self._sequence = _open_sequence(path / "resident" / SEQUENCE)
        # leaves seen wholly resident, valid while the eviction sequence keeps the value it is stored with
        self._full: tuple[int, frozenset[str]] = (-1, frozenset())
        self._reads_since_check: dict[str, int] = dict.fromkeys(self.arrays, 0)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)

    def _after_fork(self) -> None:
        """A forked child (a DataLoader worker) gets its own lock file description (``flock`` locks belong to
        the description, which a fork shares) and fresh thread locks (another thread may have held them)."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._thread_lock = threading.RLock()
        self._decode_lock = threading.Lock()
        self._lock_fd = os.open(self.path / "residency.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)

    @contextlib.contextmanager
    def locked(self, exclusive: bool) -> Iterator[None]:
        """The cross-process residency lock: exclusive to change residency, shared to read rows with no
        eviction possible meanwhile. Taking it exclusively repairs an eviction sequence left odd by a process
        killed while it evicted (the lock is free again, so no eviction is running)."""
        self._after_fork()
        with self._thread_lock:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                if exclusive and int(self._sequence[0]) & 1:
                    self._sequence[0] += 1
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def holding_full(self) -> Iterator[None]:
        """While inside, no process evicts from this copy (see the module docstring): for a fill of every
        chunk. Taken under the exclusive residency lock, so that no eviction that began before it (and did
        not see it) is still unclaiming chunks when the fill starts checking which are resident."""
        fd = os.open(self.path / "resident" / FULL_HOLD, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            with self.locked(exclusive=True):
                fcntl.flock(fd, fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # releases the hold (a process killed meanwhile releases it too)

    def _eviction_allowed(self) -> bool:
        """False while a process fills this copy wholly, or once it is complete: its chunks must all stay."""
        if (self.path / COMPLETE).exists():
            return False
        fd = os.open(self.path / "resident" / FULL_HOLD, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
        # checked again: a fill that finished between the two checks marked the copy complete, then let go
        return not (self.path / COMPLETE).exists()

    # -- reads ------------------------------------------------------------------------------------
    def read(self, names: Iterable[str], needed: Callable[[], dict[str, np.ndarray]], gather: Callable[[], T]) -> T:
        """``gather()`` with every chunk it reads resident: the fast path of every read of a local copy.

        ``names`` are the leaves ``gather`` reads; ``needed()`` gives their chunk numbers (per leaf, repeats
        allowed) and is called only when some leaf of ``names`` is not known to be wholly resident. Once the
        chunks are resident this takes no lock and makes no system call: one vectorised lookup per leaf in
        the shared maps (none for a wholly resident leaf), and two loads of the eviction sequence around the
        gather, which is redone if an eviction ran meanwhile (see the module docstring). Missing chunks are
        fetched first (:meth:`ensure`)."""
        names = tuple(names)
        chunks: dict[str, np.ndarray] | None = None
        for _ in range(_OPTIMISTIC_READS):
            sequence = int(self._sequence[0])
            if sequence & 1:  # an eviction is running, or was killed: wait for it (or repair it), then retry
                with self.locked(exclusive=True):
                    pass
                continue
            seen, full = self._full
            if seen != sequence or not full.issuperset(names):
                if chunks is None:
                    chunks = {name: np.asarray(c, dtype=np.int64) for name, c in needed().items()}
                if self.max_bytes is not None:
                    self._touch(chunks)
                if not self._resident(chunks, sequence):
                    self.ensure(chunks)
                    continue
            out = gather()
            if int(self._sequence[0]) == sequence:  # no eviction started since the check: every byte was there
                return out
        # evictions keep racing this read: read under the shared lock, which no eviction can hold with us
        if chunks is None:
            chunks = {name: np.asarray(c, dtype=np.int64) for name, c in needed().items()}
        for _ in range(_SHARED_READS):
            self.ensure(chunks)
            with self.locked(exclusive=False):
                if self._resident(chunks, int(self._sequence[0])):
                    return gather()
        # another process evicts this read's chunks between each fetch and the shared lock (a busy evictor
        # under a small budget): fetch and read under the exclusive lock, which always finishes
        with self.locked(exclusive=True):
            self.ensure(chunks, lock_held=True)
            return gather()

    def _resident(self, chunks: dict[str, np.ndarray], sequence: int) -> bool:
        """Whether every chunk in ``chunks`` is resident (read after the eviction ``sequence`` was read); leaves
        found wholly resident are remembered for that sequence value."""
        seen, full = self._full
        if seen != sequence:
            full = frozenset()
        grown = full
        for name, numbers in chunks.items():
            if name in full:
                continue
            view = self._views[name]
            if numbers.size and not view.take(numbers).all():
                return False
            self._reads_since_check[name] += 1
            if self._reads_since_check[name] >= _FULL_CHECK_EVERY:
                self._reads_since_check[name] = 0
                if view[: int(self.arrays[name]["chunks"])].all():
                    grown = grown | {name}
        if grown is not full or seen != sequence:
            self._full = (sequence, grown)
        return True

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
            self.keep_metadata(meta_path, self.folder.read(meta_path, self._declared_bytes(meta_path)))
            meta = self._local_metadata(name)
        meta = self._verified(meta_path, meta or b"")
        self._prototype = default_buffer_prototype()
        contents: dict[str, Any] = {"zarr.json": self._prototype.buffer.from_bytes(meta)}
        try:
            array = zarr.open_array(MemoryStore(contents), mode="r")
        except Exception as exc:  # noqa: BLE001 - zarr's errors on bad metadata vary: one clear refusal
            raise CacheError(
                f"{self.folder.shown}: {meta_path} is not zarr v3 array metadata ({type(exc).__name__}: {exc}); "
                "export the build again"
            ) from None
        self._check_layout(name, array)
        self._decoders[name] = (array, contents)
        return array, contents

    def _check_layout(self, name: str, array: Any) -> None:
        """Refuse a leaf whose publishing record disagrees with its hash-checked zarr metadata: rows would be
        read at the wrong offsets (zeros, or other rows) without a word."""
        spec = self.arrays[name]
        rows, shape = int(spec["rows"]), tuple(int(d) for d in spec["shape"])
        want_chunks = (int(spec["chunk_rows"]) if rows else 1, *shape)
        got = {"shape": tuple(array.shape), "chunks": tuple(array.chunks), "dtype": str(array.dtype)}
        want = {"shape": (rows, *shape), "chunks": want_chunks, "dtype": str(numpy_dtype(spec["dtype"]))}
        wrong = [k for k in want if got[k] != want[k]]
        if wrong:
            raise CacheError(
                f"{self.folder.shown}: the published build is inconsistent: {PUBLISHED} says leaf {name!r} has "
                + ", ".join(f"{k} {want[k]}" for k in wrong)
                + ", its sha256-checked zarr metadata says "
                + ", ".join(f"{k} {got[k]}" for k in wrong)
                + "; nothing was served: export the build again"
            )

    def check_layouts(self) -> None:
        """Check every leaf's zarr metadata against the publishing record (see :meth:`_check_layout`)."""
        for name in self.arrays:
            self._decoder(name)

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
        real_dirs(self.path, target.parent)
        write_bytes_atomic(target, data)

    def _declared_bytes(self, relpath: str) -> int | None:
        """The size the publishing record gives ``relpath``: no read accepts more (None for a file it does not
        list, which :meth:`_verified` refuses by name)."""
        entry = self.files.get(relpath)
        return int(entry["bytes"]) if entry is not None else None

    def _verified(self, relpath: str, data: bytes) -> bytes:
        expected = self.files.get(relpath)
        if expected is None:
            raise CacheError(f"{self.folder.shown}: {relpath} is not listed in {PUBLISHED}; export the build again")
        if sha256_bytes(data) != expected["sha256"]:
            raise _Corrupt(relpath)
        return data

    def missing(self, name: str, chunks: np.ndarray) -> np.ndarray:
        """The chunks among ``chunks`` (repeats allowed) that are not resident, without repeats."""
        absent = chunks[self._views[name].take(chunks) == 0]
        return np.unique(absent) if len(absent) else absent

    def chunks_of_rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        """The chunk of each row (repeats kept: checking residency is cheaper than deduplicating)."""
        return rows // self.chunk_rows[name]

    def ensure(self, needed: dict[str, np.ndarray], *, lock_held: bool = False) -> None:
        """Make every chunk in ``needed`` (leaf -> chunk numbers) resident; fetch what is missing. Under a
        byte budget, chunks are evicted least recently used first, never one that ``needed`` names.
        ``lock_held``: the caller holds the exclusive lock (:meth:`locked`), so no other process evicts
        meanwhile and every chunk is resident on return; fetching then happens under that lock."""
        needed = {name: np.asarray(chunks, dtype=np.int64) for name, chunks in needed.items()}
        if self.max_bytes is not None:
            self._touch(needed)
        todo = {name: self.missing(name, chunks) for name, chunks in needed.items()}
        wanted = [(name, int(c)) for name, cs in todo.items() for c in cs.tolist()]
        if not wanted:
            return
        keep: dict[str, np.ndarray] = {}
        if self.max_bytes is not None:
            keep = {name: np.unique(chunks) for name, chunks in needed.items()}
            batch_bytes = sum(int(self._bytes_of(n, cs).sum()) for n, cs in keep.items() if not always_resident(n))
            if batch_bytes > self.max_bytes:
                raise InvalidParameter(
                    f"one read needs {batch_bytes:,} bytes of chunks but max_bytes={self.max_bytes:,}: raise "
                    "max_bytes (a few batches' worth at least) or sample smaller batches"
                )
        # in groups of bounded size (memory), each fetched, verified and decoded with no lock held (reads of
        # resident rows, a pool's sampling, go on meanwhile), then written under the exclusive lock
        group: list[tuple[str, int]] = []
        size = 0
        for item in wanted:
            group.append(item)
            size += self.chunk_bytes(*item)
            if size >= _GROUP_BYTES:
                self._fetch(group, keep, lock_held)
                group, size = [], 0
        if group:
            self._fetch(group, keep, lock_held)

    def pin(self, spans: dict[str, tuple[int, int]], delta: int) -> None:
        """Add ``delta`` (+1 or -1) to the pin count of chunks ``first..last`` of each leaf in ``spans``:
        a chunk with a positive count is never evicted."""
        self._after_fork()
        with self._thread_lock:
            for name, (first, last) in spans.items():
                self.pins[name][first : last + 1] += delta

    def chunk_bytes(self, name: str, chunk: int) -> int:
        spec = self.arrays[name]
        rows = min(int(spec["chunk_rows"]), int(spec["rows"]) - chunk * int(spec["chunk_rows"]))
        return max(0, rows) * self.row_bytes[name]

    def _bytes_of(self, name: str, chunks: np.ndarray) -> np.ndarray:
        """``chunk_bytes`` of each chunk number in ``chunks`` (the last chunk of a leaf may be short)."""
        per = self.chunk_rows[name]
        rows = np.clip(int(self.arrays[name]["rows"]) - chunks * per, 0, per)
        return rows * self.row_bytes[name]

    def _touch(self, needed: dict[str, np.ndarray]) -> None:
        """Mark ``needed``'s chunks as just used (one vectorised store per leaf; threads race it harmlessly:
        the order is a heuristic, never a guarantee)."""
        self._tick += 1
        for name, chunks in needed.items():
            self._used[name][chunks] = self._tick

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

    def _make_room(self, incoming: int, keep: dict[str, np.ndarray]) -> None:
        """Evict (under the exclusive lock) until ``incoming`` more bytes fit in ``max_bytes``: the chunks this
        process used least recently first, then those only other processes used, never a chunk in ``keep``,
        a pinned one or an always resident leaf. The eviction sequence is odd while chunks are unclaimed
        and their bytes dropped (see the module docstring)."""
        if self.max_bytes is None:
            return
        over = self.resident_bytes() + incoming - self.max_bytes
        if over <= 0 or not self._eviction_allowed():
            return
        leaves, numbers, orders = [], [], []
        never = np.iinfo(np.int64).max
        for name, view in self._views.items():
            if always_resident(name):
                continue
            resident = np.flatnonzero(view[: int(self.arrays[name]["chunks"])])
            spared = self.pins[name][resident] > 0
            if name in keep and keep[name].size:
                spared |= np.isin(resident, keep[name])
            resident = resident[~spared]
            if resident.size:
                used = self._used[name][resident]
                leaves.append(name)
                numbers.append(resident)
                orders.append(np.where(used > 0, used, never))
        if not leaves:
            return
        which = np.concatenate([np.full(n.size, i) for i, n in enumerate(numbers)])
        chunk = np.concatenate(numbers)
        order = np.lexsort((chunk, np.concatenate(orders)))  # least recently used first, then by chunk number
        sizes = np.concatenate([self._bytes_of(name, n) for name, n in zip(leaves, numbers, strict=True)])[order]
        take = order[: int(np.searchsorted(np.cumsum(sizes), over)) + 1]
        self._sequence[0] += 1  # odd: readers that started before this re-read, those that start now wait
        try:
            for i, name in enumerate(leaves):
                evicted = chunk[take[which[take] == i]]
                if not evicted.size:
                    continue
                self._views[name][evicted] = 0  # first unclaim, then drop the bytes
                self.maps[name].flush()
                for number, size in zip(evicted.tolist(), self._bytes_of(name, evicted).tolist(), strict=True):
                    _punch_hole(leaf_path(self.path, name), number * self.chunk_rows[name] * self.row_bytes[name], size)
        finally:
            self._sequence[0] += 1

    def _fetch(self, wanted: list[tuple[str, int]], keep: dict[str, np.ndarray], lock_held: bool = False) -> None:
        """Fetch, verify and decode ``wanted`` (3 tries each), then write what came, under the lock (taken
        here unless ``lock_held``); a chunk that could not be had intact raises :class:`DownloadError` after
        the others are written."""
        pending = {self.chunk_file(name, chunk): (name, chunk) for name, chunk in wanted}
        decoded: dict[tuple[str, int], tuple[np.ndarray, int]] = {}
        errors: dict[str, BaseException] = {}
        for _ in range(FETCH_TRIES):
            if not pending:
                break
            limits = {p: size for p in pending if (size := self._declared_bytes(p)) is not None}
            got = self.folder.read_many(list(pending), limits)
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
                decoded[(name, chunk)] = (self._decode(name, chunk, relpath, data), len(data))
                errors.pop(relpath, None)
        with contextlib.nullcontext() if lock_held else self.locked(exclusive=True):
            fresh = [key for key in decoded if not self._views[key[0]][key[1]]]  # another process may have
            if self.max_bytes is not None and fresh:
                spare = dict(keep)
                for name, chunk in fresh:
                    spare[name] = np.append(spare.get(name, np.zeros(0, np.int64)), chunk)
                self._make_room(sum(self.chunk_bytes(n, c) for n, c in fresh), keep=spare)
            for name, chunk in fresh:
                values, nbytes = decoded[(name, chunk)]
                self._write(name, chunk, values)
                self.fetched_bytes += nbytes
        if pending:
            relpath, error = next((p, errors.get(p)) for p in pending)
            raise DownloadError(
                f"{len(pending)} chunk(s) of {self.folder.shown} could not be fetched intact after {FETCH_TRIES} "
                f"tries (first: {relpath}: {error}); nothing unverified was served. Check the server, or retry"
            )

    def _decode(self, name: str, chunk: int, relpath: str, data: bytes) -> np.ndarray:
        """The rows of one verified chunk, decoded by zarr itself."""
        self._after_fork()
        with self._decode_lock:  # one in-memory store per leaf, shared by the threads of this process
            array, contents = self._decoder(name)
            key = relpath[len(f"data.zarr/{name}/") :]
            contents[key] = self._prototype.buffer.from_bytes(data)
            spec = self.arrays[name]
            start = chunk * int(spec["chunk_rows"])
            try:
                return np.ascontiguousarray(array[start : min(start + int(spec["chunk_rows"]), int(spec["rows"]))])
            finally:
                contents.pop(key, None)

    def _write(self, name: str, chunk: int, values: np.ndarray) -> None:
        """Write one decoded chunk into the leaf's file, then mark it resident (that order)."""
        start = chunk * int(self.arrays[name]["chunk_rows"])
        fd = os.open(leaf_path(self.path, name), os.O_WRONLY | os.O_NOFOLLOW)
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
        self._views[name][chunk] = 1  # a shared mapping: every process sees it, after the bytes


def _open_sequence(path: Path) -> np.ndarray:
    """The eviction sequence counter of a local copy (created at zero in a copy made before it existed)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        if os.fstat(fd).st_size < 8:
            os.ftruncate(fd, 8)  # growing only: two processes doing this at once lose nothing
        return np.memmap(path, dtype=np.int64, mode="r+", shape=(1,)).view(np.ndarray)
    finally:
        os.close(fd)


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
