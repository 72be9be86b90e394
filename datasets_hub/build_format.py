"""The on-disk build format (lean TED, docs/design/on-disk.md): its one owner.

Everything that knows how a build lies on disk is here: the layout constants, the leaf paths and
sizes, :func:`open_leaf`, the manifest checksum, and the one reader, :func:`open_build`, which
:class:`~datasets_hub.dataset_storage.DatasetStorage`, :mod:`datasets_hub.cache_verify` and every
other consumer use instead of parsing the manifest themselves. The writer,
:class:`~datasets_hub.build_writer.LeanTEDWriter`, lives in :mod:`datasets_hub.build_writer` and
takes the layout from here.

A build directory::

    manifest.json      written last: format, version, id, params, sources, counts, schema, layout, stats
    manifest.sha256    sha256 of manifest.json in ``sha256sum`` format
    data/<group>/<key>.memmap    one raw little-endian file per leaf (+ tensordict metadata)

Groups of ``data/`` (a tensordict memmap tree):

- ``obs/<key>``: observation-like keys, stored once per episode with T+1 rows
  (row ``start[e] + e + t`` holds the value at time t of episode e; the extra row is the final
  next value), N + E rows in all;
- ``steps/<key>``: per-step keys (``action``, ``next/reward``, ``next/terminated``,
  ``next/truncated``, ``info/...``), N rows; ``steps/next/<K>`` also holds the next value of an
  observation-like key K whose upstream next values are not the following rows (never guessed);
- ``episodes/{start,length,id,return}``: the episode index, E rows;
- ``history/<key>``, ``history/episode``, ``history/time`` (only when a loader sent history rows):
  frames that precede an episode's first transition (times -k..-1), kept so that frame stacks can
  hold the real earlier frames; they are no transitions and are never sampled. Rows are grouped by
  episode in build order; ``layout["history"]`` lists the keys.

The manifest's ``schema`` maps ``<group>/<key>`` to ``{dtype, shape, rows, sha256}`` and its
``layout`` lists the obs keys, the step keys and the obs keys whose next values are stored per step.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasets_hub.buffers.nested_keys import Key, parse_key
from datasets_hub.errors import CacheError
from datasets_hub.files import sha256_file, write_text_atomic

if TYPE_CHECKING:
    import torch

    from datasets_hub.packed_steps import PackedSteps

# torch, numpy and the readers are imported by the functions that map data: the layout constants, the
# paths, the sizes and the manifest checksum serve the CLI's listing and verify commands without them

# -- layout constants ---------------------------------------------------------------------------
FORMAT = "datasets_hub.ted"  #: the manifest's "format"
#: the manifest's "version": 2 adds the packed per-step records (``steps/_packed``, ``layout["packed"]``,
#: see :mod:`datasets_hub.packed_steps`); version 1 builds (without them) are still read
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
#: enters every build fingerprint: bump it when the layout changes, and old builds are never reused
STORAGE_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: the manifest's checksum, ``"<hex>  manifest.json\n"`` (``sha256sum -c manifest.sha256`` works)
MANIFEST_SHA256 = "manifest.sha256"
DATA_DIR = "data"
LEAF_SUFFIX = ".memmap"
OBS, STEPS, EPISODES, HISTORY = "obs", "steps", "episodes", "history"
EPISODE_COLUMNS = ("start", "length", "id", "return")
#: bytes per item of every dtype a manifest can name (torch's names and aliases; a test checks them against
#: torch), so that sizes are known without importing torch
ITEMSIZES = {
    **dict.fromkeys(("bool", "uint8", "int8", "float8_e4m3fn", "float8_e5m2"), 1),
    **dict.fromkeys(("int16", "short", "uint16", "float16", "half", "bfloat16"), 2),
    **dict.fromkeys(("int32", "int", "uint32", "float32", "float", "complex32", "chalf"), 4),
    **dict.fromkeys(("int64", "long", "uint64", "float64", "double", "complex64", "cfloat"), 8),
    **dict.fromkeys(("complex128", "cdouble"), 16),
}


# -- reading -------------------------------------------------------------------------------------------


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype a manifest names (``"float32"``); :class:`CacheError` for anything else."""
    import torch

    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise CacheError(
            f"the manifest names an unknown dtype {name!r}: the build is damaged or was made by a "
            "newer datasets_hub; run `datasets-hub rm` and load again"
        )
    return dtype


