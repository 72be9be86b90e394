"""Export a build as a LeRobot v3.0 dataset (the layout LeRobot 0.4's ``LeRobotDataset`` reads).

Files written::

    meta/info.json                              codebase_version "v3.0", fps, features, path templates
    meta/tasks.parquet                          task text (the pandas index) -> task_index
    meta/episodes/chunk-000/file-000.parquet    one row per episode: length, tasks, where its rows are,
                                                per-episode stats/<feature>/{min,max,mean,std,count}
    meta/stats.json                             the same statistics over the whole dataset
    data/chunk-CCC/file-FFF.parquet             the frames, episode after episode (a new file past
                                                ``data_file_mb``, 1000 files per chunk)
    videos/<camera>/chunk-CCC/file-FFF.mp4      with ``video=True``: each camera's frames of that data file

**Mapping** (a build episode of ``T`` steps is ``T`` LeRobot frames):

- an observation key ``observation/a/b`` is the feature ``observation.a.b``; any other
  observation key ``k`` becomes ``observation.k`` (LeRobot keeps observations under that
  prefix). ``observation`` itself stays ``observation`` when it is the only observation key, and
  is ``observation.state`` beside others (a name cannot be both a feature and a prefix). uint8 ``[H, W, 3]`` (or ``[3, H, W]``) observations are ``image`` features (PNG, lossless);
- frame ``t`` holds the observation at time ``t``. LeRobot records no observation after an
  episode's last step: the final next observation of each episode is not written (a LeRobot
  reader reports it unknown). A key whose next values the build stores per step (not the
  following observation) cannot be held: refused;
- ``action`` -> ``action``; ``next/reward`` -> ``next.reward``;
- ``next/terminated`` -> ``next.done``. LeRobot has one end flag: an episode whose last step is
  not done reads back as truncated, one whose last step is done as terminated (an episode ending
  both terminated and truncated reads back terminated; one ending with neither flag, truncated).
  A build sets these flags only on an episode's last step;
- ``task`` (uint8 UTF-8 text per step, as the LeRobot loader stores it) -> the frames' tasks;
  without it every frame has the task ``task=`` (default: the build's id);
- ``info/<name>`` -> ``<name>``; any other step key ``a/b`` -> ``a.b`` (LeRobot readers put
  such features under ``info``). The build's own copies of LeRobot's bookkeeping columns
  (``info/timestamp``, ``frame_index``, ``episode_index``, ``index``, ``task_index``,
  ``next.done``, ``next_observation_unknown``) are not features: the columns are written from the
  episodes (``timestamp`` keeps the build's values when it has them, else ``t / fps``);
- scalar values are written as shape ``[1]`` (LeRobot's convention); episodes are numbered
  0..E-1 in build order (``episode_index``).

Options: ``fps`` (default: the build's ``fps`` note, else 10), ``task`` (text of every frame of a
build without a ``task`` key), ``robot_type`` (default: the build's note, else ``"unknown"``),
``data_file_mb`` (default 100), ``video`` (default False: cameras as PNG ``image`` features; True:
observation cameras as MP4 files, :mod:`datasets_hub.exporters.lerobot_video`, timestamps ``t / fps``)
and ``video_codec`` (``"libsvtav1"``, the default, ``"libx264"``, ``"h264"``, ``"libx265"``, ``"hevc"``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from datasets_hub.buffers.nested_keys import Key
from datasets_hub.errors import InvalidParameter, MissingDependency
from datasets_hub.exporters.columns import ParquetFile, arrow_values, png_images
from datasets_hub.exporters.episodes import REWARD, TERMINATED, TRUNCATED, BuildEpisodes, Episode
from datasets_hub.exporters.stats import RunningStats

OPTIONS = ("fps", "task", "robot_type", "data_file_mb", "video", "video_codec")
CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
TASK_KEY: Key = ("task",)
#: columns LeRobot adds to every frame (written from the episodes, never taken as features)
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")
#: ``info/<name>`` keys that a build loaded from LeRobot holds and a LeRobot reader recreates
REGENERATED_INFO = (*BOOKKEEPING, "next.done", "next.reward", "next_observation_unknown")


@dataclass(frozen=True)
class Feature:
    name: str  #: the LeRobot feature name
    key: Key  #: the build key
    observation: bool  #: read from the episode's observations (else its steps)
    dtype: np.dtype
    shape: tuple[int, ...]  #: per frame, as the build stores it
    image: str | None = None  #: "hwc" / "chw" for image features

    def info(self, video: dict[str, Any] | None = None) -> dict[str, Any]:
        """The feature's entry in ``info.json`` (``video``: the ``info`` of a camera stored as video)."""
        if self.image and video is not None:
            names = ["height", "width", "channels"] if self.image == "hwc" else ["channels", "height", "width"]
            return {"dtype": "video", "shape": list(self.shape), "names": names, "info": video}
        if self.image == "hwc":
            return {"dtype": "image", "shape": list(self.shape), "names": ["height", "width", "channels"]}
        if self.image == "chw":
            return {"dtype": "image", "shape": list(self.shape), "names": ["channels", "height", "width"]}
        return {"dtype": str(self.dtype), "shape": list(self.shape) or [1], "names": None}


