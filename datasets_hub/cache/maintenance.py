"""Cache maintenance: remove and prune what the hub keeps on disk (docs/design/on-disk.md).

This module holds one concept: removing what the hub keeps on disk, by name (``rm``) or as leftovers (``prune``).

These are the functions behind ``datasets-hub rm|cache rm|cache prune`` (``verify`` lives in
:mod:`datasets_hub.cache.verify`, the listing in :mod:`datasets_hub.cache.listing`); they return
plain data and never print, so scripts can call them too. Contracts:

- :func:`remove` deletes builds atomically (renamed aside first, so no reader sees half a build)
  and refuses to touch a build another process is building right now.
- :func:`find_builds` resolves what ``cache rm`` names (an id, a build fingerprint, a preprocessed
  variant) and refuses an ambiguous name, listing the candidates; :func:`remove_build` removes one.
- :func:`prune` removes leftovers of killed processes (``*.incomplete`` builds and preprocessing
  results, ``.partial`` and ``.corrupt`` downloads, ``*.deleting-<pid>`` directories), preprocessed
  results whose build is gone, stale builds (an old on-disk format or loader ``format_version``),
  and, with ``older_than_days``, old builds (with their preprocessed results) and old
  preprocessed results. It takes each item's lock without waiting and skips
  whatever is busy.

Light on purpose: stdlib, numpy and :mod:`datasets_hub.cache.layout` at import; the loader machinery is
imported only by the functions that need a catalogue entry.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from datasets_hub.cache.layout import (
    DATASETS,
    DELETING_MARK,
    INCOMPLETE_SUFFIX,
    MANIFEST,
    PREPROCESSED,
    RAW,
    cache_root,
    dataset_dir,
    datasets_dir,
    delete_doomed,
    dir_size,
    file_lock,
    iter_builds,
    manifest_or_problem,
    preprocessed_dir,
    preprocessed_root,
    raw_file_path,
    raw_root,
    remove_tree,
)
from datasets_hub.cache.listing import stale_builds, variant_dirs, variant_manifest
from datasets_hub.cache.remote_copies import (
    copies_to_remove,
    is_remote_copy,
    prune_candidates,
    remote_root,
    remove_copy,
)
from datasets_hub.cache.resumable import KEPT, staging_verdict
from datasets_hub.downloads.fetch import SIDE_SUFFIXES
from datasets_hub.errors import CacheError, InvalidParameter, did_you_mean

# ------------------------------------------------------------------------------------------ helpers


@contextlib.contextmanager
def _try_lock(lock_path: Path) -> Iterator[bool]:
    """Hold ``lock_path`` if nobody else does (yield True), else yield False at once: never wait."""
    from filelock import Timeout

    lock = file_lock(lock_path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def _build_lock(build: Path) -> Path:
    return build.with_name(build.name + ".lock")  # the lock build/pipeline.py holds while building `build`


def _variant_locks(build_fp: str) -> list[Path]:
    """The locks preprocessing holds on each variant of build ``build_fp`` while computing it."""
    pre = preprocessed_dir(build_fp)
    if not pre.is_dir():
        return []
    names = {p.name[: -len(".lock")] for p in pre.iterdir() if p.name.endswith(".lock")}
    names |= {
        p.name[: -len(INCOMPLETE_SUFFIX)] if p.name.endswith(INCOMPLETE_SUFFIX) else p.name
        for p in pre.iterdir()
        if p.is_dir() and DELETING_MARK not in p.name
    }
    return [pre / (name + ".lock") for name in sorted(names)]


@contextlib.contextmanager
def _hold_all(locks: list[Path]) -> Iterator[Path | None]:
    """Hold every lock in ``locks`` without waiting; yield ``None``, or the first one that is busy."""
    with contextlib.ExitStack() as stack:
        for lock in locks:
            if not stack.enter_context(_try_lock(lock)):
                yield lock
                return
        yield None


def builds_of(dataset_id: str) -> list[Path]:
    """Every build directory of ``dataset_id`` (any params, broken ones included), sorted."""
    root = dataset_dir(dataset_id)
    if not root.is_dir():
        return []
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir()
        and not p.name.endswith(INCOMPLETE_SUFFIX)
        and DELETING_MARK not in p.name
        and (p / MANIFEST).is_file()
    )


def catalogue_build(dataset_id: str, params: dict[str, Any] | None = None, frames: Any = None) -> tuple[Any, Any, Path]:
    """``(spec, loader, build path)`` of ``dataset_id`` with ``params`` over the catalogue's (``frames``: the
    build's :class:`~datasets_hub.build.frames.FrameCodec`, default raw)."""
    from datasets_hub.build.identity import build_path
    from datasets_hub.catalogue import resolve
    from datasets_hub.plugins import get_loader

    spec = resolve(dataset_id, **(params or {}))
    loader = get_loader(spec.loader)
    loader.check_params(spec)
    return spec, loader, build_path(spec, loader, frames)


