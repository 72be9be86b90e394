"""Compressed frames decoded on a device: nvJPEG through torchvision into device memory (docs/guide/compressed-frames.md).

Only JPEG has a device decoder here; every other codec, and any device without one, is decoded in the host's
frame threads (:class:`~datasets_hub.build.frames.FrameColumn`) and then copied to the device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from datasets_hub.build.frames import FrameColumn, FrameError

if TYPE_CHECKING:
    import torch


def device_decoder_available(device: torch.device | str) -> bool:
    """Whether frames can be decoded on ``device`` itself (CUDA with torchvision's nvJPEG)."""
    import torch

    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    try:
        from torchvision.io import decode_jpeg  # noqa: F401 - presence is the question
    except ImportError:
        return False
    return True


def decode_on_device(column: FrameColumn, rows: Any, device: torch.device | str) -> torch.Tensor:
    """The frames at ``rows`` as a uint8 tensor on ``device``.

    JPEG on CUDA with torchvision: one batched nvJPEG call over the rows' stored bytes, decoded straight
    into device memory (only the compressed bytes cross to the device). Anything else (PNG, h264, no
    torchvision, a CPU device): decoded in the host's frame threads, then copied. Unmeasured on a GPU here.
    """
    import torch

    device = torch.device(device)
    rows = np.asarray(rows, dtype=np.int64)
    if column.codec == "jpeg" and device_decoder_available(device):
        from torchvision.io import ImageReadMode, decode_jpeg

        flat = rows.reshape(-1)
        data = [torch.from_numpy(np.ascontiguousarray(b)) for b in column.encoded(flat.tolist())]
        shape = column.frame_shape
        channels = 1 if column.layout == "hw" else shape[2] if column.layout == "hwc" else shape[0]
        mode = ImageReadMode.GRAY if channels == 1 else ImageReadMode.RGB
        try:
            images = decode_jpeg(data, mode=mode, device=device)  # list of [C, H, W] on the device
        except RuntimeError as exc:
            raise FrameError(
                f"{column.key}: nvJPEG could not decode a frame among rows {flat[:8].tolist()}…: {exc}"
            ) from exc
        batch = torch.stack(images)
        if column.layout == "hwc":
            batch = batch.permute(0, 2, 3, 1)
        elif column.layout == "hw":
            batch = batch[:, 0]
        return batch.contiguous().reshape(*rows.shape, *column.frame_shape)
    return torch.from_numpy(column.take(rows)).to(device)
