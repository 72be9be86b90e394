"""Running a preprocessing ``fn`` over row ranges: in this process, in worker processes, or as Ray tasks.

:func:`map_chunks` is what :func:`datasets_hub.preprocess.pipeline.preprocess` calls once the output is
preallocated: it sends each worker a :class:`Job` (where to read the parent's rows, ``fn`` as pickle
or cloudpickle bytes, where to write), and each chunk's output is checked against the schema the
probe gave (:func:`schema_of`) before it is written to its disjoint row range. A failure in ``fn``
is a :class:`~datasets_hub.errors.PreprocessError` naming the rows and carrying the worker's
traceback; a worker that dies, stops or hangs is found by :mod:`.watch`.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from datasets_hub.buffers.nested_keys import as_key
from datasets_hub.buffers.tensor_storages import TensorStorage
from datasets_hub.errors import MissingDependency, PreprocessError
from datasets_hub.fingerprint import _module_identity
from datasets_hub.preprocess.storage import PreprocessedStorage, _open_schema
from datasets_hub.preprocess.watch import BEAT, WorkerWatch, report_chunk, start_heartbeat

Key = tuple[str, ...]


# ------------------------------------------------------------------------------------------ jobs
@dataclass(frozen=True)
class Source:
    """Where workers read the parent's rows: a build, a preprocessing result, or a memmap snapshot."""

    kind: str  # "build" | "preprocessed" | "snapshot"
    path: str

    def open(self) -> Callable[[int, int], TensorDictBase]:
        if self.kind == "build":
            from datasets_hub.build.storage import DatasetStorage

            storage: Any = DatasetStorage(self.path)
        elif self.kind == "preprocessed":
            storage = PreprocessedStorage(self.path)
        else:
            storage = TensorStorage(TensorDict.load_memmap(self.path))
        # a gather, not a slice: fn gets a private copy it may modify in place
        return lambda start, stop: storage.get(torch.arange(start, stop))


@dataclass(frozen=True)
class Job:
    """Everything a worker needs, picklable (``fn`` travels as pickle or cloudpickle bytes)."""

    id: str
    source: Source
    fn_bytes: bytes | None  # None: the worker inherits fn from the parent (fork)
    fn_name: str
    out_dir: str
    manifest: dict[str, Any]  # rows and schema of the output
    threads: int


_WORKER: dict[str, Any] = {}  # per-process state of a worker: the open source, fn and output
_FORKED_FN: dict[str, Callable] = {}  # fn for forked workers when it cannot be pickled


