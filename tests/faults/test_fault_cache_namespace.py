"""The cache's own names, locks and broken states (issue 12): reserved markers, removals that take the
writers' locks, PID reuse, empty manifests, a file where a directory belongs, builds of another version."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import warnings

import pytest

import datasets_hub as dh
from datasets_hub.cache import listing as cl
from datasets_hub.cache import maintenance as mt
from datasets_hub.cache.verify import verify
from datasets_hub.cli import main
from datasets_hub.errors import CacheError, HubError, InvalidParameter

from fixtures.faults import d4rl_entry, double_observation, register

CARTPOLE = {"loader": "gym", "params": {"env": "CartPole-v1", "policy": "random", "steps": 300, "seed": 0}}


@pytest.fixture
def catalogue(tmp_path, monkeypatch):
    def write(entries):
        register(tmp_path / "extra.yaml", entries)
        monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(tmp_path / "extra.yaml"))

    return write


@contextlib.contextmanager
def held_elsewhere(lock_path):
    """Hold ``lock_path`` (a filelock) in another process, as a writer busy there would."""
    code = (
        "import sys\nfrom filelock import FileLock\nl = FileLock(sys.argv[1]); l.acquire()\n"
        "print('held', flush=True)\nsys.stdin.read()\n"
    )
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(lock_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        yield
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


@pytest.mark.parametrize("bad", ["gym/x.incomplete", "gym/x.deleting-999", "gym/a/b.lock", "gym/x.partial"])
def test_marker_names_are_reserved_in_ids(bad):
    with pytest.raises(InvalidParameter, match="reserved"):
        dh.register_dataset(bad, loader="gym", params=CARTPOLE["params"])


def test_marker_suffixes_are_reserved_in_resource_names(catalogue):
    catalogue({"d4rl/sidecar-name-v0": d4rl_entry("http://127.0.0.1:9/x.hdf5", name="x.hdf5.sha256")})
    with pytest.raises(InvalidParameter, match="reserved"):
        dh.load("d4rl/sidecar-name-v0")


def test_an_id_named_data_is_listed_and_its_preprocessing_survives_prune(catalogue):
    catalogue({"gym/data": CARTPOLE})
    rb = dh.load("gym/data")
    pre = rb.preprocess(double_observation, num_workers=0)
    assert "gym/data" in {b.id for b in cl.list_cache().builds}
    mt.prune()
    assert pre.storage.path.is_dir() and len(dh.load("gym/data", preprocess=double_observation)) == len(rb)


def test_rm_and_prune_never_delete_preprocessing_in_progress(catalogue, isolated_cache):
    catalogue({"gym/busy": CARTPOLE})
    build = dh.download("gym/busy")
    variant = isolated_cache / "preprocessed" / build.name / "0123456789abcdef.incomplete"
    variant.mkdir(parents=True)
    (variant / "data.memmap").write_bytes(b"x" * 100)
    with held_elsewhere(variant.with_name("0123456789abcdef.lock")):  # another process is computing it
        with pytest.raises(CacheError, match="being preprocessed by another process"):
            mt.remove("gym/busy")
        assert main(["rm", "gym/busy"]) == 1
        items = mt.prune(older_than_days=0)
        assert any(i.skipped for i in items) and variant.is_dir() and (build / "manifest.json").is_file()
    mt.remove("gym/busy")
    assert not build.exists() and not variant.exists()


def test_rm_raw_never_deletes_a_download_in_progress(catalogue, tmp_path, isolated_cache):
    from fixtures.faults import write_d4rl

    source = write_d4rl(tmp_path / "r.hdf5", rows=30)
    catalogue({"d4rl/raw-busy-v0": d4rl_entry(source.as_uri())})
    dh.download("d4rl/raw-busy-v0")
    raw = next((isolated_cache / "raw" / "d4rl").glob("*/r.hdf5"))
    partial = raw.with_name("r.hdf5.partial")
    partial.write_bytes(b"half")
    with held_elsewhere(raw.with_name("r.hdf5.lock")):
        with pytest.raises(CacheError, match="being downloaded"):
            mt.remove("d4rl/raw-busy-v0", raw=True)
        assert partial.exists()
    mt.remove("d4rl/raw-busy-v0", raw=True)
    assert not partial.exists() and not raw.exists()


def test_a_deleting_leftover_of_a_reused_pid_is_reclaimed(catalogue):
    catalogue({"gym/pid": CARTPOLE})
    build = dh.download("gym/pid")
    for pid in (1, os.getpid()):  # what a killed deleter leaves, named after a PID alive again
        leftover = build.with_name(f"{build.name}.deleting-{pid}")
        (leftover / "data").mkdir(parents=True)
        (leftover / "data" / "x").write_bytes(b"x")
    assert dh.download("gym/pid", force=True) == build  # rebuilding renames the old build aside: no ENOTEMPTY
    items = mt.prune()
    assert {i.path.name for i in items if not i.skipped} >= {
        f"{build.name}.deleting-1",
        f"{build.name}.deleting-{os.getpid()}",
    }
    assert not list(build.parent.glob("*.deleting-*"))


@pytest.mark.parametrize("content", [b"", b'{"cut', b"[1, 2]"])
def test_an_unreadable_manifest_is_a_broken_build_that_can_be_cleared(catalogue, capsys, content):
    catalogue({"gym/broken": CARTPOLE, "gym/fine": {**CARTPOLE, "params": {**CARTPOLE["params"], "seed": 1}}})
    build = dh.download("gym/broken")
    dh.download("gym/fine")
    (build / "manifest.json").write_bytes(content)  # a power loss while it was published
    with pytest.raises(CacheError, match="rm"):
        dh.load("gym/broken")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [b.id for b in cl.list_cache().builds] == ["gym/fine"]
        assert "gym/fine" in cl.cached_ids()
    assert any("broken build" in str(w.message) for w in caught)
    assert main(["list"]) == 0 and main(["cache", "ls"]) == 0
    if content == b"":
        assert dh.download("gym/broken", force=True) == build and len(dh.load("gym/broken")) == 300
    elif content == b"[1, 2]":
        assert mt.remove("gym/broken") == [build] and len(dh.load("gym/broken")) == 300
    else:
        items = mt.prune()
        assert any(i.path == build and "broken" in i.reason for i in items) and not build.exists()
        assert len(dh.load("gym/broken")) == 300


def test_a_regular_file_where_the_cache_expects_a_directory(catalogue, tmp_path, monkeypatch):
    catalogue({"gym/file": CARTPOLE})
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("DATASETS_HUB_CACHE", str(blocker))
    with pytest.raises(HubError) as info:
        dh.load("gym/file")
    assert "regular file" in str(info.value) and "unreadable manifest" not in str(info.value)


def test_a_healthy_build_of_another_version_passes_verify_all_builds(catalogue, monkeypatch, capsys):
    from datasets_hub.loaders.gym.loader import GymLoader

    catalogue({"gym/old": CARTPOLE})
    build = dh.download("gym/old")
    monkeypatch.setattr(GymLoader, "format_version", GymLoader.format_version + 1)  # the library moved on
    result = verify("gym/old", all_builds=True)
    assert result.ok, result.problems
    assert any("healthy build" in n for n in result.notes)
    assert main(["verify", "gym/old", "--all-builds"]) == 0
    healthy = " ".join(n for n in result.notes if "healthy" in n)
    assert "datasets-hub rm" not in healthy and "delete" not in healthy and "edited" not in healthy
    assert "edited" not in capsys.readouterr().out and build.is_dir()
    (build / "manifest.json").write_text(
        json.dumps({**json.loads((build / "manifest.json").read_text()), "params": {"steps": 1}})
    )
    assert not verify("gym/old", all_builds=True).ok  # an edited manifest is still a problem


def test_filelock_is_a_release_fixed_for_cve_2025_68146(tmp_path):
    """filelock < 3.20.1 followed a symlinked ``.lock`` and truncated its target (CVE-2025-68146)."""
    import re
    from importlib.metadata import version
    from pathlib import Path

    from packaging.version import Version

    from datasets_hub.cache.layout import file_lock

    fixed = Version("3.20.1")
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    floor = re.search(r'"filelock>=([0-9.]+)"', pyproject)
    assert floor and Version(floor.group(1)) >= fixed, "pyproject.toml admits a filelock with CVE-2025-68146"
    assert Version(version("filelock")) >= fixed
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, tmp_path / "x.lock")
    with contextlib.suppress(OSError), file_lock(tmp_path / "x.lock", timeout=1):
        pass
    assert victim.read_text() == "precious"
