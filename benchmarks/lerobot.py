"""LeRobot datasets: 8-frame windows from a hub build vs ``LeRobotDataset`` with ``delta_timestamps``.

Two datasets are written locally in LeRobot v3.0 format (tests/fixtures/lerobot_writer.py: AV1 videos encoded as
LeRobot encodes them, libsvtav1/yuv420p/g=2/crf=30/preset=12):

- ``pusht``: 96x96 RGB, 1 camera, 200 episodes, ~25k frames, 10 fps (Push-T's shape);
- ``aloha``: 480x640 RGB, 4 cameras, 10 episodes of 500 frames (5k frames), 50 fps (ALOHA's shape;
  the 4 cameras share one encoded video per file, which costs the same to decode as 4 different ones).

For each: the build (time, bytes against the MP4 source, peak RSS of the build process and of its decoding
workers), then frames per second for batches of 32 windows of 8 consecutive frames per camera, through a
``torch.utils.data.DataLoader`` with 0, 2 and 4 workers: ours (``delta_timestamps_sampler`` ->
``WindowSampler`` over the build, ``SampledBatches(...).dataloader(num_workers=k)``: on a build the k
workers are sampling threads of the training process, see ``datasets_hub/interop/threaded_batches.py``;
the "ours, processes" column times k DataLoader worker processes instead) and LeRobot's (``LeRobotDataset(delta_timestamps=...)``,
``DataLoader(batch_size=32, shuffle=True)``, its default torchcodec decoder), in the same run. Frames/s counts
camera frames delivered: 32 x 8 x cameras per batch.

Run (LeRobot lives in its own venv, see the Makefile): ``make bench-lerobot``, or
``.venv-upstream-lerobot/bin/python benchmarks/lerobot.py [--shapes pusht aloha] [--seconds 8]``.
Without lerobot installed the LeRobot column is left empty. The written datasets are kept under
``--data`` (default ``benchmarks/results/lerobot-data``) and reused; builds go to a temporary cache.
The synthetic frames (8x8-pixel texture cells plus a code) compress less well than static scenes and
better than camera noise: treat the bytes ratio as indicative.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# this file is named lerobot.py: its folder must not shadow the lerobot package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent / "tests"))
os.environ.setdefault("SVT_LOG", "1")

SHAPES = {
    "pusht": {
        "height": 96,
        "width": 96,
        "cameras": ("observation.image",),
        "fps": 10,
        "lengths": tuple(100 + (37 * e) % 51 for e in range(200)),
        "episodes_per_file": 200,
    },
    "aloha": {
        "height": 480,
        "width": 640,
        "fps": 50,
        "lengths": (500,) * 10,
        "episodes_per_file": 1,
        "cameras": tuple(
            f"observation.images.{c}" for c in ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist")
        ),
    },
}
WINDOW, BATCH = 8, 32
REPO = "bench/{shape}"


def write(shape: str, data: Path) -> Path:
    from fixtures import lerobot_writer as lw

    root = data / shape / REPO.format(shape=shape)
    done = root.parent / ".complete"
    if done.exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    cfg = SHAPES[shape]
    spec = lw.Spec(
        version="v3.0",
        lengths=cfg["lengths"],
        tasks=("push the T",) * len(cfg["lengths"]),
        cameras=cfg["cameras"],
        height=cfg["height"],
        width=cfg["width"],
        fps=cfg["fps"],
        state_dim=14,
        action_dim=14,
        episodes_per_file=cfg["episodes_per_file"],
        shared_video=True,
    )
    started = time.time()
    lw.write_dataset(root, spec)
    done.write_text(json.dumps({"seconds": time.time() - started}))
    print(f"wrote {shape} ({sum(cfg['lengths'])} frames) in {time.time() - started:.0f} s")
    return root


def _sizes(root: Path) -> dict[str, int]:
    mp4 = sum(p.stat().st_size for p in root.rglob("*.mp4"))
    total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return {"mp4_bytes": mp4, "source_bytes": total}


# -- the build, in a process of its own (so that its peak RSS is its own) --------------------------
def _status(pid: int | str, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _tree(root: int) -> list[int]:
    """``root`` and its descendants (decoding workers are children of the forkserver, a child of ours)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, []))
    return out


