"""``datasets-hub verify``: does the cache still hold the bytes it recorded? (docs/design/on-disk.md)

:func:`verify` rehashes raw files (``downloads.fetch.verify_file``: against the catalogue sha256 or the
one recorded at first download) and every data file of a build against the sha256, dtype, shape and
rows the manifest's ``schema`` records. It checks the manifest itself against ``manifest.sha256``
(:data:`~datasets_hub.build.format.MANIFEST_SHA256`) when the build has one, and in any case against what can be recomputed
from the data: counts vs rows, episode return/length statistics, the fingerprint (id, params and
sources hash to the directory's name) and the id (the build's location). It only reads, and it
reports every mismatch with the file's path; what it could not check is a note, not a failure.
What the files should be (paths, sizes, rows per group) comes from :mod:`datasets_hub.build.format`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datasets_hub.build.format import (
    EPISODES,
    FRAME_CODECS,
    MANIFEST,
    MANIFEST_SHA256,
    group_rows,
    leaf_nbytes,
    leaf_path,
    read_manifest_checksum,
)
from datasets_hub.cache.layout import dataset_dir, raw_file_path, read_manifest
from datasets_hub.cache.maintenance import builds_of
from datasets_hub.errors import CacheError, HubError
from datasets_hub.files import human_bytes, sha256_file


@dataclass
class VerifyResult:
    """What :func:`verify` looked at: ``problems`` lists every mismatch with its file path."""

    dataset_id: str
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: with ``deep=True``: the data doctor's report on each build (or on the raw files) verified
    doctor: list[Any] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _verify_raw(path: Path, resource: Any, result: VerifyResult, *, origin: str = "catalogue") -> None:
    from datasets_hub.downloads.fetch import verify_file  # the download stack loads only when raw files are checked

    ok, message = verify_file(path, resource, origin=origin)
    (result.checked if ok else result.problems).append(message)


def _verify_data_file(build: Path, name: str, entry: dict[str, Any], result: VerifyResult) -> None:
    try:
        path = leaf_path(build, name)
    except CacheError as exc:
        result.problems.append(str(exc))
        return
    if not path.is_file():
        result.problems.append(f"{path}: missing (listed in the manifest's schema)")
        return
    size = path.stat().st_size
    expected = leaf_nbytes(entry)
    if expected is not None and size != expected:
        result.problems.append(
            f"{path}: {size} bytes, the manifest's schema says {expected} "
            f"({entry.get('rows')} rows of {entry.get('dtype')} {entry.get('shape')})"
        )
        return
    reference = entry.get("sha256")
    if not reference:
        result.notes.append(f"{path}: the manifest records no sha256 (older build); size checked only")
        return
    digest = sha256_file(path)
    if digest != reference:
        result.problems.append(
            f"{path}: sha256 {digest} does not match the manifest's {reference}; the build was modified or damaged"
        )
    else:
        result.checked.append(f"{path}: ok ({human_bytes(size)})")


def _stats_of(values: Any) -> dict[str, float]:
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(values.mean()),
        "std": float(values.std()),
        "min": float(values.min()),
        "max": float(values.max()),
    }


def _verify_manifest(build: Path, manifest: dict[str, Any], result: VerifyResult) -> None:
    """The manifest against its checksum, then against what the data says (fallback and belt)."""
    path = build / MANIFEST
    recorded = read_manifest_checksum(build)
    intact = False
    if recorded is not None:
        digest = sha256_file(path)
        if recorded != digest:
            result.problems.append(
                f"{path}: sha256 {digest} does not match {MANIFEST_SHA256} "
                f"({recorded or 'empty'}); the manifest was edited"
            )
        else:
            intact = True
            result.checked.append(f"{path}: ok (matches {MANIFEST_SHA256})")
    else:
        result.notes.append(
            f"{path}: no {MANIFEST_SHA256} beside it (built by an older version); "
            "checked the manifest's counts, statistics and fingerprint against the data instead"
        )
    where = f"{path}:"
    if manifest.get("fingerprint") not in (None, build.name):
        result.problems.append(
            f"{where} fingerprint {manifest.get('fingerprint')!r} is not the build directory's name {build.name!r}"
        )
    if manifest.get("id") and dataset_dir(str(manifest["id"])) != build.parent:
        result.problems.append(f"{where} id {manifest.get('id')!r} does not match the build's location {build.parent}")
    schema = manifest.get("schema") or {}
    counts = manifest.get("counts") or {}
    for name, entry in schema.items():
        rows = entry.get("rows")
        group = name.split("/", 1)[0]
        want = group_rows(group, counts)
        if want is not None and rows != want:
            result.problems.append(
                f"{where} schema {name!r} has {rows} rows but counts say {want} "
                f"({group} rows must equal {'transitions' if group == 'steps' else 'episodes' if group == 'episodes' else 'transitions + episodes'})"
            )
    _verify_stats(build, manifest, result)
    _verify_fingerprint(build, manifest, result, intact=intact)


def _verify_stats(build: Path, manifest: dict[str, Any], result: VerifyResult) -> None:
    import numpy as np

    schema = manifest.get("schema") or {}
    stats = manifest.get("stats") or {}
    for stat_key, column in (("episode_return", f"{EPISODES}/return"), ("episode_length", f"{EPISODES}/length")):
        entry, recorded = schema.get(column), stats.get(stat_key)
        if not entry or not recorded:
            continue
        try:
            file = leaf_path(build, column)
            if entry.get("sha256") and sha256_file(file) != entry["sha256"]:
                continue  # a damaged data file, reported by the data-file check, not a manifest edit
            values = np.fromfile(file, dtype=np.dtype(str(entry["dtype"])))
        except (OSError, TypeError, ValueError, CacheError):
            continue  # the data-file check reports it
        if values.size == 0 or values.size != entry.get("rows"):
            continue
        actual = _stats_of(values)
        for k, v in actual.items():
            have = recorded.get(k)
            if not isinstance(have, (int, float)) or abs(have - v) > 1e-9 * max(1.0, abs(v)):
                result.problems.append(
                    f"{build / MANIFEST}: stats.{stat_key}.{k} is {have!r} but the data "
                    f"({file.name}) gives {v!r}; the manifest was edited"
                )
                break


def _verify_fingerprint(build: Path, manifest: dict[str, Any], result: VerifyResult, *, intact: bool = False) -> None:
    """Does the manifest's id/params/sources still fingerprint to the directory's name?

    When they do not but the manifest matches its recorded checksum (``intact``), or the build was
    made by another version of the library, the loader or the storage format, the build is healthy:
    it is simply not the one today's catalogue and code would make. That is a note, never a problem
    (and never a reason to delete it); only an edited manifest is a problem.
    """
    dataset_id, params = manifest.get("id"), manifest.get("params")
    if not isinstance(dataset_id, str) or not isinstance(params, dict):
        result.problems.append(f"{build / MANIFEST}: no id/params; the manifest is not a datasets_hub build manifest")
        return
    from datasets_hub.build.frames import FrameCodec

    recorded = manifest.get("frames")  # a compressed build's codec enters its fingerprint
    if isinstance(recorded, dict) and recorded.get("codec") in FRAME_CODECS:
        choices: list[FrameCodec | None] = [FrameCodec(recorded["codec"], recorded.get("quality"))]
    else:  # raw: load()'s default choice (recorded by `info` and `verify` already), else raw by request
        choices = [None, FrameCodec()]
    for frames in choices:
        try:
            expected, _resources, format_version = _expected_build(dataset_id, params, frames)
        except HubError as exc:  # loader not installed, id only registered in another process…
            result.notes.append(f"{build}: fingerprint not recomputed ({exc})")
            return
        if expected.name == build.name:
            return
    from datasets_hub import __version__
    from datasets_hub.build.format import STORAGE_FORMAT_VERSION

    made_by = (
        manifest.get("hub_version"),
        manifest.get("loader_format_version"),
        manifest.get("storage_format_version"),
    )
    now = (__version__, format_version, STORAGE_FORMAT_VERSION)
    if intact or made_by != now:
        result.notes.append(
            f"{build}: a healthy build made by datasets_hub {made_by[0]} (loader format {made_by[1]}, storage "
            f"format {made_by[2]}) or from an earlier catalogue entry; this version and catalogue "
            f"(datasets_hub {now[0]}, loader format {now[1]}) build {expected.name} instead, so `load` does not "
            "use it. It is intact; keep it for code that still uses it, or remove it when nothing does"
        )
        return
    result.problems.append(
        f"{build / MANIFEST}: its id, params and sources fingerprint to {expected.name}, not to the "
        f"directory {build.name}, and no {MANIFEST_SHA256} vouches for it: the manifest was edited"
    )


def _verify_preprocessed(build: Path, result: VerifyResult) -> None:
    """Every published preprocessing result of ``build``: manifest, paths, sizes, recorded sha256."""
    from datasets_hub.build.checks import check_preprocessed
    from datasets_hub.cache.layout import cache_root, manifest_or_problem

    parent = cache_root() / "preprocessed" / build.name
    if not parent.is_dir():
        return
    for variant in sorted(p for p in parent.iterdir() if p.is_dir() and (p / MANIFEST).is_file()):
        manifest, problem = manifest_or_problem(variant)
        if manifest is None:
            result.problems.append(f"{variant}: {problem}")
            continue
        try:
            columns = check_preprocessed(variant, manifest)
        except CacheError as exc:
            result.problems.append(str(exc))
            continue
        for name, (_dtype, _shape, path) in sorted(columns.items()):
            reference = (manifest["schema"][name] or {}).get("sha256")
            if not reference or not path.exists():
                continue
            digest = sha256_file(path)
            if digest != reference:
                result.problems.append(f"{path}: sha256 {digest} does not match the preprocessing manifest's "
                                       f"{reference}; the result was modified or damaged: `datasets-hub cache rm "
                                       f"{build.name}/{variant.name}` and preprocess again")  # fmt: skip
            else:
                result.checked.append(f"{path}: ok")
        result.checked.append(f"{variant}: preprocessing result consistent")


def _verify_in_place(source: dict[str, Any], result: VerifyResult) -> None:
    """A user's file the build was read from in place: rehashed where it is, against the manifest."""
    from datasets_hub.downloads.in_place import local_path
    from datasets_hub.errors import DownloadError
    from datasets_hub.loader import Resource

    resource = Resource(name=str(source.get("name")), urls=(str(source.get("url")),), in_place=True)
    try:
        path = local_path(resource)
    except DownloadError as exc:
        result.notes.append(f"{exc}; the build does not need it")
        return
    digest = sha256_file(path)
    if digest != source.get("sha256"):
        result.notes.append(
            f"{path}: read in place, now sha256 {digest}, not the {source.get('sha256')} the build was made from; "
            "the build is intact, `load` builds again from the new bytes"
        )
    else:
        result.checked.append(f"{path}: ok (read in place, sha256 as recorded in the build's manifest)")


