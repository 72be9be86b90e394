"""``datasets-hub list`` and ``info``: what the catalogue knows, and what the cache holds of it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from datasets_hub.cli.common import PROG, add_frames, add_param, frames_of, note, out, params_of, table
from datasets_hub.errors import HubError, UnknownLoader, did_you_mean


def register(sub: Any) -> None:
    """Add these commands to the ``datasets-hub`` sub-command parsers ``sub``."""
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
    add_param(p)
    add_frames(p)
    p.add_argument("--json", action="store_true", help="print the card as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="draw episode return and length histograms (needs matplotlib)")
    p.set_defaults(func=cmd_info)


def cmd_list(args: argparse.Namespace) -> int:
    from datasets_hub.cache.catalogue_builds import catalogue_build_name
    from datasets_hub.cache.layout import dataset_dir, read_manifest
    from datasets_hub.cache.listing import cached_ids
    from datasets_hub.catalogue import all_entries, list_ids, refresh_remote_catalogues
    from datasets_hub.downloads.sizes import cached_sizes, listed_size
    from datasets_hub.files import human_bytes
    from datasets_hub.plugins import entry_point_map, loader_names

    if args.refresh:
        for loader, outcome in refresh_remote_catalogues([args.loader] if args.loader else None).items():
            note(f"remote catalogue of {loader}: {outcome}")
    ids = list_ids(loader=args.loader, search=args.search)
    if args.loader and not ids and args.loader not in loader_names():
        raise UnknownLoader(
            f"no loader named {args.loader!r} is installed (installed: "
            f"{', '.join(loader_names())}).{did_you_mean(args.loader, loader_names())}"
        )
    entries = all_entries([args.loader] if args.loader else None)
    eps = entry_point_map()
    local_memo: dict[str, bool] = {}
    built = cached_ids()
    known_sizes = cached_sizes()
    records = []
    for dataset_id in ids:
        entry = entries[dataset_id][0]
        resources = entry.get("resources") or []
        record: dict[str, Any] = {
            "id": dataset_id,
            "cached": "",
            "download_bytes": listed_size(dataset_id, resources, known_sizes),
            # shown when download_bytes is None
            "download": "local" if not resources and _generates_locally(dataset_id, eps, local_memo) else "?",
            "episodes": None,
            "steps": None,
            "description": str(entry.get("description", "")).strip(),
        }
        if entry.get("status"):  # e.g. a source removed upstream: say so before anything else
            record["description"] = f"[{entry['status']}] {record['description']}"
        if dataset_id in built:
            record["cached"] = "other"  # only builds with overridden params, unless the catalogue's is there
            try:
                manifest = read_manifest(dataset_dir(dataset_id) / catalogue_build_name(dataset_id))
            except HubError:
                manifest = None
            if manifest is not None:
                counts = manifest.get("counts", {})
                record.update(cached="yes", episodes=counts.get("episodes"), steps=counts.get("transitions"))
        records.append(record)
    if args.json:
        out(json.dumps(records, indent=1))
        return 0
    if not records:
        out(
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
    out(table(("id", "cached", "download", "episodes", "steps", "description"), rows, truncate_last=True))
    cached = sum(1 for r in records if r["cached"] == "yes")
    out(
        f"\n{len(rows)} dataset(s), {cached} cached with the catalogue's params (cached 'other' = only builds "
        "with --param overrides; episodes and steps are known once built; download '?' = not in the catalogue: "
        f"`{PROG} info ID` asks the server; 'local' = generated here)"
    )
    return 0


def _generates_locally(dataset_id: str, eps: Any, memo: dict[str, bool]) -> bool:
    """Whether the id's loader makes its data here (``Loader.downloads`` False) rather than downloading
    it; ``memo`` keeps the answer per loader for the rest of the listing."""
    from datasets_hub.plugin_facts import loader_facts

    loader = dataset_id.split("/", 1)[0]
    if loader not in memo:
        try:
            memo[loader] = not loader_facts(loader, eps).downloads
        except HubError:
            memo[loader] = False
    return memo[loader]


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
        "feature_stats": info.feature_stats,
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


def _fmt_values(values: Any, most: int = 4) -> str:
    """``0.1 -2.3 4.5 ... (17)``: a statistic's values, flattened, at most ``most`` shown."""
    flat: list[Any] = []
    stack = [values]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        else:
            flat.append(item)
    shown = " ".join("nan" if v is None else f"{v:.4g}" for v in flat[:most])
    return shown + (f" ... ({len(flat)})" if len(flat) > most else "")


