"""Small file primitives every layer of the hub shares: one home for each.

- :func:`write_json_atomic` / :func:`write_text_atomic`: write beside the target and rename over it,
  so a reader sees the old file or the new one, never half of one (a crash leaves a ``.tmp`` file).
- :func:`sha256_file`: the sha256 of a file's bytes, read in 1 MiB blocks (bounded memory).

Only the standard library: anything may import this module.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping

TMP_SUFFIX = ".tmp"
_HASH_BLOCK = 1 << 20


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Replace ``path`` by ``text`` atomically (written to ``<path>.tmp``, then renamed); returns ``path``."""
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return path


def write_json_atomic(path: str | Path, payload: Mapping[str, Any] | list, *, indent: int | None = 1,
                      sort_keys: bool = True) -> Path:
    """Replace ``path`` by ``payload`` as JSON atomically; values JSON cannot hold are written as ``str``."""
    return write_text_atomic(path, json.dumps(payload, indent=indent, sort_keys=sort_keys, default=str))


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of the bytes of ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_HASH_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()
