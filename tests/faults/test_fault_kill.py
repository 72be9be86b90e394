"""Slow trials (``make test-faults``): kill -9 at seeded random points of downloads and builds,
8 processes loading one id at once, and ``rm`` while another process samples.

After every kill: no visible build is partial, every visible build passes ``verify``, no raw file
holds wrong bytes at its final name, and the next load succeeds (resuming what it can). Each trial
appends a line to ``$FAULT_TRIALS_LOG`` (if set) so the README table quotes real counts.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

import datasets_hub as dh
from datasets_hub.cache.maintenance import remove
from datasets_hub.downloads import fetch as downloader

from fixtures.faults import TESTS, Zygote, cache_state_ok, check_rows, d4rl_entry, hub_env, register, write_d4rl
from fixtures.http_server import serve_files

pytestmark = pytest.mark.slow

D4RL = "d4rl/fault-kill-v0"
FILE = "fault-kill-v0.hdf5"
SERVED = f"m/{FILE}"
TRIALS = int(os.environ.get("FAULT_TRIALS", "20"))  # kills that must land inside the phase under test
MAX_TRIALS = 4 * TRIALS  # kills that land before or after it do not count; stop trying after this many


def _log(kind: str, outcome: Counter) -> None:
    target = os.environ.get("FAULT_TRIALS_LOG")
    if target:
        with open(target, "a") as fh:
            fh.write(json.dumps({"fault": kind, **outcome}) + "\n")


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    z = Zygote(tmp_path_factory.mktemp("zygote"))
    yield z
    z.close()


@pytest.fixture(scope="module")
def payload(tmp_path_factory) -> bytes:
    return write_d4rl(tmp_path_factory.mktemp("d4rl") / FILE, rows=60000, episode_len=1000).read_bytes()  # ~2 MB


@pytest.fixture
def served(payload, tmp_path, monkeypatch):
    monkeypatch.setattr(downloader, "BACKOFF_BASE", 0.0)
    with serve_files({SERVED: payload}) as server:
        register(tmp_path / "extra.yaml", {D4RL: d4rl_entry(server.url(SERVED), name=FILE)})
        monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(tmp_path / "extra.yaml"))
        yield server


LOAD = f"import datasets_hub as dh\nRESULT = len(dh.load({D4RL!r}))\n"


def _phase(cache: Path) -> str:
    """What the kill interrupted, read from the disk right after it."""
    raw = cache / "raw" / "d4rl"
    if list(cache.rglob("manifest.json")):
        return "finished before the kill"
    if list(cache.rglob("*.incomplete")):
        return "killed mid-build"
    if list(raw.glob(f"*/{FILE}")):
        return "killed between download and build"
    if list(raw.glob(f"*/{FILE}.partial")):
        return "killed mid-download"
    return "killed before the first byte"


def _recover_and_check(cache: Path, payload: bytes) -> None:
    state = cache_state_ok(cache, {FILE: payload})
    assert state["builds"] <= 1
    check_rows(dh.load(D4RL))  # resumes the partial / rebuilds over the leftovers
    state = cache_state_ok(cache, {FILE: payload})
    assert state["builds"] == 1 and state["incomplete"] == 0 and state["partial"] == 0


def test_kill_9_during_downloads(zygote, served, payload, isolated_cache):
    rng = random.Random(20240601)
    served.fault(SERVED, trickle=0.004, trickle_chunk=32 << 10)  # ~0.3 s for the 2 MB file
    outcome: Counter = Counter()
    resumed = trials = 0
    while outcome["killed mid-download"] < TRIALS and trials < MAX_TRIALS:
        trials += 1
        served.fault(SERVED, trickle=0.004)
        job = zygote.start(LOAD, env=hub_env(isolated_cache))
        time.sleep(rng.uniform(0.0, 0.35))
        job.kill()
        signal, _ = job.wait()
        phase = _phase(isolated_cache) if signal else "finished before the kill"
        outcome[phase] += 1
        served.fault(SERVED, trickle=0)
        served.reset_log()
        _recover_and_check(isolated_cache, payload)
        resumed += any(r is not None for r in served.ranges(SERVED))
        remove(D4RL, raw=True)
    outcome["recovered"] = trials
    outcome["resumed with Range"] = resumed
    _log("kill -9 during download", outcome)
    assert outcome["killed mid-download"] >= TRIALS, outcome
    assert resumed >= 1  # a killed download's bytes were reused, not fetched again


def test_kill_9_during_builds(zygote, served, payload, isolated_cache):
    rng = random.Random(20240602)
    dh.download(D4RL)
    build = dh.info(D4RL).build_path
    durations = []
    for _ in range(3):  # how long a warm child build takes here, to spread the kills over it
        remove(D4RL)
        t0 = time.monotonic()
        job = zygote.start(LOAD, env=hub_env(isolated_cache))
        job.wait()
        durations.append(time.monotonic() - t0)
        assert (build / "manifest.json").exists()
    duration = min(durations)  # the first child also pays one-off imports (h5py, the loader)
    outcome: Counter = Counter()
    trials = 0
    while outcome["killed mid-build"] < TRIALS and trials < MAX_TRIALS:
        trials += 1
        remove(D4RL)
        job = zygote.start(LOAD, env=hub_env(isolated_cache))
        time.sleep(rng.uniform(0.0, 0.85 * duration))  # the build is the end of the child's run
        job.kill()
        signal, _ = job.wait()
        outcome[_phase(isolated_cache) if signal else "finished before the kill"] += 1
        _recover_and_check(isolated_cache, payload)
    assert served.count(SERVED) == 1  # builds never needed a new download
    outcome["recovered"] = trials
    _log("kill -9 during build", outcome)
    assert outcome["killed mid-build"] >= TRIALS, outcome


PREPROCESS = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parents[1])!r})
import datasets_hub as dh
from fixtures import faults
rb = dh.load("gym/cartpole-random-v0", steps=20000)
out = rb.preprocess(faults.double_observation, num_workers=WORKERS, chunk_size=200)
RESULT = len(out)
"""


