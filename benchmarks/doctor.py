"""The data doctor's speed: seconds per million frames, on a build and on raw sources before a build.

Four clean sources of ``--frames`` frames each are written once (under ``--workdir``, default a
temporary directory):

- ``build``: a hub build of D4RL-shaped episodes (17-d float32 states that move a little every step,
  6-d actions, rewards, 1000-step episodes), made by the hub's build (its time is not counted);
- ``lerobot``: a LeRobot v3.0 root: ``meta/info.json``, episode metadata, data parquet files of 20
  episodes of 500 frames (14-d state and action, reward, done, timestamps), and one 32x32 AV1 video per
  data file for one camera. Every video file holds the same frames (one encoded, then copied: encoding
  a million frames would take minutes and the doctor reads headers, not pixels);
- ``hdf5``: a D4RL-layout HDF5 file (observations, actions, rewards, terminals, timeouts);
- ``npz``: an OGBench-layout npz file (observations, actions, terminals).

Each is diagnosed ``--repeats`` times with the default row budget (1,000,000 rows: every row of these
sources is read) and 8 sampled video decodes; the table gives the median wall time, the seconds per
million frames, and the findings (0 on these clean sources). Target: <= 60 s per million frames.

Run: ``python benchmarks/doctor.py [--frames 1000000] [--repeats 3]``. Results:
``benchmarks/results/doctor.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
RESULTS = HERE / "results" / "doctor.json"
EPISODE = 1000  # D4RL-shaped sources: steps per episode
LEROBOT_EPISODE, PER_FILE, FPS = 500, 20, 50


def states(n: int, dim: int, seed: int) -> np.ndarray:
    """``[n, dim]`` float32 states that move a little every step (a random walk per dimension)."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.normal(0, 0.05, (n, dim)).astype(np.float32), axis=0)


def write_build(root: Path, frames: int) -> Path:
    import torch
    from tensordict import TensorDict

    from datasets_hub.build.pipeline import build
    from datasets_hub.loader import DatasetSpec
    from datasets_hub.testing import FakeLoader

    episodes = frames // EPISODE

    class D4RLShaped(FakeLoader):
        def episodes(self, spec, files, ctx):
            rng = np.random.default_rng(1)
            for first in range(0, episodes, 50):
                k = min(50, episodes - first)
                n = k * EPISODE
                obs = states(n + k, 17, first)
                keep = np.ones(n + k, bool)
                keep[np.arange(1, k + 1) * (EPISODE + 1) - 1] = False  # each episode's final next state
                nxt = np.ones(n + k, bool)
                nxt[np.arange(k) * (EPISODE + 1)] = False
                end = np.zeros((n, 1), bool)
                end[EPISODE - 1 :: EPISODE] = True
                yield TensorDict(
                    {
                        "observation": torch.from_numpy(obs[keep]),
                        "action": torch.from_numpy(np.tanh(rng.normal(0, 1, (n, 6))).astype(np.float32)),
                        "episode": torch.from_numpy(np.repeat(np.arange(first, first + k), EPISODE)),
                        "next": {
                            "observation": torch.from_numpy(obs[nxt]),
                            "reward": torch.from_numpy(rng.normal(0, 1, (n, 1)).astype(np.float32)),
                            "terminated": torch.zeros(n, 1, dtype=torch.bool),
                            "truncated": torch.from_numpy(end),
                        },
                    },
                    batch_size=[n],
                )

    return build(DatasetSpec(id="bench/doctor", loader="fake", params={"frames": frames}), D4RLShaped(), {}, [])


