"""Publish a build: ``export`` writes it in a form any node can load from a URL.

A published build is a folder (a Hugging Face dataset repo, an S3 prefix, any HTTP directory):

```
manifest.json     the build's own manifest, byte for byte (so its hash still matches)
published.json    how the data is laid out here: zarr format, chunk rows per array, and the sha256 and
                  size of every file, so a reader verifies each chunk it fetches
README.md         a dataset card in the Hugging Face convention (YAML front matter + text)
data.zarr/        one zarr v3 array per stored leaf of the build (same names as the build's schema),
                  chunked along rows, zstd-compressed, every chunk written (also all-zero ones)
```

Why zarr v3 without sharding: a chunk file is the unit a reader fetches and verifies, so every chunk has
its own file and its own sha256 in ``published.json``; chunks are sized (``chunk_bytes``) so that one
fetch is worth its latency. Nothing is converted again on the reading side: the chunks are decoded into
the same memory-mapped build the hub makes locally (see :mod:`datasets_hub.remote.open_url`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from datasets_hub import __version__
from datasets_hub.build.format import MANIFEST
from datasets_hub.build.reader import open_build
from datasets_hub.errors import CacheError, HubError, InvalidParameter, MissingDependency, UploadError
from datasets_hub.files import sha256_file
from datasets_hub.remote.format import (
    DEFAULT_CHUNK_BYTES,
    MAX_CHUNK_BYTES,
    PUBLISHED,
    PUBLISHED_FORMAT,
    PUBLISHED_VERSION,
    ZARR_DIR,
    chunk_rows_for,
    numpy_dtype,
    require_zarr,
)

STAGING_MARK = ".datasets_hub-export-staging"  # in <out>.incomplete while export writes it


def _write_chunk(path: Path, rows: np.ndarray, chunk_rows: int, dtype: np.dtype, zstd: Any) -> dict[str, Any]:
    """Write one chunk file as zarr v3 stores it under the array's codecs (``bytes`` little-endian, then
    ``zstd``): the chunk's C-order bytes, an edge chunk padded with the fill value (0) to the full chunk
    shape, in one zstd frame. Returns the file's sha256 and size, taken from the bytes written (never
    read back). Written here rather than through ``zarr.Array.__setitem__``, whose per-chunk machinery
    cost three times the compression itself; readers decode these files with zarr."""
    data = np.ascontiguousarray(rows, dtype=dtype.newbyteorder("<"))
    if len(data) < chunk_rows:
        data = np.concatenate([data, np.zeros((chunk_rows - len(data), *data.shape[1:]), dtype=data.dtype)])
    encoded = bytes(zstd.encode(data))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encoded)
    return {"sha256": hashlib.sha256(encoded).hexdigest(), "bytes": len(encoded)}


def _resolve_build(source: Any, params: dict[str, Any]) -> Path:
    """A build directory from a dataset id, a build path, or a buffer over a build."""
    storage = getattr(source, "storage", None)
    from datasets_hub.remote.storage import ResidentStorage

    if isinstance(storage, ResidentStorage):  # its sparse files read as zeros where chunks are missing
        raise InvalidParameter(
            f"{storage.url} is only partly resident here: export the build it was published from, or load it "
            "with resident='full', call rb.storage.wait_complete(), and load it again (a complete copy)"
        )
    if storage is not None and getattr(storage, "path", None) is not None:
        return Path(storage.path)
    if isinstance(source, Path) or (isinstance(source, str) and os.path.isdir(source)):
        return Path(source)
    if isinstance(source, str):
        from datasets_hub.hub import download

        return download(source, **params)
    raise InvalidParameter(
        f"export() takes a dataset id, a build directory or a buffer loaded from a build, got {source!r}"
    )


def export(
    source: Any,
    out_dir: str | os.PathLike[str],
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    compression_level: int = 3,
    overwrite: bool = False,
    format: str = "published",
    options: dict[str, Any] | None = None,
    show_progress: bool | None = None,
    **params: Any,
) -> Path:
    """Write the build of ``source`` (an id, a build directory, or a loaded buffer) to ``out_dir`` in the
    published form described in the module docstring; return ``out_dir``.

    ``format`` picks another form: ``"lerobot"`` (LeRobot v3.0), ``"hf"`` (Hugging Face ``datasets``
    parquet), ``"minari"`` (a Minari dataset folder), ``"rlds"`` (a TFDS builder directory); ``options``
    are that format's own (see :mod:`datasets_hub.exporters` and ``docs/guide/export.md``). Those formats never replace a folder:
    an existing ``out_dir`` is refused.

    The folder is written as ``<out_dir>.incomplete`` and renamed into place when complete, so a reader
    never sees half of it; an ``<out_dir>.incomplete`` that an interrupted export did not leave (it has no
    :data:`STAGING_MARK`) is refused, never deleted. An existing non-empty ``out_dir`` is refused unless
    ``overwrite=True``, a file at ``out_dir`` always. ``params`` select the build when ``source`` is an id
    (as in ``load``).
    """
    if format != "published":
        from datasets_hub.exporters import export_build

        if overwrite:
            raise InvalidParameter(
                f"overwrite=True applies to the published form only; format={format!r} never replaces a folder: "
                "remove it yourself or export to a new folder"
            )
        return export_build(
            _resolve_build(source, params), out_dir, format, show_progress=show_progress, **(options or {})
        )
    if options:
        raise InvalidParameter(f"the published form takes no options (got {sorted(options)}); did you mean format=...?")
    if not isinstance(chunk_bytes, int) or isinstance(chunk_bytes, bool) or not 1024 <= chunk_bytes <= MAX_CHUNK_BYTES:
        raise InvalidParameter(
            f"chunk_bytes must be an integer from 1024 to {MAX_CHUNK_BYTES:,} (1 GiB: a chunk is fetched and decoded "
            f"whole, in memory), got {chunk_bytes!r}"
        )
    zarr = require_zarr()
    from numcodecs.zstd import Zstd
    from zarr.codecs import ZstdCodec

    build = open_build(_resolve_build(source, params))  # the one reader: checks the build before a byte is copied
    manifest = build.manifest
    try:  # published byte for byte, so that its hash (and manifest.sha256) still match
        manifest_bytes = (build.path / MANIFEST).read_bytes()
    except OSError as exc:
        raise CacheError(f"{build.path} holds no readable build manifest ({exc}); load the dataset again") from exc
    if json.loads(manifest_bytes) != manifest:
        raise CacheError(f"the manifest of {build.path} changed while it was being exported; export it again")
    out = Path(out_dir)
    if os.path.lexists(out) and not out.is_dir():
        raise InvalidParameter(f"{out} exists and is not a folder; export writes a folder: choose another path")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise InvalidParameter(f"{out} exists and is not empty; choose another folder or pass overwrite=True")
    staging = out.with_name(out.name + ".incomplete")
    _clear_staging(staging)
    staging.mkdir(parents=True)
    (staging / STAGING_MARK).write_bytes(b"")  # first: a leftover of this export is known as one

    group = zarr.open_group(str(staging / ZARR_DIR), mode="w", zarr_format=3)
    zstd = Zstd(level=compression_level)  # the compressor of zarr's ZstdCodec (checksum off, its default)
    arrays: dict[str, dict[str, Any]] = {}
    files: dict[str, dict[str, Any]] = {}  # every file of the folder: sha256 and size
    for name, leaf in build.leaves.items():
        spec = manifest["schema"][name]
        dtype = numpy_dtype(spec["dtype"])
        rows, shape = int(leaf.shape[0]), tuple(int(d) for d in leaf.shape[1:])
        row_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        chunk_rows = chunk_rows_for(row_bytes, chunk_bytes)
        array = group.create_array(
            name,
            shape=(rows, *shape),
            dtype=dtype,
            chunks=(chunk_rows, *shape) if rows else (1, *shape),
            compressors=ZstdCodec(level=compression_level),
            fill_value=0,
            config={"write_empty_chunks": True},
        )
        column = leaf.numpy()  # a read-only memory map of the leaf: chunks are read one at a time
        for chunk, start in enumerate(range(0, rows, chunk_rows)):
            key = f"{ZARR_DIR}/{name}/" + array.metadata.encode_chunk_key((chunk,) + (0,) * len(shape))
            files[key] = _write_chunk(staging / key, column[start : start + chunk_rows], chunk_rows, dtype, zstd)
        del column
        arrays[name] = {
            "rows": rows,
            "shape": list(shape),
            "dtype": spec["dtype"],
            "chunk_rows": chunk_rows,
            "chunks": -(-rows // chunk_rows),
        }

    for path in (staging / ZARR_DIR).rglob("*"):  # zarr's metadata files (the chunks are known); JSON sorts keys
        relative = path.relative_to(staging).as_posix()
        if path.is_file() and relative not in files:
            files[relative] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    (staging / "manifest.json").write_bytes(manifest_bytes)
    published = {
        "format": PUBLISHED_FORMAT,
        "version": PUBLISHED_VERSION,
        "zarr_format": 3,
        "id": manifest.get("id"),
        "fingerprint": manifest.get("fingerprint"),
        "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
        "arrays": arrays,
        "files": files,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hub_version": __version__,
        "published_bytes": sum(f["bytes"] for f in files.values()) + len(manifest_bytes),
    }
    (staging / PUBLISHED).write_text(json.dumps(published, indent=1, sort_keys=True))
    from datasets_hub.remote.card import render_card

    returns = build.episodes["return"].tolist()
    (staging / "README.md").write_text(render_card(manifest, published, episode_returns=returns))
    (staging / STAGING_MARK).unlink()
    if out.exists():
        shutil.rmtree(out)
    os.replace(staging, out)
    return out


def _clear_staging(staging: Path) -> None:
    """Remove a staging folder an interrupted export left (it holds :data:`STAGING_MARK`); refuse any other
    file or folder at that path, which is someone's data, not ours to delete."""
    if not os.path.lexists(staging):
        return
    if staging.is_symlink() or not staging.is_dir() or not (staging / STAGING_MARK).is_file():
        raise InvalidParameter(
            f"{staging} exists and was not left by an interrupted export (no {STAGING_MARK} in it); export "
            f"writes the folder there before renaming it into place: move {staging} away or delete it, or "
            "export to another folder"
        )
    shutil.rmtree(staging)


