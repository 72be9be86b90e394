"""What the data doctor reports: the defect classes, one finding per defect found, and the report.

A :class:`DefectClass` is a kind of defect (``"episode-split"``, ``"teleport"``, ...) with its family
(the module that looks for it), its default severity and what it does to training. Every class is
registered in :data:`CLASSES` when its module is imported, so the CLI, the docs test and the
planted-defect tests can list them all. A :class:`Finding` is one class found in one column (or one
file): how many rows, episodes or frames, the first examples as ``(episode, step)`` pairs, and a
one-line detail. :class:`DoctorReport` gathers them and turns them into a table, JSON and an exit code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class Severity(IntEnum):
    """How bad a finding is; the report's exit code follows the worst one (see :meth:`DoctorReport.exit_code`)."""

    INFO = 0  #: worth knowing, harmless for most training
    WARNING = 1  #: likely to hurt training; check before you train
    ERROR = 2  #: the data contradicts itself or its metadata: results from it are wrong

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class DefectClass:
    """One kind of defect: ``name`` (kebab-case, stable: scripts match on it), ``family`` (the check
    module), ``severity`` (the default; a finding may lower it, e.g. an all-zero reward is a warning
    where an all-zero observation is an error), ``consequence`` (what training on it does)."""

    name: str
    family: str
    severity: Severity
    consequence: str
    summary: str


#: every defect class by name, in registration order (filled by the check modules)
CLASSES: dict[str, DefectClass] = {}


def defect(name: str, family: str, severity: Severity, summary: str, consequence: str) -> DefectClass:
    """Register (once) and return the defect class ``name``."""
    known = CLASSES.get(name)
    cls = DefectClass(name, family, severity, consequence, summary)
    if known is not None and known != cls:
        raise ValueError(f"defect class {name!r} registered twice with different meanings")
    CLASSES[name] = cls
    return cls


#: how many examples a finding keeps
MAX_EXAMPLES = 5


@dataclass
class Finding:
    """One defect found: ``count`` ``unit`` (rows, episodes, frames, columns, files) affected, in
    ``column`` (or ``None`` when it is about the whole source); ``examples`` are the first
    ``(episode, step)`` pairs (``step`` None when the defect concerns a whole episode)."""

    defect: DefectClass
    count: int
    unit: str
    detail: str
    column: str | None = None
    examples: list[tuple[int, int | None]] = field(default_factory=list)
    severity: Severity | None = None  # None: the class's default

    def __post_init__(self) -> None:
        if self.severity is None:
            self.severity = self.defect.severity
        self.examples = [(int(e), None if s is None else int(s)) for e, s in self.examples[:MAX_EXAMPLES]]

    @property
    def name(self) -> str:
        return self.defect.name

    @property
    def level(self) -> Severity:
        return self.severity if self.severity is not None else self.defect.severity

    def to_json(self) -> dict[str, Any]:
        return {
            "class": self.name,
            "family": self.defect.family,
            "severity": str(self.level),
            "column": self.column,
            "count": self.count,
            "unit": self.unit,
            "examples": [{"episode": e, "step": s} for e, s in self.examples],
            "detail": self.detail,
            "consequence": self.defect.consequence,
        }


def examples_at(episode: Any, step: Any, where: Any) -> list[tuple[int, int | None]]:
    """The first :data:`MAX_EXAMPLES` ``(episode, step)`` pairs of the rows selected by ``where`` (a bool mask
    or row indices) from per-row ``episode``/``step`` arrays."""
    import numpy as np

    rows = np.flatnonzero(where) if np.asarray(where).dtype == np.bool_ else np.asarray(where)
    rows = rows[:MAX_EXAMPLES]
    return [(int(episode[r]), int(step[r])) for r in rows]


