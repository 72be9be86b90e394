"""datasets_hub.downloads.fetch against the local test server (127.0.0.1 only): resume, retries, checksums,
mirrors, offline mode, redirects, file:// copies, one download across processes, verify_file."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from datasets_hub.downloads import fetch as dl
from datasets_hub.errors import ChecksumMismatch, DownloadError
from datasets_hub.loader import Resource

from fixtures.http_server import serve_files

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch):
    """Retries without sleeping; and no stray offline/mirror settings from the outer environment."""
    monkeypatch.setattr(dl, "BACKOFF_BASE", 0.0)
    monkeypatch.delenv("DATASETS_HUB_OFFLINE", raising=False)
    for var in [v for v in os.environ if v.startswith("DATASETS_HUB_ENDPOINT_")]:
        monkeypatch.delenv(var)


def payload(n: int, seed: int = 0) -> bytes:
    """Distinct, seeded bytes: a misplaced or repeated block changes the hash."""
    return random.Random(seed).randbytes(n)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def res(name: str, *urls: str, data: bytes | None = None, with_sha: bool = True, with_size: bool = True):
    return Resource(
        name=name,
        urls=tuple(urls),
        sha256=sha(data) if data is not None and with_sha else None,
        size=len(data) if data is not None and with_size else None,
    )


@pytest.fixture
def raw(isolated_cache) -> Path:
    return isolated_cache / "raw" / "d4rl"


def leftovers(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.parent.glob(dest.name + "*"))


def test_download_writes_file_and_sidecar(raw):
    data = payload(3 * MiB + 17)
    with serve_files({"datasets/x.hdf5": data}) as server:
        r = res("x.hdf5", server.url("datasets/x.hdf5"), data=data)
        out = dl.fetch(r, raw / "x.hdf5", loader="d4rl")
    assert out == raw / "x.hdf5" and out.read_bytes() == data
    meta = json.loads((raw / "x.hdf5.sha256").read_text())
    assert meta["sha256"] == sha(data) and meta["size"] == len(data)
    assert meta["url"] == server.url("datasets/x.hdf5") and meta["downloaded_at"]
    assert not (raw / "x.hdf5.partial").exists()


def test_resume_after_dropped_connection(raw):
    data = payload(3 * MiB + 5)
    with serve_files({"x.hdf5": data}) as server:
        server.fault("x.hdf5", drop_after=2 * MiB + 100)
        out = dl.fetch(res("x.hdf5", server.url("x.hdf5"), data=data), raw / "x.hdf5", loader="d4rl")
        ranges = server.ranges("x.hdf5")
    assert out.read_bytes() == data
    assert len(ranges) == 2 and ranges[0] is None
    start = int(ranges[1].removeprefix("bytes=").rstrip("-"))
    assert 0 < start <= 2 * MiB + 100  # resumed from what had arrived, not from zero


def test_read_timeout_resumes(raw):
    data = payload(2 * MiB + 9, seed=4)
    with serve_files({"x.bin": data}) as server:
        server.fault("x.bin", drop_after=MiB + 50, stall=10.0)  # goes silent mid-file, once
        t0 = time.monotonic()
        out = dl.fetch(res("x.bin", server.url("x.bin"), data=data), raw / "x.bin", loader="d4rl", timeout=0.2)
        assert time.monotonic() - t0 < 5  # the client gave up on the stalled read, it did not wait 10 s
        ranges = server.ranges("x.bin")
    assert out.read_bytes() == data
    assert len(ranges) == 2 and ranges[0] is None
    assert MiB <= int(ranges[1].removeprefix("bytes=").rstrip("-")) <= MiB + 50  # resumed, not restarted


def test_resume_survives_several_drops_and_unknown_checksum(raw):
    data = payload(4 * MiB, seed=1)
    with serve_files({"x.bin": data}) as server:
        server.fault("x.bin", drop_after=MiB + 3, drop_times=3)  # every attempt brings new bytes
        out = dl.fetch(res("x.bin", server.url("x.bin")), raw / "x.bin", loader="d4rl", retries=1)
        assert server.count("x.bin") == 4
        assert all(r is not None for r in server.ranges("x.bin")[1:])
    assert out.read_bytes() == data
    assert dl.read_sidecar(out)["sha256"] == sha(data)  # hash of resumed pieces == hash of the file


def _validator(raw: Path, name: str, data: bytes, r: Resource) -> None:
    """The validator file a killed download leaves beside its partial (the server's ETag)."""
    (raw / (name + ".validator")).write_text(
        json.dumps({"etag": '"' + sha(data) + '"', "last_modified": None, "source": dl.source_key(r)})
    )


def test_partial_left_by_killed_process_is_rehashed_and_resumed(raw):
    data = payload(2 * MiB + 11, seed=2)
    raw.mkdir(parents=True)
    (raw / "x.bin.partial").write_bytes(data[:1000])
    with serve_files({"x.bin": data}) as server:
        r = res("x.bin", server.url("x.bin"), data=data)
        _validator(raw, "x.bin", data, r)
        out = dl.fetch(r, raw / "x.bin", loader="d4rl")
        assert server.ranges("x.bin") == ["bytes=1000-"]
        assert server.requests[-1].headers.get("If-Range") == '"' + sha(data) + '"'
    assert out.read_bytes() == data


def test_partial_without_a_validator_is_downloaded_again_from_zero(raw):
    data = payload(2 * MiB + 11, seed=2)
    raw.mkdir(parents=True)
    (raw / "x.bin.partial").write_bytes(data[:1000])
    with serve_files({"x.bin": data}) as server:
        out = dl.fetch(res("x.bin", server.url("x.bin"), data=data), raw / "x.bin", loader="d4rl")
        assert server.ranges("x.bin") == [None]  # no If-Range possible: resuming could splice two versions
    assert out.read_bytes() == data


def test_complete_partial_is_finished_without_refetching(raw):
    data = payload(5000, seed=5)
    raw.mkdir(parents=True)
    (raw / "x.bin.partial").write_bytes(data)  # killed between the last byte and the rename
    with serve_files({"x.bin": data}) as server:
        r = res("x.bin", server.url("x.bin"), data=data)
        _validator(raw, "x.bin", data, r)
        out = dl.fetch(r, raw / "x.bin", loader="d4rl")
        assert server.ranges("x.bin") == ["bytes=5000-"]  # answered 416 */5000: nothing left to fetch
    assert out.read_bytes() == data


def test_server_ignoring_range_restarts_from_zero(raw):
    data = payload(MiB + 7, seed=3)
    raw.mkdir(parents=True)
    (raw / "x.bin.partial").write_bytes(data[:500])
    with serve_files({"x.bin": data}) as server:
        server.fault("x.bin", ignore_range=True)
        r = res("x.bin", server.url("x.bin"), data=data)
        _validator(raw, "x.bin", data, r)
        out = dl.fetch(r, raw / "x.bin", loader="d4rl")
        assert server.ranges("x.bin") == ["bytes=500-"]  # asked to resume, got 200 and the whole file
    assert out.read_bytes() == data


def test_500_then_200_is_retried(raw):
    data = payload(10_000)
    with serve_files({"x.bin": data}) as server:
        server.fault("x.bin", fail_status=500, fail_times=2)
        out = dl.fetch(res("x.bin", server.url("x.bin"), data=data), raw / "x.bin", loader="d4rl")
        assert server.count("x.bin") == 3
    assert out.read_bytes() == data


def test_persistent_503_gives_up_after_retries(raw):
    data = payload(1000)
    with serve_files({"x.bin": data}) as server:
        server.fault("x.bin", fail_status=503, fail_times=100)
        with pytest.raises(DownloadError, match="503") as info:
            dl.fetch(res("x.bin", server.url("x.bin"), data=data), raw / "x.bin", loader="d4rl", retries=2)
        assert server.count("x.bin") == 3  # the first attempt + 2 retries
    assert server.url("x.bin") in str(info.value)
    assert not (raw / "x.bin").exists()


def test_backoff_delays_grow_and_are_capped(raw, monkeypatch):
    delays: list[float] = []
    monkeypatch.setattr(dl, "_sleep", delays.append)
    monkeypatch.setattr(dl, "BACKOFF_BASE", 1.0)
    monkeypatch.setattr(dl, "BACKOFF_CAP", 3.0)
    with serve_files({"x.bin": b"abc"}) as server:
        server.fault("x.bin", fail_times=4)
        dl.fetch(res("x.bin", server.url("x.bin")), raw / "x.bin", loader="d4rl")
    assert delays == [1.0, 2.0, 3.0, 3.0]


def test_404_is_a_clear_error_and_leaves_nothing(raw):
    with serve_files() as server:
        url = server.url("datasets/missing.hdf5")
        with pytest.raises(DownloadError) as info:
            dl.fetch(Resource("missing.hdf5", (url,)), raw / "missing.hdf5", loader="d4rl")
        assert server.count("datasets/missing.hdf5") == 1  # a 404 is not retried
    msg = str(info.value)
    assert url in msg and "404" in msg and "not found upstream" in msg and "DATASETS_HUB_ENDPOINT_" in msg
    assert leftovers(raw / "missing.hdf5") == ["missing.hdf5.lock"]


def test_403_names_the_status(raw):
    with serve_files({"x.bin": b"secret"}) as server:
        server.fault("x.bin", status=403)
        with pytest.raises(DownloadError, match="403"):
            dl.fetch(res("x.bin", server.url("x.bin")), raw / "x.bin", loader="d4rl")


def test_corrupt_bytes_raise_checksum_mismatch_and_are_moved_aside(raw):
    data = payload(50_000)
    with serve_files({"x.bin": data}) as server:
        server.fault("x.bin", corrupt=True)
        r = res("x.bin", server.url("x.bin"), data=data)
        with pytest.raises(ChecksumMismatch) as info:
            dl.fetch(r, raw / "x.bin", loader="d4rl")
        msg = str(info.value)
        assert "x.bin" in msg and server.url("x.bin") in msg and sha(data) in msg
        assert sha(bytes(b ^ 0xFF for b in data)) in msg  # the actual hash too
        assert not (raw / "x.bin").exists() and not (raw / "x.bin.sha256").exists()
        assert (raw / "x.bin.corrupt").read_bytes() == bytes(b ^ 0xFF for b in data)
        # the server heals: the next fetch downloads afresh, never reusing the corrupt bytes
        server.fault("x.bin", corrupt=False)
        assert dl.fetch(r, raw / "x.bin", loader="d4rl").read_bytes() == data
        assert server.ranges("x.bin") == [None, None]


def test_announced_size_differs_from_catalogue(raw):
    data = payload(20_000)
    with serve_files({"x.bin": data}) as server:
        server.fault("x.bin", length_delta=10)
        with pytest.raises(DownloadError, match="announces 20010 bytes, the catalogue says 20000"):
            dl.fetch(res("x.bin", server.url("x.bin"), data=data), raw / "x.bin", loader="d4rl")
    assert not (raw / "x.bin").exists() and not (raw / "x.bin.partial").exists()


def test_short_content_length_is_caught_by_the_size_check(raw):
    data = payload(20_000)
    with serve_files({"x.bin": data}) as server:
        server.fault("x.bin", length_delta=-10)  # the server cuts the body to what it declares
        r = Resource("x.bin", (server.url("x.bin"),), size=len(data))
        with pytest.raises(DownloadError, match="19990 bytes, the catalogue says 20000"):
            dl.fetch(r, raw / "x.bin", loader="d4rl")
    assert not (raw / "x.bin").exists()


def test_body_shorter_than_content_length_fails_after_retries(raw):
    data = payload(20_000)
    with serve_files({"x.bin": data}) as server:
        server.fault("x.bin", length_delta=10)  # promises 10 more bytes than it ever sends
        with pytest.raises(DownloadError, match="without progress"):
            dl.fetch(res("x.bin", server.url("x.bin")), raw / "x.bin", loader="d4rl", retries=2)
        assert server.count("x.bin") < 10
    assert not (raw / "x.bin").exists()


def test_mirror_fallback(raw):
    data = payload(5000)
    with serve_files({"good/x.bin": data}) as server:
        r = res("x.bin", server.url("bad/x.bin"), server.url("good/x.bin"), data=data)
        out = dl.fetch(r, raw / "x.bin", loader="d4rl")
        assert server.count("bad/x.bin") == 1 and server.count("good/x.bin") == 1
    assert out.read_bytes() == data
    assert dl.read_sidecar(out)["url"] == server.url("good/x.bin")


def test_every_mirror_failing_lists_each(raw):
    with serve_files() as server:
        r = Resource("x.bin", (server.url("a/x.bin"), server.url("b/x.bin")))
        with pytest.raises(DownloadError) as info:
            dl.fetch(r, raw / "x.bin", loader="d4rl")
    assert "every mirror failed" in str(info.value)
    assert server.url("a/x.bin") in str(info.value) and server.url("b/x.bin") in str(info.value)


def test_endpoint_override_env(raw, monkeypatch):
    data = payload(4000)
    with serve_files({"mirror/datasets/offline_rl/x.hdf5": data}) as server:
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_D4RL", server.base_url + "/mirror/")
        r = res("x.hdf5", "http://rail.eecs.berkeley.edu/datasets/offline_rl/x.hdf5", data=data)
        out = dl.fetch(r, raw / "x.hdf5", loader="d4rl")
        assert server.count("mirror/datasets/offline_rl/x.hdf5") == 1
    assert out.read_bytes() == data


def test_endpoint_helpers(monkeypatch):
    assert dl.endpoint_env_var("open-x.v2") == "DATASETS_HUB_ENDPOINT_OPEN_X_V2"
    assert dl.endpoint_for("d4rl") is None
    monkeypatch.setenv("DATASETS_HUB_ENDPOINT_D4RL", "http://127.0.0.1:8123/mirror")
    assert dl.endpoint_for("d4rl") == "http://127.0.0.1:8123/mirror"
    assert (
        dl.apply_endpoint("http://rail.eecs.berkeley.edu/datasets/x.hdf5?v=1", dl.endpoint_for("d4rl"))
        == "http://127.0.0.1:8123/mirror/datasets/x.hdf5?v=1"
    )
    assert dl.apply_endpoint("hf://datasets/a/b/c", "http://m") == "hf://datasets/a/b/c"
    monkeypatch.setenv("DATASETS_HUB_ENDPOINT_D4RL", "mirror.example.org")
    with pytest.raises(DownloadError, match="DATASETS_HUB_ENDPOINT_D4RL"):
        dl.endpoint_for("d4rl")


def test_offline_never_connects_and_says_how_to_fix(raw, monkeypatch):
    data = payload(3000)
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")  # read at call time
    with serve_files({"x.hdf5": data}) as server:
        r = res("x.hdf5", server.url("x.hdf5"), data=data)
        with pytest.raises(DownloadError) as info:
            dl.fetch(r, raw / "x.hdf5", loader="d4rl")
        msg = str(info.value)
        assert "x.hdf5" in msg and server.url("x.hdf5") in msg and str(raw / "x.hdf5") in msg
        assert "DATASETS_HUB_OFFLINE" in msg
        # following the advice works, still without a connection; the copy is verified
        raw.mkdir(parents=True, exist_ok=True)
        (raw / "x.hdf5").write_bytes(data)
        assert dl.fetch(r, raw / "x.hdf5", loader="d4rl").read_bytes() == data
        assert dl.read_sidecar(raw / "x.hdf5")["sha256"] == sha(data)
        (raw / "x.hdf5").write_bytes(data[::-1])
        with pytest.raises(ChecksumMismatch, match="DATASETS_HUB_OFFLINE"):
            dl.fetch(r, raw / "x.hdf5", loader="d4rl")
        assert server.total_requests() == 0
    assert dl.is_offline()
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "0")
    assert not dl.is_offline()


