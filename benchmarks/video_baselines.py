"""Random 8-frame windows at DROID's shape: ours (jpeg, raw) against LeRobot 0.4.4 and Lance, on the same files.

The dataset is benchmarks/video.py's (its ``write``: a LeRobot v3.0 dataset of 3 cameras x 180x320 RGB at 15 fps,
moving camera-like content, AV1 as LeRobot encodes it) and our two builds are its ``build`` (``frames="raw"`` and
``frames="jpeg"`` at its default quality). Then, in one run on those files, random windows of 8 consecutive
frames of the 3 cameras, batch 64, in samples/s (one sample = one window of each camera = 24 frames) for each ``--workers`` k:

- **ours, jpeg / raw**: video.py's ``windows_per_second`` (``delta_timestamps`` -> ``WindowSampler`` ->
  ``SampledBatches(...).dataloader(num_workers=k)``; on a build the k workers are sampling threads, and JPEG
  decodes on the frame threads, simplejpeg);
- **LeRobot 0.4.4**: ``LeRobotDataset(delta_timestamps=...)`` for the 3 cameras, ``video_backend="torchcodec"``
  (its default where torchcodec imports; the pyav backend goes through torchvision, which LeRobot's venv here only
  has as an import stand-in), through ``DataLoader(batch_size=64, sampler=RandomSampler(replacement=True), num_workers=k)`` (endless,
  uniform over every frame as ours draws), workers
  started with ``spawn`` (a forked worker inherits the parent's open torchcodec decoders). It runs in LeRobot's
  own venv (``--lerobot-python``) as a child process;
- **Lance** (pylance): the same MP4s decoded with PyAV and written as a Lance dataset with **one row per frame**
  (episode_index, frame_index, timestamp, observation.state, action, and one binary column of JPEG bytes per
  camera, ``.`` in names written ``__``, at our jpeg build's quality, 4:2:0, as it encodes), in order, so a
  frame's row id is its global index. A batch draws 64 anchors, reads their 8-frame windows with one
  ``LanceDataset.take`` of the (sorted, unique) row ids, and decodes the JPEGs with simplejpeg into one
  preallocated array per camera (a frame in two overlapping windows decoded once and copied, as ours does) on
  ``torch.get_num_threads()`` threads (the rule ours follows: all cores in the main process, 1 in a DataLoader
  worker process). k workers are k ``DataLoader`` worker processes over an iterable of batches (``spawn``),
  each opening the dataset itself. It runs in a venv of its own (``--lance-python``) as a child process.

All columns sample the same windows: anchors drawn uniformly over every frame (a global shuffle), positions past
the anchor's episode end repeating its last frame (LeRobot's ``delta_timestamps`` rule, which ours follows). The
first batch of each configuration (worker start-up, first touch) is not timed. Build/convert time and bytes are
reported for ours and Lance; LeRobot reads the MP4s as they are.

Venvs: LeRobot's is the Makefile's ``.venv-upstream-lerobot``; Lance's is made once, outside the project::

    python3.11 -m venv /tmp/lance-venv
    /tmp/lance-venv/bin/pip install --constraint constraints.txt torch==2.13.0 pylance simplejpeg av numpy

Run: ``.venv/bin/python benchmarks/video_baselines.py [--episodes 12 --length 150 --seconds 5 --workers 0 2
--lerobot-python .venv-upstream-lerobot/bin/python --lance-python /tmp/lance-venv/bin/python]``. A column
whose venv is missing or whose run fails is left empty, with the reason in the report.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch  # in all three venvs: ours, LeRobot's and Lance's

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# benchmarks/ holds a lerobot.py: the folder must not shadow the lerobot package in LeRobot's child process
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


video = _load("video_bench", HERE / "video.py")  # the writer, the builds and our sampling, as they are
FPS, CAMERAS, WINDOW, BATCH, REPO = video.FPS, video.CAMERAS, video.WINDOW, video.BATCH, video.REPO
HEIGHT, WIDTH = video.HEIGHT, video.WIDTH


def lance_name(feature: str) -> str:
    """A LeRobot feature's column name in the Lance dataset (Lance refuses ``.`` in a top-level field name)."""
    return feature.replace(".", "__")


def _timed(batches: Any, seconds: float, check: Any) -> float:
    """Windows per second over ``seconds`` of batches, the first (start-up) left out; ``check`` looks at the last."""
    next(batches)
    count, started = 0, time.perf_counter()
    while True:
        batch = next(batches)
        count += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds and count >= 3:
            check(batch)
            return count * BATCH / elapsed


