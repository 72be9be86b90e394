"""The ``h264`` frame codec: every row one intra-coded h264 picture, decodable on its own.

What :mod:`datasets_hub.build.frames` calls for ``frames="h264"``. Each frame is encoded by libx264 (through
PyAV) as an IDR picture that carries its own parameter sets (``keyint=1``, ``repeat-headers=1``, no B-frames,
no look-ahead), so a row is still one read and one decode, as with JPEG, and no row depends on another. An
intra h264 picture spends about a third of a 4:2:0 JPEG's bytes on frames decoded from a video at a similar
PSNR (benchmarks/frame_codecs.py), which is what keeps a build of DROID-class footage within twice the bytes
of its MP4s; it decodes several times slower than JPEG on the host and has no nvJPEG path on a GPU.

**Quality** is x264's constant quantiser (``qp``, 1 best .. 51 smallest), not its CRF: CRF carries a rate
estimate from one frame to the next, so a frame's pixels would depend on which frames a thread encoded before
it. With a constant quantiser a frame decodes to the same pixels whatever order or thread encoded it.

**Shapes.** libx264 encodes 4:2:0 pictures of even width and height: an odd side is padded by repeating its
last row or column and cropped again on decode. A one-channel frame is encoded as grey RGB (its chroma planes
are flat and cost almost nothing) and decoded from the luma plane.

**Damage.** The decoder runs with ``err_detect=explode``: bytes h264 cannot parse raise (a damaged row is an
error naming it, never a concealed picture). Each thread keeps one encoder per frame size and one decoder,
made again in a forked child.
"""

from __future__ import annotations

import fractions
import os
import threading
import weakref
from typing import Any

import numpy as np

from datasets_hub.process_locks import ProcessLock

#: x264's quantiser when ``frame_quality`` is not given: on frames decoded from LeRobot-style MP4s (h264 or
#: AV1, crf 30, g=2; benchmarks/frame_codecs.py) it stores at most twice the MP4's bytes a frame
DEFAULT_QP = 28
QP_RANGE = (1, 51)
#: the floor the tests hold the default quantiser to on the frames.PSNR_FLOOR_DB content (moving, with fixed
#: sensor noise of sigma 6): 33.8 dB RGB, 35.6 dB grey there. Frames decoded from a video keep 37 dB and more
#: (37.5 from AV1, 41.2 from h264; benchmarks/frame_codecs.py)
PSNR_FLOOR_DB = 33.0
#: x264 settings that make every frame an IDR picture with its own SPS/PPS, emitted as soon as it is encoded
_X264_PARAMS = "keyint=1:min-keyint=1:scenecut=0:repeat-headers=1:bframes=0"

_LOCAL = threading.local()


class _ThreadCodecs:
    """One thread's encoders (by frame size and quantiser), decoder and converters, made in process ``pid``."""

    __slots__ = ("__weakref__", "decoder", "encoders", "pid", "reformatters")

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.encoders: dict[tuple[int, int, int], list[Any]] = {}
        self.decoder: Any = None
        self.reformatters: dict[tuple[str, int, int], Any] = {}


#: every live thread's codecs, weakly (a thread's go with it), so that a finished build can drop its encoders
_ALL: weakref.WeakSet[_ThreadCodecs] = weakref.WeakSet()
_ALL_LOCK = ProcessLock()  # free in a forked child, whatever a parent's thread held


def _thread_state() -> _ThreadCodecs:
    """This thread's encoders, decoder and converters (fresh after a fork: codec contexts are not shared across
    processes)."""
    state = getattr(_LOCAL, "state", None)
    if state is None or state.pid != os.getpid():
        state = _ThreadCodecs()
        _LOCAL.state = state
        with _ALL_LOCK:
            _ALL.add(state)
    return state


def release_encoders() -> int:
    """Drop every thread's encoders in this process and return how many: a build calls it once it has encoded
    its last row, so that its frame threads do not keep them (4-8 MiB each, one per thread and frame size) for
    the rest of the process. An encode under way keeps its own until it returns; a later one opens a new one.
    Decoders stay: sampling reuses them."""
    with _ALL_LOCK:
        states = [s for s in _ALL if s.pid == os.getpid()]
    dropped = 0
    for state in states:
        encoders = state.encoders
        dropped += len(encoders)
        encoders.clear()
    return dropped


