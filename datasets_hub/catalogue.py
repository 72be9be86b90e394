"""The catalogue: which dataset ids exist and what each is made from (docs/design/plugins.md).

Sources, merged in this order, clashes being errors that name both sources:
``registry.yaml`` shipped with the package, the files listed in ``DATASETS_HUB_REGISTRY``
(``os.pathsep``-separated, read at call time), :func:`register_dataset` calls, and each
loader's own ``catalogue()`` (consulted only for ids under its prefix, or when listing).
Catalogue files are data: parsed with ``yaml.safe_load``, they can name a loader but never make
the hub import or run anything that is not an installed entry point.
"""

from __future__ import annotations

import json
import re
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from datasets_hub import env
from datasets_hub.errors import (
    CatalogueError,
    HubError,
    InvalidParameter,
    MissingDependency,
    PluginError,
    UnknownDataset,
    did_you_mean,
)
from datasets_hub.files import write_json_atomic
from datasets_hub.loader import DatasetSpec, Loader, Resource
from datasets_hub.redact import redact_value

MAX_ID_LENGTH = 200
_LOADER_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# letters, digits and the punctuation upstream names use (RoboSet folders have parentheses)
_SEGMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-()+=,]*$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_ENTRY_KEYS_WITH_MEANING = {"loader", "params", "resources"}

_registered: dict[str, dict[str, Any]] = {}
_yaml_cache: dict[tuple[str, int, int], dict[str, Any]] = {}


def validate_id(dataset_id: Any) -> tuple[str, str]:
    """Split ``<loader>/<name>`` after checking it is safe to use as a cache path."""
    if not isinstance(dataset_id, str):
        raise InvalidParameter(
            f"a dataset id is a string like 'd4rl/hopper-medium-v2', not {type(dataset_id).__name__}"
        )
    if len(dataset_id) > MAX_ID_LENGTH:
        raise InvalidParameter(f"dataset id is {len(dataset_id)} characters long; the limit is {MAX_ID_LENGTH}")
    if _CONTROL_RE.search(dataset_id):
        raise InvalidParameter(f"dataset id {dataset_id!r} contains control characters")
    if "/" not in dataset_id:
        raise InvalidParameter(
            f"dataset id {dataset_id!r} has no loader prefix: ids look like '<loader>/<name>', "
            "e.g. 'gym/pendulum-random-v0' (see `datasets-hub list`)." + _prefixed_suggestion(dataset_id)
        )
    loader, name = dataset_id.split("/", 1)
    if not _LOADER_RE.match(loader):
        raise InvalidParameter(
            f"dataset id {dataset_id!r}: loader prefix {loader!r} must be lower-case letters, digits or _"
        )
    for segment in name.split("/"):
        if segment in ("", ".", "..") or not _SEGMENT_RE.match(segment):
            raise InvalidParameter(
                f"dataset id {dataset_id!r}: path segment {segment!r} is not allowed (use letters, "
                "digits and . _ - ( ) + = , ; no empty, '.' or '..' segments)"
            )
        from datasets_hub.cache.layout import reserved_name_problem

        problem = reserved_name_problem(segment)
        if problem:
            raise InvalidParameter(
                f"dataset id {dataset_id!r}: path segment {segment!r} is reserved: {problem}; choose another name"
            )
    return loader, name


def _prefixed_suggestion(name: str) -> str:
    """``" Did you mean 'd4rl/hopper-medium-v2'?"`` for a bare ``hopper-medium-v2``: the catalogue ids whose
    name is ``name`` (any case), else whose name is close to it; ``""`` when none is (or the catalogue is broken)."""
    try:
        known = list(_static_entries())
    except HubError:
        return ""
    exact = [i for i in known if i.split("/", 1)[1].lower() == name.lower()]
    if exact:
        return " Did you mean " + ", ".join(repr(i) for i in sorted(exact)) + "?"
    by_name: dict[str, list[str]] = {}
    for i in known:
        by_name.setdefault(i.split("/", 1)[1], []).append(i)
    import difflib

    ids = sorted(i for n in difflib.get_close_matches(name, list(by_name), n=3, cutoff=0.6) for i in by_name[n])
    return (" Did you mean " + ", ".join(repr(i) for i in ids) + "?") if ids else ""


