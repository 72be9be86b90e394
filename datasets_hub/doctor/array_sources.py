"""HDF5 and npz files before any build, in the two layouts offline-RL data ships in:

- **flat** (D4RL's HDF5, OGBench's npz): one array per key over all steps, ``observations``,
  ``actions``, ``rewards``, ``terminals``, ``timeouts`` (and ``next_observations``); an episode ends
  after a row whose ``terminals`` or ``timeouts`` is set. ``observations`` may be a group of arrays
  (dict observations);
- **per episode** (Minari's ``main_data.hdf5``, RoboSet's rollouts): one group per episode holding
  ``observations`` (T or T+1 rows), ``actions``, ``rewards`` and ``terminations``/``truncations``
  (Minari) or ``done`` (RoboSet). Episodes are taken in the natural order of their group names. A
  group whose last action row is all NaN follows robohive's convention (T+1 rows, row t's reward and
  ``done`` are what arriving at ``s_t`` returned): transition t is rows t -> t+1 and its reward
  ``rewards[t + 1]``, as the RoboSet loader reads it; other groups are read row by row.

``rewards[t]`` (or ``rewards[t + 1]`` under robohive's convention) is read as the reward of step t; a
reward stored one step away from that is what the alignment check reports. A Minari dataset's ``metadata.json`` beside the file declares the action space.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from datasets_hub.doctor.findings import UNREADABLE, Finding
from datasets_hub.doctor.steps import ActionSpace, SourceRead, StepTable

OBS, NEXT_OBS, ACTIONS, REWARDS = "observations", "next_observations", "actions", "rewards"


def _numeric(value: Any) -> bool:
    return np.issubdtype(np.asarray(value).dtype, np.number) or np.asarray(value).dtype == np.bool_


def _flat_table(
    arrays: dict[str, np.ndarray], observations: dict[str, np.ndarray], kind: str, where: str
) -> SourceRead:
    n = len(arrays[ACTIONS])
    term = np.asarray(arrays.get("terminals", np.zeros(n)), dtype=bool).reshape(n)
    trunc = np.asarray(arrays.get("timeouts", np.zeros(n)), dtype=bool).reshape(n)
    ends = term | trunc
    episode = np.concatenate([[0], np.cumsum(ends[:-1])]).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    step = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    table = StepTable(episode=episode, step=step, observations=observations, action=arrays[ACTIONS])
    table.terminated = term if "terminals" in arrays else None
    table.truncated = trunc if "timeouts" in arrays else None
    if REWARDS in arrays:
        table.reward = np.asarray(arrays[REWARDS]).reshape(n)
        table.columns[REWARDS] = table.reward
    table.columns.update(observations)
    table.columns[ACTIONS] = arrays[ACTIONS]
    out = SourceRead(kind=kind, table=table, rows=n, episodes=int(starts.size))
    if "terminals" not in arrays and "timeouts" not in arrays:
        out.notes.append(f"{where}: no terminals/timeouts: the whole file is read as one episode")
    return out


def read_npz(path: Path) -> SourceRead:
    """An npz file of flat arrays (OGBench's layout)."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        out = SourceRead(kind="npz", table=None, rows=0, episodes=0)
        out.findings.append(Finding(UNREADABLE, 1, "files", f"{path.name}: {exc}", column=path.name))
        return out
    if ACTIONS not in arrays or OBS not in arrays:
        out = SourceRead(kind="npz", table=None, rows=0, episodes=0)
        out.notes.append(f"{path.name}: no 'observations'/'actions' arrays ({sorted(arrays)}): layout not recognised")
        return out
    observations = {OBS: arrays[OBS]}
    return _flat_table(arrays, observations, "npz", path.name)


def _natural(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _group_arrays(group: Any, prefix: str) -> dict[str, np.ndarray]:
    """Every numeric dataset under ``group`` (nested groups flattened as ``prefix/a/b``)."""
    import h5py

    out: dict[str, np.ndarray] = {}
    for name in sorted(group):
        item = group[name]
        if isinstance(item, h5py.Group):
            out.update(_group_arrays(item, f"{prefix}/{name}"))
        elif isinstance(item, h5py.Dataset) and item.shape and _numeric(np.empty(0, item.dtype)):
            out[f"{prefix}/{name}"] = item[()]
    return out


def read_hdf5(path: Path) -> SourceRead:
    """An HDF5 file, flat (D4RL) or one group per episode (Minari, RoboSet)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            if isinstance(f.get(ACTIONS), h5py.Dataset):
                return _read_flat_hdf5(f, path)
            groups = [k for k in f if isinstance(f[k], h5py.Group) and ACTIONS in f[k]]
            if not groups:
                out = SourceRead(kind="hdf5", table=None, rows=0, episodes=0)
                out.notes.append(f"{path.name}: neither flat arrays nor episode groups with 'actions': not recognised")
                return out
            return _read_episode_groups(f, sorted(groups, key=_natural), path)
    except OSError as exc:
        out = SourceRead(kind="hdf5", table=None, rows=0, episodes=0)
        out.findings.append(Finding(UNREADABLE, 1, "files", f"{path.name}: {exc}", column=path.name))
        return out


def _read_flat_hdf5(f: Any, path: Path) -> SourceRead:
    import h5py

    arrays = {k: f[k][()] for k in (ACTIONS, REWARDS, "terminals", "timeouts") if isinstance(f.get(k), h5py.Dataset)}
    obs = f.get(OBS)
    observations = _group_arrays(obs, OBS) if isinstance(obs, h5py.Group) else {OBS: obs[()]} if obs is not None else {}
    return _flat_table(arrays, observations, "hdf5", path.name)


def _read_episode_groups(f: Any, groups: list[str], path: Path) -> SourceRead:
    import h5py

    columns: dict[str, list[np.ndarray]] = {}
    nexts: dict[str, list[np.ndarray]] = {}
    episode, term, trunc = [], [], []
    has_flags = has_truncations = False
    for e, name in enumerate(groups):
        g = f[name]
        actions = g[ACTIONS][()]
        rows = len(actions)
        # robohive's convention: rows 0..T are states, the last action row is NaN (never executed), and
        # rewards/done of row t are what arriving at s_t returned: transition t is rows t -> t+1
        robohive = (
            rows > 1
            and np.issubdtype(actions.dtype, np.floating)
            and bool(np.isnan(actions[-1]).all())
            and not np.isnan(actions[:-1]).all()
        )
        t = rows - 1 if robohive else rows
        arrival = slice(1, t + 1) if robohive else slice(0, t)
        obs_item = g.get(OBS)
        obs = (
            _group_arrays(obs_item, OBS)
            if isinstance(obs_item, h5py.Group)
            else {OBS: obs_item[()]}
            if obs_item is not None
            else {}
        )
        for key, values in obs.items():
            columns.setdefault(key, []).append(values[:t])
            if len(values) == t + 1:  # the final state is in the file (Minari: T+1 observations; robohive)
                nexts.setdefault(key, []).append(values[1:])
        columns.setdefault(ACTIONS, []).append(actions[:t])
        if REWARDS in g:
            columns.setdefault(REWARDS, []).append(np.asarray(g[REWARDS][()]).reshape(rows, -1)[arrival, 0])
        flags = {
            k: np.asarray(g[k][()]).reshape(-1)[arrival].astype(bool)
            for k in ("terminations", "truncations", "done")
            if k in g
        }
        has_flags = has_flags or bool(flags)
        has_truncations = has_truncations or "truncations" in flags
        term.append(flags.get("terminations", flags.get("done", np.zeros(t, bool))))
        trunc.append(flags.get("truncations", np.zeros(t, bool)))
        episode.append(np.full(t, e, np.int64))
    n = sum(len(a) for a in episode)
    joined = {k: np.concatenate(v) for k, v in columns.items() if sum(len(x) for x in v) == n}
    table = StepTable(
        episode=np.concatenate(episode),
        step=np.concatenate([np.arange(len(a)) for a in episode]),
        observations={k: v for k, v in joined.items() if k.startswith(OBS)},
        action=joined.get(ACTIONS),
        reward=joined.get(REWARDS),
    )
    table.next_observations = {k: np.concatenate(v) for k, v in nexts.items() if sum(len(x) for x in v) == n}
    if has_flags:
        table.terminated = np.concatenate(term)
        table.truncated = np.concatenate(trunc) if has_truncations else None
    table.columns = dict(joined)
    out = SourceRead(kind="hdf5", table=table, rows=n, episodes=len(groups))
    metadata = path.parent / "metadata.json"
    if metadata.is_file():  # a Minari dataset: data/metadata.json beside data/main_data.hdf5
        try:
            space = json.loads(metadata.read_text()).get("action_space")
            space = json.loads(space) if isinstance(space, str) else space
            if isinstance(space, dict):
                table.action_space = ActionSpace.from_gymnasium_json(space, str(metadata))
        except (OSError, ValueError) as exc:
            out.notes.append(f"{metadata}: unreadable ({exc}); actions not checked against a declared space")
    return out
