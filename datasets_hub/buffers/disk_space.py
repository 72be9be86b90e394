"""Memory-mapped files get their disk blocks before they are used (no SIGBUS on a full disk).

A memmap of a sparse file (what ``truncate`` or tensordict's ``memmap_like`` make) promises bytes
the disk may not have: the first store into a page that cannot be allocated kills the process with
SIGBUS, no exception and no message. :func:`reserve_files` allocates every block up front
(``posix_fallocate``; where a file system does not support it, by writing zeros), so a full disk or
a quota is a :class:`~datasets_hub.errors.CacheError` at allocation time, naming the files and the fix.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from datasets_hub.errors import CacheError

__all__ = ["full_disk_error", "memmap_filenames", "reserve_files"]

_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_ZEROS = bytes(1 << 20)


def memmap_filenames(td) -> list[str]:
    """The files behind every memory-mapped leaf of the TensorDict ``td``."""
    names = []
    for leaf in td.values(include_nested=True, leaves_only=True):
        name = getattr(leaf, "filename", None)
        if name:
            names.append(str(name))
    return names


def _fill(fd: int, size: int) -> None:
    """Write zeros over [0, size) where fallocate is not supported (the file system then allocates)."""
    os.lseek(fd, 0, os.SEEK_SET)
    left = size
    while left > 0:
        left -= os.write(fd, _ZEROS[: min(left, len(_ZEROS))])


def reserve_files(paths: Iterable[str | Path], what: str) -> None:
    """Allocate the disk blocks of every file in ``paths`` (each at its current size).

    ``what`` names the owner in the error (e.g. ``"LazyMemmapStorage(max_size=10**6)"``). A full
    disk raises :class:`CacheError` with the bytes needed and the fix; the files are left as they
    are (the caller removes them).
    """
    files = [Path(p) for p in paths]
    total = 0
    for path in files:
        size = path.stat().st_size
        total += size
        if size == 0:
            continue
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as exc:
                if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    _fill(fd, size)
                else:
                    raise
        except OSError as exc:
            if exc.errno in _FULL:
                need = sum(p.stat().st_size for p in files if p.exists())
                raise CacheError(
                    f"{what}: the disk holding {path.parent} has no room for {need} bytes of memory-mapped files "
                    f"({exc.strerror}); free space, choose a smaller size, or put the files on a larger disk "
                    "(scratch_dir=..., or DATASETS_HUB_CACHE for the hub's cache)"
                ) from exc
            raise
        finally:
            os.close(fd)


def full_disk_error(exc: BaseException, what: str, where: str | Path) -> CacheError | None:
    """A teaching :class:`CacheError` when ``exc`` (an ``OSError``, or the ``RuntimeError`` torch and
    tensordict raise when a file cannot be sized) says the disk or a file-size limit is full."""
    if isinstance(exc, OSError) and exc.errno in _FULL:
        reason = exc.strerror
    elif isinstance(exc, RuntimeError) and any(os.strerror(code) in str(exc) for code in _FULL):
        reason = str(exc)
    else:
        return None
    return CacheError(
        f"{what}: the disk holding {where} has no room for its memory-mapped files ({reason}); free space, "
        "choose a smaller size, or put the files on a larger disk (scratch_dir=..., or DATASETS_HUB_CACHE "
        "for the hub's cache)"
    )
