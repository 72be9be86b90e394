"""A stopped preprocessing worker (issue 12): the parent names it and fails instead of waiting forever."""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import datasets_hub as dh
from datasets_hub.errors import PreprocessError

from fixtures.faults import stop_one_worker


def test_a_sigstopped_worker_is_named_and_the_parent_does_not_hang(tmp_path, monkeypatch):
    marker = tmp_path / "stopped.pid"
    monkeypatch.setenv("DATASETS_HUB_PREPROCESS_HEARTBEAT", "3")
    rb = dh.load("gym/cartpole-random-v0", steps=4000)
    box: dict = {}

    def run():
        try:
            # bound, not in the environment: workers of a forkserver started by an earlier test do not see it
            fn = functools.partial(stop_one_worker, marker=str(marker), parent=os.getpid())
            rb.preprocess(fn, num_workers=2, chunk_size=500)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(120)
    stopped = int(marker.read_text()) if marker.exists() else None
    if thread.is_alive():  # the bug: the parent waits forever; free the stopped worker and fail
        if stopped:
            os.kill(stopped, signal.SIGKILL)
        pytest.fail("the parent still waits for a stopped worker after 120 s")
    error = box.get("error")
    assert isinstance(error, PreprocessError), box
    assert f"PID {stopped}" in str(error) and "stopped" in str(error) and "transitions [" in str(error)
    assert time.monotonic() - started < 60
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{stopped}") or Path(f"/proc/{stopped}/stat").read_text().split()[2] == "Z"
    assert not list(
        (dh.info("gym/cartpole-random-v0", steps=4000).build_path.parents[3] / "preprocessed").rglob("manifest.json")
    )