def test_offline_argument_overrides_env(raw):
    with serve_files({"x.bin": b"abc"}) as server:
        with pytest.raises(DownloadError, match="offline"):
            dl.fetch(res("x.bin", server.url("x.bin")), raw / "x.bin", loader="d4rl", offline=True)
        assert server.total_requests() == 0


def test_verified_file_needs_no_request(raw):
    data = payload(100_000)
    with serve_files({"x.bin": data}) as server:
        r = res("x.bin", server.url("x.bin"), data=data)
        dl.fetch(r, raw / "x.bin", loader="d4rl")
        server.reset_log()
        dl.fetch(r, raw / "x.bin", loader="d4rl")
        os.utime(raw / "x.bin", ns=(time.time_ns(), time.time_ns() + 10**9))  # touched: rehash, still fine
        dl.fetch(r, raw / "x.bin", loader="d4rl")
        dl.fetch(res("x.bin", server.url("x.bin")), raw / "x.bin", loader="d4rl")  # no catalogue sha
        assert server.total_requests() == 0


def test_tampered_cached_file_is_downloaded_again(raw):
    data = payload(100_000)
    with serve_files({"x.bin": data}) as server:
        r = res("x.bin", server.url("x.bin"))  # no catalogue checksum: the sidecar is the reference
        dl.fetch(r, raw / "x.bin", loader="d4rl")
        (raw / "x.bin").write_bytes(data[::-1])
        assert dl.fetch(r, raw / "x.bin", loader="d4rl").read_bytes() == data
        assert server.count("x.bin") == 2
    assert (raw / "x.bin.corrupt").read_bytes() == data[::-1]


