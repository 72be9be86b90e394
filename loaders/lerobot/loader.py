"""LeRobot datasets (v3.0 and v2.1) as TorchRL Episode Data, with video decoded once into uint8 frames.

This module holds one concept: the ``lerobot`` loader (ids, parameters, and how a LeRobot dataset's
features become a build's keys); metadata, parquet reading, video and windows have modules of their own.

**Ids.** ``lerobot/<org>/<name>`` reads the Hugging Face dataset repo ``<org>/<name>``, listed in
the catalogue or not (any repo in LeRobot format works: ``load("lerobot/<org>/<name>",
revision="v3.0")``). Files come through ``huggingface_hub`` (its cache and resume; ``HF_ENDPOINT``,
``HF_HUB_OFFLINE``, ``HF_TOKEN`` apply).

**What is fetched.** ``meta/info.json`` first, then the task and episode metadata (v3.0:
``meta/tasks.parquet`` and ``meta/episodes/chunk-*/file-*.parquet``, listed under ``meta/``;
v2.1: ``meta/tasks.jsonl``, ``meta/episodes.jsonl``), then only the data and video files that the
selected episodes (parameter ``episodes``, default all) live in. Metadata is read once per process
(offline, from the Hugging Face cache).

**Mapping** (``t`` = row of an episode of ``T`` rows):

================================  ===============================================================
LeRobot feature                   TED key
================================  ===============================================================
``observation.<a>.<b>`` (any)     ``("observation", a, b)`` at t and ``("next", "observation", a, b)``
                                  = row t + 1 (stored once, T + 1 rows). The last step's next value
                                  is unknown upstream: NaN (0 for integers and images) there, and
                                  ``("info", "next_observation_unknown")`` is True on that row
``observation.images.<cam>``      uint8 frames ``[H, W, 3]`` (or ``[3, H, W]``, see
(video or image)                  ``channels_first``), decoded once at build time
``action``                        ``action``
``next.reward``                   ``("next", "reward")`` ``[T, 1]``; absent: ``reward`` (below), else
                                  0, noted on the card
``next.done``                     ``("next", "terminated")`` on the last row when set; an episode
                                  whose last row is not done (or without ``next.done``) ends
                                  ``("next", "truncated")``: a recorded demo stops, it does not
                                  terminate. The raw flag is kept as ``("info", "next.done")``
``reward``, ``is_terminal``       ports of RLDS datasets (DROID) carry RLDS's step fields instead:
(without ``next.*``)              RLDS's reward of step t is the reward after action t, so
                                  ``reward`` becomes ``("next", "reward")`` and ``is_terminal`` plays
                                  ``next.done``'s part; both stay under ``("info", name)`` too and the
                                  card names the source
task (via ``task_index``)         ``task``: the task text as UTF-8 bytes, uint8 ``[W]`` zero-padded
                                  (read with :func:`decode_text`); W on the card
other ``"string"`` features       the same text form, ``text_width`` bytes (default 512), under the
(e.g. DROID's instructions)       feature's key; a longer text is an error naming the fix
``timestamp``, ``frame_index``,   ``("info", name)``
``index``, ``task_index``
``episode_index``                 ``episode``
anything else                     ``("info", name)``
================================  ===============================================================

A feature whose key would nest under another feature's leaf keeps the rest of its name in one
component: LeRobot's DROID port has both ``observation.state`` and ``observation.state.joint_position``,
which become ``("observation", "state")`` and ``("observation", "state.joint_position")``.

Video frames are matched to rows by timestamp with LeRobot's rule and tolerance (see
:mod:`.video`); a row without a frame is an error naming episode and timestamp.

**Parameters**: ``repo`` (default: the id's ``<org>/<name>``), ``revision``, ``root`` (a local
folder in LeRobot format, as ``LeRobotDataset(repo_id, root=...)`` takes; read in place, no Hub), ``episodes`` (list of
episode indices), ``image_size`` (``[h, w]``: resize every camera once, at build time),
``channels_first`` (bool; default: the order the feature's ``names`` declare, HWC for LeRobot's
recorders), ``tolerance_s`` (default ``1e-4``), ``text_width`` (bytes per string-feature value,
default 512), ``num_workers`` (decoding processes; not part of
the fingerprint: the frames do not depend on it; default 1 for fewer than 1000 frames to decode,
else ``min(4, cpu_count)``). ``fps``, robot type, features and tasks go on the card.

**Bytes.** Decoded frames are what make sampling fast, and they are large: ``H * W * 3`` bytes per
frame per camera (ALOHA's 480x640: 0.92 MB; an MP4 holds the same frame in a few KB).
``image_size=`` is the lever (see ``docs/datasets/lerobot.md``).
"""

