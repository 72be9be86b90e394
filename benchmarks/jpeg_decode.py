"""JPEG decoding for the ``openx`` loader: the TFDS-identical decoder vs Pillow (vs TensorFlow itself).

Run::

    .venv/bin/python benchmarks/jpeg_decode.py            # ours (tfds mode) and Pillow
    .venv-upstream/bin/python benchmarks/jpeg_decode.py   # the same, plus tf.io.decode_image

What it does: encodes textured RGB images (noise over gradients, so the IDCT matters) as JPEG at
quality 95 with 4:2:0 chroma subsampling (Pillow's default; TensorFlow's encoder makes the same
layout) in the sizes Open X-Embodiment datasets use, then decodes every image with

- ``tfds``: :func:`datasets_hub.loaders.formats.image_decode.decode_uint8` with ``jpeg_decoder="tfds"``
  (libjpeg-turbo via simplejpeg, fast IDCT: the loader's default);
- ``pillow``: the same function with ``jpeg_decoder="pillow"`` (accurate IDCT, the loader's
  behaviour before ``jpeg_decoder`` existed);
- ``tensorflow``: ``tf.io.decode_image(blob, channels=3)`` (only where TensorFlow imports),

one thread, ``--repeats`` passes over ``--images`` images per size, decoders interleaved; the table
gives the median pass as microseconds per image and images/s, and, where TensorFlow is present,
whether each decoder's pixels equal TensorFlow's (max absolute difference). Writes
``benchmarks/results/jpeg_decode.json``.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from _report import command, environment, write_report

SIZES = [(128, 128), (224, 224), (256, 320), (480, 640)]


def make_jpegs(h: int, w: int, n: int, quality: int) -> list[bytes]:
    from PIL import Image

    rng = np.random.default_rng(h * w)
    y, x = np.mgrid[0:h, 0:w]
    out = []
    for i in range(n):
        base = np.stack([(x * 3 + y + 7 * i) % 256, (y * 2 + i) % 256, (x * y // 64 + 3 * i) % 256], -1)
        pixels = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=quality)
        out.append(buffer.getvalue())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=50, help="images per size")
    parser.add_argument("--repeats", type=int, default=7, help="timed passes (median reported)")
    parser.add_argument("--quality", type=int, default=95)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "jpeg_decode.json"))
    args = parser.parse_args()

    from datasets_hub.loaders.formats.image_decode import decode_uint8

    decoders = {
        "tfds": lambda blob: decode_uint8(blob, 3, "tfds"),
        "pillow": lambda blob: decode_uint8(blob, 3, "pillow"),
    }
    versions = {}
    try:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        decoders["tensorflow"] = lambda blob: tf.io.decode_image(blob, channels=3).numpy()
        versions["tensorflow"] = tf.__version__
    except ImportError:
        pass
    import PIL
    import simplejpeg

    versions.update(pillow=PIL.__version__, simplejpeg=simplejpeg.__version__)

    rows = []
    for h, w in SIZES:
        blobs = make_jpegs(h, w, args.images, args.quality)
        for decode in decoders.values():  # warm-up: first calls load libraries
            decode(blobs[0])
        times: dict[str, list[float]] = {name: [] for name in decoders}
        for _ in range(args.repeats):
            for name, decode in decoders.items():  # interleaved: load changes hit every decoder alike
                start = time.perf_counter()
                for blob in blobs:
                    decode(blob)
                times[name].append((time.perf_counter() - start) / len(blobs))
        reference = [decoders["tensorflow"](b) for b in blobs] if "tensorflow" in decoders else None
        for name, decode in decoders.items():
            median = statistics.median(times[name])
            row = {"size": f"{h}x{w}", "decoder": name, "us_per_image": median * 1e6, "images_per_s": 1 / median}
            if reference is not None:
                diff = max(int(np.abs(decode(b).astype(int) - r).max()) for b, r in zip(blobs, reference, strict=True))
                row["max_abs_diff_vs_tensorflow"] = diff
            rows.append(row)

    print(f"\nJPEG decode, quality {args.quality}, 4:2:0, {args.images} images x {args.repeats} passes, 1 thread\n")
    header = f"{'size':>8}  {'decoder':<11} {'us/image':>9} {'images/s':>9}" + (
        "  max|diff| vs TF" if "tensorflow" in decoders else ""
    )
    print(header)
    for row in rows:
        line = f"{row['size']:>8}  {row['decoder']:<11} {row['us_per_image']:9.0f} {row['images_per_s']:9.0f}"
        if "max_abs_diff_vs_tensorflow" in row:
            line += f"  {row['max_abs_diff_vs_tensorflow']:>16}"
        print(line)
    write_report(
        {"command": command(), "environment": environment(**versions), "quality": args.quality, "rows": rows},
        args.out,
    )


if __name__ == "__main__":
    main()
