"""Atomic, concurrent-safe builds of one dataset (docs/design/on-disk.md).

A build is written into ``<dir>.incomplete`` while holding ``<dir>.lock``, its manifest is
written last, and the directory is renamed into place: a directory with a manifest is a complete
build, anything else is invisible. Processes that ask for the same build at once wait on the
lock; the first one builds, the others find the manifest and return.

A loader that finds a raw file malformed raises :class:`~datasets_hub.errors.CorruptFile`; the
build moves that file aside to ``<name>.corrupt`` (so the next load downloads it again instead of
failing on the same bytes forever) and re-raises naming the URL it came from.

A build by a ``resumable`` loader keeps checkpoints in its staging folder
(:mod:`datasets_hub.build.resume`): when it stops on an error, Ctrl-C or ``kill -9``, the staging
folder stays and the next build of the same fingerprint goes on after the last checkpoint instead of
starting over (a corrupt source file, ``force=True`` or a checkpoint that fails its checks start over).

Nothing is fsynced (on ext4 one fsync flushes the whole build and doubled build times): a killed
process never publishes a build, and after a power loss `datasets-hub verify` finds a damaged one
through the per-file sha256 the manifest records.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from datasets_hub import __version__
from datasets_hub.build import resume
from datasets_hub.build.format import (
    FORMAT,
    MANIFEST,
    STORAGE_FORMAT_VERSION,
    format_version_of,
    write_manifest_checksum,
)
from datasets_hub.build.frames import FrameCodec, require_codec_libraries
from datasets_hub.build.identity import build_path
from datasets_hub.build.writer import LeanTEDWriter
from datasets_hub.cache.layout import (
    INCOMPLETE_SUFFIX,
    ensure_writable_dir,
    file_lock,
    is_disk_full,
    manifest_or_problem,
    read_manifest,
    remove_tree,
)
from datasets_hub.errors import CacheError, CorruptFile, HubError, LoaderError
from datasets_hub.files import write_json_atomic
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext
from datasets_hub.progress import RowProgress
from datasets_hub.redact import redact_value
from datasets_hub.ted_contract import check_chunk


def catalogue_rows(spec: DatasetSpec) -> int | None:
    """The transitions the catalogue entry says the build will hold (its optional ``transitions``), or None."""
    rows = spec.metadata.get("transitions")
    return rows if isinstance(rows, int) and not isinstance(rows, bool) and rows > 0 else None


def build(
    spec: DatasetSpec,
    loader: Loader,
    files: Mapping[str, Path],
    sources: list[dict[str, Any]],
    *,
    force: bool = False,
    chunk_rows: int = 65536,
    frames: FrameCodec | None = None,
) -> Path:
    """Convert ``files`` with ``loader`` into the build directory of ``spec`` and return it.

    Returns at once if a complete build exists (unless ``force``). ``sources`` is the provenance
    recorded in the manifest (url, sha256, bytes per raw file). ``frames`` stores the camera keys
    compressed (:mod:`datasets_hub.build.frames`); default raw.
    """
    final = build_path(spec, loader, frames)
    if not force and read_manifest(final) is not None:
        return final
    ensure_writable_dir(final.parent)
    with file_lock(final.with_name(final.name + ".lock")):
        manifest, broken = manifest_or_problem(final)
        if broken and not force:
            raise CacheError(broken)
        if manifest is not None and not force:
            return final  # another process built it while we waited
        incomplete = final.with_name(final.name + INCOMPLETE_SUFFIX)
        if incomplete.exists() and (force or not loader.resumable):
            remove_tree(incomplete)  # left by a process that was killed mid-build
        try:
            manifest = _convert(spec, loader, files, sources, incomplete, final.name, chunk_rows, frames)
            resume.drop_checkpoint(incomplete)  # the complete build is published without it
            write_json_atomic(incomplete / MANIFEST, manifest)
            write_manifest_checksum(incomplete)  # published with the manifest by the same rename
            if final.exists():
                remove_tree(final)  # readers with open memmaps keep their (unlinked) files
            os.replace(incomplete, final)
        except BaseException as exc:
            # a resumable build keeps what its last checkpoint vouches for; a corrupt source may have fed it
            kept = loader.resumable and resume.has_checkpoint(incomplete) and not isinstance(exc, CorruptFile)
            if not kept:
                remove_tree(incomplete)
            if isinstance(exc, CorruptFile):
                _quarantine(exc, spec, files, sources)
            if is_disk_full(exc):
                where = (
                    f"the build so far is kept in {incomplete} and the next load resumes it"
                    if kept
                    else "the partial build was removed"
                )
                raise CacheError(
                    f"the disk filled up while building {spec.id!r} ({exc}); {where}. Free space (e.g. "
                    "`datasets-hub cache prune`) or point DATASETS_HUB_CACHE elsewhere, then load again"
                ) from exc
            raise
    return final


def _quarantine(exc: CorruptFile, spec: DatasetSpec, files: Mapping[str, Path], sources: list[dict[str, Any]]) -> None:
    """Move the raw file a loader found malformed to ``<name>.corrupt`` and re-raise naming its URL.

    A truncated or damaged download must not be reused: with it gone, the next load fetches the
    file again. Files that are not raw downloads of this build are left alone.
    """
    if exc.path is None:
        return
    bad = Path(str(exc.path)).absolute()
    name = next((n for n, p in files.items() if Path(p).absolute() == bad), None)
    if name is None or not bad.is_file():
        return
    from datasets_hub.downloads.fetch import read_sidecar, sidecar_path

    url = (
        (read_sidecar(bad) or {}).get("url")
        or next((s.get("url") for s in sources if s.get("name") == name), None)
        or "an unknown URL"
    )
    corrupt = bad.with_name(bad.name + ".corrupt")
    try:  # the download lock: never move a file another process is publishing right now
        with file_lock(bad.with_name(bad.name + ".lock"), timeout=30):
            os.replace(bad, corrupt)
            sidecar_path(bad).unlink(missing_ok=True)
    except Exception as move_error:  # noqa: BLE001 - a read-only cache, a lock held too long: say so, keep the cause
        raise CorruptFile(
            f"{exc} [{spec.id}: {name} came from {url}; it could not be moved aside ({move_error}): delete {bad} "
            "and load again]",
            path=bad,
        ) from exc
    raise CorruptFile(
        f"{exc} [{spec.id}: {name} came from {url}; it was moved aside to {corrupt} and the next load downloads "
        "it again. If that fails the same way, the upstream file itself is damaged: use a mirror "
        "(DATASETS_HUB_ENDPOINT_<LOADER>) or report it upstream]",
        path=corrupt,
    ) from exc


def _chunks_of(loader: Loader, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext):
    """The loader's chunks, with its non-hub errors re-raised as ``LoaderError`` naming the dataset."""
    chunks = iter(loader.episodes(spec, files, ctx))
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            return
        except (HubError, KeyboardInterrupt, MemoryError):
            raise
        except OSError as exc:
            if is_disk_full(exc):
                raise
            raise LoaderError(f"the {loader.name!r} loader failed to read {spec.id!r}: {exc}") from exc
        except Exception as exc:
            raise LoaderError(f"the {loader.name!r} loader failed on {spec.id!r}: {type(exc).__name__}: {exc}") from exc
        yield chunk


