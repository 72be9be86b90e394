"""LeRobot dataset metadata: versions, path templates, episodes, tasks (the reading half of the
``lerobot`` loader that needs no video library).

Two on-disk versions are read (constants as in LeRobot's ``datasets/utils.py``):

- **v3.0**: ``meta/info.json``, ``meta/tasks.parquet`` (task text as the pandas index, column
  ``task_index``), ``meta/episodes/chunk-*/file-*.parquet`` (one row per episode: ``episode_index``,
  ``tasks``, ``length``, ``data/chunk_index``, ``data/file_index``, ``dataset_from_index``,
  ``dataset_to_index``, and per camera ``videos/<key>/chunk_index``, ``file_index``,
  ``from_timestamp``, ``to_timestamp``), frames in shared ``data/chunk-*/file-*.parquet`` files,
  videos in shared ``videos/<key>/chunk-*/file-*.mp4`` files (an episode is the span
  ``[from_timestamp, to_timestamp)`` of its file);
- **v2.1** (and **v2.0**, which differs only in its statistics files, not read here):
  ``meta/info.json``, ``meta/episodes.jsonl`` (``episode_index``, ``tasks``, ``length``),
  ``meta/tasks.jsonl`` (``task_index``, ``task``), one parquet file and one MP4 per episode and
  camera, paths from ``info["data_path"]`` / ``info["video_path"]`` with ``episode_chunk =
  episode_index // chunks_size``.

Statistics files (``meta/stats.json``, ``meta/episodes_stats.jsonl``) are not needed to convert
and are not fetched. Any other ``codebase_version`` is refused naming it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datasets_hub.errors import LoaderError

SUPPORTED_VERSIONS = ("v2.0", "v2.1", "v3.0")
INFO_PATH = "meta/info.json"
V3_TASKS = "meta/tasks.parquet"
V3_EPISODES_DIR = "meta/episodes/"
V21_EPISODES = "meta/episodes.jsonl"
V21_TASKS = "meta/tasks.jsonl"
#: columns that LeRobot adds to every frame; they go under ``info`` (``episode_index`` is the episode id)
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")
TOLERANCE_S = 1e-4  # LeRobotDataset's default tolerance_s


@dataclass
class Video:
    path: str  # path in the repo
    from_timestamp: float = 0.0
    to_timestamp: float | None = None


@dataclass
class Episode:
    index: int
    length: int
    tasks: list[str]
    data_path: str
    from_index: int | None = None  # v3: global frame index range in the data file
    to_index: int | None = None
    videos: dict[str, Video] = field(default_factory=dict)


@dataclass
class Meta:
    """What the loader needs from ``meta/``: info, tasks and the episode list (sorted by index)."""

    info: dict[str, Any]
    version: str
    tasks: dict[int, str]
    episodes: list[Episode]

    @property
    def fps(self) -> float:
        return float(self.info["fps"])

    @property
    def features(self) -> dict[str, Any]:
        return self.info.get("features") or {}

    @property
    def video_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.get("dtype") == "video"]

    @property
    def image_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.get("dtype") == "image"]

    def select(self, episodes: Iterable[int] | None, where: str) -> list[Episode]:
        """The episodes to build, in index order; unknown indices are an error naming them."""
        if episodes is None:
            return list(self.episodes)
        by_index = {e.index: e for e in self.episodes}
        wanted = sorted({int(e) for e in episodes})
        missing = [e for e in wanted if e not in by_index]
        if missing:
            raise LoaderError(
                f"{where}: episodes {missing} are not in the dataset (it has {len(by_index)} episodes, "
                f"indices {min(by_index, default=0)}..{max(by_index, default=-1)})"
            )
        return [by_index[e] for e in wanted]


def read_info(path: Path, where: str) -> dict[str, Any]:
    try:
        info = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LoaderError(f"{where}: cannot read meta/info.json ({exc})") from exc
    if not isinstance(info, dict):
        raise LoaderError(f"{where}: meta/info.json is not a JSON object")
    version = str(info.get("codebase_version", ""))
    if version not in SUPPORTED_VERSIONS:
        raise LoaderError(
            f"{where}: LeRobot codebase_version {version or '(missing)'!r} is not supported; this loader reads "
            f"{', '.join(SUPPORTED_VERSIONS)}. For an older dataset, convert it with LeRobot's own converter "
            "(lerobot.datasets.v30.convert_dataset_v21_to_v30); for a newer one, upgrade datasets_hub or pass "
            "revision= naming a branch or tag of the repo that holds a supported version"
        )
    for key in ("fps", "features", "data_path"):
        if not info.get(key):
            raise LoaderError(f"{where}: meta/info.json has no {key!r}; it is not a LeRobot {version} dataset")
    return info


def is_v3(info: dict[str, Any]) -> bool:
    return str(info.get("codebase_version")) == "v3.0"


def meta_paths(info: dict[str, Any], listed: list[str]) -> list[str]:
    """The metadata files to fetch besides info.json (``listed``: the repo's ``meta/`` files)."""
    if is_v3(info):
        episodes = sorted(p for p in listed if p.startswith(V3_EPISODES_DIR) and p.endswith(".parquet"))
        return [V3_TASKS, *episodes]
    return [V21_TASKS, V21_EPISODES]


def read_meta(info: dict[str, Any], files: dict[str, Path], where: str) -> Meta:
    """``files``: repo path -> local path of the metadata files named by :func:`meta_paths`."""
    version = str(info["codebase_version"])
    if is_v3(info):
        tasks = _tasks_v3(files[V3_TASKS], where)
        episodes = _episodes_v3(info, [files[p] for p in sorted(files) if p.startswith(V3_EPISODES_DIR)], where)
    else:
        tasks = _tasks_v21(files[V21_TASKS], where)
        episodes = _episodes_v21(info, files[V21_EPISODES], where)
    return Meta(info=info, version=version, tasks=tasks, episodes=episodes)


def _jsonl(path: Path, where: str) -> list[dict[str, Any]]:
    out = []
    try:
        for _n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                out.append(json.loads(line))
    except (OSError, ValueError) as exc:
        raise LoaderError(f"{where}: cannot read {Path(path).name} ({exc})") from exc
    return out


def _tasks_v21(path: Path, where: str) -> dict[int, str]:
    try:
        return {int(row["task_index"]): str(row["task"]) for row in _jsonl(path, where)}
    except (KeyError, TypeError, ValueError) as exc:
        raise LoaderError(f"{where}: meta/tasks.jsonl rows need task_index and task ({exc})") from exc


def _tasks_v3(path: Path, where: str) -> dict[int, str]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(str(path))
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
        raise LoaderError(f"{where}: cannot read meta/tasks.parquet ({exc})") from exc
    names = table.column_names
    text = next((c for c in ("task", "__index_level_0__") if c in names), None)
    if text is None:  # pandas wrote the task text as a named index
        pandas_meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}"))
        text = next((c for c in pandas_meta.get("index_columns", []) if isinstance(c, str) and c in names), None)
    if text is None or "task_index" not in names:
        raise LoaderError(f"{where}: meta/tasks.parquet has columns {names}; expected the task text and task_index")
    return {
        int(i): str(t)
        for i, t in zip(table.column("task_index").to_pylist(), table.column(text).to_pylist(), strict=True)
    }


