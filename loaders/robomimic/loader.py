"""robomimic-format HDF5 files as TorchRL Episode Data: ``robomimic/<source>/<name>``.

One format, four families of datasets: robomimic v1.5 (``robomimic/v1.5/lift/ph/low_dim``), MimicGen
(``robomimic/mimicgen/core/coffee_d0``), DexMimicGen, and LIBERO's original HDF5 files
(``robomimic/libero/libero_goal``: the robomimic schema, one file per task, the language instruction in
an attribute). A build reads one or more files, in the order of its resources.

**File layout** (robomimic's ``dataset_states_to_obs.py``, LIBERO's ``create_dataset.py``): a group
``data`` with one group per demonstration, ``demo_<N>``, holding ``obs/<key>`` and (optionally)
``next_obs/<key>`` (``num_samples`` rows each), ``actions``, ``rewards``, ``dones``, ``states`` and
other per-step datasets; the attribute ``num_samples``; a group ``mask`` of filter keys, each an
array of demo names (``train``, ``valid``, ``20_percent``, …). Demos are read in the order of their
number, as robomimic's ``SequenceDataset`` sorts them (``demo_10`` after ``demo_9``).

=================================  ===============================================================
upstream (demo rows t = 0..T-1)    TED
=================================  ===============================================================
``obs/<k>[t]``                     ``("observation", k)[t]`` (upstream dtype; images uint8 HWC)
``next_obs/<k>[t]``                ``("next", "observation", k)[t]``, exact, at every row
no ``next_obs/<k>``                ``("next", "observation", k)[t] = obs/<k>[t + 1]`` inside the
                                   demo; the last row has none: NaN (0 for integers and images)
                                   and ``("info", "next_observation_unknown")`` True (never
                                   fabricated; the key exists in every build)
``actions[t]``                     ``action[t]``
``rewards[t]``                     ``("next", "reward")[t]`` ``[T, 1]``; absent: 0, as robomimic
                                   reads a missing key (noted on the card)
``dones[t]``                       ``("info", "dones")[t]`` as stored, every row; on the last row
                                   it is ``("next", "terminated")``, and a demo whose last
                                   ``dones`` is 0 ends ``("next", "truncated")``
other datasets of the demo with    ``("info", <path>)`` (nested groups become nested keys:
T rows (``states``, ``robot_``     ``states``, ``action_dict/abs_pos``, ``datagen_info/…``)
``states``, ``action_dict/*``, …)
language instruction               ``task``: UTF-8 bytes, uint8 ``[W]`` zero-padded (read with
                                   :func:`decode_text`): LIBERO's ``data`` attribute
                                   ``problem_info`` (JSON, ``language_instruction``) or a demo's
                                   ``ep_meta`` attribute (JSON, ``lang``); present only when some
                                   file has one
demo order                         ``episode``: 0..E-1 in reading order; the card's
                                   ``episode_map`` gives file -> demo -> id
=================================  ===============================================================

**dones, exactly as robomimic uses them.** ``dones[t]`` says whether ``s_{t+1}`` ends the task:
``dataset_states_to_obs.py --done_mode`` writes 1 at success states (mode 0), at the last step (mode
1) or both (mode 2, the released datasets); LIBERO writes 1 on the last step. robomimic's offline-RL
algorithms (BCQ, CQL, IQL) take ``(1 - dones[t])`` as the bootstrap mask of row t, and a demo is
one trajectory whatever its ``dones``. TED keeps both readings: the episode is the demo, ending
``terminated`` when its last ``dones`` is set and ``truncated`` otherwise (a recorded demo stops, it
does not time out), and ``("info", "dones")`` is the per-row mask robomimic bootstraps with, set
also on success rows inside a demo (the card counts them, ``dones_inside_demos``).

**Splits.** ``split=<filter key>`` keeps the demos listed under ``mask/<filter key>`` (robomimic's
``filter_by_attribute``), in demo order; the card lists every filter key and its size. A build
with several files needs the key in each.

**Observations.** ``obs_keys=[...]`` keeps only those observation keys (robomimic's ``obs_keys``),
e.g. to leave the camera images out of a build. A file without an ``obs`` group (robomimic's
"raw" ``demo.hdf5``: states and actions only) is refused: its observations have to be extracted
with robomimic's ``dataset_states_to_obs.py`` first.

Parameters: ``split``, ``obs_keys``, ``url`` (a URL or a list of mirror URLs replacing the
catalogue's single resource).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from datasets_hub.errors import CorruptFile, InvalidParameter, LoaderError, did_you_mean
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext, Resource

from ..formats.text import decode_text, encode_text

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    from tensordict import TensorDictBase

__all__ = ["RobomimicLoader", "decode_text", "demo_order"]

PARAMS = ("obs_keys", "split", "url")
UNKNOWN_KEY = ("info", "next_observation_unknown")
DONES_KEY = ("info", "dones")
_CORE = ("obs", "next_obs", "actions", "rewards", "dones")
_DEMO_RE = re.compile(r"^demo_(\d+)$")
_CHUNK_BYTES = 256 << 20  # image demos: a chunk is cut by bytes long before chunk_rows
_MAX_ATTR_CHARS = 4096  # longer string attributes (model XML, BDDL files) are described, not copied


class RobomimicLoader(Loader):
    """Loader for robomimic-format HDF5 files (see the module docstring for the exact semantics)."""

    name = "robomimic"
    requires = ("h5py",)
    install_hint = "pip install h5py"
    format_version = 1

    def check_params(self, spec: DatasetSpec) -> None:
        self.reject_unknown_params(spec, PARAMS)
        split = spec.params.get("split")
        if split is not None and (not isinstance(split, str) or not split or "/" in split):
            raise InvalidParameter(
                f"{spec.id}: split must be the name of a filter key under mask/ (e.g. 'train', 'valid', "
                f"'20_percent'), got {split!r}"
            )
        keys = spec.params.get("obs_keys")
        if keys is not None and (
            not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys)
        ):
            raise InvalidParameter(
                f"{spec.id}: obs_keys must be a non-empty list of observation names (e.g. "
                f"['robot0_eef_pos', 'object']), got {keys!r}"
            )
        if keys is not None and len(set(keys)) != len(keys):
            raise InvalidParameter(f"{spec.id}: obs_keys names the same key twice: {keys!r}")
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
        if not files:
            raise LoaderError(f"{spec.id}: no file to read")
        import h5py

        # the resources' order is the reading order (a LIBERO suite: its tasks in the suite's order)
        order = [r.name for r in self.resources(spec) if r.name in files]
        names = order + sorted(n for n in files if n not in order)
        handles: list[tuple[str, Path, Any]] = []
        try:
            for name in names:
                path = Path(files[name])
                try:
                    handles.append((name, path, h5py.File(path, "r")))
                except OSError as exc:
                    raise CorruptFile(
                        f"{spec.id}: {name} ({path}) is not a readable HDF5 file ({exc}); delete it and download again",
                        path=path,
                    ) from exc
            plans = [_FilePlan.read(spec, name, path, handle) for name, path, handle in handles]
            yield from _Converter(spec, ctx, plans).run()
        finally:
            for _, _, handle in handles:
                handle.close()


def demo_order(names: list[str], where: str) -> list[str]:
    """Demo group names sorted by their number, as robomimic sorts them (``demo_10`` after ``demo_9``)."""
    numbered = []
    for name in names:
        match = _DEMO_RE.match(name)
        if match is None:
            raise LoaderError(f"{where}: data/{name} is not named demo_<N>, so it is not a robomimic demo")
        numbered.append((int(match.group(1)), name))
    numbers = [n for n, _ in numbered]
    if len(set(numbers)) != len(numbers):
        raise LoaderError(f"{where}: two demos have the same number ({sorted(names)})")
    return [name for _, name in sorted(numbered)]


class _FilePlan:
    """What one file holds: its demos in order (after ``split``), their lengths, keys and language."""

    def __init__(self, name: str, path: Path, handle: Any) -> None:
        self.name, self.path, self.handle = name, path, handle
        self.demos: list[str] = []
        self.lengths: dict[str, int] = {}
        self.masks: dict[str, int] = {}
        self.language: str | None = None
        self.demo_language: dict[str, str] = {}
        self.attrs: dict[str, Any] = {}

    @classmethod
    def read(cls, spec: DatasetSpec, name: str, path: Path, handle: Any) -> _FilePlan:
        import h5py

        plan = cls(name, path, handle)
        where = f"{spec.id}: {name}"
        try:
            data = handle.get("data")
            if not isinstance(data, h5py.Group):
                raise LoaderError(
                    f"{where} has no 'data' group, so it is not a robomimic-format file "
                    f"(root keys: {sorted(handle.keys())})"
                )
            demos = demo_order(list(data.keys()), where)
            mask = handle.get("mask")
            if isinstance(mask, h5py.Group):
                plan.masks = {key: int(mask[key].shape[0]) for key in mask if isinstance(mask[key], h5py.Dataset)}
            split = spec.params.get("split")
            if split is not None:
                if split not in plan.masks:
                    available = ", ".join(sorted(plan.masks)) or "none: the file has no mask/ group"
                    raise InvalidParameter(
                        f"{where} has no filter key {split!r} under mask/ (it has: {available})."
                        + did_you_mean(split, plan.masks)
                    )
                listed = [_text(v) for v in np.asarray(mask[split][()]).reshape(-1)]
                missing = sorted(set(listed) - set(demos))
                if missing:
                    raise LoaderError(f"{where}: mask/{split} lists {missing[0]!r}, which is not a demo under data/")
                if len(set(listed)) != len(listed):
                    raise LoaderError(f"{where}: mask/{split} lists a demo twice")
                demos = demo_order(listed, where)
            plan.demos = demos
            for demo in demos:
                plan.lengths[demo] = _demo_length(data[demo], f"{where}: data/{demo}")
                meta = _json_attr(data[demo].attrs.get("ep_meta"))
                if isinstance(meta, dict) and isinstance(meta.get("lang"), str):
                    plan.demo_language[demo] = meta["lang"]
            problem = _json_attr(data.attrs.get("problem_info"))
            if isinstance(problem, dict) and isinstance(problem.get("language_instruction"), str):
                plan.language = problem["language_instruction"]
            plan.attrs = {key: _attr_value(value) for key, value in data.attrs.items()}
        except OSError as exc:  # h5py's read errors: damaged or truncated bytes
            raise CorruptFile(f"{where}: cannot read {path}: {exc}", path=path) from exc
        return plan

    def text(self, demo: str) -> str:
        return self.demo_language.get(demo, self.language or "")


def _demo_length(group: Any, where: str) -> int:
    import h5py

    actions = group.get("actions")
    if not isinstance(actions, h5py.Dataset):
        raise LoaderError(f"{where} has no 'actions' dataset (keys: {sorted(group.keys())})")
    n = int(actions.shape[0])
    declared = group.attrs.get("num_samples")
    if declared is not None and int(declared) != n:
        raise LoaderError(f"{where}: num_samples is {int(declared)} but actions has {n} rows")
    if n < 1:
        raise LoaderError(f"{where} has no steps")
    if not isinstance(group.get("obs"), h5py.Group):
        raise LoaderError(
            f"{where} has no 'obs' group: this is a raw robomimic file (states and actions only). Extract "
            "observations first with robomimic's dataset_states_to_obs.py, or load the low_dim/image file"
        )
    return n


class _Converter:
    """All files' demos in order, grouped into TED chunks of whole demos."""

    def __init__(self, spec: DatasetSpec, ctx: LoaderContext, plans: list[_FilePlan]) -> None:
        self.spec, self.ctx, self.plans = spec, ctx, plans
        self.obs_keys = spec.params.get("obs_keys")
        texts = [p.text(d) for p in plans for d in p.demos]
        self.has_text = any(texts)
        self.text_width = max([1, *(len(t.encode("utf-8")) for t in texts)])
        self.schema: dict[tuple[str, ...], tuple[np.dtype, tuple[int, ...]]] | None = None
        self.pending: list[dict[tuple[str, ...], np.ndarray]] = []
        self.pending_rows = self.pending_bytes = 0
        self.episode_id = 0
        self.episode_map: dict[str, dict[str, int]] = {}
        self.counts = {"terminated": 0, "truncated": 0, "dones_inside_demos": 0, "next_observation_unknown_rows": 0}
        self.absent: set[str] = set()
        self.skipped: dict[str, str] = {}

    def run(self) -> Iterator[TensorDictBase]:
        self.ctx.expect(sum(sum(p.lengths.values()) for p in self.plans))
        if not any(p.demos for p in self.plans):
            raise LoaderError(f"{self.spec.id}: no demo to read (the files, or the split, hold none)")
        for plan in self.plans:
            where = f"{self.spec.id}: {plan.name}"
            self.episode_map[plan.name] = {}
            for demo in plan.demos:
                try:
                    cols = self._demo(plan, demo, f"{where}: data/{demo}")
                except OSError as exc:
                    raise CorruptFile(
                        f"{where}: cannot read data/{demo} of {plan.path}: {exc}", path=plan.path
                    ) from exc
                n = plan.lengths[demo]
                self.episode_map[plan.name][demo] = self.episode_id
                self.episode_id += 1
                self.pending.append(cols)
                self.pending_rows += n
                self.pending_bytes += sum(v.nbytes for v in cols.values())
                self.ctx.progress(n)
                if self.pending_rows >= self.ctx.chunk_rows or self.pending_bytes >= _CHUNK_BYTES:
                    yield self._flush()
        if self.pending:
            yield self._flush()
        self._write_notes()

    def _demo(self, plan: _FilePlan, demo: str, where: str) -> dict[tuple[str, ...], np.ndarray]:
        import h5py

        group = plan.handle["data"][demo]
        n = plan.lengths[demo]
        cols: dict[tuple[str, ...], np.ndarray] = {}

        def rows(ds: Any, label: str) -> np.ndarray:
            if not isinstance(ds, h5py.Dataset):
                raise LoaderError(f"{where}: {label} is not a dataset")
            if ds.shape[:1] != (n,):
                raise LoaderError(f"{where}: {label} has shape {ds.shape}, not {n} rows (num_samples)")
            array = np.asarray(ds[()])
            return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))

        obs, nxt = group["obs"], group.get("next_obs")
        keys = sorted(k for k in obs if isinstance(obs[k], h5py.Dataset))
        if self.obs_keys is not None:
            missing = [k for k in self.obs_keys if k not in keys]
            if missing:
                raise InvalidParameter(
                    f"{where}: obs_keys names {missing[0]!r}, which is not under obs/ (it has: {', '.join(keys)})."
                    + did_you_mean(missing[0], keys)
                )
            keys = sorted(self.obs_keys)
        if not keys:
            raise LoaderError(f"{where}: obs/ holds no dataset")
        unknown = np.zeros(n, dtype=bool)
        for key in keys:
            current = rows(obs[key], f"obs/{key}")
            cols[("observation", key)] = current
            if isinstance(nxt, h5py.Group) and key in nxt:
                following = rows(nxt[key], f"next_obs/{key}")
                if following.dtype != current.dtype or following.shape != current.shape:
                    raise LoaderError(
                        f"{where}: next_obs/{key} is {following.dtype} {following.shape} but obs/{key} is "
                        f"{current.dtype} {current.shape}"
                    )
            else:
                following = np.empty_like(current)
                following[:-1] = current[1:]
                following[-1] = np.nan if current.dtype.kind == "f" else 0
                unknown[-1] = True
            cols[("next", "observation", key)] = following
        self.counts["next_observation_unknown_rows"] += int(unknown.sum())
        cols[UNKNOWN_KEY] = unknown
        cols[("action",)] = rows(group["actions"], "actions")
        if "rewards" in group:
            cols[("next", "reward")] = rows(group["rewards"], "rewards").reshape(n, 1)
        else:
            self.absent.add("rewards")
            cols[("next", "reward")] = np.zeros((n, 1), dtype=np.float32)
        if "dones" in group:
            dones = rows(group["dones"], "dones").reshape(n)
        else:
            self.absent.add("dones")
            dones = np.zeros(n, dtype=np.int64)
        done = dones != 0
        self.counts["dones_inside_demos"] += int(done[:-1].sum())
        terminated = np.zeros((n, 1), dtype=bool)
        truncated = np.zeros((n, 1), dtype=bool)
        terminated[-1, 0] = done[-1]
        truncated[-1, 0] = not done[-1]
        self.counts["terminated" if done[-1] else "truncated"] += 1
        cols[("next", "terminated")] = terminated
        cols[("next", "truncated")] = truncated
        cols[DONES_KEY] = dones

        def visit(name: str, obj: Any) -> None:
            top = name.split("/", 1)[0]
            if top in _CORE or not isinstance(obj, h5py.Dataset):
                return
            key = ("info", *name.split("/"))
            if key == UNKNOWN_KEY:
                self.skipped[name] = "name reserved for the loader's own flag"
            elif obj.shape[:1] != (n,):
                self.skipped[name] = f"shape {obj.shape} is not per-step"
            elif obj.dtype.kind not in "biuf":
                self.skipped[name] = f"dtype {obj.dtype} is not numeric"
            else:
                cols[key] = rows(obj, name)

        group.visititems(visit)
        if self.has_text:
            cols[("task",)] = encode_text([plan.text(demo)] * n, self.text_width, ("task",))
        cols[("episode",)] = np.full(n, self.episode_id, dtype=np.int64)
        self._check_schema(cols, where)
        return cols

    def _check_schema(self, cols: dict[tuple[str, ...], np.ndarray], where: str) -> None:
        """Every demo of a build has the same keys, dtypes and per-row shapes (one schema per build)."""
        schema = {k: (v.dtype, v.shape[1:]) for k, v in cols.items()}
        if self.schema is None:
            self.schema = schema
            return
        if schema == self.schema:
            return
        for key in sorted(set(schema) | set(self.schema)):
            got, want = schema.get(key), self.schema.get(key)
            if got != want:
                label = "/".join(key)
                raise LoaderError(
                    f"{where}: {label!r} is {_describe(got)} but the demos before it have {_describe(want)}; "
                    "a build holds one schema (pass obs_keys=[...] to keep the keys all demos share)"
                )

    def _flush(self) -> TensorDictBase:
        import torch
        from tensordict import TensorDict

        keys = list(self.pending[0])
        merged = {k: np.concatenate([c[k] for c in self.pending]) for k in keys}
        n = int(merged[("episode",)].shape[0])
        out = TensorDict({}, batch_size=[n])
        for key, value in merged.items():
            out.set(key, torch.from_numpy(np.ascontiguousarray(value)))
        self.pending, self.pending_rows, self.pending_bytes = [], 0, 0
        return out

    def _write_notes(self) -> None:
        note = self.ctx.note
        note("episode_map", self.episode_map)
        note("episode_ends", {k: self.counts[k] for k in ("terminated", "truncated")})
        note("dones_inside_demos", self.counts["dones_inside_demos"])
        note("next_observation_unknown_rows", self.counts["next_observation_unknown_rows"])
        note("split", self.spec.params.get("split") or "all demos")
        note("filter_keys", {p.name: dict(sorted(p.masks.items())) for p in self.plans})
        note("file_attributes", {p.name: p.attrs for p in self.plans})
        environment = environment_card([p.attrs for p in self.plans])
        if environment:
            note("environment", environment)
        if self.has_text:
            note("task_text_width", self.text_width)
            note("tasks", sorted({p.text(d) for p in self.plans for d in p.demos}))
        for key in sorted(self.absent):
            note(f"{key}_absent", "some demos have none: 0 there, as robomimic's SequenceDataset reads a missing key")
        if self.skipped:
            note("skipped_keys", dict(sorted(self.skipped.items())))


