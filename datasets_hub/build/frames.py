"""Compressed frame leaves of a build: one image per row, any row one read (docs/guide/compressed-frames.md).

A camera key of a build is stored either raw (``uint8 [rows, *shape]``, as every other leaf) or, with
``frames="jpeg"`` / ``"png"`` / ``"h264"``, as two plain leaves of the ``frames/`` group
(:mod:`datasets_hub.build.format` owns the layout):

- ``frames/<key>/blob``: ``uint8 [bytes]``, every row's image encoded on its own, back to back;
- ``frames/<key>/offsets``: ``int64 [rows + 1]``, row ``r`` is ``blob[offsets[r]:offsets[r + 1]]``.

So a row costs one read of its own bytes, whatever the dataset size, and no row depends on another
(unlike a video's groups of pictures). This module owns the codecs: choosing one (:func:`resolve_frames`),
encoding rows at build time (:class:`FrameEncoder`, which also measures the PSNR against the source) and
decoding the sampled rows only, in a thread pool of the host (:class:`FrameColumn`); decoding with nvJPEG
into device memory is :mod:`datasets_hub.build.frame_device`'s.

**Library.** JPEG goes through simplejpeg (libjpeg-turbo; 4:2:0 chroma, as the videos it usually comes
from) and PNG through Pillow: measured on 180x320 frames here, simplejpeg decodes a frame in 0.68 ms
against Pillow's 0.93 ms, and it decodes straight into a caller's buffer (no copy). Both release the GIL,
so threads scale with cores. PyTurboJPEG wraps the same libjpeg-turbo and was not installed here.
``h264`` (each row one intra picture, a third of JPEG's bytes, slower to decode) is
:mod:`datasets_hub.build.frame_h264`'s.
"""

from __future__ import annotations

import difflib
import io
import itertools
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from datasets_hub.errors import CacheError, InvalidParameter, MissingDependency
from datasets_hub.loader import frame_layout
from datasets_hub.process_locks import ProcessLock

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    import torch

CODECS = ("raw", "jpeg", "png", "h264")
#: codecs whose ``frame_quality`` is a setting of theirs: JPEG's quality (1..100, higher is better) and
#: h264's quantiser (1..51, lower is better); the others are exact
LOSSY = ("jpeg", "h264")
#: the default JPEG quality (recorded in the manifest; any 1..100 may be asked for). 75: on frames decoded from
#: LeRobot's AV1 MP4s (DROID's shape) it stores 1.94x the MP4 bytes at 38.3 dB or more; 90 took 3.7x for 39.9 dB
#: (benchmarks/frame_codecs.py, docs/results/video.md). Builds of another quality keep their own fingerprint.
DEFAULT_QUALITY = 75
#: ``frames=None`` ("auto"): raw while the decoded frames of a build stay at or below this many bytes,
#: the loader's ``auto_frames`` codec (JPEG, or PNG for exact-needed frames) above (16 GiB: the frames of Push-T or an ALOHA subset sample fastest raw from the page cache;
#: DROID's 14.3 TB of decoded frames could not be built at all)
RAW_LIMIT_BYTES = 16 * 2**30
#: the floor the tests hold JPEG at the default quality to, on moving content with fixed sensor noise (sigma 6:
#: the costliest content for a DCT; 34.2 dB grey, 35.7 dB RGB there). Frames decoded from a video, already
#: denoised by its encoder, keep 38 dB and more (dB)
PSNR_FLOOR_DB = 34.0
#: PSNR against the source is measured on every PSNR_EVERY-th row at build time (decoding each is not free)
PSNR_EVERY = 16


def psnr_floor(codec: str) -> float:
    """The documented PSNR floor (dB) of ``codec`` at its default quality on the tests' hardest content."""
    from datasets_hub.build import frame_h264

    return frame_h264.PSNR_FLOOR_DB if codec == "h264" else PSNR_FLOOR_DB


class FrameError(CacheError):
    """A stored frame cannot be decoded (a damaged blob): names the key, the episode and the frame."""


@dataclass(frozen=True)
class FrameCodec:
    """How a build stores its camera keys: ``codec`` in :data:`CODECS`; ``quality`` is JPEG's quality or
    h264's quantiser (``qp``), None for the exact codecs."""

    codec: str = "raw"
    quality: int | None = None

    @property
    def compressed(self) -> bool:
        return self.codec != "raw"

    def to_json(self) -> dict[str, Any]:
        return {"codec": self.codec, "quality": self.quality}


