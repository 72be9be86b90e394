"""Remote builds: time to the first batch, bytes before it, steady-state sampling, published size.

A loopback HTTP server (Range support) throttled to ``--mbps`` MB/s with ``--latency-ms`` per request
serves a build published with ``datasets_hub.export``; a fresh process loads it by URL, lazily resident,
and samples 8x32 slices. Two builds: a D4RL-shaped one (``--transitions``, 17-float observations, built
from a generated D4RL HDF5 file by the d4rl loader) and the Atari image build of ``benchmarks/images.py``
(``--frames`` 84x84 frames through the atari loader; 1,000,000 is one full DQN Replay checkpoint).

Per build: the lazy row (first batch and the bytes the server sent before it, in a fresh process; the
steady state, i.e. batch time once the working set is resident (for uniform sampling over the whole build:
every chunk a batch can read), against the local build, timed in alternation on the same batches; batch
time after ``--warmup`` lazy batches with the share of batches that fetched nothing; published size
against the local build) and the pool row (``resident="pool"`` with ``--pool-episodes`` K and
``pool_refresh_s=0``, i.e. refreshing as fast as the link allows: first batch, bytes before it, batch time
while refreshing, refreshes per second). Prints a table and writes JSON. Needs about 3x the local build's
size in free disk for the largest case (local build, published folder, a full copy); each case's files
are deleted before the next one.

    .venv/bin/python benchmarks/remote.py [--transitions 10000000] [--frames 1000000] [--pool-episodes 16]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import command, environment, write_report

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "remote.json"


class Throttle:
    """One shared byte budget per second for every connection, plus a fixed latency per request."""

    def __init__(self, mbps: float, latency: float) -> None:
        self.rate = mbps * 1e6
        self.latency = latency
        self.lock = threading.Lock()
        self.next_free = time.monotonic()
        self.sent = 0

    def wait_for(self, nbytes: int) -> None:
        with self.lock:
            start = max(self.next_free, time.monotonic())
            self.next_free = start + nbytes / self.rate
            self.sent += nbytes
            until = self.next_free
        delay = until - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def make_handler(root: Path, throttle: Throttle) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            time.sleep(throttle.latency)
            path = (root / self.path.split("?", 1)[0].lstrip("/")).resolve()
            if not str(path).startswith(str(root)) or not path.is_file():
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = path.read_bytes()
            start, end, status = 0, len(data), 200
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                a, _, b = rng[6:].partition("-")
                start, end, status = int(a), (int(b) + 1 if b else len(data)), 206
            body = data[start:end]
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
            self.end_headers()
            for i in range(0, len(body), 1 << 16):
                piece = body[i : i + (1 << 16)]
                throttle.wait_for(len(piece))
                self.wfile.write(piece)

    return Handler


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: a client opening hundreds of connections at once (a
    # pool's first fetch) would wait for SYN retransmissions (1 s, 3 s, ...) that a real server never causes
    request_queue_size = 1024


@contextlib.contextmanager
def serve(root: Path, throttle: Throttle) -> Iterator[str]:
    server = _Server(("127.0.0.1", 0), make_handler(root.resolve(), throttle))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


CHILD = """
import json, statistics, sys, time
t0 = time.perf_counter()
import torch, datasets_hub as dh
from datasets_hub import SliceSampler
t_import = time.perf_counter()
mode, pool, calls = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
extra = {"pool_episodes": pool, "pool_refresh_s": 0.0} if mode == "pool" else {}
rb = dh.load(sys.argv[1], resident=mode, batch_size=256, sampler=SliceSampler(slice_len=32),
             generator=torch.Generator().manual_seed(0), **extra)
t_open = time.perf_counter()
rb.sample()
t_first = time.perf_counter()
out = {"imports": t_import - t0, "open": t_open - t_import, "first_batch": t_first - t_import}
print(json.dumps(out), flush=True)  # the parent reads the bytes sent so far, then lets the child go on
sys.stdin.readline()
if mode == "pool":  # steady state: batches drawn while the pool refreshes as fast as the link allows
    times, refreshes = [], rb.storage.pool_status()["refreshes"]
    start = time.perf_counter()
    for _ in range(calls):
        t = time.perf_counter()
        rb.sample()
        times.append(time.perf_counter() - t)
    status = rb.storage.pool_status()
    out = {"pool_us": statistics.median(times) * 1e6,
           "refreshes_per_s": (status["refreshes"] - refreshes) / (time.perf_counter() - start),
           "reads_outside_pool": status["reads_outside_pool"], "pool_error": status["error"]}
    rb.storage.close()
