"""A LeRobot dataset before any build (v3.0 and v2.1 layouts): metadata, parquet rows and video headers.

What is read: ``meta/info.json``; the episode metadata (v3.0: ``meta/episodes/**/*.parquet``, v2.1:
``meta/episodes.jsonl``); from every data parquet file only the bookkeeping columns (``episode_index``,
``frame_index``, ``timestamp``, ``index``) and the numeric non-image features; from every video file its
container header through PyAV (frame count and duration, no decoding), plus, for ``video_sample``
episodes drawn at random, one decoded frame at the episode's last timestamp (headers can claim frames
the stream does not hold). The metadata findings (orphaned rows, repeated episode ids, lengths, row
ranges and totals that disagree with the rows, a broken global index, videos with fewer frames than
rows) are made here; the rows go on to the step checks as a :class:`StepTable`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from datasets_hub.doctor import structure, timing
from datasets_hub.doctor.findings import UNREADABLE, Finding, Severity, defect
from datasets_hub.doctor.steps import SourceRead, StepTable
from datasets_hub.doctor.structure import (
    EPISODE_ID_DUPLICATE,
    GLOBAL_INDEX_GAP,
    METADATA_MISMATCH,
    ORPHAN_ROWS,
)

VIDEO_MISSING_FRAMES = defect(
    "video-missing-frames",
    "video",
    Severity.ERROR,
    "a video holds fewer frames than the rows (or the episode's time span) that refer to it",
    "frames looked up past the video's end fail, or a lenient decoder returns the last frame again: "
    "images no longer match their states and actions",
)

INFO = "meta/info.json"
BOOKKEEPING = ("episode_index", "frame_index", "timestamp", "index", "task_index")
NUMERIC = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"}


def is_lerobot(files: dict[str, Path]) -> bool:
    return INFO in files


def files_under(root: Path) -> dict[str, Path]:
    """``{relative posix path: file}`` for every file under ``root``."""
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}


def _column(table: Any, name: str) -> np.ndarray:
    """A parquet column as ``[rows, ...]`` numpy (list columns flattened into a trailing dimension)."""
    import pyarrow as pa

    column = table.column(name).combine_chunks()
    rows = len(column)
    while (
        pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type) or pa.types.is_large_list(column.type)
    ):
        column = column.flatten()
    values = column.to_numpy(zero_copy_only=False)
    return values.reshape(rows, -1) if values.size != rows else values.reshape(rows)


def _episodes_meta(info: dict[str, Any], files: dict[str, Path], out: SourceRead) -> dict[str, np.ndarray]:
    """The episode metadata as columns (``episode_index``, ``length``, and what v3.0 adds)."""
    if str(info.get("codebase_version", "")).startswith("v3"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = []
        for name in sorted(n for n in files if n.startswith("meta/episodes/") and n.endswith(".parquet")):
            try:
                tables.append(pq.read_table(files[name]))
            except (pa.ArrowException, OSError, ValueError) as exc:  # a damaged or truncated parquet file
                out.findings.append(Finding(UNREADABLE, 1, "files", f"{name}: {exc}", column=name))
        if not tables:
            return {}
        table = pa.concat_tables(tables, promote_options="default")
        wanted = [
            c for c in table.column_names if c in ("episode_index", "length") or c.startswith(("dataset_", "videos/"))
        ]
        return {c: _column(table, c) for c in wanted}
    rows = []
    path = files.get("meta/episodes.jsonl")
    if path is None:
        return {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            rows.append((int(row["episode_index"]), int(row["length"])))
        except (ValueError, KeyError, TypeError) as exc:
            out.findings.append(
                Finding(
                    UNREADABLE, 1, "files", f"meta/episodes.jsonl line {number}: {exc}", column="meta/episodes.jsonl"
                )
            )
    if not rows:
        return {}
    return {"episode_index": np.array([r[0] for r in rows]), "length": np.array([r[1] for r in rows])}


def _read_rows(
    info: dict[str, Any], files: dict[str, Path], out: SourceRead, *, max_rows: int, seed: int
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every row's bookkeeping columns, and the numeric features of the data files the step checks read:
    all of them when the rows fit in ``max_rows``, else files drawn at random (whole files hold whole
    episodes) until about ``max_rows`` rows. Returns ``(columns, rows with numeric features)``; the
    numeric columns hold only those rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = info.get("features") or {}
    numeric = [k for k, f in features.items() if str(f.get("dtype")) in NUMERIC and k not in BOOKKEEPING]
    kept: list[tuple[str, dict[str, np.ndarray], set[str]]] = []
    for name in sorted(n for n in files if n.startswith("data/") and n.endswith(".parquet")):
        try:
            schema_names = set(pq.read_schema(files[name]).names)
            table = pq.read_table(files[name], columns=[c for c in BOOKKEEPING if c in schema_names])
        except (pa.ArrowException, OSError, ValueError) as exc:  # a damaged or truncated parquet file
            out.findings.append(Finding(UNREADABLE, 1, "files", f"{name}: {exc}", column=name))
            continue
        if "episode_index" not in table.column_names:
            out.findings.append(Finding(UNREADABLE, 1, "files", f"{name}: no episode_index column", column=name))
            continue
        kept.append((name, {c: _column(table, c) for c in table.column_names}, schema_names))
    sizes = np.array([len(cols["episode_index"]) for _, cols, _ in kept], dtype=np.int64)
    chosen = np.arange(len(kept))
    if sizes.sum() > max_rows:
        order = np.random.default_rng(seed).permutation(len(kept))
        chosen = np.sort(order[: int(np.searchsorted(np.cumsum(sizes[order]), max_rows)) + 1])
        out.sampled = True
    parts: dict[str, list[np.ndarray]] = {}
    for _, cols, _ in kept:
        for c, values in cols.items():
            parts.setdefault(c, []).append(values)
    selected = np.zeros(int(sizes.sum()), dtype=bool)
    first = np.r_[0, np.cumsum(sizes)]
    numeric_parts: dict[str, list[np.ndarray]] = {}
    for i in chosen.tolist():
        name, _, schema_names = kept[i]
        try:
            table = pq.read_table(files[name], columns=[c for c in numeric if c in schema_names])
        except (pa.ArrowException, OSError, ValueError) as exc:
            out.findings.append(Finding(UNREADABLE, 1, "files", f"{name}: {exc}", column=name))
            continue
        selected[first[i] : first[i + 1]] = True
        for c in table.column_names:
            numeric_parts.setdefault(c, []).append(_column(table, c))
    total, picked = int(sizes.sum()), int(selected.sum())
    columns = {c: np.concatenate(v) for c, v in parts.items() if sum(len(x) for x in v) == total}
    columns.update({c: np.concatenate(v) for c, v in numeric_parts.items() if sum(len(x) for x in v) == picked})
    if out.sampled:
        out.notes.append(
            f"the step checks read {picked:,} of {total:,} rows ({chosen.size} of {len(kept)} data files drawn at "
            "random); metadata, structure and timing checks read every row"
        )
    return columns, selected


def read_lerobot(
    files: dict[str, Path], *, where: str, max_rows: int, video_sample: int = 8, seed: int = 0
) -> SourceRead:
    """The LeRobot dataset whose files are ``files`` (relative path -> local file) as a :class:`SourceRead`."""
    out = SourceRead(kind="lerobot", table=None, rows=0, episodes=0, families=["lerobot metadata"])
    try:
        info = json.loads(files[INFO].read_text())
    except (OSError, ValueError) as exc:
        out.findings.append(Finding(UNREADABLE, 1, "files", f"{INFO}: {exc}", column=INFO))
        return out
    fps = float(info.get("fps") or 0) or None
    meta = _episodes_meta(info, files, out)
    data, selected = _read_rows(info, files, out, max_rows=max_rows, seed=seed)
    n = len(data.get("episode_index", ()))
    out.rows = n
    if not n:
        out.notes.append(f"{where}: no data rows could be read")
        return out
    episode = data["episode_index"].astype(np.int64)
    step = data["frame_index"].astype(np.int64) if "frame_index" in data else None
    row_step = step if step is not None else np.zeros(n, np.int64)
    out.episodes = int(np.unique(episode).size)
    _check_meta(info, meta, data, episode, row_step, out)
    frames: dict[str, list[np.ndarray]] = {}
    if fps:
        frames = _check_videos(info, meta, files, fps, out, video_sample=video_sample, seed=seed)
    else:
        out.notes.append(f"{where}: info.json gives no fps: timestamps and videos were not checked against it")
    every = StepTable(episode=episode, step=row_step, fps=fps)
    if step is None:
        starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
        every.step = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    if "timestamp" in data:
        every.timestamp = data["timestamp"].astype(np.float64)
    if out.sampled:  # structure and timing need every row; the other step checks read the sampled files
        out.findings += structure.check(every, has_step_column=step is not None)
        out.findings += timing.check(every)
        out.families += [structure.FAMILY, timing.FAMILY]
    table = StepTable(
        episode=every.episode[selected],
        step=every.step[selected],
        fps=fps,
        timestamp=None if every.timestamp is None else every.timestamp[selected],
    )
    m = len(table)
    for key, values in data.items():
        if key in BOOKKEEPING or len(values) != m:
            continue
        if key.startswith("observation"):
            table.observations[key] = values
        table.columns[key] = values
    table.action = table.columns.get("action")
    if "next.reward" in table.columns:
        table.reward = table.columns["next.reward"].reshape(m)
    if "next.done" in table.columns:
        table.terminated = table.columns["next.done"].reshape(m).astype(bool)
    for key in ("next.done", "next.success"):  # flags: not numeric health material
        table.columns.pop(key, None)
    table.frames = {key: np.stack(images) for key, images in frames.items()}
    out.table = table
    out.has_step_column = step is not None
    return out


def _check_meta(
    info: dict[str, Any],
    meta: dict[str, np.ndarray],
    data: dict[str, np.ndarray],
    episode: np.ndarray,
    step: np.ndarray,
    out: SourceRead,
) -> None:
    n = episode.size
    if "episode_index" not in meta:
        out.notes.append("no episode metadata could be read: orphaned rows and lengths were not checked")
        return
    listed = meta["episode_index"].astype(np.int64)
    ids, counts = np.unique(listed, return_counts=True)
    if (counts > 1).any():
        out.findings.append(
            Finding(
                EPISODE_ID_DUPLICATE,
                count=int((counts > 1).sum()),
                unit="episodes",
                column="episode_index",
                detail=f"{int((counts - 1).sum())} extra metadata entries; repeated ids {ids[counts > 1][:5].tolist()}",
                examples=[(int(e), None) for e in ids[counts > 1]],
            )
        )
    orphan = ~np.isin(episode, ids)
    if orphan.any():
        out.findings.append(
            Finding(
                ORPHAN_ROWS,
                count=int(orphan.sum()),
                unit="rows",
                column="episode_index",
                detail=f"{orphan.mean():.1%} of the rows belong to {np.unique(episode[orphan]).size} episode id(s) "
                "the metadata does not list",
                examples=[(int(episode[r]), int(step[r])) for r in np.flatnonzero(orphan)[:5]],
            )
        )
    order = np.argsort(episode, kind="stable")
    data_ids, first, data_counts = np.unique(episode[order], return_index=True, return_counts=True)
    pos = np.minimum(np.searchsorted(data_ids, listed), max(data_ids.size - 1, 0))
    present = data_ids[pos] == listed if data_ids.size else np.zeros(listed.size, bool)
    rows = np.where(present, data_counts[pos], 0)
    length = meta["length"].astype(np.int64)
    problems: list[tuple[int, str]] = [
        (int(e), f"episode {e}: metadata length {want}, {got} rows")
        for e, want, got in zip(listed[rows != length], length[rows != length], rows[rows != length], strict=True)
    ]
    if "dataset_from_index" in meta and "index" in data and data_ids.size:
        index = data["index"].astype(np.int64)[order]
        lo = np.minimum.reduceat(index, first)[pos]
        hi = np.maximum.reduceat(index, first)[pos] + 1
        want_lo, want_hi = meta["dataset_from_index"].astype(np.int64), meta["dataset_to_index"].astype(np.int64)
        bad = present & ((lo != want_lo) | (hi != want_hi))
        problems += [
            (int(e), f"episode {e}: metadata rows [{a}, {b}), its rows' index [{c}, {d})")
            for e, a, b, c, d in zip(listed[bad], want_lo[bad], want_hi[bad], lo[bad], hi[bad], strict=True)
        ]
    for key, actual, what in (
        ("total_frames", n, "rows"),
        ("total_episodes", int(ids.size), "episodes in the metadata"),
    ):
        declared = info.get(key)
        if isinstance(declared, int) and declared != actual:
            problems.append((-1, f"info.json {key} = {declared}, {actual} {what}"))
    if problems:
        out.findings.append(
            Finding(
                METADATA_MISMATCH,
                count=len(problems),
                unit="entries",
                detail="; ".join(p for _, p in problems[:3]) + (" ..." if len(problems) > 3 else ""),
                examples=[(e, None) for e, _ in problems if e >= 0],
            )
        )
    if "index" in data:
        index = data["index"].astype(np.int64)
        off = index != np.arange(n)
        if off.any():
            out.findings.append(
                Finding(
                    GLOBAL_INDEX_GAP,
                    count=int(off.sum()),
                    unit="rows",
                    column="index",
                    detail=f"first at row {int(np.argmax(off))}: index {int(index[np.argmax(off)])}; "
                    f"{n - np.unique(index).size} repeated value(s)",
                    examples=[(int(episode[r]), int(step[r])) for r in np.flatnonzero(off)[:5]],
                )
            )


def _video_header(path: Path, fps: float) -> tuple[int, float]:
    """``(frames, seconds)`` from the container header (no decoding): the stream's frame count, else its
    duration times ``fps``."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        seconds = 0.0
        if stream.duration is not None and stream.time_base is not None:
            seconds = float(stream.duration * stream.time_base)
        elif container.duration is not None:
            seconds = container.duration / 1_000_000
        frames = int(stream.frames or 0) or round(seconds * fps)
        return frames, seconds


