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


def parse_published(data: bytes, shown: str) -> dict[str, Any]:
    """The publishing record ``published.json`` (``data``) of the folder ``shown``, after checking that it
    is one, in a version this datasets_hub reads; :class:`CacheError` naming the fix otherwise."""
    try:
        published = json.loads(data)
    except ValueError as exc:
        raise CacheError(
            f"{shown}/{PUBLISHED} is not JSON ({exc}): is this a folder written by `datasets-hub export`?"
        ) from exc
    if not isinstance(published, dict) or published.get("format") != PUBLISHED_FORMAT:
        raise CacheError(f"{shown}/{PUBLISHED} is not a datasets_hub publishing record; export the build again")
    if published.get("version") != PUBLISHED_VERSION:
        raise CacheError(
            f"{shown} was published in format version {published.get('version')}, this datasets_hub reads "
            f"{PUBLISHED_VERSION}: upgrade datasets_hub (pip install -U datasets-hub) or export the build again"
        )
    return published
