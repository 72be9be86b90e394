"""Resumable builds: the checkpoint a build keeps in its staging folder (docs/design/on-disk.md).

A loader that can skip episodes it is told are done (``Loader.resumable``: the lerobot loader, whose
builds decode hours of video) has its build checkpointed between chunks, at most every
:data:`CHECKPOINT_EVERY_S` seconds and once more before the build is sealed: the writer's queued
writes are finished and its state (each leaf file's rows and the sha256 of its bytes so far, the
episode index, the running statistics, the frame encoders' counts) is saved with the loader's notes
to ``<staging>/checkpoint.pt``, replaced atomically. The leaf files themselves are the episode
outputs: they are append-only, so a checkpoint is a length and a digest per file, never a copy.

A build that stops (an exception, Ctrl-C, ``kill -9``, a full disk) leaves its staging folder. The
next build of the same fingerprint and hub version reads the checkpoint, cuts every leaf file back
to its checkpointed length and re-hashes it (one sequential read of what was written: this both
verifies the bytes and restores the running sha256 the manifest records); files the checkpoint does
not know are deleted. If every digest agrees the loader is handed the finished episode ids
(``LoaderContext.done_episodes``) and never converts them again; anything else (a power loss took pages
the checkpoint counted on, an edited file, another hub version) starts the build over. Nothing is
fsynced, as for every build: a killed process loses nothing the kernel holds, and the digests catch
what a power loss did. A staging folder never holds a manifest, so nothing in it is ever served: the
build is published by the same rename as any build, once complete.

At most :data:`CHECKPOINT_EVERY_S` seconds of work are redone after an interruption; a checkpoint
costs one wait for the queued writes and a file of a few MB (the episode index and the statistics),
whatever the dataset size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from datasets_hub import __version__

#: the checkpoint's file name in a staging folder
CHECKPOINT = "checkpoint.pt"
#: seconds between two checkpoints at least (after a chunk); the most work an interruption can cost
CHECKPOINT_EVERY_S = 10.0
_VERSION = 1


@dataclass(frozen=True)
class Checkpoint:
    """What a staging folder's checkpoint holds: the writer's state and the loader's notes so far."""

    writer: dict[str, Any]
    notes: dict[str, Any]

    @property
    def done_episodes(self) -> frozenset[int]:
        return frozenset(int(i) for i in self.writer["episodes"]["id"].tolist())


def save_checkpoint(staging: Path, fingerprint: str, writer_state: dict[str, Any], notes: dict[str, Any]) -> None:
    """Write the checkpoint of the build ``fingerprint`` staged in ``staging`` (atomic replace)."""
    payload = {
        "version": _VERSION,
        "fingerprint": fingerprint,
        "hub_version": __version__,
        "writer": writer_state,
        "notes": notes,
    }
    partial = staging / (CHECKPOINT + ".partial")
    torch.save(payload, partial)
    os.replace(partial, staging / CHECKPOINT)


def has_checkpoint(staging: Path) -> bool:
    return (staging / CHECKPOINT).is_file()


def drop_checkpoint(staging: Path) -> None:
    (staging / CHECKPOINT).unlink(missing_ok=True)


def load_checkpoint(staging: Path, fingerprint: str) -> Checkpoint | None:
    """The checkpoint in ``staging`` if it belongs to build ``fingerprint`` of this hub version, else None
    (missing, unreadable, or written by another version: the build starts over)."""
    path = staging / CHECKPOINT
    if not path.is_file():
        return None
    try:  # tensors and plain values only: nothing in the file can run code
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - a torn or foreign file is no checkpoint; the build starts over
        return None
    if (
        not isinstance(payload, dict)
        or payload.get("version") != _VERSION
        or payload.get("fingerprint") != fingerprint
        or payload.get("hub_version") != __version__
    ):
        return None
    return Checkpoint(writer=payload["writer"], notes=dict(payload["notes"]))


@dataclass(frozen=True)
class Resumable:
    """What an interrupted build's staging folder holds for the next load (``datasets-hub cache prune`` shows it)."""

    episodes_done: int
    #: when the last checkpoint was written (seconds since the epoch): the build's last progress
    saved_at: float


def resumable(staging: Path, fingerprint: str) -> Resumable | None:
    """The progress the next build of ``fingerprint`` would resume from ``staging``; None when it would
    start over (no checkpoint, an unreadable one, or one of another build or hub version)."""
    if not has_checkpoint(staging):
        return None
    checkpoint = load_checkpoint(staging, fingerprint)
    if checkpoint is None:
        return None
    try:
        saved_at = (staging / CHECKPOINT).stat().st_mtime
    except OSError:  # replaced or removed in between: a build is running on it (its lock says so)
        return None
    return Resumable(len(checkpoint.done_episodes), saved_at)
