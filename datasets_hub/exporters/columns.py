"""Values of one episode as the column types of parquet-based formats (LeRobot, Hugging Face)."""

from __future__ import annotations

import io
from concurrent.futures import Future, ThreadPoolExecutor
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


def encoding_options(schema: Any) -> dict[str, Any]:
    """``ParquetWriter`` options for episode tables: dictionary encoding for the scalar integer, bool and
    string columns (episode and task indices, flags: few distinct values) and none for the rest, where
    pyarrow's default tries a dictionary on every column (on float observations and PNG bytes it fills
    a dictionary page, gives up, and writes plain: most of an export's time); min/max statistics for
    scalar columns only (nested lists of floats gain nothing from them). Readers see the same values."""
    import pyarrow as pa

    scalar = [f.name for f in schema if not pa.types.is_nested(f.type)]
    small = [
        f.name
        for f in schema
        if pa.types.is_integer(f.type) or pa.types.is_boolean(f.type) or pa.types.is_string(f.type)
    ]
    return {"use_dictionary": small, "write_statistics": scalar}


class ParquetFile:
    """A parquet file written from episode tables, several episodes per row group.

    One row group per episode makes small groups (writing them costs twice as much as large ones);
    tables are held until ``group_rows`` rows or ``group_bytes`` bytes are waiting. A full row group is
    encoded in a thread of its own (pyarrow releases the GIL) while the caller prepares the next
    episodes, so memory stays bounded by two row groups whatever the dataset size; an error of that
    thread is raised by the next ``write``/``close``. Columns are encoded as :func:`encoding_options` says.
    """

    def __init__(self, path: Any, schema: Any, *, group_rows: int = 65536, group_bytes: int = 64 << 20) -> None:
        import pyarrow.parquet as pq

        self.writer = pq.ParquetWriter(str(path), schema, **encoding_options(schema))
        self.group_rows, self.group_bytes = group_rows, group_bytes
        self.waiting: list[Any] = []
        self.rows = self.bytes = 0
        self.encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="datasets_hub_parquet")
        self.encoding: Future | None = None  # the row group being written

    def write(self, table: Any) -> None:
        self.waiting.append(table)
        self.rows += table.num_rows
        self.bytes += table.nbytes
        if self.rows >= self.group_rows or self.bytes >= self.group_bytes:
            self.flush()

    def _finish_encoding(self) -> None:
        encoding, self.encoding = self.encoding, None
        if encoding is not None:
            encoding.result()  # the thread's error, if any, surfaces here

    def flush(self) -> None:
        import pyarrow as pa

        if self.waiting:
            group = pa.concat_tables(self.waiting)
            self._finish_encoding()  # one row group in the thread at a time: row groups stay in order
            self.encoding = self.encoder.submit(self.writer.write_table, group)
        self.waiting, self.rows, self.bytes = [], 0, 0

    def close(self) -> None:
        try:
            self.flush()
            self._finish_encoding()
        finally:
            self.encoder.shutdown(wait=True)
            self.writer.close()
