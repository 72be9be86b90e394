"""The documentation's references, checked: measured figures live on results pages, and no page names a module
that does not exist (docs/results/index.md, docs/design/architecture.md).

- Every benchmark script in ``benchmarks/`` is named, with its path, by a page of ``docs/results/`` (helpers that
  a script imports are named beside it), and every results page is in the mkdocs nav.
- Every mkdocstrings directive (``::: datasets_hub.x.Y``) of ``docs/`` names an importable module or an attribute
  of one, and every ``datasets_hub/...py`` or ``loaders/...py`` path a page names exists.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"


def _results_text() -> str:
    """The results pages' text, the overview left out (it lists the scripts; a page must hold the figures)."""
    return "\n".join(p.read_text() for p in sorted(RESULTS.glob("*.md")) if p.name != "index.md")


def _benchmark_scripts() -> list[str]:
    return sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))


def test_every_benchmark_script_has_a_results_page():
    text = _results_text()
    missing = [name for name in _benchmark_scripts() if f"benchmarks/{name}" not in text]
    assert not missing, f"benchmark scripts no page of docs/results/ names (add a results page): {missing}"


def test_every_results_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [p.name for p in sorted(RESULTS.glob("*.md")) if f"results/{p.name}" not in nav]
    assert not missing, f"results pages missing from mkdocs.yml's nav: {missing}"


def _pages() -> list[Path]:
    return [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_the_checks_see_a_dead_reference():
    """The checkers themselves: a moved module does not resolve, a present one does."""
    assert _resolves("datasets_hub.build.reader.open_build")
    assert not _resolves("datasets_hub.build_format.open_build")
    assert not _resolves("datasets_hub.build.reader.no_such_function")


@pytest.mark.parametrize("page", [p for p in _pages() if ":::" in p.read_text()], ids=lambda p: p.name)
def test_every_api_directive_names_something_importable(page):
    names = re.findall(r"^:::\s*([\w.]+)", page.read_text(), flags=re.MULTILINE)
    dead = [name for name in names if not _resolves(name)]
    assert not dead, f"{page.relative_to(ROOT)}: ::: directives naming nothing importable: {dead}"


def test_every_module_path_a_page_names_exists():
    dead = []
    for page in _pages():
        for path in set(re.findall(r"\b((?:datasets_hub|loaders)/[\w/]+\.py)\b", page.read_text())):
            if not (ROOT / path).exists():
                dead.append(f"{page.relative_to(ROOT)}: {path}")
    assert not dead, "pages naming files that do not exist:\n" + "\n".join(sorted(dead))
