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
        help="remove builds, preprocessed variants or local copies of published URLs by the names `cache ls` "
        "shows (raw files are kept)",
        description="NAME is a dataset id, a build fingerprint (or a unique prefix), a preprocessed variant "
        "<build-fp>/<transform-fp>, as `datasets-hub cache ls` shows them, or a published build's URL (its local "
        "copies). An id with several builds is refused (the candidates are listed) unless --param or --all-builds "
        "picks. Raw files are never removed here: `datasets-hub rm ID --raw` removes an id's build and the raw "
        "files it was made from.",
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
    c.add_argument(
        "--older-than",
        type=float,
        metavar="DAYS",
        help="also remove builds older than DAYS days, and local copies of URLs not opened for DAYS days",
    )
    c.add_argument(
        "--keep-stale",
        action="store_true",
        help="keep builds of an old format or loader format_version, and local copies of an earlier export of a URL",
    )
    c.add_argument(
        "--drop-resumable",
        action="store_true",
        help="also remove interrupted builds that the next load would resume (kept by default)",
    )
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
    _remote_section(listing.remote)
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


def _remote_section(copies: list[Any]) -> None:
    from datasets_hub.files import human_bytes

    if not copies:
        return
    stale = sum(1 for c in copies if c.stale)
    out(
        f"\nlocal copies of published URLs ({len(copies)}, {human_bytes(sum(c.bytes for c in copies))}"
        + (f"; {stale} of an earlier export: `{PROG} cache prune` removes them" if stale else "")
        + ")"
    )
    rows = [
        (
            c.id,
            c.published,
            human_bytes(c.bytes),
            "complete" if c.complete else "partial",
            _when(c.last_used),
            f"stale: {c.stale}" if c.stale else "current",
        )
        for c in copies
    ]
    headers = ("url", "published", "size", "chunks", "last use", "status")
    out(["  " + line for line in table(headers, rows, truncate_last=True)])
    out(f"  (`{PROG} cache rm URL` removes every local copy of URL)")


def cmd_cache_du(args: argparse.Namespace) -> int:
    from datasets_hub.cache.layout import cache_root
    from datasets_hub.cache.listing import usage
    from datasets_hub.files import human_bytes

    sizes = usage()
    rows = [
        (name, human_bytes(sizes[name]), f"{sizes[name]:,}")
        for name in ("raw", "datasets", "preprocessed", "remote", "other", "total")
    ]
    out(f"cache: {cache_root()}")
    out(table(("section", "size", "bytes"), rows))
    return 0


def cmd_cache_rm(args: argparse.Namespace) -> int:
    from datasets_hub.cache.layout import dir_size
    from datasets_hub.cache.maintenance import find_builds, first_busy, is_variant, remove_build, variant_paths
    from datasets_hub.cache.remote_copies import is_remote_copy
    from datasets_hub.errors import CacheError
    from datasets_hub.files import human_bytes

    # resolve every name first: an ambiguous or unknown one removes nothing at all
    targets = [p for name in args.names for p in find_builds(name, params=params_of(args), all_builds=args.all_builds)]
    verb = "would remove" if args.dry_run else "removed"
    builds = [t for t in dict.fromkeys(targets) if not is_remote_copy(t)]  # a copy's removal takes its readers' lock
    busy = None if args.dry_run else first_busy(builds)
    if busy is not None:  # one being written: remove none of them, not the ones before it
        raise CacheError(
            f"another process is writing {busy.with_suffix('')} right now ({busy} is held); nothing was "
            "removed: try again when it finishes"
        )
    total = 0
    for path in dict.fromkeys(targets):
        what = "local copy" if is_remote_copy(path) else "preprocessed variant" if is_variant(path) else "build"
        size = dir_size(path)
        extra = [] if is_variant(path) or is_remote_copy(path) else variant_paths(path)
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

    items = prune(
        older_than_days=args.older_than,
        keep_stale=args.keep_stale,
        dry_run=args.dry_run,
        drop_resumable=args.drop_resumable,
    )
    verb = "would remove" if args.dry_run else "removed"
    done = [i for i in items if i.skipped is None]
    kept = [i for i in items if i.kept]
    for item in items:
        if item.kept:
            out(f"kept         {item.path} ({item.reason}, {human_bytes(item.bytes)}): {item.skipped}")
        elif item.skipped:
            out(f"skipped      {item.path} ({item.reason}): {item.skipped}")
        else:
            out(f"{verb:<12} {item.path} ({item.reason}, {human_bytes(item.bytes)})")
    busy = len(items) - len(done) - len(kept)
    out(
        f"{verb} {len(done)} item(s), {human_bytes(sum(i.bytes for i in done))}"
        + (f"; kept {len(kept)} resumable build(s), {human_bytes(sum(i.bytes for i in kept))}" if kept else "")
        + (f"; skipped {busy} in use" if busy else "")
    )
    return 0