def _watch(stop: threading.Event, peaks: dict[str, int]) -> None:
    """Peak anonymous memory of this process and peak RSS summed over its process tree."""
    me = os.getpid()
    while not stop.is_set():
        try:
            peaks["anon"] = max(peaks["anon"], _status(me, "RssAnon"))
            total = 0
            for pid in _tree(me):
                try:
                    total += _status(pid, "VmRSS")
                except OSError:
                    continue
            peaks["tree"] = max(peaks["tree"], total)
        except OSError:
            return
        stop.wait(0.1)


def build_child(root: Path, shape: str, workers: int) -> None:
    """Runs in the child: build the dataset (from the local folder, through the hub's own download and
    build path), print one JSON line."""
    import datasets_hub

    dataset_id = f"lerobot/{REPO.format(shape=shape)}"
    stop, peaks = threading.Event(), {"anon": 0, "tree": 0}
    watcher = threading.Thread(target=_watch, args=(stop, peaks), daemon=True)
    watcher.start()
    started = time.time()
    path = datasets_hub.download(dataset_id, root=str(root), num_workers=workers, force=True)
    seconds = time.time() - started
    stop.set()
    data = sum(p.stat().st_size for p in (path / "data").rglob("*") if p.is_file())
    print(
        json.dumps(
            {
                "path": str(path),
                "seconds": seconds,
                "bytes": data,
                "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "peak_anon": peaks["anon"],
                "peak_tree_rss": peaks["tree"],
            }
        )
    )


def build_ours(root: Path, shape: str, cache: Path, workers: int) -> dict:
    env = {**os.environ, "DATASETS_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, __file__, "--_build", str(root), shape, str(workers)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(f"build failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- sampling -----------------------------------------------------------------------------------
def _rate(loader, frames_per_batch: int, seconds: float) -> float:
    it = iter(loader)
    next(it)  # worker start-up and first-touch are not sampling
    count, started = 0, time.perf_counter()
    while True:
        next(it)
        count += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds and count >= 3:
            return count * frames_per_batch / elapsed


def _context(workers: int) -> dict:
    """Workers start with ``spawn`` on both sides: a forked LeRobot worker inherits the parent's open
    torchcodec decoders and fails ("Invalid data found"), as LeRobot's own docstring warns; start-up is
    not timed."""
    return {"multiprocessing_context": "spawn"} if workers else {}


def ours_rate(path: str, shape: str, workers: int, seconds: float, mode: str = "auto") -> float:
    import torch

    from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
    from datasets_hub.build.storage import DatasetStorage
    from datasets_hub.interop.torch_data import SampledBatches
    from datasets_hub.loaders.lerobot.windows import delta_timestamps_sampler

    cfg = SHAPES[shape]
    delta = {cam: [i / cfg["fps"] for i in range(WINDOW)] for cam in cfg["cameras"]}
    rb = TensorDictReplayBuffer(
        storage=DatasetStorage(Path(path)),
        batch_size=BATCH,
        sampler=delta_timestamps_sampler(delta, fps=cfg["fps"]),
        generator=torch.Generator().manual_seed(0),
    )
    # "auto": a build's workers are threads (no batch crosses processes); "processes": DataLoader workers
    extra = _context(workers) if mode == "processes" else {}
    loader = SampledBatches(rb, BATCH, seed=0).dataloader(num_workers=workers, workers=mode, **extra)
    return _rate(loader, BATCH * WINDOW * len(cfg["cameras"]), seconds)


def lerobot_rate(root: Path, shape: str, workers: int, seconds: float) -> float | None:
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError:
        return None
    import torch

    cfg = SHAPES[shape]
    delta = {cam: [i / cfg["fps"] for i in range(WINDOW)] for cam in cfg["cameras"]}
    dataset = LeRobotDataset(REPO.format(shape=shape), root=root, delta_timestamps=delta)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=BATCH,
        shuffle=True,
        num_workers=workers,
        generator=torch.Generator().manual_seed(0),
        **_context(workers),
    )
    return _rate(loader, BATCH * WINDOW * len(cfg["cameras"]), seconds)


def lerobot_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("lerobot")
    except Exception:  # noqa: BLE001 - not installed: the column stays empty
        return None


