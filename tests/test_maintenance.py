"""datasets_hub.cache.maintenance and datasets_hub.cache.verify: verify, remove and prune the cache (function level; listing: test_cache_listing)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from filelock import FileLock

from datasets_hub.build.format import write_manifest_checksum
from datasets_hub.build.pipeline import build
from datasets_hub.cache import maintenance as mt
from datasets_hub.cache import verify as cv
from datasets_hub.errors import CacheError
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")


def fake_build(name: str = "fake/maint", lengths=(5, 3, 4)) -> Path:
    """A real build (atomic builder, lean-TED writer) of fake episodes; its id is in no catalogue."""
    spec = DatasetSpec(id=name, loader="fake", params={"lengths": list(lengths)})
    return build(spec, FakeLoader(), {}, [])


def flip_byte(path: Path, offset: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_manifest_checksum_is_sha256sum_format():
    path = fake_build()
    target = write_manifest_checksum(path)
    digest = hashlib.sha256((path / "manifest.json").read_bytes()).hexdigest()
    assert target.read_text() == f"{digest}  manifest.json\n"
    if shutil.which("sha256sum"):
        check = subprocess.run(["sha256sum", "-c", target.name], cwd=path, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_verify_build_accepts_a_fresh_build_and_says_what_it_could_not_check():
    path = fake_build()
    (path / "manifest.sha256").unlink()  # first without the manifest checksum, as an older build
    schema = json.loads((path / "manifest.json").read_text())["schema"]
    result = cv.verify_build(path)
    assert result.ok, result.problems
    assert len(result.checked) == len(schema)  # every data file rehashed
    assert any("fingerprint not recomputed" in n for n in result.notes)  # fake/ is in no catalogue
    assert any("no manifest.sha256" in n for n in result.notes)
    write_manifest_checksum(path)
    result = cv.verify_build(path)
    assert result.ok and len(result.checked) == len(schema) + 1


def test_verify_build_reports_each_damaged_file_with_its_path():
    path = fake_build()
    data = path / "data"
    flip_byte(data / "obs" / "observation.memmap", 7)  # same size, other bytes
    (data / "steps" / "action.memmap").unlink()
    with open(data / "episodes" / "length.memmap", "ab") as fh:
        fh.write(b"\0" * 8)  # one row too many
    problems = cv.verify_build(path).problems
    assert len(problems) == 3, problems
    text = "\n".join(problems)
    for name in ("observation.memmap", "action.memmap", "length.memmap"):
        assert str(data) in text and name in text
    assert "missing" in text and "sha256" in text and "bytes" in text


def test_verify_build_without_recorded_data_hashes_checks_sizes_only():
    path = fake_build()
    manifest = json.loads((path / "manifest.json").read_text())
    for entry in manifest["schema"].values():
        entry.pop("sha256")
    (path / "manifest.json").write_text(json.dumps(manifest))
    (path / "manifest.sha256").unlink()
    result = cv.verify_build(path)
    assert result.ok and sum("records no sha256" in n for n in result.notes) == len(manifest["schema"])


def test_verify_build_detects_a_moved_or_relabelled_build(isolated_cache):
    path = fake_build()
    moved = path.with_name("feedfacefeedface")
    shutil.copytree(path, moved)
    assert any("fingerprint" in p for p in cv.verify_build(moved).problems)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["id"] = "fake/other"
    (path / "manifest.json").write_text(json.dumps(manifest))
    assert any("does not match the build's location" in p for p in cv.verify_build(path).problems)


def test_verify_of_an_id_with_nothing_cached_points_at_other_builds(tmp_path):
    with pytest.raises(CacheError, match="not in the cache"):
        cv.verify("gym/cartpole-random-v0", params={"steps": 60})
    import datasets_hub as dh

    dh.download("gym/cartpole-random-v0", steps=60)
    with pytest.raises(CacheError, match="--all-builds"):
        cv.verify("gym/cartpole-random-v0", params={"steps": 61})
    assert cv.verify("gym/cartpole-random-v0", all_builds=True).ok


def test_remove_all_builds_of_an_id_and_their_preprocessed_results(isolated_cache):
    a = fake_build(lengths=(5, 3))
    b = fake_build(lengths=(2, 2, 2))
    keep = fake_build("fake/keep")
    pre = isolated_cache / "preprocessed" / a.name / "0123456789abcdef"
    pre.mkdir(parents=True)
    (pre / "x").write_bytes(b"1")
    assert mt.builds_of("fake/maint") == sorted([a, b])
    removed = mt.remove("fake/maint", all_builds=True)
    assert sorted(removed) == sorted([a, b])
    assert not a.exists() and not b.exists() and not pre.parent.exists()
    left = isolated_cache / "datasets" / "fake" / "maint"
    assert all(p.name.endswith(".lock") for p in left.iterdir())  # locks stay (unlinking one is a race)
    assert (keep / "manifest.json").is_file()
    assert mt.remove("fake/maint", all_builds=True) == []


def test_prune_respects_locks_and_live_deleters(isolated_cache):
    a = fake_build()
    raw = isolated_cache / "raw" / "d4rl"
    raw.mkdir(parents=True)
    busy_partial = raw / "busy.hdf5.partial"
    busy_partial.write_bytes(b"1" * 10)
    import fcntl

    live = a.with_name(f"abc.deleting-{os.getpid()}-1")  # a living deleter holds its flock
    live.mkdir()
    # a leftover named after a PID that is alive again (PID reuse: PID 1 in every container): no lock, reclaimed
    gone = a.with_name(f"abc.deleting-{os.getppid()}-2")
    gone.mkdir()
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with FileLock(str(raw / "busy.hdf5.lock")):  # a download in progress holds its lock
            items = mt.prune()
    finally:
        os.close(fd)
    by_path = {i.path: i for i in items}
    assert by_path[busy_partial].skipped and busy_partial.exists()
    assert by_path[gone].skipped is None and not gone.exists()
    assert by_path[live].skipped and live.exists()
    assert (a / "manifest.json").is_file()
    items = mt.prune()
    assert sorted(i.path for i in items) == sorted([busy_partial, live]) and not busy_partial.exists()
    assert not live.exists()
    with pytest.raises(ValueError, match="days"):
        mt.prune(older_than_days=-1)


def test_prune_old_builds_uses_the_manifest_date(isolated_cache):
    a = fake_build()
    manifest = json.loads((a / "manifest.json").read_text())
    manifest["created"] = "2000-01-01T00:00:00Z"
    (a / "manifest.json").write_text(json.dumps(manifest))
    b = fake_build("fake/new")
    items = mt.prune(older_than_days=365, dry_run=True)
    assert [i.path for i in items] == [a] and a.exists()
    mt.prune(older_than_days=365)
    assert not a.exists() and b.exists()
