"""Numeric health of the columns: NaN or infinite values, columns that are zero everywhere or hold one
value everywhere (a loader that read nothing, a sensor that was never plugged in)."""

from __future__ import annotations

import numpy as np

from datasets_hub.doctor.findings import Finding, Severity, defect, examples_at
from datasets_hub.doctor.steps import StepTable

FAMILY = "numeric"

NON_FINITE = defect(
    "non-finite",
    FAMILY,
    Severity.ERROR,
    "NaN or infinite values",
    "one NaN in a batch turns the loss, the gradients and then every weight into NaN; normalisation "
    "statistics computed over the column are NaN too",
)
ALL_ZERO = defect(
    "all-zero-column",
    FAMILY,
    Severity.ERROR,
    "a column is zero in every row read (for image keys: every sampled frame is black)",
    "the column carries no information: most likely the converter read nothing (TorchRL's Minari loader "
    "returned zeros for years); a policy or critic trained on it learns from nothing",
)
CONSTANT = defect(
    "constant-column",
    FAMILY,
    Severity.WARNING,
    "a column holds one and the same non-zero value in every row read",
    "no information in the column, and a zero standard deviation: per-key normalisation divides by "
    "zero or by an epsilon and blows the column up",
)


def check(table: StepTable, notes: list[str]) -> list[Finding]:
    """Every column of ``table.columns`` (rows aligned with the table) and every sampled frame key.

    A float column that is NaN in every row is how a source says it does not know the values (OGBench
    stores no reward, the loader writes NaN and its card says so): a note in ``notes``, not a finding."""
    findings = []
    for name, column in table.columns.items():
        values = np.asarray(column)
        if values.dtype == np.bool_ or values.shape[0] == 0 or not np.issubdtype(values.dtype, np.number):
            continue
        flat = values.reshape(values.shape[0], -1)
        if np.issubdtype(flat.dtype, np.floating):
            finite = np.isfinite(flat)
            bad_rows = ~finite.all(axis=1)
            if np.isnan(flat).all():
                notes.append(f"{name} is NaN in every row read: the source does not know it; not checked")
                continue
            if bad_rows.any():
                nan = int(np.isnan(flat).sum())
                findings.append(
                    Finding(
                        NON_FINITE,
                        count=int(bad_rows.sum()),
                        unit="rows",
                        column=name,
                        detail=f"{nan} NaN and {int((~finite).sum()) - nan} infinite value(s)",
                        examples=examples_at(table.episode, table.step, bad_rows),
                    )
                )
                continue  # constant/zero checks on a column with NaN say nothing more
        findings += _constant(
            name, flat, "rows", severity_zero=_zero_severity(name), severity_constant=_constant_severity(name)
        )
    for name, frames in table.frames.items():
        flat = np.asarray(frames).reshape(len(frames), -1)
        if flat.shape[0]:
            findings += _constant(name, flat, "sampled frames", severity_zero=Severity.ERROR)
    return findings


def _zero_severity(name: str) -> Severity:
    # sparse-reward tasks where nothing succeeded have all-zero rewards: a warning, not a contradiction
    return Severity.WARNING if "reward" in name else Severity.ERROR


def _constant_severity(name: str) -> Severity:
    # survival tasks (CartPole, Hopper's alive bonus alone) pay the same reward every step by design
    return Severity.INFO if "reward" in name else Severity.WARNING


def _constant(
    name: str, flat: np.ndarray, unit: str, *, severity_zero: Severity, severity_constant: Severity = Severity.WARNING
) -> list[Finding]:
    if flat.shape[0] < 2 or flat.shape[1] == 0:
        return []
    first = flat[0]
    if not (flat == first).all():
        return []
    if not first.any():
        return [
            Finding(
                ALL_ZERO,
                count=int(flat.shape[0]),
                unit=unit,
                column=name,
                detail=f"all {flat.shape[0]:,} {unit} read are zero",
                severity=severity_zero,
            )
        ]
    shown = ", ".join(f"{v:g}" for v in first[:4].astype(np.float64)) + (", ..." if first.size > 4 else "")
    return [
        Finding(
            CONSTANT,
            count=int(flat.shape[0]),
            unit=unit,
            column=name,
            detail=f"every one of the {flat.shape[0]:,} {unit} read is [{shown}]",
            severity=severity_constant,
        )
    ]
