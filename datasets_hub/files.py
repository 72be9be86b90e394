"""Small file primitives every layer of the hub shares: one home for each.

- :func:`write_json_atomic` / :func:`write_text_atomic`: write beside the target and rename over it,
  so a reader sees the old file or the new one, never half of one. The temporary file is named
  ``<name>.<pid>-<thread>.tmp`` (concurrent writers never share one), is opened without following
  a symlink, and is removed when the write fails; a killed process leaves it for ``cache prune``.
- :func:`sha256_file` / :func:`hash_file`: the sha256 of a file's bytes, read in 1 MiB blocks
  (bounded memory); :func:`sha256_json`: of a JSON-able value, keys sorted.

Only the standard library: anything may import this module.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".tmp"
_HASH_BLOCK = 1 << 20


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Replace ``path`` by ``text`` atomically (written to ``<path>.tmp``, then renamed); returns ``path``."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}{TMP_SUFFIX}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        with open(os.open(tmp, flags, 0o666), "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise
    return path


def write_json_atomic(
    path: str | Path, payload: Mapping[str, Any] | list, *, indent: int | None = 1, sort_keys: bool = True
) -> Path:
    """Replace ``path`` by ``payload`` as JSON atomically; values JSON cannot hold are written as ``str``."""
    return write_text_atomic(path, json.dumps(payload, indent=indent, sort_keys=sort_keys, default=str))


def hash_file(path: str | Path, limit: int | None = None) -> hashlib._Hash:
    """A sha256 hasher fed with the bytes of ``path`` (its first ``limit`` bytes when given), to go
    on updating (a resumed download) or to read with ``hexdigest()``."""
    digest = hashlib.sha256()
    left = limit
    with open(path, "rb") as fh:
        while left is None or left > 0:
            block = fh.read(_HASH_BLOCK if left is None else min(_HASH_BLOCK, left))
            if not block:
                break
            digest.update(block)
            if left is not None:
                left -= len(block)
    return digest


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of the bytes of ``path``."""
    return hash_file(path).hexdigest()


def sha256_json(payload: Any, *, default: Any = None) -> str:
    """The hex sha256 of ``payload`` as canonical JSON (keys sorted, no blanks); values JSON cannot
    hold go through ``default`` (None: a ``TypeError``, for callers that must know)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=default)
    return hashlib.sha256(text.encode()).hexdigest()
