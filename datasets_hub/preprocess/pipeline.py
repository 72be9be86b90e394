"""Cached, fingerprinted, parallel preprocessing of a buffer's transitions (docs/guide/preprocessing.md).

``preprocess(rb, fn)`` returns a read-only buffer over ``fn`` mapped once over every stored row.
The result lives in ``<cache>/preprocessed/<build-fp>/<transform-fp>/`` (:mod:`datasets_hub.fingerprint`);
if it is published there, ``fn`` is not called. Otherwise ``fn`` is probed on a few rows for the
output schema, the output is preallocated as a tensordict memmap in ``<transform-fp>.incomplete``
(under ``<transform-fp>.lock``), worker processes (or Ray tasks) open the parent read-only and
write disjoint row ranges, and the manifest is written last before the rename: a crash or kill
leaves nothing visible, and concurrent callers wait and reuse. The workers' side (jobs, chunks,
the check of every chunk's output, the process pool and Ray tasks) is :mod:`.workers`.

The contract of ``fn``: it takes a TED TensorDict of ``n`` consecutive stored transitions (batch
size ``[n]``: ``observation``, ``action``, ``episode``, ``step``, done flags, ``next/...``) and
returns a TensorDict of batch size ``[n]`` whose row ``i`` belongs to input row ``i``, with the
same keys, dtypes and per-row shapes for every chunk. It is deterministic and gets a private copy
it may modify in place. Slices still work if it drops ``episode``/``step`` (the parent's episode
index is copied). With ``by="row"`` (the default) it must be row-wise, which a probe checks; with
``by="episode"`` chunks hold whole episodes and fn's output for an episode must depend on that
episode alone (:mod:`.chunks`). ``by`` and an explicit ``chunk_size`` are part of the
fingerprint.

Buffers without a fingerprint (in-memory ones) and transforms that cannot be fingerprinted are
computed the same way into a temporary directory, removed with the returned buffer: not cached.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from datasets_hub import __version__
from datasets_hub.buffers.disk_space import full_disk_error, memmap_filenames, reserve_files
from datasets_hub.buffers.nested_keys import nest, parse_key
from datasets_hub.cache.layout import (
    INCOMPLETE_SUFFIX,
    MANIFEST,
    ensure_writable_dir,
    file_lock,
    preprocessed_dir,
    read_manifest,
    remove_tree,
)
from datasets_hub.errors import InvalidParameter, PreprocessError
from datasets_hub.files import write_json_atomic
from datasets_hub.fingerprint import describe_name, transform_fingerprint
from datasets_hub.preprocess import chunks as chunking
from datasets_hub.preprocess.storage import FORMAT, PreprocessedStorage
from datasets_hub.preprocess.workers import Source, map_chunks, schema_of

PROBE_ROWS = 4
BACKENDS = ("process", "ray")


# ------------------------------------------------------------------------------------------ parent
def _describe_parent(rb: Any) -> tuple[Source | None, dict[str, Any]]:
    """The source workers open and the parent's identity (fingerprint, build, id, chain)."""
    from datasets_hub.build.storage import DatasetStorage

    storage = rb.storage
    if isinstance(storage, DatasetStorage):
        fp = storage.manifest.get("fingerprint") or storage.path.name
        return Source("build", str(storage.path)), {
            "fingerprint": fp,
            "build": fp,
            "id": storage.manifest.get("id"),
            "chain": [],
        }
    if isinstance(storage, PreprocessedStorage):
        m = storage.manifest
        return Source("preprocessed", str(storage.path)), {
            "fingerprint": m.get("fingerprint"),
            "build": m.get("build"),
            "id": m.get("id"),
            "chain": list(m.get("chain") or []),
        }
    return None, {"fingerprint": None, "build": None, "id": None, "chain": []}


def _snapshot(rb: Any, into: Path) -> Source:
    """Copy an in-memory buffer's TensorDict rows into a memmap workers can open."""
    n = len(rb)
    data = rb.storage.get(slice(0, n)) if n else None
    if not isinstance(data, TensorDictBase):
        raise InvalidParameter(
            f"preprocess needs a buffer of TensorDict transitions; this one holds {type(data).__name__} "
            f"({type(rb.storage).__name__})"
        )
    data.memmap(prefix=str(into), num_threads=0)
    return Source("snapshot", str(into))


