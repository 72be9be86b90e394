"""Adversarial and unlucky downloads (issue 12): identity of raw files, spliced resumes, encodings,
endless and slow bodies, planted symlinks, long names, Hub garbage. Fast: a 127.0.0.1 server only."""

from __future__ import annotations

import gzip
import json
import os
import threading
import time

import h5py
import numpy as np
import pytest

import datasets_hub as dh
from datasets_hub.downloads import fetch as downloader
from datasets_hub.errors import CacheError, DownloadError, InvalidParameter
from datasets_hub.loader import Resource

from fixtures.faults import check_rows, d4rl_entry, register, sha256, write_d4rl
from fixtures.http_server import point_huggingface_hub_at, serve_files


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(downloader, "BACKOFF_BASE", 0.0)
    for var in (
        "DATASETS_HUB_MIN_RATE",
        "DATASETS_HUB_RATE_WINDOW",
        "DATASETS_HUB_DOWNLOAD_DEADLINE",
        "DATASETS_HUB_PROGRESS_INTERVAL",
        "DATASETS_HUB_OFFLINE",
    ):
        monkeypatch.delenv(var, raising=False)


def _catalogue(tmp_path, monkeypatch, entries):
    register(tmp_path / "extra.yaml", entries)
    monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(tmp_path / "extra.yaml"))


