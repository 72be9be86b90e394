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
  ``rewards[t + 1]``, as the RoboSet loader reads it; other groups are read row by row. Beyond
  ``max_rows`` rows, episodes are drawn at random.

Image-like arrays (more than :data:`LOW_DIM` values per row) are never read whole: :data:`FRAMES` frames
spread over the rows read go to the numeric checks (npz: its first frames, the stream cannot seek).

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


#: a column with more values per row than this is image-like: only sampled frames are read
LOW_DIM = 1024
#: how many frames of each image-like column the numeric checks look at
FRAMES = 64


def _chosen_ranges(ends: np.ndarray, max_rows: int, seed: int, *, prefix: bool) -> tuple[list[tuple[int, int]], bool]:
    """Row ranges of whole episodes to read: all rows when they fit in ``max_rows``, else episodes drawn
    at random (``prefix``: the first ones, for a source that can only be read from the start)."""
    n = ends.size
    if n <= max_rows:
        return [(0, n)], False
    stops = np.flatnonzero(ends) + 1
    stops = np.r_[stops[stops < n], n]
    starts = np.r_[0, stops[:-1]]
    order = np.arange(starts.size) if prefix else np.random.default_rng(seed).permutation(starts.size)
    k = int(np.searchsorted(np.cumsum(stops[order] - starts[order]), max_rows)) + 1
    picked = np.sort(order[:k])
    return [(int(starts[i]), int(stops[i])) for i in picked], True


def _flat_table(
    read: Any,
    keys: dict[str, tuple[int, ...]],
    n: int,
    *,
    max_rows: int,
    seed: int,
    prefix: bool,
    kind: str,
    where: str,
) -> SourceRead:
    """The step table of a flat source: ``keys`` maps each array to its row shape, ``read(key, ranges)``
    returns the rows of ``ranges`` (``frames=True``: :data:`FRAMES` rows spread over them)."""
    flags = {k: np.asarray(read(k, [(0, n)]), dtype=bool).reshape(n) for k in ("terminals", "timeouts") if k in keys}
    ends = np.zeros(n, bool)
    for values in flags.values():
        ends |= values
    ranges, sampled = _chosen_ranges(ends, max_rows, seed, prefix=prefix)
    rows = np.concatenate([np.arange(a, b) for a, b in ranges])
    episode_all = np.concatenate([[0], np.cumsum(ends[:-1])]).astype(np.int64)
    episode = episode_all[rows]
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    step = np.arange(rows.size) - np.repeat(starts, np.diff(np.r_[starts, rows.size]))
    table = StepTable(episode=episode, step=step)
    table.terminated = flags["terminals"][rows] if "terminals" in flags else None
    table.truncated = flags["timeouts"][rows] if "timeouts" in flags else None
    for key, shape in keys.items():
        if not (key in (ACTIONS, REWARDS, OBS) or key.startswith(OBS + "/")):
            continue
        if int(np.prod(shape, dtype=np.int64)) > LOW_DIM:
            frames = read(key, ranges, frames=True)
            if frames is not None:
                table.frames[key] = frames
            continue
        values = read(key, ranges)
        if key == ACTIONS:
            table.action = values
        elif key == REWARDS:
            table.reward = values.reshape(rows.size)
        else:
            table.observations[key] = values
        table.columns[key] = values
    out = SourceRead(kind=kind, table=table, rows=n, episodes=int(episode_all[-1]) + 1 if n else 0, sampled=sampled)
    if not flags:
        out.notes.append(f"{where}: no terminals/timeouts: the whole file is read as one episode")
    if sampled:
        how = "its first whole episodes" if prefix else "whole episodes drawn at random"
        out.notes.append(f"{where}: {rows.size:,} of {n:,} rows read ({how})")
    return out


