"""Random 8-frame windows at DROID's shape: ours (jpeg, h264, raw) against LeRobot 0.4.4 and Lance, on the same files.

The dataset is benchmarks/video.py's (its ``write``: a LeRobot v3.0 dataset of 3 cameras x 180x320 RGB at 15 fps,
moving camera-like content, AV1 or h264 as LeRobot encodes it) and our builds are its ``build`` (``frames="raw"``,
``frames="jpeg"`` and ``frames="h264"``, each at its default quality). Then, in one run on those files, random windows of 8 consecutive
frames of the 3 cameras, batch 64, in samples/s (one sample = one window of each camera = 24 frames) for each ``--workers`` k:

- **ours, jpeg / h264 / raw**: video.py's ``windows_per_second`` (``delta_timestamps`` -> ``WindowSampler`` ->
  ``SampledBatches(...).dataloader(num_workers=k)``; on a build the k workers are sampling threads, and the
  frames decode on the frame threads: JPEG with simplejpeg, h264 intra pictures with PyAV);
- **LeRobot 0.4.4**: ``LeRobotDataset(delta_timestamps=...)`` for the 3 cameras, ``video_backend="torchcodec"``
  (its default where torchcodec imports; the pyav backend goes through torchvision, which LeRobot's venv here only
  has as an import stand-in), through ``DataLoader(batch_size=64, sampler=RandomSampler(replacement=True), num_workers=k)`` (endless,
  uniform over every frame as ours draws), workers
  started with ``spawn`` (a forked worker inherits the parent's open torchcodec decoders). It runs in LeRobot's
  own venv (``--lerobot-python``) as a child process;
- **Lance, jpeg** (pylance; lerobot-lancedb's ``LeRobotLanceDataset`` layout): the same MP4s decoded with PyAV
  and written as a Lance dataset with **one row per frame** (episode_index, frame_index, timestamp,
  observation.state, action, and one binary column of JPEG bytes per camera, ``.`` in names written ``__``, at our
  jpeg build's quality, 4:2:0, as it encodes; lerobot-lancedb's converter defaults to quality 95), in order, so a
  frame's row id is its global index; converted one data file at a time (bounded memory). A batch draws 64
  anchors, reads their 8-frame windows with one ``LanceDataset.take`` of the (sorted, unique) row ids, and decodes
  the JPEGs with simplejpeg into one preallocated array per camera (a frame in two overlapping windows decoded
  once and copied, as ours does) on ``torch.get_num_threads()`` threads (the rule ours follows: all cores in the
  main process, 1 in a DataLoader worker process);
- **Lance, video** (pylance + torchcodec; lerobot-lancedb's ``LeRobotLanceVideoDataset`` layout, its
  bit-exact one): a frames table without images and a videos table holding each source MP4's bytes verbatim in a
  blob-encoded column, read as that class reads it (see ``LanceVideoWindows``): ``take_blobs`` into a cached
  torchcodec ``VideoDecoder`` per (camera, MP4 file), 16 of them per process (its default), and one
  ``get_frames_at`` per file and batch. lerobot-lancedb itself needs LeRobot >= 0.5 and torch < 2.11, which
  cannot share a venv with LeRobot 0.4.4 here: both Lance columns are these layouts read with pylance directly.

For Lance, k workers are k ``DataLoader`` worker processes over an iterable of batches (``spawn``), each opening
the dataset itself; both run in a venv of their own (``--lance-python``) as child processes.

All columns sample the same windows: anchors drawn uniformly over every frame (a global shuffle), positions past
the anchor's episode end repeating its last frame (LeRobot's ``delta_timestamps`` rule, which ours follows). The
first batch of each configuration (worker start-up, first touch) is not timed. Build/convert time, bytes and peak
RSS are reported for ours and Lance; LeRobot reads the MP4s as they are.

At 200k frames (``--episodes 690 --length 290``) a raw build is 104 GB: ``--raw-episodes N`` builds ours raw from
the first N episodes only (written as a dataset of their own: the same frames), and ``--cache DIR`` keeps the
builds and conversions (with their build time, bytes and peak RSS in ``DIR/stores.json``) for later sampling
runs (``--no-sampling`` builds only).

Venvs: LeRobot's is the Makefile's ``.venv-upstream-lerobot``; Lance's is made once, outside the project::

    python3.11 -m venv /tmp/lance-venv
    /tmp/lance-venv/bin/pip install --constraint constraints.txt torch==2.13.0 pylance simplejpeg av numpy torchcodec==0.13.0

Run: ``.venv/bin/python benchmarks/video_baselines.py [--episodes 12 --length 150 --seconds 5 --workers 0 2 4
--lerobot-python .venv-upstream-lerobot/bin/python --lance-python /tmp/lance-venv/bin/python]``. A column
whose venv is missing or whose run fails is left empty, with the reason in the report.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
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
def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def lance_convert_child(root: str, out: str, quality: int) -> None:
    """Decode the MP4s (PyAV), JPEG-encode each frame, write one Lance row per frame; print time, bytes, peak RSS.

    One data file (and its video file per camera) at a time is decoded and handed to ``lance.write_dataset`` as a
    record batch, so memory is bounded by one file's frames whatever the dataset size."""
    import glob

    import av
    import lance
    import pyarrow as pa
    import pyarrow.parquet as pq
    import simplejpeg

    started = time.time()
    data_files = sorted(glob.glob(f"{root}/data/chunk-*/file-*.parquet"))
    rows = 0

    def batches() -> Any:
        nonlocal rows
        for data_file in data_files:
            data = pq.read_table(data_file)
            relative = Path(data_file).relative_to(root).with_suffix(".mp4").parts[1:]  # chunk-*/file-*.mp4
            columns: dict[str, list[bytes]] = {}
            for cam in CAMERAS:
                blobs: list[bytes] = []
                with av.open(str(Path(root, "videos", cam, *relative))) as container:
                    stream = container.streams.video[0]
                    stream.thread_type = "AUTO"
                    for frame in container.decode(stream):
                        image = frame.to_ndarray(format="rgb24")
                        blobs.append(
                            simplejpeg.encode_jpeg(image, quality=quality, colorspace="RGB", colorsubsampling="420")
                        )
                if len(blobs) != data.num_rows:  # each file holds its episodes' frames in row order, one per row
                    raise RuntimeError(f"{cam} {relative}: {len(blobs)} decoded frames for {data.num_rows} rows")
                columns[cam] = blobs
            rows += data.num_rows
            yield pa.record_batch(
                {
                    "episode_index": data["episode_index"].combine_chunks(),
                    "frame_index": data["frame_index"].combine_chunks(),
                    "timestamp": data["timestamp"].combine_chunks(),
                    lance_name("observation.state"): data["observation.state"].combine_chunks(),
                    "action": data["action"].combine_chunks(),
                    **{lance_name(cam): pa.array(blobs, pa.binary()) for cam, blobs in columns.items()},
                }
            )

    first = next(batches_iter := batches())
    reader = pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], batches_iter))
    if Path(out).exists():
        shutil.rmtree(out)
    lance.write_dataset(reader, out)
    seconds = time.time() - started
    stored = sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file())
    print(json.dumps({"seconds": seconds, "bytes": stored, "rows": rows, "peak_rss": _peak_rss(),
                      "pylance": lance.__version__}))  # fmt: skip