def _bounded(fn, seconds: float = 30.0):
    """Run ``fn`` in a thread; fail (instead of hanging the suite) when it does not end in time."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s: no deadline or minimum rate"
    return box, time.monotonic() - started


# ------------------------------------------------------------------------------------ identity
def test_two_urls_ending_in_the_same_name_are_two_files(tmp_path, monkeypatch):
    a = write_d4rl(tmp_path / "a.hdf5", rows=60).read_bytes()
    b = write_d4rl(tmp_path / "b.hdf5", rows=40).read_bytes()
    with serve_files({"a/data.hdf5": a, "b/data.hdf5": b}) as server:
        _catalogue(
            tmp_path,
            monkeypatch,
            {
                "d4rl/same-name-a-v0": d4rl_entry(server.url("a/data.hdf5")),
                "d4rl/same-name-b-v0": d4rl_entry(server.url("b/data.hdf5")),
            },
        )
        assert len(dh.load("d4rl/same-name-a-v0")) == 60
        rb = dh.load("d4rl/same-name-b-v0")
        assert len(rb) == 40 and server.count("b/data.hdf5") == 1  # b was fetched, not a's bytes reused
        check_rows(rb)


def test_a_sidecar_recording_another_url_is_not_trusted(tmp_path, isolated_cache):
    a, b = b"A" * 5000, b"B" * 5000
    dest = isolated_cache / "raw" / "d4rl" / "x" / "data.bin"
    with serve_files({"a/data.bin": a, "b/data.bin": b}) as server:
        downloader.fetch(Resource("data.bin", (server.url("a/data.bin"),)), dest, loader="d4rl")
        out = downloader.fetch(Resource("data.bin", (server.url("b/data.bin"),)), dest, loader="d4rl")
        assert out.read_bytes() == b and server.count("b/data.bin") == 1


def test_a_changed_upstream_file_is_never_spliced_on_resume(tmp_path, monkeypatch, isolated_cache):
    v1 = write_d4rl(tmp_path / "v1.hdf5", rows=2000, episode_len=100)
    v1_bytes = v1.read_bytes()
    with h5py.File(v1, "r+") as f:  # v2: same size and layout, other rewards
        f["rewards"][...] = -np.asarray(f["rewards"])
    v2_bytes = v1.read_bytes()
    assert len(v1_bytes) == len(v2_bytes) and v1_bytes != v2_bytes
    with serve_files({"m/data.hdf5": v1_bytes}) as server:
        _catalogue(tmp_path, monkeypatch, {"d4rl/changed-v0": d4rl_entry(server.url("m/data.hdf5"))})
        server.fault("m/data.hdf5", trickle=0.02, trickle_chunk=4096)  # a slow link: the first try runs out of time
        r = Resource("data.hdf5", (server.url("m/data.hdf5"),))
        dest = isolated_cache / "raw" / "d4rl" / downloader.source_key(r) / "data.hdf5"
        with pytest.raises(DownloadError, match="deadline"):
            downloader.fetch(r, dest, loader="d4rl", deadline=0.3)
        assert 0 < dest.with_name("data.hdf5.partial").stat().st_size < len(v1_bytes)
        server.add("m/data.hdf5", v2_bytes)  # upstream changes; the network heals
        server.fault("m/data.hdf5", trickle=0)
        rb = dh.load("d4rl/changed-v0")
        resumed = [r for r in server.requests if r.range][-1]
        assert resumed.headers.get("If-Range") == '"' + sha256(v1_bytes) + '"'  # the first response's validator
        rewards = rb[:]["next", "reward"][:, 0].numpy()
        np.testing.assert_allclose(rewards, -10.0 * np.arange(2000))  # all v2, no v1 half


def test_a_partial_without_validator_is_not_resumed(tmp_path, isolated_cache):
    data = os.urandom(300_000)
    with serve_files({"x.bin": data}) as server:
        r = Resource("x.bin", (server.url("x.bin"),))
        dest = isolated_cache / "raw" / "d4rl" / downloader.source_key(r) / "x.bin"
        dest.parent.mkdir(parents=True)
        dest.with_name("x.bin.partial").write_bytes(b"\0" * 1000)  # another version's bytes, no validator
        assert downloader.fetch(r, dest, loader="d4rl").read_bytes() == data
        assert server.ranges("x.bin") == [None]


def test_gzip_content_encoding_is_stored_as_sent(isolated_cache):
    data = bytes(5 << 20)  # 5 MiB of zeros: ~5 KiB gzip-compressed
    with serve_files({"z.bin": data}) as server:
        server.fault("z.bin", gzip=True)
        dest = isolated_cache / "raw" / "d4rl" / "k" / "z.bin"
        out = downloader.fetch(Resource("z.bin", (server.url("z.bin"),)), dest, loader="d4rl")
        assert server.requests[-1].headers.get("Accept-Encoding") == "identity"
        assert out.read_bytes() == gzip.compress(data, mtime=0) and out.stat().st_size < 64 << 10


def test_an_endless_body_stops_at_the_declared_size(isolated_cache):
    data = os.urandom(100_000)
    with serve_files({"e.bin": data}) as server:
        server.fault("e.bin", endless=True)
        dest = isolated_cache / "raw" / "d4rl" / "k" / "e.bin"
        box, took = _bounded(
            lambda: downloader.fetch(Resource("e.bin", (server.url("e.bin"),), size=len(data)), dest, loader="d4rl")
        )
    assert isinstance(box.get("error"), DownloadError), box
    assert "sent more than the 100000 bytes" in str(box["error"]) and took < 20
    assert not dest.exists() and sum(p.stat().st_size for p in dest.parent.glob("e.bin*")) <= len(data) + 1000


# ------------------------------------------------------------------------------------ slow servers
def test_a_slowloris_server_fails_the_minimum_rate(isolated_cache, monkeypatch):
    monkeypatch.setenv("DATASETS_HUB_MIN_RATE", "2000")
    monkeypatch.setenv("DATASETS_HUB_RATE_WINDOW", "1")
    data = os.urandom(50_000)
    with serve_files({"s.bin": data}) as server:
        server.fault("s.bin", trickle=0.25, trickle_chunk=1)  # 4 bytes/s, never a read timeout
        dest = isolated_cache / "raw" / "d4rl" / "k" / "s.bin"
        box, took = _bounded(lambda: downloader.fetch(Resource("s.bin", (server.url("s.bin"),)), dest, loader="d4rl"))
    error = box.get("error")
    assert isinstance(error, DownloadError) and "DATASETS_HUB_MIN_RATE" in str(error), box
    assert took < 10 and dest.with_name("s.bin.partial").exists()  # kept for the next attempt


def test_a_total_deadline_is_kept(isolated_cache):
    data = os.urandom(400_000)
    with serve_files({"d.bin": data}) as server:
        server.fault("d.bin", trickle=0.05, trickle_chunk=4096)  # ~80 KB/s: above the rate, too slow overall
        dest = isolated_cache / "raw" / "d4rl" / "k" / "d.bin"
        box, took = _bounded(
            lambda: downloader.fetch(
                Resource("d.bin", (server.url("d.bin"),)), dest, loader="d4rl", deadline=1.0, min_rate=0
            )
        )
    assert isinstance(box.get("error"), DownloadError) and "deadline of 1 s" in str(box["error"]), box
    assert took < 5


def test_progress_lines_when_stderr_is_not_a_terminal(isolated_cache, monkeypatch, capsys):
    monkeypatch.setenv("DATASETS_HUB_PROGRESS_INTERVAL", "0.1")
    data = os.urandom(200_000)
    with serve_files({"p.bin": data}) as server:
        server.fault("p.bin", trickle=0.05, trickle_chunk=20_000)
        downloader.fetch(
            Resource("p.bin", (server.url("p.bin"),)), isolated_cache / "raw" / "x" / "p.bin", loader="d4rl"
        )
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("datasets_hub: download")]
    assert len(lines) >= 3 and "p.bin" in lines[0] and lines[-1].startswith("datasets_hub: downloaded")


# ------------------------------------------------------------------------------------ the cache's own files
def test_a_symlink_planted_at_the_partial_is_never_written_through(tmp_path, isolated_cache):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    data = os.urandom(20_000)
    with serve_files({"v.bin": data}) as server:
        r = Resource("v.bin", (server.url("v.bin"),))
        dest = isolated_cache / "raw" / "d4rl" / downloader.source_key(r) / "v.bin"
        dest.parent.mkdir(parents=True)
        os.symlink(victim, dest.with_name("v.bin.partial"))
        dest.with_name("v.bin.validator").write_text(
            json.dumps({"etag": '"' + sha256(data) + '"', "source": downloader.source_key(r)})
        )
        with pytest.raises(CacheError, match="symbolic link"):
            downloader.fetch(r, dest, loader="d4rl")
    assert victim.read_bytes() == b"precious"


def test_a_300_character_resource_name_is_a_clear_error(tmp_path, monkeypatch):
    _catalogue(
        tmp_path, monkeypatch, {"d4rl/long-name-v0": d4rl_entry("http://127.0.0.1:9/x.hdf5", name="n" * 300 + ".hdf5")}
    )
    with pytest.raises(InvalidParameter, match=r"limit is 200.*shorter 'name'"):
        dh.load("d4rl/long-name-v0")


# ------------------------------------------------------------------------------------ Hugging Face
@pytest.mark.slow  # huggingface_hub retries a 500 with its own backoff (~20 s): a fault trial for make test-faults
@pytest.mark.parametrize("fault, words", [({"garbage": True}, "not HTTP"), ({"status": 500}, "HTTP 500")])
def test_hub_garbage_and_server_errors_are_named(tmp_path, monkeypatch, isolated_cache, fault, words):
    repo, path = "org/repo", "x.h5"
    with serve_files() as server:
        server.add_hf_file(repo, path, b"data")
        server.fault(server.hf_path(repo, path), **fault)
        point_huggingface_hub_at(server, monkeypatch, tmp_path / "hf-cache")
        r = Resource("x.h5", (f"hf://datasets/{repo}/{path}",))
        with pytest.raises(DownloadError) as info:
            downloader.fetch(r, isolated_cache / "raw" / "roboset" / "x.h5", loader="roboset", timeout=5)
    message = str(info.value)
    assert words in message and "could not be reached" not in message and "x.h5" in message
