"""Cached, fingerprinted, parallel preprocessing of a buffer's transitions (docs/guide/preprocessing.md).

``preprocess(rb, fn)`` returns a read-only buffer over ``fn`` mapped once over every stored row.
The result lives in ``<cache>/preprocessed/<build-fp>/<transform-fp>/`` (:mod:`.fingerprint`);
if it is published there, ``fn`` is not called. Otherwise ``fn`` is probed on a few rows for the
output schema, the output is preallocated as a tensordict memmap in ``<transform-fp>.incomplete``
(under ``<transform-fp>.lock``), worker processes (or Ray tasks) open the parent read-only and
write disjoint row ranges, and the manifest is written last before the rename: a crash or kill
leaves nothing visible, and concurrent callers wait and reuse.

The contract of ``fn``: it takes a TED TensorDict of ``n`` consecutive stored transitions (batch
size ``[n]``: ``observation``, ``action``, ``episode``, ``step``, done flags, ``next/...``) and
returns a TensorDict of batch size ``[n]`` whose row ``i`` belongs to input row ``i``, with the
same keys, dtypes and per-row shapes for every chunk. It is deterministic and gets a private copy
it may modify in place. Slices still work if it drops ``episode``/``step`` (the parent's episode
index is copied). With ``by="row"`` (the default) it must be row-wise, which a probe checks; with
``by="episode"`` chunks hold whole episodes and fn's output for an episode must depend on that
episode alone (:mod:`.preprocess_chunks`). ``by`` and an explicit ``chunk_size`` are part of the
fingerprint.

Buffers without a fingerprint (in-memory ones) and transforms that cannot be fingerprinted are
computed the same way into a temporary directory, removed with the returned buffer: not cached.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from datasets_hub import __version__
from datasets_hub import preprocess_chunks as chunking
from datasets_hub.buffers.disk_space import full_disk_error, memmap_filenames, reserve_files
from datasets_hub.buffers.nested_keys import as_key, nest, parse_key
from datasets_hub.buffers.tensor_storages import TensorStorage
from datasets_hub.cache import (
    INCOMPLETE_SUFFIX,
    MANIFEST,
    ensure_writable_dir,
    file_lock,
    preprocessed_dir,
    read_manifest,
    remove_tree,
)
from datasets_hub.errors import InvalidParameter, MissingDependency, PreprocessError
from datasets_hub.files import write_json_atomic
from datasets_hub.fingerprint import _module_identity, describe_name, transform_fingerprint
from datasets_hub.preprocess_watch import BEAT, WorkerWatch, report_chunk, start_heartbeat
from datasets_hub.preprocessed_storage import FORMAT, PreprocessedStorage, _open_schema

PROBE_ROWS = 4
BACKENDS = ("process", "ray")
Key = tuple[str, ...]


# ------------------------------------------------------------------------------------------ jobs
@dataclass(frozen=True)
class _Source:
    """Where workers read the parent's rows: a build, a preprocessing result, or a memmap snapshot."""

    kind: str  # "build" | "preprocessed" | "snapshot"
    path: str

    def open(self) -> Callable[[int, int], TensorDictBase]:
        if self.kind == "build":
            from datasets_hub.dataset_storage import DatasetStorage

            storage: Any = DatasetStorage(self.path)
        elif self.kind == "preprocessed":
            storage = PreprocessedStorage(self.path)
        else:
            storage = TensorStorage(TensorDict.load_memmap(self.path))
        # a gather, not a slice: fn gets a private copy it may modify in place
        return lambda start, stop: storage.get(torch.arange(start, stop))


@dataclass(frozen=True)
class _Job:
    """Everything a worker needs, picklable (``fn`` travels as pickle or cloudpickle bytes)."""

    id: str
    source: _Source
    fn_bytes: bytes | None  # None: the worker inherits fn from the parent (fork)
    fn_name: str
    out_dir: str
    manifest: dict[str, Any]  # rows and schema of the output
    threads: int


_WORKER: dict[str, Any] = {}  # per-process state of a worker: the open source, fn and output
_FORKED_FN: dict[str, Callable] = {}  # fn for forked workers when it cannot be pickled


def _worker_init(job: _Job, fn: Callable | None = None) -> None:
    if job.threads:
        torch.set_num_threads(job.threads)  # workers share the cores: no oversubscription
    if fn is None:
        # cloudpickle writes plain pickles (that import cloudpickle's helpers): pickle.loads reads both
        fn = pickle.loads(job.fn_bytes) if job.fn_bytes is not None else _FORKED_FN["fn"]
    _WORKER.clear()
    _WORKER.update(
        id=job.id, job=job, fn=fn, rows=job.source.open(), out=_open_schema(Path(job.out_dir), job.manifest, "r+")
    )