# -- Lance, the video layout of lerobot-lancedb's LeRobotLanceVideoDataset -----------------------------
VIDEOS_TABLE, FRAMES_TABLE = "droid_shaped_videos.lance", "droid_shaped.lance"
DECODER_CACHE = 16  # LeRobotLanceVideoDataset's default decoder_cache_size


def lance_video_convert_child(root: str, out: str) -> None:
    """lerobot-lancedb's video layout (``convert_to_lance_video``), written with pylance: a frames table (one row
    per frame, the tabular columns, no images) and a videos table (one row per source MP4: ``video_key``,
    ``chunk_index``, ``file_index`` and the file's bytes verbatim in a ``video_bytes`` column with Lance's blob
    encoding), beside a copy of ``meta/``. Nothing is decoded; memory holds one MP4 at a time."""
    import glob

    import lance
    import pyarrow as pa
    import pyarrow.parquet as pq

    started = time.time()
    if Path(out).exists():
        shutil.rmtree(out)
    Path(out).mkdir(parents=True)
    shutil.copytree(Path(root, "meta"), Path(out, "meta"))
    data = pq.read_table(sorted(glob.glob(f"{root}/data/chunk-*/file-*.parquet")))
    keep = ["episode_index", "frame_index", "index", "timestamp", "task_index", "observation.state", "action"]
    lance.write_dataset(data.select(keep).rename_columns([lance_name(k) for k in keep]), f"{out}/{FRAMES_TABLE}")
    schema = pa.schema(
        [
            pa.field("video_key", pa.string()),
            pa.field("chunk_index", pa.int32()),
            pa.field("file_index", pa.int32()),
            pa.field("video_bytes", pa.large_binary(), metadata={"lance-encoding:blob": "true"}),
        ]
    )

    def batches() -> Any:
        for cam in CAMERAS:
            for path in sorted(Path(root, "videos", cam).glob("chunk-*/file-*.mp4")):
                chunk, file = int(path.parent.name.removeprefix("chunk-")), int(path.stem.removeprefix("file-"))
                yield pa.record_batch([[cam], [chunk], [file], [path.read_bytes()]], schema=schema)

    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), f"{out}/{VIDEOS_TABLE}")
    seconds = time.time() - started
    stored = sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file())
    print(json.dumps({"seconds": seconds, "bytes": stored, "rows": data.num_rows, "peak_rss": _peak_rss(),
                      "pylance": lance.__version__}))  # fmt: skip


