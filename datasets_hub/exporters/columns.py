"""Values of one episode as the column types of parquet-based formats (LeRobot, Hugging Face)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np


def arrow_values(values: np.ndarray) -> Any:
    """``[T, *shape]`` -> a pyarrow array: scalars (and ``[1]``) flat, else nested fixed-size lists."""
    import pyarrow as pa

    if values.ndim == 1 or (values.ndim == 2 and values.shape[1] == 1):
        return pa.array(values.reshape(len(values)))
    array: Any = pa.array(np.ascontiguousarray(values).reshape(-1))
    for size in reversed(values.shape[1:]):
        array = pa.FixedSizeListArray.from_arrays(array, int(size))
    return array


def png_images(images: np.ndarray) -> Any:
    """uint8 ``[T, H, W, 3]`` / ``[T, H, W, 1]`` / ``[T, H, W]`` -> the ``{bytes, path}`` struct array
    that ``datasets``' ``Image`` feature (and LeRobot's ``image`` features) store; PNG, lossless."""
    import pyarrow as pa
    from PIL import Image

    encoded = []
    for image in images:
        plane = image[..., 0] if image.ndim == 3 and image.shape[-1] == 1 else image
        buffer = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(plane)).save(buffer, format="PNG", compress_level=1)
        encoded.append({"bytes": buffer.getvalue(), "path": None})
    return pa.array(encoded, type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))


class ParquetFile:
    """A parquet file written from episode tables, several episodes per row group.

    One row group per episode makes small groups (writing them costs twice as much as large ones);
    tables are held until ``group_rows`` rows or ``group_bytes`` bytes are waiting, so memory stays
    bounded (one row group) whatever the dataset size.
    """

    def __init__(self, path: Any, schema: Any, *, group_rows: int = 65536, group_bytes: int = 64 << 20) -> None:
        import pyarrow.parquet as pq

        self.writer = pq.ParquetWriter(str(path), schema)
        self.group_rows, self.group_bytes = group_rows, group_bytes
        self.waiting: list[Any] = []
        self.rows = self.bytes = 0

    def write(self, table: Any) -> None:
        self.waiting.append(table)
        self.rows += table.num_rows
        self.bytes += table.nbytes
        if self.rows >= self.group_rows or self.bytes >= self.group_bytes:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa

        if self.waiting:
            self.writer.write_table(pa.concat_tables(self.waiting))
        self.waiting, self.rows, self.bytes = [], 0, 0

    def close(self) -> None:
        self.flush()
        self.writer.close()
