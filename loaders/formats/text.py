"""Text stored as tensors: UTF-8 bytes zero-padded to a fixed width per row (uint8 ``[n, W]``).

The core stores tensors only, and a fixed width keeps every chunk's schema equal. Loaders whose
upstream holds strings (Minari ``Text`` spaces, Open X language instructions, LeRobot tasks) write
them with :func:`encode_text`; users read them back with :func:`decode_text`::

    from datasets_hub.loaders.formats.text import decode_text
    decode_text(batch["observation", "mission"])  # -> list[str]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datasets_hub.errors import LoaderError

Key = tuple[str, ...]


def encode_text(values: Any, width: int, key: Key) -> np.ndarray:
    """Strings -> uint8 ``[n, width]``, UTF-8, zero-padded."""
    out = np.zeros((len(values), width), dtype=np.uint8)
    for i, value in enumerate(values):
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        if len(raw) > width:
            raise LoaderError(
                f"text value {value!r} under {'/'.join(key)!r} is {len(raw)} bytes, longer than the "
                f"{width} bytes its Text space allows; the dataset does not match its own space"
            )
        out[i, : len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    return out


def decode_text(rows: Any) -> list[str]:
    """uint8 ``[n, W]`` rows written for a ``Text`` space (tensor or array) -> list of str."""
    array = rows.numpy() if hasattr(rows, "numpy") else np.asarray(rows)
    if array.ndim == 1:
        array = array[None]
    return [bytes(row).rstrip(b"\0").decode("utf-8") for row in array.astype(np.uint8)]
