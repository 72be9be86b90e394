"""Per-frame codecs against the MP4s they come from: bytes, PSNR and decode time (the bytes bar of compressed frames).

The frames are those of ``benchmarks/video.py`` (DROID's shape: 180x320 RGB at 15 fps, moving camera-like
content), written as LeRobot writes them (``--codec libsvtav1``: AV1, crf 30, g=2; ``libx264``: h264, crf 30,
g=2) and decoded back with PyAV: what a build re-encodes. Each decoded frame is then encoded on its own with every
candidate below and decoded again, on one thread:

- JPEG (simplejpeg, libjpeg-turbo) at several qualities, chroma 4:2:0 (the build's setting) and 4:4:4;
- WebP (Pillow, lossy) at several qualities;
- AVIF (Pillow's libavif: an AV1 intra frame) at several qualities;
- the build's ``frames="h264"`` codec (one intra h264 picture a frame, libx264 through PyAV) at several
  quantisers, through the library's own encode and decode;
- PNG (exact) for reference.

Reported per candidate: bytes a frame, the ratio to the MP4's bytes a frame (its file size over its frames), PSNR
against the decoded video frame (mean and min, dB; the build measures the same), and encode and decode ms a frame.
Run: ``.venv/bin/python benchmarks/frame_codecs.py [--frames 120]``; prints a table, writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

JPEG_QUALITIES = (95, 90, 85, 80, 75, 70)
WEBP_QUALITIES = (95, 90, 80, 70)
AVIF_QUALITIES = (90, 80, 70, 60, 50)
H264_QPS = (24, 26, 28, 30, 32)


def video_frames(codec: str, data: Path, episodes: int, length: int) -> tuple[list[np.ndarray], float]:
    """Every frame of camera 0's video, decoded, and the MP4's bytes a frame."""
    import av
    from video import CAMERAS, write

    root = write(data, episodes, length, codec)
    videos = sorted((root / "videos" / CAMERAS[0]).rglob("*.mp4"))
    frames: list[np.ndarray] = []
    size = 0
    for path in videos:
        size += path.stat().st_size
        with av.open(str(path)) as container:
            frames.extend(f.to_ndarray(format="rgb24") for f in container.decode(video=0))
    return frames, size / len(frames)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


Codec = tuple[Callable[[np.ndarray], bytes], Callable[[bytes], np.ndarray]]


def candidates() -> dict[str, Codec]:
    import simplejpeg
    from PIL import Image, features

    def pil_encode(fmt: str, **options) -> Callable[[np.ndarray], bytes]:
        def encode(frame: np.ndarray) -> bytes:
            out = io.BytesIO()
            Image.fromarray(frame).save(out, format=fmt, **options)
            return out.getvalue()

        return encode

    def pil_decode(data: bytes) -> np.ndarray:
        with Image.open(io.BytesIO(data)) as image:
            return np.asarray(image.convert("RGB"))

    def jpeg(quality: int, chroma: str) -> Callable[[np.ndarray], bytes]:
        return lambda f: simplejpeg.encode_jpeg(f, quality=quality, colorspace="RGB", colorsubsampling=chroma)

    def jpeg_decode(data: bytes) -> np.ndarray:
        return simplejpeg.decode_jpeg(data, colorspace="RGB")

    out: dict[str, Codec] = {f"jpeg q{q} 4:2:0": (jpeg(q, "420"), jpeg_decode) for q in JPEG_QUALITIES}
    out["jpeg q90 4:4:4"] = (jpeg(90, "444"), jpeg_decode)
    # the same quantisation with Huffman tables fitted to each frame (Pillow's optimize=True; simplejpeg has none)
    out.update(
        {
            f"jpeg q{q} 4:2:0 optimized": (pil_encode("JPEG", quality=q, subsampling=2, optimize=True), jpeg_decode)
            for q in (90, 80, 75)
        }
    )
    if features.check("webp"):
        out.update({f"webp q{q}": (pil_encode("WEBP", quality=q, method=4), pil_decode) for q in WEBP_QUALITIES})
    if features.check("avif"):
        out.update({f"avif q{q}": (pil_encode("AVIF", quality=q), pil_decode) for q in AVIF_QUALITIES})
    out.update({f"h264 intra qp{qp} (frames='h264')": h264_intra(qp) for qp in H264_QPS})
    out["png (exact)"] = (pil_encode("PNG", compress_level=1), pil_decode)
    return out


def h264_intra(qp: int) -> Codec:
    """The build's own h264 codec (datasets_hub.build.frames), frame by frame. A build knows each key's frame
    shape; here the decode takes that of the frame just encoded (``measure`` decodes each frame after it)."""
    from datasets_hub.build import frames

    codec = frames.FrameCodec("h264", qp)
    shape: list[tuple[int, ...]] = []

    def encode(frame: np.ndarray) -> bytes:
        shape[:] = [frame.shape]
        return frames.encode(frame, codec, "hwc")

    def decode(data: bytes) -> np.ndarray:
        out = np.empty(shape[0], dtype=np.uint8)
        frames.decode_into(data, "h264", "hwc", out)
        return out

    return encode, decode


def measure(frames: list[np.ndarray], mp4_bytes: float) -> list[dict]:
    rows = []
    for name, (encode, decode) in candidates().items():
        sizes, scores, enc_s, dec_s = [], [], [], []
        for frame in frames:
            t0 = time.perf_counter()
            data = encode(frame)
            t1 = time.perf_counter()
            back = decode(data)
            t2 = time.perf_counter()
            sizes.append(len(data))
            scores.append(psnr(back, frame))
            enc_s.append(t1 - t0)
            dec_s.append(t2 - t1)
        finite = [s for s in scores if np.isfinite(s)]
        per_frame = statistics.fmean(sizes)
        rows.append(
            {
                "codec": name,
                "bytes_per_frame": round(per_frame, 1),
                "vs_mp4": round(per_frame / mp4_bytes, 3),
                "psnr_mean_db": round(statistics.fmean(finite), 2) if finite else None,
                "psnr_min_db": round(min(finite), 2) if finite else None,
                "encode_ms": round(1000 * statistics.median(enc_s), 3),
                "decode_ms": round(1000 * statistics.median(dec_s), 3),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--length", type=int, default=150, help="frames per episode")
    parser.add_argument("--frames", type=int, default=120, help="frames measured, spread over the video")
    parser.add_argument("--codecs", nargs="+", default=["libsvtav1", "libx264"])
    parser.add_argument("--data", type=Path, default=HERE / "results" / "video-data")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "frame_codecs.json")
    args = parser.parse_args()
    runs: dict[str, dict] = {}
    report = {"date": time.strftime("%Y-%m-%d"), "args": {k: str(v) for k, v in vars(args).items()}, "runs": runs}
    for codec in args.codecs:
        frames, mp4_bytes = video_frames(codec, args.data, args.episodes, args.length)
        step = max(1, len(frames) // args.frames)
        rows = measure(frames[::step][: args.frames], mp4_bytes)
        runs[codec] = {"mp4_bytes_per_frame": round(mp4_bytes, 1), "rows": rows}
        print(f"\n{codec}: the MP4 holds {mp4_bytes:,.0f} bytes a frame ({len(frames)} frames)")
        print("| per-frame codec | bytes a frame | vs the MP4 | PSNR mean / min (dB) | encode ms | decode ms |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['codec']} | {r['bytes_per_frame']:,.0f} | {r['vs_mp4']:.2f}x | "
                f"{r['psnr_mean_db']} / {r['psnr_min_db']} | {r['encode_ms']} | {r['decode_ms']} |"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
