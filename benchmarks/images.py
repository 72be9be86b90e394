"""Image benchmark: an Atari DQN Replay build by datasets_hub vs TorchRL 0.14 over a TED copy (issue 4).

Run (TorchRL lives in its own venv, see the README)::

    .venv-bench/bin/python benchmarks/images.py           # ~100k transitions, 3 runs, ~2.5 min, ~2.3 GB temp
    .venv-bench/bin/python benchmarks/images.py --small   # 10k transitions, 1 run, no report file

What it does:

1. Writes one checkpoint of the DQN Replay Dataset in the upstream format (six gzipped ``.npy``
   files under ``<Game>/<run>/replay_logs/``, as Dopamine's ``OutOfGraphReplayBuffer`` logs them:
   a wrapped circular buffer, 3 zero transitions before each episode, ``invalid_range`` around the
   cursor). Episodes last a few hundred to a few thousand steps; frames are 84x84 uint8 with a
   static background, moving objects, a score area and ~2 % of pixels noise, so they compress like
   screen frames do rather than like zeros (or like pure noise).
2. Serves that folder over HTTP on 127.0.0.1 and builds ``atari/Pong/1`` (``checkpoints=[0]``)
   with ``DATASETS_HUB_ENDPOINT_ATARI`` pointed at it, in a fresh interpreter (its peak RSS is the
   build's), into a temporary ``DATASETS_HUB_CACHE``.
3. Copies the build, row by row in order, into TorchRL's ``TensorDictReplayBuffer`` over a
   ``LazyMemmapStorage`` as TED (``observation`` and ``("next", "observation")`` each stored, the
   way TorchRL stores TED), with exactly the keys our samples carry. The anchor of the ratios is
   what TorchRL's own dataset classes sample from: a ``TensorStorage`` over that memory-mapped
   TensorDict (``TensorStorage(TensorDict.load_memmap(path))``, as ``AtariDQNExperienceReplay`` does);
   the ``LazyMemmapStorage`` itself (10-30x slower on frames) is timed as a second row.
4. Times ``sample()`` for slices (``SliceSampler(num_slices=8)``, batch 256 = 8 x 32; TorchRL's with
   ``traj_key="episode", cache_values=True``) and uniform (batch 256): every row is first read once
   through each buffer (warm memory maps, as in a long training run), then ``--warmup`` calls, then
   ``--repeats`` blocks of ``--calls`` calls, ours and TorchRL interleaved, 1 torch thread each;
   the median block gives samples/s. Both samples are checked to carry the same keys, shapes and
   dtypes, and the TorchRL copy to hold the same rows as the build.
5. Reports bytes on disk (``du``: allocated blocks) of our build directory vs TorchRL's memmap
   directory, and the raw download our cache keeps.

Steps 2-4 are repeated ``--runs`` times (fresh build, fresh copy); the table shows medians over
runs. Prints a table and writes ``benchmarks/results/images.json``. Not a test: figures depend on the
machine. ``--profile`` prints where our slice sampling spends its time (cProfile).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import gc
import gzip
import io
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "images.json"
sys.path.insert(0, str(ROOT))

from _report import environment, write_report

GAME, RUN, CHECKPOINT = "Pong", "1", 0
DATASET_ID = f"atari/{GAME}/{RUN}"
FRAME = (84, 84)
STACK = 4  # Dopamine's stack size: 3 zero transitions before every episode
BUCKET_PATH = "atari-replay-datasets/dqn"  # the upstream URL's path, kept under the mirror
FILE_KEYS = ("observation", "action", "reward", "terminal", "add_count", "invalid_range")
BLOCK = 4096  # frames rendered and compressed per step of the generator


# --------------------------------------------------------------------------------------------
# 1. upstream-format files
# --------------------------------------------------------------------------------------------
def upstream_name(key: str, k: int) -> str:
    return f"{'$store$_' if key in FILE_KEYS[:4] else ''}{key}_ckpt.{k}.gz"


def episode_lengths(total: int, rng: np.random.Generator) -> list[int]:
    """Episode lengths (agent steps) whose sum, with 3 padding rows each, exceeds ``total``.

    Log-normal around 800 steps, clipped to 150..3000: Atari DQN episodes range from a few
    hundred steps (early Breakout/Pong losses) to a few thousand.
    """
    out: list[int] = []
    while sum(out) + (STACK - 1) * len(out) < total:
        out.append(int(np.clip(rng.lognormal(np.log(800), 0.6), 150, 3000)))
    return out


def dopamine_stream(capacity: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The last ``capacity`` adds of a Dopamine buffer that has wrapped once, in physical slot order.

    batch_rl logs a checkpoint when ``add_count % capacity == capacity - 1``; after ``2*capacity - 1``
    adds the buffer holds adds ``capacity-1 .. 2*capacity-2`` with add ``p`` in slot ``p % capacity``.
    Per slot: episode id (-1 for padding), step t, action, reward, terminal.
    """
    add_count = 2 * capacity - 1
    lengths = episode_lengths(add_count + 3000, rng)  # the stream may end mid-episode
    ep, t, term = [], [], []
    for e, n in enumerate(lengths):
        ep += [-1] * (STACK - 1) + [e] * n
        t += [0] * (STACK - 1) + list(range(n))
        term += [0] * (STACK - 1) + [0] * (n - 1) + [1]
    sel = slice(capacity - 1, add_count)
    ep_a, t_a, term_a = (np.asarray(x[sel]) for x in (ep, t, term))
    pad = ep_a < 0
    action = rng.integers(0, 6, size=capacity).astype(np.int32)
    reward = rng.choice(np.array([-1.0, 0.0, 1.0], np.float32), size=capacity, p=[0.01, 0.98, 0.01])
    action[pad], reward[pad] = 0, 0.0
    slots = np.arange(capacity - 1, add_count) % capacity
    order = np.argsort(slots)
    cursor = add_count % capacity
    return {
        "episode": ep_a[order],
        "t": t_a[order],
        "terminal": term_a[order].astype(np.uint8),
        "action": action[order],
        "reward": reward[order].astype(np.float32),
        "add_count": np.array(add_count, dtype=np.int64),
        # Dopamine: the stack_size + update_horizon indices around the cursor, as float64
        "invalid_range": np.array([(cursor - 1 + i) % capacity for i in range(STACK + 1)], dtype=np.float64),
    }


