"""Memory of a build's reader: RAM-resident copies, and advice to the kernel about mapped pages.

Anonymous memory for RAM-resident builds (``load(..., in_memory=True)``).

:func:`check_fits` refuses a copy that would not fit: it reads ``MemAvailable`` from
``/proc/meminfo`` (the kernel's estimate of what can be allocated without swapping) and keeps a
margin for the rest of the process (the training loop, the model, batches). :func:`anonymous_copy`
copies a tensor into a private anonymous mapping, advised for transparent huge pages where the OS
offers ``madvise(MADV_HUGEPAGE)`` (fewer TLB misses on random gathers over gigabytes).

Advice to the kernel about memory-mapped pages (``madvise``): read ahead, or drop from this process.

Three uses: reading many large rows of a memory-mapped leaf at random (camera frames) goes faster when
the kernel is told up front which byte ranges follow (``will_need``: it reads them in parallel instead
of one page fault at a time); small rows read at random cost fewer TLB misses from huge pages
(``huge_pages``); and a build writing frames a loader handed over memory-mapped keeps its resident set
small by dropping the pages it has written (``page_out``). All are hints: on a platform or kernel
without them nothing happens and the data is the same.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from datasets_hub.errors import InvalidParameter

GIB = 1 << 30
#: memory kept free beyond the copy: at least this many bytes...
MIN_MARGIN = 1 * GIB
#: ...or this share of the machine's memory, whichever is larger
MARGIN_SHARE = 0.10


def meminfo(path: str | Path = "/proc/meminfo") -> dict[str, int]:
    """``/proc/meminfo`` as bytes by field name (``{}`` where the file does not exist: not Linux)."""
    out: dict[str, int] = {}
    try:
        text = Path(path).read_text()
    except OSError:
        return out
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        words = rest.split()
        if words and words[0].isdigit():
            out[name.strip()] = int(words[0]) * (1024 if len(words) > 1 and words[1] == "kB" else 1)
    return out


def available_memory() -> tuple[int | None, int | None]:
    """``(available, total)`` bytes of memory; ``None`` where the OS does not say."""
    info = meminfo()
    if "MemAvailable" in info:
        return info["MemAvailable"], info.get("MemTotal")
    try:  # other POSIX systems: free pages (an underestimate: the page cache counts as used)
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
    except (ValueError, OSError, AttributeError):
        return None, None


def margin_bytes(total: int | None) -> int:
    """Memory :func:`check_fits` keeps free besides the copy."""
    return max(MIN_MARGIN, int(MARGIN_SHARE * total)) if total else MIN_MARGIN


def address_space_left() -> int | None:
    """Bytes this process may still map under its address-space limit (``ulimit -v``, ``RLIMIT_AS``);
    ``None`` without a limit (or where the OS does not say)."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    if limit == resource.RLIM_INFINITY or limit < 0:
        return None
    used = 0
    for line in Path("/proc/self/status").read_text().splitlines() if Path("/proc/self/status").exists() else []:
        if line.startswith("VmSize:"):
            used = int(line.split()[1]) * 1024
    return max(0, int(limit) - used)


def check_fits(nbytes: int, what: str) -> None:
    """Refuse with :class:`InvalidParameter` when ``nbytes`` of anonymous memory would not leave the
    margin free, or would pass the process's address-space limit; the message names the size needed,
    what is available and the fix. Where the OS reports no figure, the copy is attempted
    (:func:`anonymous_copy` then says it did not fit)."""
    left = address_space_left()
    if left is not None and nbytes > left:
        raise InvalidParameter(
            f"in_memory=True: {what} needs {nbytes / GIB:.2f} GiB of RAM, and this process may map only "
            f"{left / GIB:.2f} GiB more under its address-space limit (ulimit -v / RLIMIT_AS). Use "
            "in_memory=False (the default: pages are read from the memory-mapped build on demand), or raise the limit"
        )
    available, total = available_memory()
    if available is None:
        return
    margin = margin_bytes(total)
    if nbytes + margin > available:
        raise InvalidParameter(
            f"in_memory=True: {what} needs {nbytes / GIB:.2f} GiB of RAM, and this machine has "
            f"{available / GIB:.2f} GiB available (MemAvailable), of which {margin / GIB:.2f} GiB stay free "
            "for the rest of the process. Use in_memory=False (the default: pages are read from the "
            "memory-mapped build on demand and cached by the OS), or free memory first"
        )


