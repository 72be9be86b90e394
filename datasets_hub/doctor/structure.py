"""Episode structure: are the rows of each episode together, and numbered 0, 1, 2, ... within it?

Also registers the classes the raw-source readers report from metadata (orphaned rows, repeated
episode ids, metadata that disagrees with the rows, a broken global frame index): they are
structure defects found by comparing two descriptions of the same episodes.
"""

from __future__ import annotations

import numpy as np

from datasets_hub.doctor.findings import Finding, Severity, defect, examples_at
from datasets_hub.doctor.steps import StepTable

FAMILY = "structure"

EPISODE_SPLIT = defect(
    "episode-split",
    FAMILY,
    Severity.ERROR,
    "the rows of one episode id are not contiguous: the id appears in two or more separate runs of rows",
    "two different episodes (or one episode cut in pieces) share an id: slices, returns-to-go and "
    "episode-wise splits mix them, and a train/val split by episode leaks",
)
STEP_GAP = defect(
    "frame-index-gap",
    FAMILY,
    Severity.ERROR,
    "the source's step counter (frame_index) does not run 0, 1, 2, ... within an episode",
    "rows are missing, repeated or out of order inside episodes: next observations, n-step returns and "
    "windows pair frames that are not one step apart",
)
ORPHAN_ROWS = defect(
    "orphan-rows",
    FAMILY,
    Severity.ERROR,
    "rows whose episode is not in the episode metadata",
    "a reader driven by the metadata drops these rows silently, one driven by the data keeps episodes "
    "that have no task, length or video span: the two disagree on what the dataset is",
)
EPISODE_ID_DUPLICATE = defect(
    "episode-id-duplicate",
    FAMILY,
    Severity.ERROR,
    "the episode metadata lists the same episode index more than once",
    "lookups by episode index return one of several entries: the wrong length, task or video span",
)
METADATA_MISMATCH = defect(
    "metadata-mismatch",
    FAMILY,
    Severity.ERROR,
    "the metadata's length, row range or totals disagree with the rows actually stored",
    "windows and episode boundaries computed from the metadata cross into other episodes or read past "
    "the data; totals used for sampling weights are wrong",
)
GLOBAL_INDEX_GAP = defect(
    "global-index-gap",
    FAMILY,
    Severity.ERROR,
    "the global frame index (LeRobot's `index`) is not 0 .. N-1 in row order",
    "readers that address frames by the global index (delta_timestamps, from/to ranges) fetch the wrong rows",
)


def check(table: StepTable, *, has_step_column: bool) -> list[Finding]:
    """Episode ids in more than one run; with ``has_step_column``, steps that do not count up from 0."""
    findings = []
    starts, lengths = table.runs()
    if starts.size:
        ids = table.episode[starts]
        order = np.argsort(ids, kind="stable")
        repeated = np.zeros(ids.size, dtype=bool)
        repeated[order[1:]] = ids[order[1:]] == ids[order[:-1]]  # every run after an id's first one
        if repeated.any():
            again = starts[repeated]
            findings.append(
                Finding(
                    EPISODE_SPLIT,
                    count=int(np.unique(ids[repeated]).size),
                    unit="episodes",
                    column="episode",
                    detail=f"{int(repeated.sum())} run(s) of rows reuse an episode id already seen earlier "
                    f"({int(lengths[repeated].sum())} rows)",
                    examples=[(int(table.episode[r]), int(table.step[r])) for r in again],
                )
            )
    if has_step_column and len(table):
        # per episode id, its rows in row order (a split episode is reported once, above, not here too)
        order = np.argsort(table.episode, kind="stable")
        ids = table.episode[order]
        first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        sizes = np.diff(np.r_[first, ids.size])
        step = table.step.astype(np.int64)
        expected = np.empty_like(step)
        expected[order] = np.arange(ids.size, dtype=np.int64) - np.repeat(first, sizes)
        bad = step != expected
        if bad.any():
            findings.append(
                Finding(
                    STEP_GAP,
                    count=int(bad.sum()),
                    unit="rows",
                    column="frame_index",
                    detail=f"{int(np.unique(table.episode[bad]).size)} episode(s) have a frame index that skips, "
                    "repeats or does not start at 0 (examples show the stored frame index)",
                    examples=examples_at(table.episode, step, bad),
                )
            )
    return findings