def _preprocessed_state(cache: Path) -> Counter:
    """No visible preprocessed result without its manifest; count what the kill left."""
    found: Counter = Counter()
    root = cache / "preprocessed"
    for entry in root.glob("*/*") if root.is_dir() else []:
        if entry.name.endswith(".incomplete"):
            found["incomplete"] += 1
        elif entry.is_dir() and ".deleting-" not in entry.name:
            assert (entry / "manifest.json").is_file(), f"visible preprocessed result without a manifest: {entry}"
            found["published"] += 1
    return found


def test_kill_9_during_preprocess(zygote, isolated_cache):
    from fixtures.faults import double_observation

    rng = random.Random(20240603)
    rb = dh.load("gym/cartpole-random-v0", steps=20000)
    expected = rb[:]["observation"] * 2
    timings = {}
    for workers in (0, 2):  # how long a child takes, to spread the kills over it
        t0 = time.monotonic()
        job = zygote.start(PREPROCESS.replace("WORKERS", str(workers)), env=hub_env(isolated_cache))
        _, result = job.wait()
        assert result["ok"] and result["value"] == 20000, result
        timings[workers] = time.monotonic() - t0
        shutil.rmtree(isolated_cache / "preprocessed")
    outcome: Counter = Counter()
    trials = 0
    while sum(v for k, v in outcome.items() if k.startswith("killed mid")) < TRIALS and trials < MAX_TRIALS:
        trial, trials = trials, trials + 1
        workers = 2 if trial % 8 == 7 else 0  # mostly in-process mapping; every eighth with 2 worker processes
        job = zygote.start(PREPROCESS.replace("WORKERS", str(workers)), env=hub_env(isolated_cache))
        time.sleep(rng.uniform(0.0, timings[workers]))
        job.kill()
        signal, _ = job.wait()
        state = _preprocessed_state(isolated_cache)
        if not signal or state["published"]:
            outcome["finished before the kill"] += 1
        else:
            outcome[f"killed mid-preprocess ({'2 workers' if workers else 'in-process'})"] += 1
        out = rb.preprocess(double_observation, num_workers=0, chunk_size=200)  # the next call succeeds
        assert (out[:]["observation"] == expected).all()
        assert _preprocessed_state(isolated_cache)["published"] == 1
        shutil.rmtree(isolated_cache / "preprocessed")
    outcome["recovered"] = trials
    _log("kill -9 during preprocess", outcome)
    assert sum(v for k, v in outcome.items() if k.startswith("killed mid")) >= TRIALS, outcome


