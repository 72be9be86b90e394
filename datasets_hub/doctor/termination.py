"""Termination flags against episode ends: a flag inside an episode, both flags at once, or an
episode that ends with neither."""

from __future__ import annotations

import numpy as np

from datasets_hub.doctor.findings import Finding, Severity, defect, examples_at
from datasets_hub.doctor.steps import StepTable

FAMILY = "termination"

FLAG_MID_EPISODE = defect(
    "flag-mid-episode",
    FAMILY,
    Severity.ERROR,
    "terminated/truncated (or done, is_last) is set on a step that is not its episode's last",
    "either the episode boundaries are wrong (several episodes under one id) or the flag is: TD targets "
    "stop bootstrapping in the middle of an episode and slices run across a reset",
)
BOTH_FLAGS = defect(
    "terminated-and-truncated",
    FAMILY,
    Severity.WARNING,
    "a step is marked both terminated and truncated",
    "whether the value of the next state is bootstrapped depends on which flag a reader trusts: "
    "time-limit ends get treated as true ends or the reverse",
)
END_UNFLAGGED = defect(
    "episode-end-unflagged",
    FAMILY,
    Severity.INFO,
    "an episode's last step has neither terminated nor truncated set (in a source that records both)",
    "readers that find episode ends from the flags (TorchRL's SliceSampler with end_key, D4RL's "
    "qlearning_dataset) merge this episode with the next one",
)


def check(table: StepTable) -> list[Finding]:
    """Needs at least one of ``terminated``/``truncated``."""
    if table.terminated is None and table.truncated is None:
        return []
    n = len(table)
    term = np.zeros(n, bool) if table.terminated is None else table.terminated.reshape(n).astype(bool)
    trunc = np.zeros(n, bool) if table.truncated is None else table.truncated.reshape(n).astype(bool)
    last = table.last_of_run()
    findings = []
    inside = (term | trunc) & ~last
    if inside.any():
        findings.append(
            Finding(
                FLAG_MID_EPISODE,
                count=int(inside.sum()),
                unit="rows",
                column="terminated" if (term & ~last).any() else "truncated",
                detail=f"{int(np.unique(table.episode[inside]).size)} episode(s) carry an end flag before their "
                "last step",
                examples=examples_at(table.episode, table.step, inside),
            )
        )
    both = term & trunc
    if both.any():
        findings.append(
            Finding(
                BOTH_FLAGS,
                count=int(both.sum()),
                unit="rows",
                column="terminated",
                detail="terminated and truncated are both True",
                examples=examples_at(table.episode, table.step, both),
            )
        )
    open_end = last & ~term & ~trunc
    if open_end.any() and table.truncated is not None:  # a source without truncation flags ends at horizons silently
        findings.append(
            Finding(
                END_UNFLAGGED,
                count=int(open_end.sum()),
                unit="episodes",
                column="terminated",
                detail=f"{int(open_end.sum())} of {int(last.sum())} episodes end without a flag",
                examples=examples_at(table.episode, table.step, open_end),
            )
        )
    return findings
