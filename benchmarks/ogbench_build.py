"""Peak memory and time of building a sharded OGBench 100M-style set (issue 15: peak RSS < 2 GB).

Writes ``--shards`` shards of ``--rows`` raw rows each in OGBench's format (cube-double-play shapes:
40-dim float32 observations, 5-dim actions, 1001-row trajectories, qpos/qvel/button_states), serves
them from a local directory as the ``cube-double-play-100m-v0`` mirror (``mirror=file://…``), and builds
``ogbench/cube-double-play-100m-v0`` with ``shards=[0 .. shards-1]`` in a child process whose peak
RSS (``ru_maxrss``) is reported. Run:

    .venv/bin/python benchmarks/ogbench_build.py                 # 3 shards of 1M rows, ~2 GB of temp files
    .venv/bin/python benchmarks/ogbench_build.py --shards 2 --rows 200000

The JSON goes to ``benchmarks/results/ogbench_build.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command, environment, write_report

SET, STEM, TRAJ = "cube-double-play-100m-v0", "cube-double-play-v0", 1001

CHILD = """
import json, resource, sys, time
import datasets_hub as dh
t0 = time.perf_counter()
rb = dh.load("ogbench/{set}", shards={shards}, mirror="{mirror}")
seconds = time.perf_counter() - t0
print(json.dumps({{"transitions": len(rb), "seconds": seconds,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def write_shard(path: Path, rows: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    rows -= rows % TRAJ
    terminals = np.zeros(rows, dtype=np.float32)
    terminals[TRAJ - 1 :: TRAJ] = 1.0
    np.savez(
        path,
        observations=rng.standard_normal((rows, 40), dtype=np.float32),
        actions=rng.uniform(-1, 1, (rows, 5)).astype(np.float32),
        terminals=terminals,
        qpos=rng.standard_normal((rows, 28)),
        qvel=rng.standard_normal((rows, 22)),
        button_states=np.zeros((rows, 0), dtype=np.int64),
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ogbench_build.json"))
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dh-ogbench-build-"))
    try:
        mirror = tmp / "mirror"
        (mirror / SET).mkdir(parents=True)
        raw_rows = sum(write_shard(mirror / SET / f"{STEM}-{i:03d}.npz", args.rows, i) for i in range(args.shards))
        shard_bytes = sum(p.stat().st_size for p in (mirror / SET).iterdir())
        env = dict(os.environ, DATASETS_HUB_CACHE=str(tmp / "cache"), PYTHONPATH=str(ROOT))
        code = CHILD.format(set=SET, shards=list(range(args.shards)), mirror=mirror.as_uri())
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"the build failed:\n{out.stderr[-3000:]}")
        wall = time.perf_counter() - t0
        result = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{args.shards} shards, {raw_rows:,} raw rows, {shard_bytes / 2**20:.0f} MiB of .npz")
    print(f"build: {result['transitions']:,} transitions in {result['seconds']:.1f} s (process {wall:.1f} s)")
    print(f"peak RSS of the building process: {result['peak_rss_mb']:.0f} MiB (target < 2048 MiB)")
    write_report(
        {
            "command": command(),
            "environment": environment(),
            "shards": args.shards,
            "raw_rows": raw_rows,
            "npz_bytes": shard_bytes,
            **result,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
