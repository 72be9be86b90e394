"""The ``datasets-hub`` command line (docs/reference/hub.md): list, info, download, verify, rm, cache, sample.

``main(argv=None) -> int`` returns the exit code (the console script exits with it):

- ``0``: success;
- ``1``: the command ran and failed: ``verify`` found mismatches, a download or build failed, the
  cache is unusable, a dependency is missing (any other ``HubError`` or ``OSError``);
- ``2``: the command line is wrong: unknown command or option, malformed ``--param``, unknown
  dataset id or loader (with "did you mean"), a parameter the library rejects (``ValueError``);
- ``130``: interrupted (Ctrl-C).

Every error is ONE line on stderr, ``datasets-hub: error: <what and how to fix it>``, no traceback
(an unexpected exception type is a bug and keeps its traceback). Heavy modules (torch, the loaders,
matplotlib) are imported inside the commands, so ``datasets-hub --help`` is instant.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from datasets_hub import __version__
from datasets_hub.errors import HubError, InvalidParameter, UnknownDataset, UnknownLoader, did_you_mean

PROG = "datasets-hub"


def _is_usage_error(exc: BaseException) -> bool:
    """Wrong input (exit 2) rather than a failed operation (exit 1); TEDError is a ValueError but a data error."""
    if isinstance(exc, (UnknownDataset, UnknownLoader, InvalidParameter)):
        return True
    return isinstance(exc, ValueError) and not isinstance(exc, HubError)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block) and did-you-mean for unknown commands."""

    def error(self, message: str) -> None:
        match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if match:
            choices = re.findall(r"'([^']*)'", match.group(2))
            message = (
                f"unknown command {match.group(1)!r}.{did_you_mean(match.group(1), choices)} "
                f"Commands: {', '.join(choices)}"
            )
        where = self.prog[len(PROG) :].strip()  # the subcommand, e.g. "cache prune"
        self.exit(2, f"{PROG}: error: {where + ': ' if where else ''}{message} (see `{self.prog} --help`)\n")


def _param(text: str) -> tuple[str, Any]:
    """``k=v`` -> ``(k, json.loads(v))``, or ``(k, v)`` when ``v`` is not JSON."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--param takes key=value (e.g. steps=300), got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _params(args: argparse.Namespace) -> dict[str, Any]:
    return dict(getattr(args, "param", None) or [])


def _add_param(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--param",
        "-p",
        action="append",
        type=_param,
        metavar="KEY=VALUE",
        help="override a catalogue parameter (value parsed as JSON when possible); repeatable",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Offline-RL datasets by name: list, inspect, download, verify, sample, and manage the cache.",
        epilog="exit codes: 0 ok, 1 failed (verify mismatch, download/build/cache error), 2 bad "
        "arguments or unknown id. Environment: DATASETS_HUB_CACHE (cache root), "
        "DATASETS_HUB_OFFLINE=1 (never connect), DATASETS_HUB_REGISTRY (extra catalogues).",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("list", help="known dataset ids (cached builds marked); never waits on the network")
    p.add_argument("--loader", help="only this loader's ids (e.g. d4rl)")
    p.add_argument(
        "--search", help="only ids or descriptions with words starting with these words (hopper, hopper-med)"
    )
    p.add_argument(
        "--refresh", action="store_true", help="first fetch the remote catalogues (e.g. Minari's), 5 s at most each"
    )
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("info", help="the dataset card")
    p.add_argument("id")
    _add_param(p)
    p.add_argument("--json", action="store_true", help="print the card as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="draw episode return and length histograms (needs matplotlib)")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("download", help="fetch and convert into the cache")
    p.add_argument("ids", nargs="+", metavar="ID")
    p.add_argument("--force", action="store_true", help="rebuild even if a build exists")
    _add_param(p)
    p.set_defaults(func=cmd_download)

    p = sub.add_parser("verify", help="rehash raw files and the build against their recorded checksums")
    p.add_argument("id")
    _add_param(p)
    p.add_argument("--all-builds", action="store_true", help="verify every build of the id, whatever its params")
    p.add_argument("--verbose", "-v", action="store_true", help="also list the files that are fine")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("rm", help="remove an id's build (raw files kept unless --raw)")
    p.add_argument("id")
    _add_param(p)
    p.add_argument("--all-builds", action="store_true", help="remove every build of the id, whatever its params")
    p.add_argument("--raw", action="store_true", help="also remove the downloaded raw files")
    p.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    p.set_defaults(func=cmd_rm)

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

    p = sub.add_parser("sample", help="sample one batch and print its keys, shapes and dtypes")
    p.add_argument("id")
    p.add_argument("--batch-size", "-b", type=int, required=True)
    p.add_argument("--slice-len", type=int, help="sample contiguous slices of this length (SliceSampler)")
    p.add_argument("--seed", type=int, help="seed of the sampling generator")
    _add_param(p)
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser("export", help="write a build in publishable form (zarr v3 chunks, manifest, dataset card)")
    p.add_argument("id")
    p.add_argument("dir", help="the folder to write (must not exist, or be empty)")
    p.add_argument("--chunk-mb", type=float, default=4.0, help="uncompressed chunk size in MB (default 4)")
    p.add_argument("--overwrite", action="store_true", help="replace DIR if it exists")
    _add_param(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("push", help="export a build and upload it to a Hugging Face dataset repo")
    p.add_argument("id")
    p.add_argument("repo", help="the Hugging Face dataset repo, <org>/<name> (created if missing)")
    p.add_argument("--revision", help="the branch to upload to (default: main)")
    p.add_argument("--private", action="store_true", help="create the repo private")
    _add_param(p)
    p.set_defaults(func=cmd_push)
    return parser


# ------------------------------------------------------------------------------------------ output
def _width() -> int:
    return max(60, shutil.get_terminal_size((100, 24)).columns)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, truncate_last: bool = False) -> list[str]:
    """Aligned columns; with ``truncate_last`` the last column is cut to fit the terminal."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = []
    for row in [list(headers), *cells]:
        line = "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths[:-1], strict=True)) + "  " + row[-1]
        if truncate_last and sys.stdout.isatty() and len(line) > _width():  # piped output stays whole
            line = line[: _width() - 1] + "…"
        lines.append(line.rstrip())
    return lines