def render(episode: np.ndarray, t: np.ndarray, background: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Screen-like 84x84 frames: background, two paddles and a ball that move with t, a score, noise."""
    n = len(episode)
    out = np.broadcast_to(background, (n, *FRAME)).copy()
    for i in range(n):
        e, s = int(episode[i]), int(t[i])
        if e < 0:
            out[i] = 0  # Dopamine's padding frames are zeros
            continue
        f = out[i]
        y1 = 40 + int(30 * np.sin(0.05 * s + e))
        y2 = 40 + int(30 * np.cos(0.07 * s + 2 * e))
        f[y1 : y1 + 8, 8:10] = 213
        f[y2 : y2 + 8, 74:76] = 92
        bx, by = (3 * s + 11 * e) % 76 + 4, (2 * s + 7 * e) % 70 + 10
        f[by : by + 2, bx : bx + 2] = 236
        f[1:7, 20:32] = (e * 37 + s // 97) % 251
    flat = out.reshape(n, -1)
    k = int(0.02 * flat.shape[1])
    cols = rng.integers(0, flat.shape[1], size=(n, k))
    np.put_along_axis(flat, cols, rng.integers(0, 256, size=(n, k), dtype=np.uint8), axis=1)
    out[episode < 0] = 0
    return out


def write_npy_gz(
    path: Path,
    array: np.ndarray | None = None,
    *,
    shape: tuple = (),
    dtype: Any = None,
    blocks: Iterator[np.ndarray] | None = None,
    level: int = 6,
) -> None:
    """``np.save`` into gzip, as Dopamine does; ``blocks`` streams a big array without holding it."""
    with gzip.open(path, "wb", compresslevel=level) as fh:
        if blocks is None:
            np.save(fh, array, allow_pickle=False)
            return
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(fh, header)
        for block in blocks:
            fh.write(np.ascontiguousarray(block).tobytes())


def make_replay_logs(root: Path, capacity: int, seed: int = 0, level: int = 6) -> dict[str, Any]:
    """Write checkpoint 0 of ``<root>/<bucket path>/<Game>/<run>/replay_logs/``; return its stats."""
    folder = root / BUCKET_PATH / GAME / RUN / "replay_logs"
    stamp = folder / "stamp.json"
    want = {"capacity": capacity, "seed": seed, "level": level, "generator": 1}
    if stamp.exists() and json.loads(stamp.read_text()).get("params") == want:
        return json.loads(stamp.read_text())  # same data already generated (--data reuses it)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    buf = dopamine_stream(capacity, rng)
    background = np.full(FRAME, 87, np.uint8)
    background[:, :4] = background[:, -4:] = 236  # walls
    background[8:76:4, 41:43] = 236  # the net
    t0 = time.perf_counter()

    def frames() -> Iterator[np.ndarray]:
        for a in range(0, capacity, BLOCK):
            b = min(capacity, a + BLOCK)
            yield render(buf["episode"][a:b], buf["t"][a:b], background, rng)

    write_npy_gz(
        folder / upstream_name("observation", CHECKPOINT),
        shape=(capacity, *FRAME),
        dtype=np.uint8,
        blocks=frames(),
        level=level,
    )
    for key in FILE_KEYS[1:]:
        write_npy_gz(folder / upstream_name(key, CHECKPOINT), buf[key], level=level)
    real = buf["episode"] >= 0
    stats = {
        "params": want,
        "frames": capacity,
        "padding_rows": int((~real).sum()),
        "episodes_touched": int(np.unique(buf["episode"][real]).size),
        "gz_bytes": sum(p.stat().st_size for p in folder.glob("*.gz")),
        "observation_raw_bytes": capacity * FRAME[0] * FRAME[1],
        "seconds": time.perf_counter() - t0,
    }
    stamp.write_text(json.dumps(stats))
    return stats


# --------------------------------------------------------------------------------------------
# 2. serve + build with the hub, in a child interpreter
# --------------------------------------------------------------------------------------------
class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # the benchmark's output is the table
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """A static HTTP server on 127.0.0.1 over ``directory``; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


BUILD_CHILD = """
import json, threading, time
import torch, tensordict
import datasets_hub

def status(tag):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(tag):
                return int(line.split()[1]) * 1024
    return 0

# VmHWM, not ru_maxrss: ru_maxrss survives exec, so a child forked from a big parent reports the
# parent's size. RSS also counts the file-backed pages of the memmaps being written (page cache,
# reclaimable); a poller keeps the peak of anonymous memory (what the process itself holds) apart.
peak = {{"anon": 0, "file": 0}}
stop = threading.Event()
def poll():
    while not stop.is_set():
        peak["anon"] = max(peak["anon"], status("RssAnon:"))
        peak["file"] = max(peak["file"], status("RssFile:"))
        stop.wait(0.01)
base, base_anon, base_file = status("VmRSS:"), status("RssAnon:"), status("RssFile:")
thread = threading.Thread(target=poll, daemon=True)
thread.start()
t0 = time.perf_counter()
path = datasets_hub.download({id!r}, checkpoints=[{k}])
seconds = time.perf_counter() - t0
stop.set()
thread.join()
print(json.dumps({{"seconds": seconds, "path": str(path), "rss_after_imports": base, "peak_rss": status("VmHWM:"),
                   "peak_rss_anon": peak["anon"], "peak_rss_file": peak["file"],
                   "anon_after_imports": base_anon, "file_after_imports": base_file}}))
"""


def build_with_hub(env: dict[str, str]) -> dict[str, Any]:
    code = BUILD_CHILD.format(id=DATASET_ID, k=CHECKPOINT)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the hub build failed:\n--- stderr ---\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def du(path: Path) -> tuple[int, int]:
    """(allocated bytes as ``du`` counts them, apparent bytes) of a directory tree."""
    alloc = apparent = 0
    for root, _, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(root, name))
            alloc += st.st_blocks * 512
            apparent += st.st_size
    return alloc, apparent