def _keep_freed_memory() -> None:
    """Let glibc keep up to 256 MB of freed heap in a worker instead of returning it to the OS.

    A fresh worker starts with glibc's low trim threshold, so the few-MB temporaries a typical fn
    allocates per chunk go back to the OS on every free and fault in again on every allocation
    (measured: ~50k page faults and +50% time per 25k-row chunk of a numpy fn). A long-lived
    process has long since raised those thresholds; this gives workers the same."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: blocks up to 32 MB come from the heap
        libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass  # not glibc: nothing to tune


def _watch_parent(pid: int, heartbeat_queue: Any = None) -> None:
    """Pool initializer: exit when the parent dies (SIGKILL) instead of waiting for work forever;
    with ``heartbeat_queue``, tell the parent this worker is alive (:mod:`.preprocess_watch`)."""
    import threading

    if heartbeat_queue is not None:
        start_heartbeat(heartbeat_queue)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:  # alive, under another user
                pass

    threading.Thread(target=watch, daemon=True, name="datasets_hub-parent-watch").start()


def _task(job: _Job, start: int, stop: int) -> int:
    """One chunk in a worker process or Ray task; the worker opens its files on its first chunk."""
    if _WORKER.get("id") != job.id:
        try:
            _keep_freed_memory()  # idempotent; in worker processes and Ray workers, never in the caller
            _worker_init(job)
        except Exception as exc:  # noqa: BLE001 - reported with the chunk that could not start
            raise _ChunkFailed(
                job.fn_name,
                start,
                stop,
                f"the worker could not start: {type(exc).__name__}: {exc}",
                traceback.format_exc(),
            ) from None
    report_chunk(start, stop)
    return _run_chunk(start, stop)


class _ChunkFailed(Exception):
    """Raised in a worker; carries fn's name, the row range and the worker's traceback."""

    def __init__(self, fn_name: str, start: int, stop: int, message: str, trace: str) -> None:
        super().__init__(fn_name, start, stop, message, trace)
        self.trace = trace
        self.text = f"{fn_name} failed on transitions [{start}, {stop}): {message}"

    def __str__(self) -> str:
        return self.text


def _run_chunk(start: int, stop: int) -> int:
    job: _Job = _WORKER["job"]
    try:
        result = _WORKER["fn"](_WORKER["rows"](start, stop))
        problem = _check_output(result, stop - start, job.manifest["schema"])
    except Exception as exc:  # noqa: BLE001 - any error in user code is reported with its rows
        raise _ChunkFailed(job.fn_name, start, stop, f"{type(exc).__name__}: {exc}", traceback.format_exc()) from None
    if problem:
        raise _ChunkFailed(job.fn_name, start, stop, problem, "")
    for key, dest in _WORKER["out"].items():
        if dest.numel():
            dest[start:stop].copy_(result.get(key))
    return stop - start


def _pickle_fn(fn: Callable, by_value: bool = False) -> bytes | None:
    """``fn`` as bytes for workers: pickle, else cloudpickle (lambdas, closures); ``None`` when
    neither can. ``by_value`` ships the code of fn's own (user) module too, for Ray workers on
    other machines that cannot import it."""
    if not by_value:
        try:
            return pickle.dumps(fn)
        except Exception:  # noqa: BLE001 - lambdas, closures and local functions do not pickle by reference
            pass
    try:
        import cloudpickle
    except ImportError:
        return pickle.dumps(fn) if by_value else None
    module = sys.modules.get(getattr(getattr(fn, "func", fn), "__module__", "") or "")
    register = (
        by_value
        and module is not None
        and not module.__name__.startswith("datasets_hub")
        and not _module_identity(module.__name__)[0]
    )
    if register:
        cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps(fn)
    except Exception:  # noqa: BLE001 - whatever stops pickling means "cannot fingerprint": the caller warns
        return None
    finally:
        if register:
            cloudpickle.unregister_pickle_by_value(module)


# ------------------------------------------------------------------------------------------ schema
def _leaves(td: TensorDictBase) -> dict[Key, Any]:
    return {as_key(k): td.get(k) for k in td.keys(include_nested=True, leaves_only=True)}


def _schema_of(result: Any, rows: int, fn_name: str) -> dict[str, Any]:
    """Output schema from the probe; raises ``PreprocessError`` teaching the contract."""
    if not isinstance(result, TensorDictBase):
        raise PreprocessError(
            f"{fn_name} returned {type(result).__name__}; preprocess needs fn(batch) -> TensorDict with the "
            "same batch size (e.g. `td.set('feature', ...); return td`)"
        )
    if tuple(result.batch_size) != (rows,):
        raise PreprocessError(
            f"{fn_name} returned batch size {list(result.batch_size)} for a chunk of {rows} transitions; "
            f"it must return one row per input row (batch size [{rows}])"
        )
    schema = {}
    for key, value in _leaves(result).items():
        if not isinstance(value, torch.Tensor):
            raise PreprocessError(
                f"{fn_name} returned {type(value).__name__} at {'/'.join(key)!r}; only tensors can be stored"
            )
        schema["/".join(key)] = {"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape[1:])}
    if not schema:
        raise PreprocessError(f"{fn_name} returned an empty TensorDict: there is nothing to store")
    return schema


def _check_output(result: Any, rows: int, schema: dict[str, Any]) -> str:
    """What is wrong with a chunk's output compared with the probe's schema ('' if nothing)."""
    if not isinstance(result, TensorDictBase) or tuple(result.batch_size) != (rows,):
        got = list(result.batch_size) if isinstance(result, TensorDictBase) else type(result).__name__
        return f"returned {got} for {rows} rows; fn must return a TensorDict with batch size [{rows}]"
    leaves = {"/".join(k): v for k, v in _leaves(result).items()}
    if set(leaves) != set(schema):
        return (
            f"returned keys {sorted(leaves)} but the probe returned {sorted(schema)}; "
            "fn must return the same keys for every chunk"
        )
    for name, spec in schema.items():
        value = leaves[name]
        dtype, shape = str(value.dtype).replace("torch.", ""), list(value.shape[1:])
        if dtype != spec["dtype"] or shape != spec["shape"]:
            return (
                f"returned {name!r} as {dtype} {shape} per row but the probe returned {spec['dtype']} "
                f"{spec['shape']}; fn must return the same dtypes and shapes for every chunk"
            )
    return ""


# ------------------------------------------------------------------------------------------ parent
def _describe_parent(rb: Any) -> tuple[_Source | None, dict[str, Any]]:
    """The source workers open and the parent's identity (fingerprint, build, id, chain)."""
    from datasets_hub.dataset_storage import DatasetStorage

    storage = rb.storage
    if isinstance(storage, DatasetStorage):
        fp = storage.manifest.get("fingerprint") or storage.path.name
        return _Source("build", str(storage.path)), {
            "fingerprint": fp,
            "build": fp,
            "id": storage.manifest.get("id"),
            "chain": [],
        }
    if isinstance(storage, PreprocessedStorage):
        m = storage.manifest
        return _Source("preprocessed", str(storage.path)), {
            "fingerprint": m.get("fingerprint"),
            "build": m.get("build"),
            "id": m.get("id"),
            "chain": list(m.get("chain") or []),
        }
    return None, {"fingerprint": None, "build": None, "id": None, "chain": []}


