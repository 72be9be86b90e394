"""Row-by-row reads of the arrays inside a NumPy ``.npz`` file, in bounded memory.

``np.load`` on an npz decompresses a whole member at once: a 1M-frame 64x64x3 image array is 12 GB.
:class:`NpzFile` opens each member (stored or deflated) as a stream, parses its ``.npy`` header, and
hands out consecutive blocks of rows, so a loader can convert any file with a few chunks in memory.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from typing_extensions import Self

from datasets_hub.errors import CorruptFile, LoaderError


class NpzFile:
    """An open ``.npz``: ``keys``, ``header(key) -> (shape, dtype)``, ``read(key)`` (whole member),
    ``rows(key)`` (a :class:`RowStream`). Use as a context manager."""

    def __init__(self, path: str | Path, what: str) -> None:
        self.path, self.what = Path(path), what
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise CorruptFile(
                f"{what}: {self.path.name} is not a readable .npz (zip) file ({exc}); delete it and download again",
                path=self.path,
            ) from exc
        self._members = {n[:-4]: n for n in self._zip.namelist() if n.endswith(".npy")}
        self._headers: dict[str, tuple[tuple[int, ...], np.dtype]] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    @property
    def keys(self) -> list[str]:
        return sorted(self._members)

    def _open(self, key: str) -> tuple[Any, tuple[int, ...], np.dtype]:
        if key not in self._members:
            raise KeyError(key)
        try:
            stream = self._zip.open(self._members[key])
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
            else:
                raise ValueError(f"unsupported .npy format version {version}")
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            raise CorruptFile(f"{self.what}: cannot read {key!r} in {self.path.name}: {exc}", path=self.path) from exc
        if dtype.hasobject:
            raise LoaderError(f"{self.what}: {key!r} in {self.path.name} holds Python objects; refusing to unpickle it")
        if fortran and len(shape) > 1:
            raise LoaderError(
                f"{self.what}: {key!r} in {self.path.name} is stored in Fortran order, which this "
                "reader does not stream; rewrite the file with np.savez (C order)"
            )
        self._headers[key] = (tuple(shape), dtype)
        return stream, tuple(shape), dtype

    def header(self, key: str) -> tuple[tuple[int, ...], np.dtype]:
        if key not in self._headers:
            stream, _, _ = self._open(key)
            stream.close()
        return self._headers[key]

    def read(self, key: str) -> np.ndarray:
        """The whole member (for small arrays such as ``terminals``)."""
        stream = self.rows(key)
        try:
            return stream.read(stream.shape[0]) if stream.shape else stream.read_scalar()
        finally:
            stream.close()

    def rows(self, key: str) -> RowStream:
        stream, shape, dtype = self._open(key)
        return RowStream(stream, shape, dtype, key, self)


class RowStream:
    """Consecutive rows of one member: ``read(n)`` returns the next ``n`` rows as a native-endian array."""

    def __init__(self, stream: Any, shape: tuple[int, ...], dtype: np.dtype, key: str, owner: NpzFile) -> None:
        self._stream, self.shape, self.dtype, self.key, self._owner = stream, shape, dtype, key, owner
        self.row_shape = shape[1:]
        self.row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * dtype.itemsize
        self.position = 0

    def read(self, n: int) -> np.ndarray:
        if self.position + n > self.shape[0]:
            raise LoaderError(
                f"{self._owner.what}: asked for rows {self.position}..{self.position + n} of "
                f"{self.key!r}, which has {self.shape[0]}"
            )
        array = np.empty((n, *self.row_shape), dtype=self.dtype)
        view = array.reshape(-1).view(np.uint8).data if array.size else memoryview(b"")
        got = 0
        try:
            while got < len(view):
                k = self._stream.readinto(view[got:])
                if not k:
                    break
                got += k
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise CorruptFile(
                f"{self._owner.what}: cannot read {self.key!r} in {self._owner.path.name}: {exc}", path=self._owner.path
            ) from exc
        if got != len(view):
            raise CorruptFile(
                f"{self._owner.what}: {self.key!r} in {self._owner.path.name} ends after "
                f"{self.position + got // max(self.row_bytes, 1)} of its {self.shape[0]} rows "
                "(truncated file); delete it and download again",
                path=self._owner.path,
            )
        self.position += n
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        return array

    def read_scalar(self) -> np.ndarray:
        data = self._stream.read(self.dtype.itemsize)
        return np.frombuffer(data, dtype=self.dtype).reshape(()).copy()

    def close(self) -> None:
        self._stream.close()