# --------------------------------------------------------------------------------------------
# 3./4. TorchRL copy and timing
# --------------------------------------------------------------------------------------------
def torchrl_copy(ours: Any, scratch: Path, chunk: int = 8192) -> tuple[Any, float]:
    """TorchRL's LazyMemmapStorage holding ``ours``' rows in order, as full TED (every key stored)."""
    from torchrl.data import LazyMemmapStorage, TensorDictReplayBuffer
    from torchrl.data.replay_buffers import RandomSampler

    n = len(ours)
    storage = LazyMemmapStorage(n, scratch_dir=str(scratch))
    rb = TensorDictReplayBuffer(storage=storage, sampler=RandomSampler())
    t0 = time.perf_counter()
    for a in range(0, n, chunk):
        # "index" is the sampled position, not data: TorchRL adds its own to every sample
        rb.extend(ours[a : min(n, a + chunk)].exclude("index"))
    return storage, time.perf_counter() - t0


def touch_all(rb: Any, n: int, chunk: int = 8192) -> None:
    """Read every row once through ``rb``, so that its memory maps are warm as in a long training run
    (otherwise the first thousands of random batches pay page faults, more for the bigger files)."""
    for a in range(0, n, chunk):
        rb[a : min(n, a + chunk)]


def time_blocks(fns: dict[str, Callable[[], Any]], calls: int, repeats: int, warmup: int) -> dict[str, dict]:
    """Median seconds per call over ``repeats`` blocks of ``calls`` calls (blocks interleaved, GC paused)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    gc.collect()
    was = gc.isenabled()
    gc.disable()  # a collection inside a block is noise, not sampling cost
    per_call: dict[str, list[float]] = {name: [] for name in fns}
    try:
        for _ in range(repeats):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                per_call[name].append((time.perf_counter() - t0) / calls)
    finally:
        if was:
            gc.enable()
    out = {}
    for name, ts in per_call.items():
        ts.sort()
        out[name] = {
            "median_s": statistics.median(ts),
            "min_s": ts[0],
            "max_s": ts[-1],
            "blocks": repeats,
            "calls_per_block": calls,
        }
    return out


def sample_keys(td: Any) -> set:
    return {k if isinstance(k, str) else "/".join(k) for k in td.keys(True, True)}


def profile_ours(fn: Callable[[], Any], calls: int, top: int = 25) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def one_run(args: argparse.Namespace, data_root: Path, work: Path, index: int) -> dict[str, Any]:
    """Build with the hub, copy into TorchRL, time both; the directories are removed afterwards."""
    import torch

    cache, trl_dir = work / f"cache{index}", work / f"torchrl{index}"
    for stale in (cache, trl_dir):
        shutil.rmtree(stale, ignore_errors=True)
    env = dict(os.environ, DATASETS_HUB_CACHE=str(cache), PYTHONDONTWRITEBYTECODE="1")
    env.pop("DATASETS_HUB_OFFLINE", None)
    try:
        with serve(data_root) as url:
            env["DATASETS_HUB_ENDPOINT_ATARI"] = url
            built = build_with_hub(env)
        print(
            f"hub build: {built['seconds']:.1f} s, peak RSS {built['peak_rss'] / 1e6:.0f} MB "
            f"({built['rss_after_imports'] / 1e6:.0f} MB after imports); anonymous: "
            f"{built['anon_after_imports'] / 1e6:.0f} MB after imports, peak {built['peak_rss_anon'] / 1e6:.0f} MB; "
            f"file-backed: {built['file_after_imports'] / 1e6:.0f} MB after imports, "
            f"peak {built['peak_rss_file'] / 1e6:.0f} MB",
            flush=True,
        )
        out: dict[str, Any] = {"build": built}
        if args.build_only:
            out["bytes"] = {"ours": du(Path(built["path"]))[0], "raw_download_kept": du(cache / "raw")[0]}
            return out

        # the parent opens the finished build offline, as a training script would
        os.environ["DATASETS_HUB_CACHE"] = str(cache)
        os.environ["DATASETS_HUB_OFFLINE"] = "1"
        from tensordict import TensorDict
        from torchrl.data import TensorDictReplayBuffer as RLBuffer
        from torchrl.data import TensorStorage as RLTensorStorage
        from torchrl.data.replay_buffers import RandomSampler as RLRandom
        from torchrl.data.replay_buffers import SliceSampler as RLSlice

        import datasets_hub as dh

        def ours(sampler: Any) -> Any:
            return dh.load(
                DATASET_ID,
                checkpoints=[CHECKPOINT],
                batch_size=256,
                sampler=sampler,
                generator=torch.Generator().manual_seed(index),
            )

        rb_u = ours(dh.RandomSampler())
        n = len(rb_u)
        card = dh.info(DATASET_ID, checkpoints=[CHECKPOINT])
        print(f"build holds {n:,} transitions in {card.counts['episodes']} episodes", flush=True)
        trl_storage, fill_s = torchrl_copy(rb_u, trl_dir)
        print(f"TorchRL LazyMemmapStorage filled from the build in {fill_s:.1f} s", flush=True)
        probe = torch.randint(0, n, (512,), generator=torch.Generator().manual_seed(1))
        if not (rb_u[probe].exclude("index") == trl_storage[probe].exclude("index")).all():
            raise RuntimeError("the TorchRL copy differs from the build it was copied from")
        ours_alloc, ours_apparent = du(Path(built["path"]))
        trl_alloc, trl_apparent = du(trl_dir)
        out.update(
            transitions=n,
            episodes=card.counts["episodes"],
            torchrl_fill_s=fill_s,
            bytes={
                "ours": ours_alloc,
                "ours_apparent": ours_apparent,
                "torchrl": trl_alloc,
                "torchrl_apparent": trl_apparent,
                "raw_download_kept": du(cache / "raw")[0],
            },
        )

        rows = []
        cases = (
            (
                "slices 8x32, batch 256",
                dh.SliceSampler(num_slices=8),
                lambda: RLSlice(num_slices=8, traj_key="episode", cache_values=True),
                3.0,
            ),
            ("uniform, batch 256", dh.RandomSampler(), RLRandom, None),
        )
        for name, sampler, rl_sampler, target in cases:
            rb = ours(sampler)
            # TorchRL's dataset classes: a TensorStorage over the memory-mapped TensorDict (the anchor)
            rl = RLBuffer(
                storage=RLTensorStorage(TensorDict.load_memmap(trl_dir)), sampler=rl_sampler(), batch_size=256
            )
            rl_lazy = RLBuffer(storage=trl_storage, sampler=rl_sampler(), batch_size=256)
            for warm in (rb, rl, rl_lazy):
                touch_all(warm, n)
            a, b = rb.sample(), rl.sample()
            ka, kb = sample_keys(a), sample_keys(b)  # both carry "index"
            if ka != kb or a.numel() != 256 or b.numel() != 256:
                raise RuntimeError(
                    f"{name}: samples differ: only ours {sorted(ka - kb)}, only TorchRL "
                    f"{sorted(kb - ka)}, sizes {a.numel()} / {b.numel()}"
                )
            for key in ("observation", ("next", "observation")):
                if a[key].shape != b[key].shape or a[key].dtype != b[key].dtype:
                    raise RuntimeError(
                        f"{name}: {key} is {a[key].dtype}{list(a[key].shape)} here, "
                        f"{b[key].dtype}{list(b[key].shape)} in TorchRL"
                    )
            fns = {"ours": rb.sample, "torchrl": rl.sample, "torchrl_lazy_memmap": rl_lazy.sample}
            timed = time_blocks(fns, args.calls, args.repeats, args.warmup)
            row = {"case": name, "batch": 256, "target_ratio": target, "keys": sorted(ka)}
            for side in fns:
                row[side] = dict(timed[side], samples_per_s=256 / timed[side]["median_s"])
            row["ratio"] = row["ours"]["samples_per_s"] / row["torchrl"]["samples_per_s"]
            row["ratio_lazy_memmap"] = row["ours"]["samples_per_s"] / row["torchrl_lazy_memmap"]["samples_per_s"]
            rows.append(row)
            print(
                f"  {name:<24} ours {row['ours']['median_s'] * 1e6:8.0f} us   "
                f"torchrl TensorStorage {row['torchrl']['median_s'] * 1e6:8.0f} us   x{row['ratio']:.2f}   "
                f"LazyMemmapStorage {row['torchrl_lazy_memmap']['median_s'] * 1e6:8.0f} us   "
                f"x{row['ratio_lazy_memmap']:.2f}",
                flush=True,
            )
            if args.profile:
                print(profile_ours(rb.sample, max(50, args.calls * 5)), flush=True)
            del rb, rl, rl_lazy, a, b
        out["results"] = rows
        del trl_storage, rb_u
        gc.collect()
        return out
    finally:
        for path in (cache, trl_dir):
            shutil.rmtree(path, ignore_errors=True)


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def median_of(runs: list[dict[str, Any]], get: Callable[[dict[str, Any]], float]) -> float:
    return statistics.median(get(r) for r in runs)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over runs (each run: a fresh build, a fresh TorchRL copy, its own timings)."""
    m = functools.partial(median_of, runs)
    build = {
        key: m(lambda r, key=key: r["build"][key])
        for key in ("seconds", "peak_rss", "rss_after_imports", "peak_rss_anon", "anon_after_imports", "peak_rss_file")
    }
    b0 = runs[0]["bytes"]
    ratio_b = b0["ours"] / b0["torchrl"]
    rows = []
    for i, first in enumerate(runs[0]["results"]):
        ratios = [r["results"][i]["ratio"] for r in runs]
        ours_s, rl_s, lazy_s = (
            m(lambda r, i=i, side=side: r["results"][i][side]["median_s"])
            for side in ("ours", "torchrl", "torchrl_lazy_memmap")
        )
        target = first["target_ratio"]
        ratio = statistics.median(ratios)
        rows.append(
            {
                "case": first["case"],
                "batch": first["batch"],
                "target_ratio": target,
                "ours": {"median_s": ours_s, "samples_per_s": first["batch"] / ours_s},
                "torchrl": {"median_s": rl_s, "samples_per_s": first["batch"] / rl_s},
                "torchrl_lazy_memmap": {"median_s": lazy_s, "samples_per_s": first["batch"] / lazy_s},
                "ratio": ratio,
                "ratio_lazy_memmap": statistics.median(r["results"][i]["ratio_lazy_memmap"] for r in runs),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "met": None if target is None else ratio >= target,
                "keys": first["keys"],
            }
        )
    return {
        "transitions": runs[0]["transitions"],
        "episodes": runs[0]["episodes"],
        "build": build,
        "bytes": dict(b0, ratio=ratio_b, target_ratio=0.55, met=ratio_b <= 0.55),
        "results": rows,
        "torchrl_fill_s": m(lambda r: r["torchrl_fill_s"]),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.set_num_threads(args.threads)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="dh_images_"))
    data_root = Path(args.data) if args.data else work / "upstream"
    try:
        t0 = time.perf_counter()
        gen = make_replay_logs(data_root, args.transitions, level=args.gzip_level)
        print(
            f"upstream files: {gen['frames']:,} frames ({gen['padding_rows']} padding rows), "
            f"{gen['gz_bytes'] / 1e6:.0f} MB gzipped ({gen['observation_raw_bytes'] / 1e6:.0f} MB of frames raw), "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        runs = []
        for i in range(args.runs):
            print(f"-- run {i + 1}/{args.runs} (this process: {rss_mb():.0f} MB resident)", flush=True)
            runs.append(one_run(args, data_root, work, i))
    finally:
        if not args.workdir and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.build_only:
        return {"runs": runs}
    import torchrl

    report: dict[str, Any] = {"benchmark": "images", "capacity": args.transitions, "upstream": gen}
    report.update(summarize(runs))
    report["runs"] = runs
    report["env"] = environment(torchrl=torchrl.__version__)
    report["settings"] = {
        "runs": args.runs,
        "calls": args.calls,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "gzip_level": args.gzip_level,
        "torchrl_slice_sampler": "SliceSampler(num_slices=8, traj_key='episode', cache_values=True)",
    }
    report["command"] = " ".join([Path(sys.executable).name, *sys.argv])
    return report


def table(report: dict[str, Any]) -> str:
    lines = [
        f"medians over {report['settings']['runs']} run(s); ratio range over runs in parentheses",
        "",
        (
            "| case | datasets_hub | samples/s | TorchRL TensorStorage (memmapped TD) | samples/s | ratio | target "
            "| TorchRL LazyMemmapStorage | ratio |"
        ),
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for row in report["results"]:
        o, r = row["ours"], row["torchrl"]
        target = (
            ""
            if row["target_ratio"] is None
            else (f">= {row['target_ratio']:g}x " + ("met" if row["met"] else "MISSED"))
        )
        spread = f" ({row['ratio_min']:.1f}-{row['ratio_max']:.1f})" if row["ratio_min"] != row["ratio_max"] else ""
        lines.append(
            f"| {row['case']} | {o['median_s'] * 1e6:.0f} us | {o['samples_per_s']:,.0f} | "
            f"{r['median_s'] * 1e6:.0f} us | {r['samples_per_s']:,.0f} | {row['ratio']:.2f}x{spread} | "
            f"{target} | {row['torchrl_lazy_memmap']['median_s'] * 1e6:.0f} us | {row['ratio_lazy_memmap']:.2f}x |"
        )
    b = report["bytes"]
    lines.append(
        f"| bytes on disk (du) | {b['ours'] / 1e6:,.0f} MB | | {b['torchrl'] / 1e6:,.0f} MB | | "
        f"{b['ratio']:.2f}x | <= 0.55x {'met' if b['met'] else 'MISSED'} | | |"
    )
    build = report["build"]
    lines.append(
        f"\nhub build of {report['transitions']:,} transitions ({report['episodes']} episodes): "
        f"{build['seconds']:.1f} s, peak RSS {build['peak_rss'] / 1e6:.0f} MB "
        f"({build['rss_after_imports'] / 1e6:.0f} MB after importing torch + tensordict; anonymous memory "
        f"{build['anon_after_imports'] / 1e6:.0f} MB -> peak {build['peak_rss_anon'] / 1e6:.0f} MB; "
        f"the checkpoint's "
        f"frames are {report['upstream']['observation_raw_bytes'] / 1e6:.0f} MB uncompressed); "
        f"raw download kept in the cache: {b['raw_download_kept'] / 1e6:.0f} MB"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--transitions", type=int, default=100_000, help="buffer capacity of the checkpoint (frames)")
    p.add_argument("--small", action="store_true", help="quick run: 10,000 frames, fewer repeats")
    p.add_argument(
        "--runs",
        type=int,
        default=None,
        help="full repetitions (fresh build, fresh TorchRL copy, timings; default 3, --small 1); medians are reported",
    )
    p.add_argument("--calls", type=int, default=20, help="sample() calls per timed block")
    p.add_argument("--repeats", type=int, default=15, help="timed blocks per library and case")
    p.add_argument("--warmup", type=int, default=20, help="untimed calls first (page cache, lazy caches)")
    p.add_argument("--threads", type=int, default=1, help="torch threads for both libraries")
    p.add_argument("--gzip-level", type=int, default=6, help="compression of the generated upstream files")
    p.add_argument("--data", default=None, help="keep/reuse the generated upstream files in this folder")
    p.add_argument("--workdir", default=None, help="work in this folder and keep it (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    p.add_argument(
        "--build-only",
        action="store_true",
        help="generate and build only (peak RSS at another size), no TorchRL, no report file",
    )
    p.add_argument("--profile", action="store_true", help="cProfile our sample() calls and print the top")
    p.add_argument(
        "--out",
        default=None,
        help=f"JSON report (default: {RESULTS.relative_to(ROOT)}; with --small, none unless given)",
    )
    args = p.parse_args(argv)
    args.runs = args.runs or (None if args.small else 3)
    if args.small:
        args.transitions, args.repeats, args.calls = min(args.transitions, 10_000), min(args.repeats, 5), 10
        args.runs = args.runs or 1
    report = run(args)
    if args.build_only:
        return 0
    print()
    print(table(report))
    if args.out is None and args.small:
        return 0  # a quick check does not overwrite the recorded figures
    write_report(report, args.out or RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