# ---------------------------------------------------------------------------------------- 8 loaders at once
CONCURRENT = textwrap.dedent("""
    import hashlib, os, sys, time
    import datasets_hub as dh
    import datasets_hub.build.pipeline as build

    convert = build._convert
    def logged(*args, **kwargs):
        with open(os.environ["BUILD_LOG"], "a") as fh:
            fh.write(f"{os.getpid()}\\n")
        return convert(*args, **kwargs)
    build._convert = logged
    open(os.environ["READY"] + f".{os.getpid()}", "w").close()
    while not os.path.exists(os.environ["GO"]):
        time.sleep(0.01)
    rb = dh.load(sys.argv[1])
    data = rb[:]
    digest = hashlib.sha256()
    for key in sorted(data.keys(include_nested=True, leaves_only=True), key=str):
        digest.update(str(key).encode())
        digest.update(data.get(key).contiguous().numpy().tobytes())
    print(len(rb), digest.hexdigest(), dh.info(sys.argv[1]).build_path)
""")


def test_eight_processes_load_one_id_at_once(served, payload, tmp_path, isolated_cache):
    served.fault(SERVED, trickle=0.002, trickle_chunk=64 << 10)  # the download overlaps the others' arrival
    env = {
        **os.environ,
        "BUILD_LOG": str(tmp_path / "builds"),
        "READY": str(tmp_path / "ready"),
        "GO": str(tmp_path / "go"),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT, D4RL],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(TESTS.parent),
        )
        for _ in range(8)
    ]
    deadline = time.monotonic() + 240
    while len(list(tmp_path.glob("ready.*"))) < 8 and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), [p.communicate()[1] for p in procs if p.poll() is not None]
        time.sleep(0.05)
    (tmp_path / "go").touch()  # all eight are imported and waiting: release them together
    outputs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outputs]
    lines = {o[0].strip() for o in outputs}
    assert len(lines) == 1, lines  # same rows, same bytes, same build directory in all eight
    assert served.count(SERVED) == 1 and served.ranges(SERVED) == [None]  # one download
    assert len((tmp_path / "builds").read_text().split()) == 1  # one build
    assert cache_state_ok(isolated_cache, {FILE: payload})["builds"] == 1
    _log("8 processes load one id at once", Counter({"trials": 1, "downloads": 1, "builds": 1, "identical": 8}))


# ---------------------------------------------------------------------------------------- rm while sampling
RM = """
from datasets_hub.cli import main
RESULT = main(["rm", "gym/cartpole-random-v0", "--param", "steps=3000"])
"""


def test_rm_while_another_process_samples(zygote, isolated_cache):
    rng = random.Random(7)
    reference = dh.load("gym/cartpole-random-v0", steps=3000)[:].clone()
    outcome: Counter = Counter()
    for trial in range(12):
        path = dh.download("gym/cartpole-random-v0", steps=3000)
        rb = dh.load(
            "gym/cartpole-random-v0", steps=3000, batch_size=256, generator=torch.Generator().manual_seed(trial)
        )
        job = zygote.start(RM, env=hub_env(isolated_cache))
        time.sleep(rng.uniform(0, 0.05))
        while not job.finished():  # the open buffer keeps sampling from its mapped files
            batch, info = rb.sample(return_info=True)
            expected = reference[info["index"]]
            assert (batch["observation"] == expected["observation"]).all()
            assert (batch["next", "observation"] == expected["next", "observation"]).all()
            assert (batch["action"] == expected["action"]).all()
            outcome["batches during rm"] += 1
            try:  # a reader opening the build while it disappears: a whole build or a clean error
                fresh = dh.load("gym/cartpole-random-v0", steps=3000, download=False)
                assert (fresh[:]["observation"] == reference["observation"]).all()
                outcome["opened during rm"] += 1
            except dh.HubError as exc:
                outcome[f"clean {type(exc).__name__} during rm"] += 1
        signal, result = job.wait()
        assert signal is None and result["ok"] and result["value"] == 0, result
        assert not path.exists()
        for _ in range(3):  # and after it, the open buffer still returns the right rows
            batch, info = rb.sample(return_info=True)
            assert (batch["observation"] == reference[info["index"]]["observation"]).all()
            outcome["batches after rm"] += 1
        with pytest.raises(dh.HubError, match="download=False"):
            dh.load("gym/cartpole-random-v0", steps=3000, download=False)
    outcome["trials"] = 12
    _log("rm while sampling", outcome)
    assert outcome["batches during rm"] > 0
