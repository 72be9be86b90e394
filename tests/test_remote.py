"""load(URL): published builds opened over file://, HTTP and the Hugging Face Hub, fully or lazily resident."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import datasets_hub as dh
from datasets_hub import SliceSampler
from datasets_hub.errors import DownloadError, InvalidParameter
from datasets_hub.remote.publish import PUBLISHED, export
from datasets_hub.remote.storage import ResidentStorage

from fixtures.http_server import ENDLESS_S
from fixtures.remote import ID, PARAMS, local_build, publish
from fixtures.remote import same as _same
from fixtures.remote import serve_folder as _serve

pytest.importorskip("zarr")  # an optional extra (datasets-hub[remote]); make test installs it


@pytest.fixture
def local_rb():
    return local_build()


@pytest.fixture
def published(local_rb, tmp_path) -> Path:
    return publish(local_rb, tmp_path / "published")


def test_full_residency_gives_bit_identical_samples_under_the_same_seed(local_rb, published):
    sampler_kw = {"slice_len": 16}
    rb = dh.load(
        f"file://{published}",
        batch_size=64,
        sampler=SliceSampler(**sampler_kw),
        generator=torch.Generator().manual_seed(3),
    )
    ref = dh.load(
        ID, batch_size=64, sampler=SliceSampler(**sampler_kw), generator=torch.Generator().manual_seed(3), **PARAMS
    )
    for _ in range(20):
        assert _same(rb.sample(), ref.sample())
    rb.storage.wait_complete(60)
    assert rb.storage.fill_status()["complete"]
    assert _same(rb[:], local_rb[:])
    # a complete copy opens as a plain build: no residency checks, and offline it needs no folder at all
    os.environ["DATASETS_HUB_OFFLINE"] = "1"
    try:
        again = dh.load(f"file://{published}")
        assert not isinstance(again.storage, ResidentStorage)
        assert _same(again[:], local_rb[:])
    finally:
        del os.environ["DATASETS_HUB_OFFLINE"]


def test_lazy_over_http_fetches_kilobytes_before_the_first_batch(local_rb, published):
    from fixtures.http_server import serve_files

    total = sum(r["bytes"] for r in json.loads((published / PUBLISHED).read_text())["files"].values())
    with serve_files() as server:
        url = _serve(server, published)
        rb = dh.load(
            url,
            resident="lazy",
            batch_size=32,
            sampler=SliceSampler(slice_len=8),
            generator=torch.Generator().manual_seed(0),
        )
        # published.json, the manifest, each leaf's zarr metadata and the episode index only (a fixed share of the
        # total was fragile: the manifest grows with every field a build records)
        files = json.loads((published / PUBLISHED).read_text())["files"]
        leaves = json.loads((published / PUBLISHED).read_text())["arrays"]
        opened = [PUBLISHED, "manifest.json"] + [f"data.zarr/{leaf}/zarr.json" for leaf in leaves]
        opened += [p for p in files if p.startswith("data.zarr/episodes/") and "/c/" in p]
        before = _bytes_sent(server)
        assert before == sum((published / p).stat().st_size for p in opened), (before, total)
        assert before < 0.5 * total
        batch = rb.sample()
        index = batch["index"] if "index" in batch.keys() else None
        chunk_gets = [r for r in server.requests if "/c/" in r.path]
        assert 0 < len(chunk_gets) < sum(1 for p in (published / "data.zarr").rglob("*") if "/c/" in p.as_posix())
        rows = torch.arange(0, len(local_rb), 97)
        assert _same(rb[rows], local_rb[rows])
        assert index is not None
        keys = ["observation", "action", "episode", "step", ("next", "reward"), ("next", "observation")]
        assert _same(batch.select(*keys), local_rb[index].select(*keys))  # slice ends re-mark next/truncated


def _bytes_sent(server) -> int:
    return sum(server.bytes_of(request.path) for request in server.requests if request.method == "GET")


def test_lazy_sampling_is_uniform_over_the_whole_dataset(published, local_rb):
    rb = dh.load(f"file://{published}", resident="lazy", batch_size=500, generator=torch.Generator().manual_seed(1))
    bins = 20
    counts = np.zeros(bins)
    n = len(local_rb)
    draws = 0
    for _ in range(60):
        _, info = rb.sample(return_info=True)
        index = np.asarray(info["index"]).reshape(-1)
        counts += np.bincount(index * bins // n, minlength=bins)
        draws += index.size
    expected = np.full(bins, draws / bins)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 43.82, chi2  # the 0.999 quantile of chi-square with 19 degrees of freedom


def test_hugging_face_url_with_revision(published, local_rb, monkeypatch, tmp_path):
    from fixtures.http_server import point_huggingface_hub_at, serve_files

    with serve_files() as server:
        for path in published.rglob("*"):
            if path.is_file():
                server.add_hf_file("org/cartpole", path.relative_to(published).as_posix(), path.read_bytes())
        point_huggingface_hub_at(server, monkeypatch, tmp_path / "hf-cache")
        rb = dh.load("hf://datasets/org/cartpole@main", resident="lazy")
        rows = torch.arange(0, len(local_rb), 31)
        assert _same(rb[rows], local_rb[rows])


def test_s3_url_against_a_moto_server(published, local_rb, monkeypatch):
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        for name, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        }.items():
            monkeypatch.setenv(name, value)
        import fsspec

        fs = fsspec.filesystem("s3", skip_instance_cache=True)
        fs.mkdir("bucket")
        for path in published.rglob("*"):
            if path.is_file():
                fs.pipe_file(f"bucket/builds/cartpole/{path.relative_to(published).as_posix()}", path.read_bytes())
        rb = dh.load("s3://bucket/builds/cartpole", resident="lazy")
        rows = torch.arange(0, len(local_rb), 17)
        assert _same(rb[rows], local_rb[rows])
    finally:
        server.stop()


def test_corrupt_chunk_is_never_served_then_refetched(published, local_rb):
    from fixtures.http_server import serve_files

    with serve_files() as server:
        url = _serve(server, published)
        rb = dh.load(url, resident="lazy")
        leaf = "steps/_packed"  # the per-step record: what a batch reads (reward is packed into it)
        assert leaf in rb.storage.chunks.arrays
        chunk = next(
            p for p in json.loads((published / PUBLISHED).read_text())["files"] if p.startswith(f"data.zarr/{leaf}/c/")
        )
        server.fault(f"pub/{chunk}", corrupt=True)
        rows_per_chunk = json.loads((published / PUBLISHED).read_text())["arrays"][leaf]["chunk_rows"]
        number = int(chunk.rsplit("/c/", 1)[1].split("/")[0])
        rows = torch.arange(number * rows_per_chunk, number * rows_per_chunk + 4)
        with pytest.raises(DownloadError, match="could not be fetched intact"):
            rb[rows]
        assert server.count(f"pub/{chunk}") == 3  # three tries, none accepted
        assert not rb.storage.chunks.maps[leaf][number]
        server.fault(f"pub/{chunk}", corrupt=False)
        assert _same(rb[rows], local_rb[rows])


def test_dropped_connection_mid_chunk_is_retried(published, local_rb):
    from fixtures.http_server import serve_files

    with serve_files() as server:
        url = _serve(server, published)
        rb = dh.load(url, resident="lazy")
        for relpath in json.loads((published / PUBLISHED).read_text())["files"]:
            if "/c/" in relpath and not relpath.startswith("data.zarr/episodes/"):
                server.fault(f"pub/{relpath}", drop_after=10, drop_times=1)
        rows = torch.arange(0, len(local_rb), 13)
        assert _same(rb[rows], local_rb[rows])


def test_server_gone_fails_only_for_missing_chunks(published, local_rb):
    from fixtures.http_server import serve_files

    with serve_files() as server:
        url = _serve(server, published)
        rb = dh.load(url, resident="lazy")
        first = torch.arange(0, 8)
        assert _same(rb[first], local_rb[first])
        for path in server.served_paths():
            server.fault(path, status=503)  # open keep-alive connections would outlive stop()
    assert _same(rb[first], local_rb[first])  # resident: no network needed
    with pytest.raises(DownloadError):
        rb[torch.tensor([len(local_rb) - 1])]


def test_byte_budget_evicts_least_recently_used_chunks(published, local_rb):
    budget = 40_000
    rb = dh.load(f"file://{published}", resident="lazy", max_bytes=budget)
    chunks = rb.storage.chunks
    episodes = sum(
        chunks.chunk_bytes(n, c)
        for n, s in chunks.arrays.items()
        if n.startswith("episodes/")
        for c in range(s["chunks"])
    )
    for start in range(0, len(local_rb) - 10, 150):
        rows = torch.arange(start, start + 10)
        assert _same(rb[rows], local_rb[rows])
        assert chunks.resident_bytes() <= budget + episodes
    rows = torch.arange(0, 10)  # evicted long ago: fetched again, still right
    assert _same(rb[rows], local_rb[rows])
    with pytest.raises(InvalidParameter, match="max_bytes"):
        dh.load(f"file://{published}", resident="lazy", max_bytes=100)[:]


def test_refusals(published):
    with pytest.raises(InvalidParameter, match="loader params"):
        dh.load(f"file://{published}", steps=5)
    with pytest.raises(InvalidParameter, match="published builds"):
        dh.load(ID, resident="lazy", **PARAMS)
    with pytest.raises(InvalidParameter, match="resident="):
        dh.load(f"file://{published}", resident="sometimes")
    with pytest.raises(InvalidParameter, match="resident='lazy'"):
        dh.load(f"file://{published}", max_bytes=10_000)
    with pytest.raises(DownloadError, match="does not exist"):
        dh.load(f"file://{published.parent / 'nothing'}")


_KILL_CHILD = """
import sys, torch, datasets_hub as dh
rb = dh.load(sys.argv[1], resident="lazy", batch_size=64, generator=torch.Generator().manual_seed(int(sys.argv[2])))
print("ready", flush=True)
while True:
    rb.sample()
