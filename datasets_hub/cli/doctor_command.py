"""``datasets-hub verify --deep``: the checksums, then the data doctor (docs/guide/doctor.md).

The id may also be a path (a build directory, a LeRobot root, HDF5/npz/TFRecord files): the doctor
then reads it directly, before any build. Output: the checksum lines as plain ``verify`` prints them,
then the doctor's table; ``--json`` prints one JSON object instead. Exit code: ``1`` when a checksum
fails or the doctor finds an error, ``3`` when the worst finding is a warning, ``4`` an info (only with
``--fail-on info``), ``0`` otherwise; ``--fail-on error`` lets warnings pass.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from datasets_hub.cli.common import PROG, out, params_of


def add_deep_options(p: argparse.ArgumentParser) -> None:
    """The ``--deep`` options of ``verify``."""
    p.add_argument("--deep", action="store_true", help="also look at the data: the data doctor's checks")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON (ok, checked, problems, notes; --deep: the report)",
    )
    p.add_argument(
        "--fail-on",
        choices=("error", "warning", "info"),
        default="warning",
        help="with --deep: the least severe finding that makes the exit code non-zero (default: warning)",
    )
    p.add_argument(
        "--max-rows",
        type=int,
        default=None,
        help="with --deep: rows the step checks read at most (whole episodes sampled beyond; default 1,000,000)",
    )


def cmd_verify_deep(args: argparse.Namespace) -> int:
    from datasets_hub.doctor import DEFAULT_MAX_ROWS, Severity, diagnose

    max_rows = args.max_rows if args.max_rows is not None else DEFAULT_MAX_ROWS
    fail_on = Severity[args.fail_on.upper()]
    problems: list[str] = []
    byte_lines: list[str] = []
    data: dict[str, Any] = {"id": args.id}
    if Path(args.id).exists():  # a path: no catalogue, no checksums, only the doctor
        reports = [diagnose(args.id, max_rows=max_rows)]
    else:
        from datasets_hub.cache.verify import verify
        from datasets_hub.doctor.diagnosis import diagnose_cached

        result = verify(args.id, params=params_of(args), all_builds=args.all_builds)
        problems = result.problems
        byte_lines = [f"note    {line}" for line in result.notes] + [f"FAILED  {line}" for line in problems]
        if args.verbose:
            byte_lines = [f"ok      {line}" for line in result.checked] + byte_lines
        data["checksums"] = {"checked": len(result.checked), "problems": problems, "notes": result.notes}
        reports = diagnose_cached(args.id, params=params_of(args), all_builds=args.all_builds, max_rows=max_rows)
    codes = [r.exit_code(fail_on) for r in reports]
    # the most severe wins: 1 (error) over 3 (warning) over 4 (info) over 0
    code = 1 if problems or 1 in codes else 3 if 3 in codes else 4 if 4 in codes else 0
    if args.json:
        data["doctor"] = [r.to_json() for r in reports]
        data["exit_code"] = code
        print(json.dumps(data, indent=1))
        return code
    out(byte_lines)
    for report in reports:
        out(report.table())
    if problems:
        out(
            f"{args.id}: {len(problems)} checksum mismatch(es); fix: `{PROG} rm {args.id}` then `{PROG} download {args.id}`"
        )
    return code
