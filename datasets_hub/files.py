"""Small file primitives every layer of the hub shares: one home for each.

- :func:`write_json_atomic` / :func:`write_text_atomic`: write beside the target and rename over it,
  so a reader sees the old file or the new one, never half of one. The temporary file is named
  ``<name>.<pid>-<thread>.tmp`` (concurrent writers never share one), is opened without following
  a symlink, and is removed when the write fails; a killed process leaves it for ``cache prune``.
- :func:`sha256_file` / :func:`hash_file`: the sha256 of a file's bytes, read in 1 MiB blocks
  (bounded memory); :func:`sha256_json`: of a JSON-able value, keys sorted.

- :func:`open_nofollow` / :func:`open_rw_nofollow`: open a cache file for writing without following a
  symlink; :func:`real_dirs`: create a cache directory, refusing a symlink at any of its components.
- :func:`human_bytes`: a size as ``du -h`` shows it.

Only the standard library and :mod:`datasets_hub.errors`: anything may import this module.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from datasets_hub.errors import CacheError

TMP_SUFFIX = ".tmp"
_HASH_BLOCK = 1 << 20


def write_text_atomic(path: str | Path, text: str, *, mode: int = 0o666) -> Path:
    """Replace ``path`` by ``text`` atomically (written beside it, then renamed); returns ``path``.
    A new file gets permission bits ``mode`` (less the umask): ``0o600`` for what may hold secrets."""
    if not isinstance(text, str):
        raise TypeError(f"write_text_atomic writes a str, got {type(text).__name__}")
    return write_bytes_atomic(path, text.encode(), mode=mode)


def write_bytes_atomic(path: str | Path, data: bytes, *, mode: int = 0o666) -> Path:
    """Replace ``path`` by ``data`` atomically, as :func:`write_text_atomic` does for text."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}{TMP_SUFFIX}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        with open(os.open(tmp, flags, mode), "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise
    return path


def write_json_atomic(
    path: str | Path,
    payload: Mapping[str, Any] | list,
    *,
    indent: int | None = 1,
    sort_keys: bool = True,
    mode: int = 0o666,
) -> Path:
    """Replace ``path`` by ``payload`` as JSON atomically; values JSON cannot hold are written as ``str``."""
    return write_text_atomic(path, json.dumps(payload, indent=indent, sort_keys=sort_keys, default=str), mode=mode)


def hash_file(path: str | Path, limit: int | None = None) -> hashlib._Hash:
    """A sha256 hasher fed with the bytes of ``path`` (its first ``limit`` bytes when given), to go
    on updating (a resumed download) or to read with ``hexdigest()``."""
    digest = hashlib.sha256()
    left = limit
    with open(path, "rb") as fh:
        while left is None or left > 0:
            block = fh.read(_HASH_BLOCK if left is None else min(_HASH_BLOCK, left))
            if not block:
                break
            digest.update(block)
            if left is not None:
                left -= len(block)
    return digest


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of the bytes of ``path``."""
    return hash_file(path).hexdigest()


def sha256_json(payload: Any, *, default: Any = None) -> str:
    """The hex sha256 of ``payload`` as canonical JSON (keys sorted, no blanks); values JSON cannot
    hold go through ``default`` (None: a ``TypeError``, for callers that must know)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=default)
    return hashlib.sha256(text.encode()).hexdigest()


def open_nofollow(path: Path, mode: str = "wb") -> Any:
    """Open a cache file for writing (``"wb"`` truncate, ``"ab"`` append) without following a symlink.

    A symlink planted at a cache path (``x.partial`` -> ``~/.bashrc``) would otherwise make the hub
    write outside the cache: ``O_NOFOLLOW`` refuses it (``ELOOP``), and the error names the path.
    """
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= os.O_APPEND if mode.startswith("a") else os.O_TRUNC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise CacheError(
                f"{path} is a symbolic link; the cache never writes through links (someone "
                f"planted it, or the cache was copied with links): delete {path} and try again"
            ) from exc
        raise
    return os.fdopen(fd, mode if "b" in mode else mode + "b")


def real_dirs(root: Path, path: Path) -> Path:
    """Create ``path`` (a directory at or below ``root``) and refuse a symbolic link at any component
    below ``root``: a directory link planted in the cache (``data -> /home/me``) would make every file
    written below it land outside the cache, which ``O_NOFOLLOW`` (last component only) does not
    catch. ``root`` itself (the cache root, or a folder already checked) may be a link: a user's
    ``~/.cache`` on another disk. Returns ``path``; a link is a :class:`CacheError` naming it."""
    root, path = Path(root), Path(path)
    root.mkdir(parents=True, exist_ok=True)
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        with contextlib.suppress(FileExistsError):
            os.mkdir(current)
        if os.path.islink(current) or not current.is_dir():
            raise CacheError(
                f"{current} is a symbolic link or not a folder; the cache never writes through links (someone "
                f"planted it, or the cache was copied with links): delete {current} and try again"
            )
    return path


def open_rw_nofollow(path: Path) -> Any:
    """Open an existing cache file for reading and writing (``"r+b"``, no truncation) without following
    a symlink; a link is a :class:`CacheError` naming it (as :func:`open_nofollow`)."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise CacheError(
                f"{path} is a symbolic link; the cache never writes through links (someone "
                f"planted it, or the cache was copied with links): delete {path} and try again"
            ) from exc
        raise
    return os.fdopen(fd, "r+b")


def human_bytes(n: int | float) -> str:
    """``1536 -> '1.5 KiB'`` (binary units, as ``du -h``)."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover
