"""What listing needs from each loader plugin, known without importing it (docs/design/plugins.md).

Importing a loader imports torch, tensordict and its upstream helpers (seconds); ``datasets-hub list``
and ``cache ls`` need only a few of its facts: ``format_version``, ``downloads`` and the ids its
``catalogue()`` adds. They are asked once, by importing the plugin, and kept as JSON in
``<cache>/catalogue/plugins/<name>.json`` together with what they were derived from:

- the entry point (``module:Class``) and its distribution's version;
- the size and modification time of the plugin's source: the ``.py`` files of the folder of its
  module when that folder is a package, else the module file alone;
- for the catalogue: the values of the variables of ``Loader.catalogue_env`` and the state of the
  paths ``Loader.catalogue_files()`` named (a local store's folders).

A record is used only while every one of those is unchanged; otherwise the plugin is imported and
asked again. A plugin that fails to import is never recorded (its error is raised each time). In a
process that has imported the plugin already, its live class is asked (nothing to save).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

from datasets_hub.errors import HubError

RECORD_VERSION = 1


@dataclass(frozen=True)
class LoaderFacts:
    """The class attributes of a loader that listing shows, and its ``catalogue()`` answer."""

    name: str
    format_version: int
    downloads: bool
    catalogue: dict[str, dict[str, Any]]


def _entry_point(name: str, eps: Mapping[str, EntryPoint] | None) -> EntryPoint:
    from datasets_hub.plugins import entry_point

    if eps is not None and name in eps:
        return eps[name]
    return entry_point(name)  # reads them (~30 ms with a hundred distributions installed), or says what is wrong


def _path_state(path: str) -> list[int] | None:
    """``[mtime_ns, size]`` of ``path``, None when it does not exist (or cannot be looked at)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return [stat.st_mtime_ns, stat.st_size]


def source_files(module_name: str) -> list[str]:
    """The files whose change makes a plugin's recorded facts stale (see the module docstring)."""
    try:
        spec = importlib.util.find_spec(module_name)  # imports the parent packages, not the module
    except (ImportError, ValueError):
        return []
    origin = getattr(spec, "origin", None) if spec is not None else None
    if not origin or not os.path.isfile(origin):
        return []
    folder = Path(origin).parent
    if not (folder / "__init__.py").is_file():
        return [origin]
    return sorted(str(p) for p in folder.glob("*.py"))


def code_stamp(name: str, eps: Mapping[str, EntryPoint] | None = None) -> dict[str, Any]:
    """The entry point, its distribution's version and its source files' state (no plugin import);
    ``eps``: the entry points when the caller has read them already."""
    ep = _entry_point(name, eps)
    dist = getattr(ep, "dist", None)
    module_name = ep.value.split(":", 1)[0].strip()
    return {
        "record": RECORD_VERSION,
        "entry_point": ep.value,
        "distribution": [dist.name, dist.version] if dist is not None else None,
        "sources": {path: _path_state(path) for path in source_files(module_name)},
    }


def record_folder() -> Path:
    """Where the facts are kept (with other records keyed by a plugin's :func:`code_stamp`)."""
    from datasets_hub.env import cache_root

    return cache_root() / "catalogue" / "plugins"


def _record_path(name: str) -> Path:
    return record_folder() / f"{name}.json"


def _read_record(name: str) -> dict[str, Any] | None:
    try:
        with open(_record_path(name)) as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _catalogue_current(record: dict[str, Any]) -> bool:
    inputs = record.get("catalogue_inputs")
    if not isinstance(inputs, dict) or not isinstance(record.get("catalogue"), dict):
        return False
    env = inputs.get("env") or {}
    files = inputs.get("files") or {}
    return all(os.environ.get(k) == v for k, v in env.items()) and all(
        _path_state(path) == state for path, state in files.items()
    )


def _ask(name: str, stamp: dict[str, Any]) -> dict[str, Any]:
    """Import the plugin and record its facts; the catalogue's errors propagate (nothing recorded)."""
    from datasets_hub.files import write_json_atomic
    from datasets_hub.plugins import get_loader

    # ``stamp`` was taken before the import: a file edited meanwhile makes the record stale, not wrong  # before the import: a file edited meanwhile makes the record stale, not wrong
    loader = get_loader(name)
    env = {k: os.environ.get(k) for k in type(loader).catalogue_env}
    files = {str(p): _path_state(str(p)) for p in loader.catalogue_files()}
    record = {
        "stamp": stamp,
        "format_version": int(loader.format_version),
        "downloads": bool(loader.downloads),
        "catalogue": loader.catalogue() or {},
        "catalogue_inputs": {"env": env, "files": files},
    }
    try:
        path = _record_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, record, indent=None, sort_keys=False, mode=0o600)
    except (OSError, TypeError, ValueError, HubError):
        pass  # a read-only cache, or a catalogue that is not JSON: asked again next time, only slower
    return record


def loader_facts(name: str, eps: Mapping[str, EntryPoint] | None = None) -> LoaderFacts:
    """The facts of the installed loader ``name``: recorded ones when current, else asked now
    (``eps``: the entry points, when the caller has read them already).

    Raises what :func:`datasets_hub.plugins.get_loader` raises when the plugin must be imported
    and cannot be, and whatever its ``catalogue()`` raises.
    """
    ep = _entry_point(name, eps)
    if ep.value.split(":", 1)[0].strip() in sys.modules:  # imported already: its live class is the truth
        from datasets_hub.plugins import get_loader

        loader = get_loader(name)
        return LoaderFacts(name, int(loader.format_version), bool(loader.downloads), loader.catalogue() or {})
    stamp = code_stamp(name, eps)
    record = _read_record(name)
    if record is None or record.get("stamp") != stamp or not _catalogue_current(record):
        record = _ask(name, stamp)
    return LoaderFacts(
        name=name,
        format_version=int(record["format_version"]),
        downloads=bool(record["downloads"]),
        catalogue=dict(record["catalogue"]),
    )
