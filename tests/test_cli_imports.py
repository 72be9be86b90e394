"""What each ``datasets-hub`` command imports, in a fresh interpreter (docs/guide/cli.md, "Speed").

``list``, ``cache ls``, ``--help``, ``--version``, and ``info``, ``verify`` and ``rm`` of an id (with the
catalogue's params or ``--param`` overrides) import neither torch, tensordict nor any loader plugin once
the facts they need are recorded (the first ``list`` of a new plugin version, the first ``info`` of a new
build record them); before that, they import the one loader module of their id, and still no torch.
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


ONE_ID_COMMANDS = [["info"], ["info", "--json"], ["verify"], ["rm", "--dry-run"]]


@pytest.mark.parametrize("command", ONE_ID_COMMANDS)
def test_commands_on_one_id_with_overrides_import_no_torch(cache_env, command):
    """First with params nothing has recorded yet (only the id's loader module is imported, not
    torch), then again (nothing heavy at all)."""
    new_params = ["--param", "steps=250", "--param", f"seed={len(command) + len(command[0])}"]
    for params in (SMALL, new_params):
        expected = 1 if command == ["verify"] and params is new_params else 0  # verify: "not in the cache"
        code, heavy = imports_of(*command, CARTPOLE, *params)
        assert code == expected, (command, params)
        assert not [m for m in heavy if m.split(".")[0] in ("torch", "tensordict")], (command, params)
        assert {m.split(".")[2] for m in heavy if m.startswith("datasets_hub.loaders.")} <= {"gym"}
        code, heavy = imports_of(*command, CARTPOLE, *params)
        assert (code, heavy) == (expected, []), (command, params)


def test_refused_overrides_are_refused_without_torch(cache_env):
    """A parameter the loader refuses is its error, from the loader module alone (and never recorded)."""
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-c", PROBE, "info", CARTPOLE, "--param", "steps=-5"],
            capture_output=True, text=True, env={**os.environ, "DATASETS_HUB_OFFLINE": "1"}, timeout=300, check=False,
        )  # fmt: skip
        report = json.loads(proc.stdout.rsplit("\n@@", 1)[1])
        assert report["code"] == 2
        assert "'steps' must be a positive integer" in proc.stderr
        assert report["heavy"] == ["datasets_hub.loaders.gym", "datasets_hub.loaders.gym.loader"]


@pytest.mark.parametrize(
    "name", ["gym", "d4rl", "minari", "ogbench", "atari", "rlu_atari", "roboset", "robomimic", "tdmpc2", "calvin",
             "openx", "lerobot"],
)  # fmt: skip
def test_importing_a_builtin_loader_imports_no_torch(name):
    """Loader modules import torch inside the functions that convert, so naming a build does not."""
    code = (
        "import sys; from datasets_hub.plugins import get_loader; get_loader(sys.argv[1]); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'tensordict')))"
    )
    proc = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, timeout=300, check=True)
    assert proc.stdout.strip() == "[]"