def _npz_member(archive: Any, key: str) -> tuple[Any, tuple[int, ...], np.dtype, bool]:
    """An opened ``.npy`` member of an npz archive, positioned at its data: ``(stream, shape, dtype, fortran)``."""
    stream = archive.open(key + ".npy")
    version = np.lib.format.read_magic(stream)
    header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = header(stream)
    return stream, tuple(shape), dtype, bool(fortran)


def read_npz(path: Path, *, max_rows: int, seed: int = 0) -> SourceRead:
    """An npz file of flat arrays (OGBench's layout), streamed: at most about ``max_rows`` rows are
    decompressed, and only the first :data:`FRAMES` rows of an image-like array."""
    try:
        archive = zipfile.ZipFile(path)
        with archive:
            headers = {}
            for name in archive.namelist():
                if name.endswith(".npy"):
                    stream, shape, dtype, fortran = _npz_member(archive, name[:-4])
                    stream.close()
                    headers[name[:-4]] = (shape, dtype, fortran)
            if ACTIONS not in headers or OBS not in headers:
                out = SourceRead(kind="npz", table=None, rows=0, episodes=0)
                out.notes.append(
                    f"{path.name}: no 'observations'/'actions' arrays ({sorted(headers)}): layout not recognised"
                )
                return out
            n = headers[ACTIONS][0][0] if headers[ACTIONS][0] else 0

            def read(key: str, ranges: list[tuple[int, int]], frames: bool = False) -> np.ndarray | None:
                shape, dtype, fortran = headers[key]
                stop = min(FRAMES, n) if frames else ranges[-1][1]  # ranges are a prefix here
                stream, *_ = _npz_member(archive, key)
                with stream:
                    if fortran and len(shape) > 1:  # column-major: rows are not contiguous, read it whole
                        return np.load(path)[key][:stop]
                    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
                    data = stream.read(stop * row_bytes)
                if len(data) < stop * row_bytes:
                    raise EOFError(f"{key}.npy ends after {len(data) // max(row_bytes, 1)} of {shape[0]} rows")
                return np.frombuffer(data, dtype=dtype).reshape(stop, *shape[1:])

            keys = {k: h[0][1:] for k, h in headers.items() if h[0] and h[0][0] == n}
            return _flat_table(read, keys, n, max_rows=max_rows, seed=seed, prefix=True, kind="npz", where=path.name)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        out = SourceRead(kind="npz", table=None, rows=0, episodes=0)
        out.findings.append(Finding(UNREADABLE, 1, "files", f"{path.name}: {exc}", column=path.name))
        return out