def resolve_frames(
    frames: str | None,
    quality: int | None,
    decoded_bytes: int | None,
    where: str = "load",
    *,
    above_limit: str = "jpeg",
) -> FrameCodec:
    """The codec a build uses, from ``load(..., frames=, frame_quality=)``.

    ``frames=None`` (or ``"auto"``) is raw while the decoded frames (``decoded_bytes``, the loader's
    estimate; ``None`` when it gives none) stay at or below :data:`RAW_LIMIT_BYTES`, and ``above_limit``
    (the loader's ``auto_frames``: ``"jpeg"`` for camera footage, ``"png"`` where every pixel matters)
    above it; a ``frame_quality`` given with ``frames=None`` asks for JPEG whatever the size.
    ``frame_quality`` is JPEG's quality (1..100, higher is better, default :data:`DEFAULT_QUALITY`) or h264's
    quantiser (1..51, lower is better, default ``frame_h264.DEFAULT_QP``); PNG and raw take none.
    """
    from datasets_hub.build import frame_h264

    if above_limit not in ("jpeg", "png"):
        raise ValueError(f"above_limit must be 'jpeg' or 'png', got {above_limit!r}")
    if frames is not None and not isinstance(frames, str):
        raise InvalidParameter(f"{where}: frames must be one of {list(CODECS)} or 'auto', got {frames!r}")
    name = "auto" if frames is None else frames.lower()
    if name not in (*CODECS, "auto"):
        close = difflib.get_close_matches(name, [*CODECS, "auto", "jpg", "h.264", "avc"], n=1)
        spelled = {"jpg": "jpeg", "h.264": "h264", "avc": "h264"}
        hint = f"; did you mean frames={spelled.get(close[0], close[0])!r}?" if close else ""
        raise InvalidParameter(f"{where}: frames={frames!r} is not one of {[*CODECS, 'auto']}{hint}")
    if quality is not None and (not isinstance(quality, int) or isinstance(quality, bool)):
        raise InvalidParameter(f"{where}: frame_quality must be an int, got {quality!r}")
    if name == "auto":
        name = above_limit if decoded_bytes is not None and decoded_bytes > RAW_LIMIT_BYTES else "raw"
        if quality is not None and name != "jpeg":
            name = "jpeg"  # a quality was asked for: the user wants JPEG whatever the size
    if name not in LOSSY:
        if quality is not None:
            raise InvalidParameter(
                f"{where}: frame_quality={quality} applies to JPEG and h264 frames, not frames={name!r} "
                f"({name} is exact)"
            )
        return FrameCodec(name, None)
    if name == "jpeg":
        if quality is not None and not 1 <= quality <= 100:
            raise InvalidParameter(
                f"{where}: frame_quality for JPEG frames is an int from 1 to 100 (higher is better, default "
                f"{DEFAULT_QUALITY}), got {quality}"
            )
        return FrameCodec(name, DEFAULT_QUALITY if quality is None else int(quality))
    low, high = frame_h264.QP_RANGE
    if quality is not None and not low <= quality <= high:
        raise InvalidParameter(
            f"{where}: frame_quality for h264 frames is x264's quantiser, an int from {low} (best) to {high} "
            f"(smallest), default {frame_h264.DEFAULT_QP}; got {quality}"
        )
    return FrameCodec(name, frame_h264.DEFAULT_QP if quality is None else int(quality))


def image_layout(dtype: torch.dtype, shape: Sequence[int]) -> str | None:
    """``"hwc"``, ``"chw"`` or ``"hw"`` when rows of ``dtype``/``shape`` are images a codec can hold
    (uint8, 1 or 3 channels, at least 8 pixels a side), else None (the key stays raw)."""
    import torch

    return frame_layout(shape) if dtype == torch.uint8 else None


def _to_hwc(frame: np.ndarray, layout: str) -> np.ndarray:
    if layout == "chw":
        frame = frame.transpose(1, 2, 0)
    elif layout == "hw":
        frame = frame[..., None]
    return np.ascontiguousarray(frame)


