"""The dataset card of a published build: a ``README.md`` in the Hugging Face dataset-card convention
(YAML front matter, then Markdown), generated from the build's manifest and publishing record."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

# licence names as catalogues write them -> Hugging Face licence identifiers
_HF_LICENSES = {
    "mit": "mit",
    "apache 2.0": "apache-2.0",
    "apache-2.0": "apache-2.0",
    "cc by 4.0": "cc-by-4.0",
    "cc-by-4.0": "cc-by-4.0",
    "cc by-sa 4.0": "cc-by-sa-4.0",
    "cc0": "cc0-1.0",
    "cc0 1.0": "cc0-1.0",
    "bsd-3-clause": "bsd-3-clause",
    "cc by-nc 4.0": "cc-by-nc-4.0",
}
_SIZE_CATEGORIES = [
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
]


def _size_category(transitions: int) -> str:
    for bound, name in _SIZE_CATEGORIES:
        if transitions < bound:
            return name
    return "n>1B"


def _yaml_scalar(value: Any) -> str:
    return json.dumps(value)  # a JSON string is a valid YAML scalar, quoted and escaped


def _histogram(values: list[float], bins: int = 10, width: int = 40) -> list[str]:
    """A text histogram (one line per bin): the card's return plot, readable on any Hub page."""
    if not values:
        return []
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - low) / span * bins))] += 1
    top = max(counts)
    lines = []
    for i, count in enumerate(counts):
        left = low + span * i / bins
        lines.append(f"{left:>12.4g} | {'#' * round(width * count / top) if top else ''} {count}")
    return lines


