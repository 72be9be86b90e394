"""How many rows each OGBench dataset holds, and how many bytes its image observations decode to.

The counts are upstream's generation settings (OGBench's ``data_gen_scripts/commands.sh``: every dataset is
``num_episodes`` trajectories of ``max_episode_steps`` rows, the last row of each the final state), so the
decoded frame bytes of a build are known before its file is downloaded: the ``ogbench`` loader's
``frame_bytes`` (``docs/guide/compressed-frames.md``). A validation file holds a tenth of the trajectories
(its published size is a tenth of the training file's). Only ``visual-*`` (64x64x3) and Powderworld (32x32x3)
observations are images; every other set has none. The 100M sets are state sets.
"""

from __future__ import annotations

#: (trajectories, rows per trajectory) of the training file, by dataset name without ``visual-`` and ``-v0``
_LOCOMAZE = {
    ("navigate", "medium"): (1000, 1001),
    ("navigate", "large"): (1000, 1001),
    ("navigate", "teleport"): (1000, 1001),
    ("navigate", "giant"): (500, 2001),
    ("stitch", "medium"): (5000, 201),
    ("stitch", "large"): (5000, 201),
    ("stitch", "teleport"): (5000, 201),
    ("stitch", "giant"): (5000, 201),
    ("explore", "medium"): (10000, 501),
    ("explore", "large"): (10000, 501),
    ("explore", "teleport"): (10000, 501),
}
_HUMANOIDMAZE = {
    ("navigate", "medium"): (1000, 2001),
    ("navigate", "large"): (1000, 2001),
    ("navigate", "giant"): (1000, 4001),
    ("stitch", "medium"): (5000, 401),
    ("stitch", "large"): (5000, 401),
    ("stitch", "giant"): (10000, 401),
}
_ANTSOCCER = {
    ("navigate", "arena"): (1000, 1001),
    ("navigate", "medium"): (4000, 1001),
    ("stitch", "arena"): (5000, 201),
    ("stitch", "medium"): (8000, 501),
}
#: manipulation and Powderworld: trajectories of 1001 rows, by size (play and noisy alike)
_EPISODES_BY_SIZE = {
    "cube": {"single": 1000, "double": 1000, "triple": 3000, "quadruple": 5000},
    "puzzle": {"3x3": 1000, "4x4": 1000, "4x5": 3000, "4x6": 5000},
    "powderworld": {"easy": 1000, "medium": 3000, "hard": 5000},
}
#: bytes of one image observation: visual sets render 64x64 RGB, Powderworld's grid is 32x32 RGB
VISUAL_FRAME_BYTES = 64 * 64 * 3
POWDERWORLD_FRAME_BYTES = 32 * 32 * 3


def dataset_rows(dataset: str, split: str = "train") -> int | None:
    """Rows of ``dataset`` (an OGBench name such as ``visual-cube-triple-play-v0``) in ``split``, from
    upstream's generation settings; ``None`` for a name they do not cover (a 100M set, a user's dataset)."""
    if not dataset.endswith("-v0"):
        return None
    parts = dataset.removeprefix("visual-").removesuffix("-v0").split("-")
    family, shape = parts[0], None
    if family in ("pointmaze", "antmaze", "humanoidmaze", "antsoccer") and len(parts) == 3:
        table = _HUMANOIDMAZE if family == "humanoidmaze" else _ANTSOCCER if family == "antsoccer" else _LOCOMAZE
        shape = table.get((parts[2], parts[1]))
    elif family == "scene" and len(parts) == 2 and parts[1] in ("play", "noisy"):
        shape = (1000, 1001)
    elif family in _EPISODES_BY_SIZE and len(parts) == 3 and parts[2] in ("play", "noisy"):
        episodes = _EPISODES_BY_SIZE[family].get(parts[1])
        shape = None if episodes is None or (family == "powderworld" and parts[2] != "play") else (episodes, 1001)
    if shape is None:
        return None
    episodes, rows = shape
    return (episodes // 10 if split == "val" else episodes) * rows


def image_bytes(dataset: str, split: str = "train") -> int | None:
    """Decoded bytes of the image observations a build of ``dataset`` holds (every trajectory's rows, stored
    once: T + 1 rows for T transitions); 0 for a state set; ``None`` when the rows are not known."""
    if dataset.startswith("visual-"):
        frame = VISUAL_FRAME_BYTES
    elif dataset.startswith("powderworld-"):
        frame = POWDERWORLD_FRAME_BYTES
    else:
        return 0 if dataset_rows(dataset, split) is not None or dataset.endswith("-100m-v0") else None
    rows = dataset_rows(dataset, split)
    return None if rows is None else rows * frame
