"""Anonymous memory for RAM-resident builds (``load(..., in_memory=True)``).

:func:`check_fits` refuses a copy that would not fit: it reads ``MemAvailable`` from
``/proc/meminfo`` (the kernel's estimate of what can be allocated without swapping) and keeps a
margin for the rest of the process (the training loop, the model, batches). :func:`anonymous_copy`
copies a tensor into a private anonymous mapping, advised for transparent huge pages where the OS
offers ``madvise(MADV_HUGEPAGE)`` (fewer TLB misses on random gathers over gigabytes).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

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


def check_fits(nbytes: int, what: str) -> None:
    """Refuse with :class:`InvalidParameter` when ``nbytes`` of anonymous memory would not leave the
    margin free; the message names the size needed, what is available and the fix. Where the OS
    reports no figure, the copy is attempted (a ``MemoryError`` then says it did not fit)."""
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
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
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
