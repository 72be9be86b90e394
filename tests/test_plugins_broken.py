"""Offline and broken-plugin behaviour (issue 13): listing never waits on the network, a DNS failure
fails at once with a hint, a broken plugin hides only its ids with one warning line, a wrong
entry-point name is reported, and a missing module inside an installed plugin is named."""

from __future__ import annotations

import socket
import sys
import time
from importlib.metadata import EntryPoint

import pytest

import datasets_hub as dh
from datasets_hub import catalogue, plugins
from datasets_hub.catalogue import PluginWarning, matches
from datasets_hub.errors import DownloadError, MissingDependency, PluginError


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """A folder on sys.path for throw-away plugin modules, and entry points pointing into it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    real = plugins._entry_points()
    extra: dict[str, EntryPoint] = {}
    monkeypatch.setattr(plugins, "_entry_points", lambda: {**real, **extra})
    plugins.clear_cache()
    catalogue._WARNED.clear()
    yield tmp_path, extra
    plugins.clear_cache()
    for name in [m for m in sys.modules if m.startswith("nu_plugin_")]:
        del sys.modules[name]


def _register(extra, tmp_path, ep_name, module, source):
    (tmp_path / f"{module}.py").write_text(source)
    extra[ep_name] = EntryPoint(name=ep_name, value=f"{module}:MyLoader", group=plugins.GROUP)
    dh.register_dataset(f"{ep_name}/thing-v0", loader=ep_name)


def _unregister(*ids):
    from datasets_hub.catalogue import unregister_dataset

    for i in ids:
        unregister_dataset(i)


GOOD = """
from datasets_hub.loader import Loader
class MyLoader(Loader):
    name = "{name}"
"""


def test_a_plugin_with_a_syntax_error_hides_only_its_ids(plugin_dir):
    tmp_path, extra = plugin_dir
    _register(extra, tmp_path, "nubroken", "nu_plugin_broken", "class MyLoader(:\n")
    try:
        with pytest.warns(PluginWarning, match=r"'nubroken'.*failed to import.*SyntaxError.*1 of its ids hidden"):
            ids = dh.list_datasets()
        assert "nubroken/thing-v0" not in ids and "gym/cartpole-random-v0" in ids
        with pytest.raises(PluginError, match="SyntaxError"):
            dh.list_datasets(loader="nubroken")  # asked for by name: an error, not []
    finally:
        _unregister("nubroken/thing-v0")


def test_entry_point_name_different_from_loader_name_is_reported(plugin_dir):
    tmp_path, extra = plugin_dir
    _register(extra, tmp_path, "nuname", "nu_plugin_name", GOOD.format(name="other"))
    try:
        with pytest.raises(PluginError, match="declares name 'other' but is registered as 'nuname'"):
            dh.list_datasets(loader="nuname")
        with pytest.warns(PluginWarning, match="registered as 'nuname'"):
            assert "nuname/thing-v0" not in dh.list_datasets()
    finally:
        _unregister("nuname/thing-v0")


def test_a_missing_module_inside_an_installed_plugin_is_named(plugin_dir):
    tmp_path, extra = plugin_dir
    _register(
        extra,
        tmp_path,
        "numissing",
        "nu_plugin_missing",
        "import nu_no_such_module_xyz\n" + GOOD.format(name="numissing"),
    )
    try:
        with pytest.raises(MissingDependency, match=r"needs the module 'nu_no_such_module_xyz'"):
            plugins.get_loader("numissing")
    finally:
        _unregister("numissing/thing-v0")


def test_list_never_touches_the_network(monkeypatch):
    calls = []

    def no_dns(host, *args, **kwargs):
        calls.append(host)
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    from datasets_hub.cli import main

    started = time.perf_counter()
    assert main(["list"]) == 0
    assert calls == [] and time.perf_counter() - started < 30


def test_refresh_with_a_dead_network_gives_up_quietly(monkeypatch, capsys):
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: (_ for _ in ()).throw(socket.gaierror(-3, "no DNS")))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    report = catalogue.refresh_remote_catalogues(timeout=2.0)
    assert all(v.startswith("skipped") or v.endswith("ids") for v in report.values())
    assert "Retrying" not in capsys.readouterr().err


def test_cached_remote_catalogue_is_listed_offline(isolated_cache, monkeypatch):
    from datasets_hub.loaders.minari.loader import MinariLoader

    monkeypatch.setattr(
        MinariLoader, "remote_catalogue", lambda self: {"minari/ns/remote-thing-v0": {"description": "x"}}
    )
    monkeypatch.delenv("DATASETS_HUB_OFFLINE", raising=False)
    assert catalogue.refresh_remote_catalogues(["minari"]) == {"minari": "1 ids"}
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")
    assert "minari/ns/remote-thing-v0" in dh.list_datasets(loader="minari")


def test_a_dns_failure_fails_at_once_with_a_hint(monkeypatch, tmp_path):
    from datasets_hub.downloads import fetch as downloader
    from datasets_hub.loader import Resource

    calls = []

    def no_dns(host, *args, **kwargs):
        calls.append(host)
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    monkeypatch.setattr(downloader, "BACKOFF_BASE", 1.0)  # a retry would be seen in the time taken
    resource = Resource(name="x.hdf5", urls=("http://data.example.invalid/x.hdf5",))
    started = time.perf_counter()
    with pytest.raises(DownloadError, match=r"cannot resolve.*DATASETS_HUB_OFFLINE=1.*DATASETS_HUB_ENDPOINT_"):
        downloader.fetch(resource, tmp_path / "x.hdf5", loader="d4rl")
    assert time.perf_counter() - started < 5 and len(calls) == 1


@pytest.mark.parametrize(
    "search, dataset_id, hit",
    [
        ("hopper", "d4rl/hopper-medium-v2", True),
        ("hopper", "atari/ChopperCommand/1", False),
        ("chopper", "atari/ChopperCommand/1", True),
        ("hopper-med", "d4rl/hopper-medium-v2", True),
        ("medium hopper", "d4rl/hopper-medium-v2", True),
        ("opper", "d4rl/hopper-medium-v2", False),
    ],
)
def test_search_matches_words_and_prefixes_not_substrings(search, dataset_id, hit):
    assert matches(search, dataset_id) is hit
