"""Local copies of builds published at a URL, for ``cache ls|rm|prune`` and ``rm URL`` (docs/guide/cache.md).

A URL's copies live under ``<cache>/remote/<url-key>/<published-hash>/`` (one per ``published.json`` the URL
has served: :mod:`datasets_hub.remote.open_url` makes them). Beside them, in ``<url-key>/``:

- ``url``: the URL as every message shows it (no user, password, query or signature), the copies' id;
- ``current``: the ``<published-hash>`` folder of the ``published.json`` the URL served when it was last
  opened online. A copy with another hash was made from an earlier export of the URL: no online ``load``
  picks it again, and ``cache prune`` removes it (an offline ``load`` picks the newest complete copy, so
  it stays until a load has seen the URL's current record);
- per copy, ``<published-hash>.lock`` (held while its skeleton is made) and ``<published-hash>.users``:
  every process reading a copy that is not complete yet holds a shared ``flock`` on it for as long as
  it reads (:func:`hold_copy`); such a copy is still being written (chunks, residency maps), so removing
  it under its reader could let that reader write into a new copy made at the same place while it reads
  its old one. Removal holds both locks exclusively without waiting, and skips or refuses a busy copy.
  A complete copy is read-only: its readers need no lock (as a build's), and it goes as a build does.

Light on purpose: the standard library, :mod:`datasets_hub.cache.layout` and :mod:`datasets_hub.files`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from datasets_hub.cache.layout import DELETING_MARK, cache_root, file_lock, last_used, mark_used, remove_tree
from datasets_hub.errors import CacheError, InvalidParameter
from datasets_hub.files import real_dirs, write_bytes_atomic
from datasets_hub.redact import strip_url

REMOTE = "remote"  #: the cache section of local copies of published builds
URL_RECORD = "url"
CURRENT_RECORD = "current"
COMPLETE = "complete"  #: marker file of a local copy whose every chunk is in and verified
PUBLISHED = "published.json"  #: written last into a copy's skeleton: a copy without it is unfinished


def url_key(url: str) -> str:
    """The folder name of a URL's local copies (credentials and query signatures left out)."""
    return hashlib.sha256(strip_url(url).encode()).hexdigest()[:16]


def remote_root() -> Path:
    return cache_root() / REMOTE