# -- LeRobot 0.4.4, in its own venv ------------------------------------------------------------------
def lerobot_child(root: str, workers: int, seconds: float) -> None:
    import importlib.metadata

    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    # One intra-op thread, as in its DataLoader workers: with torch's default 2 threads the main-process loader
    # was 8x slower on this loaded 2-core machine (0.70 against 0.088 s a sample), not a fair baseline.
    torch.set_num_threads(1)
    delta = {cam: [i / FPS for i in range(WINDOW)] for cam in CAMERAS}
    dataset = LeRobotDataset(REPO, root=root, delta_timestamps=delta, video_backend="torchcodec")
    generator = torch.Generator().manual_seed(0)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=BATCH,
        sampler=torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=2**40, generator=generator),
        num_workers=workers,
        multiprocessing_context="spawn" if workers else None,
    )

    def check(batch: dict) -> None:
        shape = tuple(batch[CAMERAS[2]].shape)
        if shape != (BATCH, WINDOW, 3, HEIGHT, WIDTH):
            raise RuntimeError(f"LeRobot gave {CAMERAS[2]} of shape {shape}")

    rate = _timed(iter(loader), seconds, check)
    print(
        json.dumps(
            {
                "samples_per_s": rate,
                "backend": dataset.video_backend,
                "lerobot": importlib.metadata.version("lerobot"),
                "torchcodec": importlib.metadata.version("torchcodec"),
                "torch": torch.__version__,
            }
        ),
        flush=True,
    )
    os._exit(
        0
    )  # torchcodec's threads abort the interpreter's teardown ("terminate called without an active exception")


# -- Lance (pylance), in its own venv ----------------------------------------------------------------
def lance_convert_child(root: str, out: str, quality: int) -> None:
    """Decode the MP4s (PyAV), JPEG-encode each frame, write one Lance row per frame; print time and bytes."""
    import glob

    import av
    import lance
    import pyarrow as pa
    import pyarrow.parquet as pq
    import simplejpeg

    started = time.time()
    data = pq.read_table(sorted(glob.glob(f"{root}/data/chunk-*/file-*.parquet")))
    rows = data.num_rows
    columns: dict[str, list[bytes]] = {}
    for cam in CAMERAS:
        blobs: list[bytes] = []
        for path in sorted(glob.glob(f"{root}/videos/{cam}/chunk-*/file-*.mp4")):
            with av.open(path) as container:
                stream = container.streams.video[0]
                stream.thread_type = "AUTO"
                for frame in container.decode(stream):
                    image = frame.to_ndarray(format="rgb24")
                    blobs.append(
                        simplejpeg.encode_jpeg(image, quality=quality, colorspace="RGB", colorsubsampling="420")
                    )
        if len(blobs) != rows:  # the written files hold each episode's frames in row order, one per row
            raise RuntimeError(f"{cam}: {len(blobs)} decoded frames for {rows} parquet rows")
        columns[cam] = blobs
    table = pa.table(
        {
            "episode_index": data["episode_index"],
            "frame_index": data["frame_index"],
            "timestamp": data["timestamp"],
            lance_name("observation.state"): data["observation.state"],
            "action": data["action"],
            **{lance_name(cam): pa.array(blobs, pa.binary()) for cam, blobs in columns.items()},
        }
    )
    if Path(out).exists():
        shutil.rmtree(out)
    lance.write_dataset(table, out)
    seconds = time.time() - started
    stored = sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file())
    print(json.dumps({"seconds": seconds, "bytes": stored, "rows": rows, "pylance": lance.__version__}))


def _episode_ends(dataset: Any) -> np.ndarray:
    """For every row, the row id of its episode's last frame (windows past it repeat that frame)."""
    episodes = dataset.to_table(columns=["episode_index"])["episode_index"].to_numpy()
    last = np.flatnonzero(np.r_[episodes[1:] != episodes[:-1], True])
    return last[np.searchsorted(last, np.arange(len(episodes)))]


def _decode_jpegs(blobs: list[bytes], first: np.ndarray, frames: np.ndarray, lo: int, hi: int) -> None:
    """Decode ``blobs[u]`` into ``frames[first[u]]`` for ``u`` in ``[lo, hi)`` (simplejpeg, as our jpeg build)."""
    import simplejpeg

    for u in range(lo, hi):
        simplejpeg.decode_jpeg(blobs[u], colorspace="RGB", buffer=frames[first[u]])