class LanceVideoWindows(torch.utils.data.IterableDataset):
    """An endless iterable of window batches from the video layout at ``path``, read as LeRobotLanceVideoDataset
    reads it: the batch's rows from the frames table in one ``take``; per (camera, MP4 file) the file's bytes
    through ``take_blobs`` into a torchcodec ``VideoDecoder(seek_mode="approximate")`` kept in a per-process cache
    of ``DECODER_CACHE`` decoders (first in, first out), and one ``get_frames_at`` call for all of the batch's
    frames of that file, at frame ``round((timestamp + the episode's from_timestamp) * fps)``. Frames come back
    as uint8 (``return_uint8=True``; its default converts to float32)."""

    def __init__(self, path: str, seed: int) -> None:
        self.path, self.seed = path, seed

    def __iter__(self) -> Any:
        import glob

        import lance
        import pyarrow.parquet as pq
        from torchcodec.decoders import VideoDecoder

        info = torch.utils.data.get_worker_info()
        rng = np.random.default_rng([self.seed, info.id if info else 0])
        frames_table = lance.dataset(f"{self.path}/{FRAMES_TABLE}")
        videos = lance.dataset(f"{self.path}/{VIDEOS_TABLE}")
        blob_row = {
            (r["video_key"], r["chunk_index"], r["file_index"]): i
            for i, r in enumerate(videos.to_table(columns=["video_key", "chunk_index", "file_index"]).to_pylist())
        }
        episodes = pq.read_table(sorted(glob.glob(f"{self.path}/meta/episodes/chunk-*/file-*.parquet"))).to_pydict()
        order = np.argsort(episodes["episode_index"])
        first_row = np.asarray(episodes["dataset_from_index"])[order]
        last_row = np.asarray(episodes["dataset_to_index"])[order] - 1
        where = {
            cam: (
                np.asarray(episodes[f"videos/{cam}/chunk_index"])[order],
                np.asarray(episodes[f"videos/{cam}/file_index"])[order],
                np.asarray(episodes[f"videos/{cam}/from_timestamp"])[order],
            )
            for cam in CAMERAS
        }
        total = int(last_row[-1]) + 1
        decoders: dict[tuple[str, int, int], Any] = {}
        offsets = np.arange(WINDOW)
        while True:
            anchors = rng.integers(0, total, BATCH)
            episode = np.searchsorted(first_row, anchors, side="right") - 1
            ids = np.minimum(anchors[:, None] + offsets, last_row[episode][:, None])
            unique, inverse = np.unique(ids, return_inverse=True)
            table = frames_table.take(unique, columns=["timestamp", lance_name("observation.state"), "action"])
            timestamps = table["timestamp"].to_numpy()[inverse.reshape(ids.shape)]
            batch: dict[str, Any] = {}
            for cam in CAMERAS:
                chunk, file, start = (a[episode] for a in where[cam])
                index = np.rint((timestamps + start[:, None]) * FPS).astype(np.int64)
                out = torch.empty((BATCH, WINDOW, 3, HEIGHT, WIDTH), dtype=torch.uint8)
                for file_key in sorted({(cam, int(c), int(f)) for c, f in zip(chunk, file, strict=True)}):
                    if file_key not in decoders:
                        blob = videos.take_blobs(blob_column="video_bytes", indices=[blob_row[file_key]])[0]
                        decoders[file_key] = VideoDecoder(blob.readall(), seek_mode="approximate")
                        blob.close()
                        while len(decoders) > DECODER_CACHE:
                            decoders.pop(next(iter(decoders)))
                    rows = np.flatnonzero((chunk == file_key[1]) & (file == file_key[2]))
                    got = decoders[file_key].get_frames_at(indices=index[rows].ravel().tolist()).data
                    out[torch.from_numpy(rows)] = got.reshape(len(rows), WINDOW, 3, HEIGHT, WIDTH)
                batch[cam] = out
            anchor_rows = inverse.reshape(ids.shape)[:, 0]
            for key in ("observation.state", "action"):
                values = np.stack(table[lance_name(key)].to_numpy(zero_copy_only=False))
                batch[key] = torch.from_numpy(values[anchor_rows])
            yield batch


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


