"""Small file primitives every layer of the hub shares: one home for each.

- :func:`write_json_atomic` / :func:`write_text_atomic`: write beside the target and rename over it,
  so a reader sees the old file or the new one, never half of one. The temporary file is named
  ``<name>.<pid>-<thread>.tmp`` (concurrent writers never share one), is opened without following
  a symlink, and is removed when the write fails; a killed process leaves it for ``cache prune``.
- :func:`sha256_file`: the sha256 of a file's bytes, read in 1 MiB blocks (bounded memory).

Only the standard library: anything may import this module.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Mapping

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


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of the bytes of ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_HASH_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()