def _chunk(index: int, info: dict[str, Any]) -> int:
    return index // int(info.get("chunks_size") or 1000)


def _episodes_v21(info: dict[str, Any], path: Path, where: str) -> list[Episode]:
    video_path = str(info.get("video_path") or "")  # needed (checked below) only with video features
    video_keys = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    if video_keys and not video_path:
        raise LoaderError(f"{where}: info.json declares video features {video_keys} but no video_path")
    out = []
    for row in _jsonl(path, where):
        try:
            e, length = int(row["episode_index"]), int(row["length"])
        except (KeyError, TypeError, ValueError) as exc:
            raise LoaderError(f"{where}: meta/episodes.jsonl rows need episode_index and length ({exc})") from exc
        chunk = _chunk(e, info)
        videos = {k: Video(video_path.format(episode_chunk=chunk, video_key=k, episode_index=e)) for k in video_keys}
        out.append(
            Episode(
                index=e,
                length=length,
                tasks=[str(t) for t in row.get("tasks") or []],
                data_path=info["data_path"].format(episode_chunk=chunk, episode_index=e),
                videos=videos,
            )
        )
    return sorted(out, key=lambda ep: ep.index)


def _episodes_v3(info: dict[str, Any], paths: list[Path], where: str) -> list[Episode]:
    import pyarrow.parquet as pq

    if not paths:
        raise LoaderError(
            f"{where}: no meta/episodes/chunk-*/file-*.parquet file; the v3.0 episode metadata is missing"
        )
    video_keys = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    video_path = str(info.get("video_path") or "")  # needed (checked below) only with video features
    if video_keys and not video_path:
        raise LoaderError(f"{where}: info.json declares video features {video_keys} but no video_path")
    needed = [
        "episode_index",
        "length",
        "data/chunk_index",
        "data/file_index",
        "dataset_from_index",
        "dataset_to_index",
    ]
    out = []
    for path in paths:
        try:
            table = pq.read_table(str(path))
        except Exception as exc:
            raise LoaderError(f"{where}: cannot read {Path(path).name} of meta/episodes ({exc})") from exc
        names = set(table.column_names)
        for key in video_keys:
            missing = [
                c
                for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
                if f"videos/{key}/{c}" not in names
            ]
            if missing:
                raise LoaderError(
                    f"{where}: camera {key!r} is declared in info.json but meta/episodes has no "
                    f"videos/{key}/{missing[0]} column; the dataset's metadata is incomplete"
                )
        lacking = [c for c in needed if c not in names]
        if lacking:
            raise LoaderError(f"{where}: meta/episodes lacks the columns {lacking}")
        columns = [
            *needed,
            *(c for c in ("tasks",) if c in names),
            *(
                f"videos/{k}/{c}"
                for k in video_keys
                for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
            ),
        ]
        for row in table.select(columns).to_pylist():
            e = int(row["episode_index"])
            videos = {
                k: Video(
                    video_path.format(
                        video_key=k,
                        chunk_index=int(row[f"videos/{k}/chunk_index"]),
                        file_index=int(row[f"videos/{k}/file_index"]),
                    ),
                    float(row[f"videos/{k}/from_timestamp"]),
                    float(row[f"videos/{k}/to_timestamp"]),
                )
                for k in video_keys
            }
            out.append(
                Episode(
                    index=e,
                    length=int(row["length"]),
                    tasks=[str(t) for t in row.get("tasks") or []],
                    data_path=info["data_path"].format(
                        chunk_index=int(row["data/chunk_index"]), file_index=int(row["data/file_index"])
                    ),
                    from_index=int(row["dataset_from_index"]),
                    to_index=int(row["dataset_to_index"]),
                    videos=videos,
                )
            )
    return sorted(out, key=lambda ep: ep.index)
