"""Feature statistics in a child process instead of the build's thread, and one compiled pass: what each costs.

Run::

    .venv/bin/python benchmarks/stats_process.py --rows 200000 2000000 --repeats 5

Measurements of designs that were not adopted (docs/results/mixtures.md, "Statistics at build time").

1. **A child process.** The statistics of a build computed in a process of their own, so they never
   wait for the GIL the writer's thread holds. The writer-only state build of ``benchmarks/mixtures.py``
   (17 observation and 6 action values, a reward; chunks of 50,000 rows) is built, interleaved,
   ``--repeats`` times each way: without statistics (``FeatureStats.update`` a no-op), with them in the
   build's thread (the build as it is), and with them in a child process started per build by
   ``spawn``, per build by a ``forkserver`` whose server already runs (what a second build of a
   session would see), or ``kept``: one child serving every build (a session-wide worker; its start
   is not timed at all). Median wall and CPU seconds; CPU counts every thread of this process and the
   child's own CPU seconds, which it reports with the build's results. The child imports numpy and the
   statistics only (``_stats_child.py``: stand-ins for torch, which the float32 path does not use);
   each chunk's keys are copied into two shared-memory slots per key, allocated once per child and
   used in turn (one chunk in flight, as the thread keeps). Every child's results are checked equal
   to the thread's.
2. **One compiled pass.** The same per-value work (float64 sums and squares about a shift, min, max,
   a count per float32 high half) as one plain C loop, compiled with ``cc -O3`` when a compiler is
   there, over the same chunks as ``benchmarks/mixtures.py``'s "statistics alone": ns of CPU per
   value, next to the numpy implementation's in the same run. A bound for what a compiled kernel
   would cost, not a replacement (its sums run in sequence, outside the contract's error analysis).

Prints tables and writes ``benchmarks/results/stats_process.json``. Not a test.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
KEYS = ("observation", "action", "next/reward")


def run_child(conn: Any) -> None:
    """The child's entry: ``_stats_child`` is imported there only (it puts stand-ins for torch in
    ``sys.modules``, which this process must never get)."""
    import _stats_child

    _stats_child.child(conn)


class ProcessStats:
    """The parent's side: a child (``method``: a multiprocessing start method) and two shared-memory
    slots per key. ``result()`` ends a build's statistics; ``close()`` ends the child."""

    def __init__(self, method: str) -> None:
        import multiprocessing

        ctx: Any = multiprocessing.get_context(method)  # typeshed's BaseContext lacks Process
        self.conn, child_conn = ctx.Pipe()
        self.started = time.perf_counter()
        self.proc = ctx.Process(target=run_child, args=(child_conn,), daemon=True)
        self.proc.start()
        self.ready_s: float | None = None
        self.cpu_s = 0.0  # the child's CPU seconds up to its last result
        self.slots: dict[tuple[str, int], Any] = {}
        self.turn = 0
        self.in_flight = False

    def _answer(self) -> Any:
        if self.ready_s is None:
            self.ready_s = self.conn.recv() - self.started  # when the child was ready (the same clock)
        return self.conn.recv()

    def update(self, batch: Any) -> None:
        from multiprocessing import shared_memory

        import numpy as np

        if self.in_flight and self._answer() != "ok":
            raise RuntimeError("the statistics process did not answer")
        parts = []
        for key in KEYS:
            values = batch.get(tuple(key.split("/"))).numpy()
            slot = self.slots.get((key, self.turn))
            if slot is None or slot.size < values.nbytes:
                slot = self.slots[(key, self.turn)] = shared_memory.SharedMemory(create=True, size=values.nbytes)
            np.copyto(np.ndarray(values.shape, values.dtype, buffer=slot.buf), values)
            parts.append((slot.name, key, values.shape[0], values.shape[1]))
        self.conn.send(parts)
        self.turn, self.in_flight = 1 - self.turn, True

    def result(self) -> tuple[dict[str, Any], float]:
        """The build's results and the child's CPU seconds since the last result."""
        if self.in_flight:
            self._answer()
            self.in_flight = False
        self.conn.send("result")
        results = self._answer()
        total = self.conn.recv()
        cpu, self.cpu_s = total - self.cpu_s, total
        return results, cpu

    def close(self) -> None:
        self.conn.send(None)
        self.proc.join()
        for slot in self.slots.values():
            slot.close()
            slot.unlink()


def _first_chunk(rows: int) -> Any:
    from mixtures import CHUNK, chunk

    return chunk(0, min(rows, CHUNK), 17, 6, False)


def cpu_s() -> float:
    """CPU seconds of this process, every thread (a child's own are added apart: ``ProcessStats.cpu_s``)."""
    return time.process_time()