print(json.dumps(out), flush=True)
"""


def first_batch(
    url: str, cache: Path, throttle: Throttle, mode: str = "lazy", pool: int = 0, calls: int = 0
) -> dict[str, Any]:
    """A fresh process loads ``url`` and draws one batch; the bytes the server sent until then are counted.
    In pool mode the child then times ``calls`` batches while its pool refreshes."""
    env = dict(os.environ, DATASETS_HUB_CACHE=str(cache))
    env.pop("DATASETS_HUB_OFFLINE", None)
    before = throttle.sent
    args = [sys.executable, "-c", CHILD, url, mode, str(pool), str(calls)]
    proc = subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    line = proc.stdout.readline()
    sent = throttle.sent - before
    proc.stdin.write("\n")
    proc.stdin.flush()
    rest = proc.stdout.read()
    if proc.wait() != 0 or not line:
        raise RuntimeError(f"the {mode} child failed (exit {proc.returncode}); see its stderr above")
    out = {**json.loads(line), **json.loads(rest.strip().splitlines()[-1]), "bytes_before_first_batch": sent}
    return out


def per_batch_us(rb: Any, calls: int) -> float:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        rb.sample()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def cold_batches(rb: Any, calls: int) -> dict[str, float]:
    """Median batch time of ``calls`` lazy batches, and the share of them that fetched nothing."""
    chunks = rb.storage.chunks
    times, fetch_free = [], 0
    for _ in range(calls):
        before = chunks.fetched_bytes
        t = time.perf_counter()
        rb.sample()
        times.append(time.perf_counter() - t)
        fetch_free += chunks.fetched_bytes == before
    return {"us": statistics.median(times) * 1e6, "fetch_free": fetch_free / calls}


def interleaved_us(sides: dict[str, Any], calls: int, rounds: int = 6) -> dict[str, float]:
    """Median batch time of each buffer in ``sides``, timed in alternation (``rounds`` blocks each, so that
    the machine's load drifts over both alike). Each block first draws its batches once untimed, then the
    same batches again (same seed) timed: both sides read pages already in the page cache, whatever its
    size (a 7 GB build and its 7 GB copy do not both stay cached on a small machine)."""
    import torch

    times: dict[str, list[float]] = {name: [] for name in sides}
    per_round = max(1, calls // rounds)
    for round_ in range(rounds):
        for name, rb in sides.items():
            for timed in (False, True):
                rb.set_rng(torch.Generator().manual_seed(1000 + round_))
                for _ in range(per_round):
                    t = time.perf_counter()
                    rb.sample()
                    if timed:
                        times[name].append(time.perf_counter() - t)
    return {name: statistics.median(values) * 1e6 for name, values in times.items()}


def steady_state(url: str, local_id_rb: Any, cache: Path, warmup: int, calls: int) -> dict[str, Any]:
    """Lazy mode in this process, against the local build.

    Two figures. Cold: ``calls`` batches after ``warmup`` lazy batches, with the share of them that
    fetched nothing (sampling is uniform over the whole build, so on a large build most batches still
    fetch: that is the link's figure, not the steady state). Steady state ("after warm-up"): once the
    working set is resident, which for uniform sampling over the whole build is every chunk a batch can
    read; a ``resident="full"`` load of the same URL fills the same local copy in the background to get
    there (the lazy buffer finds those chunks in the shared residency maps), then the lazy buffer and the
    local build are timed in alternation on the same batches."""
    import torch

    import datasets_hub as dh
    from datasets_hub import SliceSampler

    os.environ["DATASETS_HUB_CACHE"] = str(cache)
    rb = dh.load(
        url,
        resident="lazy",
        batch_size=256,
        sampler=SliceSampler(slice_len=32),
        generator=torch.Generator().manual_seed(1),
    )
    for _ in range(warmup):
        rb.sample()
    cold = cold_batches(rb, calls)
    t0 = time.perf_counter()
    full = dh.load(url, resident="full")
    full.storage.wait_complete()
    fill_s = time.perf_counter() - t0
    timed = interleaved_us({"lazy": rb, "local": local_id_rb}, calls)
    return {
        "lazy_after_warmup_batches_us": cold["us"],
        "lazy_after_warmup_batches_fetch_free": cold["fetch_free"],
        "lazy_steady_state_us": timed["lazy"],
        "local_us": timed["local"],
        "full_fill_seconds": fill_s,
    }


def d4rl_build(work: Path, transitions: int) -> tuple[Any, Path]:
    from build import make_file, registry  # benchmarks/build.py: the D4RL-layout generator

    src = work / "d4rl.hdf5"
    make_file(src, transitions)
    os.environ["DATASETS_HUB_REGISTRY"] = str(registry(work, {"d4rl/remote-bench-v0": src}))
    os.environ["DATASETS_HUB_CACHE"] = str(work / "local-cache")
    import datasets_hub as dh

    rb = dh.load("d4rl/remote-bench-v0", batch_size=256)
    src.unlink()
    shutil.rmtree(work / "local-cache" / "raw", ignore_errors=True)  # the build is all that is measured
    return rb, Path(rb.storage.path)


def atari_build(work: Path, frames: int) -> tuple[Any, Path]:
    import images  # benchmarks/images.py: the Dopamine-log generator

    data_root = work / "atari-data"
    images.make_replay_logs(data_root, frames)
    env = dict(os.environ, DATASETS_HUB_CACHE=str(work / "local-cache"))
    with images.serve(data_root) as url:
        env["DATASETS_HUB_ENDPOINT_ATARI"] = url
        built = images.build_with_hub(env)
    shutil.rmtree(data_root)
    shutil.rmtree(work / "local-cache" / "raw", ignore_errors=True)  # the build is all that is measured
    os.environ["DATASETS_HUB_CACHE"] = str(work / "local-cache")
    from datasets_hub import SliceSampler
    from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
    from datasets_hub.build.storage import DatasetStorage

    storage = DatasetStorage(built["path"])
    import torch

    rb = TensorDictReplayBuffer(
        storage=storage, sampler=SliceSampler(slice_len=32), batch_size=256, generator=torch.Generator().manual_seed(1)
    )
    return rb, Path(built["path"])


def run_case(name: str, rb: Any, build: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from datasets_hub import SliceSampler
    from datasets_hub.remote.publish import export

    local_rb = type(rb)(
        storage=rb.storage,
        sampler=SliceSampler(slice_len=32),
        batch_size=256,
        generator=torch.Generator().manual_seed(1),
    )
    published = work / f"published-{name}"
    t0 = time.perf_counter()
    export(build, published)
    export_s = time.perf_counter() - t0
    print(f"{name}: exported in {export_s:.0f} s", flush=True)
    throttle = Throttle(args.mbps, args.latency_ms / 1000)
    with serve(published, throttle) as url:
        first = first_batch(url, work / f"cache-first-{name}", throttle)
        steady = steady_state(url, local_rb, work / f"cache-steady-{name}", args.warmup, args.calls)
        shutil.rmtree(work / f"cache-steady-{name}")  # a full copy: give the disk back before the pool
        pool = first_batch(url, work / f"cache-pool-{name}", throttle, "pool", args.pool_episodes, args.calls)
    local_bytes, published_bytes = tree_bytes(build), tree_bytes(published)
    for folder in (published, work / f"cache-first-{name}", work / f"cache-pool-{name}"):
        shutil.rmtree(folder)
    return {
        "case": name,
        "transitions": len(rb),
        "local_build_bytes": local_bytes,
        "published_bytes": published_bytes,
        "published_over_local": published_bytes / local_bytes,
        "export_seconds": export_s,
        **first,
        "fraction_before_first_batch": first["bytes_before_first_batch"] / local_bytes,
        "fraction_of_published_before_first_batch": first["bytes_before_first_batch"] / published_bytes,
        **steady,
        "lazy_cold_over_local": steady["lazy_after_warmup_batches_us"] / steady["local_us"],
        "lazy_steady_over_local": steady["lazy_steady_state_us"] / steady["local_us"],
        "pool": {
            "pool_episodes": args.pool_episodes,
            "first_batch": pool["first_batch"],
            "open": pool["open"],
            "bytes_before_first_batch": pool["bytes_before_first_batch"],
            "fraction_before_first_batch": pool["bytes_before_first_batch"] / local_bytes,
            "pool_us": pool["pool_us"],
            "pool_over_local": pool["pool_us"] / steady["local_us"],
            "refreshes_per_s": pool["refreshes_per_s"],
            "reads_outside_pool": pool["reads_outside_pool"],
            "error": pool["pool_error"],
        },
    }


def table(rows: list[dict[str, Any]], warmup: int) -> str:
    lines = [
        (
            "| case | transitions | first batch (s) | open (s) | bytes before 1st batch | of the build | "
            "lazy steady state / local | lazy after "
            f"{warmup} batches / local (fetch-free) | published / local build |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} lazy | {r['transitions']:,} | {r['first_batch']:.2f} (target < 5) | {r['open']:.2f} | "
            f"{r['bytes_before_first_batch'] / 1e6:.2f} MB | {100 * r['fraction_before_first_batch']:.2f}% (< 1%) | "
            f"{r['lazy_steady_over_local']:.2f}x ({r['lazy_steady_state_us']:.0f} vs {r['local_us']:.0f} us; <= 2x) | "
            f"{r['lazy_cold_over_local']:.1f}x ({100 * r['lazy_after_warmup_batches_fetch_free']:.0f}%) | "
            f"{r['published_over_local']:.2f}x |"
        )
        p = r["pool"]
        lines.append(
            f"| {r['case']} pool of {p['pool_episodes']} | {r['transitions']:,} | {p['first_batch']:.2f} | {p['open']:.2f} | "
            f"{p['bytes_before_first_batch'] / 1e6:.2f} MB | {100 * p['fraction_before_first_batch']:.2f}% | "
            f"{p['pool_over_local']:.2f}x ({p['pool_us']:.0f} us, {p['refreshes_per_s']:.1f} refreshes/s) | - | - |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=10_000_000, help="D4RL-shaped build size")
    parser.add_argument("--frames", type=int, default=100_000, help="Atari image build size (0: skip)")
    parser.add_argument("--mbps", type=float, default=50.0, help="server throughput, MB/s")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="server latency per request")
    parser.add_argument("--warmup", type=int, default=200, help="lazy batches before timing")
    parser.add_argument("--calls", type=int, default=300, help="timed batches per figure (median)")
    parser.add_argument("--pool-episodes", type=int, default=16, help="K of the pool-mode row")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument(
        "--keep-free-gb", type=float, default=25.0, help="lower --frames so that this much disk stays free"
    )
    parser.add_argument(
        "--finish-by",
        default=None,
        help="HH:MM (UTC): lower --frames so that the Atari case should end by then (about 1.3 ms per frame "
        "plus 2 minutes, measured on 2 busy cores)",
    )
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()

    def report() -> None:
        print(table(rows, args.warmup), flush=True)
        settings = {**vars(args), "elapsed_seconds": time.perf_counter() - started}
        write_report({"environment": environment(), "command": command(), "settings": settings, "rows": rows}, args.out)

    with tempfile.TemporaryDirectory(prefix="datasets_hub_remote_bench_") as scratch:
        work = Path(scratch)
        if args.transitions:  # the D4RL source file, its raw copy and the build: about 750 bytes per transition
            transitions = fit_disk(work, args.transitions, 750, args.keep_free_gb, "transitions")
            args.transitions_run = transitions
            rb, build = d4rl_build(work, transitions)
            print(f"[{time.perf_counter() - started:.0f} s] d4rl-shaped build of {len(rb):,} transitions", flush=True)
            rows.append(run_case("d4rl-shaped", rb, build, work, args))
            del rb
            shutil.rmtree(work / "local-cache")  # the next case needs the disk
            report()
        if args.frames:
            frames = fit_time(fit_frames(work, args.frames, args.keep_free_gb), args.finish_by)
            args.frames_run = frames
            rb, build = atari_build(work, frames)
            print(f"[{time.perf_counter() - started:.0f} s] atari build of {len(rb):,} transitions", flush=True)
            rows.append(run_case("atari 84x84", rb, build, work, args))
            report()
    return 0


def fit_time(frames: int, finish_by: str | None) -> int:
    """``frames``, or fewer when the Atari case would not end by ``finish_by`` (HH:MM UTC)."""
    if not finish_by:
        return frames
    hour, minute = (int(part) for part in finish_by.split(":"))
    now = time.gmtime()
    left = (hour * 60 + minute) * 60 - (now.tm_hour * 3600 + now.tm_min * 60 + now.tm_sec)
    fits = int(max(0, left - 120) / 1.3e-3)
    if fits < frames:
        print(f"only {fits:,} frames fit before {finish_by} UTC: running that many", flush=True)
    return min(frames, fits)


def fit_frames(work: Path, frames: int, keep_free_gb: float) -> int:
    """``frames``, or fewer when the disk cannot hold the Atari case (upstream logs, the local build, the
    published folder and a full copy: about 2.3 x 84 x 84 bytes per frame at the peak) with
    ``keep_free_gb`` left free."""
    return fit_disk(work, frames, 2.3 * 84 * 84, keep_free_gb, "frames")


def fit_disk(work: Path, count: int, peak_bytes_each: float, keep_free_gb: float, what: str) -> int:
    """``count``, or fewer when ``count * peak_bytes_each`` would leave less than ``keep_free_gb`` free (said)."""
    free = shutil.disk_usage(work).free - keep_free_gb * 1e9
    fits = int(max(0.0, free) / peak_bytes_each)
    if fits < count:
        print(f"only {fits:,} {what} fit on the disk with {keep_free_gb} GB left free: running that many", flush=True)
    return min(count, fits)


if __name__ == "__main__":
    sys.exit(main())