def anonymous_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of ``tensor`` (any dtype, contiguous result) in a private anonymous mapping.

    The mapping is advised for transparent huge pages where the OS supports it; it lives as long as
    the returned tensor (numpy keeps the ``mmap`` object alive through the buffer it exports).
    """
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return torch.empty_like(tensor, memory_format=torch.contiguous_format)
    try:
        region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, MemoryError) as exc:  # ENOMEM: an address-space limit or the overcommit policy said no
        raise InvalidParameter(
            f"in_memory=True: a copy of {nbytes / GIB:.2f} GiB could not be mapped ({exc}): the address-space "
            "limit (ulimit -v) or the kernel's overcommit policy refused it. Use in_memory=False (the default), "
            "or free memory first"
        ) from exc
    advise = getattr(region, "madvise", None)
    hugepage = getattr(mmap, "MADV_HUGEPAGE", None)
    if advise is not None and hugepage is not None:
        try:
            advise(hugepage)
        except OSError:  # THP disabled ("never") or not offered for this mapping: small pages work too
            pass
    raw = torch.from_numpy(np.frombuffer(region, dtype=np.uint8))
    out = raw.view(tensor.dtype).view(tensor.shape)
    out.copy_(tensor)
    return out


MADV_WILLNEED = 3
MADV_HUGEPAGE = 14  # transparent huge pages for the range (a file's pages: read in 2 MiB folios, mapped whole)
MADV_PAGEOUT = 21  # Linux >= 5.4: reclaim the range (a file's pages stay in the file; nothing is lost)
LARGE_ROW = 64 * 1024  # rows at least this large (frames) are worth a hint per contiguous run


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def advise(address: int, nbytes: int, advice: int, *, inner: bool = False) -> None:
    """``madvise`` on the pages of ``[address, address + nbytes)``: every page it touches, or with
    ``inner`` only the whole pages inside it."""
    if _LIBC is None or nbytes <= 0:
        return
    page = mmap.PAGESIZE
    if inner:
        start, end = -(-address // page) * page, (address + nbytes) // page * page
    else:
        start, end = address // page * page, -(-(address + nbytes) // page) * page
    if end > start:
        _LIBC.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), advice)


def will_need(column: np.ndarray, rows: np.ndarray) -> None:
    """Ask the kernel to read ahead the rows ``rows`` of the C-contiguous 2-D+ ``column`` (one hint per
    run of consecutive rows); only for large rows, where a run spans many pages."""
    row_bytes = column.strides[0] if column.ndim else 0
    if _LIBC is None or row_bytes < LARGE_ROW or rows.size == 0 or not column.flags.c_contiguous:
        return
    ordered = np.unique(rows)
    breaks = np.flatnonzero(np.diff(ordered) != 1) + 1
    starts = ordered[np.concatenate([[0], breaks])]
    ends = ordered[np.concatenate([breaks - 1, [ordered.size - 1]])] + 1
    base = column.ctypes.data
    for first, last in zip(starts.tolist(), ends.tolist(), strict=True):
        advise(base + first * row_bytes, (last - first) * row_bytes, MADV_WILLNEED)


def huge_pages(column: np.ndarray) -> None:
    """Ask for transparent huge pages under ``column`` (a memory-mapped leaf read at random rows): the
    pages the kernel reads from the file from now on come in 2 MiB folios, mapped whole, so a random
    row costs one TLB entry per 2 MiB instead of per 4 KiB. Pages already cached keep their size."""
    if column.size:
        advise(column.ctypes.data, column.nbytes, MADV_HUGEPAGE, inner=True)


def mapped_file(address: int, nbytes: int) -> bool:
    """Whether ``[address, address + nbytes)`` lies in one shared mapping of a file (its pages are the
    file's, and may be dropped from this process at will)."""
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split(maxsplit=5)
                low, high = (int(x, 16) for x in parts[0].split("-"))
                if low <= address < high:
                    return address + nbytes <= high and parts[1][3] == "s" and len(parts) == 6 and parts[5][0] == "/"
    except (OSError, ValueError, IndexError):
        return False
    return False


def page_out(address: int, nbytes: int) -> None:
    """Drop the whole pages of ``[address, address + nbytes)`` from this process (``MADV_PAGEOUT``)."""
    advise(address, nbytes, MADV_PAGEOUT, inner=True)
