"""The ``datasets-hub`` command line (docs/guide/cli.md); the console script runs :func:`main`.

See :mod:`datasets_hub.cli.main` for the exit codes and the error contract.
"""

from __future__ import annotations

from datasets_hub.cli.common import parse_param
from datasets_hub.cli.main import build_parser, main

__all__ = ["build_parser", "main", "parse_param"]
