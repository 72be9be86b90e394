"""RoboSet (simulation) as TorchRL Episode Data: ``roboset/<folder>/<task>``, e.g.
``roboset/FK1-v4(expert)/FK1_MicroOpenRandom_v2d-v4``.

**Source.** The Hugging Face dataset ``jdvakil/RoboSet_Sim``: folders such as ``FK1-v4(expert)``,
``FK1-v4(human)/human_demos_by_task`` or ``DAPG(expert)``, each task one or more HDF5 files in
robohive's logger format. The id's ``<folder>/<task>`` is a path prefix in that repo; the task's
files are the ``.h5`` files whose path starts with it (followed by ``/``, ``_``, ``-``, ``.`` or
nothing), fetched as ``hf://datasets/jdvakil/RoboSet_Sim/<path>`` through huggingface_hub
(``HF_ENDPOINT``, ``HF_HUB_OFFLINE``, ``HF_TOKEN`` apply).

**Which files, and the fast path.** ``resources()`` runs on every ``load()`` (it is part of the
build fingerprint), so it opens no connection when it can avoid it: a ``files`` parameter (in the
catalogue entry or passed to ``load``) names the files and nothing is listed; otherwise the repo
is listed once per process with ``list_hf_files`` (one small API call when online; offline, the
listing comes from the Hugging Face cache, i.e. the files fetched before). Pin ``files`` (and
``revision``) to make opening a cached build network-free.

**File layout** (robohive ``Trace.save``): one group per rollout, ``Trial<N>``, holding
``observations`` (a ``[rows, D]`` array, or a group of arrays, one per observation key),
``actions``, ``rewards``, ``done``, ``time`` and ``env_infos/...`` (nested groups: ``obs_dict``,
``proprio_dict``, ``visual_dict`` with uint8 camera images such as ``rgb:left_cam:240x424:2d``,
``rwd_dict``, …), every dataset with one row per logged time step. Files are read in sorted path
order, trials in numeric order (``Trial2`` before ``Trial10``); other root groups holding an
``actions`` dataset are read too (natural order), anything else is skipped and noted.

**Two row conventions** (parameter ``layout``):

``"robohive"`` — what robohive's rollout and teleop loggers write (logger README: "a trajectory of
horizon h has h+1 tuples … we record the last actions as NaN"). Row ``t`` holds the state ``s_t``,
the action ``a_t`` taken from it, and the ``rewards``/``done``/``env_infos`` the environment
returned on *arriving* at ``s_t`` (row 0: the values at reset). The last row is the final state;
its action is never executed (NaN). A trial of ``T + 1`` rows gives ``T`` transitions:

=============================  ==============================================================
upstream (trial rows 0..T)     TED (transitions t = 0..T-1)
=============================  ==============================================================
``observations[t]``            ``observation[t]``; ``("next", "observation")[t]`` =
                               ``observations[t + 1]`` (exact: the final state is in the file)
``actions[t]``, t < T          ``action[t]`` (the NaN action of row T is dropped, not a step)
``rewards[t + 1]``             ``("next", "reward")[t]`` (``rewards[0]``, at reset, is no
                               transition's reward and is not kept)
``done[t + 1]``                ``("info", "upstream_done")[t]``; on the last transition it is
                               ``("next", "terminated")``, and a trial whose final row is not
                               done is ``("next", "truncated")`` (it stopped at the horizon)
``env_infos/<a>/<b>[t]``       ``("info", a, b)[t]`` and ``("next", "info", a, b)[t]`` =
                               row t + 1 (stored once, T + 1 rows, images uint8 as stored)
other per-row arrays of the    ``("info", "trial", name)`` and ``("next", "info", "trial", name)``
trial (``time``)               likewise: robohive logs both a top-level ``time`` (the rollout's
                               clock) and ``env_infos/time``; they stay two keys
=============================  ==============================================================

``"paths"`` — the older mjrl/gym "paths" convention: ``T`` rows, row ``t`` is ``(s_t, a_t, r_t,
done_t, info_t)`` with the reward and ``done`` of that step and the info returned by it. The
final next observation was never recorded: we do not fabricate it. The last row of each trial
keeps ``("next", "observation")`` = NaN (0 for integer observations) and
``("info", "next_observation_unknown")`` = True (the D4RL loader's rule), counted in the card;
``env_infos`` are per-step ``("info", ...)`` keys with no ``next`` copy.

``"auto"`` (default) picks ``"robohive"`` for a trial whose last action row is entirely NaN
(robohive's end marker) and ``"paths"`` otherwise; every trial of a build must agree, else the
build fails and says to pass ``layout=`` explicitly. ``("info", "next_observation_unknown")``
exists in both layouts (all False for ``"robohive"``).

**done → terminated / truncated.** robohive's ``done`` is the task's own termination signal
(``rwd_dict["done"]``), not a time limit: the gym ``TimeLimit`` wrapper (``max_episode_steps``)
ends an episode by truncation, and the loggers stop a rollout at ``horizon`` or at ``done``. So a
trial is one episode that ends ``terminated`` if its final ``done`` is set and ``truncated``
otherwise. A ``done`` inside a trial (rollouts logged with ``terminate_at_done=False`` go on after
it) does not end the episode — TED episodes end only at their last row — and is kept in
``("info", "upstream_done")`` and counted in the card.

**Episode ids** are 0..E-1 in reading order, unique over the build: the ``Trial0`` of two files
are two episodes, never merged. The card records the mapping (``episode_map``: file -> trial
-> episode id) and the per-file counts.

Parameters: ``files`` (list of ``.h5`` paths in the repo; a subset of the task's files),
``layout`` (``"auto"``, ``"robohive"``, ``"paths"``), ``repo`` (default ``jdvakil/RoboSet_Sim``),
``revision`` (a branch, tag or commit of the repo), ``path`` (the repo prefix, default the id's
name).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np

from datasets_hub.errors import DownloadError, InvalidParameter, LoaderError, did_you_mean
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext, Resource
from datasets_hub.process_locks import ProcessLock

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    from tensordict import TensorDictBase

REPO = "jdvakil/RoboSet_Sim"
PARAMS = ("files", "layout", "path", "repo", "revision")
LAYOUTS = ("auto", "robohive", "paths")
UNKNOWN_KEY = ("info", "next_observation_unknown")
DONE_KEY = ("info", "upstream_done")
_RESERVED = {UNKNOWN_KEY, DONE_KEY}
_CORE = ("observations", "actions", "rewards", "done")
_CHUNK_BYTES = 256 << 20  # a chunk of image trials is cut by bytes long before chunk_rows
_listings: dict[tuple[Any, ...], list[str]] = {}
_listings_lock = ProcessLock()


class RoboSetLoader(Loader):
    """Loader for RoboSet_Sim HDF5 files (see the module docstring for the exact semantics)."""

    name = "roboset"
    requires = ("h5py", "huggingface_hub")
    install_hint = "pip install h5py 'huggingface_hub>=0.23'"
    format_version = 2  # 2: trial-level arrays under info/trial (no key collisions)

    # -- parameters ------------------------------------------------------------------------------
    def check_params(self, spec: DatasetSpec) -> None:
        params = spec.params
        self.reject_unknown_params(spec, PARAMS)
        layout = params.get("layout", "auto")
        if layout not in LAYOUTS:
            raise InvalidParameter(
                f"{spec.id}: layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}"
                f".{did_you_mean(str(layout), LAYOUTS)}"
            )
        for key in ("repo", "revision", "path"):
            value = params.get(key)
            if value is not None and (not isinstance(value, str) or not value.strip("/")):
                raise InvalidParameter(f"{spec.id}: {key} must be a non-empty string, got {value!r}")
        repo = params.get("repo", REPO)
        if repo.count("/") != 1:
            raise InvalidParameter(f"{spec.id}: repo must look like 'owner/name' (e.g. {REPO!r}), got {repo!r}")
        files = params.get("files")
        if files is not None:
            if isinstance(files, str):
                files = [files]
            if not isinstance(files, list) or not files or not all(isinstance(f, str) and f for f in files):
                raise InvalidParameter(
                    f"{spec.id}: files must be a non-empty list of .h5 paths in the repo, e.g. "
                    f"['{_prefix(spec)}/<file>.h5'], got {files!r}"
                )
            for f in files:
                parts = f.strip("/").split("/")
                if not f.endswith(".h5") or any(p in ("", ".", "..") for p in parts):
                    raise InvalidParameter(
                        f"{spec.id}: {f!r} in files is not an .h5 path in the repo "
                        f"(paths look like '{_prefix(spec)}/<file>.h5')"
                    )
            if len(set(files)) != len(files):
                raise InvalidParameter(f"{spec.id}: files lists the same path twice: {files!r}")

    # -- what to fetch ---------------------------------------------------------------------------
    def resources(self, spec: DatasetSpec) -> list[Resource]:
        self.check_params(spec)
        if not spec.params.get("files") and spec.resources:
            return list(spec.resources)  # a catalogue entry that names its files (and checksums)
        repo = spec.params.get("repo", REPO)
        revision = spec.params.get("revision")
        files = spec.params.get("files")
        if files is not None:
            paths = sorted(f.strip("/") for f in ([files] if isinstance(files, str) else files))
        else:
            paths = task_files(repo, _prefix(spec), revision)
            if not paths:
                raise InvalidParameter(
                    f"{spec.id}: no .h5 file in the Hugging Face dataset {repo} starts with {_prefix(spec)!r}. "
                    f"Check the id (`datasets-hub list --loader roboset`) or pass files=['<path>.h5', …]"
                )
        return [_resource(repo, path, revision) for path in paths]

    # -- conversion ------------------------------------------------------------------------------
    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDictBase]:
        self.check_params(spec)
        if not files:
            raise LoaderError(f"{spec.id}: no file to read")
        import h5py

        converter = _Converter(spec, ctx, spec.params.get("layout", "auto"))
        repo, revision = spec.params.get("repo", REPO), spec.params.get("revision")
        strip = f"{repo}@{revision}/" if revision else f"{repo}/"
        for name in sorted(files):
            path = Path(files[name])
            label = name.removeprefix(strip)  # the path in the repo, for the card
            try:
                handle = h5py.File(path, "r")
            except OSError as exc:
                raise LoaderError(
                    f"{spec.id}: {path} is not a readable HDF5 file ({exc}); delete it and download again"
                ) from exc
            with handle:
                try:
                    yield from converter.read_file(label, handle)
                except (KeyError, OSError, ValueError, TypeError) as exc:
                    raise LoaderError(f"{spec.id}: cannot read {label}: {exc}") from exc
        yield from converter.flush()
        converter.write_notes()
        ctx.note("file_list", _file_list_source(spec))


def _file_list_source(spec: DatasetSpec) -> str:
    if spec.params.get("files"):
        return "the files parameter"
    if spec.resources:
        return "the catalogue entry's resources"
    from datasets_hub.sources import offline

    if offline():
        return (
            "listed offline from the Hugging Face cache: only the task's files fetched before; pass "
            "files=[...] or list online for the full task"
        )
    return f"listed from the Hub ({spec.params.get('repo', REPO)}, prefix {_prefix(spec)!r})"


# -- file selection ------------------------------------------------------------------------------
def _prefix(spec: DatasetSpec) -> str:
    return str(spec.params.get("path") or spec.name).strip("/")


def _resource(repo: str, path: str, revision: str | None) -> Resource:
    url = f"hf://datasets/{repo}/{quote(path, safe='/()+,=-_.~')}" + (f"@{revision}" if revision else "")
    name = f"{repo}@{revision}/{path}" if revision else f"{repo}/{path}"
    return Resource(name=name, urls=(url,))


def matches_task(path: str, prefix: str) -> bool:
    """Whether repo file ``path`` belongs to the task at ``prefix`` (an ``.h5`` file named by the
    prefix, or below it: the prefix is followed by nothing, ``/``, ``_``, ``-`` or ``.``)."""
    if not path.endswith(".h5") or not path.startswith(prefix):
        return False
    rest = path[len(prefix) :]
    return rest == ".h5" or rest[:1] in ("/", "_", "-", ".")


def task_files(repo: str, prefix: str, revision: str | None = None) -> list[str]:
    """Sorted ``.h5`` paths of the task at ``prefix``, listed once per process (see module doc)."""
    from datasets_hub.sources import hf_endpoint, hf_list_files, offline

    is_offline = offline()
    key = (hf_endpoint(), repo, revision, prefix, is_offline)
    with _listings_lock:
        if key not in _listings:
            try:
                listed = hf_list_files(repo, revision=revision, prefix=prefix)
            except DownloadError as exc:
                raise DownloadError(
                    f"cannot find the files of RoboSet task {prefix!r}: {exc} Or name them: "
                    f"load(..., files=['{prefix}/<file>.h5'])"
                ) from exc
            _listings[key] = sorted(p for p in listed if matches_task(p, prefix))
        return list(_listings[key])


# -- reading -------------------------------------------------------------------------------------
def _natural(name: str) -> tuple[str, int, str]:
    m = re.match(r"^(.*?)(\d+)$", name)
    return (m.group(1), int(m.group(2)), name) if m else (name, -1, name)


def _native(dtype: np.dtype) -> np.dtype:
    return dtype if dtype.isnative else dtype.newbyteorder("=")


def _leaves(group: Any, base: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    import h5py

    out: list[tuple[tuple[str, ...], Any]] = []

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            out.append((base + tuple(name.split("/")), obj))

    group.visititems(visit)
    return sorted(out, key=lambda kv: kv[0])


class _Converter:
    """Trials in, TED chunks of whole trials out; counts facts for the card."""

    def __init__(self, spec: DatasetSpec, ctx: LoaderContext, layout: str) -> None:
        self.spec, self.ctx = spec, ctx
        self.requested = layout
        self.layout: str | None = None if layout == "auto" else layout
        self.layout_source = "" if layout == "auto" else "parameter"
        self.episode = 0
        self.pending: list[dict[tuple[str, ...], np.ndarray]] = []
        self.pending_rows = self.pending_bytes = 0
        self.schema: dict[tuple[str, ...], tuple[np.dtype, tuple[int, ...]]] | None = None
        self.first_trial = ""
        self.episode_map: dict[str, dict[str, int]] = {}
        self.skipped: dict[str, str] = {}
        self.ends = {"terminated": 0, "truncated": 0}
        self.inner_done = 0
        self.unknown_rows = 0
        self.finite_final_actions = 0
        self.empty_trials: list[str] = []

    # one file
    def read_file(self, name: str, f: Any) -> Iterator[TensorDictBase]:
        import h5py

        trials = []
        for key in f.keys():
            obj = f[key]
            if isinstance(obj, h5py.Group) and isinstance(obj.get("actions"), h5py.Dataset):
                trials.append(key)
            else:
                self.skipped[f"{name}:{key}"] = "not a rollout group (no 'actions' dataset)"
        if not trials:
            raise LoaderError(
                f"{self.spec.id}: {name} holds no Trial<N> group with an 'actions' dataset "
                f"(root keys: {sorted(f.keys())}); it is not a robohive rollout file"
            )
        mapping = self.episode_map.setdefault(name, {})
        for trial in sorted(trials, key=_natural):
            cols = self._trial(name, trial, f[trial])
            if cols is None:
                continue
            mapping[trial] = self.episode
            self.episode += 1
            n = len(cols[("episode",)])
            self.pending.append(cols)
            self.pending_rows += n
            self.pending_bytes += sum(v.nbytes for v in cols.values())
            self.ctx.progress(n)
            if self.pending_rows >= self.ctx.chunk_rows or self.pending_bytes >= _CHUNK_BYTES:
                yield from self.flush()

    def flush(self) -> Iterator[TensorDictBase]:
        import torch
        from tensordict import TensorDict

        if not self.pending:
            return
        keys = list(self.pending[0])
        merged = {
            k: np.concatenate([c[k] for c in self.pending]) if len(self.pending) > 1 else self.pending[0][k]
            for k in keys
        }
        n = len(merged[("episode",)])
        self.pending, self.pending_rows, self.pending_bytes = [], 0, 0
        out = TensorDict({}, batch_size=[n])
        for key, value in merged.items():
            out.set(key, torch.from_numpy(np.ascontiguousarray(value)))
        yield out

    # one trial
    def _check_unique(self, where: str, leaves: list[tuple[tuple[str, ...], Any]]) -> None:
        """No two upstream datasets may become one output key (one would silently replace the other)."""
        seen: dict[tuple[str, ...], str] = {}
        for key, ds in leaves:
            if key in seen:
                raise LoaderError(
                    f"{self.spec.id}: {where}: the upstream datasets {seen[key]!r} and {ds.name!r} would both "
                    f"become {'/'.join(key)!r}; rename one of them in the file (h5py: f.move(old, new)) and load again"
                )
            seen[key] = ds.name

    def _trial(self, name: str, trial: str, g: Any) -> dict[tuple[str, ...], np.ndarray] | None:
        import h5py

        where = f"{name}:{trial}"
        for entry in _CORE:
            if entry not in g:
                raise LoaderError(
                    f"{self.spec.id}: {where} has no {entry!r} (keys: {sorted(g.keys())}); robohive "
                    "rollout groups hold observations, actions, rewards and done"
                )
        rows = int(g["actions"].shape[0])
        actions = np.asarray(g["actions"][()], dtype=_native(g["actions"].dtype))
        layout = self._layout(where, actions)
        steps = rows - 1 if layout == "robohive" else rows
        if steps < 1:
            self.empty_trials.append(where)
            return None
        obs = (
            _leaves(g["observations"], ("observation",))
            if isinstance(g["observations"], h5py.Group)
            else [(("observation",), g["observations"])]
        )
        infos: list[tuple[tuple[str, ...], Any]] = []
        for entry in g.keys():
            obj = g[entry]
            if entry in _CORE:
                continue
            # env_infos/<path> -> ("info", <path>); every other trial-level array or group X (robohive
            # logs the env clock as a top-level `time`, next to env_infos/time) -> ("info", "trial", X)
            if entry == "env_infos" and isinstance(obj, h5py.Group):
                infos += _leaves(obj, ("info",))
            elif isinstance(obj, h5py.Group):
                infos += _leaves(obj, ("info", "trial", entry))
            else:
                infos.append((("info", "trial", entry), obj))
        self._check_unique(where, obs + infos)
        for _key, ds in obs:
            if ds.shape[:1] != (rows,):
                raise LoaderError(
                    f"{self.spec.id}: {where}/{ds.name.rsplit('/', 1)[-1]} has "
                    f"{ds.shape[0] if ds.shape else 0} rows but actions has {rows}"
                )
        for entry in ("rewards", "done"):
            if g[entry].shape[:1] != (rows,):
                raise LoaderError(f"{self.spec.id}: {where}/{entry} has shape {g[entry].shape}, expected {rows} rows")
        kept = []
        for key, ds in infos:
            label = ds.name.split("/", 2)[-1]
            if key in _RESERVED:
                self.skipped[label] = "name reserved for the loader's own flag"
            elif ds.shape[:1] != (rows,):
                self.skipped[label] = f"shape {ds.shape} is not per-row ({rows} rows)"
            elif ds.dtype.kind not in "biuf":
                self.skipped[label] = f"dtype {ds.dtype} is not numeric"
            else:
                kept.append((key, ds))

        cols: dict[tuple[str, ...], np.ndarray] = {}
        rewards = np.asarray(g["rewards"][()], dtype=_native(g["rewards"].dtype)).reshape(rows, -1)
        done = np.asarray(np.asarray(g["done"][()]).reshape(rows, -1).astype(bool).any(axis=1))
        unknown = np.zeros(steps, dtype=bool)
        if layout == "robohive":
            if np.isfinite(actions[-1]).any():
                self.finite_final_actions += 1
            cols[("action",)] = actions[:steps]
            cols[("next", "reward")] = rewards[1:]
            step_done = done[1:]
            for key, ds in obs + kept:
                value = np.asarray(ds[()], dtype=_native(ds.dtype))
                cols[key], cols[("next", *key)] = value[:-1], value[1:]
        else:
            cols[("action",)] = actions
            cols[("next", "reward")] = rewards
            step_done = done
            for key, ds in obs:
                value = np.asarray(ds[()], dtype=_native(ds.dtype))
                nxt = np.empty_like(value)
                nxt[:-1] = value[1:]
                nxt[-1] = np.nan if value.dtype.kind == "f" else 0
                cols[key], cols[("next", *key)] = value, nxt
            for key, ds in kept:
                cols[key] = np.asarray(ds[()], dtype=_native(ds.dtype))
            unknown[-1] = True
            self.unknown_rows += 1
        terminated = np.zeros((steps, 1), dtype=bool)
        truncated = np.zeros((steps, 1), dtype=bool)
        if step_done[-1]:
            terminated[-1] = True
            self.ends["terminated"] += 1
        else:
            truncated[-1] = True
            self.ends["truncated"] += 1
        self.inner_done += int(step_done[:-1].sum())
        cols[("next", "terminated")] = terminated
        cols[("next", "truncated")] = truncated
        cols[DONE_KEY] = step_done.copy()
        cols[UNKNOWN_KEY] = unknown
        cols[("episode",)] = np.full(steps, self.episode, dtype=np.int64)
        self._check_schema(where, cols)
        return cols

    def _layout(self, where: str, actions: np.ndarray) -> str:
        if self.requested != "auto":
            return self.requested
        found = (
            "robohive" if actions.shape[0] and actions.dtype.kind == "f" and np.isnan(actions[-1]).all() else "paths"
        )
        if self.layout is None:
            self.layout, self.layout_source = found, f"auto (from {where})"
        elif found != self.layout:
            raise LoaderError(
                f"{self.spec.id}: {where} looks like the {found!r} layout (its last action row is "
                f"{'all NaN' if found == 'robohive' else 'not NaN'}) but earlier trials looked like "
                f"{self.layout!r}. Pass layout='robohive' or layout='paths' to read every trial one way "
                "(see the datasets_hub.loaders.roboset.loader docstring)"
            )
        return found

    def _check_schema(self, where: str, cols: dict[tuple[str, ...], np.ndarray]) -> None:
        schema = {k: (v.dtype, v.shape[1:]) for k, v in cols.items()}
        if self.schema is None:
            self.schema, self.first_trial = schema, where
            return
        if schema != self.schema:
            missing = sorted("/".join(k) for k in set(self.schema) - set(schema))
            extra = sorted("/".join(k) for k in set(schema) - set(self.schema))
            changed = sorted("/".join(k) for k in set(schema) & set(self.schema) if schema[k] != self.schema[k])
            raise LoaderError(
                f"{self.spec.id}: {where} does not have the keys, dtypes and shapes of {self.first_trial} "
                f"(missing {missing}, unexpected {extra}, different dtype/shape {changed}); one build holds "
                "one schema: select files that agree with files=[…]"
            )

    def write_notes(self) -> None:
        note = self.ctx.note
        note("episodes", self.episode)
        note("episode_map", self.episode_map)
        note("trials_per_file", {name: len(m) for name, m in self.episode_map.items()})
        note("layout", f"{self.layout or self.requested} ({self.layout_source or 'no trial read'})")
        note("episode_ends", dict(self.ends))
        note(
            "done_mapping",
            "robohive's done (the task's termination signal) on a trial's last transition -> "
            "terminated; a trial ending without done stopped at its horizon -> truncated; "
            "done inside a trial -> ('info', 'upstream_done') only",
        )
        note("upstream_done_inside_trials", self.inner_done)
        note("next_observation_unknown_rows", self.unknown_rows)
        if self.unknown_rows:
            note(
                "next_observation_unknown",
                f"{self.unknown_rows} rows (the last of each trial, 'paths' layout) have no next observation in "
                "the file: ('next', 'observation') is NaN (0 for integers) there and "
                "('info', 'next_observation_unknown') is True",
            )
        if self.layout == "robohive":
            note(
                "dropped_rows",
                "per trial: the final row's action (never executed; NaN in robohive logs) and "
                "rewards[0]/done[0] (values at reset, no transition's)",
            )
            if self.finite_final_actions:
                note("final_actions_not_nan", self.finite_final_actions)
        if self.empty_trials:
            note("trials_without_transitions", self.empty_trials)
        if self.skipped:
            note("skipped_keys", dict(sorted(self.skipped.items())))
