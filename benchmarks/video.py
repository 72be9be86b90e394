"""Compressed frames at DROID's shape: build time, bytes against the MP4s, and random 8-frame windows per second.

A LeRobot v3.0 dataset of DROID's shape is written locally (tests/fixtures/lerobot_writer.py, the writer the
loader's tests use): 3 cameras of 180x320 RGB at 15 fps, ``--episodes`` episodes of ``--length`` frames (the
defaults, 12 x 150 = 1,800 frames x 3 cameras, run in a few minutes on a small machine; ``--episodes 1000
--length 200`` gives the issue's 200k frames), encoded as LeRobot encodes (``--codec libsvtav1``: AV1, yuv420p,
g=2, crf=30; ``--codec libx264`` for an h264 variant). The frames move: smooth gradients drifting at
different speeds per channel, a moving bright blob and a fixed sensor-noise texture (camera-like, not the
loader tests' 8x8 colour cells, which are the worst case for 4:2:0 chroma). Camera 0's video is encoded once
and copied to the other two (``shared_video``): decoding costs the same as three different videos.

Then, in one run on the same files:

1. two builds through ``datasets_hub.download(..., frames=...)``, each in a process of its own: ``raw`` (decoded
   uint8, as before) and ``jpeg`` (the default quality, 75): seconds, frames/s per core of the build, bytes
   against the MP4 bytes, peak RSS, and the PSNR the build measured against the decoded videos;
2. random windows of 8 consecutive frames of all 3 cameras (``delta_timestamps`` -> ``WindowSampler``), batch 64,
   through ``SampledBatches(...).dataloader(num_workers=k)`` for each ``--workers`` k (on a build the workers are
   sampling threads, see datasets_hub/interop/threaded_batches.py): samples/s (windows) and frames/s (x 24);
3. JPEG decode per frame of simplejpeg and Pillow on these frames, on 1 thread and on the frame threads.

LeRobot 0.4.4's ``LeRobotDataset`` and Lance (pylance) columns need their own venvs: without them installed the
columns are left empty and the report says so. Run: ``.venv/bin/python benchmarks/video.py [--episodes 12
--length 150 --seconds 5 --workers 0 2]``; the written dataset is kept under ``--data`` and reused.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
os.environ.setdefault("SVT_LOG", "1")

HEIGHT, WIDTH, FPS = 180, 320, 15
CAMERAS = tuple(f"observation.images.{c}" for c in ("exterior_1_left", "exterior_2_left", "wrist_left"))
WINDOW, BATCH = 8, 64
REPO = "bench/droid_shaped"


@functools.lru_cache(maxsize=8)
def _sensor_noise(camera: int, height: int, width: int) -> np.ndarray:
    """The camera's fixed sensor-noise texture, drawn once (it does not move)."""
    return np.random.default_rng(100 + camera).normal(0, 5, (height, width, 3)).astype(np.float32)


def moving_frame(index: int, camera: int, height: int, width: int) -> np.ndarray:
    """Camera-like content that moves with the frame index (see the module docstring).

    Every term is computed from its row and column factors (the blob's Gaussian and the waves split by
    ``sin(a + b)`` / ``cos(a + b)``), which gives the same picture as evaluating it per pixel (to float rounding)
    about 2.5x faster: the 200k-frame datasets spend their time in the video encoder, not here."""
    y = np.arange(height, dtype=np.float32)[:, None]
    x = np.arange(width, dtype=np.float32)[None, :]
    t = float(index)
    cx = width / 2 + width / 3 * np.sin(t / 23.0 + camera)
    cy = height / 2 + height / 3 * np.cos(t / 31.0 + camera)
    blob = 100 * np.exp(-((y - cy) ** 2) / (2 * 18.0**2)) * np.exp(-((x - cx) ** 2) / (2 * 18.0**2))
    a1, b1 = (y - 1.3 * t) / 17.0, x / 40.0
    a2, b2 = y / 27.0, (x + 3.1 * t) / 27.0
    red = 110 + 60 * np.sin((x + 2.0 * t) / 21.0) + blob
    green = 120 + 50 * (np.cos(a1) * np.cos(b1) - np.sin(a1) * np.sin(b1)) + 0.6 * blob
    blue = 100 + 45 * (np.sin(a2) * np.cos(b2) + np.cos(a2) * np.sin(b2)) + 0.3 * blob
    image = np.stack([red, green, blue], -1) + _sensor_noise(camera, height, width)
    return image.clip(0, 255).astype(np.uint8)


