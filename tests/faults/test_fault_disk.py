"""A full disk and a read-only cache, in child processes (forked from a warm parent).

Disk full: RLIMIT_FSIZE caps the size of any file the child writes (SIGXFSZ ignored, so a write
past the cap fails with EFBIG, as a full disk fails with ENOSPC); the hub must raise a clear
``CacheError``, remove the incomplete build, and work once the limit is gone.

Read-only: the cache is chmod'ed read-only. Root ignores permissions, so a root child first drops
CAP_DAC_OVERRIDE/DAC_READ_SEARCH/FOWNER; if writes still succeed (no capset), the test is skipped.
"""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest

import datasets_hub as dh

from fixtures.faults import Zygote, cache_state_ok, check_rows, d4rl_entry, hub_env, register, write_d4rl
from fixtures.http_server import serve_files

GYM = "gym/cartpole-random-v0"
D4RL = "d4rl/fault-disk-v0"
FILE = "fault-disk-v0.hdf5"


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    z = Zygote(tmp_path_factory.mktemp("zygote"))
    yield z
    z.close()


@pytest.fixture
def d4rl_served(tmp_path, monkeypatch):
    payload = write_d4rl(tmp_path / FILE, rows=20000, episode_len=500).read_bytes()  # ~700 KB
    with serve_files({f"m/{FILE}": payload}) as server:
        register(tmp_path / "extra.yaml", {D4RL: d4rl_entry(server.url(f"m/{FILE}"), name=FILE)})
        monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(tmp_path / "extra.yaml"))
        yield server, payload


LOAD = """
import datasets_hub as dh
rb = dh.load({id!r}, **{params!r})
RESULT = {{"rows": len(rb), "first": rb[:4]["observation"].tolist()}}
"""


def test_disk_full_during_a_build(zygote, isolated_cache):
    result = zygote.run(LOAD.format(id=GYM, params={"steps": 4000}), env=hub_env(isolated_cache), fsize=16 << 10)
    assert not result["ok"] and result["type"] == "CacheError", result
    assert "disk filled up while building" in result["message"] and "partial build was removed" in result["message"]
    state = cache_state_ok(isolated_cache)
    assert state["builds"] == 0 and state["incomplete"] == 0
    assert not list(isolated_cache.rglob("*.tmp"))  # no cut catalogue copy either
    # space returns: the same load succeeds and verifies
    rb = dh.load(GYM, steps=4000)
    assert len(rb) == 4000 and cache_state_ok(isolated_cache)["builds"] == 1


def test_disk_full_during_a_download_keeps_a_resumable_partial(zygote, isolated_cache, d4rl_served):
    server, payload = d4rl_served
    downloader_env = hub_env(isolated_cache)
    result = zygote.run(LOAD.format(id=D4RL, params={}), env=downloader_env, fsize=200 << 10)
    assert not result["ok"] and result["type"] == "CacheError", result
    message = result["message"]
    assert "disk filled up while downloading" in message and server.url(f"m/{FILE}") in message and FILE in message
    state = cache_state_ok(isolated_cache, {FILE: payload})
    assert state["builds"] == 0 and state["partial"] == 1
    partial = next((isolated_cache / "raw" / "d4rl").glob(f"*/{FILE}.partial"))
    assert partial.stat().st_size <= 200 << 10
    rb = dh.load(D4RL)
    check_rows(rb)
    assert server.ranges(f"m/{FILE}")[-1] == f"bytes={partial.stat().st_size if partial.exists() else 204800}-"


def test_disk_full_while_writing_a_large_leaf_of_a_d4rl_build(zygote, isolated_cache, d4rl_served):
    _server, payload = d4rl_served
    dh.download(D4RL)  # raw + build; then remove the build only
    from datasets_hub.cache.maintenance import remove

    remove(D4RL)
    result = zygote.run(
        LOAD.format(id=D4RL, params={}), env=hub_env(isolated_cache), fsize=100 << 10
    )  # the raw file exists; obs is 240 KB
    if result["ok"]:  # every build file fitted under the cap: nothing to test with this layout
        pytest.skip("no build file exceeded the cap")
    assert result["type"] == "CacheError" and "disk filled up while building" in result["message"]
    assert cache_state_ok(isolated_cache, {FILE: payload})["builds"] == 0
    check_rows(dh.load(D4RL))


def _make_read_only(root):
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o444)
        os.chmod(dirpath, 0o555)


def _make_writable(root):
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)


PROBE = """
import os
try:
    open(os.path.join(os.environ["DATASETS_HUB_CACHE"], "probe"), "w").close()
    RESULT = "writable"
except OSError:
    RESULT = "read-only"
"""