def _snapshot(rb: Any, into: Path) -> _Source:
    """Copy an in-memory buffer's TensorDict rows into a memmap workers can open."""
    n = len(rb)
    data = rb.storage.get(slice(0, n)) if n else None
    if not isinstance(data, TensorDictBase):
        raise InvalidParameter(
            f"preprocess needs a buffer of TensorDict transitions; this one holds {type(data).__name__} "
            f"({type(rb.storage).__name__})"
        )
    data.memmap(prefix=str(into), num_threads=0)
    return _Source("snapshot", str(into))


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
    if fp is None:
        path = _compute_uncached(rb, fn, source, info, run)
        storage = PreprocessedStorage(path, _cleanup=path.parent)
    else:
        final = preprocessed_dir(parent["build"]) / fp
        if read_manifest(final) is None:
            _compute_cached(rb, fn, source, final, fp, info, run)
        storage = PreprocessedStorage(final)
    return rb.read_only_view(storage, transform=transform)


def _compute_cached(
    rb: Any, fn: Callable, source: _Source, final: Path, fp: str, info: dict[str, Any], run: dict[str, Any]
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


def _compute_uncached(rb: Any, fn: Callable, source: _Source | None, info: dict[str, Any], run: dict[str, Any]) -> Path:
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
    rb: Any, fn: Callable, source: _Source, target: Path, fp: str | None, info: dict[str, Any], run: dict[str, Any]
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
    schema = _schema_of(probe, b - a, fn_name)
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
    _map_chunks(fn, source, target, manifest, n, run)
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


def _map_chunks(
    fn: Callable, source: _Source, target: Path, manifest: dict[str, Any], n: int, run: dict[str, Any]
) -> None:
    from datasets_hub.build import _progress_bar

    workers, chunks = run["num_workers"], run["chunks"]
    fn_name = manifest["transform"]["name"]
    threads = max(1, (os.cpu_count() or 1) // max(workers, 1)) if workers else 0
    job = _Job(uuid.uuid4().hex, source, None, fn_name, str(target), manifest, threads)
    with _progress_bar(n, f"preprocessing {fn_name.rsplit('.', 1)[-1]}") as bar:
        try:
            if run["backend"] == "ray":
                _map_ray(fn, job, chunks, bar)
            elif workers == 0:
                _worker_init(job, fn)  # in this process: nothing to send
                try:
                    for a, b in chunks:
                        bar.update(_run_chunk(a, b))
                finally:
                    _WORKER.clear()  # drop the open files of the output
            else:
                _map_processes(fn, job, chunks, bar, workers, run["start_method"])
        except _ChunkFailed as exc:
            detail = f"\n\nworker traceback:\n{exc.trace}" if exc.trace else ""
            raise PreprocessError(f"{exc}{detail}") from None


def _map_processes(
    fn: Callable, job: _Job, chunks: list[tuple[int, int]], bar: Any, workers: int, start_method: str | None
) -> None:
    payload = _pickle_fn(fn)
    if payload is None:
        start_method = "fork"  # neither pickle nor cloudpickle can send fn: forked workers inherit it
        _FORKED_FN["fn"] = fn
    method = start_method or ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["datasets_hub.preprocess"])  # imported once by the server, not per worker
    # a forked child of a process that used torch's OpenMP pool hangs in its next parallel region
    # unless it runs single-threaded (a forkserver child starts clean)
    job = replace(job, fn_bytes=payload, threads=1 if method == "fork" else job.threads)
    watch = WorkerWatch(ctx, job.fn_name)
    pool = ProcessPoolExecutor(
        max_workers=min(workers, len(chunks)),
        mp_context=ctx,
        initializer=_watch_parent,
        initargs=(os.getpid(), watch.queue),
    )
    try:
        pending = {pool.submit(_task, job, a, b): (a, b) for a, b in chunks}
        while pending:
            done, _ = wait(pending, timeout=BEAT, return_when=FIRST_COMPLETED)
            watch.check()  # a stopped or stuck worker: PreprocessError naming it (workers killed)
            for future in done:
                a, b = pending.pop(future)
                watch.chunk_done(a)
                try:
                    bar.update(future.result())
                except BrokenProcessPool as exc:
                    raise PreprocessError(
                        f"a worker process died while running {job.fn_name} around transitions [{a}, {b}); nothing "
                        "was published. It was killed or ran out of memory (lower num_workers or chunk_size), or it "
                        "could not start: a script needs the `if __name__ == '__main__':` guard (see stderr)"
                    ) from exc
    except BaseException:
        watch.kill_all()  # nothing may keep running (or stay stopped) after the error
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        watch.close()
        _FORKED_FN.clear()


def _map_ray(fn: Callable, job: _Job, chunks: list[tuple[int, int]], bar: Any) -> None:
    try:
        import ray
    except ImportError as exc:
        raise MissingDependency(
            f"backend='ray' needs Ray, which is not installed ({exc}). Fix: pip install 'datasets-hub[ray]'"
        ) from exc
    if not ray.is_initialized():
        ray.init()
    job = replace(job, fn_bytes=_pickle_fn(fn, by_value=True), threads=1)
    if job.fn_bytes is None:
        raise PreprocessError(
            f"{job.fn_name} cannot be serialised for Ray tasks (cloudpickle failed); use a module-level function"
        )
    task = ray.remote(num_cpus=1)(_task)
    job_ref = ray.put(job)
    pending = {task.remote(job_ref, a, b): (a, b) for a, b in chunks}
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                pending.pop(ref)
                try:
                    bar.update(ray.get(ref))
                except Exception as exc:
                    cause = getattr(exc, "cause", None)  # Ray wraps the task's own error
                    if isinstance(cause, _ChunkFailed):
                        raise cause from None
                    raise PreprocessError(f"a Ray task running {job.fn_name} failed: {exc}") from exc
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def preprocess_chain(rb: Any, fns: Callable | Sequence[Callable] | None, **kwargs: Any) -> Any:
    """``preprocess`` each of ``fns`` in turn (fingerprints chain: each step's parent is the last result)."""
    steps: list[Callable] = (
        [] if fns is None else list(fns) if isinstance(fns, (list, tuple)) else [cast(Callable, fns)]
    )
    transform = kwargs.pop("transform", None)
    for i, fn in enumerate(steps):
        rb = preprocess(rb, fn, transform=transform if i == len(steps) - 1 else None, **kwargs)
    return rb