def lance_sample_child(path: str, workers: int, seconds: float, layout: str = "jpeg") -> None:
    windows = LanceVideoWindows(path, seed=0) if layout == "video" else LanceWindows(path, seed=0)
    loader = torch.utils.data.DataLoader(
        windows,
        batch_size=None,
        num_workers=workers,
        multiprocessing_context="spawn" if workers else None,
    )

    def check(batch: dict) -> None:
        shape = tuple(batch[CAMERAS[2]].shape)
        expected = (BATCH, WINDOW, 3, HEIGHT, WIDTH) if layout == "video" else (BATCH, WINDOW, HEIGHT, WIDTH, 3)
        if shape != expected:
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


COLUMNS = ("ours jpeg", "ours h264", "ours raw", "lerobot", "lance jpeg", "lance video")
#: our compressed columns, each compared with every other library's
OURS_COMPRESSED = ("ours jpeg", "ours h264")


def _stores(args: argparse.Namespace, root: Path, raw_root: Path | None, cache: Path, report: dict) -> dict:
    """Build or convert each store a sampled column needs, or take it from ``cache/stores.json`` (a kept
    ``--cache`` of an earlier run: its build time, bytes and peak RSS are that run's, marked with its date)."""
    from datasets_hub.build.frames import DEFAULT_QUALITY as quality  # our jpeg build's, which Lance's JPEGs match

    record = cache / "stores.json"
    stores: dict[str, dict] = json.loads(record.read_text()) if record.exists() else {}

    def keep(name: str, store: dict, source: Path) -> None:
        store.update(
            built=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            load_average=os.getloadavg(),
            source=str(source),
            mp4_bytes=sum(p.stat().st_size for p in source.rglob("*.mp4")),
        )
        stores[name] = store
        on_disk = json.loads(record.read_text()) if record.exists() else {}  # another run may share the cache
        record.write_text(json.dumps({**on_disk, name: store}, indent=1))

    wanted = set(args.columns)
    for name, frames, source in (
        ("ours jpeg", "jpeg", root),
        ("ours h264", "h264", root),
        ("ours raw", "raw", raw_root),
    ):
        if name not in wanted or source is None or name in stores:
            continue
        built = video.build(source, frames, cache / frames, args.build_workers)
        keep(name, built, source)
    converters = {"lance jpeg": ("--_lance_convert", str(quality)), "lance video": ("--_lance_video_convert",)}
    for name, (mode, *extra) in converters.items():
        if name not in wanted or name in stores:
            continue
        if not args.lance_python.exists():
            report["not_run"][name] = f"no Lance venv at {args.lance_python} (see the docstring)"
            continue
        target = cache / name.replace(" ", "-")
        try:
            converted = child(args.lance_python, mode, str(root), str(target), *extra, timeout=4 * 3600)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            report["not_run"][name] = f"the conversion failed: {exc}"
            continue
        keep(name, {**converted, "path": str(target)}, root)
    report["jpeg_quality"] = quality
    return stores