# ------------------------------------------------------------------------------------------ remove
def _remove_build(build: Path) -> None:
    """Remove ``build`` and its preprocessed results, holding the locks their writers hold: a build
    being written, or a preprocessing of it being computed, is refused (never deleted under its writer)."""
    with _hold_all([_build_lock(build), *_variant_locks(build.name)]) as busy:
        if busy is not None:
            what = "built" if busy == _build_lock(build) else "preprocessed"
            raise CacheError(
                f"{build} is being {what} by another process right now ({busy} is held); try again when it finishes"
            )
        remove_tree(build)
        # the build's lock file stays: unlinking it could let two processes hold "the" lock on two inodes
        pre = preprocessed_dir(build.name)
        if pre.is_dir():
            remove_tree(pre)  # derived from the build, unreachable without it; every variant lock is held


def _raw_targets(dataset_id: str, params: dict[str, Any] | None, builds: list[Path]) -> list[Path]:
    """The raw files of ``dataset_id`` (the catalogue's resources and those its builds' manifests name)."""
    from datasets_hub.cache.catalogue_builds import catalogue_build_record
    from datasets_hub.catalogue import resolve
    from datasets_hub.downloads.fetch import source_key
    from datasets_hub.loader import Resource

    loader = resolve(dataset_id).loader
    _name, resources = catalogue_build_record(dataset_id, params)
    paths = {raw_file_path(loader, r.name, source_key(r)) for r in map(Resource.from_dict, resources)}
    for build in builds:
        manifest, _problem = manifest_or_problem(build)
        for source in (manifest or {}).get("sources") or []:
            if isinstance(source, dict) and source.get("name"):
                key = source.get("key")
                paths.add(raw_file_path(loader, str(source["name"]), str(key) if key else None))
    return sorted(paths)


def remove(
    dataset_id: str,
    *,
    params: dict[str, Any] | None = None,
    all_builds: bool = False,
    raw: bool = False,
    dry_run: bool = False,
) -> list[Path]:
    """Delete the build of ``dataset_id`` for ``params`` (or every build), and with ``raw`` its raw files.

    Returns what was removed (with ``dry_run``: what would be, nothing is touched). Builds go atomically (renamed aside, then deleted); their cached
    preprocessing results under ``<cache>/preprocessed/<build-fp>`` go too. A broken build (an
    unreadable manifest) is removed like any other. Whatever another process is writing (a build,
    a preprocessing result, a download) is refused with a :class:`CacheError`, never deleted.
    """
    removed: list[Path] = []
    if "://" in dataset_id:  # a published build's URL: its local copies, whatever their published hash
        copies = copies_to_remove(dataset_id, options=bool(params or raw), must_exist=False)
        for copy in [] if dry_run else copies:
            remove_copy(copy)
        return copies
    if all_builds:
        from datasets_hub.catalogue import validate_id

        validate_id(dataset_id)
        targets = builds_of(dataset_id)
    else:  # the build load(dataset_id, **params) uses, named from recorded facts (no torch)
        from datasets_hub.cache.catalogue_builds import catalogue_build_record

        build = dataset_dir(dataset_id) / catalogue_build_record(dataset_id, params)[0]
        targets = [build] if (build / MANIFEST).is_file() else []
    raw_files = _raw_targets(dataset_id, params, targets) if raw else []
    if dry_run:  # what would go (preprocessed results of these builds go with them)
        return list(targets) + [p for p in raw_files if p.exists()]
    for build in targets:
        _remove_build(build)
        removed.append(build)
    for path in raw_files:
        with _try_lock(path.with_name(path.name + ".lock")) as free:  # the lock the downloader holds
            if not free:
                raise CacheError(f"{path} is being downloaded by another process right now; try again when it finishes")
            existed = path.exists()
            for side in ("", *(s for s in SIDE_SUFFIXES if s != ".lock")):  # the lock is ours, held
                path.with_name(path.name + side).unlink(missing_ok=True)
        if existed:
            removed.append(path)
        _remove_empty_parents(path.parent, raw_root())
    _remove_empty_parents(dataset_dir(dataset_id), datasets_dir())
    return removed