def builtin_registry() -> Path:
    return Path(__file__).resolve().parent / "registry.yaml"


def registry_files() -> list[Path]:
    """``registry.yaml`` then every file named by ``DATASETS_HUB_REGISTRY``."""
    return [builtin_registry(), *env.registry_paths()]


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        stat = path.stat()
    except OSError as exc:
        raise CatalogueError(
            f"catalogue file {path} (from DATASETS_HUB_REGISTRY) cannot be read: {exc.strerror}"
        ) from exc
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _yaml_cache:
        _yaml_cache[key] = _parsed_copy(path, key)
    return _yaml_cache[key]


def _parsed_copy(path: Path, key: tuple[str, int, int]) -> dict[str, Any]:
    """Parse a catalogue file, through a JSON copy in the cache: importing and running the YAML
    parser costs ~70 ms, which a script that only opens a cached build should not pay."""
    from datasets_hub.cache.layout import cache_root, fingerprint

    copy = cache_root() / "catalogue" / f"{fingerprint(list(key))}.json"
    try:
        with open(copy) as fh:
            cached = json.load(fh)
        if path == builtin_registry() or not _holds_secrets(cached):
            return cached
        copy.unlink()  # a copy written before secrets were kept out of the cache
    except (OSError, ValueError):
        pass
    data = _parse_yaml(path)
    for dataset_id, entry in data.items():  # checked once per file version; the JSON copy is trusted
        _check_entry(dataset_id, entry, str(path))
    if path != builtin_registry() and _holds_secrets(data):
        # a password or a presigned URL's signature is never stored at rest: this file is parsed every time
        return data
    try:
        copy.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(copy, data, indent=None, sort_keys=False, mode=0o600)  # a cut copy is removed on failure
    except OSError:  # a read-only or full cache still works, only slower
        pass
    return data


def _holds_secrets(data: Any) -> bool:
    """Whether a parsed catalogue holds a URL credential or signature (what redaction would change)."""
    return redact_value(data) != data


