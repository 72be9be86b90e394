"""hf:// sources through huggingface_hub against the local Hub-compatible server (HF_ENDPOINT)."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from datasets_hub.downloads import fetch as dl
from datasets_hub.downloads.huggingface import HFRef, parse_hf_url
from datasets_hub.errors import ChecksumMismatch, DownloadError
from datasets_hub.loader import Resource

from fixtures.http_server import point_huggingface_hub_at, serve_files

ROOT = Path(__file__).resolve().parents[1]
REPO = "jdvakil/RoboSet_Sim"
PATH = "FK1-v4(expert)/FK1_MicroOpenRandom_v2d-v4.h5"  # parentheses, as upstream names them
URL = f"hf://datasets/{REPO}/{PATH}"


def payload(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


DATA = payload(200_000)
OTHER = payload(1000, seed=1)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A Hub on 127.0.0.1 with two files, HF_ENDPOINT pointing at it, the HF cache under tmp_path
    (``point_huggingface_hub_at`` says why nothing can reach huggingface.co)."""
    with serve_files() as server:
        server.add_hf_file(REPO, PATH, DATA)
        server.add_hf_file(REPO, "FK1-v4(expert)/other.h5", OTHER)
        server.add_hf_file(REPO, "README.md", b"# card\n")
        point_huggingface_hub_at(server, monkeypatch, tmp_path / "hf-cache")
        yield server


@pytest.fixture
def raw(isolated_cache) -> Path:
    return isolated_cache / "raw" / "roboset"


def test_parse_hf_url():
    assert parse_hf_url(URL) == HFRef("dataset", REPO, PATH, None)
    assert parse_hf_url(f"{URL}@v1.0") == HFRef("dataset", REPO, PATH, "v1.0")
    assert parse_hf_url(f"hf://datasets/{REPO}@abc/{PATH}") == HFRef("dataset", REPO, PATH, "abc")
    assert parse_hf_url("hf://models/o/m/w%20x.bin") == HFRef("model", "o/m", "w x.bin", None)
    for bad in ("hf://o/m/x.bin", "hf://datasets/o/m", "hf://datasets/o//x"):
        with pytest.raises(DownloadError, match="expected hf://"):
            parse_hf_url(bad)


def test_fetch_from_hub_via_hf_endpoint(hub, raw):
    r = Resource("FK1.h5", (URL,), sha256=sha(DATA), size=len(DATA))
    out = dl.fetch(r, raw / "FK1.h5", loader="roboset")
    assert out.read_bytes() == DATA
    hub_path = hub.hf_path(REPO, PATH)
    assert hub.count(hub_path, "HEAD") == 1 and hub.count(hub_path) == 1
    meta = dl.read_sidecar(out)
    assert meta["url"] == URL and meta["sha256"] == sha(DATA)
    assert out.stat().st_nlink >= 2  # hard-linked from the Hugging Face cache, not a second copy
    # present and verified: no request at all
    hub.reset_log()
    dl.fetch(r, raw / "FK1.h5", loader="roboset")
    assert hub.total_requests() == 0
    # gone from our cache but still in Hugging Face's: at most a metadata check, no new GET
    out.unlink()
    assert dl.fetch(r, raw / "FK1.h5", loader="roboset").read_bytes() == DATA
    assert hub.count(hub_path) == 0


def test_revision_pins_the_commit(hub, raw):
    commit = hub.hf_commit(REPO)
    for i, url in enumerate((f"{URL}@{commit}", f"hf://datasets/{REPO}@{commit}/{PATH}")):
        out = dl.fetch(Resource(f"f{i}.h5", (url,)), raw / f"f{i}.h5", loader="roboset")
        assert out.read_bytes() == DATA
    assert any(r.path == hub.hf_path(REPO, PATH, revision=commit) for r in hub.requests)
    with pytest.raises(DownloadError, match="revision 'nope' not found"):
        dl.fetch(Resource("g.h5", (f"{URL}@nope",)), raw / "g.h5", loader="roboset")


