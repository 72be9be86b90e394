"""TFDS ``features.json`` read into typed leaves, without TensorFlow (used by the Open X loader).

A TFDS RLDS dataset declares its features in ``features.json``: an episode ``FeaturesDict`` whose
``steps`` is a ``Dataset`` (sequence) of per-step features; TFDS flattens nested features with ``/``
in the ``tf.train.Example`` it writes. :func:`parse_features` walks that JSON into :class:`Leaf`
records: the feature path, what kind of data it holds, dtype, shape and encoding, or why it is
skipped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from datasets_hub.errors import LoaderError

Key = tuple[str, ...]

_DTYPES = {
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
}


@dataclass(frozen=True)
class Leaf:
    """One feature of ``features.json``: ``path`` under the episode (``("steps", "observation",
    "image")``), ``kind`` in tensor/image/text/skip, numpy ``dtype`` name (``"string"`` for text),
    ``shape`` (-1 where dynamic), tensor ``encoding`` or image ``fmt``; ``why`` for skipped ones."""

    path: Key
    kind: str
    dtype: str = "float32"
    shape: tuple[int, ...] = ()
    encoding: str = "none"
    why: str = ""

    @property
    def name(self) -> str:
        return "/".join(self.path)


def parse_features(features_json: Mapping[str, Any]) -> list[Leaf]:
    """The leaves of a TFDS ``features.json`` (an episode ``FeaturesDict`` with a ``steps``
    ``Dataset``), in a deterministic (sorted) order."""
    return sorted(_walk(features_json, (), in_steps=False), key=lambda leaf: leaf.path)


def _walk(node: Mapping[str, Any], path: Key, *, in_steps: bool) -> Iterator[Leaf]:
    if not isinstance(node, Mapping):
        raise LoaderError(f"features.json: {'/'.join(path) or 'the root'} is not an object")
    if "featuresDict" in node:
        for name, sub in (node["featuresDict"].get("features") or {}).items():
            yield from _walk(sub, (*path, str(name)), in_steps=in_steps)
    elif "sequence" in node:
        if path == ("steps",) and not in_steps:
            yield from _walk(node["sequence"].get("feature") or {}, path, in_steps=True)
        else:
            yield Leaf(path, "skip", why="a nested sequence (stored ragged by TFDS)")
    elif "tensor" in node or "classLabel" in node or "boundingBox" in node:
        spec = node.get("tensor") or node.get("boundingBox") or {}
        dtype = _dtype(spec.get("dtype") or ("int64" if "classLabel" in node else "float32"))
        shape = _shape(spec.get("shape"))
        encoding = str(spec.get("encoding") or "none").lower()
        if dtype == "string" and encoding == "none":
            yield Leaf(path, "text", "string", shape)
        elif dtype not in _DTYPES:
            yield Leaf(path, "skip", why=f"dtype {dtype!r} is not supported")
        elif encoding not in ("none", "bytes", "zlib"):
            yield Leaf(path, "skip", why=f"tensor encoding {encoding!r} is not supported")
        else:
            yield Leaf(path, "tensor", dtype, shape, encoding)
    elif "image" in node:
        spec = node["image"]
        dtype = _dtype(spec.get("dtype") or "uint8")
        shape = _shape(spec.get("shape"))
        if dtype not in ("uint8", "uint16", "float32") or len(shape) != 3:
            yield Leaf(path, "skip", why=f"image of dtype {dtype} and shape {list(shape)} is not supported")
        else:
            yield Leaf(path, "image", dtype, shape, str(spec.get("encodingFormat") or "png"))
    elif "text" in node:
        yield Leaf(path, "text", "string", ())
    else:
        kinds = sorted(k for k in node if k not in ("pythonClassName", "description", "metadata"))
        yield Leaf(path, "skip", why=f"feature kind {kinds or node.get('pythonClassName')} is not supported")


def _dtype(name: str) -> str:
    name = str(name).replace("tf.", "")
    return "string" if name in ("string", "str", "bytes") else name


def _shape(shape: Any) -> tuple[int, ...]:
    dims = (shape or {}).get("dimensions") or [] if isinstance(shape, Mapping) else (shape or [])
    return tuple(int(d) if d is not None else -1 for d in dims)
