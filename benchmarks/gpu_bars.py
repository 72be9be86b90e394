"""The GPU bars of issues 28 and 29 in one run, sized for one call on a lent GPU (a few minutes).

    python3 benchmarks/gpu_bars.py                     # every part; on a machine without CUDA, the host rows only
    python3 benchmarks/gpu_bars.py --parts decode      # one part
    python3 benchmarks/gpu_bars.py --device cpu        # the same code paths on the host (what CI machines can run)

Issue 32's device figures (mt30 resident in device memory, 256x4 slices, CUDA graphs) come from
``benchmarks/device.py`` with mt30's shape: ``--rows 345690000 --episode-len 500 --obs 24 --act 6 --cases 256x4
64x4``. ``docs/results/device.md`` lists the wheels a bare GPU machine needs for both scripts.

Parts:

- ``decode`` (issue 28): a build of 180x320 camera frames stored as JPEG at the default quality (3 cameras,
  moving content). Batches of 1,536 random frames (64 windows of 8 frames x 3 cameras) are decoded
  straight into device memory (``frame_device.decode_on_device``: one batched nvJPEG call through torchvision)
  and, for comparison, on the host's frame threads: frames/s, median of ``--repeats`` batches, the device
  synchronised before each clock read. Every frame of one batch is checked against the host's decode of
  the same bytes: PSNR between the two decoders, and each frame closer to its own host frame than to the
  frame after it (identity). Then one ``sample()`` of 64 windows of 8 frames from a buffer with
  ``decode_device``, under ``torch.cuda.set_sync_debug_mode("warn")``: every host synchronisation is
  listed by the source line that made it (the bar: none beyond the decode's own).
- ``mixture`` (issue 29): three builds with different state/action sizes (11/3, 17/6, 39/8), each copied
  to the device (``to_device``) and mixed (``Mixture``). Checks on one batch: every tensor leaf on the
  device, the entries past a member's width zero and flagged in the pad masks, and each row equal to the
  stored row its ``episode`` and ``step`` name. Then items/s of the mixture against each member alone
  (batches of 256 and 4,096), and the host synchronisations of one mixture ``sample()``.

Report: ``benchmarks/results/gpu_bars.json`` (and a table on stdout).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _report import command, environment, write_report

from datasets_hub.buffers.device import to_device
from datasets_hub.buffers.mixture import Mixture
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers import RandomSampler
from datasets_hub.buffers.samplers.slice import SliceSampler
from datasets_hub.buffers.writers import ImmutableDatasetWriter
from datasets_hub.build import frame_device
from datasets_hub.build import frames as frame_codecs
from datasets_hub.build.reader import open_build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext

HEIGHT, WIDTH, CAMERAS = 180, 320, ("exterior_1", "exterior_2", "wrist")
WINDOWS, WINDOW = 64, 8  # a batch: 64 windows of 8 frames of each camera
MIX_SHAPES = [("mix-a", 11, 3), ("mix-b", 17, 6), ("mix-c", 39, 8)]


# -- data ------------------------------------------------------------------------------------------------
def camera_frames(episode: int, length: int, camera: int) -> np.ndarray:
    """``[length, H, W, 3]`` uint8 frames: drifting waves and a moving square (JPEG-like content; every frame
    differs from its neighbours, so the identity check can tell them apart)."""
    y = np.arange(HEIGHT, dtype=np.float32)[:, None]
    x = np.arange(WIDTH, dtype=np.float32)[None, :]
    out = np.empty((length, HEIGHT, WIDTH, 3), dtype=np.uint8)
    for t in range(length):
        phase = 0.15 * t + 1.7 * episode + 2.3 * camera
        wave = 96 + 80 * np.sin(x / 17.0 + phase) * np.cos(y / 23.0 - 0.6 * phase)
        frame = np.stack([wave, np.roll(wave, 7 * camera + 3, axis=1), 255 - wave], axis=-1)
        cy, cx = int(60 + 50 * math.sin(phase)), int(140 + 120 * math.cos(0.7 * phase))
        frame[max(cy - 12, 0) : cy + 12, max(cx - 12, 0) : cx + 12] = (240, 30, 200)
        out[t] = frame.clip(0, 255)
    return out


class CameraLoader(Loader):
    """Episodes of three cameras plus a state, as chunks of one episode each."""

    name = "gpu-bars-frames"
    format_version = 1

    def resources(self, spec: DatasetSpec) -> list:
        return []

    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDict]:
        length = spec.params["length"]
        for e in range(spec.params["episodes"]):
            state = torch.arange(length + 1, dtype=torch.float32)[:, None].expand(length + 1, 4) + 1000 * e
            truncated = torch.zeros(length, 1, dtype=torch.bool)
            truncated[-1] = True
            td = TensorDict(
                {
                    "observation": state[:-1].clone(),
                    "action": torch.zeros(length, 2),
                    "episode": torch.full((length,), e, dtype=torch.int64),
                    "next": {
                        "observation": state[1:].clone(),
                        "reward": torch.zeros(length, 1),
                        "terminated": torch.zeros(length, 1, dtype=torch.bool),
                        "truncated": truncated,
                    },
                },
                batch_size=[length],
            )
            for c, camera in enumerate(CAMERAS):
                pixels = torch.from_numpy(camera_frames(e, length + 1, c))
                td[camera] = pixels[:-1]
                td["next", camera] = pixels[1:]
            yield td


def frame_build(episodes: int, length: int) -> Path:
    from datasets_hub.build.pipeline import build

    spec = DatasetSpec(
        id="bench/gpu-bars-frames", loader="gpu-bars-frames", params={"episodes": episodes, "length": length}
    )
    codec = frame_codecs.FrameCodec("jpeg", frame_codecs.DEFAULT_QUALITY)
    return build(spec, CameraLoader(), {}, [], frames=codec)


# -- timing and host syncs ---------------------------------------------------------------------------------
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device, repeats: int) -> float:
    """Median seconds of one call, the device synchronised before each clock read."""
    fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@contextmanager
def host_syncs(device: torch.device) -> Iterator[list[str]]:
    """The host synchronisations CUDA reports in the body, each as ``file:line (function): message`` of the
    innermost Python frame outside torch that led to it. Empty off CUDA (nothing to report)."""
    sites: list[str] = []
    if device.type != "cuda":
        yield sites
        return

    def record(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        frames = [
            f for f in traceback.extract_stack()[:-1] if "/torch/" not in f.filename and "warnings" not in f.filename
        ]
        where = frames[-1] if frames else None
        at = f"{Path(where.filename).name}:{where.lineno} ({where.name})" if where else f"{filename}:{lineno}"
        sites.append(f"{at}: {str(message).splitlines()[0]}")

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        previous = warnings.showwarning
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield sites
        finally:
            torch.cuda.set_sync_debug_mode(0)
            warnings.showwarning = previous


# -- issue 28: decode ------------------------------------------------------------------------------------
def decode_part(device: torch.device, episodes: int, length: int, repeats: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    path = frame_build(episodes, length)
    build_s = time.perf_counter() - t0
    build = open_build(path)
    columns = []
    for camera in CAMERAS:
        column = build.obs[(camera,)]
        if not isinstance(column, frame_codecs.FrameColumn):
            raise SystemExit(f"{camera}: the build holds raw frames, not JPEG ones ({path})")
        columns.append(column)
    frames = len(columns[0])
    rng = np.random.default_rng(0)
    per_camera = WINDOWS * WINDOW

    def rows() -> np.ndarray:
        return rng.integers(0, frames, per_camera)

    def host_batch() -> list[np.ndarray]:
        return [column.take(rows()) for column in columns]

    out: dict[str, Any] = {
        "frames_per_camera": frames,
        "frame_shape": [HEIGHT, WIDTH, 3],
        "codec": f"jpeg q{frame_codecs.DEFAULT_QUALITY}",
        "build_s": round(build_s, 2),
        "frames_per_batch": per_camera * len(CAMERAS),
    }
    host_s = timed(host_batch, torch.device("cpu"), repeats)
    out["host_frames_per_s"] = round(out["frames_per_batch"] / host_s)
    out["host_threads"] = frame_codecs.sampling_threads()
    if not frame_device.device_decoder_available(device):
        out["device"] = f"not measured: no nvJPEG decoder on {device} (CUDA with torchvision needed)"
        return out

    def device_batch() -> list[torch.Tensor]:
        return [frame_device.decode_on_device(column, rows(), device) for column in columns]

    device_s = timed(device_batch, device, repeats)
    out["device_frames_per_s"] = round(out["frames_per_batch"] / device_s)
    # the two decoders on the same bytes: close, and every frame its own
    check_rows = np.sort(rng.choice(frames - 1, 256, replace=False))
    on_device = frame_device.decode_on_device(columns[0], check_rows, device).cpu().numpy().astype(np.float64)
    on_host = columns[0].take(check_rows).astype(np.float64)
    after = columns[0].take(check_rows + 1).astype(np.float64)
    mse = ((on_device - on_host) ** 2).reshape(len(check_rows), -1).mean(axis=1)
    mse_next = ((on_device - after) ** 2).reshape(len(check_rows), -1).mean(axis=1)
    out["device_vs_host_psnr_min_db"] = round(float(10 * np.log10(255**2 / max(mse.max(), 1e-12))), 2)
    out["device_vs_host_max_abs"] = int(np.abs(on_device - on_host).max())
    out["every_frame_its_own"] = bool((mse < mse_next).all())
    # one sampled batch with its frames decoded on the device: where does the host wait?
    storage = DatasetStorage(path, decode_device=device)
    rb = TensorDictReplayBuffer(
        storage=storage,
        sampler=SliceSampler(slice_len=WINDOW),
        writer=ImmutableDatasetWriter(),
        batch_size=WINDOWS * WINDOW,
        generator=torch.Generator().manual_seed(0),
    )
    rb.sample()
    _sync(device)
    with host_syncs(device) as sites:
        batch = rb.sample()
    out["sample_frames_on"] = str(batch.get(CAMERAS[0]).device)
    out["sample_host_syncs"] = sites
    out["sample_s"] = round(timed(rb.sample, device, repeats), 4)
    return out


# -- issue 29: mixture on the device ---------------------------------------------------------------------
def mixture_part(device: torch.device, rows: int, repeats: int) -> dict[str, Any]:
    from mixtures import make_build

    paths = [make_build(f"gpu-{name}", rows, obs, act) for name, obs, act in MIX_SHAPES]
    hosts = [
        TensorDictReplayBuffer(
            storage=DatasetStorage(p),
            sampler=RandomSampler(),
            writer=ImmutableDatasetWriter(),
            generator=torch.Generator().manual_seed(i),
        )
        for i, p in enumerate(paths)
    ]
    members = [to_device(rb, device) for rb in hosts]
    mixture = Mixture(members, names=[name for name, _, _ in MIX_SHAPES])
    out: dict[str, Any] = {"rows_per_member": rows, "device": str(device)}
    batch = mixture.sample(4096)
    leaves = [v for v in batch.values(include_nested=True, leaves_only=True) if isinstance(v, torch.Tensor)]
    out["every_leaf_on_device"] = all(v.device.type == device.type for v in leaves)
    index = batch.get(("dataset", "index")).cpu()
    exact = True
    for i, ((_, obs, act), host) in enumerate(zip(MIX_SHAPES, hosts, strict=True)):
        mine = batch[index == i].cpu()
        stored = host.storage[mine["episode"] * 1000 + mine["step"]]  # the members' episodes: 1000 steps
        for key, width in (("observation", obs), ("action", act)):
            value, pad = mine[key], mine[key + "_dim_is_pad"]
            exact &= torch.equal(value[:, :width], stored[key])
            exact &= bool((value[:, width:] == 0).all()) and bool(pad[:, width:].all()) and not pad[:, :width].any()
    out["rows_exact_pads_zero_masks_right"] = bool(exact)
    with host_syncs(device) as sites:
        mixture.sample(4096)
    out["sample_host_syncs"] = sites
    rates = []
    for size in (256, 4096):
        alone = [size / timed(lambda m=m, n=size: m.sample(n), device, repeats) for m in members]
        mixed = size / timed(lambda n=size: mixture.sample(n), device, repeats)
        rates.append(
            {
                "batch": size,
                "members_items_per_s": [round(r) for r in alone],
                "mixture_items_per_s": round(mixed),
                "ratio_to_slowest": round(mixed / min(alone), 3),
            }
        )
    out["rates"] = rates
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", default=["decode", "mixture"], choices=["decode", "mixture"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--episodes", type=int, default=20, help="episodes of the frame build")
    parser.add_argument("--length", type=int, default=150, help="frames per episode (each camera)")
    parser.add_argument("--mix-rows", type=int, default=1_000_000, help="rows of each mixture member")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per figure (median)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1, as benchmarks/device.py)")
    parser.add_argument("--out", default=str(HERE / "results" / "gpu_bars.json"))
    args = parser.parse_args()
    # torch's intra-op threads wait for each other on a busy host; the frame threads are the library's own
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    env = environment(gpu=torch.cuda.get_device_name(0) if device.type == "cuda" else None)
    report: dict[str, Any] = {"command": command(), "environment": env}
    with tempfile.TemporaryDirectory() as cache:
        import os

        os.environ.setdefault("DATASETS_HUB_CACHE", cache)
        if "decode" in args.parts:
            report["decode"] = decode_part(device, args.episodes, args.length, args.repeats)
            d = report["decode"]
            print(f"decode: {d['frames_per_batch']:,} frames a batch; host {d['host_frames_per_s']:,} frames/s")
            for key in (
                "device_frames_per_s",
                "device_vs_host_psnr_min_db",
                "every_frame_its_own",
                "sample_host_syncs",
            ):
                if key in d:
                    print(f"  {key}: {d[key]}")
            if "device" in d:
                print(f"  {d['device']}")
        if "mixture" in args.parts:
            report["mixture"] = mixture_part(device, args.mix_rows, args.repeats)
            m = report["mixture"]
            print(f"mixture on {m['device']}: leaves on device {m['every_leaf_on_device']}, rows exact "
                  f"{m['rows_exact_pads_zero_masks_right']}, host syncs {m['sample_host_syncs']}")  # fmt: skip
            for r in m["rates"]:
                print(f"  batch {r['batch']:>5}: members {r['members_items_per_s']} mixture "
                      f"{r['mixture_items_per_s']:,} ({r['ratio_to_slowest']}x the slowest)")  # fmt: skip
    write_report(report, args.out)


if __name__ == "__main__":
    main()
