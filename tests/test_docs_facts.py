"""Facts the docs state that the code decides: they must agree (import paths, defaults, counts)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _pages() -> dict[Path, str]:
    return {p: p.read_text() for p in DOCS.rglob("*.md")}


def test_documented_imports_work_in_an_installed_package():
    """`loaders` is the repository's folder; installed, it is `datasets_hub.loaders`."""
    for path, text in _pages().items():
        assert not re.search(r"from loaders[.\s]|`loaders\.", text), f"{path}: imports the repository's loaders/ folder"
        code = "\n".join(re.findall(r"```python\n(.*?)```", text, flags=re.S))  # prose may name a placeholder
        for module, name in re.findall(r"from (datasets_hub[\w.]*) import (\w+)", code):
            assert hasattr(importlib.import_module(module), name), f"{path}: from {module} import {name}"
        for module, name in re.findall(r"`(datasets_hub\.loaders\.\w+)\.(\w+)\(", text):
            assert hasattr(importlib.import_module(module), name), f"{path}: {module}.{name}"


def test_check_loader_runs_as_many_times_as_the_docs_say():
    from datasets_hub.testing import check_loader

    runs = inspect.signature(check_loader).parameters["runs"].default
    for page in ("plugins.md", "design/plugins.md"):
        text = (DOCS / page).read_text()
        said = re.findall(r"(?:run|converts the files) (\w+) times?", text)
        assert said and set(said) == {str(runs)}, (page, said)


def test_the_remote_guide_and_export_state_the_same_default_chunk_size(capsys):
    from datasets_hub.cli.main import build_parser, main
    from datasets_hub.remote.format import DEFAULT_CHUNK_BYTES

    kib = DEFAULT_CHUNK_BYTES >> 10
    assert f"about {kib} KiB uncompressed per chunk by default" in (DOCS / "guide/remote.md").read_text()
    assert build_parser().parse_args(["export", "gym/cartpole-random-v0", "out"]).chunk_mb is None  # export()'s default
    assert main(["export", "--help"]) == 0
    assert f"{kib} KiB" in " ".join(capsys.readouterr().out.split())


def test_the_goal_distance_minus_one_is_explained_where_it_is_shown():
    text = (DOCS / "guide/sampling.md").read_text()
    assert '("goal", "distance") == -1' in text and '"in_episode"' in text and '"kind"' in text
