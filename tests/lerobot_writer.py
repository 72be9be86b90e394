"""Write small datasets in LeRobot's on-disk formats (v3.0 and v2.1), for tests and benchmarks.

The files follow what LeRobot 0.4's ``LeRobotDataset`` writes (v3.0) and what its 0.3 releases
wrote (v2.1): ``meta/info.json`` with the path templates and features, the episode and task
metadata (parquet in v3.0, JSON lines in v2.1), one parquet table of frames per data file, and
MP4 videos encoded as ``encode_video_frames`` does by default (``libsvtav1``, ``yuv420p``,
``g=2``, ``crf=30``, ``preset=12``, through PyAV). In v3.0 the episodes of a video file are
concatenated in one stream and located by ``videos/<key>/from_timestamp``/``to_timestamp``.

Every value tells where it came from (global frame index ``i``, episode ``e``, step ``t``):
``observation.state[i, d] = e * 1000 + t + d / 10``, ``action = -state``, ``next.reward = i / 2``.
Each image draws ``i + 1`` in binary as 8x8 black/white blocks in channels 0 and 1 of its top rows
(robust to the lossy codec) and the camera number ``* 60 + 40`` in channel 2 there, over a fixed
camera texture: :func:`read_index` decodes it back.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

BLOCK = 8
V3_DATA = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
V3_VIDEO = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
V3_EPISODES = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
V21_DATA = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"


@dataclass
class Spec:
    """What to write. ``lengths``: frames per episode; ``tasks``: the task of each episode."""

    version: str = "v3.0"
    lengths: tuple[int, ...] = (5, 8, 3)
    tasks: tuple[str, ...] = ("push the T into place", "stack the red cube", "push the T into place")
    cameras: tuple[str, ...] = ("observation.images.top", "observation.images.wrist")
    height: int = 64
    width: int = 64
    fps: int = 10
    state_dim: int = 3
    action_dim: int = 2
    image_mode: str = "video"  # or "image": PNG bytes inside the parquet
    reward: bool = True  # write next.reward / next.done
    episodes_per_file: int = 2  # v3.0: episodes per data/video file
    robot_type: str = "koch"
    codec: str = "libsvtav1"
    shared_video: bool = False  # benchmarks: encode camera 0's video once and copy it for every camera
    extra_features: dict[str, Any] = field(default_factory=dict)


CODE_BITS = 32


def _code_rows(width: int) -> int:
    cols = width // BLOCK
    return -(-CODE_BITS // cols)


@functools.lru_cache(maxsize=16)
def _background(camera: int, height: int, width: int) -> np.ndarray:
    """A fixed, camera-specific texture (8x8 cells of random colours), so that the videos carry
    detail to encode as camera frames do, not only flat blocks."""
    rng = np.random.default_rng(1000 + camera)
    cells = rng.integers(0, 256, size=(-(-height // BLOCK), -(-width // BLOCK), 3), dtype=np.uint8)
    return np.repeat(np.repeat(cells, BLOCK, 0), BLOCK, 1)[:height, :width]


def frame_image(index: int, camera: int, height: int, width: int) -> np.ndarray:
    """The uint8 HWC image of global frame ``index`` for camera number ``camera``: the code rows at
    the top hold ``index + 1`` in binary (8x8 blocks, channels 0 and 1) and the camera number
    (channel 2); the rest is the camera's texture."""
    cols, rows = width // BLOCK, _code_rows(width)
    if rows * BLOCK > height:
        raise ValueError(f"a {height}x{width} image is too small for the frame code")
    grid = np.zeros(rows * cols, dtype=np.uint8)
    grid[:CODE_BITS] = (int(index) + 1 >> np.arange(CODE_BITS)) & 1
    code = np.kron(grid.reshape(rows, cols), np.ones((BLOCK, BLOCK), dtype=np.uint8)) * 255
    img = _background(camera, height, width).copy()
    img[: rows * BLOCK, : cols * BLOCK, :2] = code[..., None]
    img[: rows * BLOCK, :, 2] = camera * 60 + 40
    return img