def encode(frame: np.ndarray, codec: FrameCodec, layout: str) -> bytes:
    """One frame (its stored layout) as the codec's bytes."""
    hwc = _to_hwc(frame, layout)
    if codec.codec == "jpeg":
        import simplejpeg

        gray = hwc.shape[2] == 1
        return simplejpeg.encode_jpeg(
            hwc, quality=int(codec.quality or DEFAULT_QUALITY), colorspace="GRAY" if gray else "RGB",
            colorsubsampling="Gray" if gray else "420",
        )  # fmt: skip
    if codec.codec == "png":
        from PIL import Image

        out = io.BytesIO()
        Image.fromarray(hwc[..., 0] if hwc.shape[2] == 1 else hwc).save(out, format="PNG", compress_level=1)
        return out.getvalue()
    if codec.codec == "h264":
        from datasets_hub.build import frame_h264

        return frame_h264.encode(hwc, int(codec.quality or frame_h264.DEFAULT_QP))
    raise ValueError(f"no encoder for codec {codec.codec!r}")


def decode_into(data: bytes | memoryview | np.ndarray, codec: str, layout: str, out: np.ndarray) -> None:
    """Decode one frame into ``out`` (its stored layout and shape); ValueError/OSError when it is damaged."""
    channels = 1 if layout == "hw" else (out.shape[0] if layout == "chw" else out.shape[2])
    hw_shape = _hw_of(out.shape, layout)
    if codec == "jpeg":
        import simplejpeg

        colorspace = "GRAY" if channels == 1 else "RGB"
        if layout == "hwc":
            simplejpeg.decode_jpeg(data, colorspace=colorspace, buffer=out)
            return
        image = simplejpeg.decode_jpeg(data, colorspace=colorspace)
    elif codec == "png":
        from PIL import Image

        with Image.open(io.BytesIO(bytes(data))) as img:
            image = np.asarray(img.convert("L" if channels == 1 else "RGB"))
        if image.ndim == 2:
            image = image[..., None]
    elif codec == "h264":
        from datasets_hub.build import frame_h264

        image = frame_h264.decode(data, *hw_shape, channels)
    else:
        raise ValueError(f"no decoder for codec {codec!r}")
    if image.shape[:2] != hw_shape:
        raise ValueError(f"decodes to {image.shape[1]}x{image.shape[0]} pixels, not {hw_shape[1]}x{hw_shape[0]}")
    if layout == "chw":
        out[...] = image.transpose(2, 0, 1)
    elif layout == "hw":
        out[...] = image[..., 0]
    else:
        out[...] = image


