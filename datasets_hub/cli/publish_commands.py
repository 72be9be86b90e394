"""``datasets-hub export`` and ``push``: a build in publishable form (:mod:`datasets_hub.remote.publish`)."""

from __future__ import annotations

import argparse
from typing import Any

from datasets_hub.cli.common import add_param, out, params_of
from datasets_hub.errors import InvalidParameter


def register(sub: Any) -> None:
    """Add these commands to the ``datasets-hub`` sub-command parsers ``sub``."""
    p = sub.add_parser("export", help="write a build in publishable form (zarr v3 chunks, manifest, dataset card)")
    p.add_argument("id")
    p.add_argument("dir", help="the folder to write (must not exist, or be empty)")
    p.add_argument("--chunk-mb", type=float, default=4.0, help="uncompressed chunk size in MB (default 4)")
    p.add_argument("--overwrite", action="store_true", help="replace DIR if it exists")
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

    if not 0 < args.chunk_mb <= 1024:  # also refuses nan and inf
        raise InvalidParameter(f"--chunk-mb must be a number of MB above 0 and at most 1024, got {args.chunk_mb}")
    folder = export(
        args.id,
        args.dir,
        chunk_bytes=max(1024, int(args.chunk_mb * (1 << 20))),
        overwrite=args.overwrite,
        **params_of(args),
    )
    out(
        f"exported {args.id} to {folder}; load it with datasets_hub.load('file://{folder.absolute()}') or publish the folder"
    )
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    from datasets_hub.remote.publish import push

    url = push(args.id, args.repo, revision=args.revision, private=args.private or None, **params_of(args))
    out(f"pushed {args.id} to {url}; load it with datasets_hub.load({url!r})")
    return 0