@dataclass
class Plan:
    features: list[Feature]
    fps: float
    default_task: str
    robot_type: str
    data_file_bytes: int
    has_timestamp: bool
    has_task_key: bool
    video_codec: str | None = None  #: cameras as MP4 with this PyAV encoder (None: PNG images)
    notes: list[str] = field(default_factory=list)


def _image_layout(dtype: np.dtype, shape: tuple[int, ...]) -> str | None:
    if dtype != np.uint8 or len(shape) != 3:
        return None
    if shape[-1] == 3:
        return "hwc"
    return "chw" if shape[0] == 3 else None


def _check_name_part(key: Key) -> None:
    for part in key:
        if not part or "." in part:
            raise InvalidParameter(
                f"key {'/'.join(key)!r}: LeRobot feature names join key levels with '.', so the level {part!r} "
                "would read back as another key; rename it (load(..., preprocess=fn)) before exporting to LeRobot"
            )


def plan(episodes: BuildEpisodes, out: Path, options: dict[str, Any]) -> Plan:
    """Check the build and the options (see the module docstring); nothing is written."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InvalidParameter(f"format='lerobot' has no option {unknown[0]!r}; its options are {', '.join(OPTIONS)}")
    try:
        import pyarrow  # noqa: F401 - imported to check it is installed, before anything is written
    except ImportError as exc:
        raise MissingDependency("exporting to LeRobot needs pyarrow: pip install pyarrow") from exc
    notes = episodes.build.manifest.get("notes") or {}
    fps = options.get("fps", notes.get("fps", 10))
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
        raise InvalidParameter(f"fps must be a positive number of frames per second, got {fps!r}")
    task = options.get("task", episodes.build.manifest.get("id") or "")
    if not isinstance(task, str):
        raise InvalidParameter(f"task must be a string (the text of every frame's task), got {task!r}")
    robot_type = options.get("robot_type", notes.get("robot_type") or "unknown")
    if not isinstance(robot_type, str):
        raise InvalidParameter(f"robot_type must be a string, got {robot_type!r}")
    mb = options.get("data_file_mb", 100)
    if isinstance(mb, bool) or not isinstance(mb, (int, float)) or not mb > 0:
        raise InvalidParameter(f"data_file_mb must be a positive number of megabytes, got {mb!r}")

    per_step_next = sorted(episodes.next_per_step)
    if per_step_next:
        shown = "/".join(per_step_next[0])
        raise InvalidParameter(
            f"the build stores the next values of {shown!r} per step (they are not the following observations); "
            "a LeRobot frame holds one observation per time step and cannot hold them. Export with "
            "format='hf' (it writes both columns)"
        )
    features: list[Feature] = []
    for key in episodes.observation_keys:
        _check_name_part(key)
        column = episodes.column(key)
        if key == ("observation",) and len(episodes.observation_keys) > 1:
            name = "observation.state"  # a feature cannot be both a value and the prefix of others
        else:
            name = ".".join(key) if key[0] == "observation" else "observation." + ".".join(key)
        image = _image_layout(column.dtype, column.shape)
        features.append(Feature(name, key, True, column.dtype, column.shape, image))
    has_timestamp = has_task_key = False
    for key in episodes.step_keys:
        column = episodes.column(key)
        if key in (TERMINATED, TRUNCATED):
            continue
        if key == TASK_KEY:
            if column.dtype != np.uint8 or len(column.shape) != 1:
                raise InvalidParameter(
                    f"the build's 'task' key is {column.dtype} {list(column.shape)}, not UTF-8 text (uint8 [W]); "
                    "rename it before exporting to LeRobot"
                )
            has_task_key = True
            continue
        if key[0] == "info" and len(key) == 2 and key[1] in REGENERATED_INFO:
            if key[1] == "timestamp":
                has_timestamp = column.shape in ((), (1,)) and column.dtype.kind == "f"
            continue
        if key == REWARD:
            features.append(Feature("next.reward", key, False, column.dtype, column.shape))
            continue
        if key == ("action",):
            features.append(Feature("action", key, False, column.dtype, column.shape))
            continue
        if key[0] == "next" and key[1:] in episodes.observation_keys:
            continue  # per-step next observations: refused above
        if key[0] == "info" and len(key) > 1:
            name = ".".join(key[1:])
        else:
            _check_name_part(key)
            name = ".".join(key)
        if name in (*BOOKKEEPING, "next.done", "action", "observation") or name.startswith("observation."):
            raise InvalidParameter(
                f"key {'/'.join(key)!r} would be the LeRobot feature {name!r}, which LeRobot reserves; rename it "
                "before exporting"
            )
        features.append(
            Feature(name, key, False, column.dtype, column.shape, _image_layout(column.dtype, column.shape))
        )
    names = [f.name for f in features]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidParameter(f"two keys of the build would both be the LeRobot feature {twice[0]!r}; rename one")
    video = options.get("video", False)
    if not isinstance(video, bool):
        raise InvalidParameter(f"video must be true (cameras as MP4) or false (PNG images), got {video!r}")
    video_codec = None
    if video:
        from datasets_hub.exporters.lerobot_video import check_codec

        video_codec = options.get("video_codec", "libsvtav1")
        check_codec(video_codec)
        for f in features:
            height, width = f.shape[:2] if f.image == "hwc" else f.shape[1:] if f.image == "chw" else (0, 0)
            if f.observation and f.image and (height % 2 or width % 2):
                raise InvalidParameter(
                    f"{f.name} is {height}x{width}: video frames (yuv420p) need an even height and width; "
                    "export without video=True (PNG images), or resize the camera"
                )
    elif "video_codec" in options:
        raise InvalidParameter("video_codec applies with video=True only")
    return Plan(
        features=features,
        fps=float(fps),
        default_task=task,
        robot_type=robot_type,
        data_file_bytes=int(mb * (1 << 20)),
        has_timestamp=has_timestamp,
        has_task_key=has_task_key,
        video_codec=video_codec,
    )


def _frames(plan: Plan, episode: Episode, first_index: int, task_index: dict[str, int]) -> Any:
    import pyarrow as pa

    n = episode.length
    columns: dict[str, Any] = {}
    for feature in plan.features:
        source = episode.observations if feature.observation else episode.steps
        values = source[feature.key][:n]
        if feature.image and plan.video_codec and feature.observation:
            continue  # in the camera's MP4 file
        if feature.image:
            columns[feature.name] = png_images(values if feature.image == "hwc" else values.transpose(0, 2, 3, 1))
        else:
            columns[feature.name] = arrow_values(values)
    columns["next.done"] = pa.array(episode.steps[TERMINATED].reshape(n).astype(bool))
    if plan.has_timestamp and not plan.video_codec:  # video frames sit at t / fps
        timestamps = episode.steps[("info", "timestamp")].reshape(n).astype(np.float32)
    else:
        timestamps = (np.arange(n) / plan.fps).astype(np.float32)
    if plan.has_task_key:  # UTF-8 bytes zero-padded to a fixed width, as loaders store text
        # each distinct row decoded once (an episode has one task, or a few): no Python work per frame
        rows, first, which = np.unique(episode.steps[TASK_KEY], axis=0, return_index=True, return_inverse=True)
        order = np.argsort(first)  # the tasks in the order the episode first shows them
        tasks = [bytes(rows[i]).rstrip(b"\0").decode("utf-8") for i in order]
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        frame_task = rank[which.reshape(n)]  # frame -> position in tasks
    else:
        tasks, frame_task = [plan.default_task], np.zeros(n, dtype=np.int64)
    for text in tasks:
        task_index.setdefault(text, len(task_index))
    columns["timestamp"] = pa.array(timestamps)
    columns["frame_index"] = pa.array(np.arange(n, dtype=np.int64))
    columns["episode_index"] = pa.array(np.full(n, episode.position, dtype=np.int64))
    columns["index"] = pa.array(np.arange(first_index, first_index + n, dtype=np.int64))
    columns["task_index"] = pa.array(np.array([task_index[t] for t in tasks], dtype=np.int64)[frame_task])
    return pa.table(columns), list(dict.fromkeys(tasks))


def _image_stats_values(values: np.ndarray, layout: str) -> np.ndarray:
    """Images as LeRobot keeps their statistics: per channel, scaled to [0, 1], ``[T, 3, 1, 1]``-shaped."""
    chw = values if layout == "chw" else values.transpose(0, 3, 1, 2)
    return chw.reshape(len(chw), chw.shape[1], -1).astype(np.float64) / 255.0


def _features_info(plan: Plan) -> dict[str, Any]:
    info = {f.name: f.info(_video_info(plan, f)) for f in plan.features}
    info["next.done"] = {"dtype": "bool", "shape": [1], "names": None}
    for name, dtype in (("timestamp", "float32"), *((n, "int64") for n in BOOKKEEPING[1:])):
        info[name] = {"dtype": dtype, "shape": [1], "names": None}
    return info


def _video_info(plan: Plan, feature: Feature) -> dict[str, Any] | None:
    """The ``info`` of a camera written as video (None for every other feature)."""
    if not (plan.video_codec and feature.image and feature.observation):
        return None
    from datasets_hub.exporters.lerobot_video import CODEC_NAMES

    height, width = feature.shape[:2] if feature.image == "hwc" else feature.shape[1:]
    return {
        "video.height": height,
        "video.width": width,
        "video.codec": CODEC_NAMES[plan.video_codec],
        "video.pix_fmt": "yuv420p",
        "video.is_depth_map": False,
        "video.fps": plan.fps,
        "video.channels": 3,
        "has_audio": False,
    }


def _tasks_table(task_index: dict[str, int]) -> Any:
    """``meta/tasks.parquet`` as LeRobot writes it with pandas: the task text is the frame's index."""
    import pyarrow as pa

    texts = sorted(task_index, key=task_index.__getitem__)
    table = pa.table(
        {"task_index": pa.array([task_index[t] for t in texts], type=pa.int64()), "task": pa.array(texts, pa.string())}
    )
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64"},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object"},
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def write(plan: Plan, episodes: BuildEpisodes, staging: Path, progress: Any) -> None:
    """Write the dataset into ``staging``, one episode in memory at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    task_index: dict[str, int] = {}
    totals = {f.name: RunningStats() for f in plan.features}
    rows: list[dict[str, Any]] = []
    writer: Any = None
    file_number, file_bytes, first_index = 0, 0, 0
    cameras = [f for f in plan.features if _video_info(plan, f) is not None]
    videos = None
    if cameras and plan.video_codec:
        from datasets_hub.exporters.lerobot_video import VIDEO_PATH, VideoFiles

        videos = VideoFiles(staging, [f.name for f in cameras], plan.fps, plan.video_codec)
    try:
        for episode in episodes:
            table, tasks = _frames(plan, episode, first_index, task_index)
            if writer is not None and file_bytes >= plan.data_file_bytes:
                writer.close()
                writer, file_number, file_bytes = None, file_number + 1, 0
            chunk_index, file_index = divmod(file_number, CHUNKS_SIZE)
            if writer is None:
                path = staging / DATA_PATH.format(chunk_index=chunk_index, file_index=file_index)
                path.parent.mkdir(parents=True, exist_ok=True)
                writer = ParquetFile(path, table.schema)
                if videos is not None:
                    videos.start_file(chunk_index, file_index)
            writer.write(table)
            file_bytes += table.nbytes
            row: dict[str, Any] = {
                "episode_index": episode.position,
                "tasks": tasks,
                "length": episode.length,
                "data/chunk_index": chunk_index,
                "data/file_index": file_index,
                "dataset_from_index": first_index,
                "dataset_to_index": first_index + episode.length,
                "meta/episodes/chunk_index": 0,
                "meta/episodes/file_index": 0,
            }
            for camera in cameras:
                if videos is None:
                    break
                frames = episode.observations[camera.key][: episode.length]
                span = videos.add(camera.name, frames if camera.image == "hwc" else frames.transpose(0, 2, 3, 1))
                row[f"videos/{camera.name}/chunk_index"] = chunk_index
                row[f"videos/{camera.name}/file_index"] = file_index
                row[f"videos/{camera.name}/from_timestamp"], row[f"videos/{camera.name}/to_timestamp"] = span
            for feature in plan.features:
                source = episode.observations if feature.observation else episode.steps
                values = source[feature.key][: episode.length]
                if feature.image:
                    values = _image_stats_values(values, feature.image)
                stats = RunningStats()
                stats.add(values, per_channel=feature.image is not None)
                totals[feature.name].merge(stats)
                for name, value in stats.as_lists().items():
                    row[f"stats/{feature.name}/{name}"] = value
            rows.append(row)
            first_index += episode.length
            progress.update(episode.length)
    finally:
        if writer is not None:
            writer.close()
        if videos is not None:
            videos.close()
    (staging / "meta" / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), str(staging / EPISODES_PATH))
    pq.write_table(_tasks_table(task_index), str(staging / "meta" / "tasks.parquet"))
    stats_json = {name: stats.as_lists() for name, stats in totals.items() if stats.count}
    (staging / "meta" / "stats.json").write_text(json.dumps(stats_json, indent=1))
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": plan.robot_type,
        "total_episodes": len(episodes),
        "total_frames": episodes.transitions,
        "total_tasks": len(task_index),
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": plan.data_file_bytes / (1 << 20),
        "video_files_size_in_mb": 500,
        "fps": plan.fps if plan.fps != int(plan.fps) else int(plan.fps),
        "splits": {"train": f"0:{len(episodes)}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if videos is not None else None,
        "features": _features_info(plan),
    }
    (staging / "meta" / "info.json").write_text(json.dumps(info, indent=4))