def read_index(img: np.ndarray, channels_first: bool = False) -> tuple[int, int]:
    """``(global frame index, camera number)`` drawn by :func:`frame_image` (HWC or CHW uint8)."""
    img = np.asarray(img)
    if channels_first:
        img = img.transpose(1, 2, 0)
    width = img.shape[1]
    cols, rows = width // BLOCK, _code_rows(width)
    cells = img[: rows * BLOCK, : cols * BLOCK, 0].reshape(rows, BLOCK, cols, BLOCK)[:, 2:-2, :, 2:-2]
    bits = (cells.mean(axis=(1, 3)) > 127).reshape(-1)[:CODE_BITS]
    value = int((bits.astype(np.int64) << np.arange(CODE_BITS)).sum())
    return value - 1, round((float(img[: rows * BLOCK, :, 2].mean()) - 40) / 60)


def state_of(episode: int, t: int, dim: int) -> np.ndarray:
    return (episode * 1000 + t + np.arange(dim) / 10).astype(np.float32)


def encode_video(path: Path, frames: Any, fps: int, codec: str = "libsvtav1") -> None:
    """Encode uint8 ``[H, W, 3]`` frames (an array ``[T, H, W, 3]`` or any iterable of frames) as
    LeRobot's ``encode_video_frames`` does."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    options = {"g": "2", "crf": "30", "preset": "12"} if codec == "libsvtav1" else {"g": "2", "crf": "30"}
    frames = iter(frames)
    first = next(frames)
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=fps, options=options)
        stream.pix_fmt = "yuv420p"
        stream.width, stream.height = first.shape[1], first.shape[0]
        stream.time_base = Fraction(1, fps)
        for i, img in enumerate(itertools.chain([first], frames)):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
            frame.pts = i
            frame.time_base = Fraction(1, fps)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def _png(img: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def _features(spec: Spec) -> dict[str, Any]:
    feats: dict[str, Any] = {}
    for cam in spec.cameras:
        entry: dict[str, Any] = {
            "dtype": spec.image_mode,
            "shape": [spec.height, spec.width, 3],
            "names": ["height", "width", "channels"],
        }
        if spec.image_mode == "video":
            entry["info"] = {
                "video.height": spec.height,
                "video.width": spec.width,
                "video.codec": "av1",
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "video.fps": spec.fps,
                "video.channels": 3,
                "has_audio": False,
            }
        feats[cam] = entry
    feats["observation.state"] = {
        "dtype": "float32",
        "shape": [spec.state_dim],
        "names": [f"s{d}" for d in range(spec.state_dim)],
    }
    feats["action"] = {
        "dtype": "float32",
        "shape": [spec.action_dim],
        "names": [f"a{d}" for d in range(spec.action_dim)],
    }
    if spec.reward:
        feats["next.reward"] = {"dtype": "float32", "shape": [1], "names": None}
        feats["next.done"] = {"dtype": "bool", "shape": [1], "names": None}
    feats.update(spec.extra_features)
    for name, dtype in (
        ("timestamp", "float32"),
        ("frame_index", "int64"),
        ("episode_index", "int64"),
        ("index", "int64"),
        ("task_index", "int64"),
    ):
        feats[name] = {"dtype": dtype, "shape": [1], "names": None}
    return feats


def _frames_table(spec: Spec, episodes: list[int], starts: list[int], task_index: dict[str, int]):
    """One parquet table with the frames of ``episodes``."""
    import pyarrow as pa

    cols: dict[str, list] = {
        k: []
        for k in ("observation.state", "action", "timestamp", "frame_index", "episode_index", "index", "task_index")
    }
    if spec.reward:
        cols["next.reward"], cols["next.done"] = [], []
    if spec.image_mode == "image":
        for cam in spec.cameras:
            cols[cam] = []
    for e in episodes:
        for t in range(spec.lengths[e]):
            i = starts[e] + t
            state = state_of(e, t, spec.state_dim)
            cols["observation.state"].append(state.tolist())
            cols["action"].append((-state[: spec.action_dim]).tolist())
            cols["timestamp"].append(np.float32(t / spec.fps))
            cols["frame_index"].append(t)
            cols["episode_index"].append(e)
            cols["index"].append(i)
            cols["task_index"].append(task_index[spec.tasks[e]])
            if spec.reward:
                cols["next.reward"].append(np.float32(i / 2))
                cols["next.done"].append(t == spec.lengths[e] - 1)
            if spec.image_mode == "image":
                for c, cam in enumerate(spec.cameras):
                    cols[cam].append({"bytes": _png(frame_image(i, c, spec.height, spec.width)), "path": None})
    arrays = {
        "observation.state": pa.array(cols["observation.state"], type=pa.list_(pa.float32(), spec.state_dim)),
        "action": pa.array(cols["action"], type=pa.list_(pa.float32(), spec.action_dim)),
        "timestamp": pa.array(cols["timestamp"], type=pa.float32()),
        "frame_index": pa.array(cols["frame_index"], type=pa.int64()),
        "episode_index": pa.array(cols["episode_index"], type=pa.int64()),
        "index": pa.array(cols["index"], type=pa.int64()),
        "task_index": pa.array(cols["task_index"], type=pa.int64()),
    }
    if spec.reward:
        arrays["next.reward"] = pa.array(cols["next.reward"], type=pa.float32())
        arrays["next.done"] = pa.array(cols["next.done"], type=pa.bool_())
    if spec.image_mode == "image":
        image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        for cam in spec.cameras:
            arrays[cam] = pa.array(cols[cam], type=image_type)
    return pa.table(arrays)


def _write_parquet(table, path: Path) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(path))


def write_dataset(root: Path, spec: Spec | None = None) -> dict[str, Any]:
    """Write a LeRobot dataset under ``root``; return a summary (starts, files, task indices)."""
    spec = spec or Spec()
    root = Path(root)
    (root / "meta").mkdir(parents=True, exist_ok=True)
    task_names = list(dict.fromkeys(spec.tasks))
    task_index = {name: i for i, name in enumerate(task_names)}
    starts = np.concatenate([[0], np.cumsum(spec.lengths)[:-1]]).astype(int).tolist()
    total = int(sum(spec.lengths))
    info: dict[str, Any] = {
        "codebase_version": spec.version,
        "robot_type": spec.robot_type,
        "total_episodes": len(spec.lengths),
        "total_frames": total,
        "total_tasks": len(task_names),
        "chunks_size": 1000,
        "fps": spec.fps,
        "splits": {"train": f"0:{len(spec.lengths)}"},
        "features": _features(spec),
    }
    if spec.version.startswith("v3"):
        _write_v3(root, spec, info, starts, task_index, task_names)
    else:
        _write_v21(root, spec, info, starts, task_index, task_names)
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    return {"starts": starts, "total": total, "task_index": task_index}


def _stats(values: np.ndarray) -> dict[str, list]:
    values = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    return {
        "min": values.min(0).tolist(),
        "max": values.max(0).tolist(),
        "mean": values.mean(0).tolist(),
        "std": values.std(0).tolist(),
        "count": [len(values)],
    }


def _write_v3(
    root: Path, spec: Spec, info: dict, starts: list[int], task_index: dict[str, int], task_names: list[str]
) -> None:
    import pyarrow as pa

    info.update(
        {
            "data_files_size_in_mb": 100,
            "video_files_size_in_mb": 500,
            "data_path": V3_DATA,
            "video_path": V3_VIDEO if spec.image_mode == "video" else None,
        }
    )
    groups = [
        list(range(i, min(i + spec.episodes_per_file, len(spec.lengths))))
        for i in range(0, len(spec.lengths), spec.episodes_per_file)
    ]
    rows: list[dict[str, Any]] = []
    for file_index, episodes in enumerate(groups):
        _write_parquet(
            _frames_table(spec, episodes, starts, task_index),
            root / V3_DATA.format(chunk_index=0, file_index=file_index),
        )
        offsets = {}
        if spec.image_mode == "video":
            first = None
            for c, cam in enumerate(spec.cameras):
                target = root / V3_VIDEO.format(video_key=cam, chunk_index=0, file_index=file_index)
                if spec.shared_video and first is not None:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(first.read_bytes())
                    continue
                frames = (
                    frame_image(starts[e] + t, c, spec.height, spec.width)
                    for e in episodes
                    for t in range(spec.lengths[e])
                )
                encode_video(target, frames, spec.fps, spec.codec)
                first = target
            position = 0
            for e in episodes:
                offsets[e] = (position / spec.fps, (position + spec.lengths[e]) / spec.fps)
                position += spec.lengths[e]
        for e in episodes:
            row: dict[str, Any] = {
                "episode_index": e,
                "tasks": [spec.tasks[e]],
                "length": spec.lengths[e],
                "data/chunk_index": 0,
                "data/file_index": file_index,
                "dataset_from_index": starts[e],
                "dataset_to_index": starts[e] + spec.lengths[e],
            }
            if spec.image_mode == "video":
                for cam in spec.cameras:
                    row[f"videos/{cam}/chunk_index"] = 0
                    row[f"videos/{cam}/file_index"] = file_index
                    row[f"videos/{cam}/from_timestamp"] = offsets[e][0]
                    row[f"videos/{cam}/to_timestamp"] = offsets[e][1]
            row["meta/episodes/chunk_index"] = 0
            row["meta/episodes/file_index"] = 0
            states = np.stack([state_of(e, t, spec.state_dim) for t in range(spec.lengths[e])])
            for name, stat in _stats(states).items():
                row[f"stats/observation.state/{name}"] = stat
            rows.append(row)
    table = pa.Table.from_pylist(rows)
    _write_parquet(table, root / V3_EPISODES.format(chunk_index=0, file_index=0))
    _write_parquet(_tasks_table(task_names), root / "meta" / "tasks.parquet")
    all_states = np.stack([state_of(e, t, spec.state_dim) for e, n in enumerate(spec.lengths) for t in range(n)])
    (root / "meta" / "stats.json").write_text(json.dumps({"observation.state": _stats(all_states)}, indent=4))


def _tasks_table(task_names: list[str]):
    """``meta/tasks.parquet`` as pandas writes LeRobot's tasks frame: ``task_index`` with the task
    text as the (named) index, recorded in the pandas schema metadata."""
    import pyarrow as pa

    table = pa.table(
        {
            "task_index": pa.array(range(len(task_names)), type=pa.int64()),
            "task": pa.array(task_names, type=pa.string()),
        }
    )
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def _write_v21(
    root: Path, spec: Spec, info: dict, starts: list[int], task_index: dict[str, int], task_names: list[str]
) -> None:
    info.update(
        {
            "total_chunks": 1,
            "total_videos": len(spec.lengths) * len(spec.cameras) if spec.image_mode == "video" else 0,
            "data_path": V21_DATA,
            "video_path": V21_VIDEO if spec.image_mode == "video" else None,
        }
    )
    episodes_lines, stats_lines = [], []
    for e, length in enumerate(spec.lengths):
        _write_parquet(
            _frames_table(spec, [e], starts, task_index), root / V21_DATA.format(episode_chunk=0, episode_index=e)
        )
        if spec.image_mode == "video":
            for c, cam in enumerate(spec.cameras):
                frames = np.stack([frame_image(starts[e] + t, c, spec.height, spec.width) for t in range(length)])
                encode_video(
                    root / V21_VIDEO.format(episode_chunk=0, video_key=cam, episode_index=e),
                    frames,
                    spec.fps,
                    spec.codec,
                )
        episodes_lines.append({"episode_index": e, "tasks": [spec.tasks[e]], "length": length})
        states = np.stack([state_of(e, t, spec.state_dim) for t in range(length)])
        stats_lines.append({"episode_index": e, "stats": {"observation.state": _stats(states)}})
    meta = root / "meta"
    (meta / "episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in episodes_lines))
    (meta / "episodes_stats.jsonl").write_text("".join(json.dumps(x) + "\n" for x in stats_lines))
    (meta / "tasks.jsonl").write_text(
        "".join(json.dumps({"task_index": i, "task": t}) + "\n" for i, t in enumerate(task_names))
    )


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` as ``{path in repo: bytes}`` (to serve from a fake Hub)."""
    root = Path(root)
    return {name: (root / name).read_bytes() for name in files_of_names(root)}


def files_of_names(root: Path) -> list[str]:
    """The paths (in the repo) of every file under ``root``."""
    root = Path(root)
    return [p.relative_to(root).as_posix() for p in sorted(root.rglob("*")) if p.is_file()]
