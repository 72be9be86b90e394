"""``tf.train.Example`` protos decoded with the ``protobuf`` library, without TensorFlow.

The message types are declared here from TensorFlow's ``tensorflow/core/example/feature.proto``
and ``example.proto`` (package ``tensorflow``), in a private descriptor pool so that they never
clash with TensorFlow's own registration when both are installed::

    Example   { Features features = 1; }
    Features  { map<string, Feature> feature = 1; }
    Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed = true]; }
    Int64List { repeated int64 value = 1 [packed = true]; }

protobuf accepts packed and unpacked repeated fields alike and skips unknown fields, as the wire
format requires; malformed bytes raise ``ValueError``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

FeatureValues = list | np.ndarray

_LABEL_OPTIONAL, _LABEL_REPEATED = 1, 3
_TYPE_FLOAT, _TYPE_INT64, _TYPE_STRING, _TYPE_MESSAGE, _TYPE_BYTES = 2, 3, 9, 11, 12


@functools.lru_cache(maxsize=1)
def example_class() -> Any:
    """The ``tensorflow.Example`` message class (built once per process)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(
        name="datasets_hub/tf_example.proto", package="tensorflow", syntax="proto3"
    )

    def message(name: str, fields: list[tuple], nested: list | None = None, oneof: str | None = None) -> Any:
        msg = proto.message_type.add(name=name)
        if oneof:
            msg.oneof_decl.add(name=oneof)
        for number, field_name, label, kind, type_name in fields:
            field = msg.field.add(name=field_name, number=number, label=label, type=kind)
            if type_name:
                field.type_name = type_name
            if oneof:
                field.oneof_index = 0
        for entry in nested or []:
            msg.nested_type.append(entry)
        return msg

    message("BytesList", [(1, "value", _LABEL_REPEATED, _TYPE_BYTES, None)])
    message("FloatList", [(1, "value", _LABEL_REPEATED, _TYPE_FLOAT, None)])
    message("Int64List", [(1, "value", _LABEL_REPEATED, _TYPE_INT64, None)])
    message(
        "Feature",
        [
            (1, "bytes_list", _LABEL_OPTIONAL, _TYPE_MESSAGE, ".tensorflow.BytesList"),
            (2, "float_list", _LABEL_OPTIONAL, _TYPE_MESSAGE, ".tensorflow.FloatList"),
            (3, "int64_list", _LABEL_OPTIONAL, _TYPE_MESSAGE, ".tensorflow.Int64List"),
        ],
        oneof="kind",
    )
    entry = descriptor_pb2.DescriptorProto(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=_LABEL_OPTIONAL, type=_TYPE_STRING)
    entry.field.add(name="value", number=2, label=_LABEL_OPTIONAL, type=_TYPE_MESSAGE, type_name=".tensorflow.Feature")
    message(
        "Features",
        [(1, "feature", _LABEL_REPEATED, _TYPE_MESSAGE, ".tensorflow.Features.FeatureEntry")],
        nested=[entry],
    )
    message("Example", [(1, "features", _LABEL_OPTIONAL, _TYPE_MESSAGE, ".tensorflow.Features")])

    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


def parse_example(data: bytes) -> dict[str, FeatureValues]:
    """Decode a serialized ``tf.train.Example`` into ``{feature name: values}``: ``list[bytes]``
    (``bytes_list``), a float32 array (``float_list``), an int64 array (``int64_list``), or ``[]``
    for a feature with no kind set. Raises ``ValueError`` on malformed bytes."""
    from google.protobuf.message import DecodeError

    example = example_class()()
    try:
        example.ParseFromString(data)
    except DecodeError as exc:
        raise ValueError(f"not a tf.train.Example: {exc}") from None
    out: dict[str, FeatureValues] = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        if kind == "bytes_list":
            out[name] = list(feature.bytes_list.value)
        elif kind == "float_list":
            out[name] = np.array(feature.float_list.value, dtype=np.float32)
        elif kind == "int64_list":
            out[name] = np.array(feature.int64_list.value, dtype=np.int64)
        else:
            out[name] = []
    return out
