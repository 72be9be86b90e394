"""Preprocessing benchmark: datasets_hub vs TorchRL on the same 1M-transition data and fn (issue 5).

Run (TorchRL lives in its own venv, see the README):

    .venv-bench/bin/python benchmarks/preprocess.py           # ~5 min on 2 cores, ~1 GB of temp files
    .venv/bin/python benchmarks/preprocess.py --no-torchrl    # datasets_hub only

Cases, each timed ``repeats`` times, ours and TorchRL interleaved (median reported):

- datasets_hub ``rb.preprocess(heavy, num_workers=w)`` for w = 0 (in the calling process), 1 and 2
  (worker processes; the forkserver is warmed up first, its one-off start is reported apart), each
  repeat with a new ``version=`` so nothing is reused; target: 2 workers >= 1.6x faster than 1;
- reuse: a fresh Python process imports datasets_hub, opens the build and calls ``preprocess`` with
  the same fn; the time after the imports until the first sample; target <= 1 s;
- TorchRL 0.14 ``BaseDatasetExperienceReplay.preprocess(heavy, num_workers=w, dest=...)`` (its
  tensordict ``map`` over a TensorStorage holding the same transitions as a full TED memmap).

``heavy`` is a CPU-bound, row-wise numpy feature map of the observation (numpy runs on one core,
so the worker count, not intra-op threads, decides the parallelism). Results go to a table on
stdout and to ``benchmarks/results/preprocess.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from _report import command, environment, write_report

import datasets_hub as dh

EPISODE_LEN = 1000
ROUNDS = 30  # rounds of sin/cos per observation value: the fn's CPU cost


def heavy(td):
    """Row-wise feature map: ROUNDS rounds of sin/cos over each observation, in float64 numpy."""
    x = td["observation"].numpy().astype(np.float64)
    for _ in range(ROUNDS):
        x = np.sin(x) * 0.9 + np.cos(x * 1.1) * 0.1
    td.set("feature", torch.from_numpy(x.astype(np.float32)))
    return td


def d4rl_loader_class():
    from datasets_hub.loader import Loader

    class D4RLShaped(Loader):
        """Halfcheetah-sized episodes of 1000 steps: obs 17, action 6, distinct random values."""

        name = "benchpre"
        format_version = 1

        def resources(self, spec):
            return []

        def episodes(self, spec, files, ctx):
            n, per = int(spec.params["transitions"]), 100 * EPISODE_LEN
            gen = torch.Generator().manual_seed(0)
            for start in range(0, n, per):
                rows = min(per, n - start)
                episodes = rows // EPISODE_LEN
                obs = torch.randn(episodes, EPISODE_LEN + 1, 17, generator=gen)
                done = torch.zeros(episodes, EPISODE_LEN, 1, dtype=torch.bool)
                done[:, -1] = True
                yield TensorDict(
                    {
                        "observation": obs[:, :-1].reshape(rows, 17),
                        "action": torch.rand(rows, 6, generator=gen) * 2 - 1,
                        "episode": (torch.arange(rows) // EPISODE_LEN) + start // EPISODE_LEN,
                        "next": {
                            "observation": obs[:, 1:].reshape(rows, 17),
                            "reward": torch.randn(rows, 1, generator=gen),
                            "terminated": torch.zeros(rows, 1, dtype=torch.bool),
                            "truncated": done.reshape(rows, 1),
                        },
                    },
                    batch_size=[rows],
                )

    return D4RLShaped


FRESH = """
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, {root!r}); sys.path.insert(0, {here!r})
import torch, tensordict, datasets_hub
from datasets_hub import TensorDictReplayBuffer
from datasets_hub.build.storage import DatasetStorage
import datasets_hub.preprocess.pipeline, datasets_hub.fingerprint, datasets_hub.buffers.replay_buffers
import preprocess as bench
t1 = time.perf_counter()
rb = TensorDictReplayBuffer(storage=DatasetStorage({build!r}), batch_size=256)
out = rb.preprocess(bench.heavy, version="reuse")
batch = out.sample()
t2 = time.perf_counter()
assert "feature" in batch.keys() and len(out) == {n}
print(t1 - t0, t2 - t1)
"""


def run(args: argparse.Namespace) -> dict[str, Any]:
    import preprocess as bench  # this file by module name: the fn a fresh process can import too

    from datasets_hub.build.pipeline import build
    from datasets_hub.build.storage import DatasetStorage
    from datasets_hub.loader import DatasetSpec

    work = Path(tempfile.mkdtemp(prefix="datasets_hub_bench_pre_", dir=args.tmp))
    os.environ["DATASETS_HUB_CACHE"] = str(work / "cache")
    results: dict[str, Any] = {}
    try:
        t0 = time.perf_counter()
        path = build(
            DatasetSpec(id="benchpre/d4rl-shaped", loader="benchpre", params={"transitions": args.n}),
            d4rl_loader_class()(),
            {},
            [],
        )
        print(f"built {args.n:,} transitions in {time.perf_counter() - t0:.1f}s", flush=True)
        rb = dh.TensorDictReplayBuffer(storage=DatasetStorage(path), batch_size=256)
        small = dh.TensorDictReplayBuffer(storage=dh.LazyTensorStorage(2000))
        small.extend(rb[:2000].exclude("index"))
        t0 = time.perf_counter()
        small.preprocess(bench.heavy, num_workers=2, chunk_size=1000)  # starts the forkserver (once per session)
        results["forkserver_start_s"] = time.perf_counter() - t0

        def ours(workers: int, i: int) -> float:
            t = time.perf_counter()
            out = rb.preprocess(bench.heavy, num_workers=workers, chunk_size=args.chunk, version=f"w{workers}-{i}")
            elapsed = time.perf_counter() - t
            shutil.rmtree(out.storage.path)  # keep the disk use bounded
            return elapsed

        theirs = None if args.no_torchrl else torchrl_runner(rb, work, args)
        times: dict[str, list[float]] = {}
        for i in range(args.repeats):  # interleaved, so load from other jobs hits both libraries alike
            for workers in (0, 1, 2):
                times.setdefault(f"ours_{workers}w", []).append(ours(workers, i))
                if theirs is not None and workers:
                    times.setdefault(f"torchrl_{workers}w", []).append(theirs(workers, i))
            print(
                f"repeat {i + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()),
                flush=True,
            )
        for key, values in times.items():
            results[key] = {
                "median_s": statistics.median(values),
                "min_s": min(values),
                "max_s": max(values),
                "times_s": values,
            }
        results["ours_speedup_2w"] = results["ours_1w"]["median_s"] / results["ours_2w"]["median_s"]
        if theirs is not None:
            results["torchrl_speedup_2w"] = results["torchrl_1w"]["median_s"] / results["torchrl_2w"]["median_s"]
            results["torchrl_version"] = theirs.version

        reference = rb.preprocess(bench.heavy, num_workers=2, chunk_size=args.chunk, version="reuse")
        fresh = []
        for _ in range(args.repeats):
            code = FRESH.format(root=str(ROOT), here=str(HERE), build=str(path), n=args.n)
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr)
            imports, reuse = map(float, proc.stdout.split())
            fresh.append({"imports_s": imports, "reuse_s": reuse})
        results["reuse_fresh_process"] = {
            "median_s": statistics.median(f["reuse_s"] for f in fresh),
            "imports_median_s": statistics.median(f["imports_s"] for f in fresh),
            "runs": fresh,
        }
        print(
            f"reuse in a fresh process: {results['reuse_fresh_process']['median_s'] * 1000:.0f} ms "
            f"(+ {results['reuse_fresh_process']['imports_median_s']:.1f}s of imports)",
            flush=True,
        )

        if theirs is not None:  # the same transform: TorchRL's first rows equal ours
            dest = work / "torchrl_check"
            storage = theirs.data.preprocess(
                bench.heavy, num_workers=1, chunksize=args.chunk, dest=dest, num_frames=2 * args.chunk
            )
            torch.testing.assert_close(storage._storage["feature"][:1000], reference[:1000]["feature"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def torchrl_runner(rb: Any, work: Path, args: argparse.Namespace) -> Callable[[int, int], float] | None:
    """``run(workers, i) -> seconds`` of TorchRL's preprocess on the same transitions, or None."""
    try:
        import torchrl
        from torchrl.data import TensorStorage
        from torchrl.data.datasets.common import BaseDatasetExperienceReplay
    except ImportError:
        print("torchrl is not installed: TorchRL rows are marked '-'", flush=True)
        return None
    import preprocess as bench

    class Data(BaseDatasetExperienceReplay):  # the smallest TorchRL dataset: a TensorStorage of TED rows
        def __init__(self, td):
            super().__init__(storage=TensorStorage(td), batch_size=256)

        data_path = data_path_root = property(lambda self: work)

        def _is_downloaded(self):
            return True

    data = Data(rb[:].memmap(prefix=str(work / "torchrl_source")))  # the same transitions, as a full TED memmap

    def once(workers: int, i: int) -> float:
        dest = work / f"torchrl_{workers}_{i}"
        t = time.perf_counter()
        storage = data.preprocess(bench.heavy, num_workers=workers, chunksize=args.chunk, dest=dest)
        elapsed = time.perf_counter() - t
        del storage
        shutil.rmtree(dest, ignore_errors=True)
        return elapsed

    once.data, once.version = data, torchrl.__version__  # type: ignore[attr-defined]  # a cache on the function
    return once


