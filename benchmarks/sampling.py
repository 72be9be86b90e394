"""Sampling benchmark: datasets_hub vs TorchRL on the same D4RL-shaped memmap data (issue 2).

Run (TorchRL lives in its own venv, see the README):

    .venv-bench/bin/python benchmarks/sampling.py            # full run, ~10 min, ~3 GB of temp files
    .venv/bin/python benchmarks/sampling.py --big 0          # without TorchRL columns, no 100M storage

Each case builds its buffers once, warms up, then times ``repeats`` single ``rb.sample()`` calls
and reports the median. A case TorchRL cannot run (not installed) shows ``-``. Results go to a
table on stdout and to ``benchmarks/results/sampling.json``.
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

from _report import command, environment, write_report

import datasets_hub as dh

# the storage contract loads before the concrete storages
import datasets_hub.buffers.storages

try:
    import torchrl
    from torchrl.data import LazyMemmapStorage as RLLazyMemmapStorage
    from torchrl.data import ReplayBufferEnsemble as RLReplayBufferEnsemble
    from torchrl.data import TensorDictReplayBuffer as RLTensorDictReplayBuffer
    from torchrl.data.replay_buffers import RandomSampler as RLRandomSampler
    from torchrl.data.replay_buffers import SliceSampler as RLSliceSampler
except ImportError:  # the benchmark still runs, TorchRL columns marked absent
    torchrl = None

EPISODE_LEN = 1000
CHUNK = 100_000


def d4rl_chunk(start: int, n: int) -> TensorDict:
    """Rows ``start..start+n`` of a D4RL-shaped TED dataset (halfcheetah sizes), episodes of 1000 steps."""
    rows = torch.arange(start, start + n)
    step = rows % EPISODE_LEN
    last = (step == EPISODE_LEN - 1).unsqueeze(-1)
    obs = torch.randn(n, 17)
    return TensorDict(
        {
            "observation": obs,
            "action": torch.rand(n, 6) * 2 - 1,
            "episode": rows // EPISODE_LEN,
            "next": {
                "observation": obs + 0.01,
                "reward": torch.randn(n, 1),
                "terminated": torch.zeros(n, 1, dtype=torch.bool),
                "truncated": last.clone(),
                "done": last.clone(),
            },
        },
        batch_size=[n],
    )


def narrow_chunk(start: int, n: int) -> TensorDict:
    """Rows of the narrow layout used to see how cost grows with size: int32 episode ids + done flags."""
    rows = torch.arange(start, start + n)
    return TensorDict(
        {
            "episode": (rows // EPISODE_LEN).to(torch.int32),
            "next": {"done": ((rows % EPISODE_LEN) == EPISODE_LEN - 1).unsqueeze(-1)},
        },
        batch_size=[n],
    )


def fill(rb: Any, make: Callable[[int, int], TensorDict], n: int) -> None:
    torch.manual_seed(0)
    for start in range(0, n, CHUNK):
        rb.extend(make(start, min(CHUNK, n - start)))


def time_calls(fns: dict[str, Callable[[], Any]], repeats: int, warmup: int) -> dict[str, dict[str, float]]:
    """Median (and p10/p90) seconds per call of each function.

    Calls are interleaved (a, b, a, b, ...) so that load from other processes on the machine
    hits both libraries alike; the garbage collector is paused while timing.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    gc.collect()
    gc_was = gc.isenabled()
    gc.disable()  # a collection in the middle of one call is noise, not sampling cost
    times: dict[str, list[float]] = {name: [] for name in fns}
    try:
        for _ in range(repeats):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    finally:
        if gc_was:
            gc.enable()
    out = {}
    for name, ts in times.items():
        ts.sort()
        out[name] = {
            "median_s": statistics.median(ts),
            "p10_s": ts[len(ts) // 10],
            "p90_s": ts[(len(ts) * 9) // 10],
            "repeats": repeats,
        }
    return out


def ours_buffer(storage: Any, sampler: Any, batch_size: int) -> Any:
    return dh.TensorDictReplayBuffer(
        storage=storage, sampler=sampler, batch_size=batch_size, generator=torch.Generator().manual_seed(0)
    )


def rl_buffer(storage: Any, sampler: Any, batch_size: int) -> Any:
    return RLTensorDictReplayBuffer(storage=storage, sampler=sampler, batch_size=batch_size)


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="dh_bench_", dir=args.tmp))
    results: list[dict[str, Any]] = []
    have_rl = torchrl is not None and not args.no_torchrl
    try:
        n = args.n
        t0 = time.perf_counter()
        ours_storage = dh.LazyMemmapStorage(n, scratch_dir=tmp / "ours")
        fill(ours_buffer(ours_storage, dh.RandomSampler(), 1), d4rl_chunk, n)
        print(
            f"filled datasets_hub LazyMemmapStorage with {n:,} D4RL-shaped rows in {time.perf_counter() - t0:.1f}s",
            flush=True,
        )
        if have_rl:
            t0 = time.perf_counter()
            rl_storage = RLLazyMemmapStorage(n, scratch_dir=str(tmp / "torchrl"))
            fill(rl_buffer(rl_storage, RLRandomSampler(), 1), d4rl_chunk, n)
            print(f"filled TorchRL LazyMemmapStorage in {time.perf_counter() - t0:.1f}s", flush=True)

        def case(
            name: str, batch: int, target: float | None, ours_fn: Callable, rl_fn: Callable | None, repeats: int
        ) -> dict[str, Any]:
            row: dict[str, Any] = {"case": name, "batch": batch, "target_ratio": target}
            out = ours_fn()
            got = out.numel() if hasattr(out, "numel") else len(out)
            if got != batch:
                raise RuntimeError(f"{name}: datasets_hub returned {got} items for a batch of {batch}")
            fns = {"ours": ours_fn}
            if rl_fn is not None:
                fns["torchrl"] = rl_fn
            timed = time_calls(fns, repeats, args.warmup)
            row["ours"] = timed["ours"]
            row["ours"]["samples_per_s"] = batch / row["ours"]["median_s"]
            if rl_fn is not None:
                row["torchrl"] = timed["torchrl"]
                row["torchrl"]["samples_per_s"] = batch / row["torchrl"]["median_s"]
                row["ratio"] = row["ours"]["samples_per_s"] / row["torchrl"]["samples_per_s"]
                row["met"] = None if target is None else row["ratio"] >= target
            else:
                row["torchrl"], row["ratio"], row["met"] = None, None, None
            results.append(row)
            print(
                f"  {name:<34} ours {row['ours']['median_s'] * 1e6:9.1f} us"
                + (
                    f"   torchrl {row['torchrl']['median_s'] * 1e6:9.1f} us   x{row['ratio']:.2f}"
                    if row["torchrl"]
                    else ""
                ),
                flush=True,
            )
            return row

        r = args.repeats
        # 1. uniform, batch 256
        rb = ours_buffer(ours_storage, dh.RandomSampler(), 256)
        rl = rl_buffer(rl_storage, RLRandomSampler(), 256) if have_rl else None
        case("uniform, batch 256", 256, 3.0, rb.sample, rl.sample if rl else None, r)
        # 2./3. slices (TorchRL's SliceSampler with cache_values=True, trajectories from "episode")
        for num_slices, batch, target in ((8, 256, 5.0), (128, 4096, 3.0)):
            rb = ours_buffer(ours_storage, dh.SliceSampler(num_slices=num_slices), batch)
            rl = (
                rl_buffer(
                    rl_storage, RLSliceSampler(num_slices=num_slices, traj_key="episode", cache_values=True), batch
                )
                if have_rl
                else None
            )
            case(
                f"slices {num_slices}x{batch // num_slices}, batch {batch}",
                batch,
                target,
                rb.sample,
                rl.sample if rl else None,
                r if batch <= 256 else max(30, r // 4),
            )
        # 4. two-buffer ensemble, batch 256 (both members uniform over the same data)
        ens = dh.ReplayBufferEnsemble(
            ours_buffer(ours_storage, dh.RandomSampler(), 128),
            ours_buffer(ours_storage, dh.RandomSampler(), 128),
            batch_size=256,
            generator=torch.Generator().manual_seed(0),
        )
        rl_ens = None
        if have_rl:
            rl_ens = RLReplayBufferEnsemble(
                rl_buffer(rl_storage, RLRandomSampler(), 128),
                rl_buffer(rl_storage, RLRandomSampler(), 128),
                batch_size=256,
            )
        case("ensemble of 2, batch 256", 256, None, ens.sample, rl_ens.sample if rl_ens else None, r)
        del rb, rl, ens, rl_ens
        gc.collect()

        # 5. how slice cost grows with storage size (narrow rows: episode int32 + done bool)
        scaling: dict[str, Any] = {}
        sizes = [n] + ([args.big] if args.big else [])
        for size in sizes:
            t0 = time.perf_counter()
            st = dh.LazyMemmapStorage(size, scratch_dir=tmp / f"narrow_{size}")
            fill(ours_buffer(st, dh.RandomSampler(), 1), narrow_chunk, size)
            rb = ours_buffer(st, dh.SliceSampler(num_slices=8), 256)
            t1 = time.perf_counter()
            rb.sample()  # derives the episode boundaries once
            first = time.perf_counter() - t1
            print(
                f"filled narrow storage of {size:,} rows in {t1 - t0:.1f}s; first slice sample (derives "
                f"boundaries) {first:.2f}s",
                flush=True,
            )
            row = case(f"slices 8x32 narrow, {size:,} rows", 256, None, rb.sample, None, r)
            scaling[str(size)] = {"median_s": row["ours"]["median_s"], "first_call_s": first}
            del rb, st
            gc.collect()
            shutil.rmtree(tmp / f"narrow_{size}", ignore_errors=True)
        if args.big:
            ratio = scaling[str(args.big)]["median_s"] / scaling[str(n)]["median_s"]
            scaling["ratio_big_over_small"] = ratio
            scaling["target"] = 1.5
            scaling["met"] = ratio <= 1.5
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "benchmark": "sampling",
        "transitions": args.n,
        "big": args.big,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "env": environment(torchrl=getattr(torchrl, "__version__", None) if have_rl else None),
        "results": results,
        "scaling": scaling,
        "command": command(),
    }


