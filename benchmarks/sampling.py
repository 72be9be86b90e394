"""Sampling benchmark: datasets_hub vs TorchRL and vs the memory-copy floor, in one run (issues 2, 18).

Run (TorchRL lives in its own venv, see the README)::

    .venv-bench/bin/python benchmarks/sampling.py --big 0     # ~3 min, ~1.5 GB of temp files
    .venv-bench/bin/python benchmarks/sampling.py             # + the 100M-row scaling storage (~10 min)
    .venv/bin/python benchmarks/sampling.py --no-torchrl --big 0

One D4RL-shaped dataset (``--n`` transitions, 17-float observations, 6-float actions, episodes of
1000 steps) is held five ways:

- ``build``: a hub build (lean TED on disk, what ``dh.load`` returns), memory-mapped;
- ``build in RAM``: the same build opened with ``in_memory=True`` (anonymous memory);
- ``online``: our ``LazyMemmapStorage`` filled with the TED rows (an online replay buffer);
- TorchRL 0.14 ``LazyMemmapStorage`` and ``LazyTensorStorage`` (RAM) filled with the same TED rows.
  The faster of the two in each case is the anchor of the ratios ("TorchRL best").

Per case (uniform b256, slices 8x32 b256, slices 128x32 b4096, an ensemble of 2 buffers b256) the
calls of every variant are interleaved (one call of each per round) so that load from other processes
hits all alike, in a new (seeded) order every round: the call that follows a call of another variant
finds the caches cold, and a fixed order would always charge that to the same variant (it made the
first of our storages look ~20us slower than the second). The garbage collector is paused; medians of
``--repeats`` calls (b4096: a quarter).

The floor is measured in the same run with the same index patterns (indices drawn by our sampler):
``floor, 12 takes`` is one ``numpy.take`` per leaf of a TED batch (the 12 leaves our build returns)
from anonymous memory; ``floor, packed`` one ``take`` over a packed copy of those leaves (one
~186-byte record per row). The scaling section (``--big``) times slices over a narrow storage of
``--n`` and ``--big`` rows. Prints a table and writes ``benchmarks/results/sampling.json``.

The "Python floor" (``python_floor``, see ``sampling_floor.py``) is a hand-written sampler per case with
no checks at all, over the same data laid out as a build lays it out (packed records, observations once
per episode) in anonymous memory, built from the benchmark's own arrays. Before timing, it must return
exactly what our buffer returns for the same seeds (keys, dtypes, shapes, values; the run stops if not).
``TorchRL best / Python floor`` is the highest ratio any CPython sampler with our output contract
reaches on this machine: where it is below a target, the target is out of reach of per-call work, and
``build / Python floor`` says how much per-call overhead is left to cut.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command, environment, write_report
from sampling_floor import PythonFloor, check_same

import datasets_hub as dh
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext

try:
    import torchrl
    from torchrl.data import LazyMemmapStorage as RLLazyMemmapStorage
    from torchrl.data import LazyTensorStorage as RLLazyTensorStorage
    from torchrl.data import ReplayBufferEnsemble as RLReplayBufferEnsemble
    from torchrl.data import TensorDictReplayBuffer as RLTensorDictReplayBuffer
    from torchrl.data.replay_buffers import RandomSampler as RLRandomSampler
    from torchrl.data.replay_buffers import SliceSampler as RLSliceSampler
except ImportError:  # the benchmark still runs, TorchRL columns marked absent
    torchrl = None

EPISODE_LEN = 1000
CHUNK = 100_000
OBS, ACT = 17, 6


def d4rl_chunk(start: int, n: int, *, derived: bool = True) -> TensorDict:
    """TED rows ``start..start+n`` of a D4RL-shaped dataset (halfcheetah sizes), episodes of 1000 steps.

    ``derived=False`` leaves out what a build derives itself (``next/done``): the loader's view."""
    rows = torch.arange(start, start + n)
    last = ((rows % EPISODE_LEN) == EPISODE_LEN - 1).unsqueeze(-1)
    gen = torch.Generator().manual_seed(start)
    obs = torch.randn(n + 1, OBS, generator=gen)
    nxt = obs[1:].clone()
    nxt[last[:, 0]] += 0.5  # an episode's final next observation is a state never observed
    td = TensorDict(
        {
            "observation": obs[:-1].clone(),
            "action": torch.rand(n, ACT, generator=gen) * 2 - 1,
            "episode": rows // EPISODE_LEN,
            "next": {
                "observation": nxt,
                "reward": torch.randn(n, 1, generator=gen),
                "terminated": torch.zeros(n, 1, dtype=torch.bool),
                "truncated": last.clone(),
            },
        },
        batch_size=[n],
    )
    if derived:
        td["next", "done"] = last.clone()
    return td