def main() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("_report", HERE / "_report.py")
    _report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(_report)
    command, environment, write_report = _report.command, _report.environment, _report.write_report

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--workers", nargs="+", type=int, default=[0, 2, 4])
    parser.add_argument("--seconds", type=float, default=8.0, help="timed sampling per configuration")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per configuration (median)")
    parser.add_argument("--build-workers", type=int, default=2, help="decoding processes of the build")
    parser.add_argument(
        "--process-workers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time ours with DataLoader worker processes (workers='processes')",
    )
    parser.add_argument("--data", type=Path, default=HERE / "results" / "lerobot-data")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "lerobot.json")
    args = parser.parse_args()
    report = {
        "command": command(),
        "environment": environment(lerobot=lerobot_version()),
        "window": WINDOW,
        "batch": BATCH,
        "shapes": {},
    }
    rows = []
    for shape in args.shapes:
        root = write(shape, args.data)
        cache = Path(tempfile.mkdtemp(prefix=f"datasets_hub-bench-{shape}-", dir=args.data))
        try:
            built = build_ours(root, shape, cache, args.build_workers)
            sizes = _sizes(root)
            result = {
                "frames": sum(SHAPES[shape]["lengths"]),
                "cameras": len(SHAPES[shape]["cameras"]),
                "build": built,
                **sizes,
                "bytes_ratio": built["bytes"] / sizes["source_bytes"],
                "sampling": {},
            }
            for workers in args.workers:
                ours = statistics.median(
                    ours_rate(built["path"], shape, workers, args.seconds) for _ in range(args.repeats)
                )
                ours_processes = None
                if workers and args.process_workers:
                    ours_processes = statistics.median(
                        ours_rate(built["path"], shape, workers, args.seconds, "processes") for _ in range(args.repeats)
                    )
                error = None
                try:
                    theirs_runs = [lerobot_rate(root, shape, workers, args.seconds) for _ in range(args.repeats)]
                except Exception as exc:  # noqa: BLE001 - e.g. a LeRobot worker killed for memory: record it, go on
                    theirs_runs, error = [None], f"{type(exc).__name__}: {exc}"
                theirs = None if None in theirs_runs else statistics.median(theirs_runs)
                result["sampling"][workers] = {
                    "ours_frames_per_s": ours,
                    "ours_process_workers_frames_per_s": ours_processes,
                    "lerobot_frames_per_s": theirs,
                    "ratio": ours / theirs if theirs else None,
                    "lerobot_error": error,
                }
                rows.append((shape, workers, ours, theirs, ours_processes))
                print(
                    f"{shape} workers={workers}: ours {ours:,.0f} frames/s"
                    f"{'' if ours_processes is None else f' (process workers {ours_processes:,.0f})'}, LeRobot "
                    f"{'-' if theirs is None else f'{theirs:,.0f}'} frames/s",
                    flush=True,
                )
            report["shapes"][shape] = result
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    print(
        f"\n{'shape':8} {'workers':>7} {'ours frames/s':>14} {'ours, processes':>16} {'LeRobot frames/s':>17} "
        f"{'ratio':>7}"
    )
    for shape, workers, ours, theirs, procs in rows:
        ratio = f"{ours / theirs:.1f}x" if theirs else "-"
        procs_s = "-" if procs is None else f"{procs:,.0f}"
        theirs_s = "-" if theirs is None else f"{theirs:,.0f}"
        print(f"{shape:8} {workers:>7} {ours:>14,.0f} {procs_s:>16} {theirs_s:>17} {ratio:>7}")
    print(
        f"\n{'shape':8} {'build s':>8} {'built MB':>9} {'MP4 MB':>8} {'bytes x':>8} {'peak RSS MB':>12} "
        f"{'anon MB':>8} {'tree RSS MB':>12}"
    )
    for shape, r in report["shapes"].items():
        b = r["build"]
        print(
            f"{shape:8} {b['seconds']:>8.1f} {b['bytes'] / 1e6:>9,.0f} {r['mp4_bytes'] / 1e6:>8,.1f} "
            f"{r['bytes_ratio']:>8.0f} {b['peak_rss'] / 1e6:>12,.0f} {b['peak_anon'] / 1e6:>8,.0f} "
            f"{b['peak_tree_rss'] / 1e6:>12,.0f}"
        )
    write_report(report, args.out)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--_build":
        build_child(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    else:
        main()
