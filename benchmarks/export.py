"""Export benchmark: the time to export a build to each format against the time to build it.

Run::

    .venv/bin/python benchmarks/export.py                      # 200k transitions
    .venv/bin/python benchmarks/export.py --rows 1000000       # the 1M-frame figure of issue 33

A generated dataset (D4RL-like: observation 17 float32, action 6 float32, reward, episodes of 1000
steps ending by timeout) is built ``--repeats`` times from in-memory chunks (the build time: generating
the values and writing the lean TED build, no download or upstream decoding), and after each build that
build is exported to every format (interleaved, so that a change of the machine's load weighs on builds
and exports alike), each in a fresh subprocess so that its peak RSS is its own (``ru_maxrss``; the build
is read through memory maps, so RSS counts the pages touched). Times exclude imports (done before the
clock in both); CPU seconds (user + system, all threads) are reported beside wall seconds. Medians, with
the ratios export / build. Prints a table and writes ``benchmarks/results/export.json``. Not a test:
figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "export.json"
FORMATS = ("published", "lerobot", "hf", "minari", "rlds")
OBS, ACT, EPISODE = 17, 6, 1000

CHILD_BUILD = r"""
import json, resource, sys, time
import torch
from tensordict import TensorDict
from datasets_hub.build.pipeline import build
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader

rows, obs_dim, act_dim, episode = (int(a) for a in sys.argv[1:5])

