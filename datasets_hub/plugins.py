"""Loader plugins, found through the ``datasets_hub.loaders`` entry-point group (docs/design/plugins.md).

Entry points are read on first use only; a loader module is imported only when one of its
datasets is asked for, so ``import datasets_hub`` never pays for a plugin or its upstream library.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from functools import cache, lru_cache
from importlib.metadata import EntryPoint, entry_points

from datasets_hub.errors import MissingDependency, PluginError, UnknownLoader, did_you_mean
from datasets_hub.loader import Loader

GROUP = "datasets_hub.loaders"


def _entry_points() -> dict[str, EntryPoint]:
    return dict(_read_entry_points(_installation_state()))


def _installation_state() -> tuple[tuple[str, int | None], ...]:
    """Each ``sys.path`` folder with its modification time: installing, upgrading or removing a
    distribution adds or renames its ``*.dist-info`` folder there, which changes the time."""

    def mtime(path: str) -> int | None:
        try:
            return os.stat(path or ".").st_mtime_ns
        except OSError:
            return None

    return tuple((path, mtime(path)) for path in sys.path)


@lru_cache(maxsize=4)
def _read_entry_points(state: tuple[tuple[str, int | None], ...]) -> tuple[tuple[str, EntryPoint], ...]:
    """The group's entry points, read once per installation state (reading them scans every
    installed distribution: ~80 ms, which one ``datasets-hub`` command would otherwise pay several times)."""
    return tuple((ep.name, ep) for ep in entry_points(group=GROUP))


def entry_point_map() -> dict[str, EntryPoint]:
    """Every installed loader's entry point by name, read now (nothing is imported)."""
    return _entry_points()


def loader_names() -> list[str]:
    """Names of the installed loader plugins (no plugin is imported)."""
    return sorted(_entry_points())


def entry_point_names_of(cls: type) -> list[str]:
    """Names of the entry points that point at ``cls`` (by ``module:qualname``; nothing is imported)."""
    target = f"{cls.__module__}:{cls.__qualname__}"
    return sorted(name for name, ep in _entry_points().items() if ep.value.replace(" ", "") == target)


def get_loader(name: str) -> Loader:
    """The loader plugin ``name``, imported now; errors say which package to install."""
    return _load(name)


def entry_point(name: str) -> EntryPoint:
    """The entry point of the loader ``name`` (nothing is imported); errors name the installed ones."""
    eps = _entry_points()
    if not eps:
        raise PluginError(
            "no datasets_hub loader plugins are installed: the package metadata is missing. "
            "Install the project (`pip install -e .` from the repository, or `pip install datasets-hub`)."
        )
    ep = eps.get(name)
    if ep is None:
        raise UnknownLoader(
            f"no loader named {name!r} is installed (installed: {', '.join(sorted(eps))})." + did_you_mean(name, eps)
        )
    return ep


@cache
def _load(name: str) -> Loader:
    ep = entry_point(name)
    try:
        cls = ep.load()
    except ImportError as exc:
        raise MissingDependency(_import_failure(name, ep, exc)) from exc
    except Exception as exc:  # a broken plugin (SyntaxError, any error at import) is reported, not fatal
        where = f"{exc.filename}:{exc.lineno}: " if isinstance(exc, SyntaxError) and exc.filename else ""
        raise PluginError(
            f"the loader plugin {name!r} ({ep.value}{_dist(ep)}) failed to import: {where}{type(exc).__name__}: "
            f"{exc}. Its datasets are unavailable until the plugin is fixed or uninstalled"
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, Loader)):
        raise PluginError(f"entry point {name!r} = {ep.value!r} is not a datasets_hub.Loader subclass")
    if cls.name != name:
        raise PluginError(
            f"loader class {cls.__qualname__} declares name {cls.name!r} but is registered as "
            f"{name!r}: the entry-point name and Loader.name must be equal"
        )
    return cls()


def _dist(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f", from the distribution {dist.name!r}" if dist is not None else ""


def _import_failure(name: str, ep: EntryPoint, exc: ImportError) -> str:
    """Name the module that is missing; pip-installing the plugin itself fixes nothing when it is installed."""
    module_name = ep.value.split(":", 1)[0]
    missing = getattr(exc, "name", None)
    if missing and missing != module_name and not module_name.startswith(missing + "."):
        return (
            f"the loader {name!r} ({ep.value}{_dist(ep)}) is installed but cannot be imported: it needs the module "
            f"{missing!r}, which is missing ({exc}). Fix: install the package that provides {missing!r} "
            f"(often `pip install {missing.split('.')[0]}`)"
        )
    dist = getattr(ep, "dist", None)
    hint = f"pip install '{dist.name}'" if dist is not None else "reinstall the plugin's package"
    return f"the loader {name!r} ({ep.value}) cannot be imported: {exc}. Fix: {hint}"


def check_requirements(loader: Loader) -> None:
    """Raise ``MissingDependency`` with the loader's pip line if an import it needs is missing."""
    missing = [mod for mod in loader.requires if not _importable(mod)]
    if missing:
        hint = loader.install_hint or f"pip install {' '.join(missing)}"
        raise MissingDependency(
            f"the {loader.name!r} loader needs {', '.join(missing)}, which is not installed. Fix: {hint}"
        )


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing ("google.protobuf")
        return False


def clear_cache() -> None:
    """Forget imported plugins (after installing a new one in the same process)."""
    _load.cache_clear()