from __future__ import annotations

import os
import tempfile
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np

from datasets_hub.errors import DownloadError, InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext, Resource
from datasets_hub.loaders.formats.text import decode_text, encode_text
from datasets_hub.loaders.lerobot import meta as lm
from datasets_hub.loaders.lerobot.data import EpisodeReader, column, keys_of, text_column
from datasets_hub.loaders.lerobot.video import DecodePool, DecodeTask, output_shape
from datasets_hub.process_locks import ProcessLock

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    from tensordict import TensorDictBase

__all__ = ["LeRobotLoader", "decode_text"]

PARAMS = (
    "channels_first",
    "episodes",
    "image_size",
    "num_workers",
    "repo",
    "revision",
    "root",
    "text_width",
    "tolerance_s",
)
DEFAULT_TEXT_WIDTH = 512
TEXT_DTYPES = ("string", "str", "large_string")
UNKNOWN_KEY = ("info", "next_observation_unknown")
# (LeRobot's own name, the RLDS step field a port of an RLDS dataset carries instead)
REWARD_FEATURES = ("next.reward", "reward")
DONE_FEATURES = ("next.done", "is_terminal")
_HF_CO = "https://huggingface.co/datasets/"
_metas: dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, Path]]] = {}
_metas_lock = ProcessLock()

# well-known repos (facts from their Hub dataset cards); any other repo in the format loads by id too
_KNOWN = {
    "lerobot/pusht": (
        "Push-T (Diffusion Policy): 206 episodes, 25,650 frames at 10 fps, one 96x96 camera, 2-D state and action",
        "MIT",
    ),
    "lerobot/pusht_image": ("Push-T with its 96x96 frames stored as images in the parquet files", "MIT"),
    "lerobot/aloha_sim_insertion_human": (
        (
            "ALOHA simulated peg insertion, human demonstrations: 50 episodes at "
            "50 fps, one 480x640 camera, 14-D state and action"
        ),
        "MIT",
    ),
    "lerobot/aloha_sim_insertion_scripted": (
        "ALOHA simulated peg insertion, scripted policy: 50 episodes at 50 fps, one 480x640 camera",
        "MIT",
    ),
    "lerobot/aloha_sim_transfer_cube_human": (
        "ALOHA simulated cube transfer, human demonstrations: 50 episodes at 50 fps, one 480x640 camera",
        "MIT",
    ),
    "lerobot/aloha_sim_transfer_cube_scripted": (
        "ALOHA simulated cube transfer, scripted policy: 50 episodes at 50 fps, one 480x640 camera",
        "MIT",
    ),
    "nvidia/LIBERO_LeRobot_v3": (
        "LIBERO task suites (lifelong manipulation, language-conditioned) as a LeRobot v3.0 dataset",
        "openmdw-1.0",
    ),
    "HuggingFaceVLA/libero": (
        (
            "LIBERO (spatial, object, goal, 10) as LeRobot v3.0: 1,693 episodes, 273,465 frames, 40 tasks at "
            "10 fps; two 256x256 cameras stored as images (image, image2), 8-D state, 7-D action"
        ),
        "apache-2.0",
    ),
    "lerobot/droid_1.0.1": (
        (
            "DROID 1.0.1 as LeRobot v3.0: 95,617 episodes, 27,618,651 frames at 15 fps; three 180x320 "
            "videos, joint/cartesian/gripper state and commands, three language instructions, RLDS "
            "flags, reward and per-episode metadata as features"
        ),
        "apache-2.0",
    ),
    **{
        f"ember-lab-berkeley/robocasa365-{part}": (
            (
                f"RoboCasa365 {what} as LeRobot v3.0 (PandaOmron, 20 fps): three 256x256 videos, 16-D state, "
                "12-D action, next.reward / next.done"
            ),
            "MIT",
        )
        for part, what in (
            ("target-atomic", "target atomic-task demonstrations"),
            ("target-composite-seen", "target composite-task demonstrations (seen tasks)"),
            ("target-composite-unseen", "target composite-task demonstrations (unseen tasks)"),
            ("pretrain-mg", "pretraining demonstrations generated with MimicGen"),
        )
    },
}