def _auto_sizes(n: int, num_workers: int | None, chunk_size: int | None) -> tuple[int, int]:
    for name, value, low, meaning in (
        ("chunk_size", chunk_size, 1, "transitions per task"),
        ("num_workers", num_workers, 0, "worker processes, 0 = in this process"),
    ):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
            raise InvalidParameter(f"{name} must be an int >= {low} ({meaning}) or None, got {value!r}")
    cpus = os.cpu_count() or 1
    if chunk_size is None:  # a few chunks per worker balance the load; big enough to amortise the calls
        chunk_size = max(1024, min(65536, -(-n // (4 * max(num_workers or cpus, 1)))))
    chunks = -(-n // chunk_size)
    if num_workers is None:
        num_workers = 0 if chunks == 1 else min(cpus, chunks)
    return num_workers, chunk_size


def preprocess(
    rb: Any,
    fn: Callable,
    *,
    by: str | None = None,
    num_workers: int | None = None,
    chunk_size: int | None = None,
    version: Any = None,
    backend: str = "process",
    start_method: str | None = None,
    transform: Any = None,
) -> Any:
    """Map ``fn`` over every transition of ``rb`` once (contract: module docstring); return a
    read-only buffer over the result, which keeps ``rb``'s sampler (a copy sharing its generator),
    ``batch_size`` and ``prefetch``, with ``transform`` as its sample-time transform (``rb``'s own
    transforms were written for ``rb``'s keys and are not carried over).

    ``by``: ``"row"`` (chunks cut anywhere; fn must be row-wise, checked by a probe) or
    ``"episode"`` (chunks hold whole episodes, for returns-to-go and per-episode statistics);
    default: ``fn.by`` if fn declares it (:class:`~datasets_hub.buffers.returns.ReturnToGo` does),
    else ``"row"``. ``num_workers``: worker processes (``0``: in this process; ``None``: one per CPU, or none for
    a single chunk); ``chunk_size``: transitions per task; ``version``: any value, changing it
    forces a new result; ``backend="ray"``: chunks as Ray tasks (the cache must be on a filesystem
    every Ray worker sees); ``start_method``: default ``"forkserver"`` (``"spawn"`` where missing),
    and ``"fork"`` when neither pickle nor cloudpickle can send ``fn``. Scripts need the
    ``if __name__ == "__main__":`` guard, as with DataLoader workers.
    """
    if not callable(fn):
        raise InvalidParameter(f"preprocess needs a callable fn(batch) -> TensorDict, got {type(fn).__name__}")
    if backend not in BACKENDS:
        from datasets_hub.errors import did_you_mean

        raise InvalidParameter(
            f"backend must be one of {BACKENDS}, got {backend!r}." + did_you_mean(str(backend), BACKENDS)
        )
    n = len(rb)
    if n == 0:
        raise InvalidParameter("preprocess: the buffer is empty; there is nothing to preprocess")
    fn_name = describe_name(fn)
    by = chunking.resolve_mode(fn, by, fn_name)
    explicit_chunk_size = chunk_size
    num_workers, chunk_size = _auto_sizes(n, num_workers, chunk_size)
    if by == "episode":
        index = chunking.episode_index_of(rb)
        chunks = chunking.episode_chunks(index, n, chunk_size)
        probe_chunks = chunking.single_episode_chunks(index, n)
        if num_workers and len(chunks) == 1:
            num_workers = 0
    else:
        chunks, probe_chunks = chunking.row_chunks(n, chunk_size), []
    source, parent = _describe_parent(rb)
    fp = None
    # every setting that can change the result: an explicit chunk_size too (results must not depend
    # on it, but a fn that breaks its contract in a way the probe misses then still never reuses)
    settings = {"by": by, "chunk_size": explicit_chunk_size}
    if parent["fingerprint"] is not None:
        fp = transform_fingerprint(parent["fingerprint"], fn, version, settings=settings, stacklevel=3)
    info = {"parent": parent, "fn_name": fn_name, "version": version, "backend": backend, "settings": settings}
    run = {
        "num_workers": num_workers,
        "chunk_size": chunk_size,
        "backend": backend,
        "start_method": start_method,
        "by": by,
        "chunks": chunks,
        "probe_chunks": probe_chunks,
    }
    if fp is None or source is None:  # (a fingerprint comes with a build or a result: both have a source)
        path = _compute_uncached(rb, fn, source, info, run)
        storage = PreprocessedStorage(path, _cleanup=path.parent)
    else:
        final = preprocessed_dir(parent["build"]) / fp
        if read_manifest(final) is None:
            _compute_cached(rb, fn, source, final, fp, info, run)
        storage = PreprocessedStorage(final)
    return rb.read_only_view(storage, transform=transform)


def _compute_cached(
    rb: Any, fn: Callable, source: Source, final: Path, fp: str, info: dict[str, Any], run: dict[str, Any]
) -> None:
    ensure_writable_dir(final.parent)
    with file_lock(final.with_name(final.name + ".lock")):
        if read_manifest(final) is not None:
            return  # another process published it while we waited
        incomplete = final.with_name(final.name + INCOMPLETE_SUFFIX)
        remove_tree(incomplete)  # left by a killed process
        try:
            _compute(rb, fn, source, incomplete, fp, info, run)
            if final.exists():
                remove_tree(final)  # a directory without a manifest: never a result
            os.replace(incomplete, final)
        except BaseException:
            remove_tree(incomplete)
            raise


def _compute_uncached(rb: Any, fn: Callable, source: Source | None, info: dict[str, Any], run: dict[str, Any]) -> Path:
    """Compute into a temporary directory (removed with the returned storage); return the result dir."""
    tmp = Path(tempfile.mkdtemp(prefix="datasets_hub_preprocess_"))
    try:
        if source is None:
            source = _snapshot(rb, tmp / "source")
        _compute(rb, fn, source, tmp / "result", None, info, run)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp / "source", ignore_errors=True)
    return tmp / "result"


def _compute(
    rb: Any, fn: Callable, source: Source, target: Path, fp: str | None, info: dict[str, Any], run: dict[str, Any]
) -> None:
    """Probe, preallocate, map every chunk, then write the episode index and the manifest (last)."""
    started = time.time()
    n = len(rb)
    fn_name = info["fn_name"]
    rows = source.open()
    a, b = run["probe_chunks"][0] if run["by"] == "episode" else (0, min(n, PROBE_ROWS))
    try:
        probe = fn(rows(a, b))
    except Exception as exc:
        raise PreprocessError(
            f"{fn_name} failed on transitions [{a}, {b}) (the probe): {type(exc).__name__}: {exc}"
        ) from exc
    schema = schema_of(probe, b - a, fn_name)
    if run["by"] == "episode":
        chunking.check_episode_wise(fn, rows, run["probe_chunks"], fn_name)
    else:
        chunking.check_row_wise(fn, rows, n, fn_name)
    target.mkdir(parents=True)
    template = {
        parse_key(name): torch.empty((), dtype=getattr(torch, s["dtype"])).expand(n, *s["shape"])
        for name, s in schema.items()
    }
    try:
        mm = TensorDict(nest(template.keys(), template.values()), batch_size=[n]).memmap_like(
            prefix=str(target / "data"), existsok=True
        )
    except (OSError, RuntimeError) as exc:
        error = full_disk_error(exc, f"preprocessing with {fn_name}", target)
        if error is None:
            raise
        raise error from exc
    # real blocks now: a full disk is a CacheError here, never a SIGBUS in a worker's write
    reserve_files(memmap_filenames(mm), f"preprocessing with {fn_name}")
    for name, spec in schema.items():
        spec["file"] = str(Path(mm.get(parse_key(name)).filename).relative_to(target))
    del mm
    parent = info["parent"]
    manifest = {
        "format": FORMAT,
        "version": 1,
        "fingerprint": fp,
        "parent": parent["fingerprint"],
        "build": parent["build"],
        "id": parent["id"],
        "transform": {"name": fn_name, "version": repr(info["version"]), **info["settings"]},
        "chain": parent["chain"] + [fn_name],
        "counts": {"transitions": n},
        "schema": schema,
    }
    map_chunks(fn, source, target, manifest, n, run)
    for spec in schema.values():  # recorded for `datasets-hub verify` (one read of the output)
        spec["sha256"] = _sha256_of(target / spec["file"])
    index = rb.storage.episode_index() if hasattr(rb.storage, "episode_index") else None
    if index is not None:
        torch.save({"start": index.start.clone(), "length": index.length.clone()}, target / "episodes.pt")
        manifest["counts"]["episodes"] = index.num_episodes
    manifest.update(
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        seconds=round(time.time() - started, 3),
        workers=run["num_workers"],
        chunk_size=run["chunk_size"],
        backend=run["backend"],
        hub_version=__version__,
    )
    write_json_atomic(target / MANIFEST, manifest)


def _sha256_of(path: Path) -> str | None:
    import hashlib

    if not path.exists():
        return None  # an empty leaf has no file
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def preprocess_chain(rb: Any, fns: Callable | Sequence[Callable] | None, **kwargs: Any) -> Any:
    """``preprocess`` each of ``fns`` in turn (fingerprints chain: each step's parent is the last result)."""
    steps: list[Callable] = (
        [] if fns is None else list(fns) if isinstance(fns, (list, tuple)) else [cast(Callable, fns)]
    )
    transform = kwargs.pop("transform", None)
    for i, fn in enumerate(steps):
        rb = preprocess(rb, fn, transform=transform if i == len(steps) - 1 else None, **kwargs)
    return rb
