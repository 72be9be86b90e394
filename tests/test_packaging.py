"""The distribution ships every package of the tree: a wheel built from pyproject.toml must hold each
folder of ``datasets_hub/`` and ``loaders/`` that has an ``__init__.py`` (an editable install hides a
missing one, since it maps whole folders)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def listed_packages() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^\[tool\.setuptools\]\s*$(.*?)^\[", text, flags=re.M | re.S)
    assert block, "pyproject.toml has no [tool.setuptools] table"
    listed = re.search(r"^packages\s*=\s*\[(.*?)\]", block.group(1), flags=re.M | re.S)
    assert listed, "[tool.setuptools] lists no packages"
    return set(re.findall(r'"([^"]+)"', listed.group(1)))


def packages_in_tree() -> set[str]:
    found = set()
    for top, name in ((ROOT / "datasets_hub", "datasets_hub"), (ROOT / "loaders", "datasets_hub.loaders")):
        for init in top.rglob("__init__.py"):
            parts = init.parent.relative_to(top).parts
            found.add(".".join((name, *parts)))
    return found


def test_every_package_folder_is_listed_for_the_wheel():
    missing = packages_in_tree() - listed_packages()
    assert not missing, f"add these to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"


def test_every_listed_package_exists():
    stale = listed_packages() - packages_in_tree()
    assert not stale, f"pyproject.toml lists packages that have no folder with an __init__.py: {sorted(stale)}"


def test_no_module_of_the_package_shadows_a_public_name():
    """``dh.download`` is a function: a submodule ``datasets_hub/download/`` would replace it on the package
    the moment anything imports the submodule. So no top-level module or package may take an exported name."""
    import datasets_hub

    names = {path.stem for path in (ROOT / "datasets_hub").glob("*.py")}
    names |= {path.parent.name for path in (ROOT / "datasets_hub").glob("*/__init__.py")}
    assert not names & set(datasets_hub.__all__), sorted(names & set(datasets_hub.__all__))
