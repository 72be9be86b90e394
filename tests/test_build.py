"""Builds are atomic and concurrent-safe: killed builds leave nothing visible; N processes build once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import datasets_hub as dh
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.cache.layout import iter_builds

# A slow loader (sleeps between chunks) that appends one line to LOG each time it starts converting.
SLOW_BUILD = textwrap.dedent("""
    import os, sys, time
    from datasets_hub.build.pipeline import build
    from datasets_hub.loader import DatasetSpec
    from datasets_hub.testing import FakeLoader, fake_episodes

    class SlowLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            with open(os.environ["LOG"], "a") as fh:
                fh.write(f"{os.getpid()}\\n")
            row = 0
            for e in range(int(os.environ.get("CHUNKS", "4"))):
                yield fake_episodes([50], first_episode=e, first_row=row)
                row += 51
                time.sleep(float(os.environ.get("PAUSE", "0.2")))

    path = build(DatasetSpec(id="fake/slow", loader="fake"), SlowLoader(), {}, [])
    print(path)
""")


def _start(tmp_path: Path, **env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", SLOW_BUILD],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LOG": str(tmp_path / "log"), **env},
    )


@pytest.mark.slow  # four build processes: make test-faults runs it with the other concurrency trials
def test_processes_building_the_same_build_at_once_build_it_once(tmp_path):
    procs = [_start(tmp_path) for _ in range(4)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outputs]
    paths = {o[0].strip() for o in outputs}
    assert len(paths) == 1
    assert len((tmp_path / "log").read_text().split()) == 1  # converted exactly once
    assert len(DatasetStorage(Path(paths.pop()))) == 200


@pytest.mark.slow  # three kill -9 trials: make test-faults runs it with the other kill trials
def test_a_build_killed_midway_leaves_nothing_visible_and_the_next_build_succeeds(tmp_path, isolated_cache):
    for trial in range(3):
        proc = _start(tmp_path, PAUSE="0.5", CHUNKS="6")
        incomplete = isolated_cache / "datasets" / "fake" / "slow"
        deadline = time.time() + 60
        while not any(p.name.endswith(".incomplete") for p in incomplete.glob("*")) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.1 + 0.3 * trial)  # kill at different points of the conversion
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert list(iter_builds()) == []
    proc = _start(tmp_path, PAUSE="0")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert [b for b, _ in iter_builds()] == [Path(out.strip())]
    assert not any(p.name.endswith(".incomplete") for p in Path(out.strip()).parent.iterdir())


def test_gym_dataset_downloads_once_and_reopens_from_cache():
    path = dh.download("gym/cartpole-random-v0", steps=300)
    manifest_time = (path / "manifest.json").stat().st_mtime_ns
    assert dh.download("gym/cartpole-random-v0", steps=300) == path
    assert (path / "manifest.json").stat().st_mtime_ns == manifest_time
    card = dh.info("gym/cartpole-random-v0", steps=300)
    assert card.cached and card.counts["transitions"] == 300 and card.built_bytes > 0
    assert not dh.info("gym/cartpole-random-v0").cached  # other params, other build