def write(data: Path, episodes: int, length: int, codec: str) -> Path:
    from fixtures import lerobot_writer as lw

    root = data / f"{codec}-{episodes}x{length}" / REPO
    done = root.parent / ".complete"
    if done.exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    lw.frame_image = moving_frame  # the writer draws every frame through this module-level function
    spec = lw.Spec(
        version="v3.0",
        lengths=(length,) * episodes,
        tasks=("put the marker in the cup",) * episodes,
        cameras=CAMERAS,
        height=HEIGHT,
        width=WIDTH,
        fps=FPS,
        state_dim=8,
        action_dim=7,
        episodes_per_file=max(1, min(episodes, 50)),
        codec=codec,
        shared_video=True,
    )
    started = time.time()
    lw.write_dataset(root, spec)
    done.write_text(json.dumps({"seconds": time.time() - started}))
    return root


# -- builds, each in a process of its own (its peak RSS is its own) -------------------------------------
def build_child(root: str, frames: str, workers: int, mode: str = "fresh") -> None:
    """One build: ``fresh`` (``force``), or the resume trial: ``kill-at-<k>`` checkpoints after every episode and
    kills this process (SIGKILL) when it reaches episode k; ``resume`` goes on from what that left."""
    import datasets_hub

    decoded: list[int] = []  # the episodes this build decodes (the resume trial reports them)
    if mode != "fresh":
        from datasets_hub.build import resume
        from datasets_hub.loaders.lerobot import loader as lr

        resume.CHECKPOINT_EVERY_S = 0.0
        submit = lr._Converter._submit

        def counting(converter, pool, episode, rows, scratch):
            decoded.append(episode.index)
            return submit(converter, pool, episode, rows, scratch)

        lr._Converter._submit = counting  # type: ignore[method-assign]  # the resume trial counts the episodes it decodes
    if mode.startswith("kill-at-"):
        import signal

        kill_at, chunk = int(mode.removeprefix("kill-at-")), lr._Converter._chunk

        def killing(converter, episode, rows, frames_):
            if episode.index == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return chunk(converter, episode, rows, frames_)

        lr._Converter._chunk = killing  # type: ignore[method-assign]  # the trial's kill -9
    started = time.time()
    path = datasets_hub.download(
        f"lerobot/{REPO}", root=root, num_workers=workers, frames=frames, force=mode != "resume"
    )
    seconds = time.time() - started
    manifest = json.loads((path / "manifest.json").read_text())
    stored = sum(p.stat().st_size for p in (path / "data").rglob("*") if p.is_file())
    print(
        json.dumps(
            {
                "path": str(path),
                "seconds": seconds,
                "bytes": stored,
                "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "children_peak_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
                "frames": manifest["stats"].get("frames", {}),
                "decoded_episodes": decoded if mode != "fresh" else None,
            }
        )
    )


