"""Upstream faults from a 127.0.0.1 server, through ``datasets_hub.load``.

Each fault must give a specific error naming the file and the URL, leave nothing half-written
visible (no build, no raw file with wrong bytes at its final name), move bad bytes aside
(``.corrupt``, never reused) and let the next load succeed once the server is healthy.
"""

from __future__ import annotations

import pytest

import datasets_hub as dh
from datasets_hub.downloads import fetch as downloader
from datasets_hub.errors import ChecksumMismatch, CorruptFile, DownloadError, LoaderError

from fixtures.faults import cache_state_ok, check_rows, d4rl_entry, register, sha256, write_d4rl
from fixtures.http_server import serve_files

ID = "d4rl/fault-upstream-v0"
FILE = "fault-upstream-v0.hdf5"
PATH = f"mirror/{FILE}"


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(downloader, "BACKOFF_BASE", 0.0)


@pytest.fixture(scope="module")
def payload(tmp_path_factory) -> bytes:
    return write_d4rl(tmp_path_factory.mktemp("d4rl") / FILE, rows=60).read_bytes()


@pytest.fixture
def served(payload, tmp_path, monkeypatch):
    """(server, register(sha=…, size=…)) with the fixture file served at PATH."""
    with serve_files({PATH: payload}) as server:

        def catalogue(*, sha: bool = False, size: bool = False, path: str = PATH) -> str:
            url = server.url(path)
            register(
                tmp_path / "extra.yaml",
                {
                    ID: d4rl_entry(
                        url, sha=sha256(payload) if sha else None, size=len(payload) if size else None, name=FILE
                    )
                },
            )
            monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(tmp_path / "extra.yaml"))
            return url

        yield server, catalogue


def _raw(cache):
    """The raw file of ID (kept under its source key: raw/d4rl/<key>/FILE), or where it would be."""
    found = sorted((cache / "raw" / "d4rl").glob(f"*/{FILE}*"))
    return found[0].with_name(FILE) if found else cache / "raw" / "d4rl" / "none" / FILE


def _nothing_visible(cache, payload):
    state = cache_state_ok(cache, {FILE: payload})
    assert state["builds"] == 0 and state["incomplete"] == 0
    assert not _raw(cache).exists()
    return state


@pytest.mark.parametrize(
    "status, words",
    [(404, "404: file not found"), (403, "403 (access denied)"), (401, "401 (access denied)"), (410, "HTTP 410")],
)
def test_client_errors_name_file_url_and_fix(served, payload, isolated_cache, status, words):
    server, catalogue = served
    url = catalogue()
    server.fault(PATH, status=status)
    with pytest.raises(DownloadError) as info:
        dh.load(ID)
    message = str(info.value)
    assert FILE in message and url in message and words in message
    assert server.count(PATH) == 1  # a 4xx is not retried
    _nothing_visible(isolated_cache, payload)


def test_server_errors_are_retried_then_fail_naming_the_url(served, payload, isolated_cache):
    server, catalogue = served
    url = catalogue()
    server.fault(PATH, status=500)
    with pytest.raises(DownloadError, match="giving up") as info:
        dh.load(ID)
    assert url in str(info.value) and "HTTP 500" in str(info.value)
    assert server.count(PATH) == 6  # 1 + retries=5, no more
    _nothing_visible(isolated_cache, payload)
    server.fault(PATH, status=0)  # healed (a status of 0 is "no fault")
    check_rows(dh.load(ID))


def test_transient_503s_then_success(served, isolated_cache):
    server, catalogue = served
    catalogue(sha=True)
    server.fault(PATH, fail_status=503, fail_times=3)
    check_rows(dh.load(ID))
    assert server.count(PATH) == 4


def test_dropped_connections_resume_from_where_they_stopped(served, payload, isolated_cache):
    server, catalogue = served
    catalogue(sha=True, size=True)
    server.fault(PATH, drop_after=1000, drop_times=4)  # four cuts, 1000 bytes each: every attempt brings bytes
    check_rows(dh.load(ID))
    # no byte received is lost: each attempt resumes exactly where the previous connection died
    assert server.ranges(PATH) == [None, "bytes=1000-", "bytes=2000-", "bytes=3000-", "bytes=4000-"]
    assert _raw(isolated_cache).read_bytes() == payload


def test_a_connection_that_always_drops_gives_up_and_the_next_load_resumes(served, payload, isolated_cache):
    server, catalogue = served
    url = catalogue(sha=True)
    server.fault(PATH, drop_after=0, drop_times=100)  # headers, then nothing: no progress ever
    with pytest.raises(DownloadError, match="giving up") as info:
        dh.load(ID)
    assert url in str(info.value) and "resumes" in str(info.value)
    _nothing_visible(isolated_cache, payload)
    server.fault(PATH, drop_after=None)
    check_rows(dh.load(ID))