class Generated(FakeLoader):
    def episodes(self, spec, files, ctx):
        gen = torch.Generator().manual_seed(0)
        per_chunk = 100
        for first in range(0, rows // episode, per_chunk):
            count = min(per_chunk, rows // episode - first)
            n = count * episode
            states = torch.randn(count, episode + 1, obs_dim, generator=gen)
            truncated = torch.zeros(count, episode, 1, dtype=torch.bool)
            truncated[:, -1] = True
            yield TensorDict({
                "observation": states[:, :-1].reshape(n, obs_dim),
                "action": torch.rand(n, act_dim, generator=gen) * 2 - 1,
                "episode": torch.arange(first, first + count).repeat_interleave(episode),
                "next": {
                    "observation": states[:, 1:].reshape(n, obs_dim),
                    "reward": torch.randn(n, 1, generator=gen),
                    "terminated": torch.zeros(n, 1, dtype=torch.bool),
                    "truncated": truncated.reshape(n, 1),
                },
            }, batch_size=[n])

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime

start, cpu_start = time.perf_counter(), cpu()
path = build(DatasetSpec(id="bench/export-v0", loader="fake", params={"rows": rows}), Generated(), {}, [])
seconds, cpu_seconds = time.perf_counter() - start, cpu() - cpu_start
print(json.dumps({"path": str(path), "seconds": seconds, "cpu_seconds": cpu_seconds,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

CHILD_EXPORT = r"""
import json, resource, sys, time
import datasets_hub as dh

build, out, fmt = sys.argv[1:4]
# imports before the clock, as the build's are: the figure is the export's own work
import importlib
for name in {"published": ("zarr", "datasets_hub.remote.publish"), "lerobot": ("pyarrow.parquet", "PIL.Image"),
             "hf": ("pyarrow.parquet", "PIL.Image"), "minari": ("h5py",), "rlds": ("google_crc32c", "PIL.Image")}[fmt]:
    importlib.import_module(name)
for name in ("datasets_hub.remote.publish", "datasets_hub.remote.storage", "datasets_hub.downloads.fetch"):
    importlib.import_module(name)
if fmt != "published":
    importlib.import_module("datasets_hub.exporters." + {"hf": "hf_datasets"}.get(fmt, fmt))
options = {"dataset_id": out.rsplit("/", 1)[1]} if fmt == "minari" else None
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime

start, cpu_start = time.perf_counter(), cpu()
dh.export(build, out, format=fmt, options=options, show_progress=False)
seconds, cpu_seconds = time.perf_counter() - start, cpu() - cpu_start
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _child(code: str, *args: object, env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode:
        raise SystemExit(f"child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    import os

    sys.path.insert(0, str(HERE))
    from _report import command, environment, write_report

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=200_000, help="transitions (a multiple of 1000)")
    parser.add_argument("--repeats", type=int, default=3, help="exports per format (median reported)")
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="datasets_hub_bench_export_") as scratch:
        env = {
            **os.environ,
            "DATASETS_HUB_CACHE": str(Path(scratch) / "cache"),
            "DATASETS_HUB_PROGRESS_INTERVAL": "3600",
        }
        # interleaved: repeat i builds, then exports that build to every format, so that a change of the
        # machine's load during the run weighs on builds and exports alike
        builds: list[dict] = []
        runs: dict[str, list[dict]] = {fmt: [] for fmt in args.formats}
        size: dict[str, int] = {}
        for i in range(args.repeats):  # each build from nothing, in a cache of its own
            fresh = {**env, "DATASETS_HUB_CACHE": str(Path(scratch) / f"cache{i}")}
            builds.append(_child(CHILD_BUILD, args.rows, OBS, ACT, EPISODE, env=fresh))
            for fmt in args.formats:
                out = Path(scratch) / f"{fmt}{i}" / "bench-export-v0"
                runs[fmt].append(_child(CHILD_EXPORT, builds[-1]["path"], out, fmt, env=fresh))
                size[fmt] = _size(out)
                shutil.rmtree(out.parent)
        built = {
            "seconds": statistics.median(b["seconds"] for b in builds),
            "cpu_seconds": statistics.median(b["cpu_seconds"] for b in builds),
            "peak_rss_mb": max(b["peak_rss_mb"] for b in builds),
            "runs_s": [round(b["seconds"], 3) for b in builds],
        }
        build_path = Path(builds[-1]["path"])
        rows = []
        for fmt in args.formats:
            seconds = statistics.median(r["seconds"] for r in runs[fmt])
            cpu_seconds = statistics.median(r["cpu_seconds"] for r in runs[fmt])
            rows.append(
                {
                    "format": fmt,
                    "seconds": round(seconds, 3),
                    "ratio_to_build": round(seconds / built["seconds"], 2),
                    "cpu_seconds": round(cpu_seconds, 3),
                    "cpu_ratio_to_build": round(cpu_seconds / built["cpu_seconds"], 2),
                    "transitions_per_s": round(args.rows / seconds),
                    "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs[fmt])),
                    "output_mb": round(size[fmt] / 1e6, 1),
                    "runs_s": [round(r["seconds"], 3) for r in runs[fmt]],
                }
            )
        build_mb = _size(build_path) / 1e6

    print(
        f"\n{args.rows} transitions; build: {built['seconds']:.2f} s ({built['cpu_seconds']:.2f} s CPU), "
        f"{build_mb:.0f} MB, peak RSS {built['peak_rss_mb']:.0f} MB"
    )
    print(
        f"{'format':<10} {'export s':>9} {'x build':>8} {'CPU s':>7} {'CPU x build':>12} {'trans/s':>10} "
        f"{'peak RSS MB':>12} {'output MB':>10}"
    )
    for r in rows:
        print(
            f"{r['format']:<10} {r['seconds']:>9.2f} {r['ratio_to_build']:>8.2f} {r['cpu_seconds']:>7.2f} "
            f"{r['cpu_ratio_to_build']:>12.2f} {r['transitions_per_s']:>10} {r['peak_rss_mb']:>12} {r['output_mb']:>10}"
        )
    report = {
        "benchmark": "export",
        "command": command(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "environment": environment(),
        "rows": args.rows,
        "build": {
            "seconds": round(built["seconds"], 3),
            "cpu_seconds": round(built["cpu_seconds"], 3),
            "runs_s": built["runs_s"],
            "peak_rss_mb": round(built["peak_rss_mb"]),
            "mb": round(build_mb, 1),
        },
        "exports": rows,
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
