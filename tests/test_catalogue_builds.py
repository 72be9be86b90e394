"""The catalogue build's name, recorded so that `datasets-hub list` needs no loader (datasets_hub/cache/catalogue_builds.py)."""

from __future__ import annotations

import json

from datasets_hub.cache.catalogue_builds import catalogue_build_name
from datasets_hub.plugin_facts import record_folder


def test_the_catalogue_build_name_is_the_one_load_uses():
    from datasets_hub.cache.maintenance import catalogue_build

    name = catalogue_build_name("gym/cartpole-random-v0")
    assert name == catalogue_build("gym/cartpole-random-v0")[2].name
    record = record_folder() / "gym-builds.json"
    assert [e["build"] for e in json.loads(record.read_text()).values()] == [name]


def test_a_mirror_setting_is_another_record(monkeypatch):
    """Resources (so fingerprints) can depend on DATASETS_HUB_ENDPOINT_*: the record is per setting."""
    catalogue_build_name("gym/cartpole-random-v0")
    monkeypatch.setenv("DATASETS_HUB_ENDPOINT_GYM", "http://127.0.0.1:9/mirror")
    catalogue_build_name("gym/cartpole-random-v0")
    assert len(json.loads((record_folder() / "gym-builds.json").read_text())) == 2