class _BenchLoader(Loader):
    """The benchmark's dataset as a loader, so that the build is the one ``dh.load`` would make."""

    name = "bench"
    format_version = 1

    def resources(self, spec: DatasetSpec) -> list:
        return []

    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDict]:
        n = int(spec.params["n"])
        for start in range(0, n, CHUNK):
            yield d4rl_chunk(start, min(CHUNK, n - start), derived=False)


def make_build(n: int, cache: Path) -> Path:
    from datasets_hub.build.pipeline import build

    os.environ["DATASETS_HUB_CACHE"] = str(cache)
    return build(DatasetSpec(id="bench/d4rl-shaped", loader="bench", params={"n": n}), _BenchLoader(), {}, [])


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
    for start in range(0, n, CHUNK):
        rb.extend(make(start, min(CHUNK, n - start)))


def time_calls(fns: dict[str, Callable[[], Any]], repeats: int, warmup: int) -> dict[str, dict[str, float]]:
    """Median (and p10/p90) seconds per call of each function, calls interleaved in a new order every
    round, GC paused."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    gc.collect()
    gc_was = gc.isenabled()
    gc.disable()  # a collection in the middle of one call is noise, not sampling cost
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    shuffle = random.Random(0).shuffle
    try:
        for _ in range(repeats):
            # a new order every round: the call right after another library's (which evicts the caches
            # the Python-level code and the allocator live in) costs ~20us more, so a fixed order would
            # always charge that to the same variant
            shuffle(order)
            for name, fn in order:
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


# -- the floor: numpy.take from anonymous memory -------------------------------------------------
def floor_arrays(n: int) -> tuple[list[np.ndarray], np.ndarray]:
    """The 12 leaves of a TED batch as ``[n, ...]`` arrays in anonymous memory, and the same bytes
    packed as one ``[n, record]`` uint8 array."""
    td = d4rl_chunk(0, n)
    b = torch.zeros(n, 1, dtype=torch.bool)
    leaves = [
        td["observation"],
        td["action"],
        td["episode"],
        td["episode"] % EPISODE_LEN,  # step
        b,  # done, terminated, truncated at the root
        b.clone(),
        b.clone(),
        td["next", "observation"],
        td["next", "reward"],
        td["next", "terminated"],
        td["next", "truncated"],
        td["next", "done"],
    ]
    arrays = [np.ascontiguousarray(t.numpy()) for t in leaves]
    packed = np.concatenate([a.reshape(n, -1).view(np.uint8) for a in arrays], axis=1)
    return arrays, np.ascontiguousarray(packed)


def cycling(pool: list[np.ndarray]) -> Callable[[], np.ndarray]:
    state = {"i": 0}

    def nxt() -> np.ndarray:
        state["i"] = (state["i"] + 1) % len(pool)
        return pool[state["i"]]

    return nxt


def floor_fns(arrays: list[np.ndarray], packed: np.ndarray, pool: list[np.ndarray]) -> dict[str, Callable]:
    leaves_next, packed_next = cycling(pool), cycling(pool)

    def leaves() -> list[np.ndarray]:
        rows = leaves_next()
        return [a.take(rows, axis=0) for a in arrays]

    def one() -> np.ndarray:
        return packed.take(packed_next(), axis=0)

    return {"floor_12_takes": leaves, "floor_packed": one}


# -- buffers -----------------------------------------------------------------------------------
def ours(storage: Any, sampler: Any, batch_size: int, seed: int = 0) -> Any:
    return dh.TensorDictReplayBuffer(
        storage=storage, sampler=sampler, batch_size=batch_size, generator=torch.Generator().manual_seed(seed)
    )


def theirs(storage: Any, sampler: Any, batch_size: int) -> Any:
    return RLTensorDictReplayBuffer(storage=storage, sampler=sampler, batch_size=batch_size)


def index_pool(storage: Any, sampler: Any, batch: int, count: int = 64) -> list[np.ndarray]:
    rb = ours(storage, sampler, batch)
    return [rb.sample()["index"].numpy().copy() for _ in range(count)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="dh_bench_", dir=args.tmp))
    results: list[dict[str, Any]] = []
    have_rl = torchrl is not None and not args.no_torchrl
    scaling: dict[str, Any] = {}
    try:
        n = args.n
        t0 = time.perf_counter()
        build_dir = make_build(n, tmp / "cache")
        storages: dict[str, Any] = {"build": DatasetStorage(build_dir)}
        print(f"built {n:,} D4RL-shaped transitions in {time.perf_counter() - t0:.1f}s", flush=True)
        t0 = time.perf_counter()
        storages["build_in_ram"] = DatasetStorage(build_dir, in_memory=True)
        print(f"copied the build into RAM in {time.perf_counter() - t0:.2f}s", flush=True)
        storages["online"] = dh.LazyMemmapStorage(n, scratch_dir=tmp / "ours")
        fill(ours(storages["online"], dh.RandomSampler(), 1), d4rl_chunk, n)
        if have_rl:
            t0 = time.perf_counter()
            storages["torchrl_memmap"] = RLLazyMemmapStorage(n, scratch_dir=str(tmp / "torchrl"))
            fill(theirs(storages["torchrl_memmap"], RLRandomSampler(), 1), d4rl_chunk, n)
            storages["torchrl_ram"] = RLLazyTensorStorage(n)
            fill(theirs(storages["torchrl_ram"], RLRandomSampler(), 1), d4rl_chunk, n)
            print(f"filled TorchRL's storages in {time.perf_counter() - t0:.1f}s", flush=True)
        arrays, packed = floor_arrays(n)
        python_floor = PythonFloor(d4rl_chunk, n, EPISODE_LEN, CHUNK)
        build = storages["build"]
        ours_names = ("build", "build_in_ram", "online")
        rl_names = ("torchrl_memmap", "torchrl_ram") if have_rl else ()

        def case(name: str, batch: int, target: float | None, fns: dict[str, Callable], repeats: int) -> None:
            for label, fn in fns.items():
                out = fn()
                got = out.numel() if hasattr(out, "numel") else len(out)
                if label in ours_names and got != batch:
                    raise RuntimeError(f"{name}: {label} returned {got} items for a batch of {batch}")
            timed = time_calls(fns, repeats, args.warmup)
            row: dict[str, Any] = {"case": name, "batch": batch, "target_ratio": target, "us": {}}
            for label, t in timed.items():
                row["us"][label] = t["median_s"] * 1e6
            row["timings"] = timed
            us = row["us"]
            best_rl = min(rl_names, key=lambda k: us[k]) if rl_names else None
            row["torchrl_anchor"] = best_rl
            if best_rl:
                row["ratio"] = us[best_rl] / us["build"]
                row["ratio_in_ram"] = us[best_rl] / us["build_in_ram"]
                row["ratio_online"] = us[best_rl] / us["online"]
                row["ratio_vs_torchrl_memmap"] = us["torchrl_memmap"] / us["build"]
                row["met"] = None if target is None else max(row["ratio"], row["ratio_in_ram"]) >= target
            row["in_memory_speedup"] = us["build"] / us["build_in_ram"]
            if best_rl and "python_floor" in us:
                row["torchrl_over_python_floor"] = us[best_rl] / us["python_floor"]  # the best reachable ratio
                row["reachable"] = None if target is None else row["torchrl_over_python_floor"] >= target
            if "python_floor" in us:
                row["build_over_python_floor"] = us["build"] / us["python_floor"]
            if "floor_12_takes" in us:
                row["over_floor_12_takes"] = us["build"] / us["floor_12_takes"]
                row["over_floor_packed"] = us["build"] / us["floor_packed"]
                row["in_ram_over_floor_12_takes"] = us["build_in_ram"] / us["floor_12_takes"]
            results.append(row)
            print(
                f"  {name:<28} "
                + "  ".join(f"{k} {v:7.0f}us" for k, v in us.items())
                + (f"   x{row['ratio']:.2f} (RAM x{row['ratio_in_ram']:.2f})" if best_rl else ""),
                flush=True,
            )

        def with_floor(name: str, fns: dict[str, Callable], mine: Callable[[int], Callable], hand: Callable) -> None:
            """Add the Python floor's sampler to ``fns``, once it returned what ours returns for the same seeds."""
            ours_fn, floor_fn = mine(1), hand(1)
            for _ in range(3):
                check_same(name, ours_fn(), floor_fn())
            fns["python_floor"] = hand(0)

        r = args.repeats
        cases = [
            ("uniform, batch 256", 256, 6.0, dh.RandomSampler, RLRandomSampler, r),
            ("slices 8x32, batch 256", 256, 10.0, lambda: dh.SliceSampler(num_slices=8), None, r),
            ("slices 128x32, batch 4096", 4096, 5.0, lambda: dh.SliceSampler(num_slices=128), None, max(30, r // 4)),
        ]
        for name, batch, target, make, make_rl, repeats in cases:
            fns = {k: ours(storages[k], make(), batch).sample for k in ours_names}
            slices = batch // 32 if "slices" in name else 0

            def hand(seed: int, slices: int = slices, batch: int = batch) -> Callable:
                gen = torch.Generator().manual_seed(seed)
                return python_floor.slices(gen, slices, 32) if slices else python_floor.uniform(gen, batch)

            def mine(seed: int, make: Callable = make, batch: int = batch) -> Callable:
                return ours(build, make(), batch, seed).sample

            with_floor(name, fns, mine, hand)
            for k in rl_names:
                sampler = (
                    make_rl()
                    if make_rl
                    else RLSliceSampler(
                        num_slices=batch // 32 if "128" in name else 8, traj_key="episode", cache_values=True
                    )
                )
                fns[k] = theirs(storages[k], sampler, batch).sample
            fns.update(floor_fns(arrays, packed, index_pool(storages["build"], make(), batch)))
            case(name, batch, target, fns, repeats)

        # an ensemble of two buffers over the same data, batch 256 (128 from each)
        def ensemble(storage: Any, seed: int = 0) -> Callable:
            members = [ours(storage, dh.RandomSampler(), 128, seed + 1 + i) for i in range(2)]
            generator = torch.Generator().manual_seed(seed)
            return dh.ReplayBufferEnsemble(*members, batch_size=256, generator=generator).sample

        def ensemble_floor(seed: int) -> Callable:
            members = [torch.Generator().manual_seed(seed + 1 + i) for i in range(2)]
            return python_floor.ensemble(torch.Generator().manual_seed(seed), members, 256)

        fns = {k: ensemble(storages[k]) for k in ours_names}
        with_floor("ensemble", fns, lambda seed: ensemble(build, seed), ensemble_floor)
        for k in rl_names:
            members = [theirs(storages[k], RLRandomSampler(), 128) for _ in range(2)]
            fns[k] = RLReplayBufferEnsemble(*members, batch_size=256).sample
        case("ensemble of 2, batch 256", 256, 5.0, fns, r)
        del fns, storages
        gc.collect()
        if args.big:
            scaling = scaling_run(args, tmp)
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


def scaling_run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """How slice cost grows with storage size (narrow rows: episode int32 + done bool)."""
    scaling: dict[str, Any] = {}
    for size in (args.n, args.big):
        t0 = time.perf_counter()
        st = dh.LazyMemmapStorage(size, scratch_dir=tmp / f"narrow_{size}")
        fill(ours(st, dh.RandomSampler(), 1), narrow_chunk, size)
        rb = ours(st, dh.SliceSampler(num_slices=8), 256)
        t1 = time.perf_counter()
        rb.sample()  # derives the episode boundaries once
        first = time.perf_counter() - t1
        timed = time_calls({"ours": rb.sample}, args.repeats, args.warmup)["ours"]
        print(f"  narrow {size:,} rows: filled in {t1 - t0:.1f}s, first sample {first:.2f}s, median "
              f"{timed['median_s'] * 1e6:.0f}us", flush=True)  # fmt: skip
        scaling[str(size)] = {"median_s": timed["median_s"], "first_call_s": first}
        del rb, st
        gc.collect()
        shutil.rmtree(tmp / f"narrow_{size}", ignore_errors=True)
    ratio = scaling[str(args.big)]["median_s"] / scaling[str(args.n)]["median_s"]
    scaling.update(ratio_big_over_small=ratio, target=1.5, met=ratio <= 1.5)
    return scaling


def table(report: dict[str, Any]) -> str:
    def us(row: dict[str, Any], key: str) -> str:
        return f"{row['us'][key]:.0f}" if key in row["us"] else "-"

    lines = [
        "Per batch, median us (interleaved calls, same run). Ratios: TorchRL best / ours (samples/s ours over theirs).",
        "",
        (
            "| case | build | build in RAM | online | TorchRL memmap | TorchRL RAM | Python floor | floor 12 takes "
            "| floor packed | ratio | ratio (RAM) | target | TorchRL / Python floor | build / Python floor "
            "| in_memory speedup | build / floor 12 takes |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for row in report["results"]:
        ratio = f"{row['ratio']:.1f}x" if "ratio" in row else "-"
        ratio_ram = f"{row['ratio_in_ram']:.1f}x" if "ratio_in_ram" in row else "-"
        target = f">= {row['target_ratio']:g}x" if row["target_ratio"] else ""
        if target and row.get("met") is not None:
            target += " met" if row["met"] else " MISSED"
        floor = f"{row['over_floor_12_takes']:.1f}x" if "over_floor_12_takes" in row else "-"
        reach = f"{row['torchrl_over_python_floor']:.1f}x" if "torchrl_over_python_floor" in row else "-"
        if reach != "-" and row.get("reachable") is False:
            reach += " (target out of reach)"
        over = f"{row['build_over_python_floor']:.2f}x" if "build_over_python_floor" in row else "-"
        lines.append(
            f"| {row['case']} | {us(row, 'build')} | {us(row, 'build_in_ram')} | {us(row, 'online')} | "
            f"{us(row, 'torchrl_memmap')} | {us(row, 'torchrl_ram')} | {us(row, 'python_floor')} | "
            f"{us(row, 'floor_12_takes')} | {us(row, 'floor_packed')} | {ratio} | {ratio_ram} | {target} | "
            f"{reach} | {over} | {row['in_memory_speedup']:.2f}x | {floor} |"
        )
    sc = report["scaling"]
    if "ratio_big_over_small" in sc:
        lines.append(
            f"\n{report['big']:,}-row / {report['transitions']:,}-row slice time (narrow rows): "
            f"{sc['ratio_big_over_small']:.2f}x (target <= 1.5x: {'met' if sc['met'] else 'MISSED'})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000, help="transitions of the D4RL-shaped dataset")
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
        print("torchrl is not installed: TorchRL columns are marked '-' (install the bench extra in .venv-bench)")
    report = run(args)
    print()
    print(table(report))
    write_report(report, args.out)


if __name__ == "__main__":
    main()
