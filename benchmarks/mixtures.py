"""Mixtures, offline+online buffers and feature statistics: what each costs.

Run::

    .venv/bin/python benchmarks/mixtures.py                  # ~1-2 minutes on 2 busy cores
    .venv/bin/python benchmarks/mixtures.py --rows 1000000   # the issue's 1M-frame seeding case

Four parts, each on synthetic data made here (a loader of random D4RL-shaped episodes of 1000 steps,
so the builds are the ones ``datasets_hub.load`` would make):

1. **Statistics at build time.** The same dataset built with the per-key statistics pass and with it
   replaced by a no-op, interleaved (without then with, and with then without, in turn), ``--repeats``
   times each after one untimed build, the garbage collected before each; median wall and CPU seconds
   and their ratio (CPU time counts every thread of the process: it holds on a loaded machine, wall
   time does not). Three datasets: a D4RL-layout HDF5 file of ``--rows`` rows built by the D4RL
   loader (the realistic case: reading the file is part of a build), the same shape from an in-memory
   loader (the writer alone: the worst case for the ratio), and ``--image-rows`` rows of 84x84x3 uint8.
2. **Mixture rate.** Three builds whose state/action sizes differ (11/3, 17/6, 39/8 values); items per
   CPU second (median of 5 runs; see ``rate``) of each member alone and of the mixture (``exact`` shares, sizes as weights, padding with
   masks, no normalisation and with ``mean_std`` normalisation of observation and action), batches of
   each of ``--batches``, uniform rows and slices of 32; the ratio to the slowest member alone (the bar: >= 0.9).
3. **Offline+online seeding.** In a fresh process each: open the ``--rows`` build as the offline part of
   an ``OfflineOnlineBuffer`` (time, and peak RSS above the process's RSS after ``import datasets_hub``);
   then items per CPU second of the mixed buffer (ratio 0.5 after 10k online rows) against the offline
   build alone.
4. **Seeding against LeRobot.** The same LeRobot v3.0 dataset (``--lerobot-frames`` frames, states and
   actions, no cameras) seeded into our offline+online buffer (its build timed apart: it is made once)
   and into LeRobot 0.4.4's ``ReplayBuffer.from_lerobot_dataset``, each in a fresh process: time, RSS and
   peak RSS (VmHWM, the process's own high-water mark). LeRobot runs from its own venv
   (``--lerobot-python``; skipped when it is missing).

Prints tables and writes ``benchmarks/results/mixtures.json``. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command, environment, write_report

import datasets_hub as dh
from datasets_hub.buffers import feature_stats
from datasets_hub.buffers.mixture import Mixture
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers import RandomSampler
from datasets_hub.buffers.samplers.slice import SliceSampler
from datasets_hub.buffers.writers import ImmutableDatasetWriter
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext

EPISODE = 1000
CHUNK = 50_000


def chunk(start: int, n: int, obs: int, act: int, image: bool) -> TensorDict:
    rows = torch.arange(start, start + n)
    last = ((rows % EPISODE) == EPISODE - 1).unsqueeze(-1)
    gen = torch.Generator().manual_seed(start * 7 + obs)
    state = torch.randn(n + 1, obs, generator=gen)
    nxt = state[1:].clone()
    nxt[last[:, 0]] += 0.5
    td = TensorDict(
        {
            "observation": state[:-1].clone(),
            "action": torch.rand(n, act, generator=gen) * 2 - 1,
            "episode": rows // EPISODE,
            "next": {
                "observation": nxt,
                "reward": torch.randn(n, 1, generator=gen),
                "terminated": torch.zeros(n, 1, dtype=torch.bool),
                "truncated": last.clone(),
            },
        },
        batch_size=[n],
    )
    if image:
        pixels = torch.randint(0, 256, (n, 84, 84, 3), dtype=torch.uint8, generator=gen)
        td["pixels"] = pixels
        td["next", "pixels"] = torch.cat([pixels[1:], pixels[-1:]])
        td["next", "pixels"][last[:, 0]] = 0
    return td


class SyntheticLoader(Loader):
    name = "bench"
    format_version = 1

    def resources(self, spec: DatasetSpec) -> list:
        return []

    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDict]:
        p = spec.params
        step = CHUNK if not p["image"] else 5000
        for start in range(0, p["rows"], step):
            yield chunk(start, min(step, p["rows"] - start), p["obs"], p["act"], p["image"])


def make_build(name: str, rows: int, obs: int, act: int, image: bool = False, force: bool = False) -> Path:
    from datasets_hub.build.pipeline import build

    params = {"rows": rows, "obs": obs, "act": act, "image": image}
    spec = DatasetSpec(id=f"bench/{name}", loader="bench", params=params)
    return build(spec, SyntheticLoader(), {}, [], force=force)


# -- 1. statistics at build time ----------------------------------------------------------------------
def _d4rl_builder(rows: int, work: Path) -> Any:
    """A build of a D4RL-layout HDF5 file through the real D4RL loader (benchmarks/build.py's file)."""
    from build import make_file

    from datasets_hub import catalogue

    source = work / "stats-d4rl.hdf5"
    if not source.exists():
        make_file(source, rows)
    dataset_id = "d4rl/bench-stats"
    catalogue.register_dataset(dataset_id, loader="d4rl", resources=[{"url": source.as_uri(), "name": "bench.hdf5"}])
    dh.download(dataset_id)  # the raw copy once, outside the timed builds
    return lambda: dh.download(dataset_id, force=True)


def stats_cost(rows: int, image_rows: int, repeats: int, work: Path) -> list[dict[str, Any]]:
    """Builds with the statistics pass and with it replaced by a no-op, interleaved: median wall and
    CPU seconds (CPU: every thread of this process, the measure that holds on a loaded machine)."""
    real_update, real_result = feature_stats.FeatureStats.update, feature_stats.FeatureStats.result
    cases = {
        "d4rl file": (rows, _d4rl_builder(rows, work)),
        "state": (rows, lambda: make_build("stats-state", rows, 17, 6, force=True)),
        "image": (image_rows, lambda: make_build("stats-image", image_rows, 7, 2, image=True, force=True)),
    }
    stats_cpu: list[float] = []  # CPU seconds of the statistics thread's update calls (one build)

    def timed_update(self: feature_stats.FeatureStats, batch: TensorDict) -> None:
        start = time.thread_time()
        real_update(self, batch)
        stats_cpu.append(time.thread_time() - start)

    out = []
    for name, (n, run) in cases.items():
        times: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
        thread_cpu: list[float] = []
        run()  # untimed: the first build of a kind pays its imports and cold caches, whichever mode it is
        for repeat in range(repeats):
            # each order in turn (without first, then with first): a build's place in the pair (the
            # build before it deleted, caches warmed by it) weighs on both sides alike
            for mode in ("without", "with") if repeat % 2 == 0 else ("with", "without"):
                if mode == "without":  # the statistics pass replaced by a no-op: the baseline
                    feature_stats.FeatureStats.update = lambda self, batch: None  # type: ignore[method-assign]  # baseline
                    feature_stats.FeatureStats.result = lambda self: {}  # type: ignore[method-assign]  # baseline
                else:
                    feature_stats.FeatureStats.update = timed_update  # type: ignore[method-assign]  # measured
                    stats_cpu.clear()
                try:
                    gc.collect()  # not the garbage of the build before (a build with statistics leaves more)
                    wall_start, cpu_start = time.perf_counter(), time.process_time()
                    run()
                    times[mode].append((time.perf_counter() - wall_start, time.process_time() - cpu_start))
                    if mode == "with":
                        thread_cpu.append(sum(stats_cpu))
                finally:
                    feature_stats.FeatureStats.update = real_update  # type: ignore[method-assign]  # restored
                    feature_stats.FeatureStats.result = real_result  # type: ignore[method-assign]  # restored
        wall = {m: statistics.median(t[0] for t in v) for m, v in times.items()}
        cpu = {m: statistics.median(t[1] for t in v) for m, v in times.items()}
        out.append(
            {
                "dataset": name,
                "rows": n,
                "wall_s_without_stats": round(wall["without"], 3),
                "wall_s_with_stats": round(wall["with"], 3),
                "wall_extra": round(wall["with"] / wall["without"] - 1, 4),
                "cpu_s_without_stats": round(cpu["without"], 3),
                "cpu_s_with_stats": round(cpu["with"], 3),
                "cpu_extra": round(cpu["with"] / cpu["without"] - 1, 4),
                "stats_thread_cpu_s": round(statistics.median(thread_cpu), 4),
                "all": times,
            }
        )
    return out


def stats_alone(rows: int, image_rows: int, repeats: int) -> list[dict[str, Any]]:
    """``FeatureStats`` alone over the chunks of the writer-only builds above, held in memory: CPU
    seconds per value (update of every chunk, then the result), median of ``repeats``."""
    out = []
    for name, n, obs, act, image, step in (
        ("state", rows, 17, 6, False, CHUNK),
        ("image", image_rows, 7, 2, True, 5000),
    ):
        chunks = [chunk(a, min(step, n - a), obs, act, image) for a in range(0, n, step)]
        values = n * (obs + act + 1 + (84 * 84 * 3 if image else 0))  # next/observation: observation's stats
        times = []
        for _ in range(repeats):
            stats = feature_stats.FeatureStats()
            start = time.process_time()
            for c in chunks:
                stats.update(c)
            stats.result()
            times.append(time.process_time() - start)
        cpu = statistics.median(times)
        out.append(
            {"dataset": name, "values": values, "cpu_s": round(cpu, 4), "ns_per_value": round(cpu / values * 1e9, 2)}
        )
    return out


def stats_beside_python(rows: int, repeats: int) -> dict[str, Any]:
    """The statistics of the writer-only state dataset's chunks computed in a thread, as a build does,
    while this thread runs pure Python (a loader's or writer's Python work) or waits: wall and CPU
    milliseconds of that thread, medians of ``repeats``. Each numpy call of the statistics hands the GIL
    back and must take it again, which a thread running Python holds up to ``sys.getswitchinterval()``."""
    import threading

    chunks = [chunk(a, min(CHUNK, rows - a), 17, 6, False) for a in range(0, rows, CHUNK)]

    def job(out: list[tuple[float, float]]) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        stats = feature_stats.FeatureStats()
        for c in chunks:
            stats.update(c)
        out.append((time.perf_counter() - wall, time.thread_time() - cpu))

    result: dict[str, Any] = {"values": rows * 24}
    for mode in ("waiting", "python"):
        runs: list[tuple[float, float]] = []
        for _ in range(repeats):
            worker = threading.Thread(target=job, args=(runs,))
            worker.start()
            while mode == "python" and worker.is_alive():
                total = 0
                for i in range(20_000):
                    total += i
            worker.join()
        result[mode] = {
            "wall_ms": round(statistics.median(r[0] for r in runs) * 1e3, 1),
            "cpu_ms": round(statistics.median(r[1] for r in runs) * 1e3, 1),
        }
    return result


# -- 2. mixture rate ----------------------------------------------------------------------------------
def rate(fn: Any, items: int, seconds: float, repeats: int = 5) -> float:
    """Items per CPU second of this process (median of ``repeats`` runs of ``seconds / repeats`` each):
    CPU time holds on a machine whose other jobs take the cores, wall time does not. Sampling runs on
    one thread here (numpy gathers), so on an idle machine the two agree."""
    fn()  # warm
    runs = []
    for _ in range(repeats):
        n, start, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds / repeats:
            fn()
            n += 1
        runs.append(n * items / max(time.process_time() - cpu, 1e-9))
    return statistics.median(runs)


def buffer(path: Path, sampler: Any, seed: int) -> TensorDictReplayBuffer:
    return TensorDictReplayBuffer(
        storage=DatasetStorage(path),
        sampler=sampler,
        writer=ImmutableDatasetWriter(),
        generator=torch.Generator().manual_seed(seed),
    )


def mixture_rate(rows: int, batches: list[int], seconds: float, image: bool = False) -> list[dict[str, Any]]:
    """Each member alone and the mixture of three, per sampler and batch size. ``image``: every member
    also has 84x84x3 uint8 frames (and their next frames), as the robot datasets of OXE-style mixtures do."""
    prefix = "mix-img" if image else "mix"
    shapes = [(f"{prefix}-a", rows // 2, 11, 3), (f"{prefix}-b", rows, 17, 6), (f"{prefix}-c", rows // 4, 39, 8)]
    paths = [make_build(name, n, obs, act, image=image) for name, n, obs, act in shapes]
    out = []
    samplers = (("rows", RandomSampler), ("slices of 32", lambda: SliceSampler(slice_len=32)))
    for (label, make_sampler), batch in ((s, b) for s in samplers for b in batches):
        members = [buffer(p, make_sampler(), i) for i, p in enumerate(paths)]
        alone = [rate(lambda rb=rb, n=batch: rb.sample(n), batch, seconds) for rb in members]
        plain = Mixture(members, names=[s[0] for s in shapes])
        stats = [DatasetStorage(p).manifest["stats"]["features"] for p in paths]
        normed = Mixture(members, normalize={"observation": "mean_std", "action": "mean_std"}, stats=stats)
        mixed = rate(lambda mix=plain, n=batch: mix.sample(n), batch, seconds)
        mixed_norm = rate(lambda mix=normed, n=batch: mix.sample(n), batch, seconds)
        out.append(
            {
                "members": "84x84x3 frames + state" if image else "state only",
                "sampler": label,
                "batch": batch,
                "members_items_per_s": [round(r) for r in alone],
                "mixture_items_per_s": round(mixed),
                "mixture_normalised_items_per_s": round(mixed_norm),
                "ratio_to_slowest": round(mixed / min(alone), 3),
                "ratio_to_slowest_normalised": round(mixed_norm / min(alone), 3),
            }
        )
    return out


# -- 3. offline+online seeding --------------------------------------------------------------------------
SEED_CHILD = """
import json, sys, time, torch
import datasets_hub
from datasets_hub.buffers.offline_online import OfflineOnlineBuffer
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers import RandomSampler
from datasets_hub.buffers.writers import ImmutableDatasetWriter
from datasets_hub.build.storage import DatasetStorage
def status_kb(field):
    for line in open('/proc/self/status'):
        if line.startswith(field + ':'):
            return int(line.split()[1])
def rss_kb():
    return status_kb('VmRSS')
path, scratch, batches, seconds = sys.argv[1], sys.argv[2], [int(b) for b in sys.argv[3].split(",")], float(sys.argv[4])
base = rss_kb()
peak_before_kb = status_kb('VmHWM')  # imports included (VmHWM: this process's own peak, see below)
t = time.perf_counter()
offline = TensorDictReplayBuffer(storage=DatasetStorage(path), sampler=RandomSampler(),
                                 writer=ImmutableDatasetWriter(), generator=torch.Generator().manual_seed(0))
buf = OfflineOnlineBuffer(offline, capacity=100_000, ratio=0.5, scratch_dir=scratch)
seed_s = time.perf_counter() - t
peak_kb = status_kb('VmHWM')
after = rss_kb()
buf.extend(offline.storage[0:10_000])
def rate(fn, batch):  # items per CPU second, median of 5 runs (see rate() in the parent)
    fn(); runs = []
    for _ in range(5):
        n = 0; start = time.perf_counter(); cpu = time.process_time()
        while time.perf_counter() - start < seconds / 5:
            fn(); n += 1
        runs.append(n * batch / max(time.process_time() - cpu, 1e-9))
    return sorted(runs)[2]
rates = [{"batch": b, "offline_alone_items_per_s": rate(lambda: offline.sample(b), b),
          "mixed_items_per_s": rate(lambda: buf.sample(b), b)} for b in batches]
for r in rates:
    r["ratio_mixed_to_offline"] = round(r["mixed_items_per_s"] / r["offline_alone_items_per_s"], 3)
print(json.dumps({"seed_s": seed_s, "rss_before_mb": base / 1024, "rss_after_seed_mb": after / 1024,
                  "peak_rss_before_seed_mb": peak_before_kb / 1024, "peak_rss_mb": peak_kb / 1024,
                  "sampling": rates}))
"""


def seeding(rows: int, batches: list[int], seconds: float) -> dict[str, Any]:
    path = make_build("seed", rows, 17, 6)
    with tempfile.TemporaryDirectory() as scratch:
        proc = subprocess.run(
            [sys.executable, "-c", SEED_CHILD, str(path), scratch, ",".join(map(str, batches)), str(seconds)],
            capture_output=True,
            text=True,
            check=True,
        )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["rows"] = rows
    result["build_bytes"] = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return result


# -- 4. seeding against LeRobot's ReplayBuffer.from_lerobot_dataset --------------------------------------
LEROBOT_PYTHON = ROOT / ".venv-upstream-lerobot" / "bin" / "python"  # LeRobot 0.4.4, its own torch (Makefile)

# Peaks are VmHWM (/proc/self/status): the high-water mark of this process's own memory since its exec. Not
# ru_maxrss: Linux carries a parent's peak into a child across exec, so a child of a big parent would report it.
OURS_BUILD_CHILD = """
import sys
import datasets_hub as dh
dh.download(sys.argv[1], root=sys.argv[2], num_workers=1)  # the build: once per dataset, cached
"""

OURS_CHILD = """
import json, sys, time, torch
import datasets_hub as dh
from datasets_hub.buffers.offline_online import OfflineOnlineBuffer
def status(field):
    for line in open('/proc/self/status'):
        if line.startswith(field + ':'):
            return int(line.split()[1]) / 1024
dataset_id, root, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
base, peak_before = status('VmRSS'), status('VmHWM')
t = time.perf_counter()
buf = OfflineOnlineBuffer(dh.load(dataset_id, root=root), capacity=100_000, scratch_dir=scratch)
seed_s = time.perf_counter() - t
print(json.dumps({"seed_s": seed_s, "rss_before_mb": base, "rss_after_mb": status('VmRSS'),
                  "peak_before_mb": peak_before, "peak_mb": status('VmHWM'), "frames": len(buf.offline)}))
"""

LEROBOT_CHILD = """
import json, sys, time
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.rl.buffer import ReplayBuffer
def status(field):
    for line in open('/proc/self/status'):
        if line.startswith(field + ':'):
            return int(line.split()[1]) / 1024
repo, root = sys.argv[1], sys.argv[2]
dataset = LeRobotDataset(repo, root=root)
base, peak_before = status('VmRSS'), status('VmHWM')
t = time.perf_counter()
buffer = ReplayBuffer.from_lerobot_dataset(dataset, device="cpu", state_keys=["observation.state"], use_drq=False,
                                           storage_device="cpu")
seed_s = time.perf_counter() - t
print(json.dumps({"seed_s": seed_s, "rss_before_mb": base, "rss_after_mb": status('VmRSS'),
                  "peak_before_mb": peak_before, "peak_mb": status('VmHWM'), "frames": len(buffer)}))
"""


def lerobot_seeding(frames: int, work: Path, python: Path = LEROBOT_PYTHON) -> dict[str, Any]:
    """The same LeRobot v3.0 dataset (``frames`` frames: 1000-frame episodes, a 17-value state, a 6-value
    action, no cameras) seeded into our offline+online buffer and into LeRobot's ``ReplayBuffer`` (each in
    a fresh process: seeding time, RSS and peak RSS before and after). LeRobot's part runs only where its
    venv exists."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fixtures import lerobot_writer as lw

    repo = f"bench/seed{frames}"
    root = work / "lerobot" / repo
    episodes = max(1, frames // 1000)
    spec = lw.Spec(
        lengths=(1000,) * episodes,
        tasks=("push",) * episodes,
        cameras=(),
        state_dim=17,
        action_dim=6,
        episodes_per_file=1000,
    )
    lw.write_dataset(root, spec)
    out: dict[str, Any] = {"frames": episodes * 1000}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", OURS_BUILD_CHILD, f"lerobot/{repo}", str(root)], check=True)
    build_s = time.perf_counter() - t  # process start-up and imports included
    with tempfile.TemporaryDirectory() as scratch:
        ours = subprocess.run(
            [sys.executable, "-c", OURS_CHILD, f"lerobot/{repo}", str(root), scratch],
            capture_output=True,
            text=True,
            check=True,
        )
    out["ours"] = {**json.loads(ours.stdout.strip().splitlines()[-1]), "build_s": build_s}
    if python.exists():
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        theirs = subprocess.run(
            [str(python), "-c", LEROBOT_CHILD, repo, str(root)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
            cwd=tempfile.gettempdir(),
        )
        out["lerobot"] = json.loads(theirs.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--image-rows", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batches", type=int, nargs="+", default=[256, 4096, 16384])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument(
        "--image-mixture-rows",
        type=int,
        default=8_000,
        help="rows of the largest member of the mixture whose members have 84x84x3 frames (0: skip it)",
    )
    ap.add_argument("--image-batches", type=int, nargs="+", default=[64, 256], help="batch sizes of that mixture")
    ap.add_argument("--lerobot-python", default=str(LEROBOT_PYTHON), help="python of a venv with LeRobot 0.4.4")
    ap.add_argument("--lerobot-frames", type=int, default=20_000, help="frames of the LeRobot seeding comparison")
    ap.add_argument("--parts", nargs="+", default=["stats", "mixture", "seeding", "lerobot"], help="which parts to run")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "mixtures.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["DATASETS_HUB_CACHE"] = cache
        stats = stats_cost(args.rows, args.image_rows, args.repeats, Path(cache)) if "stats" in args.parts else []
        print("\n1. build time with and without feature statistics (median of", args.repeats, "each)")
        print(f"  {'dataset':<10} {'rows':>9} {'wall s':>13} {'extra':>7} {'CPU s':>13} {'extra':>7}")
        for r in stats:
            print(
                f"  {r['dataset']:<10} {r['rows']:>9,} {r['wall_s_without_stats']:>6.2f}/{r['wall_s_with_stats']:<6.2f} "
                f"{r['wall_extra']:>+7.1%} {r['cpu_s_without_stats']:>6.2f}/{r['cpu_s_with_stats']:<6.2f} "
                f"{r['cpu_extra']:>+7.1%}  statistics thread {r['stats_thread_cpu_s']:.3f} s CPU"
            )
        alone = stats_alone(args.rows, args.image_rows, 2 * args.repeats + 1) if "stats" in args.parts else []
        for r in alone:
            print(
                f"  statistics alone, {r['dataset']:<6} {r['values']:>12,} values: {r['ns_per_value']:6.2f} ns CPU per value"
            )
        beside = stats_beside_python(args.rows, 2 * args.repeats + 1) if "stats" in args.parts else {}
        for mode in ("waiting", "python") if beside else ():
            print(
                f"  statistics in a thread, this thread {mode:<7}: {beside[mode]['wall_ms']:6.1f} ms wall, "
                f"{beside[mode]['cpu_ms']:6.1f} ms CPU ({beside['values']:,} values)"
            )
        mix = mixture_rate(args.rows, args.batches, args.seconds) if "mixture" in args.parts else []
        if "mixture" in args.parts and args.image_mixture_rows:
            mix += mixture_rate(args.image_mixture_rows, args.image_batches, args.seconds, image=True)
        print("\n2. mixture of 3 builds (state/action 11/3, 17/6, 39/8), items per CPU second")
        print(
            f"  {'members':<22} {'sampler':<13} {'batch':>6} {'members alone':>30} {'mixture':>9} {'x slowest':>9} "
            f"{'normalised':>10} {'x slowest':>9}"
        )
        for r in mix:
            members = " ".join(f"{v:,}" for v in r["members_items_per_s"])
            print(
                f"  {r['members']:<22} {r['sampler']:<13} {r['batch']:>6} {members:>30} {r['mixture_items_per_s']:>9,} "
                f"{r['ratio_to_slowest']:>9.2f} "
                f"{r['mixture_normalised_items_per_s']:>10,} {r['ratio_to_slowest_normalised']:>9.2f}"
            )
        seed = seeding(args.rows, args.batches, args.seconds) if "seeding" in args.parts else {}
        if seed:
            print(f"\n3. offline+online buffer over a {args.rows:,}-row build ({seed['build_bytes'] / 2**20:.0f} MiB)")
            print(
                f"  seeding {seed['seed_s'] * 1e3:.1f} ms; RSS {seed['rss_before_mb']:.0f} MiB after imports -> "
                f"{seed['rss_after_seed_mb']:.0f} MiB after seeding (peak {seed['peak_rss_before_seed_mb']:.0f} MiB "
                f"before seeding, {seed['peak_rss_mb']:.0f} MiB after)"
            )
            for r in seed["sampling"]:
                print(
                    f"  batch {r['batch']}: offline alone {r['offline_alone_items_per_s']:,.0f} items/s, mixed "
                    f"(ratio 0.5) {r['mixed_items_per_s']:,.0f} items/s ({r['ratio_mixed_to_offline']:.2f}x)"
                )
        versus = (
            lerobot_seeding(args.lerobot_frames, Path(cache), Path(args.lerobot_python))
            if "lerobot" in args.parts
            else {}
        )
        if versus:
            print(f"\n4. seeding from the same {versus['frames']:,}-frame LeRobot dataset, each in a fresh process")
            for who in ("ours", "lerobot"):
                if who not in versus:
                    print(f"  {who}: not run (no {args.lerobot_python})")
                    continue
                r = versus[who]
                print(
                    f"  {who:<8} seeding {r['seed_s']:8.3f} s; RSS {r['rss_before_mb']:.0f} -> {r['rss_after_mb']:.0f} MiB, "
                    f"peak {r['peak_before_mb']:.0f} -> {r['peak_mb']:.0f} MiB"
                    + (f" (build, once: {r['build_s']:.1f} s)" if "build_s" in r else "")
                )
    report = {
        "command": command(),
        "environment": environment(),
        "date": time.strftime("%Y-%m-%d"),
        "stats_build_cost": stats,
        "stats_alone": alone,
        "stats_beside_python": beside,
        "mixture_rate": mix,
        "offline_online": seed,
        "lerobot_seeding": versus,
        "peak_rss_this_process_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
