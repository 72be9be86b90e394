"""A partially resident local copy of a published build, as a read-only storage (``resident="full"`` and
``resident="lazy"``; the pool mode builds on it in :mod:`datasets_hub.remote.pool`).

:class:`ResidentStorage` is a :class:`~datasets_hub.build.storage.DatasetStorage` (the build is opened
by :func:`~datasets_hub.build.reader.open_build`, the one reader of the format) whose every read first
makes the chunks it touches resident (:class:`~datasets_hub.remote.chunks.Chunks`). Samplers see the
whole episode index, so sampling is exactly uniform over the dataset; a batch waits for its chunks.

Pickling (DataLoader workers, ``torch.multiprocessing``): the pickle carries the URL, the local copy's
path and the residency mode, never data. The receiving process reopens the same local copy (residency
maps and chunk files are shared on disk, under the copy's locks), so it fetches only chunks that are not
resident yet; the copy's background fill stays with the process that started it. A copy that became
complete in between reopens as a plain build.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from tensordict import TensorDict

from datasets_hub.build.format import FRAMES, OBS, STEPS, leaf_path
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.cache.remote_copies import hold_copy
from datasets_hub.errors import CacheError, InvalidParameter
from datasets_hub.files import sha256_file, write_bytes_atomic
from datasets_hub.redact import strip_url
from datasets_hub.remote.chunks import COMPLETE, Chunks, sha256_bytes
from datasets_hub.remote.files import RemoteFolder
from datasets_hub.remote.format import PUBLISHED, parse_published

T = TypeVar("T")


class ResidentStorage(DatasetStorage):
    """A :class:`DatasetStorage` over a partially resident local copy: every read first makes the chunks
    it touches resident. Sampling is unchanged (and uniform): samplers see the whole episode index.

    ``fill=True`` (``resident="full"``) starts a background thread fetching every chunk; ``max_bytes``
    (``resident="lazy"``) bounds the resident chunks with least-recently-used eviction.
    """

    resident_mode = "lazy"

    def __init__(
        self,
        path: Path,
        folder: RemoteFolder,
        published: dict[str, Any],
        *,
        fill: bool,
        max_bytes: int | None,
        resident: str | None = None,
    ) -> None:
        # held while this storage lives: `cache rm`/`prune` never remove a copy under a reader still writing it
        users = hold_copy(path)
        self._release_copy = weakref.finalize(self, os.close, users)
        if not (path / PUBLISHED).exists():
            self._release_copy()
            raise CacheError(
                f"the local copy {path} of {folder.shown} was removed (`datasets-hub cache rm` or `prune`) while "
                "it was being opened; load the URL again"
            )
        super().__init__(path)
        self.url = folder.shown
        self._folder_url = folder.url  # whole (a signed URL needs its query); pickled, never shown
        self.resident_mode = resident or ("full" if fill else "lazy")
        self.chunks = Chunks(path, folder, published, max_bytes=max_bytes)
        names = list(self.manifest["schema"])  # read by open_build, checked against the files
        # a compressed camera key is read from its blob (its offsets are always resident: remote_chunks.py)
        self._blobs = {f"{OBS}/{key}": f"{FRAMES}/{key}/blob" for key in self.manifest["layout"].get("frames", {})}
        self._obs_leaves = [name for name in names if name.startswith(OBS + "/")] + list(self._blobs.values())
        self._step_leaves = [name for name in names if name.startswith(STEPS + "/")]
        self._obs_set, self._step_set = frozenset(self._obs_leaves), frozenset(self._step_leaves)
        self._blob_set = frozenset(self._blobs.values())
        self._offsets_of: dict[str, np.ndarray] | None = None
        self._batch_leaves = self._leaves_of_batches()
        self._filler: threading.Thread | None = None
        self._fill_error: BaseException | None = None
        self._stop = threading.Event()
        if fill:
            self._filler = threading.Thread(target=self._fill, name="datasets_hub-remote-fill", daemon=True)
            self._filler.start()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, resident={self.resident_mode!r}, path={str(self.path)!r})"

    # -- pickling -----------------------------------------------------------------------------------
    def pickle_state(self) -> dict[str, Any]:
        """What a pickle carries: URL, local copy, residency mode and budget (never data)."""
        return {
            "url": self._folder_url,
            "path": str(self.path),
            "resident": self.resident_mode,
            "max_bytes": self.chunks.max_bytes,
            "fingerprint": self.manifest.get("fingerprint"),
        }

    def __reduce__(self) -> Any:
        return reopen_copy, (type(self), self.pickle_state())

    @classmethod
    def from_pickle_state(
        cls, path: Path, folder: RemoteFolder, published: dict[str, Any], state: dict[str, Any]
    ) -> ResidentStorage:
        """The storage a pickle of ``state`` comes back as: the same copy, no background fill of its own."""
        return cls(path, folder, published, fill=False, max_bytes=state["max_bytes"], resident=state["resident"])

    # -- reads: chunks first ----------------------------------------------------------------------
    def _leaves_of_batches(self) -> tuple[str, ...]:
        """The leaves a batch (``get``/``gather``) reads: observation leaves, and the packed per-step record
        with the per-step leaves it does not hold (every per-step leaf on a build without the record)."""
        if self._packed is None:
            return tuple(self._obs_leaves + self._step_leaves)
        packed = {"/".join(key) for key in self._packed.keys}
        steps = [name for name in self._step_leaves if name[len(STEPS) + 1 :] not in packed]
        return tuple(self._obs_leaves + steps)

    def _needed(self, rows: np.ndarray, names: tuple[str, ...]) -> dict[str, np.ndarray]:
        """The chunks (per leaf of ``names``, repeats kept) a read of these transition rows needs."""
        needed = {}
        obs_rows = None
        for name in names:
            if name in self._obs_set:
                if obs_rows is None:
                    episode = np.searchsorted(self._start_np, rows, side="right") - 1
                    obs_rows = np.concatenate([rows + episode, rows + episode + 1])
                needed[name] = self._chunks_of_frames(name, obs_rows)
            else:
                needed[name] = self.chunks.chunks_of_rows(name, rows)
        return needed

    def _chunks_of_frames(self, name: str, obs_rows: np.ndarray) -> np.ndarray:
        """The chunks of observation leaf ``name`` holding frame rows ``obs_rows``: of a compressed key's
        blob, every chunk its rows' bytes (``offsets[r]`` to ``offsets[r + 1]``) lie in."""
        if name not in self._blob_set:
            return self.chunks.chunks_of_rows(name, obs_rows)
        offsets = self._offsets[name]
        lo, hi = offsets[obs_rows], offsets[obs_rows + 1]
        size = self.chunks.chunk_rows[name]
        first, last = lo // size, np.maximum(hi - 1, lo) // size
        spans = last - first + 1
        return np.repeat(first, spans) + (np.arange(int(spans.sum())) - np.repeat(np.cumsum(spans) - spans, spans))

    @property
    def _offsets(self) -> dict[str, np.ndarray]:
        """Each blob's offsets (always resident, so readable as they are)."""
        if self._offsets_of is None:
            self._offsets_of = {
                blob: np.fromfile(leaf_path(self.path, blob[: -len("blob")] + "offsets"), dtype=np.int64)
                for blob in self._blob_set
            }
        return self._offsets_of

    def _read(self, rows: np.ndarray, gather: Callable[[], T], names: tuple[str, ...] | None = None) -> T:
        """``gather()`` once the chunks of ``names`` (default: a batch's leaves) at ``rows`` are resident."""
        if isinstance(self._fill_error, CacheError):  # the published data is inconsistent: never serve it
            raise self._fill_error
        names = self._batch_leaves if names is None else names
        return self.chunks.read(names, lambda: self._needed(rows, names), gather)

    def _reading(self, rows: np.ndarray) -> None:
        """Called with the rows of every batch read (``get``/``gather``); the pool counts reads outside it."""

    def get(self, index: Any) -> TensorDict:
        if isinstance(index, (int, np.integer)):
            return self.get(np.asarray([int(index)]))[0]
        rows, _ = self._rows(index)
        self._reading(rows)
        read = super().get
        return self._read(rows, lambda: read(index))

    def gather(self, index: torch.Tensor, extras: dict[Any, torch.Tensor] | None = None) -> TensorDict:
        if type(index) is not torch.Tensor or index.ndim not in (1, 2) or index.dtype != torch.int64:
            return super().gather(index, extras)  # the generic path, through get
        lead = None if index.ndim == 1 else (index.shape[0], index.shape[1])  # an ensemble's [k, m] batch
        rows, _ = self._rows(index.reshape(-1))
        self._reading(rows)
        return self._read(rows, lambda: self._gather_rows(rows, extras, lead))

    def read_key(self, key: str | tuple[str, ...]) -> Any:
        """One leaf over every row, as a copy: the build's own ``read_key`` maps the file, and a later eviction
        (by any process sharing the copy) would turn a mapped view's rows into zeros. Every chunk of the
        leaves it reads (``next/done``: the two flags it is derived from) is made resident first."""
        wanted = "/".join((key,) if isinstance(key, str) else key)
        sources = {"next/done": ("next/terminated", "next/truncated")}.get(wanted, (wanted,))
        names = tuple(name for name in self._step_leaves + self._obs_leaves if name.split("/", 1)[1] in sources)
        names += tuple(self._blobs[f"{OBS}/{source}"] for source in sources if f"{OBS}/{source}" in self._blobs)
        if not names and wanted != "episode":
            # not one of the build's leaves (a sampler asking for "is_init", say): finding that out through
            # the build's read_key would read a row, which need not be resident
            raise KeyError(key)
        read = super().read_key

        def every_chunk() -> dict[str, np.ndarray]:
            return {name: np.arange(int(self.chunks.arrays[name]["chunks"])) for name in names}

        return self.chunks.read(names, every_chunk, lambda: _copied(read(key)))

    def gather_key(self, key: str | tuple[str, ...], rows: Any, **kw: Any) -> Any:
        read = super().gather_key
        path = "/".join((key,) if isinstance(key, str) else key)
        leaf = f"{STEPS}/{path}"
        if leaf not in self._step_set:
            leaf = f"{OBS}/{path[len('next/') :] if path.startswith('next/') else path}"
            leaf = self._blobs.get(leaf, leaf)
            if leaf not in self._obs_set:  # a derived key (episode, step, flags): read through get, which fetches
                return read(key, rows, **kw)
        rows_np, _ = self._rows(rows)
        return self._read(rows_np, lambda: read(key, rows, **kw), (leaf,))

    def episode_frames(self, keys: list[Any], episode: Any, times: Any) -> Any:
        """Frames of whole episodes (what FrameStack reads): every chunk of those episodes' frame rows is
        made resident first."""
        ordinal = self._episode_ordinal(torch.as_tensor(episode).reshape(-1).to(torch.int64)).numpy()
        starts = self._start_np[ordinal] + ordinal
        lengths = self._length.numpy()[ordinal]
        wanted = [f"{OBS}/" + ("/".join(k) if not isinstance(k, str) else k) for k in keys]
        names = tuple(name for name in (self._blobs.get(w, w) for w in wanted) if name in self._obs_set)

        def needed() -> dict[str, np.ndarray]:
            rows = np.concatenate(
                [np.arange(a, a + n + 1) for a, n in zip(starts.tolist(), lengths.tolist(), strict=True)]
            )
            return {name: self._chunks_of_frames(name, rows) for name in names}

        read = super().episode_frames
        return self.chunks.read(names, needed, lambda: read(keys, episode, times))

    # -- background fill (resident="full") ---------------------------------------------------------
    def _fill(self) -> None:
        try:
            # no process evicts from the copy until it is complete: what the fill fetched stays resident
            with self.chunks.holding_full():
                for name, spec in self.chunks.arrays.items():
                    total = int(spec["chunks"])
                    for begin in range(0, total, 16):
                        if self._stop.is_set():
                            return
                        self.chunks.ensure({name: np.arange(begin, min(total, begin + 16))})
                self._finish()
        except BaseException as exc:  # noqa: BLE001 - a thread's error, re-raised by wait_complete/sample
            self._fill_error = exc

    def _finish(self) -> None:
        """Every chunk is in: check each leaf against the manifest's sha256, then mark the copy complete."""
        for name, spec in self.manifest["schema"].items():
            expected = spec.get("sha256")
            if expected is None:
                continue
            if sha256_file(leaf_path(self.path, name)) != expected:
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
            raise InvalidParameter(
                "wait_complete() needs resident='full' in the process that loaded the URL (a pickled copy "
                "in a worker does not fill; the loading process does)"
            )
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
        self._release_copy()


