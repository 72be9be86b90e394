"""``datasets-hub cache ls|du|rm|prune``: inspect and clean the cache (the work is in :mod:`datasets_hub.cache.maintenance`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from datasets_hub.cli.common import PROG, add_param, out, params_of, table


def register(sub: Any) -> None:
    """Add these commands to the ``datasets-hub`` sub-command parsers ``sub``."""
    p = sub.add_parser("cache", help="inspect and clean the cache")
    cache_sub = p.add_subparsers(dest="cache_command", metavar="ls|du|rm|prune", required=True)
    c = cache_sub.add_parser(
        "ls", help="every build (params, size, built, last use, stale?, preprocessed variants) and raw file"
    )
    c.add_argument("--json", action="store_true", help="print the listing as JSON")
    c.set_defaults(func=cmd_cache_ls)
    c = cache_sub.add_parser("du", help="bytes per cache section")
    c.set_defaults(func=cmd_cache_du)
    c = cache_sub.add_parser(
        "rm",
        help="remove builds (by id or fingerprint, with their preprocessed variants) or preprocessed variants",
        description="NAME is a dataset id, a build fingerprint (or a unique prefix), or a preprocessed variant "
        "<build-fp>/<transform-fp>, as `datasets-hub cache ls` shows them. An id with several builds is refused "
        "(the candidates are listed) unless --param or --all-builds picks.",
    )
    c.add_argument("names", nargs="+", metavar="NAME")
    add_param(c)
    c.add_argument(
        "--all-builds",
        "--all-variants",
        action="store_true",
        help="every build of the id, whatever its params",
    )
    c.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    c.set_defaults(func=cmd_cache_rm)
    c = cache_sub.add_parser("prune", help="remove leftovers of killed processes, stale builds (and old builds)")
    c.add_argument("--older-than", type=float, metavar="DAYS", help="also remove builds older than DAYS days")
    c.add_argument("--keep-stale", action="store_true", help="keep builds of an old format or loader format_version")
    c.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    c.set_defaults(func=cmd_cache_prune)


def _when(iso: str | None) -> str:
    """``2026-11-24T16:05:00Z`` -> ``2026-11-24 16:05`` (UTC); ``-`` when unknown."""
    return iso[:16].replace("T", " ") if iso else "-"


def _params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={json.dumps(v)}" for k, v in params.items()) or "-"


def cmd_cache_ls(args: argparse.Namespace) -> int:
    from datasets_hub.cache.listing import list_cache
    from datasets_hub.files import human_bytes

    listing = list_cache()
    if getattr(args, "json", False):
        from dataclasses import asdict

        out(json.dumps(asdict(listing), indent=1, default=str))
        return 0
    out(f"cache: {listing.root}")
    stale = sum(1 for b in listing.builds if b.stale)
    out(
        f"\nbuilds ({len(listing.builds)}, {human_bytes(sum(b.bytes for b in listing.builds))}"
        + (f"; {stale} stale: `{PROG} cache prune` removes them" if stale else "")
        + ")"
    )
    variants = {v.name: v for v in listing.preprocessed}
    if listing.builds:
        rows = [
            (
                b.id,
                b.fingerprint,
                f"{b.transitions:,}",
                _params_text(b.changed_params) + ("" if b.in_catalogue else " (id not in the catalogue)"),
                human_bytes(b.bytes),
                _when(b.created),
                _when(b.last_used),
                f"stale: {b.stale}" if b.stale else (f"newer: {b.newer}" if b.newer else "current"),
            )
            for b in listing.builds
        ]
        headers = ("id", "fingerprint", "transitions", "params", "size", "built", "last use", "status")
        lines = table(headers, rows, truncate_last=True)
        out("  " + lines[0])
        for build, line in zip(listing.builds, lines[1:], strict=True):
            out("  " + line)
            for name in build.variants:
                v = variants[name]
                out(
                    f"      preprocessed {name}  {v.transform}  {v.transitions:,} rows  {human_bytes(v.bytes)}  "
                    f"last use {_when(v.last_used)}"
                )
        out(
            "  (params: those that differ from the catalogue's; last use: when it was last opened by load, sample or info, to "
            "within 10 minutes, '-' when never recorded)"
        )
    else:
        out("  (none)")
    out("\nraw files")
    if listing.raw:
        for loader, files in listing.raw.items():
            out(f"  {loader}/")
            out([f"    {name}  {human_bytes(size)}" for name, size in files])
    else:
        out("  (none)")
    built = {b.fingerprint for b in listing.builds}
    orphans = [p for p in listing.preprocessed if p.build_fp not in built]
    if orphans:
        out(f"\npreprocessed variants whose build is gone (`{PROG} cache prune` removes them)")
        orphan_rows = [(p.id, p.name, f"{p.transitions:,}", human_bytes(p.bytes), p.transform) for p in orphans]
        out(
            [
                "  " + line
                for line in table(
                    ("id", "build-fp/transform-fp", "transitions", "bytes", "transform"),
                    orphan_rows,
                    truncate_last=True,
                )
            ]
        )
    return 0


def cmd_cache_du(args: argparse.Namespace) -> int:
    from datasets_hub.cache.layout import cache_root
    from datasets_hub.cache.listing import usage
    from datasets_hub.files import human_bytes

    sizes = usage()
    rows = [
        (name, human_bytes(sizes[name]), f"{sizes[name]:,}")
        for name in ("raw", "datasets", "preprocessed", "other", "total")
    ]
    out(f"cache: {cache_root()}")
    out(table(("section", "size", "bytes"), rows))
    return 0


def cmd_cache_rm(args: argparse.Namespace) -> int:
    from datasets_hub.cache.layout import dir_size
    from datasets_hub.cache.maintenance import find_builds, is_variant, remove_build, variant_paths
    from datasets_hub.files import human_bytes

    # resolve every name first: an ambiguous or unknown one removes nothing at all
    targets = [p for name in args.names for p in find_builds(name, params=params_of(args), all_builds=args.all_builds)]
    verb = "would remove" if args.dry_run else "removed"
    total = 0
    for path in dict.fromkeys(targets):
        what = "preprocessed variant" if is_variant(path) else "build"
        size = dir_size(path)
        extra = [] if is_variant(path) else variant_paths(path)
        if not args.dry_run:
            remove_build(path)
        total += size + sum(dir_size(v) for v in extra)
        out(f"{verb} {what} {path} ({human_bytes(size)})")
        if extra:
            out([f"{verb} preprocessed variant {v} (with its build)" for v in extra])
    out(f"{verb} {human_bytes(total)}")
    return 0


def cmd_cache_prune(args: argparse.Namespace) -> int:
    from datasets_hub.cache.maintenance import prune
    from datasets_hub.files import human_bytes

    items = prune(older_than_days=args.older_than, keep_stale=args.keep_stale, dry_run=args.dry_run)
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
