"""Export a build as a Hugging Face ``datasets`` repo folder: parquet shards, features, a card.

Files written::

    README.md                              dataset card: YAML front matter (``configs`` naming the
                                           shards, license, tags) and the column table below
    data/train-00000-of-0000N.parquet      one row per transition, episode after episode; each
                                           shard's schema metadata holds the ``datasets`` features
                                           (key ``huggingface``) and each column's build key and
                                           shape (key ``datasets_hub``)

``datasets.load_dataset("parquet", data_dir=...)`` or ``load_dataset(<folder>)`` reads it, and
``datasets_hub.push(..., format="hf")`` uploads it. It is the format that holds a build whole:

- one row per transition; ``episode_index`` (the build's episode id) and ``step`` (t);
- an observation key ``a/b`` is the column ``a.b`` at time t and ``next.a.b`` at t + 1 (the
  final next observation of every episode included; keys whose next values the build stores per
  step give those);
- every per-step key ``a/b`` (``action``, ``next/reward``, ``next/terminated``,
  ``next/truncated``, ``info/...``) is the column ``a.b``; terminated and truncated stay two columns;
- values of shape ``[1]`` are written as scalars (the usual ``datasets`` form; the shape is
  restored from the ``datasets_hub`` metadata); uint8 ``[H, W, 3]`` / ``[H, W, 1]`` / ``[H, W]``
  observations are ``Image`` features (PNG, lossless); other arrays are ``Sequence`` (1-D) or
  ``Array2D``..``Array5D`` features;
- not held: a key level containing ``.`` (columns join levels with ``.``: refused), arrays of
  more than five dimensions (refused), the frames a build keeps before episodes (``history``).

Options: ``shard_mb`` (uncompressed megabytes per shard, default 500), ``license`` (default: the
build's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from datasets_hub.buffers.nested_keys import Key
from datasets_hub.errors import InvalidParameter, MissingDependency
from datasets_hub.exporters.columns import ParquetFile, arrow_values, png_images
from datasets_hub.exporters.episodes import BuildEpisodes, Episode

OPTIONS = ("shard_mb", "license")
SHARD = "data/train-{index:05d}-of-{count:05d}.parquet"


@dataclass(frozen=True)
class Column:
    name: str
    key: Key  #: the build key (``("next", *k)`` for a next observation)
    source: str  #: "obs" (rows 0..T-1), "next_obs" (rows 1..T), "steps"
    dtype: np.dtype
    shape: tuple[int, ...]
    image: bool

    def feature(self) -> dict[str, Any]:
        """The ``datasets`` feature of this column, as ``Features.to_dict()`` writes it."""
        if self.image:
            return {"_type": "Image"}
        dtype = str(self.dtype)
        if self.shape in ((), (1,)):
            return {"dtype": dtype, "_type": "Value"}
        if len(self.shape) == 1:
            return {"feature": {"dtype": dtype, "_type": "Value"}, "length": self.shape[0], "_type": "Sequence"}
        return {"shape": list(self.shape), "dtype": dtype, "_type": f"Array{len(self.shape)}D"}


@dataclass
class Plan:
    columns: list[Column]
    shard_bytes: int
    license: str | None


def _name(key: Key) -> str:
    for part in key:
        if not part or "." in part:
            raise InvalidParameter(
                f"key {'/'.join(key)!r}: the columns of an 'hf' export join key levels with '.', so the level "
                f"{part!r} would read back as another key; rename it (load(..., preprocess=fn)) before exporting"
            )
    return ".".join(key)


def _is_image(dtype: np.dtype, shape: tuple[int, ...]) -> bool:
    return dtype == np.uint8 and (len(shape) == 2 or (len(shape) == 3 and shape[-1] in (1, 3)))


def plan(episodes: BuildEpisodes, out: Path, options: dict[str, Any]) -> Plan:
    """Check the build and the options (see the module docstring); nothing is written."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InvalidParameter(f"format='hf' has no option {unknown[0]!r}; its options are {', '.join(OPTIONS)}")
    try:
        import pyarrow  # noqa: F401 - imported to check it is installed, before anything is written
    except ImportError as exc:
        raise MissingDependency("exporting to Hugging Face datasets needs pyarrow: pip install pyarrow") from exc
    mb = options.get("shard_mb", 500)
    if isinstance(mb, bool) or not isinstance(mb, (int, float)) or not mb > 0:
        raise InvalidParameter(f"shard_mb must be a positive number of megabytes, got {mb!r}")
    license_ = options.get("license", (episodes.build.manifest.get("metadata") or {}).get("license"))
    columns: list[Column] = []
    for key in episodes.observation_keys:
        c = episodes.column(key)
        image = _is_image(c.dtype, c.shape)
        columns.append(Column(_name(key), key, "obs", c.dtype, c.shape, image))
        if key not in episodes.next_per_step:
            columns.append(Column(_name(("next", *key)), ("next", *key), "next_obs", c.dtype, c.shape, image))
    for key in episodes.step_keys:
        c = episodes.column(key)
        image = key[0] == "next" and key[1:] in episodes.observation_keys and _is_image(c.dtype, c.shape)
        columns.append(Column(_name(key), key, "steps", c.dtype, c.shape, image))
    for column in columns:
        if len(column.shape) > 5 and not column.image:
            raise InvalidParameter(
                f"key {'/'.join(column.key)!r} has {len(column.shape)} dimensions per row; Hugging Face datasets "
                "arrays have at most 5 (Array5D): reshape it before exporting"
            )
    names = [c.name for c in columns] + ["episode_index", "step"]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidParameter(f"two keys of the build would both be the column {twice[0]!r}; rename one")
    return Plan(columns=columns, shard_bytes=int(mb * (1 << 20)), license=license_)


