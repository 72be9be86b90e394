"""Where things live on disk (docs/design/on-disk.md) and how a build is published atomically.

    <cache>/raw/<loader>/...                         downloaded upstream files
    <cache>/datasets/<loader>/<name>/<build-fp>/     one converted build (manifest.json + data/)
    <cache>/preprocessed/<build-fp>/<transform-fp>/  cached preprocessing results

The cache root is read from ``DATASETS_HUB_CACHE`` at call time, never at import.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datasets_hub import env
from datasets_hub.build.format import MANIFEST
from datasets_hub.downloads.fetch import SIDE_SUFFIXES
from datasets_hub.errors import CacheError
from datasets_hub.files import sha256_json

INCOMPLETE_SUFFIX = ".incomplete"
#: the cache's sub-directories (the layout in the module docstring); nowhere else spells them
RAW, DATASETS, PREPROCESSED = "raw", "datasets", "preprocessed"
SECTIONS = (RAW, DATASETS, PREPROCESSED)


cache_root = env.cache_root  # where every path below starts (read at call time)


def raw_root() -> Path:
    """``<cache>/raw``: every loader's downloads."""
    return cache_root() / RAW


def raw_dir(loader: str) -> Path:
    return raw_root() / loader


#: Suffixes the cache adds to names it owns (side files of downloads, builds being written or
#: deleted): reserved, so no dataset id or resource name can collide with them.
RESERVED_SUFFIXES = (*SIDE_SUFFIXES, INCOMPLETE_SUFFIX)
DELETING_MARK = ".deleting-"
#: Longest name component of a resource (file systems allow 255 bytes; the cache appends suffixes).
MAX_NAME_BYTES = 200


def reserved_name_problem(segment: str) -> str | None:
    """Why ``segment`` (one path component of an id or a resource name) is reserved, or ``None``."""
    low = segment.lower()
    for suffix in RESERVED_SUFFIXES:
        if low.endswith(suffix):
            return f"it ends with {suffix!r}, a suffix the cache reserves for its own files"
    if DELETING_MARK in low:
        return f"it contains {DELETING_MARK!r}, which the cache reserves for directories being deleted"
    return None


def raw_file_path(loader_name: str, resource_name: str, source_key: str | None = None) -> Path:
    """Where a loader's resource is kept: ``<cache>/raw/<loader>/<source-key>/<name>``.

    ``source_key`` (:func:`datasets_hub.downloads.fetch.source_key`) is the identity of the bytes, so two
    sources with the same file name never share a file (``None``: the layout of builds made before
    keys existed, ``<cache>/raw/<loader>/<name>``). Names must be safe relative paths (a loader
    cannot make the hub write outside its raw folder), of at most :data:`MAX_NAME_BYTES` bytes per
    component, without the cache's reserved suffixes.
    """
    from datasets_hub.errors import InvalidParameter

    parts = Path(resource_name).parts if isinstance(resource_name, str) else ()
    if (
        not resource_name
        or not isinstance(resource_name, str)
        or Path(resource_name).is_absolute()
        or any(p in ("..", ".") for p in parts)
        or "\x00" in resource_name
    ):
        raise InvalidParameter(
            f"the {loader_name!r} loader names a raw file {resource_name!r}: names must be relative paths "
            "without '..' (a loader bug; report it to the loader's authors)"
        )
    for part in parts:
        if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
            raise InvalidParameter(
                f"the resource name {resource_name[:60]!r}… has a component of {len(part.encode('utf-8', 'surrogateescape'))} "
                f"bytes; the limit is {MAX_NAME_BYTES} (file systems allow 255 and the cache adds suffixes). Give the "
                "resource a shorter 'name' in its catalogue entry"
            )
        problem = reserved_name_problem(part)
        if problem:
            raise InvalidParameter(
                f"the resource name {resource_name!r} is reserved: {problem}. Give the resource "
                "another 'name' in its catalogue entry"
            )
    base = raw_dir(loader_name)
    return (base / source_key if source_key else base).joinpath(*parts)


def datasets_dir() -> Path:
    return cache_root() / DATASETS


def dataset_dir(dataset_id: str) -> Path:
    """All builds of one id: ``<cache>/datasets/<loader>/<name>`` (the id is validated upstream)."""
    return datasets_dir().joinpath(*dataset_id.split("/"))


def preprocessed_root() -> Path:
    """``<cache>/preprocessed``: every preprocessing result, by build fingerprint."""
    return cache_root() / PREPROCESSED


def preprocessed_dir(build_fp: str) -> Path:
    return preprocessed_root() / build_fp


def fingerprint(payload: Any, length: int = 16) -> str:
    """A stable short hash of JSON-able ``payload`` (keys sorted)."""
    return sha256_json(payload, default=str)[:length]


def read_manifest(build_dir: Path) -> dict[str, Any] | None:
    """The manifest of a published build, or ``None`` when there is no complete build there.

    An empty, cut or non-object manifest (what a power loss leaves) is a :class:`CacheError` naming
    the fix; a regular file where the cache expects a directory gets its own error.
    """
    path = Path(build_dir) / MANIFEST
    try:
        with open(path, "rb") as fh:
            manifest = json.loads(fh.read())
    except FileNotFoundError:
        return None
    except NotADirectoryError as exc:
        raise CacheError(_not_a_directory(Path(build_dir))) from exc
    except (OSError, ValueError, RecursionError) as exc:
        raise CacheError(
            f"the manifest {path} is unreadable ({type(exc).__name__}: {str(exc)[:200]}): the build is broken "
            f"(a power loss or a full disk while it was published?). Remove it with `datasets-hub rm <id>` or "
            f"`datasets-hub cache prune`, or rebuild with `datasets-hub download --force <id>`"
        ) from exc
    if not isinstance(manifest, dict):
        raise CacheError(
            f"the manifest {path} holds a JSON {type(manifest).__name__}, not an object: the build is broken or was "
            f"tampered with. Remove it with `datasets-hub rm <id>` or `datasets-hub cache prune`, or rebuild with "
            f"`datasets-hub download --force <id>`"
        )
    return manifest