def test_redirect_chain_is_followed(raw):
    data = payload(2000)
    with serve_files({"final/x.bin": data}) as server:
        server.redirect("a", "b", status=301)
        server.redirect("b", server.url("final/x.bin"), status=307)
        out = dl.fetch(res("x.bin", server.url("a"), data=data), raw / "x.bin", loader="d4rl")
    assert out.read_bytes() == data


def test_too_many_redirects_are_refused(raw):
    with serve_files() as server:
        for i in range(dl.MAX_REDIRECTS + 1):
            server.redirect(f"r{i}", f"r{i + 1}")
        server.add(f"r{dl.MAX_REDIRECTS + 1}", b"too far")
        with pytest.raises(DownloadError, match=f"more than {dl.MAX_REDIRECTS} redirects"):
            dl.fetch(Resource("x.bin", (server.url("r0"),)), raw / "x.bin", loader="d4rl")


def test_redirect_loop_is_refused(raw):
    with serve_files() as server:
        server.redirect("a", "b")
        server.redirect("b", "a")
        with pytest.raises(DownloadError, match="redirect loop"):
            dl.fetch(Resource("x.bin", (server.url("a"),)), raw / "x.bin", loader="d4rl")
        assert server.count("a") == 1 and server.count("b") == 1


def test_redirect_to_ftp_is_refused(raw):
    with serve_files() as server:
        server.redirect("a", "ftp://127.0.0.1/x.bin")
        with pytest.raises(DownloadError, match="only http and https redirects"):
            dl.fetch(Resource("x.bin", (server.url("a"),)), raw / "x.bin", loader="d4rl")