def test_offline_uses_only_the_hf_cache(hub, raw, monkeypatch):
    r = Resource("FK1.h5", (URL,), sha256=sha(DATA))
    dl.fetch(r, raw / "FK1.h5", loader="roboset").unlink()
    hub.reset_log()
    for var in ("DATASETS_HUB_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(var, "1")
        assert dl.fetch(r, raw / "FK1.h5", loader="roboset").read_bytes() == DATA
        (raw / "FK1.h5").unlink()
        with pytest.raises(DownloadError, match=f"{var}=1") as info:
            dl.fetch(
                Resource("o.h5", (f"hf://datasets/{REPO}/FK1-v4(expert)/other.h5",)), raw / "o.h5", loader="roboset"
            )
        assert "other.h5" in str(info.value) and str(raw / "o.h5") in str(info.value)
        monkeypatch.delenv(var)
    assert hub.total_requests() == 0


def test_missing_file_and_repo_are_clear_errors(hub, raw):
    with pytest.raises(DownloadError, match="file not found upstream") as info:
        dl.fetch(Resource("x.h5", (f"hf://datasets/{REPO}/nope.h5",)), raw / "x.h5", loader="roboset")
    assert "HF_ENDPOINT" in str(info.value) and hub.base_url in str(info.value)
    with pytest.raises(DownloadError, match="not found or not accessible"):
        dl.fetch(Resource("y.h5", ("hf://datasets/someone/missing/x.h5",)), raw / "y.h5", loader="roboset")
    assert not (raw / "x.h5").exists() and not (raw / "y.h5").exists()


def test_checksum_mismatch_from_hub(hub, raw):
    r = Resource("FK1.h5", (URL,), sha256=sha(b"something else"))
    with pytest.raises(ChecksumMismatch) as info:
        dl.fetch(r, raw / "FK1.h5", loader="roboset")
    assert URL in str(info.value) and sha(DATA) in str(info.value)
    assert not (raw / "FK1.h5").exists() and (raw / "FK1.h5.corrupt").exists()


def test_hub_then_http_mirror(hub, raw):
    hub.add("mirror/other.h5", OTHER)
    r = Resource("o.h5", (f"hf://datasets/{REPO}/gone.h5", hub.url("mirror/other.h5")), sha256=sha(OTHER))
    assert dl.fetch(r, raw / "o.h5", loader="roboset").read_bytes() == OTHER


def test_list_hf_files_online_and_offline(hub, monkeypatch):
    assert dl.list_hf_files(REPO) == [
        "FK1-v4(expert)/FK1_MicroOpenRandom_v2d-v4.h5",
        "FK1-v4(expert)/other.h5",
        "README.md",
    ]
    assert dl.list_hf_files(REPO, prefix="FK1-v4(expert)/o") == ["FK1-v4(expert)/other.h5"]
    with pytest.raises(DownloadError, match="not found or not accessible"):
        dl.list_hf_files("someone/missing")
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError, match="offline"):
        dl.list_hf_files(REPO)  # nothing of it cached yet
    monkeypatch.delenv("DATASETS_HUB_OFFLINE")
    dl.fetch(
        Resource("o.h5", (f"hf://datasets/{REPO}/FK1-v4(expert)/other.h5",)),
        Path(os.environ["DATASETS_HUB_CACHE"]) / "raw" / "roboset" / "o.h5",
        loader="roboset",
    )
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")
    hub.reset_log()
    assert dl.list_hf_files(REPO) == ["FK1-v4(expert)/other.h5"]  # what the HF cache holds
    assert hub.total_requests() == 0


def test_hf_endpoint_set_before_import_in_a_fresh_process(raw, tmp_path):
    """The plain user setting: environment variables set before anything is imported."""
    script = (
        "import sys, types\nfrom pathlib import Path\nimport datasets_hub.downloads.fetch as dl\n"
        f"r = types.SimpleNamespace(name='FK1.h5', urls=({URL!r},), sha256={sha(DATA)!r}, size=None)\n"
        "print(dl.fetch(r, Path(sys.argv[1]), loader='roboset'))\n"
    )
    with serve_files() as server:
        server.add_hf_file(REPO, PATH, DATA)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "DATASETS_HUB_OFFLINE"))}
        env.update(
            PYTHONPATH=str(ROOT),
            HF_ENDPOINT=server.base_url,
            HF_HOME=str(tmp_path / "hf-home"),
            HF_HUB_DISABLE_TELEMETRY="1",
        )
        proc = subprocess.run(
            [sys.executable, "-c", script, str(raw / "FK1.h5")], env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        assert server.count(server.hf_path(REPO, PATH)) == 1
    assert (raw / "FK1.h5").read_bytes() == DATA
    assert (tmp_path / "hf-home" / "hub").is_dir()  # HF_HOME honoured for the Hugging Face cache


def test_quiet_downloads_start_no_thread_per_file(hub, raw):
    """huggingface_hub gets one silent tqdm class: a class per download leaked one tqdm monitor thread
    per file, and a long test run or a many-file build ended with hundreds of threads."""
    import threading

    from datasets_hub.downloads.huggingface import download_hf

    def monitors() -> int:
        return sum(t.name == "tqdm_monitor" and t.is_alive() for t in threading.enumerate())

    for i in range(6):
        hub.add_hf_file(REPO, f"many/file{i}.bin", payload(100 + i, seed=10 + i))
    before = monitors()
    for i in range(6):
        got = download_hf(f"hf://datasets/{REPO}/many/file{i}.bin", resource_name=f"file{i}", progress=False)
        assert got.read_bytes() == payload(100 + i, seed=10 + i)
    assert monitors() == before