def table(report: dict[str, Any]) -> str:
    r = report["results"]

    def s(key: str) -> str:
        return f"{r[key]['median_s']:.2f} s" if key in r else "-"

    lines = ["| case | datasets_hub | TorchRL | target |", "|---|---:|---:|---|"]
    lines.append(f"| in the calling process (num_workers=0) | {s('ours_0w')} | - | |")
    lines.append(f"| 1 worker, {report['transitions']:,} transitions | {s('ours_1w')} | {s('torchrl_1w')} | |")
    lines.append(f"| 2 workers | {s('ours_2w')} | {s('torchrl_2w')} | |")
    met = r["ours_speedup_2w"] >= 1.6
    rl = f"{r['torchrl_speedup_2w']:.2f}x" if "torchrl_speedup_2w" in r else "-"
    lines.append(
        f"| speed-up 2 vs 1 worker | {r['ours_speedup_2w']:.2f}x | {rl} | >= 1.6x {'met' if met else 'MISSED'} |"
    )
    reuse = r["reuse_fresh_process"]
    lines.append(
        f"| reuse in a fresh process (after {reuse['imports_median_s']:.1f} s of imports) | "
        f"{reuse['median_s'] * 1000:.0f} ms | - | <= 1 s {'met' if reuse['median_s'] <= 1 else 'MISSED'} |"
    )
    lines.append(f"\nforkserver start (once per session, not in the figures above): {r['forkserver_start_s']:.1f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000, help="transitions (episodes of 1000 steps)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per case (median reported)")
    p.add_argument("--chunk", type=int, default=25_000, help="transitions per task, both libraries")
    p.add_argument("--no-torchrl", action="store_true", help="skip TorchRL even if installed")
    p.add_argument("--tmp", default=None, help="directory for the cache and memmap files (default: system temp)")
    p.add_argument("--out", default=str(HERE / "results" / "preprocess.json"))
    args = p.parse_args(argv)
    sys.path.insert(0, str(HERE))
    results = run(args)
    report = {
        "benchmark": "preprocess",
        "transitions": args.n,
        "repeats": args.repeats,
        "chunk": args.chunk,
        "rounds": ROUNDS,
        "env": environment(torchrl=results.get("torchrl_version")),
        "results": results,
        "command": command(),
    }
    print()
    print(table(report))
    write_report(report, args.out)


if __name__ == "__main__":
    main()