class LeRobotLoader(Loader):
    """Loader for LeRobot-format Hub repos (see the module docstring for the exact semantics)."""

    name = "lerobot"
    requires = ("pyarrow", "av", "huggingface_hub")
    install_hint = "pip install 'datasets-hub[lerobot]'  (pyarrow, av)"
    format_version = 2  # 2: string features kept as text (1 skipped them)
    resumable = True  # episodes in ctx.done_episodes are skipped: their rows and videos are not decoded

    # -- ids ---------------------------------------------------------------------------------------
    def catalogue(self) -> dict[str, dict[str, Any]]:
        return {
            f"lerobot/{repo}": {"description": text, "license": license_, "homepage": _HF_CO + repo}
            for repo, (text, license_) in _KNOWN.items()
        }

    def entry_for(self, dataset_id: str) -> dict[str, Any] | None:
        parts = dataset_id.split("/")
        if len(parts) != 3 or not all(parts) or any(p in (".", "..") for p in parts):
            return None
        return {
            "description": f"the Hugging Face dataset {parts[1]}/{parts[2]} read as a LeRobot dataset",
            "homepage": _HF_CO + f"{parts[1]}/{parts[2]}",
        }

    # -- parameters --------------------------------------------------------------------------------
    def check_params(self, spec: DatasetSpec) -> None:
        p = spec.params
        self.reject_unknown_params(spec, PARAMS)
        if "num_workers" in p:  # how to decode, not what: kept out of the fingerprint
            workers = p.pop("num_workers")
            if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 0):
                raise InvalidParameter(f"{spec.id}: num_workers must be a non-negative int, got {workers!r}")
            spec.metadata["num_workers"] = workers
        _repo(spec)
        if p.get("revision") is not None and (not isinstance(p["revision"], str) or not p["revision"]):
            raise InvalidParameter(f"{spec.id}: revision must be a non-empty string, got {p['revision']!r}")
        episodes = p.get("episodes")
        if episodes is not None:
            if (
                not isinstance(episodes, list)
                or not episodes
                or not all(isinstance(e, int) and not isinstance(e, bool) and e >= 0 for e in episodes)
            ):
                raise InvalidParameter(
                    f"{spec.id}: episodes must be a non-empty list of episode indices, e.g. [0, 1, 2], got {episodes!r}"
                )
            if len(set(episodes)) != len(episodes):
                raise InvalidParameter(f"{spec.id}: episodes lists an index twice: {episodes!r}")
        size = p.get("image_size")
        if size is not None and (
            not isinstance(size, (list, tuple))
            or len(size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size)
        ):
            raise InvalidParameter(f"{spec.id}: image_size must be [height, width] in pixels, got {size!r}")
        if size is not None and any(v % 2 for v in size):
            raise InvalidParameter(
                f"{spec.id}: image_size {list(size)} must have even height and width "
                "(frames are resized from YUV 4:2:0)"
            )
        root = p.get("root")
        if root is not None:
            if not isinstance(root, str) or not root:
                raise InvalidParameter(f"{spec.id}: root must be the path of a local LeRobot dataset, got {root!r}")
            if not (Path(root).expanduser() / lm.INFO_PATH).is_file():
                raise InvalidParameter(
                    f"{spec.id}: root={root!r} has no meta/info.json; point it at the dataset's top folder "
                    "(the one holding meta/, data/ and videos/)"
                )
            if p.get("revision") is not None:
                raise InvalidParameter(f"{spec.id}: revision names a Hub revision; it cannot go with a local root")
        if p.get("channels_first") is not None and not isinstance(p["channels_first"], bool):
            raise InvalidParameter(f"{spec.id}: channels_first must be true or false, got {p['channels_first']!r}")
        tol = p.get("tolerance_s")
        if tol is not None and (not isinstance(tol, (int, float)) or isinstance(tol, bool) or not tol > 0):
            raise InvalidParameter(f"{spec.id}: tolerance_s must be a positive number of seconds, got {tol!r}")
        width = p.get("text_width")
        if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width < 1):
            raise InvalidParameter(
                f"{spec.id}: text_width must be a positive int (bytes per text value), got {width!r}"
            )

    def frame_bytes(self, spec: DatasetSpec) -> int | None:
        """Decoded bytes of every camera's frames (T + 1 rows per selected episode), from the metadata."""
        self.check_params(spec)
        info, local = _metadata(spec)
        meta = lm.read_meta(info, local, spec.id)
        rows = sum(e.length + 1 for e in meta.select(spec.params.get("episodes"), spec.id))
        size = spec.params.get("image_size")
        total = 0
        for key in meta.video_keys + meta.image_keys:
            shape = [int(v) for v in meta.features[key].get("shape") or []]
            if len(shape) != 3:
                return None  # the build refuses such a camera anyway
            # stored as 3-channel uint8 (see lerobot_video.output_shape): height x width are the two largest dims
            pixels = int(size[0]) * int(size[1]) if size else int(np.prod(sorted(shape)[1:]))
            total += rows * pixels * 3
        return total

    # -- what to fetch -----------------------------------------------------------------------------
    def resources(self, spec: DatasetSpec) -> list[Resource]:
        self.check_params(spec)
        source = _Source.of(spec)
        info, local = _metadata(spec)
        paths = [lm.INFO_PATH, *local]
        meta = lm.read_meta(info, local, spec.id)
        seen = set(paths)
        for episode in meta.select(spec.params.get("episodes"), spec.id):
            for path in (episode.data_path, *(v.path for v in episode.videos.values())):
                if path not in seen:
                    seen.add(path)
                    paths.append(path)
        return [source.resource(path) for path in paths]

    # -- conversion --------------------------------------------------------------------------------
    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDictBase]:
        self.check_params(spec)
        repo, revision = _repo(spec), spec.params.get("revision")
        prefix = f"{repo}@{revision}/" if revision else f"{repo}/"
        local = {name[len(prefix) :]: Path(path) for name, path in files.items() if name.startswith(prefix)}
        if lm.INFO_PATH not in local:
            raise LoaderError(f"{spec.id}: meta/info.json is not among the fetched files")
        info = lm.read_info(local[lm.INFO_PATH], spec.id)
        meta = lm.read_meta(info, {p: f for p, f in local.items() if p.startswith("meta/")}, spec.id)
        converter = _Converter(spec, ctx, meta, local)
        yield from converter.run()


