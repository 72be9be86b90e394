"""The one reader of the on-disk build format: :func:`open_build` (layout: :mod:`datasets_hub.build.format`).

:class:`~datasets_hub.build.storage.DatasetStorage`, :mod:`datasets_hub.remote.publish` and every other
consumer open a build through :func:`open_build` instead of parsing the manifest themselves; it runs the
open-time checks of :mod:`datasets_hub.build.checks` first and maps every leaf with :func:`open_leaf`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from datasets_hub.buffers.nested_keys import Key, parse_key
from datasets_hub.build.checks import check_build, checked_leaf_path
from datasets_hub.build.format import EPISODE_COLUMNS, EPISODES, FRAMES, HISTORY, MANIFEST, OBS, STEPS, leaf_nbytes
from datasets_hub.build.frames import FrameColumn
from datasets_hub.build.memory import anonymous_copy, check_fits
from datasets_hub.build.packed_steps import RECORD_NAME, PackedSteps, RecordLayout
from datasets_hub.errors import CacheError


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype a manifest names (``"float32"``); :class:`CacheError` for anything else."""
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise CacheError(
            f"the manifest names an unknown dtype {name!r}: the build is damaged or was made by a "
            "newer datasets_hub; run `datasets-hub rm` and load again"
        )
    return dtype


def open_leaf(
    path: Path, dtype: torch.dtype | str, shape: Sequence[int], rows: int, *, mode: str = "c"
) -> torch.Tensor:
    """Map one leaf file as a ``[rows, *shape]`` tensor.

        ``mode="c"`` (the default) maps copy-on-write: it needs only read permission, and a stray
        in-place write can never reach the file; ``"r+"`` maps shared writes (a writer filling
        preallocated files). The file must hold exactly ``rows * prod(shape)`` items: a missing or
        wrongly sized file is a damaged build, a :class:`CacheError` naming the fix (a leaf of zero bytes
    needs no file). dtypes without a
        numpy twin (bfloat16) are mapped as integers of the same width and viewed.
    """
    dtype = torch_dtype(dtype) if isinstance(dtype, str) else dtype
    shape = tuple(int(d) for d in shape)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    expected = int(rows) * int(np.prod(shape, dtype=np.int64)) * itemsize
    if expected == 0:  # nothing to map (a writer need not create an empty file)
        return torch.empty((int(rows), *shape), dtype=dtype)
    try:
        size = path.stat().st_size
    except FileNotFoundError as exc:
        raise CacheError(
            f"build file {path} is missing: the build is damaged; run `datasets-hub rm` and load again"
        ) from exc
    if size != expected:
        raise CacheError(
            f"build file {path} has {size} bytes where the manifest says {expected}: the build is damaged "
            "or was modified; run `datasets-hub verify` / `datasets-hub rm` and load again"
        )
    try:
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:  # no numpy twin: map an int of the same width and view it
        np_dtype = np.dtype(f"i{itemsize}")
    memmap_mode: Any = mode  # numpy's stubs want a Literal
    try:
        mapped = np.memmap(path, dtype=np_dtype, mode=memmap_mode, shape=(int(rows), *shape))
    except FileNotFoundError as exc:  # present at the stat above: removed (renamed aside by `rm`) since
        raise CacheError(
            f"build file {path} disappeared while the build was opened: it was removed or replaced meanwhile; "
            "load the dataset again"
        ) from exc
    tensor = torch.from_numpy(mapped)
    return tensor if tensor.dtype == dtype else tensor.view(dtype)


@dataclass(frozen=True)
class OpenedBuild:
    """One build, every leaf mapped copy-on-write, grouped by role (see the module docstring).

    - ``obs[k]``: ``[N + E, *shape]``, row ``episodes["start"][e] + e + t`` = time t of episode e; a
      compressed camera key (format 3) is a :class:`~datasets_hub.build.frames.FrameColumn` read the same way
      (``take(rows)`` decodes those rows only), its two files are in ``leaves``;
    - ``shared_next``: the obs keys whose next value is the following row of ``obs[k]``; for the
      others, ``steps[("next", *k)]`` holds the next values;
    - ``steps[k]``: ``[N, *shape]`` per-step leaves, in the manifest's (sorted) order;
    - ``episodes``: ``start``, ``length``, ``id``, ``return``, E rows each;
    - ``history``: frames kept before episodes' first transitions, by name after ``history/``
      (each obs key of ``manifest["layout"]["history"]``, plus ``episode`` and ``time`` per row); empty
      for most builds;
    - ``leaves``: every leaf by its schema name (``"<group>/<key>"``), in the manifest's order (what a
      consumer that copies a build leaf by leaf, such as ``publish.export``, walks);
    - ``packed``: the packed per-step records of a format-2 build (``None`` for version 1), whose
      leaves are also in ``steps``; the record column itself is in ``leaves`` only.
    """

    path: Path
    manifest: dict[str, Any]
    transitions: int
    obs: dict[Key, torch.Tensor | FrameColumn]
    shared_next: frozenset[Key]
    steps: dict[Key, torch.Tensor]
    episodes: dict[str, torch.Tensor]
    history: dict[str, torch.Tensor]
    leaves: dict[str, torch.Tensor] = field(default_factory=dict)
    packed: PackedSteps | None = None

    @property
    def fingerprint(self) -> str | None:
        return self.manifest.get("fingerprint")


