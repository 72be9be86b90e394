"""What the cache holds, for ``datasets-hub cache ls|du`` and ``list`` (docs/guide/cache.md).

Plain data, never printed here. For each build: its id, the params that differ from the
catalogue's (what ``--param`` overrode), size on disk, build date, last use (the
:data:`~datasets_hub.cache.layout.LAST_USED` marker that opening a build touches), its preprocessed
variants, and whether it is *stale*: made in an older on-disk format or by an older loader
conversion (``format_version``) than this installation produces, so no ``load`` can pick it again
(the build fingerprint covers both versions) and ``cache prune`` removes it. A build made by a
*newer* installation (a cache shared between versions) is flagged as such and never pruned.

Light on purpose: the stdlib and :mod:`datasets_hub.cache.layout` at import; the catalogue and the
loader plugins are imported only when there are builds to describe.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from datasets_hub.cache.layout import (
    DELETING_MARK,
    INCOMPLETE_SUFFIX,
    SECTIONS,
    cache_root,
    dir_size,
    iter_builds,
    last_used,
    preprocessed_root,
    raw_root,
    read_manifest,
)
from datasets_hub.cache.remote_copies import REMOTE, RemoteCopy, remote_copies
from datasets_hub.errors import CacheError, HubError


def _iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class PreprocessedEntry:
    """One preprocessed variant: ``<cache>/preprocessed/<build_fp>/<fingerprint>``."""

    build_fp: str
    fingerprint: str
    path: Path
    id: str  # the dataset it derives from ("?" when unknown)
    transform: str  # the transform's name; a chain shows every step ("a -> b")
    transitions: int
    bytes: int
    created: str
    last_used: str | None = None  # ISO UTC, to within cache.LAST_USED_RESOLUTION_S; None: never recorded

    @property
    def name(self) -> str:
        return f"{self.build_fp}/{self.fingerprint}"


@dataclass
class BuildEntry:
    """One published build. ``changed_params``: the params that differ from the catalogue entry's
    (all of them when the id is not in the catalogue any more, with ``in_catalogue`` False);
    ``stale``: why no ``load`` can pick the build again (``None``: it is current, or it cannot be
    told because its loader is not installed); ``newer``: why it was made by a newer installation
    (never stale, never pruned); ``variants``: its preprocessed variants' names."""

    id: str
    fingerprint: str
    path: Path
    transitions: int
    episodes: int
    bytes: int
    created: str
    params: dict[str, Any] = field(default_factory=dict)
    changed_params: dict[str, Any] = field(default_factory=dict)
    in_catalogue: bool = True
    last_used: str | None = None
    stale: str | None = None
    newer: str | None = None
    variants: list[str] = field(default_factory=list)


@dataclass
class CacheListing:
    root: Path
    builds: list[BuildEntry]
    raw: dict[str, list[tuple[str, int]]]  # loader -> [(relative name, bytes)]
    preprocessed: list[PreprocessedEntry]  # every variant, those of removed builds included
    remote: list[RemoteCopy] = field(default_factory=list)  # local copies of builds published at a URL


# ------------------------------------------------------------------------------------------ stale builds
class _Versions:
    """The versions this installation writes, and each installed loader's ``format_version`` (asked once)."""

    def __init__(self) -> None:
        from datasets_hub.build.format import FORMAT, FORMAT_VERSION, READABLE_VERSIONS, STORAGE_FORMAT_VERSION

        self.format, self.version, self.storage = FORMAT, FORMAT_VERSION, STORAGE_FORMAT_VERSION
        self.readable = READABLE_VERSIONS  # older versions this one still reads (and `load` reuses)
        self._loaders: dict[str, int | None] = {}

    def loader_format(self, name: str) -> int | None:
        if name not in self._loaders:
            from datasets_hub.plugin_facts import loader_facts

            try:  # the recorded fact: `cache ls` imports no plugin whose code has not changed
                self._loaders[name] = loader_facts(name).format_version
            except (HubError, TypeError, ValueError):
                self._loaders[name] = None  # not installed or broken: staleness cannot be told
        return self._loaders[name]

    def status(self, manifest: dict[str, Any]) -> tuple[str | None, str | None]:
        """``(stale, newer)``: why the build of ``manifest`` is stale (made by an older format or loader
        conversion: no ``load`` picks it again), or why it was made by a newer installation (kept:
        a cache shared between versions must not lose the newer one's builds); ``(None, None)`` when current."""
        if manifest.get("format") != self.format:  # in the hub's own folder: nothing any version reads
            return f"on-disk format {manifest.get('format')!r}, not {self.format!r}: no datasets_hub reads it", None
        version = manifest.get("version")
        checks = [  # a version this one still reads (and `load` reuses) counts as current
            ("on-disk format version", self.version if version in self.readable else version, self.version,
             f"{self.format!r} version {self.version}"),
            ("storage format", manifest.get("storage_format_version"), self.storage, f"storage format {self.storage}"),
        ]  # fmt: skip
        loader = str(manifest.get("loader") or str(manifest.get("id", "")).split("/", 1)[0])
        current = self.loader_format(loader)
        if current is not None:
            checks.append(
                (f"the {loader!r} loader's format_version", manifest.get("loader_format_version"), current,
                 f"format_version {current}")
            )  # fmt: skip
        for what, made, now, writes in checks:
            if made == now:
                continue
            if isinstance(made, int) and not isinstance(made, bool) and made > now:
                return (
                    None,
                    f"made with {what} {made}, newer than this installation's {now} (update datasets_hub or the loader plugin to use it)",
                )
            return (
                f"made with {what} {made!r}; this installation writes {writes}, so `load` builds anew",
                None,
            )
        return None, None

    def stale_reason(self, manifest: dict[str, Any]) -> str | None:
        """Why the build of ``manifest`` is stale, or ``None`` (current, or made by a newer installation)."""
        return self.status(manifest)[0]