def _out(lines: str | Sequence[str] = "") -> None:
    print(lines if isinstance(lines, str) else "\n".join(lines))


# ------------------------------------------------------------------------------------------ commands
def cmd_list(args: argparse.Namespace) -> int:
    from datasets_hub.cache import read_manifest
    from datasets_hub.catalogue import all_entries, list_ids, refresh_remote_catalogues
    from datasets_hub.files import human_bytes
    from datasets_hub.maintenance import cached_ids, catalogue_build
    from datasets_hub.plugins import loader_names

    if args.refresh:
        for loader, outcome in refresh_remote_catalogues([args.loader] if args.loader else None).items():
            print(f"{PROG}: remote catalogue of {loader}: {outcome}", file=sys.stderr)
    ids = list_ids(loader=args.loader, search=args.search)
    if args.loader and not ids and args.loader not in loader_names():
        raise UnknownLoader(
            f"no loader named {args.loader!r} is installed (installed: "
            f"{', '.join(loader_names())}).{did_you_mean(args.loader, loader_names())}"
        )
    entries = all_entries([args.loader] if args.loader else None)
    built = cached_ids()
    records = []
    for dataset_id in ids:
        entry = entries[dataset_id][0]
        sizes = [r.get("size", r.get("bytes")) for r in entry.get("resources") or []]
        record: dict[str, Any] = {
            "id": dataset_id,
            "cached": "",
            "download_bytes": sum(sizes) if sizes and all(isinstance(x, int) for x in sizes) else None,
            "download": "?" if sizes else "local",  # shown when download_bytes is None
            "episodes": None,
            "steps": None,
            "description": str(entry.get("description", "")).strip(),
        }
        if entry.get("status"):  # e.g. a source removed upstream: say so before anything else
            record["description"] = f"[{entry['status']}] {record['description']}"
        if dataset_id in built:
            record["cached"] = "other"  # only builds with overridden params, unless the catalogue's is there
            try:
                manifest = read_manifest(catalogue_build(dataset_id)[2])
            except HubError:
                manifest = None
            if manifest is not None:
                counts = manifest.get("counts", {})
                record.update(cached="yes", episodes=counts.get("episodes"), steps=counts.get("transitions"))
        records.append(record)
    if args.json:
        _out(json.dumps(records, indent=1))
        return 0
    if not records:
        _out(
            "no dataset matches"
            + (f" --search {args.search!r}" if args.search else "")
            + (f" --loader {args.loader!r}" if args.loader else "")
        )
        return 0

    def count(value: Any) -> str:
        return f"{value:,}" if isinstance(value, int) else "-"

    rows = [
        (
            r["id"],
            r["cached"] or "-",
            human_bytes(r["download_bytes"]) if r["download_bytes"] is not None else r["download"],
            count(r["episodes"]),
            count(r["steps"]),
            r["description"],
        )
        for r in records
    ]
    _out(_table(("id", "cached", "download", "episodes", "steps", "description"), rows, truncate_last=True))
    cached = sum(1 for r in records if r["cached"] == "yes")
    _out(
        f"\n{len(rows)} dataset(s), {cached} cached with the catalogue's params (cached 'other' = only builds "
        "with --param overrides; episodes and steps are known once built; download '?' = size not in the catalogue, 'local' = generated here)"
    )
    return 0