def _feature_table(features: Any) -> list[str]:
    """The card's per-key statistics (recorded while building; absent in older builds)."""
    if not isinstance(features, dict) or not features:
        return []

    def cell(values: Any) -> str:
        flat = np.asarray(values, dtype=np.float64).reshape(-1)
        shown = ", ".join(f"{v:.4g}" for v in flat[:6])
        return f"[{shown}{', ...' if flat.size > 6 else ''}]"

    lines = [
        "## Feature statistics",
        "",
        "Per element (images: per channel); q01/q99 exact where `q_rel_error` is 0, else within that relative error.",
        "",
        "| key | mean | std | min | max | q01 | q99 | q_rel_error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, entry in sorted(features.items()):
        columns = [cell(entry.get(name, [])) for name in ("mean", "std", "min", "max", "q01", "q99")]
        lines.append(f"| `{key}` | " + " | ".join(columns) + f" | {entry.get('q_rel_error', '')} |")
    return [*lines, ""]


def render_card(manifest: dict[str, Any], published: dict[str, Any], episode_returns: list[float] | None = None) -> str:
    """The card text for a build with ``manifest``, published as described by ``published``."""
    metadata = manifest.get("metadata", {}) or {}
    counts = manifest.get("counts", {}) or {}
    stats = manifest.get("stats", {}) or {}
    dataset_id = str(manifest.get("id", "unknown"))
    licence = str(metadata.get("license", "") or "")
    hf_licence = _HF_LICENSES.get(licence.strip().lower(), "other")
    front = [
        "---",
        f"license: {hf_licence}",
        *([f"license_name: {_yaml_scalar(licence)}"] if hf_licence == "other" and licence else []),
        f"pretty_name: {_yaml_scalar(dataset_id)}",
        "task_categories:",
        "- reinforcement-learning",
        "tags:",
        "- offline-rl",
        "- datasets_hub",
        "- torchrl",
        f"- {manifest.get('loader', 'unknown')}",
        "size_categories:",
        f"- {_size_category(int(counts.get('transitions', 0)))}",
        "---",
    ]
    body = [
        f"# {dataset_id}",
        "",
        str(metadata.get("description", "")).strip() or "An offline-RL dataset published by datasets_hub.",
        "",
        "## Load it",
        "",
        "```python",
        "import datasets_hub as dh",
        'rb = dh.load("<this folder\'s URL>", batch_size=256)   # hf://datasets/<org>/<repo>, https://, s3://, file://',
        "```",
        "",
        (
            "Samples are TensorDicts in TorchRL Episode Data (TED) layout. The data is stored as zarr v3 arrays "
            "(`data.zarr/`), chunked along rows and zstd-compressed; `published.json` holds the sha256 of every "
            "file, and `manifest.json` is the build's own manifest."
        ),
        "",
        "## Counts",
        "",
        "| what | value |",
        "|---|---|",
        *[f"| {k} | {v:,} |" if isinstance(v, int) else f"| {k} | {v} |" for k, v in sorted(counts.items())],
        "",
    ]
    for name in ("episode_return", "episode_length"):
        if name in stats:
            s = stats[name]
            body += [
                f"**{name.replace('_', ' ')}**: "
                + ", ".join(f"{k} {v:.6g}" for k, v in sorted(s.items()) if isinstance(v, (int, float))),
                "",
            ]
    lines = _histogram(episode_returns or [])
    if lines:
        body += ["## Episode returns", "", "```", *lines, "```", ""]
    frames = stats.get("frames") or {}
    if frames:  # compressed camera keys (datasets_hub/build/frames.py): what was lost, and what it saved
        body += [
            "## Compressed frames",
            "",
            (
                "Each frame of these keys is stored as an image of its own and decoded when sampled. PSNR is "
                "measured against the frames the loader handed over, on every 16th frame."
            ),
            "",
            "| key | codec | quality | stored bytes | decoded bytes | PSNR mean / min (dB) |",
            "|---|---|---|---|---|---|",
        ]
        for key, f in sorted(frames.items()):
            quality = "" if f.get("quality") is None else f["quality"]
            if quality != "" and f.get("codec") == "h264":  # x264's quantiser: lower is better, unlike JPEG's scale
                quality = f"qp {quality}"
            psnr = f.get("psnr_db")
            shown = "exact" if psnr is None else f"{psnr.get('mean')} / {psnr.get('min')}"
            body.append(
                f"| `{key}` | {f.get('codec')} | {quality} | {f.get('bytes', 0):,} | {f.get('decoded_bytes', 0):,} | "
                f"{shown} |"
            )
        body.append("")
    body += _feature_table(stats.get("features"))
    body += ["## Schema (stored leaves)", "", "| leaf | dtype | shape | rows |", "|---|---|---|---|"]
    for name, spec in sorted(manifest.get("schema", {}).items()):
        body.append(f"| `{name}` | {spec.get('dtype')} | {tuple(spec.get('shape', []))} | {spec.get('rows'):,} |")
    body += [
        "",
        "## Provenance",
        "",
        (
            f"- loader `{manifest.get('loader')}` (format version {manifest.get('loader_format_version')}), "
            f"params `{json.dumps(manifest.get('params', {}), sort_keys=True)}`"
        ),
        (
            f"- build fingerprint `{manifest.get('fingerprint')}`, storage format "
            f"{manifest.get('storage_format_version')}, built {manifest.get('created')} by datasets_hub "
            f"{manifest.get('hub_version')}"
        ),
        (
            f"- published {published.get('created')} by datasets_hub {published.get('hub_version')}; "
            f"{published.get('published_bytes', 0):,} bytes"
        ),
    ]
    for source in manifest.get("sources", []) or []:
        body.append(
            f"- source `{source.get('name')}`: {source.get('url')} (sha256 `{source.get('sha256')}`, "
            f"{source.get('bytes')} bytes)"
        )
    if metadata.get("reference_scores") or metadata.get("ref_min_score") is not None:
        scores = metadata.get("reference_scores") or {
            k: metadata[k] for k in ("ref_min_score", "ref_max_score") if k in metadata
        }
        body += ["", "## Reference scores", "", f"`{json.dumps(scores, sort_keys=True)}`"]
    if metadata.get("citation"):
        body += ["", "## Citation", "", str(metadata["citation"])]
    if licence:
        body += ["", "## Licence", "", licence]
    return "\n".join([*front, "", *body]) + "\n"