def _holds_an_export(folder: Path) -> bool:
    """Whether ``folder`` is absent, empty, or a folder an earlier ``export`` wrote (its ``published.json``)."""
    if not os.path.lexists(folder):
        return True
    if not folder.is_dir() or folder.is_symlink():
        return False
    if not any(folder.iterdir()):
        return True
    try:
        return json.loads((folder / PUBLISHED).read_text()).get("format") == PUBLISHED_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _upload_errors() -> tuple[type[Exception], ...]:
    """What huggingface_hub raises when an upload fails: its HTTP error, the HTTP client's base error (a
    refused or unresolved connection is one of those, not an OSError) and its validation errors."""
    from huggingface_hub.errors import HfHubHTTPError

    client_bases = tuple(b for b in HfHubHTTPError.__mro__[1:] if issubclass(b, Exception) and b is not Exception)
    return (HfHubHTTPError, OSError, ValueError, *client_bases)


def push(
    source: Any,
    repo_id: str,
    *,
    revision: str | None = None,
    private: bool | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    format: str = "published",
    options: dict[str, Any] | None = None,
    **params: Any,
) -> str:
    """Export ``source`` and upload it to the Hugging Face dataset repo ``repo_id``; return its
    ``hf://datasets/<repo_id>`` URL, which ``datasets_hub.load`` opens (the published form;
    ``format="hf"`` uploads the parquet form that ``datasets.load_dataset(repo_id)`` reads instead).

    ``out_dir`` keeps the exported folder: it must be new, empty, or an earlier export (anything else is
    refused before a byte is written); the repo is created before the export, so a refused token fails
    before ``out_dir`` is touched.

    The upload is huggingface_hub's ``upload_large_folder`` (resumable) where it exists, else ``upload_folder``; the token is
    huggingface_hub's own (``huggingface-cli login`` or ``HF_TOKEN``) and never passes through this code.
    """
    try:
        from huggingface_hub import HfApi
    except ImportError as exc:  # pragma: no cover - huggingface_hub is a core dependency
        raise MissingDependency("push needs huggingface_hub: pip install huggingface_hub") from exc
    import tempfile

    from datasets_hub.env import offline

    if offline():
        raise UploadError(
            "push uploads to the Hugging Face Hub, and DATASETS_HUB_OFFLINE=1 forbids every connection; unset it, "
            "or write the same folder offline with `datasets-hub export ID DIR`"
        )
    if out_dir is not None and not _holds_an_export(Path(out_dir)):
        raise InvalidParameter(
            f"out_dir={str(out_dir)!r} holds files that are not an earlier export; push replaces out_dir by the "
            "export it uploads: pass an empty or new folder"
        )
    api = HfApi()
    try:
        # first: a refused token or repo name fails before anything is written
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="datasets_hub_push_") as scratch:
            folder = Path(out_dir) if out_dir is not None else Path(scratch) / "build"
            published = format == "published"
            export(
                source, folder, overwrite=published and out_dir is not None, format=format, options=options, **params
            )
            # upload_large_folder (resumable, multi-commit) where this huggingface_hub has it; upload_folder otherwise
            upload = getattr(api, "upload_large_folder", None)
            if upload is not None:
                upload(repo_id=repo_id, folder_path=str(folder), repo_type="dataset", revision=revision)
            else:
                api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="dataset", revision=revision)
    except HubError:
        raise  # export's own errors (an unknown id, a damaged build) stay what they are
    except _upload_errors() as exc:
        raise UploadError(
            f"push to the Hugging Face dataset repo {repo_id!r} failed: {type(exc).__name__}: {exc}. Check the "
            "network (and HF_ENDPOINT) and your token (`hf auth login` or HF_TOKEN); `datasets-hub export ID DIR` "
            "writes the same folder without the network"
        ) from exc
    suffix = f"@{revision}" if revision else ""
    return f"hf://datasets/{repo_id}{suffix}"