def _frame_at(path: Path, seconds: float, fps: float) -> np.ndarray | None:
    """The video's frame at ``seconds`` (within half a frame) as RGB, or None when it holds none there.
    Decodes from the keyframe before it."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        base = stream.time_base
        container.seek(max(0, int(seconds / base)) if base else 0, stream=stream, backward=True)
        for frame in container.decode(stream):
            if frame.time is None:
                continue
            if abs(frame.time - seconds) <= 0.5 / fps:
                return frame.to_ndarray(format="rgb24")
            if frame.time > seconds:
                return None
    return None


def _check_videos(
    info: dict[str, Any],
    meta: dict[str, np.ndarray],
    files: dict[str, Path],
    fps: float,
    out: SourceRead,
    *,
    video_sample: int,
    seed: int,
) -> dict[str, list[np.ndarray]]:
    """Headers against the metadata, then ``video_sample`` episode ends decoded; returns the decoded
    frames by camera (for the numeric checks: a camera that recorded black frames)."""
    features = info.get("features") or {}
    keys = [k for k, f in features.items() if f.get("dtype") == "video"]
    decoded: dict[str, list[np.ndarray]] = {}
    if not keys or "episode_index" not in meta:
        return decoded
    import av  # only for datasets with videos

    out.families.append("video headers")
    v3 = str(info.get("codebase_version", "")).startswith("v3")
    template = str(info.get("video_path") or "")
    chunks = int(info.get("chunks_size") or 1000)
    listed = meta["episode_index"].astype(np.int64)
    lengths = meta["length"].astype(np.int64)
    headers: dict[str, tuple[int, float] | None] = {}
    short: list[tuple[int, str]] = []
    spans: list[tuple[str, Path, float]] = []  # (camera, file, last frame time) to decode
    for key in keys:
        for k, e in enumerate(listed.tolist()):
            if v3:
                try:
                    chunk = int(meta[f"videos/{key}/chunk_index"][k])
                    file = int(meta[f"videos/{key}/file_index"][k])
                    begin = float(meta[f"videos/{key}/from_timestamp"][k])
                    end = float(meta[f"videos/{key}/to_timestamp"][k])
                except KeyError:
                    out.notes.append(f"meta/episodes has no videos/{key}/... columns: camera {key!r} not checked")
                    break
                name = template.format(video_key=key, chunk_index=chunk, file_index=file)
            else:
                name = template.format(episode_chunk=e // chunks, video_key=key, episode_index=e)
                begin, end = 0.0, float(lengths[k]) / fps
            if name not in headers:
                path = files.get(name)
                try:
                    headers[name] = None if path is None else _video_header(path, fps)
                except (av.error.FFmpegError, OSError, ValueError) as exc:  # a damaged container
                    out.findings.append(Finding(UNREADABLE, 1, "files", f"{name}: {exc}", column=key))
                    headers[name] = (0, 0.0)
            header = headers[name]
            if header is None:
                short.append((e, f"{name} is missing ({lengths[k]} frames expected)"))
                continue
            frames, _seconds = header
            need_end = round(end * fps)
            span = round((end - begin) * fps)
            if span < lengths[k]:
                short.append((e, f"{key}: episode {e} spans {span} frames of video for {lengths[k]} rows"))
            elif need_end > frames:
                short.append((e, f"{name}: episode {e} needs frames up to {need_end}, the header says {frames}"))
            else:
                spans.append((key, files[name], end - 1.0 / fps))
    if short:
        out.findings.append(
            Finding(
                VIDEO_MISSING_FRAMES,
                count=len(short),
                unit="episode videos",
                detail="; ".join(s for _, s in short[:3]) + (" ..." if len(short) > 3 else ""),
                examples=[(e, None) for e, _ in short],
            )
        )
    if spans and video_sample > 0:
        out.families.append("video sampled decode")
        rng = np.random.default_rng(seed)
        picks = rng.choice(len(spans), size=min(video_sample, len(spans)), replace=False)
        absent = []
        for i in sorted(picks.tolist()):
            key, path, last = spans[i]
            try:
                image = _frame_at(path, last, fps)
                if image is None:
                    absent.append(f"{path.name} ({key}) has no frame at {last:.3f} s")
                else:
                    decoded.setdefault(key, []).append(image)
            except (av.error.FFmpegError, OSError, ValueError) as exc:  # a damaged stream
                absent.append(f"{path.name} ({key}) fails to decode near {last:.3f} s ({exc})")
        if absent:
            out.findings.append(
                Finding(
                    VIDEO_MISSING_FRAMES,
                    count=len(absent),
                    unit="sampled episode ends",
                    detail="the header promises these frames but decoding finds none: " + "; ".join(absent[:3]),
                )
            )
    return decoded
