"""A build, read for the doctor through the build format's one reader (``open_build``).

Low-dimensional columns (at most :data:`LOW_DIM` values per row) are read whole when the build has at
most ``max_rows`` transitions; a larger build is read as a random sample of whole episodes holding
about ``max_rows`` transitions (every check then sees whole episodes). Image-like columns are
sampled: :data:`FRAMES` frames spread over the rows read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from datasets_hub.doctor.steps import ActionSpace, SourceRead, StepTable

#: a column with more values per row than this is image-like: only sampled frames are read
LOW_DIM = 1024
#: how many frames of each image-like column the numeric checks look at
FRAMES = 64


def _name(key: tuple[str, ...]) -> str:
    return "/".join(key)


def declared_action_space(notes: Any, where: str) -> ActionSpace | None:
    """The first ``action_space`` recorded in a build's notes (Minari records gymnasium's), if any."""
    if isinstance(notes, dict):
        space = notes.get("action_space")
        if isinstance(space, dict) and "type" in space:
            return ActionSpace.from_gymnasium_json(space, where)
        for value in notes.values():
            found = declared_action_space(value, where)
            if found is not None:
                return found
    return None


def _chosen_episodes(length: np.ndarray, max_rows: int, seed: int) -> tuple[np.ndarray, bool]:
    if int(length.sum()) <= max_rows:
        return np.arange(length.size), False
    order = np.random.default_rng(seed).permutation(length.size)
    k = int(np.searchsorted(np.cumsum(length[order]), max_rows)) + 1
    return np.sort(order[:k]), True


def read_build(path: str | Path, *, max_rows: int, seed: int = 0) -> SourceRead:
    """The build at ``path`` as a :class:`SourceRead` (``kind="build"``)."""
    from datasets_hub.build.frames import FrameColumn
    from datasets_hub.build.reader import open_build

    build = open_build(path)
    start = build.episodes["start"].numpy()
    length = build.episodes["length"].numpy()
    ids = build.episodes["id"].numpy()
    chosen, sampled = _chosen_episodes(length, max_rows, seed)
    lens = length[chosen]
    total = int(lens.sum())
    first = np.cumsum(lens) - lens  # where each chosen episode starts among the rows read
    within = np.arange(total, dtype=np.int64) - np.repeat(first, lens)
    rows = np.repeat(start[chosen], lens) + within  # transitions
    obs_rows = rows + np.repeat(chosen, lens)  # observation rows: T + 1 per episode
    table = StepTable(episode=np.repeat(ids[chosen], lens), step=within)
    for key, column in build.obs.items():
        name = _name(key)
        if isinstance(column, FrameColumn):  # compressed camera frames: decode only the sampled ones
            if total:
                picks = obs_rows[np.linspace(0, total - 1, min(FRAMES, total)).astype(np.int64)]
                table.frames[name] = column.take(picks)
            continue
        per_row = int(np.prod(column.shape[1:], dtype=np.int64))
        if per_row > LOW_DIM or (column.dtype.is_floating_point is False and len(column.shape) >= 3):
            if total:
                picks = obs_rows[np.linspace(0, total - 1, min(FRAMES, total)).astype(np.int64)]
                table.frames[name] = column.numpy()[picks]
            continue
        values = column.numpy()
        table.observations[name] = values[obs_rows]
        stored = build.steps.get(("next", *key))
        table.next_observations[name] = stored.numpy()[rows] if stored is not None else values[obs_rows + 1]
        table.columns[name] = table.observations[name]

    def step_column(key: tuple[str, ...]) -> np.ndarray | None:
        column = build.steps.get(key)
        return None if column is None else column.numpy()[rows]

    table.action = step_column(("action",))
    reward = step_column(("next", "reward"))
    table.reward = None if reward is None else reward.reshape(total, -1)[:, 0]
    table.terminated = step_column(("next", "terminated"))
    table.truncated = step_column(("next", "truncated"))
    if table.action is not None:
        table.columns["action"] = table.action
    if reward is not None:
        table.columns["next/reward"] = reward
    timestamp = step_column(("info", "timestamp"))
    manifest_notes = build.manifest.get("notes") or {}
    if timestamp is not None:
        table.timestamp = timestamp.reshape(total)
        fps = manifest_notes.get("fps") if isinstance(manifest_notes, dict) else None
        table.fps = float(fps) if isinstance(fps, (int, float)) and fps > 0 else None
    frame_index = step_column(("info", "frame_index"))
    if frame_index is not None:
        table.step = frame_index.reshape(total).astype(np.int64)
    table.action_space = declared_action_space(manifest_notes, f"{path}/manifest.json notes")
    return SourceRead(
        kind="build",
        table=table,
        rows=int(build.transitions),
        episodes=int(ids.size),
        sampled=sampled,
        has_step_column=frame_index is not None,
    )
