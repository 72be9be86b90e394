"""The on-disk build format (lean TED, docs/design/on-disk.md): its one owner.

Every fact about how a build lies on disk is here: the layout constants, the dtypes and required
columns, the leaf paths and sizes, and the manifest checksum. It is a leaf module (no torch, nothing
of the hub but errors and files), so every other module of the format imports it: the reader
(:mod:`datasets_hub.build.reader`, :func:`~datasets_hub.build.reader.open_build`), the open-time
checks (:mod:`datasets_hub.build.checks`), the writer (:mod:`datasets_hub.build.writer`) and
:mod:`datasets_hub.cache.verify`.

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
- ``frames/<key>/blob`` and ``frames/<key>/offsets`` (format 3, only for builds made with
  ``frames="jpeg"``/``"png"``; format 4 for ``"h264"``): an observation-like camera key stored compressed, one image per row
  (row ``r`` is ``blob[offsets[r]:offsets[r + 1]]``) instead of ``obs/<key>``; ``layout["frames"]``
  names each such key with its codec, quality, layout and decoded dtype and shape, and the reader
  hands it out as a :class:`~datasets_hub.build.frames.FrameColumn` among ``obs``;
- ``history/<key>``, ``history/episode``, ``history/time`` (only when a loader sent history rows):
  frames that precede an episode's first transition (times -k..-1), kept so that frame stacks can
  hold the real earlier frames; they are no transitions and are never sampled. Rows are grouped by
  episode in build order; ``layout["history"]`` lists the keys.

The manifest's ``schema`` maps ``<group>/<key>`` to ``{dtype, shape, rows, sha256}`` and its
``layout`` lists the obs keys, the step keys and the obs keys whose next values are stored per step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from datasets_hub.errors import CacheError
from datasets_hub.files import sha256_file, write_text_atomic

# -- layout constants ---------------------------------------------------------------------------
FORMAT = "datasets_hub.ted"  #: the manifest's "format"
#: the manifest's "version": 2 adds the packed per-step records (``steps/_packed``, ``layout["packed"]``,
#: see :mod:`datasets_hub.build.packed_steps`); version 1 builds (without them) are still read.
#: 3 adds compressed frame leaves (``frames/``, ``layout["frames"]``, see :mod:`datasets_hub.build.frames`),
#: 4 the ``h264`` codec among them. A build is written as the oldest version that describes it
#: (:func:`format_version_of`), so hub versions that predate a version still read the builds that do not need it
FORMAT_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
#: enters every build fingerprint: bump it when the layout changes, and old builds are never reused
STORAGE_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: the manifest's checksum, ``"<hex>  manifest.json\n"`` (``sha256sum -c manifest.sha256`` works)
MANIFEST_SHA256 = "manifest.sha256"
DATA_DIR = "data"
LEAF_SUFFIX = ".memmap"
OBS, STEPS, EPISODES, HISTORY, FRAMES = "obs", "steps", "episodes", "history", "frames"
#: codecs a compressed frame leaf may hold, and the decoded layouts with their number of dimensions
FRAME_CODECS = ("jpeg", "png", "h264")
FRAME_LAYOUTS = {"hwc": 3, "chw": 3, "hw": 2}
EPISODE_COLUMNS = ("start", "length", "id", "return")
#: bytes per item of every dtype a build may hold (the manifest names them as strings)
ITEMSIZE = {
    "bool": 1, "uint8": 1, "int8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2, "int32": 4,
    "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8, "complex64": 8, "complex128": 16,
}  # fmt: skip
#: columns every build has, with their dtypes (per-step flags are ``[N, 1]``, the episode index ``[E]``)
REQUIRED_COLUMNS = {
    "episodes/start": "int64",
    "episodes/length": "int64",
    "episodes/id": "int64",
    "steps/next/terminated": "bool",
    "steps/next/truncated": "bool",
}


def format_version_of(layout: dict[str, Any]) -> int:
    """The manifest version a build with ``layout`` is written as: the oldest one that describes it."""
    frames = layout.get("frames") or {}
    if any(spec.get("codec") == "h264" for spec in frames.values()):
        return 4
    return 3 if frames else 2


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
    itemsize = ITEMSIZE.get(str(entry.get("dtype")))
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
