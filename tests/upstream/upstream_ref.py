"""Importing upstream reference packages: skip in an ordinary venv, fail under ``make test-upstream``."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

REQUIRED_ENV = "DATASETS_HUB_UPSTREAM_REQUIRED"


def upstream_required() -> bool:
    """Whether this run is ``make test-upstream`` (where every reference package must be present)."""
    return os.environ.get(REQUIRED_ENV, "") not in ("", "0")


def upstream(module: str) -> ModuleType:
    """Import an upstream reference module: skip when it is missing in an ordinary venv, fail (naming
    the requirements files) under ``make test-upstream``."""
    try:
        return importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - a broken install may raise anything at import; each case is reported
        if upstream_required():
            pytest.fail(
                f"upstream reference {module!r} cannot be imported under make test-upstream ({exc!r}); "
                f"install it into .venv-upstream: see tests/upstream/requirements*.txt",
                pytrace=False,
            )
        pytest.skip(f"{module} is not installed (run `make test-upstream`)")