def _table(plan: Plan, episode: Episode, episode_id: int) -> Any:
    import pyarrow as pa

    n = episode.length
    arrays: dict[str, Any] = {
        "episode_index": pa.array(np.full(n, episode_id, dtype=np.int64)),
        "step": pa.array(np.arange(n, dtype=np.int64)),
    }
    for column in plan.columns:
        if column.source == "obs":
            values = episode.observations[column.key][:n]
        elif column.source == "next_obs":
            values = episode.observations[column.key[1:]][1 : n + 1]
        else:
            values = episode.steps[column.key]
        if column.image:
            arrays[column.name] = png_images(values)
        else:
            arrays[column.name] = arrow_values(values)
    return pa.table(arrays)


def _schema_metadata(plan: Plan) -> dict[bytes, bytes]:
    features: dict[str, Any] = {
        "episode_index": {"dtype": "int64", "_type": "Value"},
        "step": {"dtype": "int64", "_type": "Value"},
    }
    features.update({c.name: c.feature() for c in plan.columns})
    keys = {c.name: {"key": list(c.key), "shape": list(c.shape), "dtype": str(c.dtype)} for c in plan.columns}
    return {
        b"huggingface": json.dumps({"info": {"features": features}}).encode(),
        b"datasets_hub": json.dumps({"columns": keys}).encode(),
    }


def _card(plan: Plan, episodes: BuildEpisodes, shards: int) -> str:
    manifest = episodes.build.manifest
    front = ["---"]
    if plan.license:
        front.append(f"license: {str(plan.license).lower()}")
    front += [
        "task_categories:",
        "- reinforcement-learning",
        "tags:",
        "- offline-rl",
        "- datasets-hub",
        "configs:",
        "- config_name: default",
        "  data_files:",
        "  - split: train",
        "    path: data/train-*.parquet",
        "---",
    ]
    description = (manifest.get("metadata") or {}).get("description") or ""
    lines = [
        f"# {manifest.get('id', 'dataset')}",
        "",
        description,
        "",
        (
            f"{episodes.transitions} transitions in {len(episodes)} episodes, one row per transition, in {shards} "
            f"parquet shard(s). Exported by datasets_hub from build {manifest.get('fingerprint')}."
        ),
        "",
        "| column | build key | dtype | shape |",
        "|---|---|---|---|",
        "| `episode_index` | episode id | int64 | [] |",
        "| `step` | time step t within the episode | int64 | [] |",
    ]
    for c in plan.columns:
        where = {"obs": " at t", "next_obs": " (observation at t + 1)", "steps": ""}[c.source]
        kind = "image (PNG)" if c.image else str(c.dtype)
        lines.append(f"| `{c.name}` | `{'/'.join(c.key)}`{where} | {kind} | {list(c.shape)} |")
    lines += [
        "",
        (
            "`next.terminated` marks the end of an episode by the task (no bootstrapping past it), "
            "`next.truncated` an end by a time limit or the end of the recording."
        ),
        "",
    ]
    return "\n".join(front) + "\n" + "\n".join(lines)


def write(plan: Plan, episodes: BuildEpisodes, staging: Path, progress: Any) -> None:
    """Write the shards and the card into ``staging``, one episode in memory at a time."""

    metadata = _schema_metadata(plan)
    (staging / "data").mkdir()
    shards: list[Path] = []
    writer: Any = None
    shard_bytes = 0
    try:
        for episode in episodes:
            table = _table(plan, episode, episode.id)
            table = table.replace_schema_metadata(metadata)
            if writer is not None and shard_bytes >= plan.shard_bytes:
                writer.close()
                writer, shard_bytes = None, 0
            if writer is None:
                shards.append(staging / "data" / f"shard-{len(shards):05d}.parquet")
                writer = ParquetFile(shards[-1], table.schema)
            writer.write(table)
            shard_bytes += table.nbytes
            progress.update(episode.length)
    finally:
        if writer is not None:
            writer.close()
    for index, path in enumerate(shards):  # the count is known only now
        path.rename(staging / SHARD.format(index=index, count=len(shards)))
    (staging / "README.md").write_text(_card(plan, episodes, len(shards)))