def _repo(spec: DatasetSpec) -> str:
    repo = spec.params.get("repo") or spec.name
    if not isinstance(repo, str) or repo.count("/") != 1 or not all(repo.split("/")):
        raise InvalidParameter(
            f"{spec.id}: the repo must look like '<org>/<name>' (ids are lerobot/<org>/<name>), got {repo!r}"
        )
    return repo


class _Source:
    """Where the files of a spec come from: the Hub (``repo``, ``revision``) or a local ``root``."""

    def __init__(self, repo: str, revision: str | None, root: Path | None) -> None:
        self.repo, self.revision, self.root = repo, revision, root

    @classmethod
    def of(cls, spec: DatasetSpec) -> _Source:
        root = spec.params.get("root")
        return cls(_repo(spec), spec.params.get("revision"), Path(root).expanduser().resolve() if root else None)

    def resource(self, path: str) -> Resource:
        """The resource of ``path``; its name is ``<repo>[@<revision>]/<path>`` either way."""
        name = f"{self.repo}@{self.revision}/{path}" if self.revision else f"{self.repo}/{path}"
        if self.root is not None:
            local = self.root / path
            if not local.is_file():
                raise LoaderError(f"{self.repo}: {path} is not in the local dataset {self.root}")
            # read where it is, never copied into the cache; its bytes (sha256, remembered per size, inode and
            # mtime) enter the fingerprint: a file rewritten with other bytes is another build
            return Resource(name=name, urls=(local.as_uri(),), in_place=True)
        url = f"hf://datasets/{self.repo}/{quote(path, safe='/()+,=-_.~')}"
        return Resource(name=name, urls=(url + (f"@{self.revision}" if self.revision else ""),))

    def local(self, path: str) -> Path:
        """A readable local copy of ``path`` (the Hugging Face cache for Hub files)."""
        if self.root is not None:
            return self.root / path
        from datasets_hub.sources import hf_download

        resource = self.resource(path)
        return hf_download(resource.urls[0], resource_name=resource.name)

    def list_meta(self) -> list[str]:
        if self.root is not None:
            return sorted(p.relative_to(self.root).as_posix() for p in (self.root / "meta").rglob("*") if p.is_file())
        from datasets_hub.sources import hf_list_files

        return hf_list_files(self.repo, revision=self.revision, prefix="meta/")


