"""The published form of a build (see :mod:`datasets_hub.remote.publish`, which writes it, and
:mod:`datasets_hub.remote.open_url`, which reads it): its file names, format version, chunking rule and the
dtypes it can hold. Both sides import it; neither imports the other.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from datasets_hub.errors import CacheError, MissingDependency

PUBLISHED = "published.json"
PUBLISHED_FORMAT = "datasets_hub.published"
PUBLISHED_VERSION = 1
ZARR_DIR = "data.zarr"
DEFAULT_CHUNK_BYTES = 256 << 10  # a lazy first batch fetches one chunk per leaf and slice: keep them small
MAX_CHUNK_BYTES = 1 << 30  # a chunk is fetched, verified and decoded whole, in memory: larger is never useful

# the build's dtype names (torch's) -> numpy dtypes zarr v3 stores natively
_NUMPY_DTYPES = {
    "bool": np.bool_,
    "uint8": np.uint8,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
}


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a build leaf whose manifest dtype is ``name`` (refuses what zarr cannot hold)."""
    try:
        return np.dtype(_NUMPY_DTYPES[name])
    except KeyError:
        raise CacheError(
            f"a build leaf has dtype {name!r}, which a published build cannot hold (supported: "
            f"{', '.join(sorted(_NUMPY_DTYPES))}); convert it with a preprocessing step first"
        ) from None


def require_zarr() -> Any:
    try:
        import zarr
    except ImportError as exc:
        raise MissingDependency(
            "publishing and loading published builds needs zarr v3: pip install 'datasets-hub[remote]'"
        ) from exc
    if int(zarr.__version__.split(".")[0]) < 3:
        raise MissingDependency(
            f"zarr {zarr.__version__} is installed; published builds need zarr v3: pip install -U 'zarr>=3'"
        )
    return zarr


def chunk_rows_for(row_bytes: int, chunk_bytes: int) -> int:
    """Rows per chunk so that one uncompressed chunk holds about ``chunk_bytes``."""
    return max(1, chunk_bytes // max(1, row_bytes))


# Bounds on what a publishing record may declare, so that a crafted one is refused by name instead of
# exhausting memory: per-chunk bookkeeping costs ~13 bytes of RAM per chunk, and a leaf's local file is
# allocated at its declared size.
MAX_PUBLISHED_BYTES = 256 << 20  # published.json itself (a real one is about 100 bytes per chunk)
MAX_CHUNKS = 1 << 28  # of all leaves together (~3.5 GiB of bookkeeping)
MAX_LEAF_BYTES = 1 << 50  # one leaf's uncompressed size (1 PiB)
_HEX = frozenset("0123456789abcdef")


def parse_published(data: bytes, shown: str) -> dict[str, Any]:
    """The publishing record ``published.json`` (``data``) of the folder ``shown``, after checking that it
    is one, in a version this datasets_hub reads, and that every field a reader uses has the type and
    range it must (:func:`check_published`); :class:`CacheError` naming the fix otherwise."""
    if len(data) > MAX_PUBLISHED_BYTES:
        raise CacheError(
            f"{shown}/{PUBLISHED} is {len(data):,} bytes, more than a publishing record can be "
            f"({MAX_PUBLISHED_BYTES:,}): is this a folder written by `datasets-hub export`?"
        )
    try:
        published = json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than any record
        raise CacheError(
            f"{shown}/{PUBLISHED} is not JSON ({type(exc).__name__}: {str(exc)[:200]}): is this a folder "
            "written by `datasets-hub export`?"
        ) from None
    if not isinstance(published, dict) or published.get("format") != PUBLISHED_FORMAT:
        raise CacheError(f"{shown}/{PUBLISHED} is not a datasets_hub publishing record; export the build again")
    if published.get("version") != PUBLISHED_VERSION:
        raise CacheError(
            f"{shown} was published in format version {published.get('version')}, this datasets_hub reads "
            f"{PUBLISHED_VERSION}: upgrade datasets_hub (pip install -U datasets-hub) or export the build again"
        )
    check_published(published, shown)
    return published


def check_published(published: dict[str, Any], shown: str) -> None:
    """Refuse a publishing record whose fields a reader would trip on: ``arrays`` (per leaf ``rows``,
    ``shape``, ``dtype``, ``chunk_rows`` and ``chunks`` = ceil(rows / chunk_rows)), ``files`` (per file a
    64-hex ``sha256`` and ``bytes``) and ``manifest_sha256``, within :data:`MAX_CHUNKS` and
    :data:`MAX_LEAF_BYTES`. Whether ``chunk_rows`` agrees with each leaf's hash-checked zarr metadata is
    checked when that metadata is read (:mod:`datasets_hub.remote.chunks`)."""

    def bad(what: str) -> CacheError:
        return CacheError(f"{shown}/{PUBLISHED} is malformed: {what}; export the build again")

    def count(value: Any, low: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= low

    def sha256_hex(value: Any) -> bool:
        return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX

    if not sha256_hex(published.get("manifest_sha256")):
        raise bad("'manifest_sha256' is not a sha256")
    arrays, files = published.get("arrays"), published.get("files")
    if not isinstance(arrays, dict) or not arrays:
        raise bad("'arrays' is not a non-empty mapping of leaf names")
    if not isinstance(files, dict):
        raise bad("'files' is not a mapping of file names")
    total_chunks = 0
    for name, spec in arrays.items():
        if not isinstance(spec, dict):
            raise bad(f"arrays[{name!r}] is not a mapping")
        values: list[Any] = [spec.get(k) for k in ("rows", "shape", "chunk_rows", "chunks")]  # checked next
        rows, shape, chunk_rows, chunks = values
        if not count(rows, 0) or not count(chunk_rows, 1) or not count(chunks, 0):
            raise bad(f"arrays[{name!r}] needs integer rows >= 0, chunk_rows >= 1 and chunks >= 0")
        if not isinstance(shape, list) or len(shape) > 32 or not all(count(d, 0) for d in shape):
            raise bad(f"arrays[{name!r}]['shape'] is not a list of sizes")
        if spec.get("dtype") not in _NUMPY_DTYPES:
            raise bad(f"arrays[{name!r}]['dtype'] is {spec.get('dtype')!r}, not one of {', '.join(_NUMPY_DTYPES)}")
        if chunks != -(-rows // chunk_rows):
            raise bad(f"arrays[{name!r}] declares {chunks} chunks for {rows} rows of {chunk_rows}")
        row_bytes = np.dtype(_NUMPY_DTYPES[spec["dtype"]]).itemsize
        for d in shape:
            row_bytes *= d  # Python integers: no overflow on a crafted shape
        if rows * row_bytes > MAX_LEAF_BYTES:
            raise bad(f"arrays[{name!r}] declares {rows * row_bytes:,} bytes, more than {MAX_LEAF_BYTES:,}")
        total_chunks += chunks
    if total_chunks > MAX_CHUNKS:
        raise bad(f"it declares {total_chunks:,} chunks, more than {MAX_CHUNKS:,}")
    for relpath, entry in files.items():
        if not isinstance(entry, dict) or not sha256_hex(entry.get("sha256")) or not count(entry.get("bytes"), 0):
            raise bad(f"files[{relpath!r}] needs a 64-hex 'sha256' and integer 'bytes'")