def _check_name(name: Any) -> str:
    if (
        not isinstance(name, str)
        or not name
        or name.startswith("/")
        or any(part in ("", ".", "..") for part in name.split("/"))
        or "\\" in name
        or "\x00" in name
    ):
        raise InvalidParameter(
            f"{name!r} names nothing in the cache: give a dataset id, a build fingerprint or a preprocessed "
            "variant <build-fp>/<transform-fp>, as `datasets-hub cache ls` shows them"
        )
    return name


def _describe(build: Path) -> str:
    """``<fingerprint> (<params that differ from the catalogue's>; built <date>)``, for the candidates
    of an ambiguous name."""
    from datasets_hub.cache.listing import catalogue_params, changed_params

    manifest, problem = manifest_or_problem(build)
    if manifest is None:
        return f"{build.name} (broken: {str(problem)[:60]})"
    params = manifest.get("params")
    params = params if isinstance(params, dict) else {}
    changed = changed_params(params, catalogue_params(build.parent.relative_to(datasets_dir()).as_posix()) or {})
    text = " ".join(f"{k}={json.dumps(v)}" for k, v in changed.items())
    return f"{build.name} ({text or 'the catalogue params'}; built {manifest.get('created', '?')})"


def _builds_by_params(dataset_id: str, builds: list[Path], params: dict[str, Any]) -> list[Path]:
    """The builds of ``dataset_id`` made with ``params`` over the catalogue's (the ones ``load(id,
    **params)`` would have made); for an id the catalogue does not know any more, the builds whose
    params include ``params``."""
    from datasets_hub.catalogue import resolve
    from datasets_hub.errors import UnknownDataset

    try:
        want: dict[str, Any] | None = dict(resolve(dataset_id, **params).params)
    except UnknownDataset:
        want = None
    out = []
    for build in builds:
        manifest, _problem = manifest_or_problem(build)
        have = (manifest or {}).get("params")
        if not isinstance(have, dict):
            continue
        if have == want if want is not None else all(have.get(k, object()) == v for k, v in params.items()):
            out.append(build)
    return out