def encode(path: Path, count: int) -> None:
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libsvtav1", rate=FPS, options={"g": "2", "crf": "30", "preset": "12"})
        stream.pix_fmt, stream.width, stream.height = "yuv420p", 32, 32
        stream.time_base = Fraction(1, FPS)
        for i in range(count):
            img = np.full((32, 32, 3), i % 251, np.uint8)
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, FPS)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def write_lerobot(root: Path, frames: int) -> Path:
    """A LeRobot v3.0 root (layout as LeRobot 0.4 writes it; see tests/fixtures/lerobot_writer.py)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    episodes = frames // LEROBOT_EPISODE
    files = -(-episodes // PER_FILE)
    cam = "observation.images.top"
    info = {
        "codebase_version": "v3.0",
        "fps": FPS,
        "total_episodes": episodes,
        "total_frames": episodes * LEROBOT_EPISODE,
        "chunks_size": 1000,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": {
            "observation.state": {"dtype": "float32", "shape": [14]},
            "action": {"dtype": "float32", "shape": [14]},
            "next.reward": {"dtype": "float32", "shape": [1]},
            "next.done": {"dtype": "bool", "shape": [1]},
            cam: {"dtype": "video", "shape": [32, 32, 3]},
            **{k: {"dtype": "int64", "shape": [1]} for k in ("frame_index", "episode_index", "index", "task_index")},
            "timestamp": {"dtype": "float32", "shape": [1]},
        },
    }
    template = root / "videos" / cam / "chunk-000" / "file-000.mp4"
    encode(template, PER_FILE * LEROBOT_EPISODE)
    meta = {k: [] for k in ("episode_index", "length", "dataset_from_index", "dataset_to_index")}
    for k in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
        meta[f"videos/{cam}/{k}"] = []
    meta["data/chunk_index"], meta["data/file_index"] = [], []
    rng = np.random.default_rng(0)
    for f in range(files):
        eps = range(f * PER_FILE, min((f + 1) * PER_FILE, episodes))
        n = len(eps) * LEROBOT_EPISODE
        first = eps[0] * LEROBOT_EPISODE
        t = np.tile(np.arange(LEROBOT_EPISODE), len(eps))
        state = states(n, 14, f)
        table = pa.table(
            {
                "observation.state": pa.FixedSizeListArray.from_arrays(pa.array(state.reshape(-1)), 14),
                "action": pa.FixedSizeListArray.from_arrays(
                    pa.array(np.tanh(rng.normal(0, 1, (n, 14))).astype(np.float32).reshape(-1)), 14
                ),
                "next.reward": pa.array(rng.normal(0, 1, n).astype(np.float32)),
                "next.done": pa.array(t == LEROBOT_EPISODE - 1),
                "timestamp": pa.array((t / FPS).astype(np.float32)),
                "frame_index": pa.array(t.astype(np.int64)),
                "episode_index": pa.array(np.repeat(np.array(eps), LEROBOT_EPISODE).astype(np.int64)),
                "index": pa.array(np.arange(first, first + n, dtype=np.int64)),
                "task_index": pa.array(np.zeros(n, np.int64)),
            }
        )
        path = root / "data" / "chunk-000" / f"file-{f:03d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        video = root / "videos" / cam / "chunk-000" / f"file-{f:03d}.mp4"
        if video != template:
            shutil.copyfile(template, video)
        for j, e in enumerate(eps):
            meta["episode_index"].append(e)
            meta["length"].append(LEROBOT_EPISODE)
            meta["dataset_from_index"].append(e * LEROBOT_EPISODE)
            meta["dataset_to_index"].append((e + 1) * LEROBOT_EPISODE)
            meta["data/chunk_index"].append(0)
            meta["data/file_index"].append(f)
            meta[f"videos/{cam}/chunk_index"].append(0)
            meta[f"videos/{cam}/file_index"].append(f)
            meta[f"videos/{cam}/from_timestamp"].append(j * LEROBOT_EPISODE / FPS)
            meta[f"videos/{cam}/to_timestamp"].append((j + 1) * LEROBOT_EPISODE / FPS)
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(meta), root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=1))
    return root


def flat_arrays(frames: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    end = (np.arange(frames) % EPISODE) == EPISODE - 1
    return {
        "observations": states(frames, 17, 3),
        "actions": np.tanh(rng.normal(0, 1, (frames, 6))).astype(np.float32),
        "rewards": rng.normal(0, 1, frames).astype(np.float32),
        "terminals": np.zeros(frames, bool),
        "timeouts": end,
    }


def write_hdf5(path: Path, frames: int) -> Path:
    import h5py

    with h5py.File(path, "w") as f:
        for key, values in flat_arrays(frames).items():
            f[key] = values
    return path


def write_npz(path: Path, frames: int) -> Path:
    arrays = flat_arrays(frames)
    np.savez(path, observations=arrays["observations"], actions=arrays["actions"], terminals=arrays["timeouts"])
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary directory, removed after")
    parser.add_argument("--sources", nargs="+", default=["build", "lerobot", "hdf5", "npz"])
    args = parser.parse_args(argv)
    from _report import command, environment, write_report

    work = args.workdir or Path(tempfile.mkdtemp(prefix="doctor-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    import os

    os.environ["DATASETS_HUB_CACHE"] = str(work / "cache")
    from datasets_hub.doctor import diagnose

    writers = {
        "build": lambda: write_build(work, args.frames),
        "lerobot": lambda: write_lerobot(work / "lerobot", args.frames),
        "hdf5": lambda: write_hdf5(work / "d4rl.hdf5", args.frames),
        "npz": lambda: write_npz(work / "ogbench.npz", args.frames),
    }
    rows = []
    try:
        for name in args.sources:
            began = time.perf_counter()
            target = writers[name]()
            written = time.perf_counter() - began
            times, report = [], None
            for _ in range(args.repeats):
                began = time.perf_counter()
                report = diagnose(target)
                times.append(time.perf_counter() - began)
            assert report is not None
            median = statistics.median(times)
            rows.append(
                {
                    "source": name,
                    "frames": report.rows,
                    "episodes": report.episodes,
                    "rows_read": report.rows_read,
                    "seconds": times,
                    "median_s": median,
                    "s_per_million": median / report.rows * 1e6,
                    "findings": [f.name for f in report.findings],
                    "checks": report.checks,
                    "write_s": written,
                }
            )
            print(f"{name}: {median:.2f} s (written in {written:.1f} s)", flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    headers = ("source", "frames", "episodes", "median s", "s per 1M frames", "findings")
    table = [
        (
            r["source"],
            f"{r['frames']:,}",
            f"{r['episodes']:,}",
            f"{r['median_s']:.2f}",
            f"{r['s_per_million']:.1f}",
            str(len(r["findings"])),
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(headers)]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    for t in table:
        print("  ".join(v.ljust(w) for v, w in zip(t, widths, strict=True)))
    write_report({"command": command(), "environment": environment(), "results": rows}, RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