def _metadata(spec: DatasetSpec) -> tuple[dict[str, Any], dict[str, Path]]:
    """``(info, {metadata path: local copy})`` of the spec's repo (or root), fetched once per process
    (``resources()`` runs on every ``load``: a cached build must open without a request per file)."""
    from datasets_hub.sources import hf_endpoint, offline

    source = _Source.of(spec)
    key = (hf_endpoint(), source.repo, source.revision, str(source.root), offline())
    with _metas_lock:
        if key not in _metas or source.root is not None:  # a local root is re-read: it may change
            try:
                info = lm.read_info(source.local(lm.INFO_PATH), spec.id)
                listed = source.list_meta() if lm.is_v3(info) else []
                local = {p: source.local(p) for p in lm.meta_paths(info, listed)}
            except DownloadError as exc:
                raise DownloadError(f"{spec.id}: cannot read the LeRobot metadata of {source.repo}: {exc}") from exc
            _metas[key] = (info, local)
        info, local = _metas[key]
        return info, dict(local)


# -- conversion ------------------------------------------------------------------------------------
class _Converter:
    """Episodes in index order -> one TED chunk each; video decoding runs ahead in a pool."""

    def __init__(self, spec: DatasetSpec, ctx: LoaderContext, meta: lm.Meta, local: Mapping[str, Path]) -> None:
        self.spec, self.ctx, self.meta, self.local = spec, ctx, meta, local
        p = spec.params
        self.image_size = tuple(p["image_size"]) if p.get("image_size") else None
        self.tolerance = float(p.get("tolerance_s") or lm.TOLERANCE_S)
        self.selected = meta.select(p.get("episodes"), spec.id)
        self.features = meta.features
        self.keys = keys_of(list(self.features))
        self.feature_text_width = int(p.get("text_width") or DEFAULT_TEXT_WIDTH)
        self.cameras = meta.video_keys + meta.image_keys
        self.layouts = {k: self._frame_layout(k) for k in self.cameras}
        self.frame_shapes = {k: shape for k, (shape, _) in self.layouts.items()}
        texts = list(meta.tasks.values()) + [t for e in self.selected for t in e.tasks]
        self.text_width = max([1, *(len(t.encode("utf-8")) for t in texts)])
        workers = spec.metadata.get("num_workers")
        frames = sum(e.length for e in self.selected) * len(meta.video_keys)
        self.num_workers = (
            int(workers) if workers is not None else (1 if frames < 1000 else min(4, os.cpu_count() or 1))
        )
        self.reader = EpisodeReader(spec.id, meta, local, self.selected)
        # counted over every selected episode (not those converted now): a resumed build notes what a whole one does
        self.missing_reward = 0 if self._first_feature(REWARD_FEATURES) else sum(e.length for e in self.selected)

    def _frame_layout(self, key: str) -> tuple[tuple[int, ...], bool]:
        """The stored per-frame shape of camera ``key`` and whether it is channels-first."""
        feature = self.features[key]
        shape = [int(v) for v in feature.get("shape") or []]
        names = [str(n).lower() for n in (feature.get("names") or [])] if isinstance(feature.get("names"), list) else []
        if len(shape) != 3:
            raise LoaderError(f"{self.spec.id}: camera {key!r} has shape {shape}; expected [height, width, channels]")
        source_cf = bool(names) and names[0] in ("channels", "channel", "c", "rgb")
        height, width = (shape[1], shape[2]) if source_cf else (shape[0], shape[1])
        asked = self.spec.params.get("channels_first")
        channels_first = source_cf if asked is None else bool(asked)
        return output_shape(height, width, self.image_size, channels_first), channels_first

    def run(self) -> Iterator[TensorDictBase]:
        pool = DecodePool(self.num_workers if self.meta.video_keys else 1)
        scratch = tempfile.TemporaryDirectory(prefix="datasets_hub-lerobot-")
        pending: deque[tuple[lm.Episode, Any, dict[str, Any]]] = deque()
        # a resumed build (datasets_hub.build.resume) already holds some episodes: never decode them again
        queue = (e for e in self.selected if e.index not in self.ctx.done_episodes)
        ahead = max(1, pool.num_workers)
        try:
            while True:
                while len(pending) < ahead:
                    episode = next(queue, None)
                    if episode is None:
                        break
                    rows = self.reader.rows(episode)
                    pending.append((episode, rows, self._submit(pool, episode, rows, Path(scratch.name))))
                if not pending:
                    break
                episode, rows, handles = pending.popleft()
                frames = {}
                for key, (handle, out) in handles.items():
                    pool.result(handle)
                    frames[key] = out
                chunk = self._chunk(episode, rows, frames)
                self.ctx.progress(episode.length)
                yield chunk
                for out in frames.values():
                    Path(out).unlink(missing_ok=True)  # the chunk's mapping keeps the pages while it lives
        finally:
            pool.close()
            scratch.cleanup()
        self._write_notes()

    def _submit(self, pool: DecodePool, episode: lm.Episode, rows: Any, scratch: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        timestamps = tuple(float(t) for t in column(rows, "timestamp", episode.length))
        for key in self.meta.video_keys:
            video = episode.videos[key]
            if video.path not in self.local:
                raise LoaderError(
                    f"{self.spec.id}: episode {episode.index}, camera {key!r}: {video.path} was not fetched"
                )
            shape = self.frame_shapes[key]
            target = scratch / f"{episode.index}-{key}.u8"
            with open(target, "wb") as fh:
                fh.truncate((episode.length + 1) * int(np.prod(shape)))
            task = DecodeTask(
                where=f"{self.spec.id}: episode {episode.index}, camera {key!r}",
                video=str(self.local[video.path]),
                label=video.path,
                from_timestamp=video.from_timestamp,
                timestamps=timestamps,
                out=str(target),
                frame_shape=shape,
                image_size=self.image_size,
                channels_first=self.layouts[key][1],
                tolerance_s=self.tolerance,
            )
            out[key] = (pool.submit(task), str(target))
        return out

    def _chunk(self, episode: lm.Episode, rows: Any, frames: Mapping[str, str]) -> TensorDictBase:
        import torch
        from tensordict import TensorDict

        n = episode.length
        td = TensorDict({}, batch_size=[n])
        for name, feature in self.features.items():
            if name in lm.BOOKKEEPING or name in ("next.reward", "next.done"):
                continue
            key = self.keys[name]
            if str(feature.get("dtype")) in TEXT_DTYPES:
                td.set(key, torch.from_numpy(self._text(rows, name, episode)))
                continue
            if name in frames:
                mm = np.memmap(frames[name], dtype=np.uint8, mode="r+", shape=(n + 1, *self.frame_shapes[name]))
                values = torch.from_numpy(mm)
                td.set(key, values[:-1])
                td.set(("next", *key), values[1:])
                continue
            if feature.get("dtype") == "image":
                values = torch.from_numpy(
                    self.reader.images(rows, name, episode.index, self.image_size, *self.layouts[name])
                )
            else:
                values = torch.from_numpy(column(rows, name, n, shape=feature.get("shape")))
            if key[0] == "observation":
                fill = (
                    torch.full((1, *values.shape[1:]), float("nan"), dtype=values.dtype)
                    if values.is_floating_point()
                    else torch.zeros((1, *values.shape[1:]), dtype=values.dtype)
                )
                td.set(key, values)
                td.set(("next", *key), torch.cat([values[1:], fill]))
            else:
                td.set(key, values)
        reward_feature = self._first_feature(REWARD_FEATURES)
        if reward_feature is not None:
            td.set(("next", "reward"), torch.from_numpy(column(rows, reward_feature, n)).reshape(n, 1))
        else:
            td.set(("next", "reward"), torch.zeros(n, 1, dtype=torch.float32))
        done = torch.zeros(n, 1, dtype=torch.bool)
        done_feature = self._first_feature(DONE_FEATURES)
        if done_feature is not None:
            raw = torch.from_numpy(column(rows, done_feature, n).astype(bool)).reshape(n)
            td.set(("info", done_feature), raw)
            done[-1, 0] = bool(raw[-1])
        truncated = torch.zeros(n, 1, dtype=torch.bool)
        truncated[-1, 0] = not bool(done[-1, 0])
        td.set(("next", "terminated"), done)
        td.set(("next", "truncated"), truncated)
        unknown = torch.zeros(n, dtype=torch.bool)
        unknown[-1] = True
        td.set(UNKNOWN_KEY, unknown)
        for name in ("timestamp", "frame_index", "index", "task_index"):
            if name in rows.column_names:
                td.set(("info", name), torch.from_numpy(column(rows, name, n)))
        td.set("episode", torch.full((n,), episode.index, dtype=torch.int64))
        td.set("task", torch.from_numpy(encode_text(self._tasks(episode, rows), self.text_width, ("task",))))
        return td

    def _first_feature(self, names: tuple[str, ...]) -> str | None:
        """The first of ``names`` (LeRobot's own name, then the RLDS port's) that the dataset has."""
        return next((name for name in names if name in self.features), None)

    def _text(self, rows: Any, name: str, episode: lm.Episode) -> np.ndarray:
        try:
            values = text_column(rows, name, episode.length)
        except LoaderError as exc:
            raise LoaderError(f"{self.spec.id}: episode {episode.index} ({episode.data_path}): {exc}") from exc
        longest = max((len(v.encode("utf-8")) for v in values), default=0)
        if longest > self.feature_text_width:
            raise LoaderError(
                f"{self.spec.id}: episode {episode.index}: feature {name!r} holds a {longest}-byte text, longer "
                f"than text_width={self.feature_text_width}; load with text_width={max(longest, 2 * self.feature_text_width)}"
            )
        return encode_text(values, self.feature_text_width, (name,))

    def _tasks(self, episode: lm.Episode, rows: Any) -> list[str]:
        n = episode.length
        if "task_index" in rows.column_names:
            indices = column(rows, "task_index", n)
            unknown = sorted({int(i) for i in np.unique(indices)} - set(self.meta.tasks))
            if unknown:
                raise LoaderError(
                    f"{self.spec.id}: episode {episode.index} uses task_index {unknown[0]}, which the "
                    "task metadata does not list"
                )
            return [self.meta.tasks[int(i)] for i in indices]
        return [episode.tasks[0] if episode.tasks else ""] * n

    def _write_notes(self) -> None:
        note, info = self.ctx.note, self.meta.info
        note("codebase_version", self.meta.version)
        note("fps", self.meta.fps)
        note("robot_type", info.get("robot_type"))
        note("episodes", [e.index for e in self.selected])
        note(
            "cameras",
            {
                k: {
                    "source": self.features[k].get("dtype"),
                    "shape": list(self.frame_shapes[k]),
                    "codec": (self.features[k].get("info") or {}).get("video.codec"),
                }
                for k in self.cameras
            },
        )
        note("image_size", list(self.image_size) if self.image_size else "as recorded")
        note("tasks", {str(i): t for i, t in sorted(self.meta.tasks.items())})
        note("task_text_width", self.text_width)
        text = [k for k, f in self.features.items() if str(f.get("dtype")) in TEXT_DTYPES]
        if text:
            note("text_keys", {"/".join(self.keys[k]): self.feature_text_width for k in text})
        note("tolerance_s", self.tolerance)
        note("features", {k: {"dtype": f.get("dtype"), "shape": f.get("shape")} for k, f in self.features.items()})
        done_feature = self._first_feature(DONE_FEATURES) or "next.done"
        note(
            "episode_end",
            f"{done_feature} on an episode's last row -> terminated; otherwise truncated (a recorded "
            "demo stops, it does not terminate)",
        )
        if self._first_feature(REWARD_FEATURES) == "reward":
            note(
                "reward",
                "('next', 'reward') is the RLDS port's 'reward' feature (RLDS: the reward after the step's action)",
            )
        note(
            "next_observation_unknown",
            "the last step of every episode: LeRobot records no observation after "
            "it; ('next', 'observation', ...) is NaN (0 for integers and images) there",
        )
        if self.missing_reward:
            note("reward", "the dataset has no next.reward feature: ('next', 'reward') is 0 on every row")