def _encoder(height: int, width: int, qp: int) -> Any:
    import av

    encoders = _thread_state().encoders
    key = (height, width, qp)
    slot = encoders.get(key)  # one lookup: release_encoders() may clear the dict from another thread
    if slot is None:
        context = av.CodecContext.create("libx264", "w")
        context.width, context.height, context.pix_fmt = width, height, "yuv420p"
        context.time_base = fractions.Fraction(1, 1)
        context.options = {
            "qp": str(qp), "preset": "veryfast", "tune": "zerolatency", "threads": "1", "x264-params": _X264_PARAMS,
        }  # fmt: skip
        slot = encoders[key] = [context, 0]
    return slot


def _reformatter(target: str, height: int, width: int) -> Any:
    """This thread's converter of ``height x width`` pictures to the pixel format ``target`` (``"yuv420p"`` to
    encode, ``"rgb24"`` or ``"gray"`` to decode), kept from frame to frame and used with ``threads=1``.

    A converter keeps one set-up, for one format and size: one each, so that a build decoding every 16th row
    for its PSNR, or a batch of cameras of two sizes, does not set one up again at every switch. The same
    pixels as ``VideoFrame.to_ndarray(format=...)``, which sets up a new converter with its own slice threads
    for every frame (ten times the cost of the conversion itself, 180x320). One thread each: the frame threads
    already run in parallel, and a converter that owns threads hangs when a forked child (a DataLoader worker)
    frees the parent's copy of it."""
    import av

    reformatters = _thread_state().reformatters
    key = (target, height, width)
    if key not in reformatters:
        reformatters[key] = av.video.reformatter.VideoReformatter()
    return reformatters[key]


def _even(hwc: np.ndarray) -> np.ndarray:
    """``hwc`` with an odd height or width padded by one repeated row or column (4:2:0 needs even sides)."""
    pad_h, pad_w = hwc.shape[0] % 2, hwc.shape[1] % 2
    if pad_h or pad_w:
        hwc = np.pad(hwc, ((0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    return hwc


def encode(hwc: np.ndarray, qp: int) -> bytes:
    """One ``[H, W, 1 or 3]`` uint8 frame as one self-contained intra h264 picture (Annex B bytes)."""
    import av

    rgb = np.ascontiguousarray(_even(np.repeat(hwc, 3, axis=2) if hwc.shape[2] == 1 else hwc))
    slot = _encoder(rgb.shape[0], rgb.shape[1], qp)
    context, count = slot
    frame = _reformatter("yuv420p", rgb.shape[0], rgb.shape[1]).reformat(
        av.VideoFrame.from_ndarray(rgb, format="rgb24"), format="yuv420p", interpolation="BILINEAR", threads=1
    )
    frame.pts = count
    slot[1] = count + 1
    data = b"".join(bytes(packet) for packet in context.encode(frame))
    if not data:  # the settings above emit every picture at once; anything else would shift rows
        raise RuntimeError("libx264 held a frame back although every frame is an intra picture")
    return data


def _decoder() -> Any:
    import av

    state = _thread_state()
    if state.decoder is None:
        context = av.CodecContext.create("h264", "r")
        context.thread_count = 1  # frame threads would hold pictures back; the frame threads run in parallel
        context.options = {"err_detect": "explode"}
        state.decoder = context
    return state.decoder


def decode(data: bytes | memoryview | np.ndarray, height: int, width: int, channels: int) -> np.ndarray:
    """The ``[height, width, channels]`` uint8 frame that :func:`encode` made of ``data``.

    Raises ValueError when the bytes are not one intra picture of that size (damaged or of another build)."""
    import av

    context = _decoder()
    try:
        pictures = context.decode(av.Packet(bytes(data)))
    except av.error.FFmpegError as exc:
        _thread_state().decoder = None  # a fresh decoder for the next row: nothing carries over
        raise ValueError(f"h264 cannot decode these bytes ({exc})") from exc
    if len(pictures) != 1:
        _thread_state().decoder = None
        raise ValueError(f"the bytes hold {len(pictures)} pictures, not one")
    picture = pictures[0]
    if (picture.height, picture.width) != (height + height % 2, width + width % 2):
        raise ValueError(f"decodes to {picture.width}x{picture.height} pixels, not {width}x{height}")
    target = "gray" if channels == 1 else "rgb24"
    image = _reformatter(target, picture.height, picture.width).reformat(
        picture, format=target, interpolation="BILINEAR", threads=1
    )
    pixels = image.to_ndarray()
    return pixels[:height, :width, None] if channels == 1 else pixels[:height, :width]


def available() -> str | None:
    """None when PyAV with libx264 can encode here, else what is missing (for an install hint)."""
    try:
        import av
    except ImportError:
        return "PyAV"
    try:
        av.codec.Codec("libx264", "w")
    except Exception:  # noqa: BLE001 - PyAV raises its own error types for an unknown codec
        return "libx264 in PyAV"
    return None
