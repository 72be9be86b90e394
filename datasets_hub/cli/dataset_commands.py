"""``datasets-hub download``, ``verify``, ``rm`` and ``sample``: one dataset id at a time."""

from __future__ import annotations

import argparse
import json
from typing import Any

from datasets_hub.cli.common import PROG, add_frames, add_param, err, frames_of, out, params_of, table
from datasets_hub.errors import HubError, InvalidParameter


def register(sub: Any) -> None:
    """Add these commands to the ``datasets-hub`` sub-command parsers ``sub``."""
    p = sub.add_parser("download", help="fetch and convert into the cache")
    p.add_argument("ids", nargs="+", metavar="ID")
    p.add_argument("--force", action="store_true", help="rebuild even if a build exists")
    add_param(p)
    add_frames(p)
    p.set_defaults(func=cmd_download)

    p = sub.add_parser("verify", help="rehash raw files and the build against their recorded checksums")
    p.add_argument("id", help="a dataset id; with --deep also a path (build, LeRobot root, HDF5/npz/TFRecord files)")
    add_param(p)
    p.add_argument("--all-builds", action="store_true", help="verify every build of the id, whatever its params")
    p.add_argument("--verbose", "-v", action="store_true", help="also list the files that are fine")
    from datasets_hub.cli.doctor_command import add_deep_options

    add_deep_options(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser(
        "rm",
        help="remove the build `load ID` uses (by id and --param; raw files too with --raw)",
        description="Removes the build of ID that `load(ID, **params)` would use (--all-builds: every build of "
        "ID), and with --raw the raw files it was made from. `datasets-hub cache rm NAME` instead removes what "
        "`cache ls` names (an id, a build fingerprint, a preprocessed variant) and never touches raw files.",
    )
    p.add_argument("id")
    add_param(p)
    p.add_argument("--all-builds", action="store_true", help="remove every build of the id, whatever its params")
    p.add_argument("--raw", action="store_true", help="also remove the downloaded raw files")
    p.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    p.set_defaults(func=cmd_rm)

    p = sub.add_parser("sample", help="sample one batch and print its keys, shapes and dtypes")
    p.add_argument("id")
    p.add_argument("--batch-size", "-b", type=int, required=True)
    p.add_argument("--slice-len", type=int, help="sample contiguous slices of this length (SliceSampler)")
    p.add_argument("--seed", type=int, help="seed of the sampling generator")
    add_param(p)
    p.set_defaults(func=cmd_sample)


def cmd_download(args: argparse.Namespace) -> int:
    from datasets_hub.hub import download

    failures = 0
    for dataset_id in args.ids:
        try:
            path = download(dataset_id, force=args.force, **frames_of(args), **params_of(args))
        except HubError as exc:
            if len(args.ids) == 1:
                raise
            failures += 1
            err(f"{dataset_id}: {exc}")
            continue
        out(f"{dataset_id}: {path}")
    return 1 if failures else 0


def cmd_verify(args: argparse.Namespace) -> int:
    from datasets_hub.cache.verify import verify

    if args.deep:
        from datasets_hub.cli.doctor_command import cmd_verify_deep

        return cmd_verify_deep(args)
    result = verify(args.id, params=params_of(args), all_builds=args.all_builds)
    if args.json:
        from dataclasses import asdict

        out(json.dumps({"ok": result.ok, **asdict(result)}, indent=1))
        return 0 if result.ok else 1
    lines = [f"ok      {line}" for line in result.checked] if args.verbose else []
    lines += [f"note    {line}" for line in result.notes]
    lines += [f"FAILED  {line}" for line in result.problems]
    if lines:  # nothing to say is no line at all, not a blank one
        out(lines)
    if result.ok:
        out(f"{args.id}: all {len(result.checked)} checked files match their recorded sha256")
        return 0
    out(
        f"{args.id}: {len(result.problems)} mismatch(es); fix: `{PROG} rm {args.id}` then "
        f"`{PROG} download {args.id}` (add --raw to rm when a raw file is bad)"
    )
    return 1


def cmd_rm(args: argparse.Namespace) -> int:
    from datasets_hub.cache.maintenance import remove

    removed = remove(args.id, params=params_of(args), all_builds=args.all_builds, raw=args.raw, dry_run=args.dry_run)
    if not removed:
        out(
            f"{args.id}: nothing to remove (no build for these params"
            + ("" if args.all_builds else "; --all-builds removes builds with other params")
            + ")"
        )
        return 0
    out([f"{'would remove' if args.dry_run else 'removed'} {p}" for p in removed])
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    import torch

    from datasets_hub.hub import load

    if args.batch_size < 1:
        raise InvalidParameter(f"--batch-size must be a positive integer, got {args.batch_size}")
    sampler = None
    if args.slice_len is not None:
        if args.slice_len < 1:
            raise InvalidParameter(f"--slice-len must be a positive integer, got {args.slice_len}")
        try:
            from datasets_hub.buffers.samplers.slice import SliceSampler
        except ImportError as exc:
            raise HubError(
                f"--slice-len needs datasets_hub.buffers.samplers.slice, which this installation lacks ({exc})"
            ) from exc
        sampler = SliceSampler(slice_len=args.slice_len)
    generator = torch.Generator().manual_seed(args.seed) if args.seed is not None else None
    rb = load(args.id, batch_size=args.batch_size, sampler=sampler, generator=generator, **params_of(args))
    batch = rb.sample()
    rows = []
    for key in sorted(
        batch.keys(include_nested=True, leaves_only=True), key=lambda k: (k,) if isinstance(k, str) else k
    ):
        value = batch.get(key)
        name = key if isinstance(key, str) else "/".join(key)
        rows.append((name, list(value.shape), str(value.dtype).replace("torch.", "")))
    out(
        f"{args.id}: batch of {batch.batch_size[0] if batch.batch_dims else 1} from {len(rb):,} transitions"
        + (f" ({args.batch_size // args.slice_len} slices of {args.slice_len})" if args.slice_len else "")
    )
    out(table(("key", "shape", "dtype"), rows))
    return 0
