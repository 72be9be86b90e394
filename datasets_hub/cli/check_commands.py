"""``datasets-hub check``: the plugin contract check (:func:`datasets_hub.testing.check_loader`) from the shell."""

from __future__ import annotations

import argparse
import json
from typing import Any

from datasets_hub.cli.common import add_param, out, params_of
from datasets_hub.errors import InvalidParameter, LoaderError


def register(sub: Any) -> None:
    """Add this command to the ``datasets-hub`` sub-command parsers ``sub``."""
    p = sub.add_parser(
        "check",
        help="check a loader plugin against the contract (a loader name, or an id end to end)",
        description="TARGET is a loader name (`gym`): its class is checked (attributes, entry point, catalogue()); "
        "or a dataset id (`gym/cartpole-random-v0`): resolved, fetched, built, converted --runs times and "
        "compared, loaded and sampled, as datasets_hub.testing.check_loader does. Exit code 1 names the stage "
        "and the first problem.",
    )
    p.add_argument("target", metavar="TARGET")
    add_param(p)
    p.add_argument("--runs", type=int, default=3, help="conversions compared for determinism (default 3)")
    p.add_argument("--max-chunks", type=int, help="check only the first chunks of each conversion run")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    from datasets_hub.loader_check import check_loader

    if args.runs < 1:
        raise InvalidParameter(f"--runs must be a positive integer, got {args.runs}")
    if args.max_chunks is not None and args.max_chunks < 1:
        raise InvalidParameter(f"--max-chunks must be a positive integer, got {args.max_chunks}")
    if "/" in args.target:
        target: Any = args.target
        what = f"the catalogue entry {args.target}"
    else:
        from datasets_hub.plugins import get_loader

        if params_of(args):
            raise InvalidParameter("--param applies to a dataset id, not to a loader name")
        target = type(get_loader(args.target))
        what = f"the loader class {target.__module__}.{target.__qualname__}"
    try:
        summary = check_loader(target, runs=args.runs, max_chunks=args.max_chunks, params=params_of(args) or None)
    except AssertionError as exc:
        raise LoaderError(str(exc)) from exc  # a breach of the contract: exit code 1, one line
    if args.json:
        out(json.dumps({"target": args.target, "ok": True, **summary}, indent=1, sort_keys=True, default=str))
        return 0
    counts = summary.get("counts") or {}
    detail = (
        f": {counts['transitions']:,} transitions in {counts['episodes']:,} episodes, "
        f"{args.runs} conversion run(s) identical"
        if isinstance(counts.get("transitions"), int) and isinstance(counts.get("episodes"), int)
        else ""
    )
    out(f"ok: {what} follows the plugin contract{detail}")
    return 0