def verify_build(build: Path, result: VerifyResult | None = None, *, raw: bool = True) -> VerifyResult:
    """Check one build directory (and, with ``raw``, the raw files its manifest names)."""
    build = Path(build)
    manifest = read_manifest(build)
    if manifest is None:
        raise CacheError(f"{build} holds no complete build (no {MANIFEST})")
    result = result or VerifyResult(str(manifest.get("id", build)))
    _verify_manifest(build, manifest, result)
    _verify_preprocessed(build, result)
    for name, entry in sorted((manifest.get("schema") or {}).items()):
        _verify_data_file(build, name, entry, result)
    if raw:
        from datasets_hub.loader import Resource

        for source in manifest.get("sources") or []:
            if source.get("in_place"):
                _verify_in_place(source, result)
                continue
            key = source.get("key")
            path = raw_file_path(str(manifest.get("loader")), str(source.get("name")), str(key) if key else None)
            if not path.exists():
                result.notes.append(
                    f"{path}: raw file not in the cache (removed with `rm --raw`?); the build does not need it"
                )
                continue
            resource = Resource(
                name=str(source["name"]),
                urls=(str(source.get("url") or "file:///"),),
                sha256=source.get("sha256"),
                size=source.get("bytes"),
            )
            # the manifest's sha256 is the catalogue's, or the one recorded when the file was first downloaded
            _verify_raw(path, resource, result, origin="build's manifest")
    return result