"""


@pytest.mark.slow  # kill -9 trials: make test-faults runs them
def test_kill_minus_9_leaves_residency_consistent_with_the_bytes(published, local_rb, tmp_path):
    url = f"file://{published}"
    env = {**os.environ}
    for seed in range(4):
        child = subprocess.Popen([sys.executable, "-c", _KILL_CHILD, url, str(seed)], stdout=subprocess.PIPE, env=env)
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(0.05 + 0.07 * seed)
        child.send_signal(signal.SIGKILL)
        child.wait()
    rb = dh.load(url, resident="lazy")
    chunks = rb.storage.chunks
    stored = rb.storage.path / "data"
    checked = 0
    for name, spec in chunks.arrays.items():
        source = np.fromfile(local_rb.storage.path / "data" / (name + ".memmap"), dtype=np.uint8)
        local = np.fromfile(stored / (name + ".memmap"), dtype=np.uint8)
        step = spec["chunk_rows"] * chunks.row_bytes[name]
        for chunk in np.flatnonzero(chunks.maps[name][: spec["chunks"]]):
            a = slice(int(chunk) * step, min(len(source), (int(chunk) + 1) * step))
            assert np.array_equal(local[a], source[a]), (name, chunk)
            checked += 1
    assert checked > 0


def test_frame_stacks_over_a_lazy_copy_equal_the_local_build(local_rb, tmp_path):
    """FrameStack reads earlier frames of an episode through the storage: a lazy copy fetches them first (a
    read of the sparse files would give zeros for frames never fetched)."""
    from datasets_hub import FrameStack

    published = export(local_rb, tmp_path / "small-chunks", chunk_bytes=1024)  # 64 observation rows per chunk
    rows_per_chunk = json.loads((published / PUBLISHED).read_text())["arrays"]["obs/observation"]["chunk_rows"]
    everything = local_rb[:]
    frame_row = torch.arange(len(local_rb)) + everything["episode"]  # row of observation[t] in the frame file
    # transitions whose 3 previous frames sit in the previous chunk, deep enough into their episode
    rows = torch.nonzero((frame_row % rows_per_chunk == 0) & (everything["step"] >= 3)).reshape(-1)
    assert rows.numel() > 5
    want = FrameStack(4).bind(local_rb)(local_rb[rows])
    rb = dh.load(f"file://{published}", resident="lazy")
    got = FrameStack(4).bind(rb)(rb[rows])
    assert _same(got["observation"], want["observation"])
    assert _same(got["next", "observation"], want["next", "observation"])
    assert want["observation"].shape[1] == 4


def _worker_batches(rb, batches: int, context: str = "fork") -> list:
    loader = rb.as_iterable_dataset(num_batches=batches, seed=5).dataloader(
        num_workers=2, multiprocessing_context=context
    )
    return list(loader)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_remote_build_pickles_by_reference_and_workers_share_the_local_copy(published, local_rb, context):
    """DataLoader workers reopen the parent's local copy (spawned workers unpickle the storage, forked ones
    inherit it): what is resident is never fetched again, and what a worker fetches becomes resident for
    every process sharing the copy."""
    import pickle

    from fixtures.http_server import serve_files

    keys = ["observation", "action", "episode", "step", ("next", "reward"), ("next", "observation")]
    with serve_files() as server:
        url = _serve(server, published)
        rb = dh.load(url, resident="lazy", batch_size=64, sampler=SliceSampler(slice_len=8))
        state = pickle.dumps(rb.storage)
        assert len(state) < 2000  # a reference (URL, local copy, mode), never data
        before = rb.storage.fill_status()["resident_bytes"]
        requests = server.total_requests()
        batches = _worker_batches(rb, 4, context)  # the workers fetch the chunks they need themselves
        assert len(batches) == 4
        for batch in batches:
            assert _same(batch.select(*keys), local_rb[batch["index"]].select(*keys))
        assert server.count("pub/published.json") == 1  # workers open the local copy, not the URL
        assert server.total_requests() > requests
        assert rb.storage.fill_status()["resident_bytes"] > before  # the parent sees the workers' chunks

        rb[:]  # every chunk resident now: workers need no network at all
        requests = server.total_requests()
        for batch in _worker_batches(rb, 4, context):
            assert _same(batch.select(*keys), local_rb[batch["index"]].select(*keys))
        assert server.total_requests() == requests


def test_a_pickled_copy_that_is_gone_or_replaced_is_refused(published):
    import pickle
    import shutil

    from datasets_hub.errors import CacheError

    rb = dh.load(f"file://{published}", resident="lazy")
    state = pickle.dumps(rb.storage)
    again = pickle.loads(state)
    assert isinstance(again, ResidentStorage) and again.path == rb.storage.path
    shutil.rmtree(rb.storage.path)
    with pytest.raises(CacheError, match="load the URL again"):
        pickle.loads(state)


def test_a_full_copy_pickled_before_completion_reopens_as_a_plain_build_after(published, local_rb):
    import pickle

    from datasets_hub.build.storage import DatasetStorage

    rb = dh.load(f"file://{published}")
    state = pickle.dumps(rb.storage)
    rb.storage.wait_complete(60)
    again = pickle.loads(state)
    assert type(again) is DatasetStorage
    assert _same(again[:], local_rb[:])


# -- issue 27: adversarial inputs ------------------------------------------------------------------
def _copy_dir(published: Path) -> Path:
    """Where the first load of ``published`` puts its local copy (follows from the URL and published.json)."""
    import hashlib

    from datasets_hub.remote.open_url import local_dir

    return local_dir(f"file://{published}", hashlib.sha256((published / PUBLISHED).read_bytes()).hexdigest())


@pytest.mark.parametrize("planted", ["leaf", "map", "folder"])
def test_symlinks_planted_where_the_local_copy_will_write_are_refused(published, tmp_path, planted):
    """A link at a leaf's data file, at its residency map, or at the copy's data folder: the load is a
    CacheError naming the link, and the file outside the cache is not touched (issue 27)."""
    from datasets_hub.build.format import leaf_path
    from datasets_hub.errors import CacheError
    from datasets_hub.remote.chunks import map_path

    name = next(iter(json.loads((published / PUBLISHED).read_text())["arrays"]))
    copy = _copy_dir(published)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_bytes(b"keep me")
    link = {"leaf": leaf_path(copy, name), "map": map_path(copy, name), "folder": copy / "data"}[planted]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim if planted == "folder" else victim / "precious")
    with pytest.raises(CacheError, match="symbolic link"):
        dh.load(f"file://{published}", resident="lazy")
    assert (victim / "precious").read_bytes() == b"keep me" and [p.name for p in victim.iterdir()] == ["precious"]


def _rewrite_published(published: Path, change) -> None:
    record = json.loads((published / PUBLISHED).read_text())
    change(record)
    (published / PUBLISHED).write_text(json.dumps(record))


@pytest.mark.parametrize("factor", [0.5, 2])
@pytest.mark.parametrize("resident", ["lazy", "full"])
def test_chunk_rows_that_disagree_with_the_zarr_metadata_are_refused(published, factor, resident):
    """published.json's chunk_rows halved or doubled (its chunk count made to match): the hash-checked zarr
    metadata says otherwise, so the load is refused instead of serving zeros or other rows (issue 27)."""
    from datasets_hub.errors import CacheError

    def change(record):
        spec = next(s for n, s in record["arrays"].items() if n.startswith("steps/"))
        spec["chunk_rows"] = max(1, int(spec["chunk_rows"] * factor))
        spec["chunks"] = -(-spec["rows"] // spec["chunk_rows"])

    _rewrite_published(published, change)
    with pytest.raises(CacheError, match=r"inconsistent: published\.json says leaf 'steps/.*' has chunks"):
        dh.load(f"file://{published}", resident=resident)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.update(arrays=[]), "'arrays' is not a non-empty mapping"),
        (lambda r: r.update(files=None), "'files' is not a mapping"),
        (lambda r: r.update(manifest_sha256=5), "'manifest_sha256' is not a sha256"),
        (lambda r: next(iter(r["arrays"].values())).pop("rows"), "needs integer rows"),
        (lambda r: next(iter(r["arrays"].values())).update(shape="x"), r"\['shape'\] is not a list"),
        (lambda r: next(iter(r["arrays"].values())).update(dtype="complex64"), r"\['dtype'\] is 'complex64'"),
        (lambda r: next(iter(r["arrays"].values())).update(chunks=10**9), "declares 1000000000 chunks"),
        (lambda r: next(iter(r["arrays"].values())).update(rows=10**12, chunk_rows=1, chunks=10**12), "more than"),
        (lambda r: next(iter(r["arrays"].values())).update(shape=[10**9, 10**9]), "more than"),
        (lambda r: r["files"].update({"data.zarr/x": {"sha256": "zz"}}), r"files\['data.zarr/x'\] needs"),
        (lambda r: r["arrays"].update({"x": 1}), r"arrays\['x'\] is not a mapping"),
    ],
)
def test_a_crafted_publishing_record_is_a_clear_cache_error(published, change, message):
    from datasets_hub.errors import CacheError

    _rewrite_published(published, change)
    with pytest.raises(CacheError, match=message):
        dh.load(f"file://{published}", resident="lazy")


def test_a_deeply_nested_publishing_record_is_a_clear_cache_error(published):
    from datasets_hub.errors import CacheError

    (published / PUBLISHED).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CacheError, match="is not JSON"):
        dh.load(f"file://{published}", resident="lazy")


def test_no_password_in_the_error_or_its_chain_when_published_json_is_missing(published):
    """A 404 on published.json over HTTP with user:password@: the error, its chain and the CLI's output hold
    no password (issue 27)."""
    import traceback

    from datasets_hub.cli import main as cli_main

    from fixtures.http_server import serve_files

    with serve_files() as server:
        url = server.base_url.replace("://", "://me:hunter2@") + "/nothing"
        with pytest.raises(DownloadError) as err:
            dh.load(url, resident="lazy")
        shown = "".join(traceback.format_exception(err.value))
        assert "does not exist" in shown and "hunter2" not in shown
        _serve(server, published)
        good = server.base_url.replace("://", "://me:hunter2@") + "/pub"
        import contextlib
        import io

        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            assert cli_main(["sample", good, "--batch-size", "4"]) == 0
            assert cli_main(["sample", url, "--batch-size", "4"]) == 1
    assert "batch of 4" in printed.getvalue() and "hunter2" not in printed.getvalue()


def _first_chunk(published: Path) -> str:
    files = json.loads((published / PUBLISHED).read_text())["files"]
    return next(p for p in sorted(files) if "/steps/" in f"/{p}" and not p.endswith("zarr.json"))


def test_a_chunk_with_an_endless_body_is_cut_at_its_published_size(published):
    """The server answers a chunk with garbage forever (no Content-Length): the read stops at the size
    published.json gives that chunk and fails by name, instead of growing without bound (issue 27)."""
    from fixtures.http_server import serve_files

    with serve_files() as server:
        url = _serve(server, published)
        chunk = _first_chunk(published)
        server.fault(f"pub/{chunk}", endless=True)
        rb = dh.load(url, resident="lazy")
        started = time.monotonic()
        with pytest.raises(DownloadError, match=r"sent more than the [\d,]+ bytes its publishing record allows"):
            rb[:]
        assert time.monotonic() - started < ENDLESS_S / 2  # cut by the client, not ended by the server


def test_a_chunk_that_stalls_after_its_headers_fails_within_the_rate_window(published, monkeypatch):
    """Headers, then silence: the read fails after DATASETS_HUB_RATE_WINDOW seconds (the download layer's
    minimum-rate rule), not after a backend's minutes-long default (issue 27)."""
    from fixtures.http_server import serve_files

    with serve_files() as server:
        url = _serve(server, published)
        chunk = _first_chunk(published)
        rb = dh.load(url, resident="lazy")
        monkeypatch.setenv("DATASETS_HUB_RATE_WINDOW", "0.5")  # read at each read, as downloads do
        server.fault(f"pub/{chunk}", drop_after=0, drop_times=10, stall=60)
        started = time.monotonic()
        with pytest.raises(DownloadError, match=r"no byte for 0.5 s"):
            rb[:]
        assert time.monotonic() - started < 30  # 3 tries of 0.5 s; one stall waited out would take 60 s