def _hw_of(shape: tuple[int, ...], layout: str) -> tuple[int, int]:
    """The height and width of a frame of ``shape`` stored in ``layout``."""
    hw = shape if layout == "hw" else (shape[1:] if layout == "chw" else shape[:2])
    return int(hw[0]), int(hw[1])


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two uint8 arrays in dB (``inf`` when equal)."""
    mse = float(np.mean((a.astype(np.float32) - b.astype(np.float32)) ** 2))
    return math.inf if mse == 0 else 10.0 * math.log10(255.0**2 / mse)


# -- threads ---------------------------------------------------------------------------------------
_POOL: tuple[int, ThreadPoolExecutor] | None = None
#: threads of this process inside a sampling :meth:`FrameColumn.take` now (the callers sharing the pool)
_TAKERS = [0]


def _forget_parent_takers() -> None:
    _TAKERS[0] = 0  # the parent's taking threads do not exist in a forked child


_POOL_LOCK = ProcessLock(reset_in_child=_forget_parent_takers)


def _env_threads() -> int | None:
    value = os.environ.get("DATASETS_HUB_FRAME_THREADS")
    if not value:
        return None
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise InvalidParameter(f"DATASETS_HUB_FRAME_THREADS must be a positive int, got {value!r}")
    return threads


def _cores() -> int:
    """The CPUs this process may run on (its affinity mask, which containers and ``taskset`` narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def thread_count() -> int:
    """Threads that decode sampled frames: ``DATASETS_HUB_FRAME_THREADS``, else 1 inside a DataLoader worker
    process (its siblings run in parallel already), else the CPUs this process may run on.

    Not torch's intra-op count: each sampling thread sets its own to 1
    (:mod:`datasets_hub.interop.threaded_batches`), which says nothing about the cores free for decoding."""
    env = _env_threads()
    if env is not None:
        return env
    import torch.utils.data

    return 1 if torch.utils.data.get_worker_info() is not None else _cores()


def build_thread_count() -> int:
    """Threads that encode frames while building: ``DATASETS_HUB_FRAME_THREADS``, else every CPU (a build
    runs torch single-threaded, which says nothing about the cores free for encoding)."""
    return _env_threads() or max(1, os.cpu_count() or 1)


def _pool() -> ThreadPoolExecutor:
    """This process's frame threads, one pool for every caller (a forked child makes its own: threads do
    not survive a fork)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid():
            size = max(thread_count(), build_thread_count())
            _POOL = (os.getpid(), ThreadPoolExecutor(size, thread_name_prefix="datasets_hub-frames"))
        return _POOL[1]


def run_parallel(
    count: int, work: Callable[[int, int], None], *, threads: int | None = None, min_per_task: int = 4
) -> None:
    """Call ``work(lo, hi)`` over ``range(count)`` in ``threads`` contiguous parts (default
    :func:`thread_count`; inline when one thread or few items): the calling thread does the first part
    itself and the process's frame pool the others."""
    threads = thread_count() if threads is None else threads
    if threads <= 1 or count <= min_per_task:
        work(0, count)
        return
    parts = min(threads, max(1, count // min_per_task))
    bounds = np.linspace(0, count, parts + 1).astype(np.int64).tolist()
    spans = [(a, b) for a, b in itertools.pairwise(bounds) if b > a]
    pool = _pool()
    futures = [pool.submit(work, a, b) for a, b in spans[1:]]
    try:
        work(*spans[0])
    finally:
        wait(futures)  # every part has ended before the caller's buffers are handed on (or freed)
    for future in futures:
        future.result()


def sampling_threads() -> int:
    """Frame threads one sampling :meth:`FrameColumn.take` splits its frames over: the frame threads
    (:func:`thread_count`) shared by the threads taking frames now. One sampling thread gets every
    core; ``k`` sampling threads (``num_workers=k`` of a loader's threads) get ``cores / k`` each, so
    that once they cover the cores each decodes its own batch on its own thread, with no hand-over."""
    return max(1, -(-thread_count() // max(1, _TAKERS[0])))


class _Taking:
    """Counts the threads inside a sampling take (:func:`sampling_threads` divides the cores among them)."""

    def __enter__(self) -> None:
        with _POOL_LOCK:
            _TAKERS[0] += 1

    def __exit__(self, *exc: object) -> None:
        with _POOL_LOCK:
            _TAKERS[0] -= 1


# -- build side ------------------------------------------------------------------------------------
class FrameEncoder:
    """Encodes rows of one key at build time and keeps the PSNR of every :data:`PSNR_EVERY`-th row."""

    def __init__(self, codec: FrameCodec, layout: str, frame_shape: tuple[int, ...]) -> None:
        self.codec, self.layout, self.frame_shape = codec, layout, frame_shape
        self.rows = 0
        self.bytes = 0
        self._psnr: list[float] = []

    def encode_rows(self, values: np.ndarray) -> tuple[list[bytes], np.ndarray]:
        """``values`` (``[n, *shape]`` uint8) -> each row's bytes and their ``n`` lengths."""
        n = values.shape[0]
        blobs: list[bytes] = [b""] * n
        first = self.rows
        measured: dict[int, float] = {}

        def work(lo: int, hi: int) -> None:
            scratch = np.empty(self.frame_shape, dtype=np.uint8)
            for i in range(lo, hi):
                blobs[i] = encode(values[i], self.codec, self.layout)
                if (first + i) % PSNR_EVERY == 0:
                    decode_into(blobs[i], self.codec.codec, self.layout, scratch)
                    measured[i] = psnr(scratch, values[i])

        run_parallel(n, work, threads=build_thread_count(), min_per_task=8)
        self._psnr.extend(measured[i] for i in sorted(measured))
        lengths = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=n)
        self.rows += n
        self.bytes += int(lengths.sum())
        return blobs, lengths

    def state(self) -> dict[str, Any]:
        """The running counts (plain values), for a checkpoint of a resumable build."""
        return {"rows": self.rows, "bytes": self.bytes, "psnr": list(self._psnr)}

    def restore(self, state: dict[str, Any]) -> None:
        """Go on from a :meth:`state` (a resumed build)."""
        self.rows, self.bytes, self._psnr = int(state["rows"]), int(state["bytes"]), [float(p) for p in state["psnr"]]

    def stats(self) -> dict[str, Any]:
        """What the card shows: stored and decoded bytes, their ratio, PSNR (dB) against the source."""
        decoded = self.rows * int(np.prod(self.frame_shape))
        finite = [p for p in self._psnr if math.isfinite(p)]
        return {
            "codec": self.codec.codec,
            "quality": self.codec.quality,
            "rows": self.rows,
            "bytes": self.bytes,
            "decoded_bytes": decoded,
            "ratio": round(decoded / self.bytes, 3) if self.bytes else None,
            # None when no measured row differs from its source (PNG: always)
            "psnr_db": {"mean": round(float(np.mean(finite)), 3), "min": round(float(np.min(finite)), 3)}
            if finite
            else None,
            "psnr_rows": len(self._psnr),
            "psnr_every": PSNR_EVERY,
            "exact_rows": len(self._psnr) - len(finite),
        }


# -- read side -------------------------------------------------------------------------------------
class FrameColumn:
    """A compressed frame leaf, read like the raw ``[rows, *shape]`` uint8 array it stands for.

    :meth:`take` decodes only the rows asked for (each distinct row once, in the frame threads) and
    returns a fresh array; ``locate(row) -> (episode id, time)`` names a damaged frame in the
    :class:`FrameError` it raises. Indexing is by row, as ``numpy.take(..., axis=0)``.
    """

    def __init__(
        self,
        key: str,
        blob: np.ndarray,
        offsets: np.ndarray,
        codec: str,
        layout: str,
        frame_shape: tuple[int, ...],
        locate: Callable[[int], tuple[int, int]] | None = None,
    ) -> None:
        self.key, self.blob, self.offsets = key, blob, offsets
        self.codec, self.layout, self.frame_shape = codec, layout, tuple(frame_shape)
        self.locate = locate
        self.dtype = np.dtype(np.uint8)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.offsets.shape[0] - 1, *self.frame_shape)

    @property
    def ndim(self) -> int:
        return 1 + len(self.frame_shape)

    @property
    def nbytes(self) -> int:
        """Bytes held (the compressed blob and the offsets), not the decoded size."""
        return int(self.blob.nbytes + self.offsets.nbytes)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"FrameColumn({self.key!r}, codec={self.codec!r}, rows={len(self)}, frame={list(self.frame_shape)})"

    def _where(self, row: int) -> str:
        if self.locate is None:
            return f"row {row}"
        episode, time = self.locate(row)
        return f"episode {episode}, frame {time} (row {row})"

    def _spans(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ``[lo, hi)`` byte spans of ``rows`` in the blob (one gather each), checked all at once."""
        lo, hi = self.offsets[rows], self.offsets[rows + 1]
        bad = (lo < 0) | (hi <= lo) | (hi > self.blob.shape[0])
        if bad.any():
            i = int(np.argmax(bad))
            row, a, b = int(rows[i]), int(lo[i]), int(hi[i])
            raise FrameError(
                f"{self.key}: {self._where(row)} has offsets {a}..{b} outside its {self.blob.shape[0]}-byte blob: "
                "the build is damaged; run `datasets-hub verify` and `datasets-hub rm`, then load again"
            )
        return lo, hi

    def _damaged(self, row: int, exc: Exception) -> FrameError:
        return FrameError(
            f"{self.key}: the {self.codec} frame of {self._where(row)} cannot be decoded ({exc}): the build "
            "is damaged; run `datasets-hub verify` and `datasets-hub rm`, then load again"
        )

    def _decode_rows(self, rows: np.ndarray, out: np.ndarray, slots: np.ndarray) -> None:
        """Decode frame ``rows[i]`` into ``out[slots[i]]`` for every ``i``, in contiguous parts over the
        frame threads (:func:`sampling_threads`); the byte spans are looked up once for all of them."""
        if not rows.size:
            return
        lo, hi = (span.tolist() for span in self._spans(rows))
        slot, row_of = slots.tolist(), rows.tolist()
        blob = self.blob.data if self.blob.flags.c_contiguous else self.blob  # a memoryview: cheap to slice
        if self.codec == "jpeg" and self.layout == "hwc":  # the common case: straight into the output
            import simplejpeg

            decode = simplejpeg.decode_jpeg
            colorspace = "GRAY" if self.frame_shape[2] == 1 else "RGB"
            frame_shape = tuple(self.frame_shape)

            def work(a: int, b: int) -> None:
                i = a
                try:
                    for i in range(a, b):
                        got = decode(blob[lo[i] : hi[i]], colorspace=colorspace, buffer=out[slot[i]])
                        if got.shape != frame_shape:  # a smaller image fits the buffer: never a partial frame
                            raise ValueError(f"a {list(got.shape)} image where {list(frame_shape)} is stored")
                except ValueError as exc:  # simplejpeg's error for bad bytes or a buffer too small
                    raise self._damaged(row_of[i], exc) from exc

        else:
            codec, layout = self.codec, self.layout

            def work(a: int, b: int) -> None:
                i = a
                try:
                    for i in range(a, b):
                        decode_into(blob[lo[i] : hi[i]], codec, layout, out[slot[i]])
                except (ValueError, OSError, SyntaxError) as exc:  # Pillow: OSError/SyntaxError
                    raise self._damaged(row_of[i], exc) from exc

        with _Taking():
            run_parallel(len(slot), work, threads=sampling_threads())

    def take(
        self,
        rows: Any,
        axis: int = 0,
        *,
        out: np.ndarray | None = None,
        reuse: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> np.ndarray:
        """The decoded frames at ``rows`` (any shape of ints), shaped ``[*rows.shape, *frame_shape]``.

        Each distinct row is decoded once, straight into the first place that asks for it; a row asked for
        again is copied from there. ``out`` (C-contiguous uint8 of that shape) receives the frames instead
        of a fresh array. ``reuse=(done_rows, done_frames)``: frames this column already decoded
        (``done_frames[i]`` is row ``done_rows[i]``, as an earlier ``take`` returned them): those rows are
        copied from there, not decoded again (the same bytes decode to the same pixels)."""
        if axis != 0:
            raise ValueError("a FrameColumn is indexed by row (axis=0) only")
        rows = np.asarray(rows, dtype=np.int64)
        n = len(self)
        if rows.size and (rows.min() < -n or rows.max() >= n):
            raise IndexError(f"{self.key}: row index out of range for {n} frames")
        flat = np.where(rows < 0, rows + n, rows).reshape(-1)
        shape = (*rows.shape, *self.frame_shape)
        if out is None:
            out = np.empty(shape, dtype=np.uint8)
        elif out.shape != shape or out.dtype != np.uint8 or not out.flags.c_contiguous:
            raise ValueError(
                f"{self.key}: out must be C-contiguous uint8 {list(shape)}, got {out.dtype} {list(out.shape)}"
            )
        dst = out.reshape(flat.size, *self.frame_shape)
        unique, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        todo = np.ones(unique.size, dtype=bool)
        if reuse is not None:
            done_rows, done_frames = reuse
            done_rows = np.asarray(done_rows, dtype=np.int64).reshape(-1)
            done_frames = done_frames.reshape(done_rows.size, *self.frame_shape)
            order = np.argsort(done_rows, kind="stable")
            pos = np.minimum(np.searchsorted(done_rows, unique, sorter=order), max(done_rows.size - 1, 0))
            found = (pos < done_rows.size) & (done_rows[order[pos]] == unique) if done_rows.size else ~todo
            _copy_frames(dst, first[found], done_frames, order[pos[found]])
            todo = ~found
        self._decode_rows(unique[todo], dst, first[todo])
        again = np.flatnonzero(first[inverse] != np.arange(flat.size))
        if again.size:  # rows asked for more than once: copied from where they were decoded
            _copy_frames(dst, again, dst, first[inverse[again]])
        return out

    def encoded(self, rows: Sequence[int]) -> list[np.ndarray]:
        """The stored bytes of ``rows`` (no decoding): what a device decoder takes."""
        lo, hi = self._spans(np.asarray(rows, dtype=np.int64).reshape(-1))
        return [self.blob[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]


def _copy_frames(dst: np.ndarray, to: np.ndarray, src: np.ndarray, source: np.ndarray) -> None:
    """``dst[to[i]] = src[source[i]]`` frame by frame in the frame threads (no temporary of them all)."""
    to_list, source_list = to.tolist(), source.tolist()

    def copy(a: int, b: int) -> None:
        for i in range(a, b):
            dst[to_list[i]] = src[source_list[i]]

    run_parallel(len(to_list), copy, threads=sampling_threads(), min_per_task=32)


def require_codec_libraries(codec: FrameCodec) -> None:
    """A clear error, before a build starts, when the codec's library is missing."""
    if codec.codec == "h264":
        from datasets_hub.build import frame_h264

        missing = frame_h264.available()
        if missing is not None:
            raise MissingDependency(
                f"frames='h264' needs {missing}: pip install av (its wheels include libx264), or pass frames='jpeg'"
            )
        return
    module, package = {"jpeg": ("simplejpeg", "simplejpeg"), "png": ("PIL", "pillow")}.get(codec.codec, (None, None))
    if module is None:
        return
    try:
        __import__(module)
    except ImportError as exc:
        raise MissingDependency(f"frames={codec.codec!r} needs {package}: pip install {package}") from exc
