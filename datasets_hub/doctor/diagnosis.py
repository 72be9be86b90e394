"""The data doctor's entry point: :func:`diagnose` reads a source and runs every check family on it.

Sources: a dataset id of the catalogue (its build when there is one, else the raw files already in
the cache), a replay buffer or storage over a build, a build directory, a LeRobot dataset root, an
HDF5, npz or TFRecord file, or a folder of TFRecord shards. Each is read by its source module into a
:class:`~datasets_hub.doctor.steps.StepTable` (plus the findings its metadata gives), then the step
checks run on it: structure, timing, numeric health, termination flags, reward alignment,
teleports, duplicates and the declared action space (docs/guide/doctor.md lists every class).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from datasets_hub.doctor import (
    action_space,
    alignment,
    array_sources,
    duplicates,
    lerobot_source,
    numeric,
    structure,
    teleports,
    termination,
    tfrecord_source,
    timing,
)
from datasets_hub.doctor.findings import DoctorReport
from datasets_hub.doctor.steps import ActionSpace, SourceRead
from datasets_hub.errors import CacheError, InvalidParameter

#: rows the step checks read from one source by default: beyond it, whole episodes are sampled
DEFAULT_MAX_ROWS = 1_000_000
HDF5_SUFFIXES = (".hdf5", ".h5", ".he5")


def _step_checks(read: SourceRead) -> list[str]:
    table = read.table
    if table is None:
        return []
    families = []
    for family, run in (
        (structure.FAMILY, lambda: structure.check(table, has_step_column=read.has_step_column)),
        (timing.FAMILY, lambda: timing.check(table)),
        (numeric.FAMILY, lambda: numeric.check(table, read.notes)),
        (termination.FAMILY, lambda: termination.check(table)),
        (alignment.FAMILY, lambda: alignment.check(table)),
        (teleports.FAMILY, lambda: teleports.check(table)),
        (duplicates.FAMILY, lambda: duplicates.check(table)),
        (action_space.FAMILY, lambda: action_space.check(table)),
    ):
        if family in read.families:  # the reader ran it itself, over more rows than the table holds
            continue
        read.findings.extend(run())
        families.append(family)
    return families


def _is_tfrecord(path: Path) -> bool:
    return ".tfrecord" in path.name or path.suffix == ".tfrecord"


def _read_path(path: Path, *, max_rows: int, seed: int, video_sample: int) -> list[SourceRead]:
    if path.is_dir():
        if (path / "manifest.json").is_file():
            from datasets_hub.doctor.build_source import read_build

            return [read_build(path, max_rows=max_rows, seed=seed)]
        files = lerobot_source.files_under(path)
        return _read_files(files, str(path), max_rows=max_rows, seed=seed, video_sample=video_sample)
    if path.is_file():
        return _read_files({path.name: path}, str(path), max_rows=max_rows, seed=seed, video_sample=video_sample)
    raise InvalidParameter(f"{path} does not exist")


def _read_files(files: dict[str, Path], where: str, *, max_rows: int, seed: int, video_sample: int) -> list[SourceRead]:
    """The sources among ``files`` (relative name -> local path): one LeRobot dataset, or each HDF5/npz
    file, and all TFRecord files together."""
    if lerobot_source.is_lerobot(files):
        return [
            lerobot_source.read_lerobot(files, where=where, max_rows=max_rows, video_sample=video_sample, seed=seed)
        ]
    reads = []
    for _, path in sorted(files.items()):
        if path.suffix in HDF5_SUFFIXES:
            reads.append(array_sources.read_hdf5(path, max_rows=max_rows, seed=seed))
        elif path.suffix == ".npz":
            reads.append(array_sources.read_npz(path, max_rows=max_rows, seed=seed))
    shards = [p for _, p in sorted(files.items()) if _is_tfrecord(p)]
    if shards:
        reads.append(tfrecord_source.read_tfrecords(shards, max_rows=max_rows))
    if not reads:
        raise InvalidParameter(
            f"{where}: nothing the doctor can read (a build directory, a LeRobot root with meta/info.json, "
            "HDF5, npz or TFRecord files)"
        )
    return reads


def _read_id(dataset_id: str, params: dict[str, Any] | None, **kw: Any) -> tuple[list[SourceRead], str]:
    from datasets_hub.build.format import MANIFEST
    from datasets_hub.cache.maintenance import catalogue_build

    spec, loader, build = catalogue_build(dataset_id, params)
    if (build / MANIFEST).is_file():
        from datasets_hub.doctor.build_source import read_build

        return [read_build(build, max_rows=kw["max_rows"], seed=kw["seed"])], str(build)
    from datasets_hub.cache.layout import raw_file_path
    from datasets_hub.downloads.fetch import source_key

    files = {}
    for resource in loader.resources(spec):
        path = raw_file_path(loader.name, resource.name, source_key(resource))
        if path.is_file():
            files[resource.name] = path
    if not files:
        raise CacheError(
            f"{dataset_id!r} has neither a build nor raw files in the cache; run `datasets-hub download "
            f"{dataset_id}` (or point the doctor at the files)"
        )
    return _read_files(files, f"{dataset_id} (raw files)", **kw), f"{dataset_id} (raw files, not built)"


def _as_space(space: Any) -> ActionSpace | None:
    if space is None or isinstance(space, ActionSpace):
        return space
    if isinstance(space, dict):
        found = ActionSpace.from_gymnasium_json(space, "the action_space argument")
        if found is None:
            raise InvalidParameter(
                f"action_space={space!r}: give a Box as {{'type': 'Box', 'low': ..., 'high': ...}} or a "
                "Discrete as {'type': 'Discrete', 'n': ...}"
            )
        return found
    if isinstance(space, (tuple, list)) and len(space) == 2:
        import numpy as np

        return ActionSpace(
            "the action_space argument", low=np.asarray(space[0], float), high=np.asarray(space[1], float)
        )
    raise InvalidParameter(f"action_space must be (low, high), a gymnasium-style dict or an ActionSpace, got {space!r}")


def diagnose(
    target: Any,
    *,
    params: dict[str, Any] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    video_sample: int = 8,
    action_space: Any = None,
    seed: int = 0,
) -> DoctorReport:
    """Look for the defects public datasets have (docs/guide/doctor.md) in ``target`` and report them.

    ``target``: a catalogue id (``params`` override the catalogue's), a replay buffer or
    :class:`~datasets_hub.build.storage.DatasetStorage` over a build, or a path (a build directory, a
    LeRobot root, an HDF5/npz/TFRecord file, a folder of such files). ``max_rows``: the step checks read
    at most about this many rows, as whole episodes drawn with ``seed``; ``video_sample``: how many
    episode ends are decoded to confirm the video headers; ``action_space``: ``(low, high)`` or a
    gymnasium-style dict, for sources that declare none (it replaces a declared one).

    Never raises for defects in the data: those are findings. Raises :class:`InvalidParameter` for a
    target it cannot read and :class:`CacheError` for an id with nothing in the cache.
    """
    if max_rows < 1:
        raise InvalidParameter(f"max_rows must be a positive integer, got {max_rows}")
    if params and not (isinstance(target, str) and not Path(target).exists()):
        raise InvalidParameter("params= selects the build of a catalogue id; this target is a path or a buffer")
    space = _as_space(action_space)
    began = time.perf_counter()
    kw = {"max_rows": int(max_rows), "seed": int(seed), "video_sample": int(video_sample)}
    storage = getattr(target, "storage", target)
    if isinstance(target, (str, Path)) and Path(target).exists():
        reads, name = _read_path(Path(target), **kw), str(target)
    elif isinstance(target, str):
        reads, name = _read_id(target, params, **kw)
    elif isinstance(getattr(storage, "path", None), Path) and (storage.path / "manifest.json").is_file():
        status = storage.fill_status() if callable(getattr(storage, "fill_status", None)) else {"complete": True}
        if not status.get("complete"):  # a remote build's local copy: unfetched chunks read as zeros
            raise InvalidParameter(
                f"{getattr(storage, 'url', storage.path)} is only partly resident here "
                f"({status.get('resident_bytes')} of {status.get('total_bytes')} bytes): the doctor would read "
                "unfetched chunks as zeros. Load it with resident='full' and call wait_complete() first, or "
                "diagnose the build where it was made"
            )
        from datasets_hub.doctor.build_source import read_build

        reads, name = [read_build(storage.path, max_rows=kw["max_rows"], seed=kw["seed"])], str(storage.path)
    else:
        raise InvalidParameter(
            f"the doctor reads a dataset id, a path, or a buffer over a build; got {type(target).__name__} "
            "(an in-memory buffer has no source to examine: diagnose the dataset it was loaded from)"
        )
    report = DoctorReport(target=name, kind="+".join(dict.fromkeys(r.kind for r in reads)))
    for read in reads:
        if space is not None and read.table is not None:
            read.table.action_space = space
        if read.table is not None and read.table.action is not None and read.table.action_space is None:
            read.notes.append(
                f"{read.kind}: no action space declared: actions were not checked against one (action_space=)"
            )
        families = [*read.families, *_step_checks(read)]
        report.checks += [f for f in families if f not in report.checks]
        report.findings += read.findings
        report.notes += read.notes
        report.rows += read.rows
        report.episodes += read.episodes
        report.rows_read += 0 if read.table is None else len(read.table)
        report.sampled = report.sampled or read.sampled
    report.seconds = time.perf_counter() - began
    return report


def diagnose_cached(
    dataset_id: str, *, params: dict[str, Any] | None = None, all_builds: bool = False, **options: Any
) -> list[DoctorReport]:
    """What ``verify --deep`` examines: every cached build of ``dataset_id`` (``all_builds``), else the
    build for ``params``, else its raw files in the cache; ``options`` go to :func:`diagnose`."""
    from datasets_hub.cache.maintenance import builds_of

    builds = builds_of(dataset_id) if all_builds else []
    if builds:
        return [diagnose(build, **options) for build in builds]
    return [diagnose(dataset_id, params=params, **options)]