def read_build_manifest(build_dir: Path) -> dict[str, Any]:
    """The manifest of the build at ``build_dir``; :class:`CacheError` when there is no complete build."""
    path = Path(build_dir) / MANIFEST
    try:
        with open(path) as fh:
            manifest = json.load(fh)
    except FileNotFoundError as exc:
        raise CacheError(f"{build_dir} holds no complete build (no {MANIFEST}); load the dataset again") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise CacheError(
            f"the manifest {path} is unreadable ({exc}); remove the build with `datasets-hub rm` "
            f"or delete {build_dir} and load again"
        ) from exc
    if not isinstance(manifest, dict):
        raise CacheError(f"the manifest {path} is not a JSON object; remove the build and load again")
    return manifest


def _frame_column(
    key: str, spec: dict[str, Any], columns: dict[str, torch.Tensor], manifest: dict[str, Any]
) -> FrameColumn:
    """The compressed leaf ``key`` (already checked by ``check_build``), naming episode and time on errors."""
    start = columns[f"{EPISODES}/start"].numpy()
    ids = columns[f"{EPISODES}/id"].numpy()
    first_rows = start + np.arange(start.size)  # obs row of each episode's first frame (T + 1 rows each)

    def locate(row: int) -> tuple[int, int]:
        e = int(np.searchsorted(first_rows, row, side="right")) - 1
        return int(ids[e]), int(row - first_rows[e])

    return FrameColumn(
        key,
        columns[f"{FRAMES}/{key}/blob"].numpy(),
        columns[f"{FRAMES}/{key}/offsets"].numpy(),
        spec["codec"],
        spec["layout"],
        tuple(spec["shape"]),
        locate,
    )


def open_build(build_dir: str | Path, *, in_memory: bool = False) -> OpenedBuild:
    """Open the build at ``build_dir`` read-only: the one reader of the format.

    ``in_memory=True`` copies every leaf into anonymous memory (transparent huge pages where the OS
    offers them, :mod:`datasets_hub.build.memory`) instead of mapping the files: the same values, no page
    faults or file-backed pages on the sampling path. It refuses with
    :class:`~datasets_hub.errors.InvalidParameter` naming the size and the memory available when the
    copy would not fit. Raises :class:`CacheError` naming the fix when the build is incomplete,
    damaged or not one this version can read.
    """
    build_dir = Path(build_dir)
    manifest = read_build_manifest(build_dir)
    # cheap open-time checks (manifest hash, format, schema, paths, sizes, episode index): build/checks.py
    checked = check_build(build_dir, manifest)
    if in_memory:
        sizes = [leaf_nbytes({"dtype": d, "shape": list(s), "rows": r}) or 0 for d, s, r in checked.values()]
        check_fits(sum(sizes), f"the build {manifest.get('id', build_dir)!r} ({build_dir})")
    try:
        layout = manifest["layout"]
        transitions = int(manifest["counts"]["transitions"])
        columns = {
            name: open_leaf(checked_leaf_path(build_dir, name, build_dir), dtype, shape, rows)
            for name, (dtype, shape, rows) in checked.items()
        }
        if in_memory:  # the file mappings are dropped with this dict once every leaf is copied
            columns = {name: anonymous_copy(column) for name, column in columns.items()}
        per_step_next = {parse_key(k) for k in layout["next_stored_per_step"]}
        frames = layout.get("frames", {})
        obs: dict[Key, torch.Tensor | FrameColumn] = {
            parse_key(k): _frame_column(k, frames[k], columns, manifest) if k in frames else columns[f"{OBS}/{k}"]
            for k in layout["obs"]
        }
        steps = {
            parse_key(name)[1:]: col
            for name, col in columns.items()
            if name.startswith(STEPS + "/") and name != RECORD_NAME
        }
        packed = None
        if "packed" in layout:  # format version 2: the small per-step leaves packed in one record per row
            meta = {parse_key(n)[1:]: (d, tuple(sh)) for n, (d, sh, _) in checked.items() if n.startswith(STEPS + "/")}
            record_layout = RecordLayout.from_json(layout["packed"], meta, build_dir / MANIFEST)
            record = columns.get(RECORD_NAME)
            if record is None or tuple(record.shape[1:]) != (record_layout.width,) or record.dtype != torch.uint8:
                raise CacheError(
                    f"{build_dir / MANIFEST}: layout.packed describes {record_layout.width}-byte records but the "
                    f"column {RECORD_NAME!r} does not hold them: the build is damaged; run `datasets-hub rm` and "
                    "load again"
                )
            packed = PackedSteps(record.numpy(), record_layout)
        episodes = {name: columns[f"{EPISODES}/{name}"] for name in EPISODE_COLUMNS}
        history = {name[len(HISTORY) + 1 :]: col for name, col in columns.items() if name.startswith(HISTORY + "/")}
    except (KeyError, TypeError, ValueError) as exc:
        raise CacheError(
            f"the manifest of {build_dir} lacks or garbles {exc}: the build is damaged or was made by "
            "another version; run `datasets-hub rm` and load again"
        ) from exc
    return OpenedBuild(
        path=build_dir,
        manifest=manifest,
        transitions=transitions,
        obs=obs,
        shared_next=frozenset(k for k in obs if k not in per_step_next),
        steps=steps,
        episodes=episodes,
        history=history,
        leaves=columns,
        packed=packed,
    )
