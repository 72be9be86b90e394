"""TFRecord framing and ``tf.train.Example`` decoding, on bytes these tests encode themselves.

The encoder below is written from the protobuf wire-format spec and TensorFlow's TFRecord framing,
independently of ``datasets_hub.loaders.formats.tfrecord``; ``tests/test_openx.py`` imports it to write RLDS shards. A
test checks that it writes exactly the bytes protobuf's own serializer writes for the same Example.
Known vectors pin the CRC: CRC-32C("123456789") = 0xE3069283 (RFC 3720 check value).
"""

from __future__ import annotations

import numpy as np
import pytest

from datasets_hub.errors import LoaderError
from datasets_hub.loaders.formats import tfrecord
from datasets_hub.loaders.formats.tf_example import example_class, parse_example
from datasets_hub.loaders.formats.tfrecord import iter_records, masked_crc32c

from fixtures.tfrecord import (
    _crc32c_bitwise,
    _masked,
    encode_example,
    field,
    frame,
    write_tfrecord,
)


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


@pytest.mark.parametrize("length", [2**40, 5 << 30])
@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_huge_length_header_with_a_valid_crc_is_a_clear_error(tmp_path, length, compression):
    """A length of 2**40 (or 5 GiB, above the record cap) with a correct length CRC: a CorruptFile naming
    the file and offset, never a MemoryError (issue 27)."""
    import gzip
    import struct

    header = struct.pack("<Q", length)
    raw = frame(b"good") + header + struct.pack("<I", masked_crc32c(header)) + b"only a few bytes"
    path = tmp_path / "t.tfrecord"
    path.write_bytes(gzip.compress(raw) if compression else raw)
    with pytest.raises(LoaderError, match=r"t\.tfrecord.*offset 20.*(more than|ends inside)"):
        list(iter_records(path, compression=compression))


def test_a_length_past_the_end_reads_what_is_there_and_fails(tmp_path):
    import struct

    header = struct.pack("<Q", 100 << 20)  # under the cap, beyond the file: read in blocks, then refused
    path = tmp_path / "t.tfrecord"
    path.write_bytes(header + struct.pack("<I", masked_crc32c(header)) + b"x" * 10)
    with pytest.raises(LoaderError, match="ends inside a record of 104857600 bytes"):
        list(iter_records(path))