def test_read_only_cache(zygote, isolated_cache, d4rl_served):
    server, _payload = d4rl_served
    dh.download(GYM, steps=300)
    dh.download(D4RL)
    _make_read_only(isolated_cache)
    try:
        probe = zygote.run(PROBE, env=hub_env(isolated_cache), drop_dac=os.geteuid() == 0)
        if probe.get("value") != "read-only":
            pytest.skip(f"cannot make the cache read-only for a child process here ({probe})")
        env = hub_env(isolated_cache)
        # existing builds: load, sample and verify work
        for dataset_id, params, rows in ((GYM, {"steps": 300}, 300), (D4RL, {}, 20000)):
            code = LOAD.format(id=dataset_id, params=params) + (
                "\nfrom datasets_hub.cache.verify import verify\n"
                f"RESULT['verified'] = verify({dataset_id!r}, params={params!r}).ok\n"
                f"RESULT['sample'] = dh.load({dataset_id!r}, batch_size=8, **{params!r}).sample().batch_size[0]\n"
            )
            result = zygote.run(code, env=env, drop_dac=True)
            assert result["ok"], result
            assert result["value"]["rows"] == rows and result["value"]["verified"] and result["value"]["sample"] == 8
        # a new build: a clear error naming the directory and the fix
        result = zygote.run(LOAD.format(id=GYM, params={"steps": 301}), env=env, drop_dac=True)
        assert not result["ok"] and result["type"] == "CacheError", result
        assert "read-only" in result["message"] and "DATASETS_HUB_CACHE" in result["message"]
        # a new download: the same
        register_path = os.environ["DATASETS_HUB_REGISTRY"]
        with open(register_path, "a") as fh:
            fh.write(
                f"d4rl/fault-disk-v1:\n  loader: d4rl\n  resources:\n  - url: {server.url('m/' + FILE)}\n"
                f"    name: other.hdf5\n"
            )
        result = zygote.run(LOAD.format(id="d4rl/fault-disk-v1", params={}), env=hub_env(isolated_cache), drop_dac=True)
        assert not result["ok"] and result["type"] == "CacheError", result
        assert "read-only" in result["message"] and "other.hdf5" in result["message"]
        assert not list(isolated_cache.rglob("*.incomplete")) and not list(isolated_cache.rglob("*.partial"))
    finally:
        _make_writable(isolated_cache)
    assert len(dh.load(GYM, steps=301)) == 301  # writable again: works


# ------------------------------------------------------------------------------------ a real full disk
@contextlib.contextmanager
def small_tmpfs(path, size: str = "8m"):
    """A real, small tmpfs at ``path`` (root only; skipped with the reason where mounting is refused)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}); the RLIMIT_FSIZE cases still run"
        )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


EXTEND = """
import torch
from tensordict import TensorDict
from datasets_hub import LazyMemmapStorage, TensorDictReplayBuffer
rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(100_000, scratch_dir={scratch!r}))
for start in range(0, 100_000, 10_000):  # 25.6 MB in all
    rb.extend(TensorDict({{"obs": torch.ones(10_000, 64)}}, batch_size=[10_000]))
RESULT = len(rb)
"""

PREPROCESS = """
import torch
import datasets_hub as dh
def big(td):
    out = td.select("observation").clone()
    out["feature"] = torch.ones(td.batch_size[0], 512)
    return out
rb = dh.load("gym/cartpole-random-v0", steps=6000)
RESULT = len(rb.preprocess(big, num_workers=0))
"""


@pytest.mark.parametrize("where", ["tmpfs", "rlimit"])
def test_a_full_disk_under_a_memmap_storage_is_a_cache_error_not_sigbus(zygote, tmp_path, where):
    scratch = tmp_path / "small" / "rb"
    if where == "tmpfs":
        with small_tmpfs(tmp_path / "small"):
            job = zygote.start(EXTEND.format(scratch=str(scratch)))
            sig, result = job.wait()
    else:
        job = zygote.start(EXTEND.format(scratch=str(scratch)), fsize=8 << 20)
        sig, result = job.wait()
    assert sig is None, f"killed by signal {sig} (SIGBUS is 7); log:\n{job.log()}"
    assert result and not result["ok"] and result["type"] == "CacheError", result
    assert "LazyMemmapStorage" in result["message"] and "no room" in result["message"]


def test_a_full_disk_while_preprocessing_in_process_is_a_cache_error_not_sigbus(zygote, tmp_path):
    with small_tmpfs(tmp_path / "small", "8m") as cache:
        job = zygote.start(PREPROCESS, env=hub_env(cache))  # the build fits (~0.3 MB), the 12 MB result does not
        sig, result = job.wait()
        assert sig is None, f"killed by signal {sig} (SIGBUS is 7); log:\n{job.log()}"
        assert result and not result["ok"] and result["type"] == "CacheError", result
        assert "preprocessing with" in result["message"] and "no room" in result["message"]
        assert not list((cache / "preprocessed").rglob("*.memmap"))  # nothing half-made is left
