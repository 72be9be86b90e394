"""CALVIN as TorchRL Episode Data: ``calvin/<task split>/<training|validation>``, e.g.
``calvin/task_ABC_D/training`` (train on environments A, B, C; evaluate on D) or ``calvin/task_D_D/training``.

**Source.** CALVIN publishes one zip per task split (``task_D_D.zip``, ``task_ABC_D.zip``,
``task_ABCD_D.zip``, ``calvin_debug_dataset.zip``) holding ``<top>/training/`` and ``<top>/validation/``.
The build reads the members of the downloaded zip in place (nothing is extracted); ``root=<folder>`` reads
an already extracted copy instead (the folder holding ``training/`` and ``validation/``; read in place, no
download: the build is keyed by the parameters, not by the files' bytes).

**Layout of a split folder** (CALVIN's ``DiskDataset``): one ``episode_<frame>.npz`` per time step (the
frame number zero-padded, 7 digits), ``ep_start_end_ids.npy`` (``[E, 2]``: the first and last frame of each
recorded episode, inclusive) and ``lang_annotations/auto_lang_ann.npy`` (a pickled dict: ``info/indx``, the
``(start, end)`` frames of each annotated window, inclusive; ``language/ann``, the instruction; ``language/
task``, the task id; ``language/emb``, sentence embeddings). Episodes are packed at build time, in the
order of ``ep_start_end_ids.npy``:

==============================  ===================================================================
upstream (frames start..end)    TED (one row per frame, t = frame - start)
==============================  ===================================================================
``rgb_static``, ``rgb_gripper``,  ``("observation", k)[t]`` (uint8 HWC images and float32 depth as
``rgb_tactile``, ``depth_*``,   stored); ``("next", "observation", k)[t]`` = frame t + 1. The last
``robot_obs``, ``scene_obs``    frame's next is not recorded: NaN (0 for images) and
                                ``("info", "next_observation_unknown")`` True (never fabricated)
``rel_actions`` (default) or    ``action[t]`` (``action_key`` picks which); the other one is
``actions``                     ``("info", <name>)[t]``
frame number                    ``("info", "frame")[t]`` (int64), the npz's number
no reward in CALVIN             ``("next", "reward")`` = 0 (noted on the card)
end of a recorded episode       ``("next", "truncated")`` on the last row (play data stops; nothing
                                terminates)
==============================  ===================================================================

**Language annotations** are attached to their frame ranges on the card (``language_annotations``,
column-wise: ``episode``, ``start_step``, ``end_step`` (inclusive, rows of that episode), ``start_frame``,
``end_frame``, ``task``, ``ann``), in the file's order; windows may overlap. An annotation whose range
is not inside one episode is an error naming the file and the annotation index. The embeddings are
model-specific and are not copied. The pickle is read with an allow-list (numpy arrays and plain
containers only, :mod:`.safe_npy`): a file asking for anything else is refused, never run.

**Memory.** An episode is one chunk, read frame by frame: its rows must fit in memory (all cameras: about
0.6 MB per frame). ``obs_keys=[...]`` keeps only the named observations (e.g. ``["rgb_static",
"rgb_gripper", "robot_obs"]``), which also shrinks the build.

Parameters: ``split`` (``training`` or ``validation``; set by the catalogue id), ``obs_keys``,
``action_key`` (``rel_actions`` or ``actions``), ``root``.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from datasets_hub.errors import CorruptFile, InvalidParameter, LoaderError, did_you_mean
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext, Resource

from .safe_npy import UnsafePickle, load_object_npy

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    from tensordict import TensorDictBase

__all__ = ["CalvinLoader"]

PARAMS = ("action_key", "obs_keys", "root", "split")
SPLITS = ("training", "validation")
ACTION_KEYS = ("rel_actions", "actions")
UNKNOWN_KEY = ("info", "next_observation_unknown")
EPISODES_FILE = "ep_start_end_ids.npy"
LANG_FILE = "lang_annotations/auto_lang_ann.npy"
_FRAME_RE = re.compile(r"^episode_(\d+)\.npz$")


class CalvinLoader(Loader):
    """Loader for the CALVIN dataset (see the module docstring for the exact semantics)."""

    name = "calvin"
    requires = ()
    install_hint = ""
    format_version = 1

    def check_params(self, spec: DatasetSpec) -> None:
        self.reject_unknown_params(spec, PARAMS)
        p = spec.params
        split = p.get("split")
        if split not in SPLITS:
            raise InvalidParameter(
                f"{spec.id}: split must be one of {', '.join(map(repr, SPLITS))}, got {split!r}"
                + did_you_mean(str(split), SPLITS)
            )
        action_key = p.get("action_key", "rel_actions")
        if action_key not in ACTION_KEYS:
            raise InvalidParameter(
                f"{spec.id}: action_key must be 'rel_actions' (relative, scaled as the env expects) or 'actions' "
                f"(absolute tcp pose), got {action_key!r}"
            )
        keys = p.get("obs_keys")
        if keys is not None and (
            not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys)
        ):
            raise InvalidParameter(
                f"{spec.id}: obs_keys must be a non-empty list of CALVIN observation names (e.g. "
                f"['rgb_static', 'robot_obs']), got {keys!r}"
            )
        if keys is not None and set(keys) & set(ACTION_KEYS):
            raise InvalidParameter(f"{spec.id}: obs_keys names an action ({sorted(set(keys) & set(ACTION_KEYS))})")
        root = p.get("root")
        if root is not None:
            if not isinstance(root, str) or not root:
                raise InvalidParameter(f"{spec.id}: root must be the path of an extracted CALVIN task folder")
            if not (Path(root).expanduser() / str(split) / EPISODES_FILE).is_file():
                raise InvalidParameter(
                    f"{spec.id}: root={root!r} has no {split}/{EPISODES_FILE}; point it at the extracted task "
                    "folder (the one holding training/ and validation/, e.g. .../task_D_D)"
                )

    def resources(self, spec: DatasetSpec) -> list[Resource]:
        self.check_params(spec)
        if spec.params.get("root") is not None:
            return []  # read in place
        if not spec.resources:
            raise InvalidParameter(
                f"{spec.id} has no resource to fetch: add the task split's zip to its catalogue entry or pass "
                "root='<extracted task folder>'"
            )
        return list(spec.resources)

    def check_catalogue_resources(self, spec: DatasetSpec, fetched: list[Resource]) -> None:
        if spec.params.get("root") is None:  # root= reads an extracted folder in place of the entry's zip
            super().check_catalogue_resources(spec, fetched)

    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDictBase]:
        self.check_params(spec)
        split = spec.params["split"]
        root = spec.params.get("root")
        if root is not None:
            source: _Source = _FolderSource(Path(root).expanduser() / split)
            yield from _Converter(spec, ctx, source).run()
            return
        if len(files) != 1:
            raise LoaderError(f"{spec.id}: the calvin loader reads one zip of a task split, got {sorted(files)}")
        path = Path(next(iter(files.values())))
        try:
            archive = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise CorruptFile(f"{spec.id}: {path.name} is not a readable zip ({exc})", path=path) from exc
        with archive:
            try:
                source = _ZipSource(archive, split, path)
                yield from _Converter(spec, ctx, source).run()
            except (zipfile.BadZipFile, OSError, EOFError) as exc:  # a damaged member: the zip's bytes are at fault
                raise CorruptFile(f"{spec.id}: cannot read {path.name}: {exc}", path=path) from exc


class _Source:
    """A CALVIN split folder: files by their path relative to it."""

    where: str

    def read(self, name: str) -> bytes:
        raise NotImplementedError

    def exists(self, name: str) -> bool:
        raise NotImplementedError

    def frame_digits(self) -> int:
        """The zero padding of the frame numbers (CALVIN's ``lookup_naming_pattern``: from the files)."""
        raise NotImplementedError


class _FolderSource(_Source):
    def __init__(self, folder: Path) -> None:
        self.folder, self.where = folder, str(folder)

    def read(self, name: str) -> bytes:
        return (self.folder / name).read_bytes()

    def exists(self, name: str) -> bool:
        return (self.folder / name).is_file()

    def frame_digits(self) -> int:
        for entry in self.folder.iterdir():
            match = _FRAME_RE.match(entry.name)
            if match:
                return len(match.group(1))
        raise LoaderError(f"{self.where} holds no episode_<frame>.npz file")


class _ZipSource(_Source):
    def __init__(self, archive: zipfile.ZipFile, split: str, path: Path) -> None:
        self.archive = archive
        self.members = set(archive.namelist())
        suffix = f"{split}/{EPISODES_FILE}"
        found = sorted(m for m in self.members if m == suffix or m.endswith("/" + suffix))
        if not found:
            # a truncated zip can even open as the last npz inside it (whose own end record zipfile finds)
            raise CorruptFile(
                f"{path.name} is not a CALVIN task split zip: none of its {len(self.members)} members is "
                f"<top>/{suffix} (a truncated download, or another file)",
                path=path,
            )
        self.prefix = found[0][: -len(EPISODES_FILE)]
        self.where = f"{path.name}:{self.prefix}"

    def read(self, name: str) -> bytes:
        return self.archive.read(self.prefix + name)

    def exists(self, name: str) -> bool:
        return self.prefix + name in self.members

    def frame_digits(self) -> int:
        for member in self.members:
            if member.startswith(self.prefix):
                match = _FRAME_RE.match(member[len(self.prefix) :])
                if match:
                    return len(match.group(1))
        raise LoaderError(f"{self.where} holds no episode_<frame>.npz file")


class _Converter:
    def __init__(self, spec: DatasetSpec, ctx: LoaderContext, source: _Source) -> None:
        self.spec, self.ctx, self.source = spec, ctx, source
        self.action_key = spec.params.get("action_key", "rel_actions")
        self.other_action = next(k for k in ACTION_KEYS if k != self.action_key)
        self.obs_keys = spec.params.get("obs_keys")
        self.schema: dict[str, tuple[np.dtype, tuple[int, ...]]] | None = None

    def run(self) -> Iterator[TensorDictBase]:
        where = self.source.where
        try:
            ranges = np.asarray(load_object_npy(self.source.read(EPISODES_FILE)))
        except (ValueError, UnsafePickle) as exc:
            raise LoaderError(f"{self.spec.id}: {where}/{EPISODES_FILE} cannot be read: {exc}") from exc
        if ranges.ndim != 2 or ranges.shape[1] != 2 or ranges.dtype.kind not in "iu" or len(ranges) == 0:
            raise LoaderError(
                f"{self.spec.id}: {where}/{EPISODES_FILE} must be an integer [E, 2] array of first and last frames, "
                f"got {ranges.dtype} {list(ranges.shape)}"
            )
        for index, (start, end) in enumerate(ranges.tolist()):
            if end < start:
                raise LoaderError(
                    f"{self.spec.id}: {where}/{EPISODES_FILE}: episode {index} ends ({end}) before it starts ({start})"
                )
        annotations = self._annotations(ranges)
        digits = self.source.frame_digits()
        self.ctx.expect(int((ranges[:, 1] - ranges[:, 0] + 1).sum()))
        for episode, (start, end) in enumerate(ranges.tolist()):
            yield self._episode(episode, int(start), int(end), digits)
        self.ctx.note("episodes", [{"start_frame": int(s), "end_frame": int(e)} for s, e in ranges.tolist()])
        self.ctx.note("reward", "CALVIN records no reward: ('next', 'reward') is 0")
        self.ctx.note("action_key", self.action_key)
        if annotations is not None:
            self.ctx.note("language_annotations", annotations)

    def _annotations(self, ranges: np.ndarray) -> dict[str, list[Any]] | None:
        where = f"{self.source.where}/{LANG_FILE}"
        if not self.source.exists(LANG_FILE):
            self.ctx.note("language_annotations", f"none: {LANG_FILE} is not in this split")
            return None
        try:
            data = load_object_npy(self.source.read(LANG_FILE))
            spans = [tuple(int(v) for v in pair) for pair in data["info"]["indx"]]
            texts = [str(a) for a in data["language"]["ann"]]
            tasks = [str(t) for t in data["language"]["task"]]
        except UnsafePickle as exc:
            raise LoaderError(f"{self.spec.id}: {where} is refused: {exc}") from exc
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise LoaderError(
                f"{self.spec.id}: {where} is not a CALVIN annotation file (info/indx, language/ann, language/task): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not len(spans) == len(texts) == len(tasks):
            raise LoaderError(
                f"{self.spec.id}: {where} has {len(spans)} ranges but {len(texts)} instructions and {len(tasks)} tasks"
            )
        starts, ends = ranges[:, 0], ranges[:, 1]
        out: dict[str, list[Any]] = {k: [] for k in ("episode", "start_step", "end_step", "start_frame", "end_frame")}
        for index, (first, last) in enumerate(spans):
            inside = np.flatnonzero((starts <= first) & (last <= ends))
            if last < first or len(inside) != 1:
                raise LoaderError(
                    f"{self.spec.id}: {where}: annotation {index} ({tasks[index]!r}, frames {first}..{last}) is not "
                    "inside one episode of ep_start_end_ids.npy"
                )
            episode = int(inside[0])
            out["episode"].append(episode)
            out["start_step"].append(first - int(starts[episode]))
            out["end_step"].append(last - int(starts[episode]))
            out["start_frame"].append(first)
            out["end_frame"].append(last)
        return {**out, "task": tasks, "ann": texts}

    def _frame(self, frame: int, digits: int, episode: int) -> Mapping[str, np.ndarray]:
        name = f"episode_{frame:0{digits}d}.npz"
        if not self.source.exists(name):
            raise LoaderError(
                f"{self.spec.id}: {self.source.where}/{name} is missing: frame {frame} of episode {episode} "
                f"(ep_start_end_ids.npy lists it)"
            )
        try:
            with np.load(io.BytesIO(self.source.read(name)), allow_pickle=False) as npz:
                return {k: npz[k] for k in npz.files}
        except (ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise LoaderError(
                f"{self.spec.id}: {self.source.where}/{name} (frame {frame}) cannot be read: {exc}"
            ) from exc

    def _episode(self, episode: int, start: int, end: int, digits: int) -> TensorDictBase:
        import torch
        from tensordict import TensorDict

        n = end - start + 1
        columns: dict[str, np.ndarray] = {}
        for t, frame in enumerate(range(start, end + 1)):
            values = self._frame(frame, digits, episode)
            if not columns:
                keys = self._keys(values, frame)
                schema = {k: (values[k].dtype, values[k].shape) for k in keys}
                if self.schema is None:
                    self.schema = schema
                columns = {
                    k: np.empty((n + 1 if k not in ACTION_KEYS else n, *s), d) for k, (d, s) in self.schema.items()
                }
            if self.obs_keys is None and len(values) != len(columns):
                extra = sorted(set(values) - set(columns))
                raise LoaderError(
                    f"{self.spec.id}: {self.source.where}/episode_{frame:0{digits}d}.npz (frame {frame}, episode "
                    f"{episode}) has keys {extra} that earlier frames do not have"
                )
            for key, column in columns.items():
                value = values.get(key)
                if value is None or value.shape != column.shape[1:] or value.dtype != column.dtype:
                    got = "absent" if value is None else f"{value.dtype} {list(value.shape)}"
                    raise LoaderError(
                        f"{self.spec.id}: {self.source.where}/episode_{frame:0{digits}d}.npz (frame {frame}, episode "
                        f"{episode}): {key!r} is {got}, but earlier frames have {column.dtype} {list(column.shape[1:])}"
                    )
                column[t] = value
            self.ctx.progress(1)
        td = TensorDict({}, batch_size=[n])
        unknown = np.zeros(n, dtype=bool)
        unknown[-1] = True
        for key, column in columns.items():
            if key in ACTION_KEYS:
                continue
            column[n] = np.nan if column.dtype.kind == "f" else 0  # the frame after the last is not recorded
            td.set(("observation", key), torch.from_numpy(column[:n]))
            td.set(("next", "observation", key), torch.from_numpy(column[1:]))
        td.set("action", torch.from_numpy(columns[self.action_key]))
        td.set(("info", self.other_action), torch.from_numpy(columns[self.other_action]))
        td.set(("info", "frame"), torch.arange(start, end + 1, dtype=torch.int64))
        td.set(UNKNOWN_KEY, torch.from_numpy(unknown))
        td.set("episode", torch.full((n,), episode, dtype=torch.int64))
        td.set(("next", "reward"), torch.zeros(n, 1, dtype=torch.float32))
        td.set(("next", "terminated"), torch.zeros(n, 1, dtype=torch.bool))
        truncated = torch.zeros(n, 1, dtype=torch.bool)
        truncated[-1] = True
        td.set(("next", "truncated"), truncated)
        return td

    def _keys(self, values: Mapping[str, np.ndarray], frame: int) -> list[str]:
        missing = [k for k in ACTION_KEYS if k not in values]
        if missing:
            raise LoaderError(f"{self.spec.id}: frame {frame} has no {missing[0]!r}: not a CALVIN step file")
        observations = sorted(k for k in values if k not in ACTION_KEYS)
        if self.obs_keys is None:
            return [*observations, *ACTION_KEYS]
        unknown = [k for k in self.obs_keys if k not in observations]
        if unknown:
            raise InvalidParameter(
                f"{self.spec.id}: obs_keys names {unknown[0]!r}, which CALVIN's frames do not have (they have: "
                f"{', '.join(observations)})." + did_you_mean(unknown[0], observations)
            )
        return [*sorted(self.obs_keys), *ACTION_KEYS]
