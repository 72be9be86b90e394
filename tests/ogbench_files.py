"""Small files in OGBench's on-disk format (the layout ``ogbench.utils.load_dataset`` reads), with a
distinct value at every row, and the TED transitions a plain loop over them gives.

Import it from a test in ``tests/`` as a plain module (``from ogbench_files import write_ogbench``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_ogbench(
    path: Path,
    lengths: list[int],
    *,
    visual: bool = False,
    discrete: bool = False,
    info: bool = True,
    compressed: bool = True,
    first_row: int = 0,
) -> dict[str, np.ndarray]:
    """Write trajectories of ``lengths`` transitions (``L + 1`` rows each, ``terminals`` on the last)
    and return the arrays. Row ``r`` (counted from ``first_row`` across files) has observation
    ``r * 100 + d`` (or, ``visual``, a 4x4x3 uint8 image whose pixels encode ``r``), action
    ``-(r * 10 + d)`` (``discrete``: int32 ``r``), ``qpos = r + 0.25 d``, ``qvel = -r``,
    ``button_states = r % 2``."""
    rows = int(sum(length + 1 for length in lengths))
    r = np.arange(first_row, first_row + rows)
    if visual:
        obs = ((r[:, None, None, None] * 7 + np.arange(48).reshape(1, 4, 4, 3)) % 251).astype(np.uint8)
    else:
        obs = (r[:, None] * 100 + np.arange(5)).astype(np.float32)
    if discrete:
        actions = r.astype(np.int32)
    else:
        actions = (-(r[:, None] * 10 + np.arange(2))).astype(np.float32)
    terminals = np.zeros(rows, dtype=np.float32)
    terminals[np.cumsum([length + 1 for length in lengths]) - 1] = 1.0
    arrays = {"observations": obs, "actions": actions, "terminals": terminals}
    if info:
        arrays["qpos"] = (r[:, None] + 0.25 * np.arange(3)).astype(np.float64)
        arrays["qvel"] = (-r[:, None] * np.ones(2)).astype(np.float32)
        arrays["button_states"] = (r[:, None] % 2 * np.ones(4)).astype(np.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    return arrays


def expected_transitions(arrays_per_file: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Plain loop: every trajectory's ``(s_t, a_t, s_{t+1})`` for ``t < L``, episodes numbered over the files."""
    out: dict[str, list] = {k: [] for k in ("observation", "next_observation", "action", "episode", "truncated")}
    info: dict[str, list] = {}
    episode = 0
    for arrays in arrays_per_file:
        ends = np.flatnonzero(arrays["terminals"] > 0)
        start = 0
        for end in ends:
            length = end - start  # transitions of this trajectory
            for t in range(length):
                row = start + t
                out["observation"].append(arrays["observations"][row])
                out["next_observation"].append(arrays["observations"][row + 1])
                out["action"].append(arrays["actions"][row])
                out["episode"].append(episode)
                out["truncated"].append(t == length - 1)
                for key in ("qpos", "qvel", "button_states"):
                    if key in arrays:
                        info.setdefault(key, []).append(arrays[key][row])
                        info.setdefault("next_" + key, []).append(arrays[key][row + 1])
            if length:
                episode += 1
            start = end + 1
    result = {k: np.asarray(v) for k, v in out.items()}
    result.update({k: np.asarray(v) for k, v in info.items()})
    return result