@dataclass
class DoctorReport:
    """The doctor's report on one source. ``kind`` says what was read (``"build"``, ``"lerobot"``,
    ``"hdf5"``, ``"npz"``, ``"tfrecord"``); ``rows`` and ``episodes`` the source's size, ``rows_read`` how
    many rows the step checks looked at (fewer than ``rows`` when ``sampled``); ``checks`` the families
    that ran; ``notes`` what could not be checked and why."""

    target: str
    kind: str
    rows: int = 0
    episodes: int = 0
    rows_read: int = 0
    sampled: bool = False
    seconds: float = 0.0
    checks: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def worst(self) -> Severity | None:
        """The severity of the worst finding, None when there is none."""
        return max((f.level for f in self.findings), default=None)

    @property
    def ok(self) -> bool:
        """No error-level finding (warnings and infos allowed)."""
        return self.worst is None or self.worst < Severity.ERROR

    def of(self, name: str) -> list[Finding]:
        """The findings of the defect class ``name`` (an unknown name is an :class:`~datasets_hub.errors.InvalidParameter`)."""
        if name not in CLASSES:
            from datasets_hub.errors import InvalidParameter, did_you_mean

            raise InvalidParameter(f"no defect class {name!r}.{did_you_mean(name, list(CLASSES))}")
        return [f for f in self.findings if f.name == name]

    def exit_code(self, fail_on: Severity = Severity.WARNING) -> int:
        """``1`` when an error was found, ``3`` when the worst is a warning (and ``fail_on`` is WARNING or
        INFO), ``4`` when the worst is an info and ``fail_on`` is INFO; ``0`` otherwise."""
        worst = self.worst
        if worst is None or worst < fail_on:
            return 0
        return {Severity.ERROR: 1, Severity.WARNING: 3, Severity.INFO: 4}[worst]

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kind": self.kind,
            "rows": self.rows,
            "episodes": self.episodes,
            "rows_read": self.rows_read,
            "sampled": self.sampled,
            "seconds": round(self.seconds, 3),
            "worst": None if self.worst is None else str(self.worst),
            "checks": list(self.checks),
            "findings": [f.to_json() for f in self.sorted_findings()],
            "notes": list(self.notes),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1)

    def sorted_findings(self) -> list[Finding]:
        """Worst first, then by class and column."""
        return sorted(self.findings, key=lambda f: (-int(f.level), f.name, f.column or ""))

    def table(self) -> list[str]:
        """The findings as aligned text lines: severity, class, column, count, examples, then the detail and
        the consequence indented under each."""
        head = (
            f"{self.target} ({self.kind}): {self.rows:,} rows, {self.episodes:,} episodes"
            + (f"; step checks read {self.rows_read:,} sampled rows" if self.sampled else "")
            + f"; {len(self.checks)} check families in {self.seconds:.2f} s"
        )
        if not self.findings:
            return [head, "no defect found"] + [f"note: {n}" for n in self.notes]
        rows = []
        for f in self.sorted_findings():
            examples = ", ".join(f"({e}, {'-' if s is None else s})" for e, s in f.examples) or "-"
            rows.append((str(f.level), f.name, f.column or "-", f"{f.count:,} {f.unit}", examples))
        headers = ("severity", "class", "column", "count", "first (episode, step)")
        cells = [list(headers), *[list(r) for r in rows]]
        widths = [max(len(c[i]) for c in cells) for i in range(len(headers))]
        lines = [head, "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
        for f, row in zip(self.sorted_findings(), rows, strict=True):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
            lines.append(f"    {f.detail}")
            lines.append(f"    consequence: {f.defect.consequence}")
        counts = {s: sum(f.level == s for f in self.findings) for s in Severity}
        lines.append(
            f"{counts[Severity.ERROR]} error(s), {counts[Severity.WARNING]} warning(s), {counts[Severity.INFO]} info"
        )
        lines += [f"note: {n}" for n in self.notes]
        return lines


UNREADABLE = defect(
    "unreadable-file",
    "files",
    Severity.ERROR,
    "a source file cannot be opened or parsed (truncated download, bad framing or checksum, broken header)",
    "a loader fails on it mid-build, or worse, a lenient reader stops early and the dataset silently "
    "loses every row after the damage",
)