def stale_builds() -> list[tuple[Path, dict[str, Any], str]]:
    """``(build, manifest, why)`` for every stale build in the cache (see the module docstring)."""
    versions = _Versions()
    out = []
    for build, manifest in iter_builds(warn=False):
        reason = versions.stale_reason(manifest)
        if reason:
            out.append((build, manifest, reason))
    return out


# ------------------------------------------------------------------------------------------ listing
def catalogue_params(dataset_id: str) -> dict[str, Any] | None:
    """The catalogue's params of ``dataset_id``, or ``None`` when the catalogue does not know it."""
    from datasets_hub.catalogue import resolve

    try:
        return dict(resolve(dataset_id).params)
    except (HubError, ValueError, TypeError):
        return None


def changed_params(params: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``params`` that ``defaults`` lacks or holds with another value."""
    missing = object()
    return {k: v for k, v in sorted(params.items()) if defaults.get(k, missing) != v}


def _raw_files() -> dict[str, list[tuple[str, int]]]:
    from datasets_hub.downloads.fetch import SIDE_SUFFIXES

    root = raw_root()
    out: dict[str, list[tuple[str, int]]] = {}
    if not root.is_dir():
        return out
    for loader_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        files = []
        for path in sorted(loader_dir.rglob("*")):
            if path.is_file() and not path.name.endswith(SIDE_SUFFIXES) and ".tmp" not in path.name:
                files.append((str(path.relative_to(loader_dir)), path.stat().st_size))
        if files:
            out[loader_dir.name] = files
    return out


def variant_dirs() -> Iterator[Path]:
    """Every published-looking variant directory under ``<cache>/preprocessed/<build-fp>/``."""
    root = preprocessed_root()
    if not root.is_dir():
        return
    for parent in sorted(p for p in root.iterdir() if p.is_dir() and DELETING_MARK not in p.name):
        for variant in sorted(p for p in parent.iterdir() if p.is_dir()):
            if not variant.name.endswith(INCOMPLETE_SUFFIX) and DELETING_MARK not in variant.name:
                yield variant


def variant_manifest(variant: Path) -> dict[str, Any] | None:
    """The manifest of a preprocessed variant, or ``None`` when it has none or it is unreadable."""
    try:
        return read_manifest(variant)
    except CacheError:
        return None  # unreadable: listed (and prunable) like a variant without a manifest


def _preprocessed() -> list[PreprocessedEntry]:
    out = []
    for variant in variant_dirs():
        manifest = variant_manifest(variant) or {}
        chain = manifest.get("chain") or []
        transform = " -> ".join(chain) if chain else "(no manifest: incomplete or foreign)"
        out.append(
            PreprocessedEntry(
                build_fp=variant.parent.name,
                fingerprint=variant.name,
                path=variant,
                id=str(manifest.get("id") or "?"),
                transform=transform,
                transitions=int((manifest.get("counts") or {}).get("transitions", 0)),
                bytes=dir_size(variant),
                created=str(manifest.get("created", "")),
                last_used=_iso(last_used(variant)),
            )
        )
    return out


def list_cache() -> CacheListing:
    """Every published build (described as in :class:`BuildEntry`), raw file (per loader) and
    preprocessed variant in the cache."""
    preprocessed = _preprocessed()
    by_build: dict[str, list[str]] = {}
    for variant in preprocessed:
        by_build.setdefault(variant.build_fp, []).append(variant.name)
    versions: _Versions | None = None
    defaults: dict[str, dict[str, Any] | None] = {}
    builds = []
    for path, manifest in iter_builds():
        versions = versions or _Versions()
        dataset_id = str(manifest.get("id", path.parent.name))
        if dataset_id not in defaults:
            defaults[dataset_id] = catalogue_params(dataset_id)
        params = manifest.get("params")
        params = params if isinstance(params, dict) else {}
        counts = manifest.get("counts") or {}
        status = versions.status(manifest)
        builds.append(
            BuildEntry(
                id=dataset_id,
                fingerprint=path.name,
                path=path,
                transitions=int(counts.get("transitions", 0)),
                episodes=int(counts.get("episodes", 0)),
                bytes=dir_size(path),
                created=str(manifest.get("created", "")),
                params=dict(params),
                changed_params=changed_params(params, defaults[dataset_id] or {}),
                in_catalogue=defaults[dataset_id] is not None,
                last_used=_iso(last_used(path)),
                stale=status[0],
                newer=status[1],
                variants=by_build.get(path.name, []),
            )
        )
    return CacheListing(
        root=cache_root(), builds=builds, raw=_raw_files(), preprocessed=preprocessed, remote=remote_copies()
    )


def usage() -> dict[str, int]:
    """Bytes per cache section: ``raw``, ``datasets``, ``preprocessed``, ``remote`` (local copies of published
    builds), ``other`` and ``total``."""
    root = cache_root()
    out = {name: dir_size(root / name) if (root / name).is_dir() else 0 for name in (*SECTIONS, REMOTE)}
    total = dir_size(root) if root.is_dir() else 0
    out["other"] = total - sum(out.values())
    out["total"] = total
    return out


def cached_ids() -> dict[str, list[dict[str, Any]]]:
    """Ids with at least one build in the cache -> their manifests' params (cheap: reads manifests only)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for _path, manifest in iter_builds():
        out.setdefault(str(manifest.get("id")), []).append(manifest.get("params") or {})
    return out
