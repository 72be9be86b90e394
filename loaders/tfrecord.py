"""TFRecord files and ``tf.train.Example`` protos, read without TensorFlow.

Two small, exact readers used by the Open X-Embodiment loader (and usable by any loader of
TFDS-prepared data):

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

:func:`parse_example` decodes one serialized ``tf.train.Example`` (protobuf wire format) into
``{feature name: values}``, where values are ``list[bytes]`` (``bytes_list``), a float32
``np.ndarray`` (``float_list``) or an int64 ``np.ndarray`` (``int64_list``). Packed and unpacked
repeated fields are both accepted (proto3 writers pack, old writers may not); unknown fields are
skipped as protobuf requires. The messages (from ``tensorflow/core/example/feature.proto``)::

    Example   { Features features = 1; }
    Features  { map<string, Feature> feature = 1; }
    Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed = true]; }
    Int64List { repeated int64 value = 1 [packed = true]; }
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Callable, Iterator, Union

import numpy as np

from datasets_hub.errors import CorruptFile

FeatureValues = Union[list, np.ndarray]
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
def iter_records(path: Path | str, *, check_crc: bool = True) -> Iterator[tuple[int, bytes]]:
    """Yield ``(byte offset, record bytes)`` for every record of the TFRecord file ``path``.

    Raises :class:`CorruptFile` naming the file and offset when a CRC does not match or the file
    ends inside a record (a truncated or corrupt download: delete the file and fetch it again).
    """
    path = Path(path)
    with open(path, "rb") as f:
        offset = 0
        while True:
            header = f.read(_HEADER.size)
            if not header:
                return
            if len(header) < _HEADER.size:
                raise CorruptFile(_bad(path, offset, f"the file ends inside a record header ({len(header)} of 12 bytes)"),
                                  path=path)
            length, length_crc = _HEADER.unpack(header)
            if check_crc and masked_crc32c(header[:8]) != length_crc:
                raise CorruptFile(_bad(path, offset, "the CRC of the record length does not match"), path=path)
            data = f.read(length)
            trailer = f.read(4)
            if len(data) < length or len(trailer) < 4:
                raise CorruptFile(_bad(path, offset, f"the file ends inside a record of {length} bytes"), path=path)
            if check_crc and masked_crc32c(data) != _U32.unpack(trailer)[0]:
                raise CorruptFile(_bad(path, offset, f"the CRC of the {length}-byte record data does not match"),
                                  path=path)
            yield offset, data
            offset += _HEADER.size + length + 4


def _bad(path: Path, offset: int, what: str) -> str:
    return (f"{path.name}: corrupt TFRecord at byte offset {offset}: {what}. The file is damaged or "
            f"incomplete; delete {path} and download it again (`datasets-hub verify` rehashes the cache).")


# ---------------------------------------------------------------------------------------- protobuf
def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _fields(buf: memoryview) -> Iterator[tuple[int, int, object]]:
    """``(field number, wire type, value)``: value is an int (varint, fixed32/64 raw) or a
    memoryview (length-delimited)."""
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > end:
                raise ValueError("length-delimited field runs past its message")
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 5:
            if pos + 4 > end:
                raise ValueError("truncated fixed32")
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == 1:
            if pos + 8 > end:
                raise ValueError("truncated fixed64")
            value, pos = buf[pos:pos + 8], pos + 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def decode_varints(data: bytes | memoryview) -> np.ndarray:
    """A packed run of varints -> int64 array (vectorised; int64 two's complement kept)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.flatnonzero(raw < 0x80)
    if ends.size == 0 or ends[-1] != raw.size - 1:
        raise ValueError("truncated packed varints")
    starts = np.concatenate([[0], ends[:-1] + 1])
    position = np.arange(raw.size) - np.repeat(starts, ends - starts + 1)
    if position.max() > 9:
        raise ValueError("varint longer than 10 bytes")
    parts = (raw & 0x7F).astype(np.uint64) << (7 * position).astype(np.uint64)
    return np.add.reduceat(parts, starts).view(np.int64)


def _feature(buf: memoryview) -> FeatureValues:
    for number, wire, value in _fields(buf):
        if number == 1 and wire == 2:  # BytesList
            return [bytes(v) for n, w, v in _fields(value) if n == 1 and w == 2]
        if number == 2 and wire == 2:  # FloatList
            pieces = []
            for n, w, v in _fields(value):
                if n == 1 and w == 2:
                    pieces.append(np.frombuffer(v, dtype="<f4"))
                elif n == 1 and w == 5:
                    pieces.append(np.frombuffer(v, dtype="<f4"))
            return np.concatenate(pieces).astype(np.float32) if pieces else np.zeros(0, np.float32)
        if number == 3 and wire == 2:  # Int64List
            pieces = []
            for n, w, v in _fields(value):
                if n == 1 and w == 2:
                    pieces.append(decode_varints(v))
                elif n == 1 and w == 0:
                    pieces.append(np.array([v], dtype=np.uint64).view(np.int64))
            return np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
    return []  # a Feature with no kind set: an empty list


def parse_example(data: bytes) -> dict[str, FeatureValues]:
    """Decode a serialized ``tf.train.Example`` (see the module docstring). Raises ``ValueError``
    on malformed bytes."""
    out: dict[str, FeatureValues] = {}
    for number, wire, features in _fields(memoryview(data)):
        if number != 1 or wire != 2:
            continue
        for n, w, entry in _fields(features):  # map entries of Features.feature
            if n != 1 or w != 2:
                continue
            key, value = None, memoryview(b"")
            for fn, fw, fv in _fields(entry):
                if fn == 1 and fw == 2:
                    key = bytes(fv).decode("utf-8")
                elif fn == 2 and fw == 2:
                    value = fv
            if key is None:
                raise ValueError("a feature map entry has no key")
            out[key] = _feature(value)
    return out
