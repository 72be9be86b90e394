"""Local files read where they are (``Resource(in_place=True)``), identified by their content.

A loader that reads a user's folder (a local LeRobot dataset, ``root=...``) marks its ``file://``
resources ``in_place``: the core neither copies nor links them into ``<cache>/raw/`` (``cache ls``
lists none of them), and hands the loader the user's own paths. Their identity in a build
fingerprint is their sha256, not their path: a folder rewritten with other bytes is another build,
the same bytes moved elsewhere are the same build. Hashing a large folder on every ``load`` would
cost what copying it cost, so each file's sha256 is remembered in ``<cache>/in-place/`` with the
file's size, mtime and inode, and computed again only when one of those changes.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

from datasets_hub.errors import ChecksumMismatch, DownloadError
from datasets_hub.files import sha256_file, sha256_json, write_json_atomic
from datasets_hub.loader import Resource


def local_path(resource: Resource) -> Path:
    """The file an in-place resource names (its first URL, ``file:///absolute/path``)."""
    parts = urlsplit(resource.urls[0])
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        raise DownloadError(
            f"{resource.name}: a resource read in place needs a local file:///absolute/path URL, got {resource.urls[0]!r}"
        )
    path = Path(url2pathname(unquote(parts.path)))
    if not path.is_file():
        raise DownloadError(f"{resource.name}: {path} does not exist (it is read in place, never copied)")
    return path


def _memo_file(path: Path) -> Path:
    from datasets_hub.env import cache_root

    return cache_root() / "in-place" / f"{sha256_json(str(path))[:32]}.json"


def content_sha256(path: Path) -> str:
    """The sha256 of ``path``'s bytes, hashed again only when its size, mtime or inode changed."""
    path = Path(path).resolve()
    stat = path.stat()
    state = [stat.st_size, stat.st_mtime_ns, stat.st_ino]
    memo = _memo_file(path)
    try:
        record = json.loads(memo.read_text())
        if record.get("path") == str(path) and record.get("state") == state:
            return str(record["sha256"])
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    digest = sha256_file(path)
    if [path.stat().st_size, path.stat().st_mtime_ns, path.stat().st_ino] == state:  # not written meanwhile
        try:
            memo.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(memo, {"path": str(path), "state": state, "sha256": digest}, indent=None)
        except OSError:
            pass  # a read-only cache: hashed again next time, only slower
    return digest


def identified(resource: Resource) -> Resource:
    """``resource`` with the sha256 of its bytes when it is read in place (else unchanged).

    A sha256 the loader gave is checked: a local file whose bytes differ is a :class:`ChecksumMismatch`.
    """
    if not resource.in_place:
        return resource
    path = local_path(resource)
    digest = content_sha256(path)
    if resource.sha256 and resource.sha256.lower() != digest:
        raise ChecksumMismatch(
            f"{resource.name}: {path} has sha256 {digest}, not the {resource.sha256.lower()} it should have"
        )
    if resource.size is not None and resource.size != os.stat(path).st_size:
        raise ChecksumMismatch(f"{resource.name}: {path} has {os.stat(path).st_size} bytes, not {resource.size}")
    return replace(resource, sha256=digest)