def _expected_build(dataset_id: str, params: dict[str, Any], frames: Any = None) -> tuple[Path, list[Any], int]:
    """``(build path, resources, loader format_version)`` that ``load(dataset_id, **params)`` uses (``frames``:
    the build's :class:`~datasets_hub.build.frames.FrameCodec`, default the one ``load`` picks). They are
    recorded facts (:mod:`datasets_hub.cache.catalogue_builds`: no torch, and no loader import once recorded)."""
    from datasets_hub.cache.catalogue_builds import catalogue_build_record
    from datasets_hub.catalogue import resolve
    from datasets_hub.loader import Resource
    from datasets_hub.plugin_facts import loader_facts

    codec = {} if frames is None else {"frames": frames.codec, "frame_quality": frames.quality}
    name, resources = catalogue_build_record(dataset_id, params, **codec)
    facts = loader_facts(resolve(dataset_id).loader)
    return dataset_dir(dataset_id) / name, [Resource.from_dict(r) for r in resources], facts.format_version


def verify(
    dataset_id: str, *, params: dict[str, Any] | None = None, all_builds: bool = False, deep: bool = False
) -> VerifyResult:
    """Verify the build of ``dataset_id`` for ``params`` (or every build), and its raw files.

    Without a build, the raw files the catalogue names are verified. Nothing in the cache at all
    is a :class:`CacheError` (there is nothing to vouch for). ``deep=True`` also looks at the data:
    the data doctor (:func:`datasets_hub.doctor.diagnosis.diagnose`) examines every build verified, or the raw
    files when there is no build, and its reports are in ``result.doctor``.
    """
    result = _verify_bytes(dataset_id, params=params, all_builds=all_builds)
    if deep:
        from datasets_hub.doctor.diagnosis import diagnose_cached

        result.doctor = diagnose_cached(dataset_id, params=params, all_builds=all_builds)
    return result


def _verify_bytes(dataset_id: str, *, params: dict[str, Any] | None, all_builds: bool) -> VerifyResult:
    result = VerifyResult(dataset_id)
    if all_builds:
        builds = builds_of(dataset_id)
        if not builds:
            raise CacheError(
                f"no build of {dataset_id!r} in the cache ({dataset_dir(dataset_id)}); "
                f"run `datasets-hub download {dataset_id}`"
            )
        for build in builds:
            verify_build(build, result)
        return result
    build, resources, _format_version = _expected_build(dataset_id, params or {})
    if read_manifest(build) is not None:
        return verify_build(build, result)
    raw_found = False
    from datasets_hub.downloads.fetch import source_key

    for resource in resources:
        path = raw_file_path(dataset_id.split("/", 1)[0], resource.name, source_key(resource))
        if path.exists():
            raw_found = True
            _verify_raw(path, resource, result)
    if not raw_found:
        others = builds_of(dataset_id)
        hint = f" ({len(others)} build(s) with other params exist: use --all-builds)" if others else ""
        raise CacheError(f"{dataset_id!r} is not in the cache{hint}; run `datasets-hub download {dataset_id}`")
    result.notes.append(f"{build}: not built yet; only raw files were verified")
    return result