def build(root: Path, frames: str, cache: Path, workers: int, mode: str = "fresh") -> dict:
    env = {**os.environ, "DATASETS_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    started = time.time()
    out = subprocess.run(
        [sys.executable, __file__, "--_build", str(root), frames, str(workers), mode],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if mode.startswith("kill-at-") and out.returncode == -9:
        return {"killed_after_seconds": round(time.time() - started, 2)}
    if out.returncode:
        raise RuntimeError(f"the {frames} build failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- sampling -------------------------------------------------------------------------------------------
def windows_per_second(path: str, workers: int, seconds: float) -> float:
    import torch

    from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
    from datasets_hub.build.storage import DatasetStorage
    from datasets_hub.interop.torch_data import SampledBatches
    from datasets_hub.loaders.lerobot.windows import delta_timestamps_sampler

    delta = {cam: [i / FPS for i in range(WINDOW)] for cam in CAMERAS}
    rb = TensorDictReplayBuffer(
        storage=DatasetStorage(Path(path)),
        batch_size=BATCH,
        sampler=delta_timestamps_sampler(delta, fps=FPS),
        generator=torch.Generator().manual_seed(0),
    )
    batches = iter(SampledBatches(rb, BATCH, seed=0).dataloader(num_workers=workers))
    next(batches)  # start-up and first touch are not sampling
    count, started = 0, time.perf_counter()
    while True:
        batch = next(batches)
        count += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds and count >= 3:
            assert batch["observation", "images", "wrist_left"].shape == (BATCH, WINDOW, HEIGHT, WIDTH, 3)
            return count * BATCH / elapsed


# -- LeRobot 0.4.4, run in its own venv on the same files ------------------------------------------------
def lerobot_child(root: str, workers: int, seconds: float) -> None:
    """In LeRobot's venv: random windows through ``LeRobotDataset(delta_timestamps=...)`` and a shuffling
    ``DataLoader`` (its default video backend); prints one JSON line."""
    from importlib.metadata import version

    import torch

    # this script's folder holds benchmarks/lerobot.py, which would shadow the lerobot package
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    delta = {cam: [i / FPS for i in range(WINDOW)] for cam in CAMERAS}
    dataset = LeRobotDataset(REPO, root=root, delta_timestamps=delta)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=BATCH,
        shuffle=True,
        num_workers=workers,
        generator=torch.Generator().manual_seed(0),
        # a forked worker inherits the parent's open torchcodec decoders and fails: spawn, as benchmarks/lerobot.py
        multiprocessing_context="spawn" if workers else None,
    )
    batches = iter(loader)
    next(batches)  # start-up and first touch are not sampling
    count, started = 0, time.perf_counter()
    while True:
        batch = next(batches)
        count += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds and count >= 3:
            break
    shape = list(batch[CAMERAS[2]].shape)
    print(
        json.dumps(
            {
                "samples_per_second": count * BATCH / elapsed,
                "batch_shape": shape,
                "video_backend": getattr(dataset, "video_backend", None),
                "lerobot": version("lerobot"),
                "torchcodec": version("torchcodec"),
            }
        )
    )


def lerobot_rate(python: Path, root: Path, workers: int, seconds: float) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [str(python), __file__, "--_lerobot", str(root), str(workers), str(seconds)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the JPEG libraries -----------------------------------------------------------------------------------
def decoders(frames: list[np.ndarray]) -> dict:
    import simplejpeg
    from PIL import Image

    from datasets_hub.build import frames as fr

    blobs = [
        simplejpeg.encode_jpeg(f, quality=fr.DEFAULT_QUALITY, colorspace="RGB", colorsubsampling="420") for f in frames
    ]
    out = np.empty((len(blobs), HEIGHT, WIDTH, 3), dtype=np.uint8)

    def simple() -> None:
        for i, b in enumerate(blobs):
            simplejpeg.decode_jpeg(b, buffer=out[i])

    def pillow() -> None:
        for i, b in enumerate(blobs):
            out[i] = np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))

    def threaded() -> None:
        def work(lo: int, hi: int) -> None:
            for i in range(lo, hi):
                simplejpeg.decode_jpeg(blobs[i], buffer=out[i])

        fr.run_parallel(len(blobs), work)

    def per_frame_ms(fn) -> float:
        times = []
        for _ in range(5):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
        return statistics.median(times) / len(blobs) * 1e3

    turbo = importlib.util.find_spec("turbojpeg") is not None
    return {
        "jpeg_bytes_per_frame": int(np.mean([len(b) for b in blobs])),
        "raw_bytes_per_frame": HEIGHT * WIDTH * 3,
        "simplejpeg_ms": round(per_frame_ms(simple), 3),
        "pillow_ms": round(per_frame_ms(pillow), 3),
        "simplejpeg_threads_ms": round(per_frame_ms(threaded), 3),
        "threads": fr.thread_count(),
        "pyturbojpeg": "installed (not timed)" if turbo else "not installed",
    }


def main() -> None:
    spec = importlib.util.spec_from_file_location("_report", HERE / "_report.py")
    _report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(_report)

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--length", type=int, default=150, help="frames per episode")
    parser.add_argument("--codec", default="libsvtav1", choices=["libsvtav1", "libx264"])
    parser.add_argument("--workers", nargs="+", type=int, default=[0, 2, 4])
    parser.add_argument("--seconds", type=float, default=5.0, help="timed sampling per configuration")
    parser.add_argument("--build-workers", type=int, default=2, help="video decoding processes of the build")
    parser.add_argument("--data", type=Path, default=HERE / "results" / "video-data")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "video.json")
    parser.add_argument("--resume-trial", action="store_true", help="kill -9 a jpeg build halfway and resume it")
    parser.add_argument(
        "--lerobot-python",
        type=Path,
        default=HERE.parent / ".venv-upstream-lerobot" / "bin" / "python",
        help="the Python of a venv with LeRobot 0.4.4 (make bench-lerobot makes it); missing: no LeRobot column",
    )
    args = parser.parse_args()

    started = time.time()
    root = write(args.data, args.episodes, args.length, args.codec)
    mp4 = sum(p.stat().st_size for p in root.rglob("*.mp4"))
    frames = args.episodes * args.length
    print(f"dataset: {frames:,} frames x {len(CAMERAS)} cameras, {mp4 / 2**20:.1f} MiB of MP4 ({args.codec})")
    cache = Path(tempfile.mkdtemp(prefix="datasets_hub-bench-video-", dir=args.data))
    report: dict = {
        "command": _report.command(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "environment": _report.environment(),
        "dataset": {
            "episodes": args.episodes,
            "length": args.length,
            "frames": frames,
            "cameras": len(CAMERAS),
            "height": HEIGHT,
            "width": WIDTH,
            "fps": FPS,
            "codec": args.codec,
            "mp4_bytes": mp4,
        },
        "window": WINDOW,
        "batch": BATCH,
        "builds": {},
        "windows_per_second": {},
        "lerobot": {},
        "not_run": {"lance": "pylance / lerobot-lancedb are not installed here: no Lance conversion was made"},
    }
    if not args.lerobot_python.is_file():
        report["not_run"]["lerobot"] = f"no LeRobot venv at {args.lerobot_python} (--lerobot-python)"
    try:
        for name in ("raw", "jpeg"):
            result = build(root, name, cache, args.build_workers)
            result["bytes_vs_mp4"] = round(result["bytes"] / mp4, 2)
            cores = min(os.cpu_count() or 1, max(1, args.build_workers))
            result["frames_per_second_per_core"] = round(frames * len(CAMERAS) / result["seconds"] / cores, 1)
            report["builds"][name] = result
            print(
                f"build {name:>4}: {result['seconds']:7.1f} s  {result['bytes'] / 2**20:9.1f} MiB "
                f"({result['bytes_vs_mp4']:.2f}x MP4)  peak RSS {result['peak_rss'] / 2**20:.0f} MiB  "
                f"{result['frames_per_second_per_core']:.0f} frames/s per core"
            )
        if args.resume_trial:
            # the jpeg build again in a cache of its own: killed halfway, then resumed (checkpoints after every episode)
            trial = cache / "resume-trial"
            half = args.episodes // 2
            killed = build(root, "jpeg", trial, args.build_workers, mode=f"kill-at-{half}")
            resumed = build(root, "jpeg", trial, args.build_workers, mode="resume")
            report["resume_trial"] = {
                "killed_at_episode": half,
                **killed,
                "resumed_seconds": round(resumed["seconds"], 2),
                "resumed_decoded_episodes": resumed["decoded_episodes"],
                "full_build_seconds": round(report["builds"]["jpeg"]["seconds"], 2),
                "same_bytes": resumed["bytes"] == report["builds"]["jpeg"]["bytes"],
            }
            print("resume trial:", json.dumps(report["resume_trial"]))
        for name in ("raw", "jpeg"):
            for workers in args.workers:
                rate = windows_per_second(report["builds"][name]["path"], workers, args.seconds)
                report["windows_per_second"][f"{name}/{workers}"] = round(rate, 1)
        for workers in args.workers if args.lerobot_python.is_file() else ():
            report["lerobot"][str(workers)] = lerobot_rate(args.lerobot_python, root, workers, args.seconds)
        report["decoders"] = decoders([moving_frame(i, 0, HEIGHT, WIDTH) for i in range(64)])
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    report["seconds"] = round(time.time() - started, 1)

    print(f"\nrandom {WINDOW}-frame windows of {len(CAMERAS)} cameras, batch {BATCH}: samples/s (frames/s)")
    print(f"{'workers':>8} | {'ours jpeg':>18} | {'ours raw':>18} | {'LeRobot':>8} | {'Lance':>6}")
    for workers in args.workers:
        cells = []
        for name in ("jpeg", "raw"):
            rate = report["windows_per_second"][f"{name}/{workers}"]
            cells.append(f"{rate:8.1f} ({rate * WINDOW * len(CAMERAS):7.0f})")
        theirs = report["lerobot"].get(str(workers), {}).get("samples_per_second")
        print(f"{workers:>8} | {cells[0]:>18} | {cells[1]:>18} | {f'{theirs:8.1f}' if theirs else '-':>8} | {'-':>6}")
    for workers, result in report["lerobot"].items():
        print(f"LeRobot, {workers} workers: {json.dumps(result)}")
    jpeg = report["builds"]["jpeg"]["frames"]
    for key, stats in jpeg.items():
        print(f"{key}: {stats['bytes'] / stats['rows']:.0f} B/frame, PSNR {stats['psnr_db']} dB vs the decoded video")
    print("decoders (ms/frame):", json.dumps(report["decoders"]))
    print("not run:", "; ".join(report["not_run"].values()))
    _report.write_report(report, args.out)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--_build":
        build_child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) > 1 and sys.argv[1] == "--_lerobot":
        lerobot_child(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        main()