def _feature_rows(features: dict[str, Any] | None) -> list[str]:
    """The ``info`` lines of the per-key statistics (or why there are none)."""
    if features is None:
        return ["  feature stats   - (built before statistics were recorded: download it again with --force)"]
    exact = all(not entry.get("q_rel_error") for entry in features.values())
    lines = [
        "  feature stats   (per element; images per channel; q01/q99 "
        + ("exact)" if exact else "exact, or within 0.4% where marked ~)")
    ]
    rows = []
    for key, entry in sorted(features.items()):
        mark = "~" if entry.get("q_rel_error") else ""
        rows.append(
            (
                key,
                str(entry.get("shape")),
                *(_fmt_values(entry.get(name)) for name in ("mean", "std", "min", "max")),
                mark + _fmt_values(entry.get("q01")),
                mark + _fmt_values(entry.get("q99")),
            )
        )
    lines += ["    " + line for line in table(("key", "shape", "mean", "std", "min", "max", "q01", "q99"), rows)]
    return lines


def cmd_info(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from datasets_hub.cache.catalogue_builds import recorded_info
    from datasets_hub.downloads.sizes import resource_sizes
    from datasets_hub.downloads.sizes import total as download_total
    from datasets_hub.files import human_bytes

    # the card from recorded facts: no torch, and no loader import once this id, params and frames are recorded
    card = None if args.plot else recorded_info(args.id, params_of(args), **frames_of(args))
    if card is None:  # a build whose sample keys are not recorded yet: hub.info reads a row (and records them)
        from datasets_hub.hub import info as hub_info

        card = hub_info(args.id, **frames_of(args), **params_of(args))
    # before a download: the catalogue's sizes, else the server's (HEAD, cached); never an error offline
    sizes = resource_sizes(
        card.resources,
        card.loader,
        ask_server=not card.cached,
        dataset_id=None if params_of(args) else card.id,
    )
    if args.plot:
        _plot(card, Path(args.plot))
    if args.json:
        record = _card(card)
        record["download"] = {"bytes": download_total(sizes), "resources": [asdict(a) for a in sizes]}
        out(json.dumps(record, indent=1, sort_keys=True, default=str))
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
        row("download", _size_text(download_total(sizes), sizes))
        lines.append("  resources")
        for res, size in zip(card.resources, sizes, strict=True):
            lines.append(f"    - {res.get('name')}  {' | '.join(res.get('urls', []))}")
            lines.append(
                f"      sha256 {res.get('sha256') or '(recorded at first download)'}  size {_size_text(size.bytes, [size])}"
            )
    else:
        row("download", "none (generated locally)")
    row("cached", f"yes  {card.build_path}" if card.cached else f"no (run `{PROG} download {card.id}`)")
    row("raw bytes", human_bytes(card.raw_bytes))
    if not card.cached:
        out(lines)
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
    for key, f in sorted(card.frames.items()):  # compressed camera keys: codec, bytes, loss
        psnr = f.get("psnr_db")
        loss = "exact" if psnr is None else f"PSNR {psnr.get('mean')} dB mean, {psnr.get('min')} min"
        # JPEG's quality (q75) or h264's quantiser (qp28): the same field, two scales
        setting = "qp" if f.get("codec") == "h264" else "q"
        quality = f" {setting}{f['quality']}" if f.get("quality") is not None else ""
        row(
            "frames",
            f"{key}: {f.get('codec')}{quality}, {human_bytes(f.get('bytes', 0))} "
            f"(decoded {human_bytes(f.get('decoded_bytes', 0))}), {loss}",
        )
    if not card.frames:  # a raw build (chosen, or frames=None under the limit): its image keys are stored decoded
        from datasets_hub.loader import frame_layout

        for name, key in card.sample_keys.items():
            if key["dtype"] == "uint8" and not name.startswith("next/") and frame_layout(key["shape"]):
                row("frames", f"{name}: raw, stored decoded (exact)")
    lines += _feature_rows(card.feature_stats)
    lines.append("  sample (one transition; a batch of B adds a leading B)")
    sample_rows = [(name, spec["dtype"], tuple(spec["shape"])) for name, spec in card.sample_keys.items()]
    lines += ["    " + line for line in table(("key", "dtype", "shape"), sample_rows)]
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
    out(lines)
    return 0


def _size_text(n: int | None, answers: list[Any]) -> str:
    """``226.7 MiB (catalogue)``, ``1.2 GiB (server, 2026-11-24)``, or why the size is unknown."""
    from datasets_hub.files import human_bytes

    if n is None:
        unknown = [a.source for a in answers if a.bytes is None]
        return unknown[0] if len(set(unknown)) == 1 else "unknown (" + "; ".join(sorted(set(unknown))) + ")"
    sources = sorted({a.source for a in answers})
    dates = sorted({a.checked[:10] for a in answers if a.checked})
    return f"{human_bytes(n)} ({', '.join(sources)}{', asked ' + dates[-1] if dates else ''})"


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
    from datasets_hub.build.storage import DatasetStorage

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