def _describe(stores: dict) -> dict:
    """The report's view of each store: seconds, bytes and their ratio to the MP4s it came from, peak RSS, and
    for our builds frames/s per core (camera frames over the build's seconds and its decoding processes)."""
    out = {}
    for name, store in stores.items():
        source = Path(store["source"])
        frames = json.loads((source / "meta" / "info.json").read_text())["total_frames"]
        entry = {
            "frames": frames,
            "seconds": round(store["seconds"], 1),
            "bytes": store["bytes"],
            "mp4_bytes": store["mp4_bytes"],
            "bytes_vs_mp4": round(store["bytes"] / store["mp4_bytes"], 2),
            "peak_rss": max(store.get("peak_rss", 0), store.get("children_peak_rss", 0)),
            "built": store["built"],
            "load_average_after": [round(x, 1) for x in store["load_average"]],
        }
        if name.startswith("ours"):
            entry["build_process_peak_rss"] = store["peak_rss"]
            entry["decoder_processes_peak_rss"] = store["children_peak_rss"]
            entry["frames_per_second_per_core"] = round(frames * len(CAMERAS) / store["seconds"] / 2, 1)
            entry["psnr_db"] = {k.rsplit(".", 1)[-1]: v.get("psnr_db") for k, v in store.get("frames", {}).items()}
        out[name] = entry
    return out


