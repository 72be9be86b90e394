"""Tests against upstream's own writers and readers (``make test-upstream``, venv ``.venv-upstream``).

Every test collected under ``tests/upstream/`` gets the ``upstream`` marker (added below; ``make
test`` deselects it). Upstream packages are imported through :func:`upstream_ref.upstream`: in an
ordinary venv they are absent and the tests skip; ``make test-upstream`` sets
``DATASETS_HUB_UPSTREAM_REQUIRED=1``, and then a missing or broken upstream package FAILS the test:
the target can never pass by skipping.

To add a reference package: append it to ``tests/upstream/requirements.txt`` (or
``requirements-nodeps.txt`` for packages whose declared dependencies must not be installed), write
``tests/upstream/test_upstream_<loader>.py`` (file names must not repeat those of ``tests/``) and
import the package with ``upstream("name")``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.upstream)
