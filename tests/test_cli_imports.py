"""What each ``datasets-hub`` command imports, in a fresh interpreter (docs/guide/cli.md, "Speed").

``list``, ``cache ls``, ``--help``, ``--version``, and ``info`` and ``verify`` of an id with the
catalogue's params import neither torch, tensordict nor any loader plugin once the facts they need
are recorded (the first ``list`` of a new plugin version, the first ``info`` of a new build record
them); ``info`` and ``verify`` with ``--param`` overrides import the one loader of their id and no other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fixtures.cli import CARTPOLE, SMALL

TINY = "gym/cli-imports-tiny-v0"  # a catalogue entry of its own (DATASETS_HUB_REGISTRY): catalogue params, small

PROBE = """
import json, sys
from datasets_hub.cli.main import main
code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "tensordict") or m.startswith("datasets_hub.loaders."))
print("\\n@@" + json.dumps({"code": code, "heavy": heavy}))
"""


def imports_of(*argv: str) -> tuple[int, list[str]]:
    """Run the CLI with ``argv`` in a new interpreter; its exit code and the heavy modules it imported."""
    env = {**os.environ, "DATASETS_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    report = json.loads(proc.stdout.rsplit("\n@@", 1)[1])
    return report["code"], report["heavy"]


@pytest.fixture(scope="module")
def a_build(tmp_path_factory):
    """A cache holding two small builds, one with the catalogue's params and one with overrides."""
    cache = tmp_path_factory.mktemp("cli-imports-cache")
    registry = cache.parent / "cli-imports-registry.yaml"
    registry.write_text(f"{TINY}:\n  loader: gym\n  params: {{env: CartPole-v1, steps: 200, seed: 3}}\n")
    env = {
        **os.environ,
        "DATASETS_HUB_CACHE": str(cache),
        "DATASETS_HUB_OFFLINE": "1",
        "DATASETS_HUB_REGISTRY": str(registry),
    }
    for argv in (["download", CARTPOLE, *SMALL], ["download", TINY]):
        subprocess.run(
            [sys.executable, "-m", "datasets_hub.cli", *argv], env=env, check=True, capture_output=True, timeout=300
        )
    return cache, registry


@pytest.fixture
def cache_env(a_build, monkeypatch):
    cache, registry = a_build
    monkeypatch.setenv("DATASETS_HUB_CACHE", str(cache))
    monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(registry))
    return cache


@pytest.mark.parametrize(
    "argv",
    [["list"], ["list", "--json"], ["cache", "ls"], ["--help"], ["--version"], ["info", TINY], ["info", TINY, "--json"],
     ["verify", TINY]],
)  # fmt: skip
def test_listing_commands_import_no_torch_and_no_loader(cache_env, argv):
    imports_of("list")  # records the plugins' facts (a new plugin version is imported once)
    imports_of("info", TINY)  # records the build's facts (its sample keys are read with torch once)
    code, heavy = imports_of(*argv)
    assert code == 0
    assert heavy == []


def test_info_from_recorded_facts_is_the_card_info_gives(cache_env):
    """The torch-free card and datasets_hub.info's are the same card (built and not built)."""
    import datasets_hub as dh
    from datasets_hub.cache.catalogue_builds import recorded_info

    dh.info(TINY)  # records the sample keys
    assert recorded_info(TINY) == dh.info(TINY)
    assert recorded_info(CARTPOLE) == dh.info(CARTPOLE)  # not built with the catalogue's params


def test_a_changed_plugin_is_asked_again(cache_env):
    """The recorded facts belong to one version of the plugin's code: a changed source file is re-read."""
    imports_of("list")
    records = cache_env / "catalogue" / "plugins"
    gym_record = json.loads((records / "gym.json").read_text())
    gym_record["stamp"]["sources"] = {path: [0, 0] for path in gym_record["stamp"]["sources"]}
    (records / "gym.json").write_text(json.dumps(gym_record))
    _code, heavy = imports_of("list")
    assert "datasets_hub.loaders.gym" in heavy
    assert "datasets_hub.loaders.d4rl" not in heavy  # only the changed plugin
    _code, heavy = imports_of("list")
    assert heavy == []


@pytest.mark.parametrize("command", ["info", "verify"])
def test_commands_on_one_id_with_overrides_import_only_its_loader(cache_env, command):
    code, heavy = imports_of(command, CARTPOLE, *SMALL)
    assert code == 0
    loaders = {m.split(".")[2] for m in heavy if m.startswith("datasets_hub.loaders.")}
    assert loaders == {"gym"}
