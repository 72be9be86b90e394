"""``datasets-hub cache ls|du|rm|prune``: inspect and clean the cache (the work is in :mod:`datasets_hub.maintenance`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from datasets_hub.cli.common import out, table


def register(sub: Any) -> None:
    """Add these commands to the ``datasets-hub`` sub-command parsers ``sub``."""
    p = sub.add_parser("cache", help="inspect and clean the cache")
    cache_sub = p.add_subparsers(dest="cache_command", metavar="ls|du|rm|prune", required=True)
    c = cache_sub.add_parser("ls", help="every build, raw file and preprocessed variant")
    c.add_argument("--json", action="store_true", help="print the listing as JSON")
    c.set_defaults(func=cmd_cache_ls)
    c = cache_sub.add_parser("du", help="bytes per cache section")
    c.set_defaults(func=cmd_cache_du)
    c = cache_sub.add_parser("rm", help="remove preprocessed variants (<build-fp>/<transform-fp>, as ls shows)")
    c.add_argument("variants", nargs="+", metavar="VARIANT")
    c.set_defaults(func=cmd_cache_rm)
    c = cache_sub.add_parser("prune", help="remove leftovers of killed processes (and old builds)")
    c.add_argument("--older-than", type=float, metavar="DAYS", help="also remove builds older than DAYS days")
    c.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    c.set_defaults(func=cmd_cache_prune)


def cmd_cache_ls(args: argparse.Namespace) -> int:
    from datasets_hub.files import human_bytes
    from datasets_hub.maintenance import list_cache

    listing = list_cache()
    if getattr(args, "json", False):
        from dataclasses import asdict

        out(json.dumps(asdict(listing), indent=1, default=str))
        return 0
    out(f"cache: {listing.root}")
    out("\nbuilds")
    if listing.builds:
        rows = [(b.id, b.fingerprint, f"{b.transitions:,}", human_bytes(b.bytes), b.created) for b in listing.builds]
        out(["  " + line for line in table(("id", "fingerprint", "transitions", "bytes", "created"), rows)])
    else:
        out("  (none)")
    out("\nraw files")
    if listing.raw:
        for loader, files in listing.raw.items():
            out(f"  {loader}/")
            out([f"    {name}  {human_bytes(size)}" for name, size in files])
    else:
        out("  (none)")
    if listing.preprocessed:
        out("\npreprocessed variants")
        rows = [(p.id, p.name, f"{p.transitions:,}", human_bytes(p.bytes), p.transform) for p in listing.preprocessed]
        out(
            [
                "  " + line
                for line in table(
                    ("id", "build-fp/transform-fp", "transitions", "bytes", "transform"), rows, truncate_last=True
                )
            ]
        )
    return 0


def cmd_cache_du(args: argparse.Namespace) -> int:
    from datasets_hub.cache import cache_root
    from datasets_hub.files import human_bytes
    from datasets_hub.maintenance import usage

    sizes = usage()
    rows = [
        (name, human_bytes(sizes[name]), f"{sizes[name]:,}")
        for name in ("raw", "datasets", "preprocessed", "other", "total")
    ]
    out(f"cache: {cache_root()}")
    out(table(("section", "size", "bytes"), rows))
    return 0


def cmd_cache_rm(args: argparse.Namespace) -> int:
    from datasets_hub.maintenance import remove_preprocessed

    out([f"removed {remove_preprocessed(name)}" for name in args.variants])
    return 0


def cmd_cache_prune(args: argparse.Namespace) -> int:
    from datasets_hub.files import human_bytes
    from datasets_hub.maintenance import prune

    items = prune(older_than_days=args.older_than, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    done = [i for i in items if i.skipped is None]
    for item in items:
        if item.skipped:
            out(f"skipped      {item.path} ({item.reason}): {item.skipped}")
        else:
            out(f"{verb:<12} {item.path} ({item.reason}, {human_bytes(item.bytes)})")
    out(
        f"{verb} {len(done)} item(s), {human_bytes(sum(i.bytes for i in done))}"
        + (f"; skipped {len(items) - len(done)} in use" if len(done) != len(items) else "")
    )
    return 0
