"""Plugin facts recorded for listing (datasets_hub/plugin_facts.py): current while nothing they came from changes."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from datasets_hub import plugin_facts


@pytest.fixture(autouse=True)
def not_imported(monkeypatch):
    """As in a fresh `datasets-hub list`: the plugins' modules are not imported (so records are used)."""
    for name in [m for m in sys.modules if m.startswith("datasets_hub.loaders.")]:
        monkeypatch.delitem(sys.modules, name)


def _add_minari_dataset(store, minari_id: str) -> None:
    folder = store / minari_id / "data"
    folder.mkdir(parents=True)
    (folder / "metadata.json").write_text(json.dumps({"dataset_id": minari_id, "description": f"local {minari_id}"}))


def test_facts_are_recorded_and_match_the_loader():
    from datasets_hub.plugins import get_loader

    facts = plugin_facts.loader_facts("gym")
    loader = get_loader("gym")
    assert (facts.format_version, facts.downloads) == (loader.format_version, loader.downloads)
    record = plugin_facts._record_path("gym")
    assert record.is_file()
    assert json.loads(record.read_text())["stamp"] == plugin_facts.code_stamp("gym")
    assert plugin_facts.loader_facts("gym") == facts  # from the record


def test_a_plugin_imported_already_answers_with_its_live_class(monkeypatch):
    from datasets_hub.plugins import get_loader

    recorded = plugin_facts.loader_facts("gym")
    loader_class = type(get_loader("gym"))
    importlib.import_module(loader_class.__module__)  # imported in this process (a new module object)
    monkeypatch.setattr(loader_class, "format_version", recorded.format_version + 1)
    assert plugin_facts.loader_facts("gym").format_version == recorded.format_version + 1


def test_a_recorded_catalogue_follows_the_files_it_read(tmp_path, monkeypatch):
    """Minari's catalogue() lists the local store: adding a dataset there (even nested) is seen."""
    store = tmp_path / "store"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(store))
    assert plugin_facts.loader_facts("minari").catalogue == {}
    _add_minari_dataset(store, "ns/first-v0")  # the store did not exist when the record was made
    assert list(plugin_facts.loader_facts("minari").catalogue) == ["minari/ns/first-v0"]
    _add_minari_dataset(store, "ns/sub/second-v0")  # nested under an existing folder
    assert sorted(plugin_facts.loader_facts("minari").catalogue) == ["minari/ns/first-v0", "minari/ns/sub/second-v0"]


def test_a_recorded_catalogue_follows_its_environment(tmp_path, monkeypatch):
    one, two = tmp_path / "one", tmp_path / "two"
    _add_minari_dataset(one, "a/x-v0")
    _add_minari_dataset(two, "b/y-v0")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(one))
    assert list(plugin_facts.loader_facts("minari").catalogue) == ["minari/a/x-v0"]
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(two))
    assert list(plugin_facts.loader_facts("minari").catalogue) == ["minari/b/y-v0"]