def find_builds(name: str, *, params: dict[str, Any] | None = None, all_builds: bool = False) -> list[Path]:
    """What ``datasets-hub cache rm NAME`` removes: build directories, or preprocessed variant directories.

    ``name`` is a dataset id (its one build; with ``params``, the build those params over the
    catalogue's make; with ``all_builds``, every build of the id), a build fingerprint (or a
    unique prefix of at least 4 characters), or a preprocessed variant ``<build-fp>/<transform-fp>``
    (or a unique ``<transform-fp>``). A name that matches several builds and no option that picks
    among them raises :class:`InvalidParameter` listing the candidates; one that matches nothing
    raises it with "did you mean".
    """
    if isinstance(name, str) and "://" in name:  # a published build's URL: every local copy of it
        return copies_to_remove(name, options=bool(params or all_builds), must_exist=True)
    name = _check_name(name)
    from datasets_hub.cache.listing import variant_dirs as variants_now

    variants = {v.parent.name + "/" + v.name: v for v in variants_now()}
    builds = {b.name: b for b, _m in iter_builds(warn=False)}
    as_variant = [p for full, p in variants.items() if full == name or ("/" not in name and p.name == name)]
    as_build = [b for fp, b in builds.items() if "/" not in name and len(name) >= 4 and fp.startswith(name)]
    if (as_variant or as_build) and (params or all_builds):
        raise InvalidParameter(
            f"{name!r} is a fingerprint, which names one build or variant: --param and --all-builds pick "
            "among the builds of a dataset id (e.g. `datasets-hub cache rm d4rl/hopper-medium-v2 --all-builds`)"
        )
    if as_variant or as_build:
        matches = as_build + as_variant
    elif "/" in name and name.split("/", 1)[0] not in builds:
        from datasets_hub.catalogue import validate_id

        validate_id(name)
        of_id = builds_of(name)
        matches = of_id if all_builds or not params else _builds_by_params(name, of_id, params)
        if not matches:
            known = sorted({str(b.parent.relative_to(datasets_dir())) for b in builds.values()})
            if of_id:
                raise CacheError(
                    f"no build of {name} has these params; its builds: {'; '.join(map(_describe, of_id))}. "
                    "Give the fingerprint, or --all-builds"
                )
            raise CacheError(
                f"no build of {name!r} in the cache {cache_root()}.{did_you_mean(name, known)} "
                "`datasets-hub cache ls` lists the builds"
            )
        if len(matches) > 1 and not all_builds:
            raise InvalidParameter(
                f"{name} has {len(matches)} builds{' with these params' if params else ''}: "
                f"{'; '.join(map(_describe, matches))}. Pick one with --param KEY=VALUE or by fingerprint, or "
                "remove them all with --all-builds"
            )
        return matches
    else:
        known = list(variants) + [full.split("/")[1] for full in variants] + list(builds)
        raise InvalidParameter(
            f"nothing in the cache is named {name!r}.{did_you_mean(name, known)} Give a dataset id, a build "
            "fingerprint (a prefix of at least 4 characters will do) or <build-fp>/<transform-fp>, as "
            "`datasets-hub cache ls` shows them"
        )
    if len(matches) > 1:
        listed = [_describe(m) if m in as_build else f"{m.parent.name}/{m.name} (preprocessed)" for m in matches]
        raise InvalidParameter(f"{name!r} names {len(matches)} things: {'; '.join(listed)}. Give more of the name")
    return matches


def is_variant(path: Path) -> bool:
    """Whether ``path`` (from :func:`find_builds`) is a preprocessed variant rather than a build."""
    return preprocessed_root() in Path(path).parents


def first_busy(paths: list[Path]) -> Path | None:
    """The first of ``paths`` (builds or preprocessed variants) another process is writing right now,
    or None: a removal of several checks them all before removing any (each removal checks again)."""
    locks: list[Path] = []
    for path in map(Path, paths):
        if is_variant(path):
            locks.append(path.with_name(path.name + ".lock"))
        else:
            locks += [_build_lock(path), *_variant_locks(path.name)]
    with _hold_all(list(dict.fromkeys(locks))) as busy:
        return busy


def remove_build(path: Path) -> list[Path]:
    """Delete a build (with its preprocessed variants) or one preprocessed variant, as :func:`find_builds`
    names them, under the locks their writers hold; returns what went. One being built or computed
    right now is refused with a :class:`CacheError`, never deleted under its writer."""
    path = Path(path)
    if is_remote_copy(path):
        remove_copy(path)
        _remove_empty_parents(path.parent, remote_root())
        return [path]
    if is_variant(path):
        with _try_lock(path.with_name(path.name + ".lock")) as free:
            if not free:
                raise CacheError(f"{path} is being computed by another process right now; try again when it finishes")
            remove_tree(path)
        _remove_empty_parents(path.parent, preprocessed_root())
        return [path]
    gone = [path, *variant_paths(path)]
    _remove_build(path)
    _remove_empty_parents(path.parent, datasets_dir())
    return gone


def variant_paths(build: Path) -> list[Path]:
    """The preprocessed variants of ``build`` (what goes with it)."""
    pre = preprocessed_dir(Path(build).name)
    if not pre.is_dir():
        return []
    return sorted(p for p in pre.iterdir() if p.is_dir() and DELETING_MARK not in p.name)


def _remove_empty_parents(path: Path, stop: Path) -> None:
    """Remove ``path`` and its parents up to ``stop`` while they are empty."""
    while path != stop and stop in path.parents and path.is_dir():
        try:
            path.rmdir()
        except OSError:
            return  # not empty (e.g. lock files, which must stay: see _remove_build)
        path = path.parent


