"""Interrupted resumable builds as ``datasets-hub cache prune`` sees them (docs/guide/cli.md).

The staging folder of a build that stopped with a checkpoint (:mod:`datasets_hub.build.resume`) is not
litter: the next load of the dataset goes on from the episodes it holds, which for a DROID-sized LeRobot
build can be hours of decoding. Prune keeps it and says so, unless asked to give the resume up.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from datasets_hub.cache.layout import datasets_dir

#: what prune says of a staging folder it keeps
KEPT = "kept: loading the dataset again resumes it (`--drop-resumable` removes it)"
#: what prune says of a staging folder no build could resume
UNFINISHED = "unfinished build (its process died)"


def staging_verdict(staging: Path, final: Path, cutoff: float | None, drop_resumable: bool) -> tuple[str, bool]:
    """``(reason, keep)`` for the staging folder ``staging`` of the build ``final``: kept when a build could
    resume from it (a checkpoint of that build and of this hub version), unless ``drop_resumable`` or its
    last checkpoint is older than ``cutoff`` (seconds since the epoch; ``--older-than``)."""
    from datasets_hub.build import resume  # torch: only when there is a staging folder to look at

    state = resume.resumable(staging, final.name) if final.parent.is_relative_to(datasets_dir()) else None
    if state is None:
        return UNFINISHED, False
    when = datetime.fromtimestamp(state.saved_at, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    reason = f"resumable build: {state.episodes_done} episode(s) done, last checkpoint {when}"
    if drop_resumable:
        return f"{reason}; --drop-resumable gives up the resume", False
    if cutoff is not None and state.saved_at < cutoff:
        return f"{reason}, older than the --older-than age", False
    return reason, True