def main() -> None:
    report_module = _load("_report", HERE / "_report.py")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--length", type=int, default=150, help="frames per episode")
    parser.add_argument("--codec", default="libsvtav1", choices=["libsvtav1", "libx264"])
    parser.add_argument("--workers", nargs="+", type=int, default=[0, 2, 4])
    parser.add_argument("--columns", nargs="+", default=list(COLUMNS), choices=COLUMNS)
    parser.add_argument("--seconds", type=float, default=5.0, help="timed sampling per configuration")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per configuration (median)")
    parser.add_argument("--build-workers", type=int, default=2, help="video decoding processes of our builds")
    parser.add_argument(
        "--raw-episodes",
        type=int,
        help="build ours raw from the first N episodes only (a dataset of its own, the same frames): a raw build "
        "of 200k frames x 3 cameras is 104 GB",
    )
    parser.add_argument("--cache", type=Path, help="keep the builds and conversions here and reuse them")
    parser.add_argument("--no-sampling", action="store_true", help="build and convert only")
    parser.add_argument("--lerobot-python", type=Path, default=ROOT / ".venv-upstream-lerobot" / "bin" / "python")
    parser.add_argument("--lance-python", type=Path, default=Path("/tmp/lance-venv/bin/python"))
    parser.add_argument("--data", type=Path, default=HERE / "results" / "video-data")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "video_baselines.json")
    args = parser.parse_args()

    started = time.time()
    root = video.write(args.data, args.episodes, args.length, args.codec)
    raw_root = root
    if args.raw_episodes is not None and args.raw_episodes != args.episodes:
        raw_root = video.write(args.data, args.raw_episodes, args.length, args.codec) if args.raw_episodes else None
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
    if args.raw_episodes is not None and args.raw_episodes != args.episodes:
        report["dataset"]["raw_episodes"] = args.raw_episodes
    timeout = 300 + 10 * args.seconds
    cache = args.cache or Path(tempfile.mkdtemp(prefix="datasets_hub-bench-baselines-", dir=args.data))
    cache.mkdir(parents=True, exist_ok=True)
    try:
        stores = _stores(args, root, raw_root, cache, report)
        report["stores"] = _describe(stores)
        if "lerobot" in args.columns and not args.lerobot_python.exists():
            report["not_run"]["lerobot"] = f"no LeRobot venv at {args.lerobot_python} (make test-upstream-lerobot)"
        runs: dict[tuple[int, str], list[float]] = {}
        for _ in range(
            0 if args.no_sampling else args.repeats
        ):  # round robin: load that comes and goes touches every column alike
            for workers in args.workers:
                for name in args.columns:
                    if name in report["not_run"]:
                        continue
                    try:
                        if name.startswith("ours"):
                            rate = video.windows_per_second(stores[name]["path"], workers, args.seconds)
                        elif name == "lerobot":
                            got = child(args.lerobot_python, "--_lerobot", str(root), str(workers), str(args.seconds),
                                        timeout=timeout)  # fmt: skip
                            rate = got.pop("samples_per_s")
                            report["lerobot"] = got
                        else:
                            layout = name.removeprefix("lance ")
                            rate = child(args.lance_python, "--_lance_sample", stores[name]["path"], str(workers),
                                         str(args.seconds), layout, timeout=timeout)["samples_per_s"]  # fmt: skip
                    except (RuntimeError, subprocess.TimeoutExpired) as exc:
                        report["not_run"][f"{name}/{workers}"] = str(exc)[-2000:]
                        continue
                    runs.setdefault((workers, name), []).append(rate)
                    print(
                        f"workers={workers} {name}: {rate:.1f} samples/s  (load {os.getloadavg()[0]:.1f})", flush=True
                    )
        report["runs"] = {f"{name}/{workers}": [round(r, 1) for r in rs] for (workers, name), rs in runs.items()}
        report["load_average_end"] = os.getloadavg()
        for workers in args.workers if not args.no_sampling else ():
            rates = report["samples_per_s"].setdefault(str(workers), {})
            for name in args.columns:
                got_runs = runs.get((workers, name))
                rates[name] = round(statistics.median(got_runs), 1) if got_runs else None
            for ours in OURS_COMPRESSED:
                for base in ("lerobot", "lance jpeg", "lance video"):
                    if ours in args.columns and base in args.columns:
                        rates[f"{ours} / {base}"] = _ratio(rates.get(ours), rates.get(base))
    finally:
        if args.cache is None:
            shutil.rmtree(cache, ignore_errors=True)
    report["seconds"] = round(time.time() - started, 1)

    print(
        f"\nstores ({mp4 / 2**20:.1f} MiB of MP4 for {frames:,} frames x {len(CAMERAS)} cameras; LeRobot reads them as they are)"
    )
    print(
        f"{'store':>11} | {'frames':>8} | {'seconds':>8} | {'MiB':>9} | {'x MP4':>6} | {'peak RSS MiB':>12} | frames/s/core"
    )
    for name, store in report["stores"].items():
        print(
            f"{name:>11} | {store['frames']:>8,} | {store['seconds']:>8.1f} | {store['bytes'] / 2**20:>9.1f} | "
            f"{store['bytes_vs_mp4']:>6} | {store['peak_rss'] / 2**20:>12.0f} | {store.get('frames_per_second_per_core', '-')}"
        )
    if report["samples_per_s"]:
        print(f"\nrandom {WINDOW}-frame windows of {len(CAMERAS)} cameras, batch {BATCH}: samples/s")
        columns = [*args.columns, *(k for k in next(iter(report["samples_per_s"].values())) if " / " in k)]
        print(f"{'workers':>8} | " + " | ".join(f"{c:>22}" for c in columns))
        for workers, rates in report["samples_per_s"].items():
            cells = ["-" if rates.get(c) is None else f"{rates[c]:,}" for c in columns]
            print(f"{workers:>8} | " + " | ".join(f"{c:>22}" for c in cells))
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
    elif mode == "--_lance_video_convert":
        lance_video_convert_child(sys.argv[2], sys.argv[3])
    elif mode == "--_lance_sample":
        lance_sample_child(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    else:
        main()