def _worker_init(job: Job, fn: Callable | None = None) -> None:
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
    with ``heartbeat_queue``, tell the parent this worker is alive (:mod:`.watch`)."""
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


def _task(job: Job, start: int, stop: int) -> int:
    """One chunk in a worker process or Ray task; the worker opens its files on its first chunk."""
    if _WORKER.get("id") != job.id:
        try:
            _keep_freed_memory()  # idempotent; in worker processes and Ray workers, never in the caller
            _worker_init(job)
        except Exception as exc:  # noqa: BLE001 - reported with the chunk that could not start
            raise ChunkFailed(
                job.fn_name,
                start,
                stop,
                f"the worker could not start: {type(exc).__name__}: {exc}",
                traceback.format_exc(),
            ) from None
    report_chunk(start, stop)
    return _run_chunk(start, stop)


class ChunkFailed(Exception):
    """Raised in a worker; carries fn's name, the row range and the worker's traceback."""

    def __init__(self, fn_name: str, start: int, stop: int, message: str, trace: str) -> None:
        super().__init__(fn_name, start, stop, message, trace)
        self.trace = trace
        self.text = f"{fn_name} failed on transitions [{start}, {stop}): {message}"

    def __str__(self) -> str:
        return self.text


def _run_chunk(start: int, stop: int) -> int:
    job: Job = _WORKER["job"]
    try:
        result = _WORKER["fn"](_WORKER["rows"](start, stop))
        problem = _check_output(result, stop - start, job.manifest["schema"])
    except Exception as exc:  # noqa: BLE001 - any error in user code is reported with its rows
        raise ChunkFailed(job.fn_name, start, stop, f"{type(exc).__name__}: {exc}", traceback.format_exc()) from None
    if problem:
        raise ChunkFailed(job.fn_name, start, stop, problem, "")
    for key, dest in _WORKER["out"].items():
        if dest.numel():
            dest[start:stop].copy_(result.get(key))
    return stop - start


def pickle_fn(fn: Callable, by_value: bool = False) -> bytes | None:
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


def schema_of(result: Any, rows: int, fn_name: str) -> dict[str, Any]:
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


# ------------------------------------------------------------------------------------------ mapping
def map_chunks(
    fn: Callable, source: Source, target: Path, manifest: dict[str, Any], n: int, run: dict[str, Any]
) -> None:
    from datasets_hub.progress import RowProgress

    workers, chunks = run["num_workers"], run["chunks"]
    fn_name = manifest["transform"]["name"]
    threads = max(1, (os.cpu_count() or 1) // max(workers, 1)) if workers else 0
    job = Job(uuid.uuid4().hex, source, None, fn_name, str(target), manifest, threads)
    with RowProgress(f"preprocessing {fn_name.rsplit('.', 1)[-1]}", n) as bar:
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
        except ChunkFailed as exc:
            detail = f"\n\nworker traceback:\n{exc.trace}" if exc.trace else ""
            raise PreprocessError(f"{exc}{detail}") from None


def _map_processes(
    fn: Callable, job: Job, chunks: list[tuple[int, int]], bar: Any, workers: int, start_method: str | None
) -> None:
    payload = pickle_fn(fn)
    if payload is None:
        start_method = "fork"  # neither pickle nor cloudpickle can send fn: forked workers inherit it
        _FORKED_FN["fn"] = fn
    method = start_method or ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["datasets_hub.preprocess.workers"])  # imported once by the server, not per worker
    # a forked child of a process that used torch's OpenMP pool hangs in its next parallel region
    # unless it runs single-threaded (a forkserver child starts clean)
    job = replace(job, fn_bytes=payload, threads=1 if method == "fork" else job.threads)
    watch = WorkerWatch(ctx, job.fn_name)
    earlier = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(
        max_workers=min(workers, len(chunks)),
        mp_context=ctx,
        initializer=_watch_parent,
        initargs=(os.getpid(), watch.queue),
    )
    spawned: list[Any] = []  # this pool's worker processes, once it failed (killed, then reaped)
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
        # nothing may keep running (or stay stopped) after the error: every process of the pool is killed, those
        # not heard from yet too (SIGKILL ends a stopped one). One killed while it waited for work holds the
        # pool's queue lock for good, so a worker left alive would wait for that lock forever, and so would a
        # shutdown that waited for it.
        spawned = [p for p in multiprocessing.active_children() if p not in earlier]
        for process in spawned:
            process.kill()
        raise
    finally:
        pool.shutdown(wait=not spawned, cancel_futures=True)
        for process in spawned:
            process.join(10)  # reaped: killed above
        watch.close()
        _FORKED_FN.clear()


def _map_ray(fn: Callable, job: Job, chunks: list[tuple[int, int]], bar: Any) -> None:
    try:
        import ray
    except ImportError as exc:
        raise MissingDependency(
            f"backend='ray' needs Ray, which is not installed ({exc}). Fix: pip install 'datasets-hub[ray]'"
        ) from exc
    if not ray.is_initialized():
        ray.init()
    job = replace(job, fn_bytes=pickle_fn(fn, by_value=True), threads=1)
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
                    if isinstance(cause, ChunkFailed):
                        raise cause from None
                    raise PreprocessError(f"a Ray task running {job.fn_name} failed: {exc}") from exc
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
