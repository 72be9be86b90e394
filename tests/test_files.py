"""datasets_hub/files.py: atomic writes, hashes, no-follow opens, sizes."""

from __future__ import annotations

import hashlib
import json
import os
import threading

import pytest

from datasets_hub.errors import CacheError
from datasets_hub.files import (
    hash_file,
    human_bytes,
    open_nofollow,
    sha256_file,
    sha256_json,
    write_json_atomic,
    write_text_atomic,
)


def test_human_bytes():
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(5 * 1024**3) == "5.0 GiB"


def test_write_json_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "m.json"
    target.write_text("old")
    write_json_atomic(target, {"b": 1, "a": [1, 2]})
    assert json.loads(target.read_text()) == {"a": [1, 2], "b": 1}
    assert target.read_text().index('"a"') < target.read_text().index('"b"')  # keys sorted by default
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    target = tmp_path / "m.json"
    target.write_text('{"kept": true}')
    with pytest.raises(TypeError):
        write_text_atomic(target, 42)  # type: ignore[arg-type]  # the wrong type is what is tested
    assert json.loads(target.read_text()) == {"kept": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


def test_concurrent_writers_never_share_a_temporary_file(tmp_path):
    target = tmp_path / "m.json"
    errors = []

    def write(i):
        try:
            for _ in range(50):
                write_json_atomic(target, {"writer": i, "pad": "x" * 1000})
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and json.loads(target.read_text())["writer"] in range(4)


def test_a_symlink_is_never_written_through(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    link = tmp_path / "cache.partial"
    link.symlink_to(outside)
    with pytest.raises(CacheError, match="symbolic link"):
        open_nofollow(link)
    assert outside.read_text() == "precious"


def test_mode_restricts_a_file_that_may_hold_secrets(tmp_path):
    target = write_json_atomic(tmp_path / "catalogue.json", {"url": "https://user:pass@host/x"}, mode=0o600)
    assert os.stat(target).st_mode & 0o077 == 0


def test_hashes(tmp_path):
    data = bytes(range(256)) * 5000
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
    assert hash_file(path, limit=1000).hexdigest() == hashlib.sha256(data[:1000]).hexdigest()
    assert sha256_json({"b": 1, "a": 2}) == sha256_json({"a": 2, "b": 1})
    with pytest.raises(TypeError):
        sha256_json({"a": object()})
    assert len(sha256_json({"a": object()}, default=str)) == 64