def test_unsupported_scheme_is_refused(raw):
    with pytest.raises(DownloadError, match="unsupported URL scheme 'ftp'"):
        dl.fetch(Resource("x.bin", ("ftp://127.0.0.1/x.bin",)), raw / "x.bin", loader="d4rl")


def test_file_url_copy_works_offline(raw, tmp_path, monkeypatch):
    data = payload(MiB + 3)
    src = tmp_path / "local mirror" / "x.bin"
    src.parent.mkdir()
    src.write_bytes(data)
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")
    r = res("x.bin", src.as_uri(), data=data)
    out = dl.fetch(r, raw / "x.bin", loader="d4rl")
    assert out.read_bytes() == data and dl.read_sidecar(out)["url"] == src.as_uri()
    assert os.stat(out).st_ino != os.stat(src).st_ino  # a copy: the cache owns its bytes
    with pytest.raises(DownloadError, match="does not exist"):
        dl.fetch(Resource("y.bin", ((tmp_path / "nope.bin").as_uri(),)), raw / "y.bin", loader="d4rl")


_WORKER = """
import os, sys, time, types
from pathlib import Path
import datasets_hub.downloads.fetch as dl
url, digest, size, dest, barrier = sys.argv[1:6]
r = types.SimpleNamespace(name="x.bin", urls=(url,), sha256=digest, size=int(size))
Path(barrier, str(os.getpid())).touch()  # start together, however slowly each process imported
while len(list(Path(barrier).iterdir())) < 4:
    time.sleep(0.01)
started = time.time()
out = dl.fetch(r, Path(dest), loader="d4rl")
print(dl.verify_file(out, r)[0], started)
"""