class LanceWindows(torch.utils.data.IterableDataset):
    """An endless iterable of window batches read from the Lance dataset at ``path`` (module docstring)."""

    def __init__(self, path: str, seed: int) -> None:
        self.path, self.seed = path, seed

    def __iter__(self) -> Any:
        from concurrent.futures import ThreadPoolExecutor

        import lance

        info = torch.utils.data.get_worker_info()
        rng = np.random.default_rng([self.seed, info.id if info else 0])
        dataset = lance.dataset(self.path)
        ends = _episode_ends(dataset)
        threads = max(1, torch.get_num_threads())
        pool = ThreadPoolExecutor(threads)
        offsets = np.arange(WINDOW)
        while True:
            anchors = rng.integers(0, len(ends), BATCH)
            ids = np.minimum(anchors[:, None] + offsets, ends[anchors][:, None]).ravel()
            # a frame in two overlapping windows is decoded once, as ours does, and copied
            unique, first, where = np.unique(ids, return_index=True, return_inverse=True)
            again = np.flatnonzero(first[where] != np.arange(len(ids)))
            table = dataset.take(unique, columns=[*map(lance_name, CAMERAS), lance_name("observation.state"), "action"])
            batch: dict[str, Any] = {}
            for cam in CAMERAS:
                blobs = table[lance_name(cam)].to_pylist()
                frames = np.empty((BATCH * WINDOW, HEIGHT, WIDTH, 3), dtype=np.uint8)
                bounds = np.linspace(0, len(unique), threads + 1).astype(int)
                list(pool.map(partial(_decode_jpegs, blobs, first, frames), bounds[:-1], bounds[1:]))
                frames[again] = frames[first[where[again]]]
                batch[cam] = torch.from_numpy(frames.reshape(BATCH, WINDOW, HEIGHT, WIDTH, 3))
            anchor_rows = where.reshape(BATCH, WINDOW)[:, 0]
            for key in ("observation.state", "action"):
                values = np.stack(table[lance_name(key)].to_numpy(zero_copy_only=False))
                batch[key] = torch.from_numpy(values[anchor_rows])
            yield batch


def lance_sample_child(path: str, workers: int, seconds: float) -> None:
    loader = torch.utils.data.DataLoader(
        LanceWindows(path, seed=0),
        batch_size=None,
        num_workers=workers,
        multiprocessing_context="spawn" if workers else None,
    )

    def check(batch: dict) -> None:
        shape = tuple(batch[CAMERAS[2]].shape)
        if shape != (BATCH, WINDOW, HEIGHT, WIDTH, 3):
            raise RuntimeError(f"Lance windows of {CAMERAS[2]} have shape {shape}")

    print(json.dumps({"samples_per_s": _timed(iter(loader), seconds, check)}))