def _copied(value: Any) -> Any:
    return value.clone() if isinstance(value, (torch.Tensor, TensorDict)) else value


def reopen_copy(cls: type[ResidentStorage], state: dict[str, Any]) -> DatasetStorage:
    """A pickled remote storage coming back (see the module docstring): the same local copy, reopened.

    The copy must still be there, with the ``published.json`` it was made from (its hash names the
    folder) and the same build fingerprint; otherwise a :class:`CacheError` says to load the URL again.
    """
    path = Path(state["path"])
    shown = strip_url(state["url"])
    if (path / COMPLETE).exists():
        storage = DatasetStorage(path)
    else:
        try:
            published_bytes = (path / PUBLISHED).read_bytes()
        except OSError as exc:
            raise CacheError(
                f"the local copy {path} of {shown} is gone (removed by `datasets-hub cache rm`?): load the URL "
                "again in this process instead of unpickling the buffer"
            ) from exc
        if not path.name or not sha256_bytes(published_bytes).startswith(path.name):
            raise CacheError(f"the local copy {path} of {shown} was modified; load the URL again")
        published = parse_published(published_bytes, shown)
        storage = cls.from_pickle_state(path, RemoteFolder(state["url"]), published, state)
    if storage.manifest.get("fingerprint") != state["fingerprint"]:
        raise CacheError(f"the local copy {path} of {shown} now holds another build; load the URL again")
    return storage