def table(report: dict[str, Any]) -> str:
    lines = [
        "| case | datasets_hub median | datasets_hub samples/s | TorchRL median | TorchRL samples/s | ratio | target |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in report["results"]:
        ours, rl = row["ours"], row["torchrl"]
        target = f">= {row['target_ratio']:g}x" if row["target_ratio"] else ""
        if target and row["met"] is not None:
            target += " met" if row["met"] else " MISSED"
        lines.append(
            f"| {row['case']} | {ours['median_s'] * 1e6:.0f} us | {ours['samples_per_s']:,.0f} | "
            + (
                f"{rl['median_s'] * 1e6:.0f} us | {rl['samples_per_s']:,.0f} | {row['ratio']:.1f}x"
                if rl
                else "- | - | -"
            )
            + f" | {target} |"
        )
    sc = report["scaling"]
    if "ratio_big_over_small" in sc:
        lines.append(
            f"\n100M-row / 1M-row slice time (narrow rows): {sc['ratio_big_over_small']:.2f}x "
            f"(target <= 1.5x: {'met' if sc['met'] else 'MISSED'})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000, help="transitions in the D4RL-shaped storage")
    p.add_argument("--big", type=int, default=100_000_000, help="rows of the narrow scaling storage (0: skip)")
    p.add_argument("--repeats", type=int, default=400, help="timed calls per case (batch 4096: a quarter)")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for both libraries (1: stable latencies on a shared 2-core machine)",
    )
    p.add_argument("--no-torchrl", action="store_true", help="skip TorchRL even if installed")
    p.add_argument("--tmp", default=None, help="directory for the memmap files (default: system temp)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sampling.json"))
    args = p.parse_args(argv)
    if torchrl is None and not args.no_torchrl:
        print(
            "torchrl is not installed: TorchRL columns are marked '-' "
            "(install the bench extra in .venv-bench to compare)",
            flush=True,
        )
    report = run(args)
    print()
    print(table(report))
    write_report(report, args.out)


if __name__ == "__main__":
    main()