def _parse_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        # the C loader is the same safe subset of YAML as yaml.safe_load, ~10x faster
        safe_loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        with open(path) as fh:
            data = yaml.load(fh, Loader=safe_loader)
    except yaml.YAMLError as exc:
        raise CatalogueError(f"catalogue file {path} is not valid YAML: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise CatalogueError(f"catalogue file {path} must map dataset ids to entries, found a {type(data).__name__}")
    return data


def _check_entry(dataset_id: str, entry: Any, source: str) -> dict[str, Any]:
    loader, _ = validate_id(dataset_id)
    if not isinstance(entry, Mapping):
        raise CatalogueError(f"{source}: entry {dataset_id!r} must be a mapping with at least 'loader'")
    entry = dict(entry)
    declared = entry.setdefault("loader", loader)
    if declared != loader:
        raise CatalogueError(f"{source}: entry {dataset_id!r} names loader {declared!r} but its prefix is {loader!r}")
    if not isinstance(entry.get("params") or {}, Mapping):
        raise CatalogueError(f"{source}: entry {dataset_id!r}: 'params' must be a mapping")
    resources = entry.get("resources") or []
    if not isinstance(resources, list):
        raise CatalogueError(f"{source}: entry {dataset_id!r}: 'resources' must be a list")
    try:
        [Resource.from_dict(r) for r in resources]
    except (ValueError, TypeError, AttributeError) as exc:
        raise CatalogueError(f"{source}: entry {dataset_id!r} has a malformed resource: {exc}") from exc
    return entry


def _static_entries() -> dict[str, tuple[dict[str, Any], str]]:
    merged: dict[str, tuple[dict[str, Any], str]] = {}
    sources = [(str(p), _read_yaml(p)) for p in registry_files()]
    sources.append(("register_dataset()", _registered))
    for source, entries in sources:
        for dataset_id, entry in entries.items():
            if dataset_id in merged:
                raise CatalogueError(
                    f"dataset id {dataset_id!r} is defined twice: in {merged[dataset_id][1]} and in "
                    f"{source}; rename one of them"
                )
            merged[dataset_id] = (entry, source)
    return merged


def _loader_entries(
    loader_name: str, *, recorded: Mapping[str, Any] | None = None
) -> dict[str, tuple[dict[str, Any], str]]:
    """The ids the loader's ``catalogue()`` adds; with ``recorded`` (the entry points): its answer as
    :mod:`datasets_hub.plugin_facts` keeps it (listing imports no plugin whose code has not changed)."""
    if recorded is not None:
        from datasets_hub.plugin_facts import loader_facts

        catalogue = loader_facts(loader_name, recorded).catalogue
    else:
        from datasets_hub.plugins import get_loader

        catalogue = get_loader(loader_name).catalogue() or {}
    source = f"the {loader_name!r} loader's catalogue()"
    out = {}
    for dataset_id, entry in catalogue.items():
        if not dataset_id.startswith(loader_name + "/"):
            raise CatalogueError(f"{source} lists {dataset_id!r}, outside its own prefix {loader_name + '/'!r}")
        out[dataset_id] = (_check_entry(dataset_id, entry, source), source)
    return out


def _open_entry(loader_name: str, dataset_id: str) -> dict[str, tuple[dict[str, Any], str]]:
    """The entry a loader makes for an id outside every catalogue (``Loader.entry_for``), if any."""
    from datasets_hub.plugins import get_loader

    entry = get_loader(loader_name).entry_for(dataset_id)
    if entry is None:
        return {}
    source = f"the {loader_name!r} loader's entry_for()"
    return {dataset_id: (_check_entry(dataset_id, entry, source), source)}


class PluginWarning(UserWarning):
    """A loader plugin is broken or its catalogue failed: its ids are hidden or incomplete."""


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, PluginWarning, stacklevel=3)


def all_entries(loaders: list[str] | None = None, *, strict: bool = False) -> dict[str, tuple[dict[str, Any], str]]:
    """Every known id with its entry and source; loader catalogues of ``loaders`` included, then the
    cached remote catalogues (never fetched here: :func:`refresh_remote_catalogues`).

    A plugin that fails to import (or is registered under another name) hides its ids, with one
    :class:`PluginWarning` per problem; ``strict=True`` raises its error instead (asking for one
    loader's ids must not answer ``[]`` because the loader is broken)."""
    from datasets_hub.plugins import entry_point_map

    merged = _static_entries()
    eps = entry_point_map()
    for name in loaders if loaders is not None else sorted(eps):
        try:
            extra = _loader_entries(name, recorded=eps)
        except (MissingDependency, PluginError) as exc:  # the plugin itself cannot be imported
            if strict:
                raise
            _hide(merged, name, exc)
            continue
        except HubError:
            continue  # e.g. a catalogue() that refused: its registry.yaml ids still list
        except Exception as exc:  # noqa: BLE001 - a plugin's catalogue() bug must not break listing
            _warn_once(
                f"the {name!r} loader's catalogue() failed ({type(exc).__name__}: {exc}); only its "
                "registry.yaml ids are listed"
            )
            continue
        for dataset_id, (entry, source) in extra.items():
            if dataset_id not in merged:  # the static catalogue wins over a loader's refresh
                merged[dataset_id] = (entry, source)
    for dataset_id, (entry, source) in _remote_entries(loaders).items():
        merged.setdefault(dataset_id, (entry, source))
    return merged


def _hide(merged: dict[str, Any], name: str, exc: Exception) -> None:
    hidden = [i for i in merged if i.split("/", 1)[0] == name]
    for dataset_id in hidden:
        del merged[dataset_id]
    _warn_once(f"{exc} ({len(hidden)} of its ids hidden)" if hidden else str(exc))