PROCESS_MODES = ("spawn", "forkserver", "kept")


def measure(rows: int, repeats: int) -> dict[str, Any]:
    """Builds of ``rows`` rows without statistics, with them in the thread and in a child process,
    interleaved ``repeats`` times: medians, and each way's median time from a child's start to its
    first answer. ``spawn`` and ``forkserver`` start a child per build (the forkserver's server is
    started before the timed builds: what a second build of a session sees; the first pays about
    what spawn does); ``kept`` is one child serving every build (its start is not timed at all)."""
    import multiprocessing

    from mixtures import make_build

    from datasets_hub.buffers import feature_stats

    real_update, real_result = feature_stats.FeatureStats.update, feature_stats.FeatureStats.result
    ready: dict[str, list[float]] = {m: [] for m in PROCESS_MODES}
    own_cpu: dict[str, list[float]] = {m: [] for m in PROCESS_MODES}  # each build's child: its CPU seconds
    checked: dict[str, Any] = {}
    child_cpu: list[float] = []  # the CPU seconds of the child of the build being timed
    server = multiprocessing.get_context("forkserver")
    # the server imports its preload by name with its own sys.path (Python 3.11 does not pass ours)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")]))
    server.set_forkserver_preload(["_stats_child", Path(__file__).stem])  # numpy and the statistics, once
    kept = ProcessStats("forkserver")  # also starts the server
    kept.update(_first_chunk(rows))  # warm: a first build's page faults (the kept child has served before)
    kept.result()

    def in_process(method: str) -> tuple[Any, Any]:
        def update(self: Any, batch: Any) -> None:
            if getattr(self, "_bench_child", None) is None:  # a build's first chunk
                self._bench_child = kept if method == "kept" else ProcessStats(method)
            self._bench_child.update(batch)

        def result(self: Any) -> dict[str, Any]:
            checked[method], cpu = self._bench_child.result()
            child_cpu.append(cpu)
            own_cpu[method].append(cpu)
            if self._bench_child is not kept:
                ready[method].append(self._bench_child.ready_s or 0.0)
                self._bench_child.close()
            return {}

        return update, result

    def thread_result(self: Any) -> dict[str, Any]:
        out = real_result(self)
        checked["thread"] = {k: {n: v for n, v in out[k].items() if n in ("mean", "std", "q01", "q99")} for k in KEYS}
        return out

    modes = {
        "without": (lambda self, batch: None, lambda self: {}),
        "thread": (real_update, thread_result),
        **{method: in_process(method) for method in PROCESS_MODES},
    }
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    make_build("stats-process", rows, 17, 6, force=True)  # warm: imports, the first build's page faults
    for _ in range(repeats):
        for mode, (update, result) in modes.items():
            stats_class = feature_stats.FeatureStats
            stats_class.update, stats_class.result = update, result  # type: ignore[method-assign]  # the mode timed
            try:
                child_cpu.clear()
                wall_start, cpu_start = time.perf_counter(), cpu_s()
                make_build("stats-process", rows, 17, 6, force=True)
                times[mode].append((time.perf_counter() - wall_start, cpu_s() - cpu_start + sum(child_cpu)))
            finally:
                stats_class.update, stats_class.result = real_update, real_result  # type: ignore[method-assign]  # restored
    kept.close()
    for method in PROCESS_MODES:
        if json.dumps(checked["thread"], sort_keys=True) != json.dumps(checked[method], sort_keys=True):
            raise RuntimeError(f"the statistics process's results ({method}) differ from the thread's")
    wall = {m: statistics.median(t[0] for t in v) for m, v in times.items()}
    cpu = {m: statistics.median(t[1] for t in v) for m, v in times.items()}
    with_stats = [m for m in modes if m != "without"]
    return {
        "rows": rows,
        "values": rows * 24,
        "wall_s": {m: round(v, 4) for m, v in wall.items()},
        "cpu_s": {m: round(v, 4) for m, v in cpu.items()},
        "wall_extra": {m: round(wall[m] / wall["without"] - 1, 4) for m in with_stats},
        "cpu_extra": {m: round(cpu[m] / cpu["without"] - 1, 4) for m in with_stats},
        "child_ready_s": {m: round(statistics.median(v), 4) for m, v in ready.items() if v},
        "child_cpu_s": {m: round(statistics.median(v), 4) for m, v in own_cpu.items()},
        "all": times,
    }