def test_concurrent_processes_download_once(raw, tmp_path):
    data = payload(256 * 1024)
    (tmp_path / "barrier").mkdir()
    with serve_files({"x.bin": data}) as server:
        server.fault("x.bin", trickle=0.03, trickle_chunk=8192)  # ~1 s: all four start during it
        args = [server.url("x.bin"), sha(data), str(len(data)), str(raw / "x.bin"), str(tmp_path / "barrier")]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _WORKER, *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        outs = [p.communicate(timeout=60) for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, outs
        assert [o.split()[0] for o, _ in outs] == ["True"] * 4
        assert server.count("x.bin") == 1 and server.full_gets("x.bin") == 1
    assert (raw / "x.bin").read_bytes() == data
    # every process asked for the file before it was complete: they really competed for it
    assert max(float(o.split()[1]) for o, _ in outs) < (raw / "x.bin").stat().st_mtime


def test_verify_file_detects_tampering(raw):
    data = payload(70_000)
    with serve_files({"x.bin": data}) as server:
        r = res("x.bin", server.url("x.bin"), data=data)
        out = dl.fetch(r, raw / "x.bin", loader="d4rl")
    assert dl.verify_file(out, r)[0] and dl.verify_file(out)[0]  # catalogue and sidecar agree
    tampered = bytearray(data)
    tampered[12345] ^= 1  # one bit, same size, same mtime restored: only a full rehash sees it
    st = out.stat()
    out.write_bytes(bytes(tampered))
    os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
    for ok, msg in (dl.verify_file(out, r), dl.verify_file(out)):
        assert not ok and "does not match" in msg and str(out) in msg
    assert not dl.verify_file(raw / "gone.bin")[0]
    (raw / "plain.bin").write_bytes(b"x")
    ok, msg = dl.verify_file(raw / "plain.bin")
    assert not ok and "no checksum" in msg


def test_progress_bar_counts_bytes(raw, monkeypatch):
    import tqdm.auto

    seen: list[tuple[int, int]] = []
    real = tqdm.auto.tqdm

    class Recorder(real):
        def close(self):
            seen.append((self.n, self.total))
            super().close()

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorder)
    data = payload(300_000)
    with serve_files({"x.bin": data}) as server:
        dl.fetch(res("x.bin", server.url("x.bin"), data=data), raw / "x.bin", loader="d4rl", progress=True)
    assert seen and set(seen) == {(len(data), len(data))}  # close() may run twice (exit, __del__)


