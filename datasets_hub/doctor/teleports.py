"""Teleports: a state that jumps, from one row of an episode to the next, far beyond how far states
move in a step anywhere else in the dataset (D4RL antmaze resets the ant without ending the episode).

Per continuous state dimension, a step's jump counts as a teleport when it is at least
:data:`FACTOR` times the dimension's 99th percentile of jumps (a scale the rare teleports themselves
cannot inflate) and at least a tenth of the dimension's range. Dimensions with few distinct values (gripper states, flags, counters) are left out:
they jump by design. Consecutive rows are compared, never a stored next observation, so a reset hidden
between ``next_observations[t]`` and ``observations[t + 1]`` is seen.
"""

from __future__ import annotations

import numpy as np

from datasets_hub.doctor.findings import Finding, Severity, defect, examples_at
from datasets_hub.doctor.steps import StepTable

FAMILY = "teleports"

TELEPORT = defect(
    "teleport",
    FAMILY,
    Severity.WARNING,
    "within an episode, the state jumps between two steps far beyond the dataset's step distribution",
    "a reset (or a splice of two episodes) hides inside an episode: the transition across it teaches a "
    "dynamics model and a critic that the agent can teleport, and goal-conditioned relabelling pairs "
    "states that no policy can connect",
)

FACTOR = 20.0
#: a dimension with at most this many distinct values (in the rows read) is discrete: not checked
DISCRETE_VALUES = 8
#: teleports are rare: a dimension where more than this share of steps "jumps" just moves that way
MAX_SHARE = 0.01
#: the percentiles that set each dimension's scale are taken over at most this many steps
SCALE_ROWS = 200_000


def check(table: StepTable) -> list[Finding]:
    """Needs numeric observations; compares consecutive rows of the same episode."""
    if len(table) < 2:
        return []
    same = np.zeros(len(table), bool)
    same[:-1] = table.episode[1:] == table.episode[:-1]
    if same.sum() < 100:  # too few steps to know what a normal step is
        return []
    findings = []
    for key, column in table.observations.items():
        values = np.asarray(column)
        if not np.issubdtype(values.dtype, np.floating):
            continue
        flat = values.reshape(len(table), -1)
        rows = np.flatnonzero(same[:-1])
        jump = np.abs(flat[rows + 1] - flat[rows])
        if not np.isfinite(jump).all():
            continue  # the numeric check reports it
        # the scales (percentiles) from at most SCALE_ROWS evenly spaced steps; every step is compared
        step_sample = jump[:: max(1, rows.size // SCALE_ROWS)]
        row_sample = flat[:: max(1, flat.shape[0] // SCALE_ROWS)]
        usual = np.percentile(step_sample, 99, axis=0)
        low, high = np.percentile(row_sample, [0.1, 99.9], axis=0)
        teleports = np.zeros(rows.size, bool)
        dims = []
        for d in range(flat.shape[1]):
            if np.unique(row_sample[:: max(1, len(row_sample) // 20_000), d]).size <= DISCRETE_VALUES:
                continue
            threshold = max(FACTOR * float(usual[d]), 0.1 * float(high[d] - low[d]))
            hit = jump[:, d] > threshold
            if 0 < hit.sum() <= MAX_SHARE * rows.size:
                teleports |= hit
                dims.append(d)
        if teleports.any():
            at = rows[teleports] + 1  # the row the state jumped to
            findings.append(
                Finding(
                    TELEPORT,
                    count=int(teleports.sum()),
                    unit="steps",
                    column=key,
                    detail=f"{int(np.unique(table.episode[at]).size)} episode(s) jump in dimension(s) "
                    f"{dims[:8]}{' ...' if len(dims) > 8 else ''} by over {FACTOR:g}x their 99th-percentile step",
                    examples=examples_at(table.episode, table.step, at),
                )
            )
    return findings