def test_a_stalled_server_times_out_naming_the_url(served, payload, isolated_cache):
    from datasets_hub.loader import Resource

    server, catalogue = served
    url = catalogue()
    server.fault(PATH, drop_after=0, drop_times=100, stall=3.0)  # headers, then silence
    resource = Resource(name=FILE, urls=(url,))
    dest = _raw(isolated_cache)
    with pytest.raises(DownloadError) as info:
        downloader.fetch(resource, dest, loader="d4rl", timeout=0.3, retries=1)
    message = str(info.value)
    assert url in message and FILE in message and "timed out" in message.lower()
    assert server.count(PATH) == 2 and not dest.exists()


def test_a_trickle_slower_than_the_read_timeout_still_completes_by_resuming(served, payload, isolated_cache):
    """Each attempt times out after one slow chunk, but keeps it: progress resets the retry count."""
    from datasets_hub.loader import Resource

    server, catalogue = served
    url = catalogue()
    server.fault(PATH, trickle=0.6, trickle_chunk=2048)  # one 2 KiB chunk, then 0.6 s of silence
    dest = _raw(isolated_cache)
    downloader.fetch(
        Resource(name=FILE, urls=(url,), sha256=sha256(payload)), dest, loader="d4rl", timeout=0.3, retries=1
    )
    assert dest.read_bytes() == payload
    ranges = server.ranges(PATH)
    assert len(ranges) == -(-len(payload) // 2048) and ranges[1:] == [
        f"bytes={2048 * i}-" for i in range(1, len(ranges))
    ]


def test_content_length_longer_than_the_body(served, payload, isolated_cache):
    server, catalogue = served
    url = catalogue(size=True)
    server.fault(PATH, length_delta=100)
    with pytest.raises(DownloadError, match="announces") as info:  # the catalogue knows the size
        dh.load(ID)
    assert url in str(info.value) and str(len(payload) + 100) in str(info.value)
    _nothing_visible(isolated_cache, payload)


def test_content_length_longer_than_the_body_without_a_catalogue_size(served, payload, isolated_cache):
    """The body ends before the announced length; the resume is told (416) the file is shorter than
    first announced: a contradiction that is not trusted, the download gives up and keeps its bytes."""
    server, catalogue = served
    url = catalogue()
    server.fault(PATH, length_delta=100)
    with pytest.raises(DownloadError, match="giving up") as info:
        dh.load(ID)
    assert url in str(info.value)
    assert _nothing_visible(isolated_cache, payload)["partial"] == 1
    server.fault(PATH, length_delta=0)
    check_rows(dh.load(ID))


def test_content_length_shorter_than_the_file_fails_the_checksum(served, payload, isolated_cache):
    server, catalogue = served
    url = catalogue(sha=True)
    server.fault(PATH, length_delta=-1000)  # a truncated body that looks complete
    with pytest.raises(ChecksumMismatch) as info:
        dh.load(ID)
    assert url in str(info.value) and FILE in str(info.value) and "moved aside" in str(info.value)
    state = _nothing_visible(isolated_cache, payload)
    assert (
        state["corrupt"] == 1
        and len(_raw(isolated_cache).with_name(FILE + ".corrupt").read_bytes()) == len(payload) - 1000
    )


def test_corrupt_bytes_fail_the_checksum_are_moved_aside_and_never_reused(served, payload, isolated_cache):
    server, catalogue = served
    url = catalogue(sha=True, size=True)
    server.fault(PATH, corrupt=True)
    with pytest.raises(ChecksumMismatch) as info:
        dh.load(ID)
    assert url in str(info.value) and sha256(payload) in str(info.value)
    assert _nothing_visible(isolated_cache, payload)["corrupt"] == 1
    server.fault(PATH, corrupt=False)
    check_rows(dh.load(ID))
    assert server.count(PATH) == 2  # fetched again: the corrupt copy was not reused