def _read_text(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(4096).decode("utf-8", "replace").strip() or None


def record_open(url: str, copy: Path) -> None:
    """Note, at an online open of ``url`` whose current ``published.json`` names ``copy``: the URL (as shown),
    that ``copy`` is its current one, and that it was used now. Never fails a reader (a read-only cache
    keeps its older records)."""
    folder = copy.parent
    with contextlib.suppress(OSError, CacheError):
        real_dirs(cache_root(), folder)
        if _read_text(folder / URL_RECORD) != strip_url(url):
            write_bytes_atomic(folder / URL_RECORD, strip_url(url).encode())
        if _read_text(folder / CURRENT_RECORD) != copy.name:
            write_bytes_atomic(folder / CURRENT_RECORD, copy.name.encode())
    mark_used(copy)


def hold_copy(copy: Path) -> int:
    """A shared hold on the local copy ``copy`` for as long as the returned descriptor is open (close it with
    ``os.close``): no ``cache rm``/``prune`` removes the copy meanwhile. Waits while a removal runs."""
    fd = os.open(copy.with_name(copy.name + ".users"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass
class RemoteCopy:
    """One local copy (``bytes``: the disk space it takes): ``id`` is its URL as shown (``?`` plus the URL's key for a copy made before the URL was
    recorded), ``published`` the hash prefix of the ``published.json`` it was made from; ``stale`` says why no
    online load picks it again (``None``: current, or not known)."""

    id: str
    url_key: str
    published: str
    path: Path
    bytes: int
    complete: bool
    last_used: str | None
    stale: str | None = None


def _iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def copy_dirs() -> list[Path]:
    """Every local copy folder (``<url-key>/<published-hash>``), those being deleted left out."""
    root = remote_root()
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        if DELETING_MARK in folder.name:
            continue
        out += sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and DELETING_MARK not in p.name)
    return out


def disk_bytes(copy: Path) -> int:
    """Bytes ``copy`` takes on disk: its leaves are sparse files, of which only fetched chunks take space."""
    total = 0
    for root, _dirs, files in os.walk(copy):
        for name in files:
            with contextlib.suppress(OSError):
                stat = os.lstat(os.path.join(root, name))
                total += min(stat.st_size, stat.st_blocks * 512)
    return total


def last_use(copy: Path) -> float:
    """When ``copy`` was last opened (its marker), else when it was made: what ``--older-than`` compares."""
    used = last_used(copy)
    return used if used is not None else copy.stat().st_mtime


def describe(copy: Path) -> RemoteCopy:
    folder = copy.parent
    current = _read_text(folder / CURRENT_RECORD)
    shown = _read_text(folder / URL_RECORD) or f"?{folder.name}"
    stale = None
    if current is not None and current != copy.name:
        stale = f"{shown} was exported again: its current publishing record is {current}, this copy is of {copy.name}"
    return RemoteCopy(
        id=shown,
        url_key=folder.name,
        published=copy.name,
        path=copy,
        bytes=disk_bytes(copy),
        complete=(copy / COMPLETE).exists(),
        last_used=_iso(last_used(copy)),
        stale=stale,
    )


def remote_copies() -> list[RemoteCopy]:
    """Every local copy of a published build in the cache."""
    return [describe(copy) for copy in copy_dirs()]


def copies_of(url: str) -> list[Path]:
    """The local copies of ``url`` (any published hash); the URL's credentials and query do not matter."""
    folder = remote_root() / url_key(url)
    return [copy for copy in copy_dirs() if copy.parent == folder]


def is_remote_copy(path: Path) -> bool:
    """Whether ``path`` is a local copy folder (``<cache>/remote/<url-key>/<published-hash>``)."""
    return Path(path).parent.parent == remote_root()


def copy_locks(copy: Path) -> list[Path]:
    """What readers and writers of ``copy`` lock: the skeleton's lock and the readers' hold."""
    return [copy.with_name(copy.name + ".lock"), copy.with_name(copy.name + ".users")]


@contextlib.contextmanager
def _exclusive(copy: Path) -> Iterator[bool]:
    """Yield whether both of ``copy``'s locks could be had at once (never waits)."""
    from filelock import Timeout

    skeleton = file_lock(copy_locks(copy)[0], timeout=0)
    try:
        skeleton.acquire()
    except Timeout:
        yield False
        return
    try:
        fd = os.open(copy_locks(copy)[1], os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)
    finally:
        skeleton.release()


def remove_copy(copy: Path, *, busy_ok: bool = False) -> bool:
    """Delete the local copy ``copy`` (renamed aside first: no reader sees half of it) under its locks.
    A copy being made or read while incomplete is refused with a :class:`CacheError` (``busy_ok``: left
    alone, and False returned). The lock files stay (see :func:`datasets_hub.cache.layout.remove_tree`'s
    callers: unlinking a lock lets two processes hold "the" lock on two files)."""
    with _exclusive(copy) as free:
        if not free:
            if busy_ok:
                return False
            raise CacheError(
                f"the local copy {copy} is being read or made by another process right now (it is not complete "
                "yet); try again when that process ends"
            )
        remove_tree(copy)
    return True


def prune_candidates(
    cutoff: float | None, older_than_days: float | None, keep_stale: bool
) -> Iterator[tuple[Path, str, list[Path]]]:
    """Local copies of published builds: interrupted deletions, skeletons whose maker died, copies of an earlier
    export of their URL (unless ``keep_stale``) and, with a cutoff, copies last used before it."""
    root = remote_root()
    if not root.is_dir():
        return
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        for path in [folder] if DELETING_MARK in folder.name else sorted(folder.iterdir()):
            if DELETING_MARK in path.name:
                yield path, "interrupted deletion", []
    for copy in copy_dirs():
        if not (copy / PUBLISHED).exists():
            yield copy, "unfinished local copy of a URL (its process died)", copy_locks(copy)
            continue
        entry = describe(copy)
        if entry.stale and not keep_stale:
            yield copy, f"local copy of an earlier export: {entry.stale}", copy_locks(copy)
        elif cutoff is not None and last_use(copy) < cutoff:
            yield copy, f"local copy of {entry.id} not used for {older_than_days:g} days", copy_locks(copy)


def copies_to_remove(url: str, *, options: bool, must_exist: bool) -> list[Path]:
    """The local copies ``cache rm URL`` and ``rm URL`` remove. ``options``: the caller was also given options that
    pick among the builds of a dataset id (refused); ``must_exist``: a URL without a copy is a :class:`CacheError`."""
    if options:
        raise InvalidParameter(
            f"{strip_url(url)} is a URL, which names its local copies: --param, --raw and --all-builds pick the "
            "builds and raw files of a dataset id"
        )
    copies = copies_of(url)
    if must_exist and not copies:
        raise CacheError(
            f"no local copy of {strip_url(url)} in the cache {cache_root()}; `datasets-hub cache ls` lists them"
        )
    return copies