def _card(info: Any) -> dict[str, Any]:
    return {
        "id": info.id,
        "loader": info.loader,
        "params": info.params,
        "description": info.description,
        "metadata": info.metadata,
        "source": info.source,
        "resources": info.resources,
        "cached": info.cached,
        "build_path": str(info.build_path) if info.build_path else None,
        "raw_bytes": info.raw_bytes,
        "built_bytes": info.built_bytes,
        "sample_keys": info.sample_keys,
        "spaces": info.spaces,
        "manifest": info.manifest,
    }


def _fmt_stats(stats: dict[str, Any]) -> str:
    if not stats:
        return "-"
    return (
        f"mean {stats.get('mean', float('nan')):.4g} ± {stats.get('std', float('nan')):.3g}  "
        f"[min {stats.get('min', float('nan')):.4g}, max {stats.get('max', float('nan')):.4g}]"
    )


def cmd_info(args: argparse.Namespace) -> int:
    from datasets_hub.files import human_bytes
    from datasets_hub.hub import info as hub_info
    from datasets_hub.maintenance import catalogue_build

    catalogue_build(args.id, _params(args))  # checks the params with the loader (hub.info does not, yet)
    card = hub_info(args.id, **_params(args))
    if args.plot:
        _plot(card, Path(args.plot))
    if args.json:
        _out(json.dumps(_card(card), indent=1, sort_keys=True, default=str))
        return 0
    meta = card.metadata
    lines = [card.id, ""]

    def row(label: str, value: Any) -> None:
        lines.append(f"  {label:<15} {value}")

    row("description", card.description or "-")
    row(
        "loader",
        card.loader
        + (
            f" (format_version {card.manifest['loader_format_version']})"
            if "loader_format_version" in card.manifest
            else ""
        ),
    )
    row("params", json.dumps(card.params, sort_keys=True))
    row("license", meta.get("license", "-"))
    row("citation", meta.get("citation", "-"))
    row("catalogue", card.source)
    extra = {k: v for k, v in meta.items() if k not in ("license", "citation", "description")}
    for key, value in sorted(extra.items()):
        row(key, value)
    if card.resources:
        lines.append("  resources")
        for res in card.resources:
            lines.append(f"    - {res.get('name')}  {' | '.join(res.get('urls', []))}")
            lines.append(
                f"      sha256 {res.get('sha256') or '(recorded at first download)'}  "
                f"size {human_bytes(res['size']) if res.get('size') is not None else '?'}"
            )
    else:
        row("resources", "none (generated locally)")
    row("cached", f"yes  {card.build_path}" if card.cached else f"no (run `{PROG} download {card.id}`)")
    row("raw bytes", human_bytes(card.raw_bytes))
    if not card.cached:
        _out(lines)
        return 0
    row("built bytes", human_bytes(card.built_bytes))
    counts = card.counts
    row("transitions", f"{counts.get('transitions', '?'):,}" if isinstance(counts.get("transitions"), int) else "?")
    row(
        "episodes",
        f"{counts.get('episodes', '?')} (terminated {counts.get('episodes_terminated', '?')}, "
        f"truncated {counts.get('episodes_truncated', '?')}, "
        f"unflagged end {counts.get('episodes_unflagged_end', '?')})",
    )
    row("episode return", _fmt_stats(card.stats.get("episode_return", {})))
    row("episode length", _fmt_stats(card.stats.get("episode_length", {})))
    lines.append("  sample (one transition; a batch of B adds a leading B)")
    sample_rows = [(name, spec["dtype"], tuple(spec["shape"])) for name, spec in card.sample_keys.items()]
    lines += ["    " + line for line in _table(("key", "dtype", "shape"), sample_rows)]
    for name, space in card.spaces.items():
        if name.endswith("_space"):
            lines.append(f"  {name.replace('_', ' '):<15} {_space_text(space)}")
    if card.notes:
        lines.append("  notes")
        lines += [f"    {k}: {json.dumps(v, default=str)}" for k, v in sorted(card.notes.items())]
    m = card.manifest
    lines.append("  provenance")
    lines.append(
        f"    created {m.get('created', '?')} by datasets_hub {m.get('hub_version', '?')} "
        f"in {m.get('build_seconds', '?')} s; fingerprint {m.get('fingerprint', '?')}"
    )
    for src in m.get("sources") or []:
        lines.append(
            f"    source {src.get('name')}  {src.get('url')}  sha256 {src.get('sha256')}  "
            f"{human_bytes(src['bytes']) if src.get('bytes') is not None else '?'}"
        )
    if args.plot:
        lines.append(f"\n  histograms written to {args.plot}")
    _out(lines)
    return 0


