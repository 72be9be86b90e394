"""``datasets-hub export`` and ``push``: a build in publishable form (:mod:`datasets_hub.remote.publish`)."""

from __future__ import annotations

import argparse
from typing import Any

from datasets_hub.cli.common import add_param, out, params_of, parse_param
from datasets_hub.errors import InvalidParameter


def register(sub: Any) -> None:
    """Add these commands to the ``datasets-hub`` sub-command parsers ``sub``."""
    p = sub.add_parser(
        "export", help="write a build in publishable form (zarr v3 chunks, manifest, card) or another tool's format"
    )
    p.add_argument("id")
    p.add_argument("dir", help="the folder to write (must not exist, or be empty for the published form)")
    p.add_argument(
        "--format",
        default="published",
        help="published (default: our form, datasets_hub.load opens it), lerobot (LeRobot v3.0), "
        "hf (Hugging Face datasets parquet), minari (a Minari dataset folder), rlds (a TFDS builder directory)",
    )
    p.add_argument(
        "--option",
        "-o",
        action="append",
        type=parse_param,
        metavar="KEY=VALUE",
        help="an option of the format (e.g. fps=30 for lerobot; docs/guide/export.md lists them); repeatable",
    )
    p.add_argument(
        "--chunk-mb",
        type=float,
        help="published form: uncompressed chunk size in MB (default 0.25: 256 KiB, as export() and "
        "docs/guide/remote.md)",
    )
    p.add_argument("--overwrite", action="store_true", help="published form: replace DIR if it exists")
    add_param(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("push", help="export a build and upload it to a Hugging Face dataset repo")
    p.add_argument("id")
    p.add_argument("repo", help="the Hugging Face dataset repo, <org>/<name> (created if missing)")
    p.add_argument("--revision", help="the branch to upload to (default: main)")
    p.add_argument("--private", action="store_true", help="create the repo private")
    add_param(p)
    p.set_defaults(func=cmd_push)


def cmd_export(args: argparse.Namespace) -> int:
    from datasets_hub.remote.publish import export

    chunking: dict[str, Any] = {}
    if args.chunk_mb is not None:  # else export()'s own default: one default, stated once
        if not 0 < args.chunk_mb <= 1024:  # also refuses nan and inf
            raise InvalidParameter(f"--chunk-mb must be a number of MB above 0 and at most 1024, got {args.chunk_mb}")
        chunking["chunk_bytes"] = max(1024, int(args.chunk_mb * (1 << 20)))
    folder = export(
        args.id,
        args.dir,
        overwrite=args.overwrite,
        format=args.format,
        options=dict(args.option or []),
        **chunking,
        **params_of(args),
    )
    if args.format == "published":
        out(
            f"exported {args.id} to {folder}; load it with datasets_hub.load('file://{folder.absolute()}') or publish "
            "the folder"
        )
    else:
        out(f"exported {args.id} to {folder} in {args.format} format")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    from datasets_hub.remote.publish import push

    url = push(args.id, args.repo, revision=args.revision, private=args.private or None, **params_of(args))
    out(f"pushed {args.id} to {url}; load it with datasets_hub.load({url!r})")
    return 0