def _natural(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _group_datasets(group: Any, prefix: str) -> dict[str, Any]:
    """Every numeric dataset under ``group`` (nested groups flattened as ``prefix/a/b``), unread."""
    import h5py

    out: dict[str, Any] = {}
    for name in sorted(group):
        item = group[name]
        if isinstance(item, h5py.Group):
            out.update(_group_datasets(item, f"{prefix}/{name}"))
        elif isinstance(item, h5py.Dataset) and item.shape and _numeric(np.empty(0, item.dtype)):
            out[f"{prefix}/{name}"] = item
    return out


def read_hdf5(path: Path, *, max_rows: int, seed: int = 0) -> SourceRead:
    """An HDF5 file, flat (D4RL: at most about ``max_rows`` rows read, as whole episodes drawn at random)
    or one group per episode (Minari, RoboSet; read whole)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            if isinstance(f.get(ACTIONS), h5py.Dataset):
                return _read_flat_hdf5(f, path, max_rows=max_rows, seed=seed)
            groups = [k for k in f if isinstance(f[k], h5py.Group) and ACTIONS in f[k]]
            if not groups:
                out = SourceRead(kind="hdf5", table=None, rows=0, episodes=0)
                out.notes.append(f"{path.name}: neither flat arrays nor episode groups with 'actions': not recognised")
                return out
            return _read_episode_groups(f, sorted(groups, key=_natural), path, max_rows=max_rows, seed=seed)
    except OSError as exc:
        out = SourceRead(kind="hdf5", table=None, rows=0, episodes=0)
        out.findings.append(Finding(UNREADABLE, 1, "files", f"{path.name}: {exc}", column=path.name))
        return out


def _read_flat_hdf5(f: Any, path: Path, *, max_rows: int, seed: int) -> SourceRead:
    import h5py

    datasets: dict[str, Any] = {}
    for key in (ACTIONS, REWARDS, "terminals", "timeouts"):
        if isinstance(f.get(key), h5py.Dataset):
            datasets[key] = f[key]
    obs = f.get(OBS)
    if isinstance(obs, h5py.Group):  # dict observations: one dataset per key
        obs.visititems(
            lambda name, item: datasets.setdefault(f"{OBS}/{name}", item) if isinstance(item, h5py.Dataset) else None
        )
    elif isinstance(obs, h5py.Dataset):
        datasets[OBS] = obs
    n = int(datasets[ACTIONS].shape[0])
    datasets = {k: d for k, d in datasets.items() if d.shape and d.shape[0] == n and _numeric(np.empty(0, d.dtype))}

    def read(key: str, ranges: list[tuple[int, int]], frames: bool = False) -> np.ndarray:
        ds = datasets[key]
        if frames:
            total = sum(b - a for a, b in ranges)
            picks = np.linspace(0, total - 1, min(FRAMES, total)).astype(np.int64)
            rows = np.concatenate([np.arange(a, b) for a, b in ranges])[picks]
            return np.stack([ds[int(r)] for r in np.unique(rows)])
        return np.concatenate([ds[a:b] for a, b in ranges]) if len(ranges) > 1 else ds[ranges[0][0] : ranges[0][1]]

    keys = {k: tuple(d.shape[1:]) for k, d in datasets.items()}
    return _flat_table(read, keys, n, max_rows=max_rows, seed=seed, prefix=False, kind="hdf5", where=path.name)


def _read_episode_groups(f: Any, groups: list[str], path: Path, *, max_rows: int, seed: int) -> SourceRead:
    import h5py

    lengths = np.array([f[name][ACTIONS].shape[0] for name in groups], dtype=np.int64)
    chosen = np.arange(len(groups))
    if lengths.sum() > max_rows:  # whole episodes drawn at random, read in file order
        order = np.random.default_rng(seed).permutation(len(groups))
        chosen = np.sort(order[: int(np.searchsorted(np.cumsum(lengths[order]), max_rows)) + 1])
    per_episode_frames = max(1, -(-FRAMES // chosen.size))
    columns: dict[str, list[np.ndarray]] = {}
    nexts: dict[str, list[np.ndarray]] = {}
    frames: dict[str, list[np.ndarray]] = {}
    episode, term, trunc = [], [], []
    has_flags = has_truncations = False
    for e in chosen.tolist():
        g = f[groups[e]]
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
            _group_datasets(obs_item, OBS)
            if isinstance(obs_item, h5py.Group)
            else {OBS: obs_item}
            if isinstance(obs_item, h5py.Dataset)
            else {}
        )
        for key, dataset in obs.items():
            if int(np.prod(dataset.shape[1:], dtype=np.int64)) > LOW_DIM:  # image-like: a few frames only
                picks = np.unique(np.linspace(0, max(t - 1, 0), min(per_episode_frames, t)).astype(np.int64))
                frames.setdefault(key, []).append(dataset[picks.tolist()])
                continue
            values = dataset[()]
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
    table.frames = {k: np.concatenate(v)[:FRAMES] for k, v in frames.items()}
    sampled = chosen.size < len(groups)
    out = SourceRead(kind="hdf5", table=table, rows=int(lengths.sum()), episodes=len(groups), sampled=sampled)
    if sampled:
        out.notes.append(f"{path.name}: {n:,} rows of {chosen.size} of {len(groups)} episodes read (drawn at random)")
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
