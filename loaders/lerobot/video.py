"""Decode the frames of one LeRobot episode, once, into a uint8 file (the video half of the
``lerobot`` loader).

**Which frame goes with which row.** LeRobot's reader (``decode_video_frames``) takes the
timestamps of the requested rows, shifts them by the episode's ``from_timestamp`` in the video
file (v3.0; 0 in v2.1), decodes and keeps, per timestamp, the closest decoded frame, and refuses a
frame further than ``tolerance_s`` (default ``1e-4`` s) from its timestamp. We do the same for
every row of an episode at once: a decoded frame at time ``pts * time_base`` fills the rows whose
shifted timestamp lies within the tolerance of it. A row that no frame fills (the video is
shorter than the episode, a frame is missing, or the timestamps are off the video's grid) is an
error naming the episode, the row's timestamp and the nearest decoded frame.

**Output.** Frames are written into a caller-made raw uint8 file of shape ``[T + 1, H, W, 3]``
(``[T + 1, 3, H, W]`` with ``channels_first``); row ``T`` stays zero (no frame follows an
episode's last step). ``image_size=(h, w)`` resizes with FFmpeg's swscale (area averaging)
during the conversion from YUV to RGB, once, at build time.

Decoding runs in the calling process or in worker processes (:class:`DecodePool`); errors come
back as plain tuples so that a worker's failure is re-raised in the build's process with the
right error type (a malformed file is a :class:`~datasets_hub.errors.CorruptFile`, which makes
the build move that download aside).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from datasets_hub.errors import CorruptFile, LoaderError

INTERPOLATION = "AREA"


@dataclass(frozen=True)
class DecodeTask:
    """One camera of one episode: where to read, which timestamps, where to write."""

    where: str  # "<id>: episode <e>, camera <key>" for messages
    video: str  # local path of the MP4
    label: str  # the file's path in the repo, for messages
    from_timestamp: float
    timestamps: tuple[float, ...]  # the rows' timestamps (relative to the episode)
    out: str  # raw uint8 file, (T + 1) frames
    frame_shape: tuple[int, ...]  # per-row output shape (HWC or CHW)
    image_size: tuple[int, int] | None
    channels_first: bool
    tolerance_s: float


def output_shape(height: int, width: int, image_size: Any, channels_first: bool) -> tuple[int, int, int]:
    h, w = (int(image_size[0]), int(image_size[1])) if image_size else (int(height), int(width))
    return (3, h, w) if channels_first else (h, w, 3)


def to_rgb(frame: Any, image_size: tuple[int, int] | None, channels_first: bool) -> np.ndarray:
    """An ``av.VideoFrame`` as uint8 RGB, resized to ``image_size`` and permuted as asked."""
    if image_size is not None and (frame.height, frame.width) != tuple(image_size):
        frame = frame.reformat(
            width=int(image_size[1]), height=int(image_size[0]), format="rgb24", interpolation=INTERPOLATION
        )
    array = frame.to_ndarray(format="rgb24")
    return array.transpose(2, 0, 1) if channels_first else array


def image_to_rgb(array: np.ndarray, image_size: tuple[int, int] | None, channels_first: bool) -> np.ndarray:
    """A decoded HWC uint8 image (from a parquet image feature) through the same resize/permute."""
    import av

    if array.ndim == 2:
        array = np.repeat(array[..., None], 3, axis=-1)
    if array.shape[-1] == 4:
        array = array[..., :3]
    array = np.ascontiguousarray(array, dtype=np.uint8)
    return to_rgb(av.VideoFrame.from_ndarray(array, format="rgb24"), image_size, channels_first)


def decode(task: DecodeTask) -> tuple[str, str, str | None] | None:
    """Decode ``task`` into its output file; ``None`` on success, else ``(kind, message, path)``
    with ``kind`` ``"corrupt"`` (the MP4 is malformed) or ``"frames"`` (rows without a frame)."""
    import av

    n = len(task.timestamps)
    out = np.memmap(task.out, dtype=np.uint8, mode="r+", shape=(n + 1, *task.frame_shape))
    queries = task.from_timestamp + np.asarray(task.timestamps, dtype=np.float64)
    order = np.argsort(queries, kind="stable")
    sorted_q = queries[order]
    filled = np.zeros(n, dtype=bool)
    seen: list[float] = []
    tol = task.tolerance_s
    try:
        with av.open(task.video) as container:
            if not container.streams.video:
                return "corrupt", f"{task.where}: {task.label} has no video stream", task.video
            stream = container.streams.video[0]
            base = stream.time_base
            if base is None:
                return "corrupt", f"{task.where}: {task.label} has a video stream without a time base", task.video
            if task.from_timestamp > 0:
                container.seek(int(task.from_timestamp / base), stream=stream, backward=True, any_frame=False)
            last = float(sorted_q[-1]) + tol if n else -1.0
            for frame in container.decode(stream):
                if frame.pts is None:
                    continue
                ft = float(frame.pts * base)
                if ft > last:
                    break
                lo = int(np.searchsorted(sorted_q, ft - tol, side="right"))
                hi = int(np.searchsorted(sorted_q, ft + tol, side="left"))
                rows = [int(r) for r in order[lo:hi] if not filled[r]]
                if not rows:
                    continue
                seen.append(ft)
                pixels = to_rgb(frame, task.image_size, task.channels_first)
                if pixels.shape != task.frame_shape:
                    return (
                        "frames",
                        (
                            f"{task.where}: {task.label} decodes to frames of shape {pixels.shape}, not "
                            f"the {task.frame_shape} its feature declares"
                        ),
                        None,
                    )
                for r in rows:
                    out[r] = pixels
                    filled[r] = True
                if filled.all():
                    break
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        return "corrupt", f"{task.where}: cannot decode {task.label}: {exc}", task.video
    finally:
        out.flush()
        del out
    if not filled.all():
        row = int(np.flatnonzero(~filled)[0])
        ts = float(task.timestamps[row])
        found = (
            f"the last frame it decoded is at {seen[-1] - task.from_timestamp:.6f} s"
            if seen
            else "no frame of the episode was decoded"
        )
        return (
            "frames",
            (
                f"{task.where}: no frame of {task.label} within tolerance_s={tol} of timestamp {ts:.6f} s "
                f"(row {row} of {n}; {int((~filled).sum())} rows without a frame; {found}). The video is shorter "
                "than the episode or its timestamps are off the frame grid"
            ),
            None,
        )
    return None


def raise_error(result: tuple[str, str, str | None] | None) -> None:
    if result is None:
        return
    kind, message, path = result
    if kind == "corrupt":
        raise CorruptFile(message, path=path)
    raise LoaderError(message)


def _worker_init(build_process: int) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    threading.Thread(target=_exit_with, args=(build_process,), name="datasets_hub-decode-watch", daemon=True).start()


def _exit_with(build_process: int) -> None:
    """End this worker once the build process is gone. A build killed with SIGKILL cannot shut its pool down,
    and the workers (children of the fork server, each holding the pool's queues) would otherwise wait for
    tasks forever, with the fork server and whatever pipes they inherited."""
    while _alive(build_process):
        time.sleep(1.0)
    os._exit(1)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: a killed process stays a zombie until its parent reaps it (a parent that reads the
    build's output pipes, which the workers hold, reaps it only once they close: it must count as gone)."""
    try:
        os.kill(pid, 0)
    except OSError:  # gone, or its pid reused by another user's process
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # no /proc (macOS): the signal's answer
        return True
    return state not in ("Z", "X")


class DecodePool:
    """Decode tasks in ``num_workers`` processes (``<= 1``: in this process, when asked)."""

    def __init__(self, num_workers: int) -> None:
        self.num_workers = int(num_workers)
        self._pool: ProcessPoolExecutor | None = None
        if self.num_workers > 1:
            import multiprocessing

            context = multiprocessing.get_context("forkserver")
            # the fork server imports this module once (torch comes with it); workers fork from it
            context.set_forkserver_preload([__name__])
            self._pool = ProcessPoolExecutor(
                self.num_workers, mp_context=context, initializer=_worker_init, initargs=(os.getpid(),)
            )

    def submit(self, task: DecodeTask) -> Future[Any] | DecodeTask:
        """A future of the task's result (or the task itself, decoded later by :meth:`result`)."""
        if self._pool is None:
            return task
        return self._pool.submit(decode, task)

    @staticmethod
    def result(handle: Future[Any] | DecodeTask) -> None:
        raise_error(decode(handle) if isinstance(handle, DecodeTask) else handle.result())

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