# -- remote catalogues: fetched on demand only, cached in <cache>/catalogue/remote-<loader>.json ------------
def _remote_file(loader: str) -> Path:
    from datasets_hub.cache.layout import cache_root

    return cache_root() / "catalogue" / f"remote-{loader}.json"


def _remote_entries(loaders: list[str] | None) -> dict[str, tuple[dict[str, Any], str]]:
    from datasets_hub.cache.layout import cache_root

    folder = cache_root() / "catalogue"
    out: dict[str, tuple[dict[str, Any], str]] = {}
    try:
        files = sorted(folder.glob("remote-*.json"))
    except OSError:
        return out
    for path in files:
        loader = path.stem[len("remote-") :]
        if loaders is not None and loader not in loaders:
            continue
        try:
            payload = json.loads(path.read_text())
            entries = payload["entries"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        source = f"the {loader!r} remote catalogue (fetched {payload.get('fetched', '?')})"
        for dataset_id, entry in entries.items():
            if isinstance(dataset_id, str) and dataset_id.startswith(loader + "/") and isinstance(entry, dict):
                out[dataset_id] = (entry, source)
    return out


def refresh_remote_catalogues(loaders: list[str] | None = None, *, timeout: float = 5.0) -> dict[str, str]:
    """Fetch each loader's ``remote_catalogue()`` (in a thread, at most ``timeout`` seconds each,
    retry noise silenced) and cache it; returns ``{loader: "N ids" | "skipped: why"}``. Offline
    (``DATASETS_HUB_OFFLINE=1``) nothing is fetched."""
    import logging
    import threading

    from datasets_hub.plugins import get_loader, loader_names

    if env.offline():
        return dict.fromkeys(loaders or loader_names(), "skipped: DATASETS_HUB_OFFLINE=1")
    report: dict[str, str] = {}
    for name in loaders or loader_names():
        try:
            loader = get_loader(name)
        except HubError as exc:
            report[name] = f"skipped: {exc}"
            continue
        if type(loader).remote_catalogue is Loader.remote_catalogue:
            continue  # no remote catalogue
        result: dict[str, Any] = {}

        def fetch(loader: Any = loader, result: dict[str, Any] = result) -> None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    result["entries"] = loader.remote_catalogue() or {}
            except Exception as exc:  # noqa: BLE001 - reported per loader, listing goes on
                result["error"] = f"{type(exc).__name__}: {exc}"

        try:  # huggingface_hub sets its logger's level when first imported: import it before quieting it
            import huggingface_hub.utils.logging  # noqa: F401 - imported for that side effect
        except ImportError:
            pass
        quiet = logging.getLogger("huggingface_hub")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)  # no retry chatter on a dead network
        worker = threading.Thread(target=fetch, daemon=True, name=f"datasets_hub-remote-{name}")
        try:
            worker.start()
            worker.join(timeout)
        finally:
            if not worker.is_alive():  # an abandoned fetch keeps retrying: keep it quiet until the process ends
                quiet.setLevel(level)
        if worker.is_alive() or "entries" not in result:
            report[name] = f"skipped: {result.get('error') or f'no answer within {timeout:g} s'}"
            continue
        entries = {k: dict(v) for k, v in result["entries"].items() if isinstance(k, str) and k.startswith(name + "/")}
        path = _remote_file(name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fetched = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            write_json_atomic(path, {"fetched": fetched, "entries": entries}, indent=None, sort_keys=False)
        except OSError as exc:
            report[name] = f"fetched {len(entries)} ids but could not cache them: {exc}"
            continue
        report[name] = f"{len(entries)} ids"
    return report


def list_ids(loader: str | None = None, search: str | None = None) -> list[str]:
    """Sorted ids, optionally only one loader's (a broken loader raises), optionally matching ``search``:
    every word of it must start a word of the id or of its description (case-insensitive), so
    ``hopper`` finds ``d4rl/hopper-medium-v2`` but not ``ChopperCommand``."""
    entries = all_entries([loader] if loader else None, strict=bool(loader))
    ids = [i for i in entries if loader is None or i.split("/", 1)[0] == loader]
    if search:
        ids = [i for i in ids if matches(search, i, str(entries[i][0].get("description", "")))]
    return sorted(ids)


_WORD_RE = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    # split camel case too: "ChopperCommand" -> "chopper command"
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", text)
    return _WORD_RE.findall(spaced.lower())


def matches(search: str, dataset_id: str, description: str = "") -> bool:
    """Whether every word of ``search`` is a prefix of a word of the id or of the description
    (``hopper-med`` matches ``d4rl/hopper-medium-v2``; ``hopper`` does not match ``ChopperCommand``)."""
    haystack = _words(dataset_id) + _words(description)
    needles = _words(search)
    if not needles:
        return True
    return all(any(word.startswith(needle) for word in haystack) for needle in needles)


def _check_params(dataset_id: str, params: Mapping[str, Any]) -> dict[str, Any]:
    try:
        json.dumps(params, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(
            f"parameters for {dataset_id!r} must be JSON values (str, int, float, bool, None, lists, "
            f"dicts) so that they can be fingerprinted: {exc}"
        ) from exc
    return dict(params)


def resolve(dataset_id: str, **overrides: Any) -> DatasetSpec:
    """The build spec of ``dataset_id`` with ``overrides`` merged over the catalogue's params."""
    loader, _ = validate_id(dataset_id)
    entries = _static_entries()
    if dataset_id not in entries:
        from datasets_hub.plugins import loader_names

        if loader in loader_names():
            entries.update({k: v for k, v in _loader_entries(loader).items() if k not in entries})
            if dataset_id not in entries:
                entries.update(_open_entry(loader, dataset_id))
    if dataset_id not in entries:
        from datasets_hub.plugins import loader_names

        known = list(entries)
        hint = did_you_mean(dataset_id, known)
        if loader not in loader_names():
            hint += f" No loader {loader!r} is installed (installed: {', '.join(loader_names()) or 'none'})."
        raise UnknownDataset(f"unknown dataset {dataset_id!r}.{hint} See `datasets-hub list`.")
    entry, source = entries[dataset_id]
    entry = _check_entry(dataset_id, entry, source)
    params = _check_params(dataset_id, {**(entry.get("params") or {}), **overrides})
    metadata = {k: v for k, v in entry.items() if k not in _ENTRY_KEYS_WITH_MEANING}
    resources = [Resource.from_dict(r) for r in entry.get("resources") or []]
    return DatasetSpec(
        id=dataset_id, loader=loader, params=params, resources=resources, metadata=metadata, source=source
    )


def register_dataset(
    dataset_id: str,
    *,
    loader: str | None = None,
    params: Mapping[str, Any] | None = None,
    resources: list[Mapping[str, Any]] | None = None,
    **metadata: Any,
) -> None:
    """Add ``dataset_id`` to the catalogue of this process (e.g. a private copy of a dataset).

    ``loader`` defaults to the id's prefix and must equal it; ``resources`` are dicts with
    ``url``/``urls`` and optional ``sha256``, ``size``, ``name``; extra keywords (``license``,
    ``description``…) go to the dataset card. Registering an id that exists is an error.
    """
    prefix, _ = validate_id(dataset_id)
    entry: dict[str, Any] = {
        "loader": loader or prefix,
        "params": dict(params or {}),
        "resources": [dict(r) for r in resources or []],
        **metadata,
    }
    _check_entry(dataset_id, entry, "register_dataset()")
    existing = _static_entries()
    if dataset_id in existing:
        raise CatalogueError(
            f"dataset id {dataset_id!r} already exists (from {existing[dataset_id][1]}); pick another "
            "id, or pass your changes as parameters: datasets_hub.load(id, **params)"
        )
    _check_params(dataset_id, entry["params"])
    _registered[dataset_id] = entry


def unregister_dataset(dataset_id: str) -> None:
    """Remove an id added with :func:`register_dataset` (no-op if absent)."""
    _registered.pop(dataset_id, None)