def manifest_or_problem(build_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``(manifest, None)``, ``(None, None)`` when there is no build, or ``(None, why it is broken)``."""
    try:
        return read_manifest(build_dir), None
    except CacheError as exc:
        return None, str(exc)


def _not_a_directory(path: Path) -> str:
    for candidate in [path, *path.parents]:
        if candidate.exists() and not candidate.is_dir():
            return (
                f"{candidate} is a regular file where the cache expects a directory; move it away, or point "
                f"DATASETS_HUB_CACHE at a directory (it is {cache_root()})"
            )
    return f"a component of {path} is not a directory; point DATASETS_HUB_CACHE at a directory"


def _is_marker(name: str) -> bool:
    return name.endswith(INCOMPLETE_SUFFIX) or DELETING_MARK in name


def iter_builds(*, warn: bool = True) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every published build in the cache with its manifest.

    A build is a directory holding ``manifest.json`` (nothing below it is searched); directories
    being written (``*.incomplete``) or deleted (``*.deleting-*``) are skipped, and a build whose
    manifest is unreadable is skipped with a warning (``cache prune`` or ``rm`` removes it).
    """
    import warnings

    root = datasets_dir()
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not _is_marker(d))
        if MANIFEST not in filenames or here == root:
            continue
        dirnames[:] = []  # a build's insides are not builds
        manifest, problem = manifest_or_problem(here)
        if manifest is not None:
            yield here, manifest
        elif problem and warn:
            warnings.warn(f"skipping a broken build: {problem}", stacklevel=2)


#: An empty file inside a build (or preprocessed variant) whose mtime is its last use: ``open`` touches
#: it at most once per :data:`LAST_USED_RESOLUTION_S` seconds (one ``stat`` otherwise).
LAST_USED = ".last-used"
LAST_USED_RESOLUTION_S = 600.0


def mark_used(directory: Path, *, resolution_s: float = LAST_USED_RESOLUTION_S) -> None:
    """Record "used now" on the build or variant at ``directory`` (its :data:`LAST_USED` marker).

    Cheap and never failing: when the marker was touched less than ``resolution_s`` seconds ago
    nothing is written; a read-only cache, a full disk or a symlink planted as the marker leave it
    as it is (the last use is then older than the truth, never an error for the reader).
    """
    import time

    path = Path(directory) / LAST_USED
    now = time.time()
    with contextlib.suppress(OSError):
        if now - os.stat(path, follow_symlinks=False).st_mtime < resolution_s:
            return
    with contextlib.suppress(OSError):
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), 0o644
        )
        try:
            os.utime(fd, (now, now))
        finally:
            os.close(fd)


def last_used(directory: Path) -> float | None:
    """When the build or variant at ``directory`` was last opened (epoch seconds, to within
    :data:`LAST_USED_RESOLUTION_S`), or ``None`` when no open was recorded."""
    try:
        return os.stat(Path(directory) / LAST_USED, follow_symlinks=False).st_mtime
    except OSError:
        return None


def dir_size(path: Path) -> int:
    """Bytes used by the regular files under ``path``."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def ensure_writable_dir(path: Path) -> Path:
    """Create ``path`` (and parents) or raise a ``CacheError`` that says how to fix it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheError(
            f"cannot create {path} ({exc.strerror}); point DATASETS_HUB_CACHE at a writable "
            "directory, or fix the permissions"
        ) from exc
    if not os.access(path, os.W_OK):
        raise CacheError(
            f"the cache directory {path} is read-only; point DATASETS_HUB_CACHE at a writable "
            "directory (existing builds can still be read)"
        )
    return path


def file_lock(path: Path, timeout: float = -1):
    """An inter-process lock on ``path`` (a ``.lock`` file beside what it protects)."""
    from filelock import FileLock

    return FileLock(str(path), timeout=timeout)


def remove_tree(path: Path) -> None:
    """Delete ``path`` so that no reader ever sees it half-deleted: rename aside first.

    The doomed directory gets a unique name (``<name>.deleting-<pid>-<random>``: a leftover of an
    earlier process with the same PID, as every container's PID 1 is, never collides) and is
    ``flock``-ed while it is deleted: ``cache prune`` decides whether a ``.deleting-*`` leftover is
    still being deleted by that lock, held only by a living owner, never by its PID.
    """
    if not os.path.lexists(path):
        return
    doomed = path.with_name(f"{path.name}{DELETING_MARK}{os.getpid()}-{os.urandom(4).hex()}")
    os.replace(path, doomed)
    delete_doomed(doomed)


def delete_doomed(doomed: Path, *, wait: bool = True) -> bool:
    """Delete a renamed-aside ``doomed`` tree under its own ``flock``; ``wait=False``: give up at once
    (return False) when a living process holds it (it is deleting it right now)."""
    import fcntl

    if os.path.islink(doomed) or not doomed.is_dir():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(doomed)
        return True
    try:
        fd = os.open(doomed, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        shutil.rmtree(doomed, ignore_errors=True)
        return True
    finally:
        os.close(fd)


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
