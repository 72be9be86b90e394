"""PNG against JPEG on small game and rendered frames: why ``frames=None`` picks PNG for Atari, OGBench and Minari.

Two kinds of frames, each stored by the build's own encoder (:func:`datasets_hub.build.frames.encode`) and decoded
by its decoder (:func:`datasets_hub.build.frames.decode_into`), on one thread:

- ``atari``: the screen-like 84x84 grey frames of ``benchmarks/images.py`` (static background, two paddles, a 2x2
  ball and a score that move with t, ~2 % of pixels noise);
- ``render``: 64x64 RGB frames shaped like OGBench's visual renders, without noise: a shaded floor, a grid line
  every 16 pixels and three coloured 6x6 cubes that move with t.

Reported per kind and codec: bytes a frame and the ratio to raw, PSNR against the source (mean, min; dB), the
largest error of any pixel, how many frames lose the ball's (or a cube's) colour by more than 16 levels at its
centre, and decode microseconds a frame (median of 3 passes). Run:
``.venv/bin/python benchmarks/small_frame_codecs.py [--frames 1000]``; prints a table, writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def atari_frames(n: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Frames and, per frame, the ball's top-left pixel (``images.render``'s formula for episode 0)."""
    from images import FRAME, render

    t = np.arange(n)
    frames = render(np.zeros(n, np.int64), t, np.full(FRAME, 87, np.uint8), np.random.default_rng(0))
    balls = [(int((2 * s) % 70 + 10), int((3 * s) % 76 + 4)) for s in t]
    return frames, balls


def rendered_frames(n: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """64x64 RGB renders and, per frame, the centre of the first cube."""
    yy, xx = np.mgrid[0:64, 0:64]
    floor = np.stack([60 + yy, 70 + yy // 2, 90 + xx // 4], axis=-1).astype(np.uint8)
    floor[::16, :] = 200
    floor[:, ::16] = 200
    colours = np.array([[220, 40, 40], [40, 200, 60], [50, 80, 230]], np.uint8)
    out = np.broadcast_to(floor, (n, 64, 64, 3)).copy()
    centres = []
    for i in range(n):
        for c in range(3):
            y, x = (7 * i + 19 * c) % 56 + 1, (5 * i + 23 * c) % 56 + 1
            out[i, y : y + 6, x : x + 6] = colours[c]
            if c == 0:
                centres.append((y + 3, x + 3))
    return out, centres


def measure(frames: np.ndarray, marks: list[tuple[int, int]], codec: str, layout: str) -> dict:
    from datasets_hub.build.frames import DEFAULT_QUALITY, FrameCodec, decode_into, encode, psnr

    chosen = FrameCodec(codec, DEFAULT_QUALITY if codec == "jpeg" else None)
    blobs = [encode(f, chosen, layout) for f in frames]
    out = np.empty_like(frames)
    passes = []
    for _ in range(3):
        start = time.perf_counter()
        for i, blob in enumerate(blobs):
            decode_into(blob, codec, layout, out[i])
        passes.append((time.perf_counter() - start) / len(blobs) * 1e6)
    scores = [psnr(a, b) for a, b in zip(frames, out, strict=True)]
    finite = [s for s in scores if s != float("inf")]
    lost = sum(
        int(np.abs(out[i][y, x].astype(int) - frames[i][y, x].astype(int)).max() > 16) for i, (y, x) in enumerate(marks)
    )
    raw = frames[0].nbytes
    size = statistics.mean(len(b) for b in blobs)
    return {
        "codec": codec if codec != "jpeg" else f"jpeg q{DEFAULT_QUALITY}",
        "bytes_per_frame": round(size, 1),
        "ratio_to_raw": round(size / raw, 3),
        "psnr_mean_db": round(statistics.mean(finite), 2) if finite else None,
        "psnr_min_db": round(min(finite), 2) if finite else None,
        "max_pixel_error": int(np.abs(out.astype(int) - frames.astype(int)).max()),
        "frames_with_the_mark_off_by_more_than_16": lost,
        "decode_us_per_frame": round(statistics.median(passes), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "small_frame_codecs.json")
    args = parser.parse_args()
    rows = []
    for kind, make, layout in (("atari 84x84 grey", atari_frames, "hw"), ("render 64x64 RGB", rendered_frames, "hwc")):
        frames, marks = make(args.frames)
        for codec in ("png", "jpeg"):
            rows.append({"frames": kind, "raw_bytes": int(frames[0].nbytes), **measure(frames, marks, codec, layout)})
    head = ("frames", "codec", "bytes", "of raw", "PSNR mean/min", "max err", "mark lost", "decode us")
    print(" | ".join(head))
    for r in rows:
        quality = "exact" if r["psnr_mean_db"] is None else f"{r['psnr_mean_db']}/{r['psnr_min_db']}"
        print(
            f"{r['frames']} | {r['codec']} | {r['bytes_per_frame']:.0f} | {r['ratio_to_raw']:.3f} | {quality} | "
            f"{r['max_pixel_error']} | {r['frames_with_the_mark_off_by_more_than_16']}/{args.frames} | "
            f"{r['decode_us_per_frame']}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"frames": args.frames, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
