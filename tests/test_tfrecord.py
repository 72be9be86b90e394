"""TFRecord framing and ``tf.train.Example`` decoding, on bytes these tests encode themselves.

The encoder below is written from the protobuf wire-format spec and TensorFlow's TFRecord framing,
independently of ``loaders.tfrecord``; ``tests/test_openx.py`` imports it to write RLDS shards. A
test checks that it writes exactly the bytes protobuf's own serializer writes for the same Example.
Known vectors pin the CRC: CRC-32C("123456789") = 0xE3069283 (RFC 3720 check value).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from datasets_hub.errors import LoaderError
from datasets_hub.loaders import tfrecord
from datasets_hub.loaders.tf_example import example_class, parse_example
from datasets_hub.loaders.tfrecord import iter_records, masked_crc32c


# ---------------------------------------------------------------------------------------- encoder
def _crc32c_bitwise(data: bytes) -> int:
    """Bit-by-bit CRC-32C (the slow, obviously-right form; independent of the loader's table)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 * (crc & 1))
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    crc = _crc32c_bitwise(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 -> 10-byte two's complement, as protobuf does
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def field(number: int, wire: int, payload: bytes | int) -> bytes:
    tag = varint((number << 3) | wire)
    if wire == 0:
        return tag + varint(int(payload))
    if wire == 2:
        return tag + varint(len(payload)) + payload
    return tag + payload  # fixed32/fixed64: payload already packed


def encode_feature(values, *, packed: bool = True) -> bytes:
    """One ``tf.train.Feature``: list of bytes/str -> bytes_list, float array -> float_list,
    int/bool array -> int64_list (packed by default, unpacked when ``packed=False``)."""
    if isinstance(values, (list, tuple)) and (not values or isinstance(values[0], (bytes, str))):
        body = b"".join(field(1, 2, v.encode() if isinstance(v, str) else v) for v in values)
        return field(1, 2, body)
    array = np.asarray(values).reshape(-1)
    if array.dtype.kind == "f":
        if packed:
            body = field(1, 2, array.astype("<f4").tobytes())
        else:
            body = b"".join(field(1, 5, struct.pack("<f", float(v))) for v in array)
        return field(2, 2, body)
    ints = [int(v) for v in array.astype(np.int64)]
    body = field(1, 2, b"".join(varint(v) for v in ints)) if packed else b"".join(field(1, 0, v) for v in ints)
    return field(3, 2, body)


def encode_example(features: dict, *, packed: bool = True) -> bytes:
    """A serialized ``tf.train.Example`` from ``{name: values}`` (see :func:`encode_feature`)."""
    entries = b"".join(
        field(1, 2, field(1, 2, name.encode()) + field(2, 2, encode_feature(values, packed=packed)))
        for name, values in features.items()
    )
    return field(1, 2, entries)


def frame(record: bytes) -> bytes:
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", _masked(length)) + record + struct.pack("<I", _masked(record))


def write_tfrecord(path: Path, records: list[bytes]) -> Path:
    Path(path).write_bytes(b"".join(frame(r) for r in records))
    return Path(path)


# ---------------------------------------------------------------------------------------- tests
def test_crc32c_known_vector_and_mask():
    assert tfrecord.crc32c(b"123456789") == 0xE3069283
    assert tfrecord._crc32c_python(b"123456789") == 0xE3069283
    data = bytes(range(256)) * 3
    assert tfrecord.crc32c(data) == _crc32c_bitwise(data) == tfrecord._crc32c_python(data)
    assert masked_crc32c(data) == _masked(data)
    assert isinstance(tfrecord.crc32c_implementation(), str)


def test_records_round_trip_with_offsets(tmp_path):
    records = [b"", b"a", bytes(range(200)) * 7, b"last"]
    path = write_tfrecord(tmp_path / "x.tfrecord", records)
    got = list(iter_records(path))
    assert [r for _, r in got] == records
    offsets, pos = [], 0
    for r in records:
        offsets.append(pos)
        pos += 16 + len(r)
    assert [o for o, _ in got] == offsets


@pytest.mark.parametrize("where", ["length_crc", "data", "data_crc"])
def test_bad_crc_names_file_and_offset(tmp_path, where):
    records = [b"first record", b"second record"]
    raw = bytearray(b"".join(frame(r) for r in records))
    second = 16 + len(records[0])
    flip = {"length_crc": second + 8, "data": second + 12 + 3, "data_crc": len(raw) - 1}[where]
    raw[flip] ^= 0x01
    path = tmp_path / "shard.tfrecord-00000-of-00001"
    path.write_bytes(bytes(raw))
    reader = iter_records(path)
    assert next(reader) == (0, records[0])  # the good record before the damage still reads
    with pytest.raises(LoaderError, match=rf"shard\.tfrecord-00000-of-00001.*offset {second}.*CRC"):
        next(reader)
    # without CRC checks a flipped data byte goes unnoticed: the check is what catches it
    if where == "data":
        assert [r for _, r in iter_records(path, check_crc=False)][1] != records[1]


def test_truncated_file_is_an_error(tmp_path):
    raw = frame(b"complete") + frame(b"cut short")[:-6]
    path = tmp_path / "t.tfrecord"
    path.write_bytes(raw)
    with pytest.raises(LoaderError, match=r"t\.tfrecord.*offset 24.*ends inside a record"):
        list(iter_records(path))


@pytest.mark.parametrize("packed", [True, False])
def test_parse_example_all_kinds(packed):
    floats = np.array([0.5, -1.25, 3e-8, np.inf], dtype=np.float32)
    ints = np.array([0, 1, 127, 128, 300, -1, -(2**63), 2**63 - 1], dtype=np.int64)
    blobs = [b"\xff\xd8jpeg-ish", "pick up the can", b""]
    parsed = parse_example(encode_example({"f": floats, "i": ints, "b": blobs, "empty": []}, packed=packed))
    np.testing.assert_array_equal(parsed["f"], floats)
    assert parsed["f"].dtype == np.float32
    np.testing.assert_array_equal(parsed["i"], ints)
    assert parsed["i"].dtype == np.int64
    assert parsed["b"] == [b"\xff\xd8jpeg-ish", b"pick up the can", b""]
    assert parsed["empty"] == []


def test_fixture_encoder_writes_what_protobuf_writes():
    """The tests' hand-written encoder agrees byte for byte with protobuf's serializer (packed, the
    proto3 default TFDS writes), so the fixtures are real ``tf.train.Example`` bytes."""
    values = {
        "f": np.array([0.5, -1.25], dtype=np.float32),
        "i": np.array([0, 300, -5, 2**40]),
        "b": [b"\x00jpeg", b"text"],
    }
    for name, kind in (("f", "float_list"), ("i", "int64_list"), ("b", "bytes_list")):
        example = example_class()()
        getattr(example.features.feature[name], kind).value.extend(
            values[name].tolist() if isinstance(values[name], np.ndarray) else values[name]
        )
        assert example.SerializeToString() == encode_example({name: values[name]}), name


def test_parse_example_skips_unknown_fields_and_rejects_garbage():
    body = encode_example({"x": [b"v"]})
    extra = field(15, 0, 7) + body  # an unknown top-level field before the features
    assert parse_example(extra) == {"x": [b"v"]}
    with pytest.raises(ValueError, match=r"not a tf\.train\.Example"):
        parse_example(b"\x0a\x05ab")  # length runs past the message
