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


def _make_rules() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The Makefile's ``{target: prerequisites}`` and ``{target: recipe lines}``, variables expanded."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    variables = dict(re.findall(r"^([A-Z_]+) :?= (.*)$", text, flags=re.M))

    def expand(value: str) -> str:
        for _ in range(5):
            value = re.sub(r"\$\(([A-Z_]+)\)", lambda m: variables.get(m.group(1), m.group(0)), value)
        return value

    prerequisites: dict[str, list[str]] = {}
    recipes: dict[str, list[str]] = {}
    target = None
    for line in text.splitlines():
        rule = re.match(r"^([^\s#:=][^:=]*):(?!=)(.*)$", line)
        if rule and not line.startswith("\t"):
            target = expand(rule.group(1).strip())
            prerequisites[target] = [expand(word) for word in rule.group(2).split()]
            recipes[target] = []
        elif line.startswith("\t") and target is not None:
            recipes[target].append(expand(line.strip()))
    return prerequisites, recipes


def test_make_demo_installs_only_what_the_demo_needs():
    """`make demo` on a fresh machine: no test or remote extras (moto, boto3, ...); `make test` adds them."""
    prerequisites, recipes = _make_rules()

    def closure(target: str) -> list[str]:
        seen, todo = [], [target]
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.append(name)
                todo += prerequisites.get(name, [])
        return [line for name in seen for line in recipes.get(name, [])]

    demo_installs = [line for line in closure("demo") if "pip install" in line]
    assert demo_installs and not [line for line in demo_installs if "[test" in line or "remote" in line]
    assert [line for line in closure("test") if "pip install" in line and "test,remote" in line]


def test_every_install_keeps_the_constraints_file():
    """constraints.txt pins torch to the CPU wheel: an install without it could pull a CUDA build."""
    _prerequisites, recipes = _make_rules()
    for target, lines in recipes.items():
        for line in lines:
            if "pip install" in line and "--upgrade pip" not in line and "--no-deps" not in line:
                assert "--constraint constraints.txt" in line, (target, line)


def test_no_module_of_the_package_shadows_a_public_name():
    """``dh.download`` is a function: a submodule ``datasets_hub/download/`` would replace it on the package
    the moment anything imports the submodule. So no top-level module or package may take an exported name."""
    import datasets_hub

    names = {path.stem for path in (ROOT / "datasets_hub").glob("*.py")}
    names |= {path.parent.name for path in (ROOT / "datasets_hub").glob("*/__init__.py")}
    assert not names & set(datasets_hub.__all__), sorted(names & set(datasets_hub.__all__))
