"""What opening a build checks before mapping a byte of it (docs/guide/reliability.md, "Trust model").

Opening must stay cheap (milliseconds), so it never hashes the data; that is ``datasets-hub verify``.
It does check everything a crafted or damaged manifest could use to make the reader serve wrong
rows or read outside the build:

- the manifest's own sha256 (``manifest.sha256``, written by the builder) when the build has one;
- the format, a known dtype and non-negative, non-overflowing shape for every column, row counts
  that agree with ``counts`` (steps: transitions, episodes: episodes, observations: both), the
  ``layout`` naming columns that exist, and the columns the reader needs, with their dtypes;
- every path: a column name is a relative path without ``..`` and resolves (symlinks followed)
  inside the build's ``data/`` folder; file sizes equal rows x shape x itemsize;
- the episode index (E int64 values, read once): starts at 0, contiguous, positive lengths that
  add up to the transitions, episode ids unique.

:func:`check_preprocessed` does the same for a preprocessing result. Every failure is a
:class:`~datasets_hub.errors.CacheError` naming the file and the fix.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from datasets_hub.build.format import (
    DATA_DIR,
    EPISODES,
    FORMAT,
    FRAME_CODECS,
    FRAME_LAYOUTS,
    FRAMES,
    HISTORY,
    ITEMSIZE,
    LEAF_SUFFIX,
    MANIFEST,
    MANIFEST_SHA256,
    OBS,
    READABLE_VERSIONS,
    REQUIRED_COLUMNS,
    STEPS,
)
from datasets_hub.errors import CacheError

__all__ = ["check_build", "check_preprocessed", "checked_leaf_path", "inside"]

_MAX_BYTES = 1 << 60


def _fail(where: Path, problem: str) -> CacheError:
    return CacheError(
        f"{where}: {problem}. The build is damaged or was tampered with: run `datasets-hub verify` to see "
        "everything that is wrong, then `datasets-hub rm <id>` (or `datasets-hub cache prune`) and load again"
    )


def inside(root: Path, relative: str, where: Path) -> Path:
    """``root/relative`` after checking that ``relative`` is a plain relative path that resolves,
    symlinks followed, inside ``root`` (a manifest can never point the reader elsewhere)."""
    if not isinstance(relative, str) or not relative or "\x00" in relative or "\\" in relative:
        raise _fail(where, f"the path {relative!r} is not a relative path")
    parts = relative.split("/")
    if relative.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise _fail(where, f"the path {relative!r} leaves its folder ('..', '.', an empty or absolute part)")
    path = root.joinpath(*parts)
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(path)]) != real_root:
        raise _fail(where, f"the path {relative!r} resolves outside {root} (a symbolic link?)")
    return path


def checked_leaf_path(build: Path, name: str, where: Path) -> Path:
    """The file of column ``name`` of the build at ``build``, checked by :func:`inside`."""
    return inside(Path(build) / DATA_DIR, name + LEAF_SUFFIX, where)


def _column(entry: Any, name: str, where: Path) -> tuple[str, tuple[int, ...], int]:
    if not isinstance(entry, dict):
        raise _fail(where, f"schema entry {name!r} is a {type(entry).__name__}, not an object")
    dtype, shape, rows = entry.get("dtype"), entry.get("shape"), entry.get("rows")
    if dtype not in ITEMSIZE:
        raise _fail(where, f"column {name!r} has dtype {dtype!r}, not one of {sorted(ITEMSIZE)}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise _fail(where, f"column {name!r} has shape {shape!r}: a list of non-negative ints is required")
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        raise _fail(where, f"column {name!r} has rows {rows!r}: a non-negative int is required")
    total = rows * ITEMSIZE[dtype]
    for d in shape:
        total *= d
    if total > _MAX_BYTES:
        raise _fail(where, f"column {name!r} claims {total} bytes ({rows} rows of {dtype} {shape}): impossible")
    return dtype, tuple(shape), rows


def _size_matches(
    path: Path,
    dtype: str,
    shape: tuple[int, ...],
    rows: int,
    name: str,
    where: Path,
    *,
    empty_may_be_absent: bool = False,
) -> None:
    expected = rows * ITEMSIZE[dtype] * int(np.prod(shape, dtype=object) if shape else 1)
    if empty_may_be_absent and expected == 0 and not path.exists():
        return
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise _fail(where, f"the file of column {name!r} ({path}) is missing") from None
    if size != expected:
        raise _fail(
            where, f"{path} has {size} bytes where the manifest says {expected} ({rows} rows of {dtype} {list(shape)})"
        )


def _check_hash(build: Path, where: Path) -> None:
    recorded = build / MANIFEST_SHA256
    if not recorded.is_file():
        return  # built before manifest checksums existed: the consistency checks below still run
    try:
        words = recorded.read_text(errors="replace").split()
        digest = hashlib.sha256((build / MANIFEST).read_bytes()).hexdigest()
    except OSError as exc:  # removed while it was being opened
        raise CacheError(f"{build}: the build was removed or replaced while it was opened ({exc.strerror}); load "
                         "the dataset again") from exc  # fmt: skip
    if not words or words[0].lower() != digest:
        raise _fail(where, f"its sha256 {digest[:16]}… does not match manifest.sha256: the manifest was edited")


def _object_field(manifest: dict[str, Any], field: str, where: Path) -> dict[str, Any]:
    value = manifest.get(field)
    if not isinstance(value, dict):
        raise _fail(where, f"{field!r} is missing or not an object")
    return value


def _count(counts: dict[str, Any], label: str, where: Path) -> int:
    value = counts.get(label)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _fail(where, f"counts.{label} is {value!r}, not a non-negative int")
    return value


def check_build(build: Path, manifest: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...], int]]:
    """Check the build at ``build`` (module docstring); return ``{column: (dtype, shape, rows)}``."""
    build = Path(build)
    where = build / MANIFEST
    _check_hash(build, where)
    if manifest.get("format") != FORMAT or manifest.get("version") not in READABLE_VERSIONS:
        raise _fail(where, f"format {manifest.get('format')!r} version {manifest.get('version')!r} is not a "
                           f"{FORMAT} build of a version this reader knows {READABLE_VERSIONS}")  # fmt: skip
    schema, layout, counts = (_object_field(manifest, field, where) for field in ("schema", "layout", "counts"))
    n, e = _count(counts, "transitions", where), _count(counts, "episodes", where)
    # history: frames before episodes, any count; frames: compressed leaves, checked by _check_frames
    want = {STEPS: n, EPISODES: e, OBS: n + e, HISTORY: None, FRAMES: None}
    history_rows = set()
    columns = {}
    for name, entry in schema.items():
        dtype, shape, rows = _column(entry, name, where)
        path = checked_leaf_path(build, name, where)  # first: a name that leaves data/ is refused as such
        group = name.split("/", 1)[0]
        if group not in want or "/" not in name:
            raise _fail(where, f"column {name!r} is in no known group (steps/, obs/, episodes/, history/)")
        if group == HISTORY:
            history_rows.add(rows)
        elif group == FRAMES:
            pass
        elif rows != want[group]:
            raise _fail(where, f"column {name!r} has {rows} rows but counts say {want[group]}")
        _size_matches(path, dtype, shape, rows, name, where)
        columns[name] = (dtype, shape, rows)
    if len(history_rows) > 1:
        raise _fail(where, f"the history columns disagree on their row count ({sorted(history_rows)})")
    for name, dtype in REQUIRED_COLUMNS.items():
        if name not in columns:
            raise _fail(where, f"the required column {name!r} is missing")
        scalar = () if name.startswith(EPISODES + "/") else (1,)  # per-step flags are [N, 1], the index [E]
        if columns[name][0] != dtype or columns[name][1] != scalar:
            raise _fail(where, f"column {name!r} is {columns[name][0]} {list(columns[name][1])}, not {dtype} "
                               f"{list(scalar)}")  # fmt: skip
    for field in ("obs", "next_stored_per_step"):
        keys = layout.get(field)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise _fail(where, f"layout.{field} is {keys!r}, not a list of key names")
    frames = _check_frames(build, layout, columns, n + e, where)
    for key in layout["obs"]:
        if f"{OBS}/{key}" not in columns and key not in frames:
            raise _fail(where, f"layout.obs names {key!r} but there is no column 'obs/{key}'")
    for key in layout["next_stored_per_step"]:
        if f"{STEPS}/next/{key}" not in columns:
            raise _fail(where, f"layout.next_stored_per_step names {key!r} but there is no column 'steps/next/{key}'")
    _check_episode_index(build, n, e, where)
    return columns


def _check_frames(
    build: Path, layout: dict[str, Any], columns: dict[str, tuple[str, tuple[int, ...], int]], rows: int, where: Path
) -> dict[str, Any]:
    """``layout.frames`` (format 3): each compressed key is observation-like, has exactly its ``blob``
    (uint8) and ``offsets`` (int64, one more than the key's rows, 0 first, the blob's size last) and no
    raw column, a known codec and layout; no frames column is unaccounted for. Returns the entries."""
    frames = layout.get("frames", {})
    if not isinstance(frames, dict):
        raise _fail(where, f"layout.frames is {type(frames).__name__}, not an object")
    claimed: set[str] = set()
    for key, spec in frames.items():
        if key not in layout["obs"]:
            raise _fail(where, f"layout.frames names {key!r}, which layout.obs does not list")
        if not isinstance(spec, dict) or spec.get("codec") not in FRAME_CODECS or spec.get("dtype") != "uint8":
            raise _fail(where, f"layout.frames[{key!r}] is {spec!r}: a uint8 key with codec "
                               f"{' or '.join(FRAME_CODECS)} is required")  # fmt: skip
        shape = spec.get("shape")
        if (
            spec.get("layout") not in FRAME_LAYOUTS
            or not isinstance(shape, list)
            or len(shape) != FRAME_LAYOUTS[spec["layout"]]
            or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)
        ):
            raise _fail(where, f"layout.frames[{key!r}] has layout {spec.get('layout')!r} and shape {shape!r}, "
                               "which do not go together")  # fmt: skip
        if f"{OBS}/{key}" in columns:
            raise _fail(where, f"{key!r} is both compressed (layout.frames) and raw (column 'obs/{key}')")
        blob, offsets = f"{FRAMES}/{key}/blob", f"{FRAMES}/{key}/offsets"
        if columns.get(blob, ("",))[:2] != ("uint8", ()) or columns.get(offsets, ("",))[:2] != ("int64", ()):
            raise _fail(where, f"the compressed key {key!r} needs columns {blob!r} (uint8) and {offsets!r} (int64)")
        if columns[offsets][2] != rows + 1:
            raise _fail(where, f"column {offsets!r} has {columns[offsets][2]} rows but the key has {rows} frames "
                               f"(so {rows + 1} offsets)")  # fmt: skip
        with open(checked_leaf_path(build, offsets, where), "rb") as fh:
            first = np.frombuffer(fh.read(8), dtype="<i8")
            fh.seek(-8, os.SEEK_END)
            last = np.frombuffer(fh.read(8), dtype="<i8")
        if first.size != 1 or last.size != 1 or int(first[0]) != 0 or int(last[0]) != columns[blob][2]:
            raise _fail(where, f"the offsets of {key!r} do not run from 0 to the {columns[blob][2]} bytes of its blob")
        claimed.update((blob, offsets))
    stray = sorted(name for name in columns if name.startswith(FRAMES + "/") and name not in claimed)
    if stray:
        raise _fail(where, f"column {stray[0]!r} belongs to no compressed key of layout.frames")
    return frames


def _check_episode_index(build: Path, n: int, e: int, where: Path) -> None:
    try:
        start = np.fromfile(checked_leaf_path(build, f"{EPISODES}/start", where), dtype=np.int64)
        length = np.fromfile(checked_leaf_path(build, f"{EPISODES}/length", where), dtype=np.int64)
        ids = np.fromfile(checked_leaf_path(build, f"{EPISODES}/id", where), dtype=np.int64)
    except OSError as exc:  # removed (renamed aside by `rm`) while it was being opened
        raise CacheError(f"{build}: the episode index cannot be read ({exc.strerror}): the build was removed or "
                         "replaced while it was opened; load the dataset again") from exc  # fmt: skip
    if e == 0:
        if n:
            raise _fail(where, f"{n} transitions but no episode")
        return
    if (length < 1).any():
        raise _fail(where, "the episode index has an episode of length < 1")
    if start[0] != 0 or (start[1:] != start[:-1] + length[:-1]).any() or int(length.sum()) != n:
        raise _fail(where, f"the episode index is inconsistent: episodes must start at 0, follow each other and "
                           f"add up to the {n} transitions")  # fmt: skip
    if np.unique(ids).size != ids.size:
        raise _fail(where, "the episode index repeats an episode id")


def check_preprocessed(result: Path, manifest: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...], Path]]:
    """Check a preprocessing result (format, schema, paths inside ``result``, file sizes); return
    ``{column: (dtype, shape, path)}``. A truncated file is a clear error, not an mmap failure."""
    result = Path(result)
    where = result / MANIFEST
    schema, counts = manifest.get("schema"), manifest.get("counts")
    if not isinstance(schema, dict) or not isinstance(counts, dict):
        raise _fail(where, "'schema' or 'counts' is missing or not an object")
    n = counts.get("transitions")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise _fail(where, f"counts.transitions is {n!r}, not a non-negative int")
    columns = {}
    for name, entry in schema.items():
        dtype, shape, _rows = _column({**entry, "rows": n} if isinstance(entry, dict) else entry, name, where)
        path = inside(result, entry.get("file"), where)
        _size_matches(path, dtype, shape, n, name, where, empty_may_be_absent=True)
        columns[name] = (dtype, shape, path)
    return columns