def test_import_is_light_and_does_not_shadow_datasets_hub_download():
    """``import datasets_hub.downloads.fetch`` loads no network library, and leaves the public function
    ``datasets_hub.download`` alone (a submodule named ``download`` would replace it)."""
    script = (
        "import sys, datasets_hub as dh, datasets_hub.downloads.fetch, datasets_hub.downloads.huggingface\n"
        "heavy = [m for m in ('requests', 'tqdm', 'huggingface_hub', 'filelock') if m in sys.modules]\n"
        "print(heavy, type(dh.__dict__.get('download')).__name__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]", "NoneType"]


def test_the_suite_cannot_reach_outside_hosts(raw):
    """conftest's guard: only the loopback is reachable from a test (a broken endpoint override fails
    loudly instead of downloading from upstream)."""
    import socket

    with pytest.raises(OSError, match="outside host"):
        socket.getaddrinfo("rail.eecs.berkeley.edu", 80)
    with pytest.raises(OSError, match=r"may only reach 127\.0\.0\.1"):
        socket.create_connection(("192.0.2.1", 80), timeout=0.1)
    with serve_files({"x": b"ok"}) as server:  # the loopback still works
        assert dl.fetch(res("x.bin", server.url("x"), data=b"ok"), raw / "x.bin", loader="d4rl").read_bytes() == b"ok"


@pytest.mark.parametrize("content", ["[1, 2]", "not json", '{"sha256": 5}', '"text"'])
def test_a_sidecar_that_is_not_a_record_reads_as_none(tmp_path, content):
    """One reader of the download sidecar: anything but a JSON object is no record (never an AttributeError)."""
    dest = tmp_path / "file.bin"
    dest.write_bytes(b"x")
    dl.sidecar_path(dest).write_text(content)
    assert dl.recorded_sha256(dest) is None
    assert dl.read_sidecar(dest) is None or content.startswith("{")
