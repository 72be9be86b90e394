"""Actions outside the declared action space: a box's bounds, or a discrete space's ``start .. start + n - 1``."""

from __future__ import annotations

import numpy as np

from datasets_hub.doctor.findings import Finding, Severity, defect, examples_at
from datasets_hub.doctor.steps import StepTable

FAMILY = "action space"

OUT_OF_SPACE = defect(
    "action-out-of-space",
    FAMILY,
    Severity.ERROR,
    "actions outside the action space the dataset declares",
    "a policy with a squashed (tanh) or categorical head cannot represent these actions: behaviour "
    "cloning and its log-likelihoods are biased, and the environment clips or rejects them at evaluation",
)


def check(table: StepTable) -> list[Finding]:
    """Needs ``action`` and ``action_space``."""
    space, action = table.action_space, table.action
    if space is None or action is None or len(table) == 0:
        return []
    values = np.asarray(action).reshape(len(table), -1).astype(np.float64)
    if space.n is not None:
        outside = (values < space.start) | (values > space.start + space.n - 1) | (values != np.round(values))
    else:
        low, high = (np.asarray(b, np.float64).reshape(-1) for b in (space.low, space.high))
        if low.size not in (1, values.shape[1]) or high.size not in (1, values.shape[1]):
            return [
                Finding(
                    OUT_OF_SPACE,
                    count=len(table),
                    unit="rows",
                    column="action",
                    detail=f"{space.describe()} (declared by {space.source}) has {low.size} value(s) per action, "
                    f"the actions have {values.shape[1]}: the declaration does not describe these actions",
                )
            ]
        slack = 1e-6 * np.maximum(1.0, np.maximum(np.abs(low), np.abs(high)))
        outside = (values < low - slack) | (values > high + slack)
    bad = outside.any(axis=1)
    if not bad.any():
        return []
    worst = values[bad]
    return [
        Finding(
            OUT_OF_SPACE,
            count=int(bad.sum()),
            unit="rows",
            column="action",
            detail=f"{int(outside.sum())} action value(s) outside {space.describe()} (declared by {space.source}); "
            f"actions read span [{worst.min():g}, {worst.max():g}]",
            examples=examples_at(table.episode, table.step, bad),
        )
    ]
