"""Loader plugins: real entry points, lazy imports, helpful errors, and the shipped wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from datasets_hub import plugins
from datasets_hub.errors import MissingDependency, UnknownLoader
from datasets_hub.loader import Loader

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, env: dict | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_importing_the_package_imports_no_loader_or_heavy_library():
    out = _run("""
        import sys, datasets_hub
        heavy = ["h5py", "minari", "huggingface_hub", "requests", "tqdm", "gymnasium", "yaml", "loaders"]
        print([m for m in heavy if m in sys.modules])
    """)
    assert out.strip() == "[]"


def test_a_third_party_loader_package_is_found_through_its_entry_point(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "hub_toy").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(
        textwrap.dedent("""
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "hub-toy-loader"
        version = "0.0.1"
        [project.entry-points."datasets_hub.loaders"]
        toy = "hub_toy:ToyLoader"
    """)
    )
    (pkg / "hub_toy" / "__init__.py").write_text(
        textwrap.dedent("""
        from datasets_hub.testing import FakeLoader

        class ToyLoader(FakeLoader):
            name = "toy"

            def catalogue(self):
                return {"toy/three-episodes": {"params": {"lengths": [4, 2, 3]}, "description": "a toy"}}
    """)
    )
    site = tmp_path / "site"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(pkg),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    out = _run(
        """
        import datasets_hub as dh
        print(dh.list_datasets(loader="toy"))
        rb = dh.load("toy/three-episodes", batch_size=4)
        print(len(rb), sorted(rb[:]["episode"].unique().tolist()))
    """,
        env={"PYTHONPATH": str(site)},
    )
    assert out.splitlines() == ["['toy/three-episodes']", "9 [0, 1, 2]"]


def test_unknown_loader_suggests_installed_names():
    with pytest.raises(UnknownLoader, match="Did you mean 'gym'"):
        plugins.get_loader("gim")


def test_missing_requirement_gives_the_pip_line():
    class NeedsSomething(Loader):
        name = "needs"
        requires = ("surely_not_installed_module_xyz",)
        install_hint = "pip install surely-not-installed"

    with pytest.raises(MissingDependency, match="pip install surely-not-installed"):
        plugins.check_requirements(NeedsSomething())


def _ignore_build_outputs(folder: str, names: list[str]) -> set[str]:
    """What a copy of the tree leaves out: venvs, git, caches, and setuptools' own top-level build/
    (datasets_hub/build/ is a package of ours and is copied)."""
    skipped = set(shutil.ignore_patterns(".venv*", ".git", "*.egg-info", "__pycache__", "results")(folder, names))
    if Path(folder) == ROOT and "build" in names:
        skipped.add("build")
    return skipped


def test_the_wheel_ships_registry_yaml(tmp_path):
    # build from a copy: setuptools writes build/ and *.egg-info into the tree it builds
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=_ignore_build_outputs,
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    wheel = next(tmp_path.glob("datasets_hub-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "datasets_hub/registry.yaml" in names
        assert "gym/cartpole-random-v0" in zf.read("datasets_hub/registry.yaml").decode()
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "gym = datasets_hub.loaders.gym:GymLoader" in zf.read(entry_points).decode()
        # one top-level name only: the repository's loaders/ folder is shipped inside datasets_hub
        assert "datasets_hub/loaders/gym/loader.py" in names
        assert {n.split("/")[0] for n in names if not n.startswith("datasets_hub-")} == {"datasets_hub"}