# ------------------------------------------------------------------------------------------ prune
@dataclass
class PruneItem:
    """One thing :func:`prune` removed (or, with ``dry_run``, would remove), or skipped and why."""

    path: Path
    reason: str
    bytes: int
    skipped: str | None = None
    kept: bool = False  # skipped on purpose, not because it was busy (a resumable build's staging folder)


def _size(path: Path) -> int:
    try:
        return dir_size(path) if path.is_dir() else path.stat().st_size
    except OSError:
        return 0


def _created(build: Path, manifest: dict[str, Any]) -> float:
    """When the build was made: the manifest's ``created`` (UTC), else the manifest file's mtime."""
    with contextlib.suppress(TypeError, ValueError):
        stamp = datetime.strptime(str(manifest.get("created")), "%Y-%m-%dT%H:%M:%SZ")
        return stamp.replace(tzinfo=timezone.utc).timestamp()
    return (build / MANIFEST).stat().st_mtime


def _orphaned_preprocessed() -> list[Path]:
    """``<cache>/preprocessed/<build-fp>`` directories whose build is gone (unreachable by any load)."""
    pre = preprocessed_root()
    if not pre.is_dir():
        return []
    builds = {build.name for build, _manifest in iter_builds(warn=False)}
    builds |= {build.name for build, _problem in _broken_builds()}  # their results go with them, not before
    return sorted(p for p in pre.iterdir() if p.is_dir() and DELETING_MARK not in p.name and p.name not in builds)


def _broken_builds() -> list[tuple[Path, str]]:
    """Build directories whose manifest exists but cannot be read (what a power loss leaves)."""
    root = datasets_dir()
    out: list[tuple[Path, str]] = []
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if not d.endswith(INCOMPLETE_SUFFIX) and DELETING_MARK not in d]
        if MANIFEST in filenames and here != root:
            dirnames[:] = []
            _manifest, problem = manifest_or_problem(here)
            if problem:
                out.append((here, problem))
    return out


def _variant_items(parent: Path, reason: str) -> Iterator[tuple[Path, str, list[Path]]]:
    """Each variant (published or unfinished) under ``parent``, with the lock its writer holds."""
    for variant in sorted(p for p in parent.iterdir() if p.is_dir() and DELETING_MARK not in p.name):
        final = variant.name[: -len(INCOMPLETE_SUFFIX)] if variant.name.endswith(INCOMPLETE_SUFFIX) else variant.name
        yield variant, reason, [parent / (final + ".lock")]