def _writer_for(
    target: Path, build_fp: str, loader: Loader, frames: FrameCodec | None
) -> tuple[LeanTEDWriter, resume.Checkpoint | None]:
    """The writer of the staging folder ``target``: resumed from its checkpoint when there is a usable one
    (a resumable loader's interrupted build), else a new one in an emptied folder."""
    checkpoint = resume.load_checkpoint(target, build_fp) if loader.resumable else None
    if checkpoint is not None:
        writer = LeanTEDWriter.resume(target / "data", checkpoint.writer, frames=frames)
        if writer is not None:
            return writer, checkpoint
    if target.exists():
        remove_tree(target)  # no checkpoint, or one its files disagree with: start over
    return LeanTEDWriter(target / "data", frames=frames), None


def _convert(
    spec: DatasetSpec,
    loader: Loader,
    files: Mapping[str, Path],
    sources: list[dict[str, Any]],
    target: Path,
    build_fp: str,
    chunk_rows: int,
    frames: FrameCodec | None = None,
) -> dict[str, Any]:
    started = time.time()
    if frames is not None:
        require_codec_libraries(frames)
    writer, checkpoint = _writer_for(target, build_fp, loader, frames)
    # A build's tensor ops are small per chunk; torch's intra-op thread pool then spins against the
    # writer's IO thread and made a 1M-row build ~1.5x slower on 2 cores. One thread while building.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # the total: the catalogue's count, replaced by the loader's own (ctx.expect) when it knows one
        with RowProgress(f"building {spec.id}", catalogue_rows(spec)) as bar:
            reported = False  # a loader that reports its reads drives the bar; otherwise the rows written do

            def read(n: int) -> None:
                nonlocal reported
                reported = True
                bar.update(n)

            ctx = LoaderContext(chunk_rows=chunk_rows, progress=read, expect=bar.set_total)
            if checkpoint is not None:
                ctx.done_episodes = checkpoint.done_episodes
                ctx.notes.update(checkpoint.notes)
                bar.update(writer.num_transitions)
            saved, unsaved = time.monotonic(), False
            for chunk in _chunks_of(loader, spec, files, ctx):
                check_chunk(chunk, loader.name, spec.id)  # the sample-level contract, naming loader and key
                writer.write(chunk)  # TED violations and write errors (a full disk) propagate as they are
                if not reported:
                    bar.update(int(chunk.batch_size[0]) if chunk.batch_dims else 0)
                unsaved = loader.resumable
                if unsaved and time.monotonic() - saved >= resume.CHECKPOINT_EVERY_S:
                    resume.save_checkpoint(target, build_fp, writer.checkpoint(), ctx.notes)
                    saved, unsaved = time.monotonic(), False
            if unsaved:  # sealing can fail too (a full disk): it then redoes no episode
                resume.save_checkpoint(target, build_fp, writer.checkpoint(), ctx.notes)
        summary = writer.finish()
    except BaseException:
        writer.abort()  # stop the IO thread before the caller removes the directory
        raise
    finally:
        torch.set_num_threads(threads)
    return {
        "format": FORMAT,
        "version": format_version_of(summary["layout"]),
        "id": spec.id,
        "fingerprint": build_fp,
        "loader": loader.name,
        "loader_format_version": loader.format_version,
        "storage_format_version": STORAGE_FORMAT_VERSION,
        "params": redact_value(spec.params),
        "frames": (frames or FrameCodec()).to_json(),
        "sources": redact_value(sources),
        "metadata": redact_value(spec.metadata),
        "notes": ctx.notes,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": round(time.time() - started, 3),
        "hub_version": __version__,
        **summary,
    }
