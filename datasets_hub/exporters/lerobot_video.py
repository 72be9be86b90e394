"""The MP4 files of a LeRobot v3.0 export (``format="lerobot"``, option ``video=True``), encoded with PyAV.

LeRobot v3.0 keeps the frames of one camera for many episodes in one video file,
``videos/<camera>/chunk-CCC/file-FFF.mp4``, an episode being the time span
``[from_timestamp, to_timestamp)`` of its file. Here every data file has one video file per camera
with the same chunk and file index, frames at ``pts = position in the file`` with time base ``1 / fps``,
so frame ``t`` of an episode starting at position ``p`` is at ``(p + t) / fps``: the timestamp a LeRobot
reader asks for (``from_timestamp + timestamp``). Encoding settings follow LeRobot's recorder:
``yuv420p``, a keyframe every 2 frames, ``crf=30`` (video is lossy: exports with images are exact).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from datasets_hub.errors import InvalidParameter, MissingDependency

VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
#: LeRobot's name of the codec in ``info.json`` for the PyAV encoders offered
CODEC_NAMES = {"libsvtav1": "av1", "libx264": "h264", "h264": "h264", "libx265": "hevc", "hevc": "hevc"}


def check_codec(codec: str) -> None:
    """Refuse an encoder this PyAV does not have, or one LeRobot does not read."""
    try:
        import av
    except ImportError as exc:
        raise MissingDependency("exporting LeRobot videos needs PyAV: pip install av") from exc
    if codec not in CODEC_NAMES:
        raise InvalidParameter(f"video_codec must be one of {sorted(CODEC_NAMES)}, got {codec!r}")
    try:
        av.codec.Codec(codec, "w")
    except Exception as exc:  # PyAV raises its own errors for a missing encoder
        raise MissingDependency(f"this PyAV has no {codec!r} encoder ({exc}); pass video_codec='libx264'") from exc


class VideoFiles:
    """One open MP4 per camera for the current data file; :meth:`add` appends an episode's frames."""

    def __init__(self, root: Path, cameras: list[str], fps: float, codec: str) -> None:
        self.root, self.cameras, self.codec = root, cameras, codec
        self.rate = Fraction(fps).limit_denominator(1001)
        self.open: dict[str, tuple[Any, Any]] = {}
        self.position: dict[str, int] = {}
        self.chunk_index = self.file_index = 0

    def start_file(self, chunk_index: int, file_index: int) -> None:
        """Close the current files; the next frames go to files of this chunk and file index."""
        self.close()
        self.chunk_index, self.file_index = chunk_index, file_index

    def add(self, camera: str, frames: np.ndarray) -> tuple[float, float]:
        """Append uint8 ``[T, H, W, 3]`` frames; return the episode's ``(from_timestamp, to_timestamp)``."""
        import av

        if camera not in self.open:
            path = self.root / VIDEO_PATH.format(
                video_key=camera, chunk_index=self.chunk_index, file_index=self.file_index
            )
            path.parent.mkdir(parents=True, exist_ok=True)
            container = av.open(str(path), "w")
            options = {"g": "2", "crf": "30"} | ({"preset": "12"} if self.codec == "libsvtav1" else {})
            stream: Any = container.add_stream(self.codec, rate=self.rate, options=options)
            stream.pix_fmt = "yuv420p"
            stream.height, stream.width = int(frames.shape[1]), int(frames.shape[2])
            stream.time_base = 1 / self.rate
            self.open[camera] = (container, stream)
            self.position[camera] = 0
        container, stream = self.open[camera]
        first = self.position[camera]
        for t, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame.pts = first + t
            frame.time_base = 1 / self.rate  # not stream.time_base: the muxer changes it once the header is out
            for packet in stream.encode(frame):
                container.mux(packet)
        self.position[camera] = first + len(frames)
        return float(first / self.rate), float((first + len(frames)) / self.rate)

    def close(self) -> None:
        """Flush and close every open file."""
        for container, stream in self.open.values():
            for packet in stream.encode():
                container.mux(packet)
            container.close()
        self.open.clear()
