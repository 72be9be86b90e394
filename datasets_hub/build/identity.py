"""The name of a build: the fingerprint of what it is made from (docs/design/on-disk.md).

Kept apart from :mod:`datasets_hub.build.pipeline` (which converts, and imports torch) so that naming the
build of some params (``datasets-hub info/verify/rm --param``) imports neither torch nor more than the
id's loader module.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from datasets_hub.build.format import STORAGE_FORMAT_VERSION
from datasets_hub.cache.layout import dataset_dir, fingerprint, read_manifest
from datasets_hub.redact import redact_value

if TYPE_CHECKING:
    from datasets_hub.build.frames import FrameCodec
    from datasets_hub.loader import DatasetSpec, Loader


def build_fingerprint(spec: DatasetSpec, loader: Loader, frames: FrameCodec | None = None) -> str:
    """hash(id, params, sources, loader format_version, storage format version[, frame codec]).

    A build with compressed frames (``frames``: JPEG and its quality, or PNG) adds its codec; a raw build
    hashes exactly as before frame codecs existed, so existing builds are found again.

    Sources enter by identity (name, :func:`~datasets_hub.downloads.fetch.source_key`: the catalogue's
    sha256, else the URL without credentials or signatures, and the size), so a build can be found
    without re-hashing multi-GB raw files, and another URL is another build; files without a
    catalogue checksum are pinned by the sha256 recorded at first download, which `datasets-hub
    verify` checks. Params enter redacted (a password is not part of what the data is).
    """
    from datasets_hub.downloads.fetch import source_key
    from datasets_hub.downloads.in_place import identified  # a file read in place enters by its content

    identity = {
        "id": spec.id,
        "loader": loader.name,
        "params": redact_value(spec.params),
        "sources": [[r.name, r.sha256, r.size, source_key(r)] for r in map(identified, loader.resources(spec))],
        "loader_format_version": loader.format_version,
        "storage_format_version": STORAGE_FORMAT_VERSION,
    }
    if frames is not None and frames.compressed:
        identity["frames"] = frames.to_json()
    return fingerprint(identity)


def build_path(spec: DatasetSpec, loader: Loader, frames: FrameCodec | None = None) -> Path:
    """The folder of that build in the cache (complete once it holds a manifest)."""
    return dataset_dir(spec.id) / build_fingerprint(spec, loader, frames)


def chosen_build_path(
    spec: DatasetSpec, loader: Loader, codec: FrameCodec, frames: str | None, frame_quality: int | None
) -> Path:
    """The build ``load(spec.id, frames=frames, frame_quality=frame_quality)`` uses, ``codec`` being what that
    choice resolved to (:func:`datasets_hub.build.frames.resolve_frames`).

    The default choice (``frames=None`` or ``"auto"``, no quality) that resolved to a compressed codec by the
    loader's size estimate takes an exact raw build already in the cache instead, when the compressed one is
    not there: it holds the same frames exactly (a build made before the loader could estimate, or asked for
    with ``frames="raw"``), and the user asked for no particular storage. Any explicit choice is its own
    build. The cache is looked at on each call (two stats), so the answer follows it."""
    path = build_path(spec, loader, codec)
    if frames in (None, "auto") and frame_quality is None and codec.compressed:
        return path.parent / present_build(path.parent, path.name, build_path(spec, loader, None).name)
    return path


def present_build(folder: Path, chosen: str, exact_alternative: str | None) -> str:
    """``chosen`` (a build folder name under ``folder``), or ``exact_alternative`` when only that one is built:
    the rule of :func:`chosen_build_path` on names, for callers that recorded them (``datasets-hub info``)."""
    if exact_alternative and read_manifest(folder / chosen) is None and read_manifest(folder / exact_alternative):
        return exact_alternative
    return chosen