@pytest.mark.parametrize("how", ["short body", "truncated file served whole"])
def test_truncated_hdf5_without_checksum_is_moved_aside_naming_file_and_url(served, payload, isolated_cache, how):
    server, catalogue = served
    url = catalogue()  # no sha256, no size: D4RL's catalogue has none, so only the loader can tell
    if how == "short body":
        server.fault(PATH, length_delta=-(len(payload) // 3))
    else:
        server.add(PATH, payload[: len(payload) * 2 // 3])
    with pytest.raises(CorruptFile) as info:
        dh.load(ID)
    message = str(info.value)
    assert FILE in message and url in message and "moved aside" in message
    assert _nothing_visible(isolated_cache, payload)["corrupt"] == 1
    assert info.value.path == _raw(isolated_cache).with_name(FILE + ".corrupt")
    server.fault(PATH, length_delta=0)
    server.add(PATH, payload)
    check_rows(dh.load(ID))
    assert server.count(PATH) == 2


def test_html_error_page_served_with_200_is_not_an_hdf5_file(served, payload, isolated_cache):
    server, catalogue = served
    url = catalogue()
    server.add(PATH, b"<html><body>Bandwidth limit exceeded</body></html>\n")
    with pytest.raises(CorruptFile, match="not a readable HDF5") as info:
        dh.load(ID)
    assert url in str(info.value)
    assert _nothing_visible(isolated_cache, payload)["corrupt"] == 1


def test_redirect_loop_is_refused_naming_the_chain(served, payload, isolated_cache):
    server, catalogue = served
    url = catalogue(path="loop/a")
    server.redirect("loop/a", "loop/b")
    server.redirect("loop/b", "loop/a")
    with pytest.raises(DownloadError, match="redirect loop") as info:
        dh.load(ID)
    assert url in str(info.value) and server.url("loop/b") in str(info.value)
    assert server.count("loop/a") == 1 and server.count("loop/b") == 1
    _nothing_visible(isolated_cache, payload)


def test_endless_redirect_chain_stops(served, payload, isolated_cache):
    server, catalogue = served
    catalogue(path="hop/0")
    for i in range(30):
        server.redirect(f"hop/{i}", f"hop/{i + 1}")
    with pytest.raises(DownloadError, match="more than 10 redirects"):
        dh.load(ID)
    assert sum(server.count(f"hop/{i}") for i in range(30)) == downloader.MAX_REDIRECTS + 1


@pytest.mark.parametrize("target", ["ftp://127.0.0.1/x.hdf5", "file:///etc/passwd", "gopher://127.0.0.1/x"])
def test_redirect_to_a_non_http_scheme_is_refused(served, payload, isolated_cache, target):
    server, catalogue = served
    url = catalogue(path="go")
    server.redirect("go", target)
    with pytest.raises(DownloadError, match="only http and https") as info:
        dh.load(ID)
    assert url in str(info.value) and target in str(info.value)
    _nothing_visible(isolated_cache, payload)


def test_a_mirror_list_falls_back_and_reports_every_failure(served, payload, isolated_cache, tmp_path, monkeypatch):
    server, _ = served
    bad, good = server.url("missing.hdf5"), server.url(PATH)
    entry = d4rl_entry(bad, name=FILE)
    entry["resources"][0] = {"urls": [bad, good], "name": FILE, "sha256": sha256(payload)}
    register(tmp_path / "extra.yaml", {ID: entry})
    monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(tmp_path / "extra.yaml"))
    check_rows(dh.load(ID))
    # both mirrors broken: one error naming both URLs
    from datasets_hub.cache.maintenance import remove

    remove(ID, raw=True)
    server.fault(PATH, corrupt=True)
    with pytest.raises(ChecksumMismatch, match="every mirror failed") as info:
        dh.load(ID)
    assert bad in str(info.value) and good in str(info.value)


# ---------------------------------------------------------------------------------------- gzip, TFRecord
def test_truncated_gzip_atari_checkpoint_is_moved_aside(tmp_path, monkeypatch, isolated_cache):
    from datasets_hub.loaders.atari.replay import checkpoint_file

    from fixtures import atari as atari_files

    buf = atari_files.DopamineBuffer()
    atari_files.play(buf, atari_files.LENGTHS, atari_files.ENDS)
    buf.log_final()
    folder = tmp_path / "mirror" / "atari-replay-datasets" / "dqn" / "Pong" / "1" / "replay_logs"
    atari_files.save_checkpoint(folder, 0, buf.logs[0])
    root = folder.parents[4]
    served = {str(p.relative_to(root)): p.read_bytes() for p in folder.iterdir()}
    name = checkpoint_file("observation", 0)
    key = f"atari-replay-datasets/dqn/Pong/1/replay_logs/{name}"
    good = served[key]
    served[key] = good[: len(good) // 2]  # the gzip stream ends mid-way
    with serve_files(served) as server:
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_ATARI", server.base_url)
        with pytest.raises(CorruptFile) as info:
            dh.load("atari/Pong/1", checkpoints=[0])
        message = str(info.value)
        assert name in message and server.url(key) in message and "moved aside" in message
        state = cache_state_ok(isolated_cache)
        assert state["builds"] == 0 and state["corrupt"] == 1
        assert not list((isolated_cache / "raw" / "atari").rglob(name))
        server.add(key, good)
        rb = dh.load("atari/Pong/1", checkpoints=[0])
        assert len(rb) > 0 and server.count(key) == 2


def test_tfrecord_with_a_bad_crc_is_moved_aside(tmp_path, monkeypatch, isolated_cache):
    from fixtures import openx as openx_files

    files = openx_files.write_release(tmp_path / "mirror")
    served = {path: file.read_bytes() for path, file in files.items()}
    name = f"{openx_files.DATASET}-train.tfrecord-00000-of-{openx_files.NUM_SHARDS:05d}"
    key = f"{openx_files.PREFIX}/{name}"
    good = served[key]
    bad = bytearray(good)
    bad[40] ^= 0xFF  # inside the first record's data: its CRC no longer matches
    served[key] = bytes(bad)
    with serve_files(served) as server:
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_OPENX", server.base_url)
        with pytest.raises(LoaderError) as info:
            dh.load(f"openx/{openx_files.DATASET}", shards=[0])
        assert isinstance(info.value, CorruptFile)
        message = str(info.value)
        assert name in message and "CRC" in message and server.url(key) in message and "moved aside" in message
        state = cache_state_ok(isolated_cache)
        assert state["builds"] == 0 and state["corrupt"] == 1
        server.add(key, good)
        rb = dh.load(f"openx/{openx_files.DATASET}", shards=[0])
        assert len(rb) > 0 and server.count(key) == 2
