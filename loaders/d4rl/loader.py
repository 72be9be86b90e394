"""D4RL HDF5 files as TorchRL Episode Data (``d4rl/<name>``, e.g. ``d4rl/hopper-medium-v2``).

The catalogue (``registry.yaml``) lists every D4RL dataset with its upstream file; this loader
turns one D4RL-layout HDF5 file into TED chunks of whole episodes, in one pass, reading
``ctx.chunk_rows`` rows at a time with h5py slicing (never a whole dataset in memory).

Episode semantics (row ``t`` of the file is the transition ``(s_t, a_t, r_t, s_{t+1})``):

=================================  ===========================================================
upstream                           TED
=================================  ===========================================================
``observations[t]``                ``observation[t]`` (upstream dtype, float32 for D4RL)
``actions[t]``                     ``action[t]``
``rewards[t]``                     ``("next", "reward")[t]``, shape ``[N, 1]``
``terminals[t]``                   ``("next", "terminated")[t]`` (bool); ends the episode
``timeouts[t]``                    ``("next", "truncated")[t]`` (bool); ends the episode
rows after the last flag           one final episode, ``("next", "truncated")`` set on its last
                                   row (the file ends mid-episode; noted in the card)
``next_observations[t]``           ``("next", "observation")[t]``, exact, at every row
                                   (also at timeouts and terminals)
no ``next_observations``           ``("next", "observation")[t] = observations[t + 1]`` inside
                                   the episode; the last row of every episode has none (below)
``infos/<k>[t]``                   ``("info", <k>)[t]`` (nested groups become nested keys)
other root arrays with N rows      ``("info", <name>)[t]``
``metadata/*``                     the dataset card (``ctx.note("metadata", …)``), not samples
episode ids                        ``episode``: 0..E-1 in file order
=================================  ===========================================================

A row may carry both flags (``terminated`` and ``truncated`` both True): both are kept as
upstream wrote them, and ``done`` is their union.

**Unknown next observations.** A next observation never comes from another episode. When the file
has no ``next_observations``, the last row of each episode has no next observation in the file:
for an episode ended by a timeout or by the end of the file the true ``s_{t+1}`` was never
recorded, and for an episode ended by a terminal the following row is already the next
episode's first observation. We do not fabricate one and we do not drop the row (dropping it loses
the terminal transition Q-learning needs, and shifts episode returns: IQL-PyTorch #4). The row
is kept with ``("next", "observation")`` filled with NaN (zeros for integer observations) and the
per-step bool ``("info", "next_observation_unknown")`` set; that key exists in every D4RL build
(all False when the file has ``next_observations``). The card notes the count
(``next_observation_unknown_rows``). In a TD target use ``torch.where(terminated, 0, q_next)``
(NaN * 0 is NaN) or drop flagged rows that are not terminal, as D4RL's ``qlearning_dataset`` does.

**Files without ``timeouts``** (older v0 files): episodes end at terminals only, and the card says
so (``timeouts: "absent"``). Upstream's ``qlearning_dataset`` then assumed the environment's
``max_episode_steps``; we never assume it silently: pass ``max_episode_steps=<int>`` to end an
episode (as truncated) after that many steps since its start, and the card records the number of
episodes cut that way. The parameter is ignored (and noted) for files that have ``timeouts``.

**Known upstream quirks** (flags are kept as written): maze2d's ``timeouts`` mark a new goal in one
continuous trajectory (D4RL #85), so its episodes are goal-reaching sub-trajectories; some files
end with unflagged rows (e.g. hopper-random-v2's last 4). When ``next_observations`` is present,
``next_observation_mismatch_rows`` in the card counts rows inside an episode whose
``next_observations[t]`` differs from ``observations[t + 1]`` (hidden resets, e.g. antmaze).

Parameters: ``url`` (a URL or list of mirror URLs replacing the catalogue's resource) and
``max_episode_steps`` (see above).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from datasets_hub.errors import CorruptFile, InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext, Resource

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    from tensordict import TensorDictBase

PARAMS = ("max_episode_steps", "url")
_CORE_KEYS = ("observations", "actions", "rewards", "terminals", "timeouts", "next_observations")
UNKNOWN_KEY = ("info", "next_observation_unknown")
_MAX_METADATA_ITEMS = 4096  # larger metadata arrays are described, not copied into the card


class D4RLLoader(Loader):
    """Loader for D4RL HDF5 files (see the module docstring for the exact semantics)."""

    name = "d4rl"
    requires = ("h5py",)
    install_hint = "pip install h5py"
    format_version = 1

    def check_params(self, spec: DatasetSpec) -> None:
        self.reject_unknown_params(spec, PARAMS)
        steps = spec.params.get("max_episode_steps")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise InvalidParameter(
                f"{spec.id}: max_episode_steps must be a positive int (e.g. 1000 for gym-MuJoCo), got {steps!r}"
            )
        self.url_param(spec)

    def resources(self, spec: DatasetSpec) -> list[Resource]:
        self.check_params(spec)
        urls = self.url_param(spec)
        if urls is not None:
            return [Resource.from_dict({"urls": urls})]
        if not spec.resources:
            raise InvalidParameter(
                f"{spec.id} has no resource to fetch: add one to its catalogue entry or pass url='https://…/file.hdf5'"
            )
        return list(spec.resources)

    def check_catalogue_resources(self, spec: DatasetSpec, fetched: list[Resource]) -> None:
        if spec.params.get("url") is None:  # url= replaces the entry's file on purpose
            super().check_catalogue_resources(spec, fetched)

    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDictBase]:
        self.check_params(spec)
        if len(files) != 1:
            raise LoaderError(f"{spec.id}: the d4rl loader reads exactly one HDF5 file, got {sorted(files)}")
        import h5py

        path = Path(next(iter(files.values())))
        try:
            handle = h5py.File(path, "r")
        except OSError as exc:
            raise CorruptFile(
                f"{spec.id}: {path} is not a readable HDF5 file ({exc}); delete it and download again", path=path
            ) from exc
        with handle:
            try:
                yield from _Converter(spec, handle, path, ctx).run()
            except OSError as exc:  # h5py's read errors: damaged or truncated bytes
                raise CorruptFile(f"{spec.id}: cannot read {path}: {exc}", path=path) from exc
            except (KeyError, ValueError, TypeError) as exc:
                raise LoaderError(f"{spec.id}: cannot read {path}: {exc}") from exc


class _Converter:
    """One pass over one file: blocks of rows in, TED chunks of whole episodes out."""

    def __init__(self, spec: DatasetSpec, f: Any, path: Path, ctx: LoaderContext) -> None:
        import h5py

        self.spec, self.ctx, self.path = spec, ctx, path
        for key in ("observations", "actions", "rewards", "terminals"):
            if not isinstance(f.get(key), h5py.Dataset):
                raise LoaderError(
                    f"{spec.id}: {path.name} has no {key!r} dataset, so it is not a D4RL file "
                    f"(root keys: {sorted(f.keys())})"
                )
        self.n = int(f["observations"].shape[0])
        if self.n == 0:
            raise LoaderError(f"{spec.id}: {path.name} has no rows")
        # per-step sources: TED key -> h5py dataset
        self.sources: dict[tuple[str, ...], Any] = {
            ("observation",): f["observations"],
            ("action",): f["actions"],
            ("reward",): f["rewards"],
            ("terminal",): f["terminals"],
        }
        self.has_timeouts = isinstance(f.get("timeouts"), h5py.Dataset)
        if self.has_timeouts:
            self.sources[("timeout",)] = f["timeouts"]
        self.has_next = isinstance(f.get("next_observations"), h5py.Dataset)
        if self.has_next:
            self.sources[("next_observation",)] = f["next_observations"]
            if f["next_observations"].shape != f["observations"].shape:
                raise LoaderError(
                    f"{spec.id}: next_observations has shape {f['next_observations'].shape} but observations "
                    f"has {f['observations'].shape}"
                )
        self.skipped: dict[str, str] = {}
        self.info_keys: list[tuple[str, ...]] = []
        if isinstance(f.get("infos"), h5py.Group):
            f["infos"].visititems(lambda name, obj: self._add_info(tuple(name.split("/")), obj))
        for name, obj in f.items():
            if name not in _CORE_KEYS and name not in ("infos", "metadata"):
                self._add_info((name,), obj)
        for ds in self.sources.values():
            if ds.shape[:1] != (self.n,):
                raise LoaderError(
                    f"{spec.id}: {ds.name!r} has {ds.shape[0] if ds.shape else 0} rows but observations has {self.n}"
                )
        self.metadata = _metadata(f)
        self.obs_dtype = _native(np.dtype(f["observations"].dtype))
        steps = spec.params.get("max_episode_steps")
        self.max_steps = None if self.has_timeouts else steps
        # counters for the card
        self.episode_id = 0
        self.steps_in_episode = 0  # rows of the current (unfinished) episode seen so far
        self.ends = {"terminal": 0, "timeout": 0, "terminal_and_timeout": 0, "max_episode_steps": 0, "end_of_file": 0}
        self.unknown_rows = 0
        self.mismatch_rows = 0
        self.eof_rows = 0

    def _add_info(self, path: tuple[str, ...], obj: Any) -> None:
        import h5py

        if not isinstance(obj, h5py.Dataset):
            return
        name = obj.name.lstrip("/")  # full HDF5 path, e.g. infos/qpos
        if obj.shape[:1] != (self.n,):
            self.skipped[name] = f"shape {obj.shape} is not per-step ({self.n} rows)"
        elif obj.dtype.kind not in "biuf":
            self.skipped[name] = f"dtype {obj.dtype} is not numeric"
        elif ("info", *path) == UNKNOWN_KEY:
            self.skipped[name] = "name reserved for the loader's own flag"
        else:
            self.sources[("info", *path)] = obj
            self.info_keys.append(("info", *path))

    # -- the pass ---------------------------------------------------------------------------
    def run(self) -> Iterator[TensorDictBase]:
        self.ctx.expect(self.n)  # every row of the file is read once: the progress bar's total
        block = max(1, self.ctx.chunk_rows)
        flag_keys = (("terminal",), ("timeout",))
        data_keys = [k for k in self.sources if k not in flag_keys]
        # rows of the unfinished episode(s) carried from the previous block; each block is read
        # straight after them into one fresh array per key, so only the carried rows are copied
        carry: dict[tuple[str, ...], np.ndarray] | None = None
        for start in range(0, self.n, block):
            stop = min(self.n, start + block)
            kept = 0 if carry is None else len(carry[("end",)])
            rows = {}
            for key in data_keys:
                ds = self.sources[key]
                buf = np.empty((kept + stop - start, *ds.shape[1:]), dtype=_native(np.dtype(ds.dtype)))
                if carry is not None and kept:
                    buf[:kept] = carry[key]
                ds.read_direct(buf, np.s_[start:stop], np.s_[kept:])
                rows[key] = buf
            self.ctx.progress(stop - start)
            terminated = np.asarray(self.sources[("terminal",)][start:stop]).reshape(-1).astype(bool)
            timeout = (
                np.asarray(self.sources[("timeout",)][start:stop]).reshape(-1).astype(bool)
                if self.has_timeouts
                else np.zeros(stop - start, dtype=bool)
            )
            cut = self._cut_max_steps(terminated, self.max_steps) if self.max_steps else np.zeros_like(terminated)
            self._count_ends(terminated, timeout, cut)
            new_flags = {
                ("terminated",): terminated,
                ("truncated",): timeout | cut,
                ("end",): terminated | timeout | cut,
            }
            for key, value in new_flags.items():
                rows[key] = value if carry is None or not kept else np.concatenate([carry[key], value])
            ends = np.flatnonzero(rows[("end",)])
            if ends.size == 0:
                carry = rows
                continue
            last = int(ends[-1]) + 1
            yield from self._emit({k: v[:last] for k, v in rows.items()})
            carry = {k: v[last:] for k, v in rows.items()} if last < len(rows[("end",)]) else None
        if carry is not None:
            # the file ends mid-episode: a final episode truncated by the end of the file
            carry[("truncated",)][-1] = True
            carry[("end",)][-1] = True
            self.ends["end_of_file"] = 1
            self.eof_rows = len(carry[("end",)])
            yield from self._emit(carry)
        self._write_notes()

    def _cut_max_steps(self, terminated: np.ndarray, max_steps: int) -> np.ndarray:
        """Where ``max_episode_steps`` ends an episode in this block (files without timeouts)."""
        cut = np.zeros_like(terminated)
        terms = np.flatnonzero(terminated)
        pos, length = 0, len(terminated)
        while pos < length:
            limit = pos + max_steps - self.steps_in_episode - 1  # last row allowed
            i = np.searchsorted(terms, pos)
            if i < len(terms) and terms[i] <= limit:
                pos, self.steps_in_episode = int(terms[i]) + 1, 0
            elif limit < length:
                cut[limit] = True
                pos, self.steps_in_episode = limit + 1, 0
            else:
                self.steps_in_episode += length - pos
                break
        return cut

    def _count_ends(self, terminated: np.ndarray, timeout: np.ndarray, cut: np.ndarray) -> None:
        both = int((terminated & timeout).sum())
        self.ends["terminal_and_timeout"] += both
        self.ends["terminal"] += int(terminated.sum()) - both
        self.ends["timeout"] += int(timeout.sum()) - both
        self.ends["max_episode_steps"] += int(cut.sum())

    def _emit(self, rows: dict[tuple[str, ...], np.ndarray]) -> Iterator[TensorDictBase]:
        """Split complete episodes into chunks of about ``chunk_rows`` rows (whole episodes)."""
        ends = np.flatnonzero(rows[("end",)]) + 1  # one past each episode's last row
        total, start, target = int(ends[-1]), 0, max(1, self.ctx.chunk_rows)
        while start < total:
            i = int(np.searchsorted(ends, start + target, side="right")) - 1
            if i < 0 or ends[i] <= start:  # a single episode longer than the target
                i = int(np.searchsorted(ends, start, side="right"))
            stop = int(ends[i])
            yield self._chunk({k: v[start:stop] for k, v in rows.items()})
            start = stop

    def _chunk(self, rows: dict[tuple[str, ...], np.ndarray]) -> TensorDictBase:
        import torch
        from tensordict import TensorDict

        end = rows[("end",)]
        n = len(end)
        last = np.flatnonzero(end)
        lengths = np.diff(np.concatenate([[-1], last]))
        episode = np.repeat(np.arange(self.episode_id, self.episode_id + len(last), dtype=np.int64), lengths)
        self.episode_id += len(last)
        obs = rows[("observation",)]
        unknown = np.zeros(n, dtype=bool)
        if self.has_next:
            nxt = rows[("next_observation",)]
            inside = ~end[:-1]
            if n > 1 and inside.any():
                differs = (nxt[:-1] != obs[1:]).reshape(n - 1, -1).any(axis=1)
                self.mismatch_rows += int((differs & inside).sum())
        else:
            nxt = np.empty_like(obs)
            nxt[:-1] = obs[1:]
            nxt[last] = np.nan if obs.dtype.kind == "f" else 0
            unknown[last] = True
            self.unknown_rows += len(last)
        td: dict[Any, Any] = {
            "observation": torch.from_numpy(obs),
            "action": torch.from_numpy(rows[("action",)]),
            "episode": torch.from_numpy(episode),
            ("next", "observation"): torch.from_numpy(nxt),
            ("next", "reward"): torch.from_numpy(rows[("reward",)].reshape(n, 1)),
            ("next", "terminated"): torch.from_numpy(rows[("terminated",)].reshape(n, 1).copy()),
            ("next", "truncated"): torch.from_numpy(rows[("truncated",)].reshape(n, 1).copy()),
            UNKNOWN_KEY: torch.from_numpy(unknown),
        }
        for key in self.info_keys:
            td[key] = torch.from_numpy(rows[key])
        out = TensorDict({}, batch_size=[n])
        for key, value in td.items():
            out.set(key, value)
        return out

    def _write_notes(self) -> None:
        note = self.ctx.note
        if self.metadata:
            note("metadata", self.metadata)
        environment = environment_card(self.spec)
        if environment:
            note("environment", environment)
        note("episodes", self.episode_id)
        note("episode_ends", dict(self.ends))
        if self.has_timeouts:
            note("timeouts", "present")
        else:
            steps = self.spec.params.get("max_episode_steps")
            note(
                "timeouts",
                "absent: episodes end at terminals"
                + (f" and after max_episode_steps={steps} steps (cut as truncated)" if steps else " only"),
            )
        if self.has_timeouts and self.spec.params.get("max_episode_steps"):
            note("max_episode_steps", "ignored: the file has timeouts")
        if self.eof_rows:
            note("final_episode_truncated_by_end_of_file", {"rows": self.eof_rows})
        note(
            "next_observations",
            "from the file (exact)" if self.has_next else "from the following row inside each episode",
        )
        note("next_observation_unknown_rows", self.unknown_rows)
        if self.unknown_rows:
            fill = "NaN" if self.obs_dtype.kind == "f" else "0"
            note(
                "next_observation_unknown",
                f"{self.unknown_rows} rows (the last of each episode) have no next observation in the file: "
                f"('next', 'observation') is {fill} there and ('info', 'next_observation_unknown') is True",
            )
        if self.has_next:
            note("next_observation_mismatch_rows", self.mismatch_rows)
        if self.skipped:
            note("skipped_keys", dict(self.skipped))


# -- helpers ---------------------------------------------------------------------------------
# D4RL's environment ids: a dataset is named after the gym environment D4RL registers for it
_D4RL_ENV_ID = re.compile(
    r"(bullet-)?(halfcheetah|hopper|walker2d|ant|antmaze|maze2d|pen|hammer|door|relocate|kitchen|carla|flow|minigrid)"
    r"(-[a-z0-9]+)+-v[0-9]+"
)
_MUJOCO_TASKS = {"halfcheetah": "HalfCheetah", "hopper": "Hopper", "walker2d": "Walker2d", "ant": "Ant"}


def environment_card(spec: DatasetSpec) -> dict[str, Any]:
    """The card's ``environment`` of a D4RL dataset: D4RL's gym id for it (``import d4rl`` registers
    ``hopper-medium-v2`` in gym, not gymnasium), and for gym-MuJoCo data the MuJoCo task (``Hopper``).
    Empty for a file given by ``url=`` or an id not named as D4RL names its environments: nothing is guessed."""
    name = spec.id.split("/", 1)[-1]
    if "url" in spec.params or not _D4RL_ENV_ID.fullmatch(name):
        return {}
    card: dict[str, Any] = {
        "env_id": name,
        "registry": "gym",
        "registered_by": "d4rl",
        "from": "the dataset id: D4RL names each dataset after the gym environment it registers for it",
    }
    family = name.split("-", 1)[0]
    if family in _MUJOCO_TASKS:
        card["task"] = f"gym MuJoCo {_MUJOCO_TASKS[family]}"
    return card


def _native(dtype: np.dtype) -> np.dtype:
    return dtype if dtype.isnative else dtype.newbyteorder("=")


def _metadata(f: Any) -> dict[str, Any]:
    """``metadata/*`` as JSON-able values (large arrays are described, not copied)."""
    import h5py

    group = f.get("metadata")
    out: dict[str, Any] = {}
    if not isinstance(group, h5py.Group):
        return out

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            if obj.size > _MAX_METADATA_ITEMS:
                out[name] = f"<array shape={list(obj.shape)} dtype={obj.dtype}>"
            else:
                out[name] = _jsonable(obj[()])

    group.visititems(visit)
    for key, value in group.attrs.items():
        out.setdefault(key, _jsonable(value))
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()] if value.ndim else _jsonable(value.item())
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
