"""The data doctor (``datasets-hub verify --deep``): finds the defects public datasets really have.

:func:`diagnose` reads a build, a buffer over one, or raw upstream files (LeRobot, HDF5, npz,
TFRecord) and returns a :class:`DoctorReport` of :class:`Finding` s, one per defect class found, each
with counts, the first ``(episode, step)`` examples and the likely consequence for training.
Every defect class is in :data:`CLASSES` (docs/guide/doctor.md describes them and the public cases
that motivated them).
"""

from __future__ import annotations

from datasets_hub.doctor.diagnosis import DEFAULT_MAX_ROWS, diagnose
from datasets_hub.doctor.findings import CLASSES, DefectClass, DoctorReport, Finding, Severity
from datasets_hub.doctor.steps import ActionSpace

__all__ = [
    "CLASSES",
    "DEFAULT_MAX_ROWS",
    "ActionSpace",
    "DefectClass",
    "DoctorReport",
    "Finding",
    "Severity",
    "diagnose",
]
