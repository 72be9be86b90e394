"""How much memory a device has free, and the check that refuses a copy that would not fit."""

from __future__ import annotations

import os

import torch

from datasets_hub.errors import InvalidParameter

#: the share of the free memory a copy may take: the rest is left to the model and the allocator
USABLE_FRACTION = 0.9


def free_bytes(device: torch.device) -> int | None:
    """Free memory of ``device`` in bytes (CUDA: ``mem_get_info``; CPU: ``MemAvailable``), or None if unknown."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type == "cpu":
        try:
            with open("/proc/meminfo", encoding="ascii") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        try:
            return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    return None


def check_fits(needed: int, device: torch.device, what: str) -> None:
    """Raise :class:`InvalidParameter` naming both sizes when ``needed`` bytes exceed
    ``USABLE_FRACTION`` of ``device``'s free memory (no check where the free memory is unknown)."""
    free = free_bytes(device)
    if free is None:
        return
    if needed > USABLE_FRACTION * free:
        raise InvalidParameter(
            f"{what} needs {needed:,} bytes ({needed / 2**30:.2f} GiB) on {device}, which has {free:,} bytes "
            f"({free / 2**30:.2f} GiB) free (at most {USABLE_FRACTION:.0%} of it is used): free device memory, "
            "pick a smaller dataset or an episode subset, or sample on the host (drop device=)"
        )


def as_device(device: str | torch.device | int) -> torch.device:
    """``device`` as a ``torch.device`` with an index for CUDA; an unusable device is an InvalidParameter."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise InvalidParameter(f"device={device!r} is not a torch device ('cuda', 'cuda:1', 'cpu'): {exc}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InvalidParameter(
                f"device={device!r}: this machine has no usable CUDA device (torch {torch.__version__}, "
                f"torch.cuda.is_available() is False); use device='cpu' or sample on the host (drop device=)"
            )
        dev = torch.device("cuda", torch.cuda.current_device() if dev.index is None else dev.index)
    elif dev.type not in ("cpu",):
        raise InvalidParameter(f"device={device!r}: device sampling supports 'cuda' and 'cpu', not {dev.type!r}")
    return dev


def same_device(a: torch.device, b: torch.device) -> bool:
    """Whether ``a`` and ``b`` name the same device (``cuda`` without an index is the current one)."""
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    current = torch.cuda.current_device() if (a.index is None or b.index is None) else 0
    return (current if a.index is None else a.index) == (current if b.index is None else b.index)
