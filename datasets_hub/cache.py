"""Where things live on disk (docs/design/on-disk.md) and how a build is published atomically.

    <cache>/raw/<loader>/...                         downloaded upstream files
    <cache>/datasets/<loader>/<name>/<build-fp>/     one converted build (manifest.json + data/)
    <cache>/preprocessed/<build-fp>/<transform-fp>/  cached preprocessing results

The cache root is read from ``DATASETS_HUB_CACHE`` at call time, never at import.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datasets_hub import env
from datasets_hub.build_format import MANIFEST
from datasets_hub.errors import CacheError
from datasets_hub.files import sha256_json

INCOMPLETE_SUFFIX = ".incomplete"
#: the cache's sub-directories (the layout in the module docstring); nowhere else spells them
RAW, DATASETS, PREPROCESSED = "raw", "datasets", "preprocessed"
SECTIONS = (RAW, DATASETS, PREPROCESSED)


cache_root = env.cache_root  # where every path below starts (read at call time)


def raw_root() -> Path:
    """``<cache>/raw``: every loader's downloads."""
    return cache_root() / RAW


def raw_dir(loader: str) -> Path:
    return raw_root() / loader


def raw_file_path(loader_name: str, resource_name: str) -> Path:
    """Where a loader's resource is kept: ``<cache>/raw/<loader>/<name>``; names must be safe
    relative paths (a loader cannot make the hub write outside its raw folder)."""
    parts = Path(resource_name).parts
    if (
        not resource_name
        or Path(resource_name).is_absolute()
        or any(p in ("..", ".") for p in parts)
        or "\x00" in resource_name
    ):
        from datasets_hub.errors import InvalidParameter

        raise InvalidParameter(
            f"the {loader_name!r} loader names a raw file {resource_name!r}: names must be relative paths "
            "without '..' (a loader bug; report it to the loader's authors)"
        )
    return raw_dir(loader_name).joinpath(*parts)


def datasets_dir() -> Path:
    return cache_root() / DATASETS


def dataset_dir(dataset_id: str) -> Path:
    """All builds of one id: ``<cache>/datasets/<loader>/<name>`` (the id is validated upstream)."""
    return datasets_dir().joinpath(*dataset_id.split("/"))


def preprocessed_root() -> Path:
    """``<cache>/preprocessed``: every preprocessing result, by build fingerprint."""
    return cache_root() / PREPROCESSED


def preprocessed_dir(build_fp: str) -> Path:
    return preprocessed_root() / build_fp


def fingerprint(payload: Any, length: int = 16) -> str:
    """A stable short hash of JSON-able ``payload`` (keys sorted)."""
    return sha256_json(payload, default=str)[:length]


def read_manifest(build_dir: Path) -> dict[str, Any] | None:
    """The manifest of a published build, or ``None`` when there is no complete build there."""
    path = build_dir / MANIFEST
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise CacheError(
            f"the manifest {path} is unreadable ({exc}); remove the build with "
            f"`datasets-hub rm` or delete {build_dir} and load again"
        ) from exc


def iter_builds() -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every published build in the cache with its manifest (incomplete builds are skipped)."""
    root = datasets_dir()
    if not root.is_dir():
        return
    for manifest_path in sorted(root.rglob(MANIFEST)):
        build = manifest_path.parent
        if build.name.endswith(INCOMPLETE_SUFFIX) or "data" in build.relative_to(root).parts:
            continue
        manifest = read_manifest(build)
        if manifest is not None:
            yield build, manifest


def dir_size(path: Path) -> int:
    """Bytes used by the regular files under ``path``."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def ensure_writable_dir(path: Path) -> Path:
    """Create ``path`` (and parents) or raise a ``CacheError`` that says how to fix it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheError(
            f"cannot create {path} ({exc.strerror}); point DATASETS_HUB_CACHE at a writable "
            "directory, or fix the permissions"
        ) from exc
    if not os.access(path, os.W_OK):
        raise CacheError(
            f"the cache directory {path} is read-only; point DATASETS_HUB_CACHE at a writable "
            "directory (existing builds can still be read)"
        )
    return path


def file_lock(path: Path, timeout: float = -1):
    """An inter-process lock on ``path`` (a ``.lock`` file beside what it protects)."""
    from filelock import FileLock

    return FileLock(str(path), timeout=timeout)


def remove_tree(path: Path) -> None:
    """Delete ``path`` so that no reader ever sees it half-deleted: rename aside first."""
    if not path.exists():
        return
    doomed = path.with_name(path.name + f".deleting-{os.getpid()}")
    os.replace(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
