"""Seed replay-buffer features vs TorchRL 0.14: ndim=2 slice sampling and the max-value writer's extend.

Run in .venv-bench (TorchRL installed): ``python benchmarks/replay_features.py``. Cases:

- ``slice ndim=2``: a ``LazyTensorStorage(N, ndim=2)`` filled from ``n_envs`` parallel environments
  (trajectories of random lengths, ``("collector", "traj_ids")``), sampled with
  ``SliceSampler(num_slices=..., traj_key=("collector", "traj_ids"))`` through a
  ``TensorDictReplayBuffer``; TorchRL's sampler gets ``cache_values=True`` (ours caches the
  boundaries until the next write too).
- ``max-value extend``: a full ``LazyTensorStorage(capacity)`` with ``TensorDictMaxValueWriter``;
  each call extends a batch of random ranks (some kept, most dropped).

Calls are interleaved (ours, TorchRL, ours, ...) with the garbage collector paused; the table
shows medians and the ratio TorchRL time / our time (target >= 3x). Writes JSON under
benchmarks/results/.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import command, environment, write_report

import datasets_hub as dh

try:
    import torchrl
    import torchrl.data as rl
except ImportError:  # the comparison needs .venv-bench
    torchrl = rl = None

TARGET = 3.0


def parallel_batch(n_envs: int, steps: int, seed: int) -> TensorDict:
    """``[n_envs, steps]`` TED-like data; trajectories of 20-400 steps, distinct values."""
    g = torch.Generator().manual_seed(seed)
    traj = torch.zeros(n_envs, steps, dtype=torch.int64)
    done = torch.zeros(n_envs, steps, 1, dtype=torch.bool)
    tid = 0
    for e in range(n_envs):
        t = 0
        while t < steps:
            length = int(torch.randint(20, 400, (1,), generator=g))
            traj[e, t : t + length] = tid
            done[e, min(t + length, steps) - 1] = True
            tid += 1
            t += length
    return TensorDict(
        {
            "observation": torch.randn(n_envs, steps, 17, generator=g),
            "action": torch.randn(n_envs, steps, 6, generator=g),
            ("collector", "traj_ids"): traj,
            "next": {
                "observation": torch.randn(n_envs, steps, 17, generator=g),
                "reward": torch.randn(n_envs, steps, 1, generator=g),
                "done": done,
                "terminated": done.clone(),
                "truncated": torch.zeros_like(done),
            },
        },
        [n_envs, steps],
    )


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int, warmup: int) -> dict[str, dict[str, float]]:
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    gc.collect()
    gc.disable()
    times: dict[str, list[float]] = {k: [] for k in fns}
    try:
        for _ in range(repeats):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return {k: {"median_s": statistics.median(v), "repeats": repeats} for k, v in times.items()}


def slice_case(args: argparse.Namespace) -> dict[str, Any]:
    steps = args.n // args.envs
    data = parallel_batch(args.envs, steps, seed=0)
    batch = args.num_slices * args.slice_len

    def ours() -> Any:
        rb = dh.TensorDictReplayBuffer(
            storage=dh.LazyTensorStorage(args.n, ndim=2),
            sampler=dh.SliceSampler(num_slices=args.num_slices, traj_key=("collector", "traj_ids")),
            batch_size=batch,
        )
        rb.extend(data)
        return rb

    fns = {}
    rb = ours()
    fns["ours"] = rb.sample
    if rl is not None:
        rl_rb = rl.TensorDictReplayBuffer(
            storage=rl.LazyTensorStorage(args.n, ndim=2),
            sampler=rl.SliceSampler(num_slices=args.num_slices, traj_key=("collector", "traj_ids"), cache_values=True),
            batch_size=batch,
        )
        rl_rb.extend(data.clone())
        fns["torchrl"] = rl_rb.sample
    # both return slices inside one trajectory and one environment
    s = rb.sample().reshape(args.num_slices, args.slice_len)
    assert (s["collector", "traj_ids"] == s["collector", "traj_ids"][:, :1]).all()
    assert (s["index"][..., 1] == s["index"][..., 1][:, :1]).all()
    timed = interleaved(fns, args.repeats, args.warmup)
    return {"case": f"slice ndim=2 ({args.envs} envs x {steps} steps, {args.num_slices}x{args.slice_len})", **timed}


def max_value_case(args: argparse.Namespace) -> dict[str, Any]:
    cap, k = args.capacity, args.extend
    g = torch.Generator().manual_seed(1)
    batches = [
        TensorDict({"r": torch.randn(k, generator=g), "obs": torch.randn(k, 17, generator=g)}, [k]) for _ in range(64)
    ]
    fill = TensorDict({"r": torch.randn(cap, generator=g), "obs": torch.randn(cap, 17, generator=g)}, [cap])
    fns = {}
    ours = dh.TensorDictReplayBuffer(
        storage=dh.LazyTensorStorage(cap), writer=dh.TensorDictMaxValueWriter(rank_key="r")
    )
    ours.extend(fill)
    it = iter(range(10**9))
    fns["ours"] = lambda: ours.extend(batches[next(it) % 64].clone())
    if rl is not None:
        theirs = rl.TensorDictReplayBuffer(
            storage=rl.LazyTensorStorage(cap), writer=rl.TensorDictMaxValueWriter(rank_key="r")
        )
        theirs.extend(fill.clone())
        it2 = iter(range(10**9))
        fns["torchrl"] = lambda: theirs.extend(batches[next(it2) % 64].clone())
    timed = interleaved(fns, args.writer_repeats, 2)
    if rl is not None:  # both keep the same best items
        ours_r = sorted(ours[:]["r"].tolist())
        theirs_r = sorted(theirs[:]["r"].tolist())
        assert ours_r == theirs_r, "the two writers kept different items"
    return {"case": f"max-value extend (capacity {cap}, batches of {k})", **timed}


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'case':<58} {'ours (median)':>14} {'torchrl (median)':>17} {'ratio':>7}"]
    for r in rows:
        ours = r["ours"]["median_s"] * 1e3
        rl_t = r.get("torchrl", {}).get("median_s")
        ratio = f"{rl_t / r['ours']['median_s']:.1f}x" if rl_t else "-"
        rl_s = f"{rl_t * 1e3:.3f} ms" if rl_t else "-"
        lines.append(f"{r['case']:<58} {ours:>11.3f} ms {rl_s:>17} {ratio:>7}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200_000, help="items in the ndim=2 storage")
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--num-slices", type=int, default=32)
    p.add_argument("--slice-len", type=int, default=32)
    p.add_argument("--capacity", type=int, default=100_000, help="max-value writer storage size")
    p.add_argument("--extend", type=int, default=1000, help="items per max-value extend")
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--writer-repeats", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "replay_features.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if rl is None:
        print("torchrl is not installed: run in .venv-bench (make bench-install) to compare", flush=True)
    rows = [slice_case(args), max_value_case(args)]
    for r in rows:
        if "torchrl" in r:
            r["ratio"] = r["torchrl"]["median_s"] / r["ours"]["median_s"]
            r["met"] = r["ratio"] >= TARGET
    print(table(rows))
    report = {
        "command": command(),
        "target_ratio": TARGET,
        "rows": rows,
        "env": environment(torchrl=getattr(torchrl, "__version__", None)),
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