_PASS_C = r"""
#include <stdint.h>
#include <string.h>
void one_pass(const float *x, long rows, int c, const double *shift, double *s1, double *s2,
              float *lo, float *hi, int64_t *high, long stride) {
    for (long i = 0; i < rows; i++) {
        const float *row = x + i * c;
        for (int j = 0; j < c; j++) {
            float v = row[j];
            double d = (double)v - shift[j];
            uint32_t bits;
            s1[j] += d;
            s2[j] += d * d;
            if (v < lo[j]) lo[j] = v;
            if (v > hi[j]) hi[j] = v;
            memcpy(&bits, &v, 4);
            high[j * stride + (bits >> 16)]++;
        }
    }
}
"""


def compiled_pass(rows: int, repeats: int) -> dict[str, Any] | None:
    """ns of CPU per value of :data:`_PASS_C` and of ``FeatureStats`` over the state dataset's chunks
    (medians of ``repeats``); None without a C compiler."""
    import numpy as np
    from mixtures import CHUNK, chunk

    from datasets_hub.buffers.feature_stats import FeatureStats

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "one_pass.c").write_text(_PASS_C)
        library = Path(work) / "one_pass.so"
        subprocess.run(
            [compiler, "-O3", "-shared", "-fPIC", "-o", str(library), str(Path(work) / "one_pass.c")], check=True
        )
        one_pass = ctypes.CDLL(str(library)).one_pass
    array = np.ctypeslib.ndpointer
    one_pass.argtypes = [array(np.float32), ctypes.c_long, ctypes.c_int, array(np.float64), array(np.float64),
                         array(np.float64), array(np.float32), array(np.float32), array(np.int64), ctypes.c_long]  # fmt: skip
    chunks = [chunk(a, min(CHUNK, rows - a), 17, 6, False) for a in range(0, rows, CHUNK)]
    keys = [
        [np.ascontiguousarray(c.get(k).numpy()) for k in (("observation",), ("action",), ("next", "reward"))]
        for c in chunks
    ]
    values = sum(v.size for parts in keys for v in parts)
    compiled, numpy_times = [], []
    for _ in range(repeats):
        state = {}
        for width in {v.shape[1] for v in keys[0]}:
            state[width] = (np.zeros(width), np.zeros(width), np.zeros(width), np.full(width, np.inf, np.float32),
                            np.full(width, -np.inf, np.float32), np.zeros(width * 65544, np.int64))  # fmt: skip
        start = time.process_time()
        for parts in keys:
            for v in parts:
                shift, s1, s2, lo, hi, high = state[v.shape[1]]
                one_pass(v, v.shape[0], v.shape[1], shift, s1, s2, lo, hi, high, 65544)
        compiled.append(time.process_time() - start)
        stats = FeatureStats()
        start = time.process_time()
        for c in chunks:
            stats.update(c)
        numpy_times.append(time.process_time() - start)
    return {
        "values": values,
        "compiled_ns_per_value": round(statistics.median(compiled) / values * 1e9, 2),
        "numpy_ns_per_value": round(statistics.median(numpy_times) / values * 1e9, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[200_000, 2_000_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "stats_process.json"))
    args = ap.parse_args()
    from _report import command, environment, write_report

    with tempfile.TemporaryDirectory() as cache:
        os.environ["DATASETS_HUB_CACHE"] = cache
        runs = [measure(rows, args.repeats) for rows in args.rows]
    kernel = compiled_pass(args.rows[0], 2 * args.repeats + 1)
    print(f"statistics in the build's thread or in a child process (median of {args.repeats} builds each)")
    print(f"  {'rows':>9} {'where':<10} {'wall s':>15} {'extra':>7} {'CPU s':>15} {'extra':>7}  child: CPU s, ready")
    for r in runs:
        for mode in ("thread", *PROCESS_MODES):
            ready = f"{r['child_cpu_s'][mode]:.3f}" if mode in r["child_cpu_s"] else ""
            ready += f", {r['child_ready_s'][mode] * 1e3:.0f} ms" if mode in r["child_ready_s"] else ""
            print(
                f"  {r['rows']:>9,} {mode:<10} {r['wall_s']['without']:>7.3f}/{r['wall_s'][mode]:<7.3f} "
                f"{r['wall_extra'][mode]:>+7.1%} {r['cpu_s']['without']:>7.3f}/{r['cpu_s'][mode]:<7.3f} "
                f"{r['cpu_extra'][mode]:>+7.1%}  {ready}"
            )
    if kernel is None:
        print("one compiled pass: skipped (no C compiler)")
    else:
        print(
            f"one compiled pass over the state dataset's {kernel['values']:,} values: {kernel['compiled_ns_per_value']:.2f} "
            f"ns CPU per value; FeatureStats.update {kernel['numpy_ns_per_value']:.2f}"
        )
    write_report({"command": command(), "environment": environment(), "runs": runs, "compiled_pass": kernel}, args.out)


if __name__ == "__main__":
    main()