# -- the parent ----------------------------------------------------------------------------------------
def child(python: Path, *args: str, timeout: float) -> dict:
    """Run this script's ``args`` mode under ``python``; its last stdout line is JSON."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    out = subprocess.run(
        [str(python), __file__, *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        cwd=ROOT,
    )
    if out.returncode:
        raise RuntimeError(f"{' '.join(args[:1])} failed under {python}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return round(ours / theirs, 2) if ours and theirs else None


def main() -> None:
    report_module = _load("_report", HERE / "_report.py")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--length", type=int, default=150, help="frames per episode")
    parser.add_argument("--codec", default="libsvtav1", choices=["libsvtav1", "libx264"])
    parser.add_argument("--workers", nargs="+", type=int, default=[0, 2])
    parser.add_argument("--seconds", type=float, default=5.0, help="timed sampling per configuration")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per configuration (median)")
    parser.add_argument("--build-workers", type=int, default=2, help="video decoding processes of our builds")
    parser.add_argument("--lerobot-python", type=Path, default=ROOT / ".venv-upstream-lerobot" / "bin" / "python")
    parser.add_argument("--lance-python", type=Path, default=Path("/tmp/lance-venv/bin/python"))
    parser.add_argument("--data", type=Path, default=HERE / "results" / "video-data")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "video_baselines.json")
    args = parser.parse_args()

    started = time.time()
    root = video.write(args.data, args.episodes, args.length, args.codec)
    mp4 = sum(p.stat().st_size for p in root.rglob("*.mp4"))
    frames = args.episodes * args.length
    print(f"dataset: {frames:,} frames x {len(CAMERAS)} cameras, {mp4 / 2**20:.1f} MiB of MP4 ({args.codec})")
    report: dict[str, Any] = {
        "command": report_module.command(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "environment": report_module.environment(),
        "dataset": {"episodes": args.episodes, "length": args.length, "frames": frames, "cameras": len(CAMERAS),
                    "height": HEIGHT, "width": WIDTH, "fps": FPS, "codec": args.codec, "mp4_bytes": mp4},
        "window": WINDOW,
        "batch": BATCH,
        "stores": {},
        "samples_per_s": {},
        "not_run": {},
    }  # fmt: skip
    from datasets_hub.build.frames import DEFAULT_QUALITY as quality  # our jpeg build's, which Lance's JPEGs match

    report["jpeg_quality"] = quality
    timeout = 120 + 10 * args.seconds
    cache = Path(tempfile.mkdtemp(prefix="datasets_hub-bench-baselines-", dir=args.data))
    lance_path = cache / "droid_shaped.lance"
    try:
        for name in ("raw", "jpeg"):
            built = video.build(root, name, cache, args.build_workers)
            report["stores"][f"ours {name}"] = {"seconds": round(built["seconds"], 1), "bytes": built["bytes"],
                                                "path": built["path"]}  # fmt: skip
        if args.lance_python.exists():
            try:
                converted = child(
                    args.lance_python, "--_lance_convert", str(root), str(lance_path), str(quality), timeout=1800
                )
                report["stores"]["lance"] = {**converted, "seconds": round(converted["seconds"], 1)}
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                report["not_run"]["lance"] = f"the conversion failed: {exc}"
        else:
            report["not_run"]["lance"] = f"no Lance venv at {args.lance_python} (see the docstring)"
        if not args.lerobot_python.exists():
            report["not_run"]["lerobot"] = f"no LeRobot venv at {args.lerobot_python} (make test-upstream-lerobot)"
        runs: dict[tuple[int, str], list[float]] = {}
        for _ in range(args.repeats):  # round robin: load that comes and goes touches every column alike
            for workers in args.workers:
                for name in ("jpeg", "raw"):
                    path = report["stores"][f"ours {name}"]["path"]
                    runs.setdefault((workers, f"ours {name}"), []).append(
                        video.windows_per_second(path, workers, args.seconds)
                    )
                if "lerobot" not in report["not_run"]:
                    try:
                        got = child(args.lerobot_python, "--_lerobot", str(root), str(workers), str(args.seconds),
                                    timeout=timeout)  # fmt: skip
                        runs.setdefault((workers, "lerobot"), []).append(got.pop("samples_per_s"))
                        report["lerobot"] = got
                    except (RuntimeError, subprocess.TimeoutExpired) as exc:
                        report["not_run"][f"lerobot/{workers}"] = str(exc)
                if "lance" in report["stores"]:
                    try:
                        got = child(args.lance_python, "--_lance_sample", str(lance_path), str(workers),
                                    str(args.seconds), timeout=timeout)  # fmt: skip
                        runs.setdefault((workers, "lance"), []).append(got["samples_per_s"])
                    except (RuntimeError, subprocess.TimeoutExpired) as exc:
                        report["not_run"][f"lance/{workers}"] = str(exc)
                print(f"workers={workers}: { ({k[1]: round(v[-1], 1) for k, v in runs.items() if k[0] == workers}) }")
        report["runs"] = {f"{name}/{workers}": [round(r, 1) for r in rs] for (workers, name), rs in runs.items()}
        for workers in args.workers:
            rates = report["samples_per_s"].setdefault(str(workers), {})
            for name in ("ours jpeg", "ours raw", "lerobot", "lance"):
                got_runs = runs.get((workers, name))
                rates[name] = round(statistics.median(got_runs), 1) if got_runs else None
            for base in ("lerobot", "lance"):
                rates[f"ours jpeg / {base}"] = _ratio(rates["ours jpeg"], rates[base])
                rates[f"ours raw / {base}"] = _ratio(rates["ours raw"], rates[base])
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    for store in report["stores"].values():
        store.pop("path", None)
        store["bytes_vs_mp4"] = round(store["bytes"] / mp4, 2)
    report["seconds"] = round(time.time() - started, 1)

    print(f"\nstores ({mp4 / 2**20:.1f} MiB of MP4, read as they are by LeRobot)")
    for name, store in report["stores"].items():
        print(
            f"{name:>10}: {store['seconds']:7.1f} s  {store['bytes'] / 2**20:8.1f} MiB ({store['bytes_vs_mp4']}x MP4)"
        )
    print(f"\nrandom {WINDOW}-frame windows of {len(CAMERAS)} cameras, batch {BATCH}: samples/s")
    columns = ["ours jpeg", "ours raw", "lerobot", "lance", "ours jpeg / lerobot", "ours jpeg / lance"]
    print(f"{'workers':>8} | " + " | ".join(f"{c:>19}" for c in columns))
    for workers, rates in report["samples_per_s"].items():
        cells = ["-" if rates.get(c) is None else f"{rates[c]:,}" for c in columns]
        print(f"{workers:>8} | " + " | ".join(f"{c:>19}" for c in cells))
    if report.get("lerobot"):
        print("LeRobot:", json.dumps(report["lerobot"]))
    for name, why in report["not_run"].items():
        print(f"not run: {name}: {why}")
    report_module.write_report(report, args.out)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "--_lerobot":
        lerobot_child(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif mode == "--_lance_convert":
        lance_convert_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif mode == "--_lance_sample":
        lance_sample_child(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        main()
