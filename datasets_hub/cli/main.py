"""The ``datasets-hub`` command line (docs/guide/cli.md): the parser and the entry point.

``main(argv=None) -> int`` returns the exit code (the console script exits with it):

- ``0``: success;
- ``1``: the command ran and failed: ``verify`` found mismatches, a download or build failed, the
  cache is unusable, a dependency is missing (any other ``HubError`` or ``OSError``);
- ``2``: the command line is wrong: unknown command or option, malformed ``--param``, unknown
  dataset id or loader (with "did you mean"), a parameter the library rejects (``ValueError``);
- ``3``: ``verify --deep`` found a warning-level defect in the data (``4``: an info one, with
  ``--fail-on info``; an error-level one is ``1``), see :mod:`.doctor_command`;
- ``130``: interrupted (Ctrl-C).

Every error is ONE line on stderr, ``datasets-hub: error: <what and how to fix it>``, no traceback
(an unexpected exception type is a bug and keeps its traceback). Heavy modules (torch, the loaders,
matplotlib) are imported inside the commands, so ``datasets-hub --help`` is instant. The commands
live by concern: :mod:`.catalogue_commands` (list, info), :mod:`.dataset_commands` (download,
verify, rm, sample), :mod:`.cache_commands` (cache ...), :mod:`.publish_commands` (export, push).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from datasets_hub import __version__
from datasets_hub.cli import (
    cache_commands,
    catalogue_commands,
    check_commands,
    dataset_commands,
    publish_commands,
)
from datasets_hub.cli.common import PROG, err
from datasets_hub.errors import HubError, InvalidParameter, UnknownDataset, UnknownLoader, did_you_mean


def _is_usage_error(exc: BaseException) -> bool:
    """Wrong input (exit 2) rather than a failed operation (exit 1); TEDError is a ValueError but a data error."""
    if isinstance(exc, (UnknownDataset, UnknownLoader, InvalidParameter)):
        return True
    return isinstance(exc, ValueError) and not isinstance(exc, HubError)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block) and did-you-mean for unknown commands."""

    def error(self, message: str) -> NoReturn:
        match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if match:
            choices = re.findall(r"'([^']*)'", match.group(2))
            message = (
                f"unknown command {match.group(1)!r}.{did_you_mean(match.group(1), choices)} "
                f"Commands: {', '.join(choices)}"
            )
        where = self.prog[len(PROG) :].strip()  # the subcommand, e.g. "cache prune"
        self.exit(2, f"{PROG}: error: {where + ': ' if where else ''}{message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Offline-RL datasets by name: list, inspect, download, verify, sample, and manage the cache.",
        epilog="exit codes: 0 ok, 1 failed (verify mismatch, download/build/cache error), 2 bad "
        "arguments or unknown id, 3 verify --deep found a warning. Environment: DATASETS_HUB_CACHE (cache root), "
        "DATASETS_HUB_OFFLINE=1 (never connect), DATASETS_HUB_REGISTRY (extra catalogues).",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for commands in (catalogue_commands, dataset_commands, cache_commands, publish_commands, check_commands):
        commands.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (see the module docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, and argparse errors (already printed, one line)
        return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    import warnings

    def one_line(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        print(f"{PROG}: warning: " + " ".join(str(message).split()), file=sys.stderr)

    warnings.showwarning = one_line  # a broken plugin is one line on stderr, not a traceback-like block
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # the reader went away (`datasets-hub list | head`): stop quietly, as cat does
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (HubError, ValueError, OSError) as exc:
        err(exc)
        return 2 if _is_usage_error(exc) else 1
    except KeyboardInterrupt:
        err("interrupted")
        return 130
