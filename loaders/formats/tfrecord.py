"""TFRecord files, read without TensorFlow (used by the Open X-Embodiment loader, and usable by any
loader of TFDS-prepared data).

:func:`iter_records` streams the records of one TFRecord file, one at a time (memory: one
record). The framing of every record is::

    uint64 length            little-endian
    uint32 masked_crc32c(length bytes)
    bytes  data[length]
    uint32 masked_crc32c(data)

with ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8  (mod 2**32)`` over CRC-32C
(Castagnoli). Both CRCs are checked; a mismatch or a file cut inside a record raises
:class:`~datasets_hub.errors.CorruptFile` (a ``LoaderError``) naming the file and the record's byte
offset; the build then moves the file aside so that the next load downloads it again. CRC-32C
uses the C implementation of ``google-crc32c`` when installed (about 1 GB/s) and otherwise a
pure-Python table (a few MB/s: fine for tests, slow for 100 MB shards; the dataset card says which
one ran).

:func:`datasets_hub.loaders.formats.tf_example.parse_example` decodes the ``tf.train.Example`` protos the records hold.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from datasets_hub.errors import CorruptFile

_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")


# ---------------------------------------------------------------------------------------- crc32c
def _python_table() -> list[int]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE: list[int] | None = None


def _crc32c_python(data: bytes) -> int:
    global _TABLE
    if _TABLE is None:
        _TABLE = _python_table()
    table = _TABLE
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _pick_crc32c() -> tuple[Callable[[bytes], int], str]:
    try:
        import google_crc32c

        if getattr(google_crc32c, "implementation", "c") == "c":
            return google_crc32c.value, "google-crc32c (C)"
    except ImportError:
        pass
    return _crc32c_python, "pure Python (pip install google-crc32c for ~1 GB/s)"


_crc_impl: tuple[Callable[[bytes], int], str] | None = None


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``, as used by TFRecord."""
    global _crc_impl
    if _crc_impl is None:
        _crc_impl = _pick_crc32c()
    return _crc_impl[0](bytes(data))


def crc32c_implementation() -> str:
    """Which CRC-32C implementation runs (for the dataset card)."""
    global _crc_impl
    if _crc_impl is None:
        _crc_impl = _pick_crc32c()
    return _crc_impl[1]


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data``."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


# ---------------------------------------------------------------------------------------- records
MAX_RECORD_BYTES = 1 << 32  # one record (an episode with its frames) beyond 4 GiB is a damaged length header
_READ_BLOCK = 64 << 20


def iter_records(
    path: Path | str, *, check_crc: bool = True, compression: str | None = None
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(byte offset, record bytes)`` for every record of the TFRecord file ``path``.

    ``compression="gzip"`` reads a file written with ``TFRecordOptions(compression_type="GZIP")``
    (one gzip stream around the framed records, as RL Unplugged ships its shards); offsets are then
    positions in the decompressed stream. Raises :class:`CorruptFile` naming the file and offset
    when a CRC does not match, the file ends inside a record, or the gzip stream is damaged (a
    truncated or corrupt download: delete the file and fetch it again).
    """
    path = Path(path)
    if compression not in (None, "gzip"):
        raise ValueError(f"TFRecord compression must be None or 'gzip', got {compression!r}")
    with open(path, "rb") as raw:
        f: Any = gzip.GzipFile(fileobj=raw, mode="rb") if compression == "gzip" else raw
        offset = 0
        try:
            while True:
                header = f.read(_HEADER.size)
                if not header:
                    return
                if len(header) < _HEADER.size:
                    raise CorruptFile(
                        _bad(path, offset, f"the file ends inside a record header ({len(header)} of 12 bytes)"),
                        path=path,
                    )
                length, length_crc = _HEADER.unpack(header)
                if check_crc and masked_crc32c(header[:8]) != length_crc:
                    raise CorruptFile(_bad(path, offset, "the CRC of the record length does not match"), path=path)
                if length > MAX_RECORD_BYTES:
                    raise CorruptFile(
                        _bad(path, offset, f"a record of {length:,} bytes is declared, more than {MAX_RECORD_BYTES:,}"),
                        path=path,
                    )
                data = _read_up_to(f, length)  # a length past the end fails below, without allocating it first
                trailer = f.read(4)
                if len(data) < length or len(trailer) < 4:
                    raise CorruptFile(_bad(path, offset, f"the file ends inside a record of {length} bytes"), path=path)
                if check_crc and masked_crc32c(data) != _U32.unpack(trailer)[0]:
                    raise CorruptFile(
                        _bad(path, offset, f"the CRC of the {length}-byte record data does not match"), path=path
                    )
                yield offset, data
                offset += _HEADER.size + length + 4
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise CorruptFile(_bad(path, offset, f"the gzip stream is damaged ({exc})"), path=path) from exc


def _read_up_to(f: Any, length: int) -> bytes:
    """``length`` bytes of ``f``, fewer at its end; read in blocks, so a length header larger than what
    follows (a damaged file) costs no allocation of that size."""
    if length <= _READ_BLOCK:
        return bytes(f.read(length))
    parts = []
    while length > 0:
        part = f.read(min(length, _READ_BLOCK))
        if not part:
            break
        parts.append(part)
        length -= len(part)
    return b"".join(parts)


def _bad(path: Path, offset: int, what: str) -> str:
    return (
        f"{path.name}: corrupt TFRecord at byte offset {offset}: {what}. The file is damaged or "
        f"incomplete; delete {path} and download it again (`datasets-hub verify` rehashes the cache)."
    )
