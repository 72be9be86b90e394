"""What each ``datasets-hub`` command imports, in a fresh interpreter (docs/guide/cli.md, "Speed").

``list``, ``cache ls``, ``--help`` and ``--version`` import neither torch, tensordict nor any loader
plugin once the plugins' facts are recorded (the first ``list`` of a new plugin version records them);
``info`` and ``verify`` import the one loader of their id and no other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fixtures.cli import CARTPOLE, SMALL

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
    """A cache holding one small build (so that listings have a build and its loader to look at)."""
    cache = tmp_path_factory.mktemp("cli-imports-cache")
    env = {**os.environ, "DATASETS_HUB_CACHE": str(cache), "DATASETS_HUB_OFFLINE": "1"}
    subprocess.run(
        [sys.executable, "-m", "datasets_hub.cli", "download", CARTPOLE, *SMALL],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return cache


@pytest.mark.parametrize("argv", [["list"], ["list", "--json"], ["cache", "ls"], ["--help"], ["--version"]])
def test_listing_commands_import_no_torch_and_no_loader(a_build, monkeypatch, argv):
    monkeypatch.setenv("DATASETS_HUB_CACHE", str(a_build))
    imports_of("list")  # records the plugins' facts (a new plugin version is imported once)
    code, heavy = imports_of(*argv)
    assert code == 0
    assert heavy == []


def test_a_changed_plugin_is_asked_again(a_build, monkeypatch, tmp_path):
    """The recorded facts belong to one version of the plugin's code: a changed source file is re-read."""
    monkeypatch.setenv("DATASETS_HUB_CACHE", str(a_build))
    imports_of("list")
    records = a_build / "catalogue" / "plugins"
    gym_record = json.loads((records / "gym.json").read_text())
    gym_record["stamp"]["sources"] = {path: [0, 0] for path in gym_record["stamp"]["sources"]}
    (records / "gym.json").write_text(json.dumps(gym_record))
    _code, heavy = imports_of("list")
    assert "datasets_hub.loaders.gym" in heavy
    assert "datasets_hub.loaders.d4rl" not in heavy  # only the changed plugin
    _code, heavy = imports_of("list")
    assert heavy == []


@pytest.mark.parametrize("command", ["info", "verify"])
def test_commands_on_one_id_import_only_its_loader(a_build, monkeypatch, command):
    monkeypatch.setenv("DATASETS_HUB_CACHE", str(a_build))
    code, heavy = imports_of(command, CARTPOLE, *SMALL)
    assert code == 0
    loaders = {m.split(".")[2] for m in heavy if m.startswith("datasets_hub.loaders.")}
    assert loaders == {"gym"}
