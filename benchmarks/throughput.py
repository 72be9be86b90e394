"""Amortised sampling: ``rb.sample_many(k)`` against ``k`` ``sample()`` calls, and ``prefetch=`` against
none with a simulated training step (issue 18).

Run::

    .venv/bin/python benchmarks/throughput.py               # ~2 min, ~0.4 GB of temp files
    .venv/bin/python benchmarks/throughput.py --n 200000    # quicker

The data is the D4RL-shaped hub build of ``benchmarks/sampling.py`` (``--n`` transitions), opened
memory-mapped and with ``in_memory=True``.

- **sample_many**: microseconds per batch of ``sample()`` and of ``sample_many(k)`` (uniform b256,
  slices 8x32 b256), calls interleaved, medians of ``--repeats`` calls, 1 torch thread.
- **prefetch**: a loop of ``sample()`` + a training step (a single-threaded matmul chain lasting
  about as long as ``--step-us``), microseconds per iteration with ``prefetch=0, 1, 2``. Prefetching
  overlaps sampling with the step only where a second core is free: numpy's take and torch's matmul
  release the GIL, the rest of a ``sample()`` holds it.

Prints a table and writes ``benchmarks/results/throughput.json``.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import command, environment, write_report
from sampling import make_build, time_calls

import datasets_hub as dh
from datasets_hub.build.storage import DatasetStorage

SAMPLERS: dict[str, Callable[[], Any]] = {
    "uniform, batch 256": dh.RandomSampler,
    "slices 8x32, batch 256": lambda: dh.SliceSampler(num_slices=8),
}


def buffer(storage: Any, sampler: Any, prefetch: int = 0) -> Any:
    return dh.TensorDictReplayBuffer(
        storage=storage,
        sampler=sampler,
        batch_size=256,
        prefetch=prefetch,
        generator=torch.Generator().manual_seed(0),
    )


def training_step(step_us: float) -> Callable[[Any], None]:
    """A stand-in for a training step: matmuls on the batch's observations, ~``step_us`` long."""
    w = torch.randn(17, 256)
    h = torch.randn(256, 256)

    def once(batch: Any) -> None:
        x = batch["observation"] @ w
        for _ in range(reps):
            x = torch.tanh(x @ h)

    probe = TensorDict({"observation": torch.randn(256, 17)}, batch_size=[256])
    reps = 1
    t0 = time.perf_counter()
    for _ in range(20):
        once(probe)
    per_rep = (time.perf_counter() - t0) / 20
    reps = max(1, round(step_us * 1e-6 / per_rep))
    return once


def sample_many_rows(storages: dict[str, Any], ks: list[int], repeats: int, warmup: int) -> list[dict[str, Any]]:
    rows = []
    for case, make in SAMPLERS.items():
        for where, storage in storages.items():
            fns: dict[str, Callable[[], Any]] = {"sample": buffer(storage, make()).sample}
            for k in ks:
                rb = buffer(storage, make())
                fns[f"sample_many({k})"] = lambda rb=rb, k=k: rb.sample_many(k)
            timed = time_calls(fns, repeats, warmup)
            per_batch = {"sample": timed["sample"]["median_s"] * 1e6}
            for k in ks:
                per_batch[f"sample_many({k})"] = timed[f"sample_many({k})"]["median_s"] * 1e6 / k
            row = {"case": case, "storage": where, "us_per_batch": per_batch}
            row["speedup"] = {name: per_batch["sample"] / us for name, us in per_batch.items() if name != "sample"}
            rows.append(row)
            print(f"  {case:<24} {where:<8} " + "  ".join(f"{k} {v:6.1f}us" for k, v in per_batch.items()), flush=True)
    return rows


def prefetch_rows(storages: dict[str, Any], step_us: float, iters: int, rounds: int) -> list[dict[str, Any]]:
    step = training_step(step_us)
    rows = []
    for where, storage in storages.items():
        buffers = {p: buffer(storage, dh.SliceSampler(num_slices=8), prefetch=p) for p in (0, 1, 2)}
        times: dict[int, list[float]] = {p: [] for p in buffers}
        step_only: list[float] = []
        batch = buffers[0].sample()
        for _ in range(rounds):  # interleaved rounds: the machine's load hits every setting alike
            t0 = time.perf_counter()
            for _ in range(iters):
                step(batch)
            step_only.append((time.perf_counter() - t0) / iters)
            for p, rb in buffers.items():
                gc.collect()
                t0 = time.perf_counter()
                for _ in range(iters):
                    step(rb.sample())
                times[p].append((time.perf_counter() - t0) / iters)
        row: dict[str, Any] = {"storage": where, "step_us": statistics.median(step_only) * 1e6}
        row["us_per_iteration"] = {f"prefetch={p}": statistics.median(ts) * 1e6 for p, ts in times.items()}
        row["speedup_over_no_prefetch"] = {
            name: row["us_per_iteration"]["prefetch=0"] / us for name, us in row["us_per_iteration"].items()
        }
        rows.append(row)
        print(
            f"  prefetch, {where:<8} step {row['step_us']:.0f}us  "
            + "  ".join(f"{k} {v:.0f}us" for k, v in row["us_per_iteration"].items()),
            flush=True,
        )
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="dh_throughput_", dir=args.tmp))
    try:
        path = make_build(args.n, tmp / "cache")
        storages = {"memmap": DatasetStorage(path), "in RAM": DatasetStorage(path, in_memory=True)}
        many = sample_many_rows(storages, args.k, args.repeats, args.warmup)
        prefetch = prefetch_rows(storages, args.step_us, args.iters, args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "benchmark": "throughput",
        "transitions": args.n,
        "env": environment(),
        "sample_many": many,
        "prefetch": prefetch,
        "command": command(),
    }


def table(report: dict[str, Any]) -> str:
    ks = [name for name in report["sample_many"][0]["us_per_batch"] if name != "sample"]
    lines = [
        "| case | storage | sample() us/batch | " + " | ".join(f"{k} us/batch" for k in ks) + " |",
        "|---|---|---:|" + "---:|" * len(ks),
    ]
    for row in report["sample_many"]:
        per = row["us_per_batch"]
        cells = " | ".join(f"{per[k]:.1f} ({row['speedup'][k]:.2f}x)" for k in ks)
        lines.append(f"| {row['case']} | {row['storage']} | {per['sample']:.1f} | {cells} |")
    lines += [
        "",
        "| slices 8x32 b256 + step | step alone | prefetch=0 | prefetch=1 | prefetch=2 |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in report["prefetch"]:
        it, sp = row["us_per_iteration"], row["speedup_over_no_prefetch"]
        lines.append(
            f"| {row['storage']} | {row['step_us']:.0f} us | {it['prefetch=0']:.0f} us | "
            f"{it['prefetch=1']:.0f} us ({sp['prefetch=1']:.2f}x) | {it['prefetch=2']:.0f} us ({sp['prefetch=2']:.2f}x) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000, help="transitions of the D4RL-shaped build")
    p.add_argument("--k", type=int, nargs="+", default=[4, 16], help="batches per sample_many call")
    p.add_argument("--repeats", type=int, default=200, help="timed calls per variant")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--step-us", type=float, default=300.0, help="length of the simulated training step")
    p.add_argument("--iters", type=int, default=100, help="training iterations per timed round")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds per prefetch setting")
    p.add_argument("--tmp", default=None)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "throughput.json"))
    report = run(p.parse_args(argv))
    print()
    print(table(report))
    write_report(report, p.parse_args(argv).out)


if __name__ == "__main__":
    main()