# -- helpers ---------------------------------------------------------------------------------------
def _describe(entry: tuple[np.dtype, tuple[int, ...]] | None) -> str:
    return "absent" if entry is None else f"{entry[0]} with rows of shape {list(entry[1])}"


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, np.bytes_)) else str(value)


_ENV_TYPES = {1: "robosuite", 2: "gym", 3: "igibson"}  # robomimic.envs.env_base.EnvType


def environment_card(file_attributes: list[dict[str, Any]]) -> dict[str, Any]:
    """The card's ``environment``: robomimic's env metadata (``data.attrs["env_args"]``: ``env_name``, env
    ``type``, ``env_kwargs``), which ``robomimic.utils.env_utils.create_env_from_metadata`` makes the
    environment from. Empty when a file has none, or the files disagree."""
    metas = [attrs.get("env_args") for attrs in file_attributes]
    meta = metas[0] if metas else None
    if not isinstance(meta, dict) or not isinstance(meta.get("env_name"), str) or any(m != meta for m in metas):
        return {}
    kind = meta.get("type")
    package = _ENV_TYPES.get(kind) if isinstance(kind, int) else None
    return {
        "env_id": meta["env_name"],
        "registry": package or f"robomimic env type {kind!r}",
        "registered_by": package,
        "env_meta": meta,
        "make_with": "robomimic.utils.env_utils.create_env_from_metadata(env_meta=card.environment['env_meta'])",
        "from": "the file's data.attrs['env_args'] (robomimic's env metadata)",
    }


def _json_attr(value: Any) -> Any:
    if value is None:
        return None
    try:
        return json.loads(_text(value))
    except (ValueError, UnicodeDecodeError):
        return None


def _attr_value(value: Any) -> Any:
    """An HDF5 attribute as a JSON-able card value (JSON strings parsed, long strings described)."""
    if isinstance(value, (bytes, np.bytes_, str)):
        text = _text(value)
        parsed = _json_attr(text) if text[:1] in "{[" else None
        if parsed is not None:
            return _jsonable(parsed)
        return text if len(text) <= _MAX_ATTR_CHARS else f"<text of {len(text)} characters>"
    return _jsonable(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        if value.size > _MAX_ATTR_CHARS:
            return f"<array shape={list(value.shape)} dtype={value.dtype}>"
        return [_jsonable(v) for v in value.tolist()] if value.ndim else _jsonable(value.item())
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
