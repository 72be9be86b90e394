"""Export a build to the files other tools read: LeRobot v3.0, Hugging Face ``datasets``, Minari, RLDS.

:func:`export_build` is what ``datasets_hub.export(..., format=...)`` and ``datasets-hub export
--format`` call for every format other than our own published form
(:mod:`datasets_hub.remote.publish`). One module per format holds its writer; each offers

- ``plan(episodes, out, options) -> plan``: every check of the build and of the options, done
  before a byte is written (a key the format cannot hold, an option it does not know);
- ``write(plan, episodes, staging, progress)``: the files, written episode by episode (one
  episode in memory at a time) into ``staging``.

The target folder is written as ``<dir>.incomplete`` and renamed into place when complete, so an
interrupted export leaves no folder that looks complete; an existing ``<dir>`` is refused (a
user's folder is never replaced or deleted). The build is read through
:func:`~datasets_hub.build.reader.open_build` only, which refuses a build still being written.
How each format maps a build's keys (terminated/truncated, next observations, what it cannot
hold) is in its module docstring and in ``docs/guide/export.md``.
"""

from __future__ import annotations

import importlib
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

from datasets_hub.build.reader import open_build
from datasets_hub.errors import CacheError, InvalidParameter, did_you_mean
from datasets_hub.exporters.episodes import BuildEpisodes

#: format name -> module of its writer
FORMATS = {
    "lerobot": "datasets_hub.exporters.lerobot",
    "hf": "datasets_hub.exporters.hf_datasets",
    "minari": "datasets_hub.exporters.minari",
    "rlds": "datasets_hub.exporters.rlds",
}
INCOMPLETE_SUFFIX = ".incomplete"
#: a file every staging folder holds while being written: only a folder with it is ever removed
STAGING_MARKER = ".datasets_hub-export-in-progress"


def format_module(name: str) -> Any:
    """The writer module of format ``name``; :class:`InvalidParameter` with the choices otherwise."""
    if name not in FORMATS:
        raise InvalidParameter(
            f"unknown export format {name!r}.{did_you_mean(str(name), [*FORMATS, 'published'], n=1)} Choose one of "
            f"'published' (default), {', '.join(map(repr, FORMATS))}"
        )
    return importlib.import_module(FORMATS[name])


def check_not_being_written(build_dir: Path) -> None:
    """Refuse a build folder that a build is still writing (``<dir>.incomplete``, or ``<dir>`` whose
    ``.incomplete`` twin exists while ``<dir>`` holds no manifest yet)."""
    from datasets_hub.build.format import MANIFEST

    twin = build_dir.with_name(build_dir.name + INCOMPLETE_SUFFIX)
    if build_dir.name.endswith(INCOMPLETE_SUFFIX) or (twin.exists() and not (build_dir / MANIFEST).exists()):
        raise CacheError(
            f"{build_dir} is a build still being written (or one a killed build left behind); wait until the "
            "build finishes (datasets_hub.load returns) and export the finished build"
        )


def staging_dir(out: Path) -> Path:
    """``<out>.incomplete``, empty and marked as ours; refuses when ``out`` exists or when the
    staging path holds something this code did not write."""
    if out.exists() or out.is_symlink():
        raise InvalidParameter(f"{out} already exists; export to a new folder (an export never replaces a folder)")
    staging = out.with_name(out.name + INCOMPLETE_SUFFIX)
    if staging.exists():
        if not (staging / STAGING_MARKER).is_file():
            raise InvalidParameter(
                f"{staging} exists and was not left by an export; move it away or export to another folder"
            )
        shutil.rmtree(staging)  # an interrupted export of ours
    staging.mkdir(parents=True)
    (staging / STAGING_MARKER).write_text("an export is writing this folder; it is renamed when complete\n")
    return staging


def export_build(
    build_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    format: str,
    *,
    show_progress: bool | None = None,
    **options: Any,
) -> Path:
    """Write the build at ``build_dir`` to ``out_dir`` in ``format`` (see :data:`FORMATS`); return
    ``out_dir``. ``options`` are the format's own (its module docstring lists them)."""
    from datasets_hub.progress import RowProgress

    module = format_module(format)
    build_path = Path(build_dir)
    check_not_being_written(build_path)
    episodes = BuildEpisodes(open_build(build_path))
    if episodes.has_history:
        warnings.warn(
            f"{build_path}: the frames kept before episodes' first steps (history/, for frame stacks) are no "
            f"transitions and format={format!r} cannot hold them: they are not exported",
            stacklevel=3,
        )
    out = Path(out_dir)
    plan = module.plan(episodes, out, options)  # every refusal happens here, before anything is written
    staging = staging_dir(out)
    try:
        with RowProgress(f"exporting to {format}", total=episodes.transitions, show=show_progress) as progress:
            module.write(plan, episodes, staging, progress)
        (staging / STAGING_MARKER).unlink()
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