def test_a_trickling_chunk_fails_below_the_minimum_rate(published, monkeypatch):
    from fixtures.http_server import serve_files

    with serve_files() as server:
        url = _serve(server, published)
        chunk = _first_chunk(published)
        rb = dh.load(url, resident="lazy")
        monkeypatch.setenv("DATASETS_HUB_RATE_WINDOW", "0.3")
        monkeypatch.setenv("DATASETS_HUB_MIN_RATE", "100000")
        server.fault(f"pub/{chunk}", trickle=0.1, trickle_chunk=64)
        with pytest.raises(DownloadError, match="below the minimum of 100000 bytes/s"):
            rb[:]


def _serve_on_the_hub(server, published: Path) -> None:
    for path in published.rglob("*"):
        if path.is_file():
            server.add_hf_file("org/cartpole", path.relative_to(published).as_posix(), path.read_bytes())


def test_hugging_face_reads_follow_the_download_rules(published, monkeypatch, tmp_path):
    """hf:// chunks are read over their https URLs under the download rules: an endless body is cut at the
    chunk's published size, a stall after the headers fails within the rate window (issue 27; through
    huggingface_hub's file system the whole body was read, with no cap and no rate)."""
    from fixtures.http_server import point_huggingface_hub_at, serve_files

    chunk = _first_chunk(published)
    with serve_files() as server:
        _serve_on_the_hub(server, published)
        point_huggingface_hub_at(server, monkeypatch, tmp_path / "hf-cache")
        server.fault(server.hf_path("org/cartpole", chunk), endless=True)
        rb = dh.load("hf://datasets/org/cartpole", resident="lazy")
        started = time.monotonic()
        with pytest.raises(DownloadError, match=r"sent more than the [\d,]+ bytes its publishing record allows"):
            rb[:]
        assert time.monotonic() - started < ENDLESS_S / 2  # cut by the client, not ended by the server
    with serve_files() as server:
        _serve_on_the_hub(server, published)
        point_huggingface_hub_at(server, monkeypatch, tmp_path / "hf-cache")
        monkeypatch.setenv("DATASETS_HUB_RATE_WINDOW", "0.5")
        server.fault(server.hf_path("org/cartpole", chunk), drop_after=0, drop_times=10, stall=60)
        rb = dh.load("hf://datasets/org/cartpole", resident="lazy")
        started = time.monotonic()
        with pytest.raises(DownloadError, match=r"no byte for 0.5 s"):
            rb[:]
        assert time.monotonic() - started < 30  # one stall waited out would take 60 s


def test_a_file_larger_than_its_published_size_is_refused_through_fsspec(published):
    """file:// (and s3://) read through fsspec with a ranged read: at most one byte past the published size is
    asked for, and more than that size is refused by name."""
    chunk = _first_chunk(published)
    (published / chunk).write_bytes((published / chunk).read_bytes() + b"\0" * 100_000)
    rb = dh.load(f"file://{published}", resident="lazy")
    with pytest.raises(DownloadError, match="more than the"):
        rb[:]