def _candidates(
    older_than_days: float | None, keep_stale: bool, drop_resumable: bool, kept: list[PruneItem]
) -> Iterator[tuple[Path, str, list[Path]]]:
    """(path, reason, locks to hold while deleting) for everything prunable; resumable builds that stay
    are added to ``kept`` instead."""
    root = cache_root()
    cutoff = None if older_than_days is None else time.time() - older_than_days * 86400
    orphans = _orphaned_preprocessed()
    for parent in orphans:
        yield from _variant_items(parent, "preprocessed results of a build that no longer exists")
    for build, problem in _broken_builds():
        yield (
            build,
            f"broken build ({problem.split(':', 1)[0]}: unreadable manifest)",
            [_build_lock(build), *_variant_locks(build.name)],
        )
        pre = root / PREPROCESSED / build.name
        if pre.is_dir():
            yield from _variant_items(pre, "preprocessed results of that broken build")
    for section in (DATASETS, PREPROCESSED, RAW):
        base = root / section
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            here = Path(dirpath)
            if (here / MANIFEST).is_file() and here != base:
                dirnames[:] = []  # a build's or a variant's insides are not leftovers
                continue
            for name in list(dirnames):
                path = here / name
                if path in orphans:
                    dirnames.remove(name)
                    continue
                if name.endswith(INCOMPLETE_SUFFIX):
                    final = path.with_name(name[: -len(INCOMPLETE_SUFFIX)])
                    reason, keep = staging_verdict(path, final, cutoff, drop_resumable)
                    if keep:  # a resumable build: listed, not removed
                        kept.append(PruneItem(path, reason, _size(path), skipped=KEPT, kept=True))
                    else:
                        yield path, reason, [_build_lock(final)]
                    dirnames.remove(name)
                elif DELETING_MARK in name:
                    yield path, "interrupted deletion", []  # its flock says whether it is still going
                    dirnames.remove(name)
            for name in filenames:
                path = here / name
                if name.endswith(".partial"):
                    yield path, "unfinished download", [path.with_name(name[: -len(".partial")] + ".lock")]
                elif name.endswith(".corrupt"):
                    yield (
                        path,
                        "download that failed its checksum",
                        [path.with_name(name[: -len(".corrupt")] + ".lock")],
                    )
                elif DELETING_MARK in name:
                    yield path, "interrupted deletion", []
    doomed: dict[Path, tuple[Any, str]] = {}
    if not keep_stale:
        for build, manifest, why in stale_builds():
            doomed[build] = (manifest.get("id"), f"stale build ({manifest.get('id')}): {why}")
    if cutoff is not None:
        for build, manifest in iter_builds(warn=False):
            if build not in doomed and _created(build, manifest) < cutoff:
                doomed[build] = (
                    manifest.get("id"),
                    f"build older than {older_than_days:g} days ({manifest.get('id')})",
                )
    for build, (dataset_id, reason) in sorted(doomed.items()):
        pre = root / PREPROCESSED / build.name
        if pre.is_dir():  # derived from that build; each variant under its own lock
            yield from _variant_items(pre, f"preprocessed results of that build ({dataset_id})")
        yield build, reason, [_build_lock(build), *_variant_locks(build.name)]
    yield from prune_candidates(cutoff, older_than_days, keep_stale)
    if cutoff is not None:
        doomed_fps = {build.name for build in doomed}
        for variant in variant_dirs():
            if variant.parent.name in doomed_fps:
                continue
            found = variant_manifest(variant)
            created = _created(variant, found) if found else variant.stat().st_mtime
            if created < cutoff:
                yield variant, f"preprocessed result older than {older_than_days:g} days", [_build_lock(variant)]


def prune(
    *,
    older_than_days: float | None = None,
    keep_stale: bool = False,
    dry_run: bool = False,
    drop_resumable: bool = False,
) -> list[PruneItem]:
    """Remove leftovers of killed processes, broken builds, stale builds (an old on-disk format or loader
    ``format_version``: no ``load`` picks them again; kept with ``keep_stale``) and, with
    ``older_than_days``, builds older than that, each with its preprocessed variants.

    An interrupted build the next load would resume is kept (``kept``, its episodes done in ``reason``),
    unless ``drop_resumable`` or its last checkpoint is older than that (:mod:`datasets_hub.cache.resumable`).

    Every removal holds the lock the item's writer holds (a build, a preprocessing result, a
    download); whatever another process holds is skipped, never waited for, and returned with
    ``skipped`` saying why. A build is removed only when none of its preprocessing is in progress.
    """
    if older_than_days is not None and older_than_days < 0:
        raise ValueError(f"--older-than must be a number of days >= 0, got {older_than_days}")
    items: list[PruneItem] = []
    touched: set[Path] = set()
    kept: list[PruneItem] = []
    for path, reason, locks in list(_candidates(older_than_days, keep_stale, drop_resumable, kept)):
        if not os.path.lexists(path):
            continue
        item = PruneItem(path, reason, _size(path))
        items.append(item)
        with _hold_all(locks) as busy:
            if busy is not None:
                item.skipped = "in use by another process"
            elif DELETING_MARK in path.name:
                if not dry_run and not delete_doomed(path, wait=False):
                    item.skipped = "being deleted by another process"
            elif not dry_run:
                _delete(path)
                touched.add(path.parent)
    items.extend(kept)
    if not dry_run:
        builds = {build.name for build, _m in iter_builds(warn=False)}
        for parent in sorted(touched):
            # an orphaned <build-fp> folder left with nothing but lock files goes too (nothing can lock
            # a variant of a build that does not exist any more)
            if (
                parent.parent == preprocessed_root()
                and parent.name not in builds
                and parent.is_dir()
                and not any(p.is_dir() for p in parent.iterdir())
            ):
                remove_tree(parent)
    return items


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        remove_tree(path)
    else:
        path.unlink(missing_ok=True)
