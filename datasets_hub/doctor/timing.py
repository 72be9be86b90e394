"""Timestamps and frame rate: strictly increasing within each episode, on the ``1/fps`` grid."""

from __future__ import annotations

import numpy as np

from datasets_hub.doctor.findings import Finding, Severity, defect, examples_at
from datasets_hub.doctor.steps import StepTable

FAMILY = "timing"

NOT_MONOTONE = defect(
    "timestamps-not-monotone",
    FAMILY,
    Severity.ERROR,
    "a timestamp is not larger than the one before it in the same episode",
    "frames looked up by time (video decoding, delta_timestamps windows) come back in the wrong order "
    "or twice; velocities computed from time differences divide by zero or flip sign",
)
OFF_GRID = defect(
    "timestamps-off-grid",
    FAMILY,
    Severity.WARNING,
    "timestamps are not the episode's first timestamp plus step / fps (beyond 1e-4 s, LeRobot's tolerance)",
    "readers that turn time into frame numbers (video frames, windows at fixed offsets) pick a "
    "neighbouring frame; LeRobot's own loader refuses such episodes",
)

#: LeRobot's default tolerance between a timestamp and the fps grid
TOLERANCE_S = 1e-4


def check(table: StepTable) -> list[Finding]:
    """Needs ``timestamp``; the grid check also needs ``fps``."""
    if table.timestamp is None or len(table) < 2:
        return []
    ts = table.timestamp.astype(np.float64)
    findings = []
    same = table.episode[1:] == table.episode[:-1]
    back = np.zeros(len(table), dtype=bool)
    back[1:] = same & (ts[1:] <= ts[:-1])
    if back.any():
        findings.append(
            Finding(
                NOT_MONOTONE,
                count=int(back.sum()),
                unit="rows",
                column="timestamp",
                detail=f"in {int(np.unique(table.episode[back]).size)} episode(s) time stands still or goes back",
                examples=examples_at(table.episode, table.step, back),
            )
        )
    if table.fps and table.fps > 0:
        starts, lengths = table.runs()
        t0 = np.repeat(ts[starts], lengths)
        k = np.arange(len(table)) - np.repeat(starts, lengths)
        grid = t0 + k / float(table.fps)
        # float32 timestamps carry ~1e-7 relative error: allow that on top of the tolerance
        tolerance = TOLERANCE_S + 4 * np.finfo(np.float32).eps * np.abs(grid)
        off = (np.abs(ts - grid) > tolerance) & ~back
        if off.any():
            worst = float(np.abs(ts - grid)[off].max())
            findings.append(
                Finding(
                    OFF_GRID,
                    count=int(off.sum()),
                    unit="rows",
                    column="timestamp",
                    detail=f"{int(np.unique(table.episode[off]).size)} episode(s) drift off the {table.fps:g} fps "
                    f"grid by up to {worst:.4g} s",
                    examples=examples_at(table.episode, table.step, off),
                )
            )
    return findings