def leaf_path(build_dir: Path, name: str) -> Path:
    """The file of the leaf ``name`` (``"<group>/<key>"``) of the build at ``build_dir``.

    A manifest is data read from disk: a name that would leave the build's ``data/`` folder
    (``..``, an absolute path) is refused with :class:`CacheError`.
    """
    parts = Path(name).parts
    if not name or Path(name).is_absolute() or any(p in ("..", ".") for p in parts) or "\x00" in name:
        raise CacheError(
            f"the manifest of {build_dir} names a data file {name!r} outside the build: "
            "the manifest was tampered with; run `datasets-hub rm` and load again"
        )
    return Path(build_dir) / DATA_DIR / (name + LEAF_SUFFIX)


def leaf_nbytes(entry: dict[str, Any]) -> int | None:
    """The size in bytes a schema entry (``{dtype, shape, rows}``) gives its file; None for an unknown dtype."""
    itemsize = ITEMSIZES.get(str(entry.get("dtype")))
    if itemsize is None:
        return None
    count = int(entry.get("rows", 0))
    for dim in entry.get("shape", []):
        count *= int(dim)
    return count * itemsize


def group_rows(group: str, counts: dict[str, Any]) -> int | None:
    """How many rows every leaf of ``group`` has, given the manifest's counts (None if unknown)."""
    transitions, episodes = counts.get("transitions"), counts.get("episodes")
    if transitions is None or episodes is None:
        return {STEPS: transitions, EPISODES: episodes}.get(group)
    return {OBS: transitions + episodes, STEPS: transitions, EPISODES: episodes}.get(group)


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
    import numpy as np
    import torch

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


def write_manifest_checksum(build_dir: Path) -> Path:
    """Record the sha256 of ``build_dir/manifest.json`` in ``build_dir/manifest.sha256`` (builder side)."""
    return write_text_atomic(
        Path(build_dir) / MANIFEST_SHA256, f"{sha256_file(Path(build_dir) / MANIFEST)}  {MANIFEST}\n"
    )


def read_manifest_checksum(build_dir: Path) -> str | None:
    """The manifest sha256 recorded beside it (lower-case hex; ``""`` for an empty file), None without one."""
    path = Path(build_dir) / MANIFEST_SHA256
    if not path.is_file():
        return None
    words = path.read_text().split()
    return words[0].lower() if words else ""


@dataclass(frozen=True)
class OpenedBuild:
    """One build, every leaf mapped copy-on-write, grouped by role (see the module docstring).

    - ``obs[k]``: ``[N + E, *shape]``, row ``episodes["start"][e] + e + t`` = time t of episode e;
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
    obs: dict[Key, torch.Tensor]
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


def open_build(build_dir: str | Path, *, in_memory: bool = False) -> OpenedBuild:
    """Open the build at ``build_dir`` read-only: the one reader of the format.

    ``in_memory=True`` copies every leaf into anonymous memory (transparent huge pages where the OS
    offers them, :mod:`datasets_hub.ram`) instead of mapping the files: the same values, no page
    faults or file-backed pages on the sampling path. It refuses with
    :class:`~datasets_hub.errors.InvalidParameter` naming the size and the memory available when the
    copy would not fit. Raises :class:`CacheError` naming the fix when the build is incomplete,
    damaged or not one this version can read.
    """
    import torch

    from datasets_hub.build_checks import check_build
    from datasets_hub.build_checks import leaf_path as checked_leaf_path
    from datasets_hub.packed_steps import RECORD_NAME, PackedSteps, RecordLayout
    from datasets_hub.ram import anonymous_copy, check_fits

    build_dir = Path(build_dir)
    manifest = read_build_manifest(build_dir)
    # cheap open-time checks (manifest hash, format, schema, paths, sizes, episode index): build_checks.py
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
        obs = {parse_key(k): columns[f"{OBS}/{k}"] for k in layout["obs"]}
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