def _space_text(space: Any) -> str:
    """A gymnasium space as recorded upstream (JSON), shortened for one line."""
    if isinstance(space, dict) and "type" in space:
        shape = space.get("shape")
        dtype = space.get("dtype")
        extra = f" n={space['n']}" if "n" in space else ""
        if space.get("subspaces"):
            inner = space["subspaces"]
            names = ", ".join(inner) if isinstance(inner, dict) else f"{len(inner)} subspaces"
            return f"{space['type']}({names})"
        return f"{space['type']}{tuple(shape) if shape is not None else ''} {dtype or ''}{extra}".strip()
    text = json.dumps(space, default=str)
    return text if len(text) <= 100 else text[:99] + "…"


def _plot(card: Any, target: Path) -> None:
    from datasets_hub.errors import CacheError, MissingDependency

    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingDependency(
            "--plot needs matplotlib, which is not installed. Fix: pip install 'datasets-hub[plot]'"
        ) from exc
    if not card.cached:
        raise CacheError(f"{card.id!r} is not built yet, so there is nothing to plot; run `{PROG} download {card.id}`")
    from datasets_hub.dataset_storage import DatasetStorage

    storage = DatasetStorage(card.build_path)
    returns = storage.episode_returns.numpy()
    lengths = storage.episode_index().length.numpy()
    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    for ax, values, label in zip(
        fig.subplots(1, 2), (returns, lengths), ("episode return", "episode length"), strict=True
    ):
        ax.hist(values, bins=min(50, max(5, len(values) // 2)))
        ax.set_xlabel(label)
        ax.set_ylabel("episodes")
        ax.set_title(f"{label} ({len(values)} episodes)")
    fig.suptitle(card.id)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target)


def cmd_download(args: argparse.Namespace) -> int:
    from datasets_hub.hub import download

    failures = 0
    for dataset_id in args.ids:
        try:
            path = download(dataset_id, force=args.force, **_params(args))
        except HubError as exc:
            if len(args.ids) == 1:
                raise
            failures += 1
            _err(f"{dataset_id}: {exc}")
            continue
        _out(f"{dataset_id}: {path}")
    return 1 if failures else 0


def cmd_verify(args: argparse.Namespace) -> int:
    from datasets_hub.cache_verify import verify

    result = verify(args.id, params=_params(args), all_builds=args.all_builds)
    if args.verbose:
        _out([f"ok      {line}" for line in result.checked])
    _out([f"note    {line}" for line in result.notes])
    _out([f"FAILED  {line}" for line in result.problems])
    if result.ok:
        _out(f"{args.id}: all {len(result.checked)} checked files match their recorded sha256")
        return 0
    _out(
        f"{args.id}: {len(result.problems)} mismatch(es); fix: `{PROG} rm {args.id}` then "
        f"`{PROG} download {args.id}` (add --raw to rm when a raw file is bad)"
    )
    return 1


def cmd_rm(args: argparse.Namespace) -> int:
    from datasets_hub.maintenance import remove

    removed = remove(args.id, params=_params(args), all_builds=args.all_builds, raw=args.raw, dry_run=args.dry_run)
    if not removed:
        _out(
            f"{args.id}: nothing to remove (no build for these params"
            + ("" if args.all_builds else "; --all-builds removes builds with other params")
            + ")"
        )
        return 0
    _out([f"{'would remove' if args.dry_run else 'removed'} {p}" for p in removed])
    return 0


def cmd_cache_ls(args: argparse.Namespace) -> int:
    from datasets_hub.files import human_bytes
    from datasets_hub.maintenance import list_cache

    listing = list_cache()
    if getattr(args, "json", False):
        from dataclasses import asdict

        _out(json.dumps(asdict(listing), indent=1, default=str))
        return 0
    _out(f"cache: {listing.root}")
    _out("\nbuilds")
    if listing.builds:
        rows = [(b.id, b.fingerprint, f"{b.transitions:,}", human_bytes(b.bytes), b.created) for b in listing.builds]
        _out(["  " + line for line in _table(("id", "fingerprint", "transitions", "bytes", "created"), rows)])
    else:
        _out("  (none)")
    _out("\nraw files")
    if listing.raw:
        for loader, files in listing.raw.items():
            _out(f"  {loader}/")
            _out([f"    {name}  {human_bytes(size)}" for name, size in files])
    else:
        _out("  (none)")
    if listing.preprocessed:
        _out("\npreprocessed variants")
        rows = [(p.id, p.name, f"{p.transitions:,}", human_bytes(p.bytes), p.transform) for p in listing.preprocessed]
        _out(
            [
                "  " + line
                for line in _table(
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
    _out(f"cache: {cache_root()}")
    _out(_table(("section", "size", "bytes"), rows))
    return 0


def cmd_cache_rm(args: argparse.Namespace) -> int:
    from datasets_hub.maintenance import remove_preprocessed

    _out([f"removed {remove_preprocessed(name)}" for name in args.variants])
    return 0


def cmd_cache_prune(args: argparse.Namespace) -> int:
    from datasets_hub.files import human_bytes
    from datasets_hub.maintenance import prune

    items = prune(older_than_days=args.older_than, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    done = [i for i in items if i.skipped is None]
    for item in items:
        if item.skipped:
            _out(f"skipped      {item.path} ({item.reason}): {item.skipped}")
        else:
            _out(f"{verb:<12} {item.path} ({item.reason}, {human_bytes(item.bytes)})")
    _out(
        f"{verb} {len(done)} item(s), {human_bytes(sum(i.bytes for i in done))}"
        + (f"; skipped {len(items) - len(done)} in use" if len(done) != len(items) else "")
    )
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
    rb = load(args.id, batch_size=args.batch_size, sampler=sampler, generator=generator, **_params(args))
    batch = rb.sample()
    rows = []
    for key in sorted(
        batch.keys(include_nested=True, leaves_only=True), key=lambda k: (k,) if isinstance(k, str) else k
    ):
        value = batch.get(key)
        name = key if isinstance(key, str) else "/".join(key)
        rows.append((name, list(value.shape), str(value.dtype).replace("torch.", "")))
    _out(
        f"{args.id}: batch of {batch.batch_size[0] if batch.batch_dims else 1} from {len(rb):,} transitions"
        + (f" ({args.batch_size // args.slice_len} slices of {args.slice_len})" if args.slice_len else "")
    )
    _out(_table(("key", "shape", "dtype"), rows))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from datasets_hub.publish import export

    if not args.chunk_mb > 0:
        raise InvalidParameter(f"--chunk-mb must be positive, got {args.chunk_mb}")
    out = export(
        args.id,
        args.dir,
        chunk_bytes=max(1024, int(args.chunk_mb * (1 << 20))),
        overwrite=args.overwrite,
        **_params(args),
    )
    _out(
        f"exported {args.id} to {out}; load it with datasets_hub.load('file://{out.absolute()}') or publish the folder"
    )
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    from datasets_hub.publish import push

    url = push(args.id, args.repo, revision=args.revision, private=args.private or None, **_params(args))
    _out(f"pushed {args.id} to {url}; load it with datasets_hub.load({url!r})")
    return 0


# ------------------------------------------------------------------------------------------ entry point
def _err(message: object) -> None:
    from datasets_hub.redact import redact_text

    print(f"{PROG}: error: " + " ".join(redact_text(message).split()), file=sys.stderr)


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
        _err(exc)
        return 2 if _is_usage_error(exc) else 1
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
