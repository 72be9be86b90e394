"""Download sizes before download (datasets_hub.downloads.sizes): the catalogue's, else a HEAD request
to a loopback server, cached; offline and DNS failures leave "unknown" without an error."""

from __future__ import annotations

import json
import socket

import pytest

from datasets_hub import catalogue
from datasets_hub.downloads import sizes as ds

from fixtures.http_server import serve_files

ID = "d4rl/sizes-tiny-v0"
PAYLOAD = bytes(range(256)) * 40  # 10,240 bytes


@pytest.fixture
def online(monkeypatch):
    monkeypatch.delenv("DATASETS_HUB_OFFLINE", raising=False)


@pytest.fixture
def server():
    with serve_files({"files/tiny.hdf5": PAYLOAD}) as srv:
        srv.redirect("moved/tiny.hdf5", "files/tiny.hdf5")
        yield srv


@pytest.fixture
def register():
    registered = []

    def _register(url: str, dataset_id: str = ID, **resource) -> str:
        catalogue.register_dataset(dataset_id, loader="d4rl", resources=[{"url": url, **resource}])
        registered.append(dataset_id)
        return dataset_id

    yield _register
    for dataset_id in registered:
        catalogue.unregister_dataset(dataset_id)


def test_info_asks_the_server_once_and_list_shows_the_cached_size(run, online, server, register):
    register(server.url("moved/tiny.hdf5"))  # a redirect first: followed
    code, out, err = run("info", ID)
    assert code == 0, err
    download = next(line for line in out.splitlines() if line.strip().startswith("download"))
    assert "10.0 KiB (server, asked " in download
    assert server.count("files/tiny.hdf5", method="HEAD") == 1 and server.count("files/tiny.hdf5") == 0  # no GET
    code, out, _ = run("info", ID, "--json")
    card = json.loads(out)
    assert card["download"]["bytes"] == len(PAYLOAD) and card["download"]["resources"][0]["source"] == "server"
    assert server.count("files/tiny.hdf5", method="HEAD") == 1  # answered from the cache
    code, out, _ = run("list", "--loader", "d4rl", "--search", "sizes-tiny", "--json")
    (row,) = json.loads(out)
    assert row["download_bytes"] == len(PAYLOAD)
    recorded = json.loads(ds.sizes_file().read_text())
    assert recorded["urls"][server.url("moved/tiny.hdf5")]["bytes"] == len(PAYLOAD)
    assert recorded["datasets"][ID]["bytes"] == len(PAYLOAD)


def test_a_catalogue_size_is_used_without_asking(run, online, server, register):
    register(server.url("files/tiny.hdf5"), size=len(PAYLOAD))
    code, out, _ = run("info", ID)
    assert code == 0 and "10.0 KiB (catalogue)" in out
    assert server.count("files/tiny.hdf5", method="HEAD") == 0


def test_offline_the_size_is_unknown_without_an_error(run, server, register, monkeypatch):
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")
    register(server.url("files/tiny.hdf5"))
    code, out, err = run("info", ID)
    assert code == 0 and not err
    assert "unknown, N/A offline" in out and server.total_requests() == 0
    code, out, _ = run("list", "--loader", "d4rl", "--search", "sizes-tiny")
    assert code == 0 and any(line.split()[:3] == [ID, "-", "?"] for line in out.splitlines())


def test_a_dns_failure_is_unknown_offline_at_once(run, online, register, monkeypatch):
    register("http://datasets.example.invalid/tiny.hdf5")
    calls = []

    def no_dns(host, *args, **kwargs):
        calls.append(host)
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    code, out, err = run("info", ID)
    assert code == 0 and not err, err
    assert "unknown, N/A offline (the host of http://datasets.example.invalid/tiny.hdf5 cannot be resolved)" in out
    assert len(calls) == 1  # no retry
    assert ds.cached_sizes()["urls"] == {}  # nothing learnt, nothing cached


def test_http_errors_and_missing_lengths_are_unknown(online, server):
    server.fault("files/tiny.hdf5", status=404)
    n, why = ds.head_size(server.url("files/tiny.hdf5"))
    assert n is None and "HTTP 404" in why
    server.add("endless", b"x", endless=True)  # no Content-Length
    n, why = ds.head_size(server.url("endless"))
    assert n is None and "no Content-Length" in why
    server.redirect("ftp", "ftp://example.invalid/x")
    n, why = ds.head_size(server.url("ftp"))
    assert n is None and "ftp://" in why


def test_a_mirror_is_asked_instead_of_the_upstream_host(online, server, monkeypatch):
    monkeypatch.setenv("DATASETS_HUB_ENDPOINT_D4RL", server.base_url)
    resources = [{"name": "tiny.hdf5", "urls": ["http://rail.example.invalid/files/tiny.hdf5"]}]
    (answer,) = ds.resource_sizes(resources, "d4rl", ask_server=True)
    assert answer.bytes == len(PAYLOAD) and answer.source == "server"
    assert server.count("files/tiny.hdf5", method="HEAD") == 1


def test_a_read_only_cache_still_answers(online, server, isolated_cache):
    isolated_cache.mkdir(parents=True, exist_ok=True)
    (isolated_cache / "catalogue").write_text("a file where the folder should be")  # no sizes.json can be written
    resources = [{"name": "tiny.hdf5", "urls": [server.url("files/tiny.hdf5")]}]
    (answer,) = ds.resource_sizes(resources, "d4rl", ask_server=True, dataset_id=ID)
    assert answer.bytes == len(PAYLOAD) and ds.cached_sizes() == {"urls": {}, "datasets": {}}


def test_list_uses_a_remembered_total_for_ids_whose_files_the_loader_names():
    known = {"urls": {}, "datasets": {"ogbench/x-v0": {"bytes": 123, "checked": "2026-11-24T00:00:00Z"}}}
    assert ds.listed_size("ogbench/x-v0", [], known) == 123
    assert ds.listed_size("ogbench/y-v0", [], known) is None
    assert ds.listed_size("d4rl/z", [{"url": "http://h/z", "size": 7}], known) == 7
    assert ds.total([ds.SizeAnswer("a", 1, "catalogue"), ds.SizeAnswer("b", None, "unknown")]) is None
