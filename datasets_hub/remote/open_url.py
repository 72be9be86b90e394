"""Open a published build from a URL, and sample from it before the download ends.

``load("hf://datasets/<org>/<repo>[@rev]")``, ``load("https://…/")``, ``load("s3://…/")`` and
``load("file:///…/")`` open a folder written by :func:`datasets_hub.remote.publish.export`. Files are read through
fsspec (:mod:`datasets_hub.remote.files`).

The local copy is the same memory-mapped build the hub makes itself (``manifest.json`` + ``data/``, opened
by :func:`~datasets_hub.build.reader.open_build`), under ``<cache>/remote/<url-hash>/<published-hash>/``,
plus one residency map per leaf (one byte per chunk, :mod:`datasets_hub.remote.chunks`). Opening fetches
``published.json``, the manifest and the episode index (kilobytes); chunks follow, by residency mode:

- ``resident="full"`` (default): a background thread fetches every chunk; a batch that needs a chunk
  not yet there fetches it first. When all chunks are in and every leaf matches the manifest's sha256,
  the build is complete and later opens need no network (:mod:`datasets_hub.remote.storage`).
- ``resident="lazy"``: only the chunks that batches touch are fetched; ``max_bytes`` bounds the resident
  data with least-recently-used eviction (holes are punched back into the sparse files).
- ``resident="pool"``: ``pool_episodes`` whole episodes resident, sampling only from them, refreshed in
  the background; biased within a window of time (:mod:`datasets_hub.remote.pool` states how).

Sampling is exactly uniform over the whole dataset in the first two modes: samplers see the full
episode index, and a batch waits for the chunks it needs. Trust and crash rules: every fetched chunk is
checked against the sha256 in ``published.json`` before it is written, a chunk's residency byte is set
only after its rows are written, so a process killed at any point leaves a map that claims only complete
chunks; a corrupt chunk is fetched again (3 tries) and never served. Processes on one machine share the
local copy: chunk writes and evictions hold an exclusive lock; reads of resident chunks take none (an
eviction counter in the copy makes a read that raced an eviction read again; see
:mod:`datasets_hub.remote.chunks`). A buffer over a remote build pickles to DataLoader workers by reference (URL and local
copy), and the workers share the copy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from datasets_hub.build.format import MANIFEST, leaf_path, write_manifest_checksum
from datasets_hub.build.reader import open_build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.cache.layout import cache_root, file_lock, mark_used
from datasets_hub.cache.remote_copies import record_open, url_key
from datasets_hub.env import offline
from datasets_hub.errors import CacheError, DownloadError, InvalidParameter
from datasets_hub.files import open_nofollow, real_dirs, write_bytes_atomic
from datasets_hub.redact import strip_url
from datasets_hub.remote.chunks import COMPLETE, Chunks, always_resident, map_path, row_bytes_of, sha256_bytes
from datasets_hub.remote.files import REMOTE_SCHEMES, RemoteFolder
from datasets_hub.remote.format import MAX_PUBLISHED_BYTES, PUBLISHED, parse_published, require_zarr
from datasets_hub.remote.storage import ResidentStorage

__all__ = ["REMOTE_SCHEMES", "RESIDENT_MODES", "local_dir", "open_remote", "strip_url"]

RESIDENT_MODES = ("full", "lazy", "pool")


def local_dir(url: str, published_sha256: str) -> Path:
    """Where the local copy of the build published at ``url`` (with this ``published.json``) lives."""
    return cache_root() / "remote" / url_key(url) / published_sha256[:16]


def open_remote(
    url: str,
    *,
    resident: str = "full",
    max_bytes: int | None = None,
    pool_episodes: int | None = None,
    pool_refresh_s: float | None = 1.0,
    pool_seed: int | None = None,
) -> DatasetStorage:
    """A read-only storage over the build published at ``url`` (see the module docstring).

    ``max_bytes`` bounds a ``"lazy"`` or ``"pool"`` copy; ``pool_episodes`` (K), ``pool_refresh_s`` (seconds
    between two replacements, ``None``: only on ``refresh_pool()``) and ``pool_seed`` (the pool's draws)
    configure ``"pool"``. A complete local copy opens as a plain build whatever the mode.
    """
    _check_modes(resident, max_bytes, pool_episodes)
    complete = _complete_copy(url)
    if complete is not None:
        return DatasetStorage(complete)
    require_zarr()
    folder = RemoteFolder(url)
    published_bytes = folder.read(PUBLISHED, MAX_PUBLISHED_BYTES)
    published = parse_published(published_bytes, folder.shown)
    path = local_dir(url, sha256_bytes(published_bytes))
    _prepare(path, folder, published, published_bytes)
    record_open(url, path)  # the URL's current copy, for `cache ls` and `cache prune` (older copies are stale)
    if (path / COMPLETE).exists():
        return DatasetStorage(path)
    from datasets_hub.remote.pool import PoolStorage, remove_orphan_pools

    remove_orphan_pools(path)  # membership files of pools whose owner was killed
    if resident == "pool" and pool_episodes is not None:  # _check_modes refused a pool without a size
        return PoolStorage(
            path,
            folder,
            published,
            pool_episodes=pool_episodes,
            pool_refresh_s=pool_refresh_s,
            max_bytes=max_bytes,
            seed=pool_seed,
        )
    return ResidentStorage(path, folder, published, fill=resident == "full", max_bytes=max_bytes)


def _check_modes(resident: str, max_bytes: int | None, pool_episodes: int | None) -> None:
    if resident not in RESIDENT_MODES:
        raise InvalidParameter(f"resident={resident!r}: choose one of {', '.join(map(repr, RESIDENT_MODES))}")
    if max_bytes is not None:
        if resident == "full":
            raise InvalidParameter(
                "max_bytes= bounds a lazily resident or pooled build: pass resident='lazy' (or 'pool') with it"
            )
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
            raise InvalidParameter(f"max_bytes must be a positive integer number of bytes, got {max_bytes!r}")
    if resident == "pool" and pool_episodes is None:
        raise InvalidParameter("resident='pool' needs pool_episodes=K: how many whole episodes stay resident")
    if resident != "pool" and pool_episodes is not None:
        raise InvalidParameter("pool_episodes= sizes the pool of resident='pool'; pass resident='pool' with it")


def _complete_copy(url: str) -> Path | None:
    """Offline: the newest complete local copy of ``url``, if one exists."""
    if not offline():
        return None
    base = cache_root() / "remote" / url_key(url)
    done = sorted((p.parent for p in base.glob(f"*/{COMPLETE}")), key=lambda p: p.stat().st_mtime)
    if not done:
        return None
    mark_used(done[-1])
    return done[-1]


def _prepare(path: Path, folder: RemoteFolder, published: dict, published_bytes: bytes) -> None:
    """Create the local copy's skeleton once (under a lock): manifest, sparse leaves, empty maps, episode
    index; then open it with ``open_build``, which checks it against the manifest, before it counts."""
    real_dirs(cache_root(), path)  # no symlinked folder on the way: every write below stays in the cache
    with file_lock(path.with_name(path.name + ".lock")):
        if (path / PUBLISHED).exists():
            return
        manifest_bytes = folder.read(MANIFEST)
        if sha256_bytes(manifest_bytes) != published.get("manifest_sha256"):
            raise DownloadError(
                f"{folder.shown}/{MANIFEST} does not match the sha256 in {PUBLISHED}: the "
                "folder was modified after export or is being re-uploaded; retry later"
            )
        for name, spec in published["arrays"].items():
            leaf = leaf_path(path, name)  # refuses a name that would leave the copy
            real_dirs(path, leaf.parent)
            # never through a planted symlink (it would truncate the link's target, outside the cache)
            with open_nofollow(leaf, "wb") as handle:  # sparse: only fetched chunks take disk space
                handle.truncate(int(spec["rows"]) * row_bytes_of(spec))
            residency = map_path(path, name)
            real_dirs(path, residency.parent)
            with open_nofollow(residency, "wb") as handle:
                handle.truncate(max(1, int(spec["chunks"])))
        write_bytes_atomic(path / MANIFEST, manifest_bytes)
        write_manifest_checksum(path)  # every later open checks the manifest against its published hash
        # every leaf's zarr metadata in one concurrent fetch (a few hundred bytes each), kept locally
        metadata_files = [f"data.zarr/{name}/zarr.json" for name in published["arrays"]]
        chunks = Chunks(path, folder, published)
        try:
            limits = {p: int(published["files"][p]["bytes"]) for p in metadata_files if p in published["files"]}
            for relpath, payload in folder.read_many(metadata_files, limits).items():
                if isinstance(payload, BaseException):
                    raise payload  # a DownloadError naming the file, its URL redacted
                chunks.keep_metadata(relpath, payload)
            chunks.check_layouts()  # a record that disagrees with the arrays it describes serves wrong rows
            # the episode index (kilobytes) comes now: samplers need all of it before the first batch
            chunks.ensure(
                {name: np.arange(spec["chunks"]) for name, spec in published["arrays"].items() if always_resident(name)}
            )
        finally:
            chunks.close()
        build = open_build(path)  # the one reader: layout, counts, sizes and episode index against the manifest
        if set(build.leaves) != set(published["arrays"]):
            raise CacheError(f"{folder.shown}: manifest and {PUBLISHED} list different leaves; export it again")
        write_bytes_atomic(path / PUBLISHED, published_bytes)  # last: a skeleton without it is redone
