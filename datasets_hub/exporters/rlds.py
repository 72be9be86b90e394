"""Export a build as an RLDS dataset in a TFDS builder directory (``tfds.builder_from_directory``).

Written without TensorFlow::

    dataset_info.json                               name, version, split "train" with its shard lengths
    features.json                                   the episode FeaturesDict: ``steps`` (a Dataset of
                                                    per-step features) and ``episode_metadata``
    <name>-train.tfrecord-00000-of-0000N            TFRecord shards, one ``tf.train.Example`` per episode

**Mapping** (RLDS's own convention: an episode of ``T`` transitions is ``T + 1`` steps, the last
of which holds only the final observation):

- ``steps/observation``: the observation at every step, the final next observation on step T.
  One observation key ``observation`` is a feature of its own; several are a FeaturesDict (a
  leading ``observation`` level dropped, as for Minari). A key whose next values the build stores
  per step cannot be held (one observation per step): refused;
- ``steps/action`` (``action`` or a FeaturesDict of ``action/...``), ``steps/reward``
  (``next/reward``, a scalar), and every other per-step key ``a/b`` as ``steps/a/b``
  (``info/...``, ``task``, ...): steps 0..T-1; step T holds zeros (RLDS: undefined there);
- ``steps/is_first`` (step 0), ``steps/is_last`` (step T), ``steps/is_terminal`` (step T when the
  episode's last transition is terminated: a truncated episode is ``is_last`` without
  ``is_terminal``); ``steps/discount``: 0 after a terminated transition, else 1;
- ``episode_metadata/episode_id``: the build's episode id;
- dtypes: uint8 ``[H, W, 3]`` / ``[H, W, 1]`` values are PNG ``Image`` features (lossless);
  float32 travels as ``float_list``, bool and integers up to 32 bits (and int64) as ``int64_list``;
  float64, float16 and uint64 as raw bytes (``Tensor`` encoding ``bytes``), so every value is exact.

Options: ``name`` (the TFDS dataset name; default from the build id, ``[a-z0-9_]``), ``version``
(default ``"1.0.0"``), ``shard_mb`` (default 200). Needs ``google-crc32c`` (TFRecord checksums)
and ``pillow`` (PNG).
"""

from __future__ import annotations

import io
import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from datasets_hub.buffers.nested_keys import Key
from datasets_hub.errors import InvalidParameter, MissingDependency
from datasets_hub.exporters.episodes import REWARD, TERMINATED, TRUNCATED, BuildEpisodes, Episode, group_paths

OPTIONS = ("name", "version", "shard_mb")
FILE_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_TFDS = "tensorflow_datasets.core.features."
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
_MASK_DELTA = 0xA282EAD8
#: dtypes written as raw bytes (tf.train.Example has only float32 and int64 lists)
_AS_BYTES = ("float64", "float16", "uint64")


@dataclass(frozen=True)
class Leaf:
    """One per-step feature: its path under ``steps/``, where its values come from, how it is stored."""

    path: tuple[str, ...]
    key: Key | None  #: the build key; None for the RLDS flags, computed per episode
    observation: bool
    dtype: np.dtype
    shape: tuple[int, ...]
    kind: str  #: "image", "tensor" or "scalar"

    def feature(self) -> dict[str, Any]:
        if self.kind == "image":
            dims = [str(d) for d in self.shape]
            return {
                "pythonClassName": _TFDS + "image_feature.Image",
                "image": {"shape": {"dimensions": dims}, "dtype": "uint8", "encodingFormat": "png"},
            }
        encoding = "bytes" if str(self.dtype) in _AS_BYTES else "none"
        if self.kind == "scalar" and encoding == "none":  # TFDS's Scalar has no encoding: raw bytes need a Tensor
            return {
                "pythonClassName": _TFDS + "scalar.Scalar",
                "tensor": {"shape": {}, "dtype": str(self.dtype), "encoding": encoding},
            }
        return {
            "pythonClassName": _TFDS + "tensor_feature.Tensor",
            "tensor": {
                "shape": {"dimensions": [str(d) for d in self.shape]},
                "dtype": str(self.dtype),
                "encoding": encoding,
            },
        }


@dataclass
class Plan:
    name: str
    version: str
    shard_bytes: int
    leaves: list[Leaf]


def _default_name(build_id: Any) -> str:
    name = re.sub(r"[^a-z0-9]+", "_", str(build_id or "dataset").lower()).strip("_")
    return name if _NAME_RE.match(name) else f"d_{name}"


def _leaf(path: tuple[str, ...], key: Key, observation: bool, dtype: np.dtype, shape: tuple[int, ...]) -> Leaf:
    if dtype == np.uint8 and len(shape) == 3 and shape[-1] in (1, 3):
        kind = "image"
    else:
        kind = "scalar" if shape == () else "tensor"
    return Leaf(path, key, observation, dtype, shape, kind)


def plan(episodes: BuildEpisodes, out: Path, options: dict[str, Any]) -> Plan:
    """Check the build and the options (see the module docstring); nothing is written."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InvalidParameter(f"format='rlds' has no option {unknown[0]!r}; its options are {', '.join(OPTIONS)}")
    try:
        import google_crc32c  # noqa: F401 - imported to check it is installed, before anything is written
        import PIL  # noqa: F401 - imported to check it is installed, before anything is written
    except ImportError as exc:
        raise MissingDependency(
            "exporting to RLDS needs google-crc32c and pillow: pip install google-crc32c pillow"
        ) from exc
    name = options.get("name", _default_name(episodes.build.manifest.get("id")))
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidParameter(f"name must be a TFDS dataset name (lower case, digits, '_'), got {name!r}")
    version = options.get("version", "1.0.0")
    if not isinstance(version, str) or not _VERSION_RE.match(version):
        raise InvalidParameter(f"version must look like '1.0.0', got {version!r}")
    mb = options.get("shard_mb", 200)
    if isinstance(mb, bool) or not isinstance(mb, (int, float)) or not mb > 0:
        raise InvalidParameter(f"shard_mb must be a positive number of megabytes, got {mb!r}")
    actions = episodes.require_one_observation_per_step_with_action_and_reward(
        "an RLDS step holds one observation", "every RLDS step has an action and a reward"
    )
    steps = set(episodes.step_keys)
    leaves: list[Leaf] = []
    for key, path in group_paths(list(episodes.observation_keys), "observation", "RLDS FeaturesDict").items():
        c = episodes.column(key)
        leaves.append(_leaf(("observation", *path), key, True, c.dtype, c.shape))
    for key, path in group_paths(actions, "action", "RLDS FeaturesDict").items():
        c = episodes.column(key)
        leaves.append(_leaf(("action", *path), key, False, c.dtype, c.shape))
    reward = episodes.column(REWARD)
    if reward.shape not in ((), (1,)):
        raise InvalidParameter(f"next/reward has shape {list(reward.shape)}; an RLDS reward is one value per step")
    leaves.append(Leaf(("reward",), REWARD, False, reward.dtype, (), "scalar"))
    reserved = {
        ("observation",),
        ("action",),
        ("reward",),
        ("discount",),
        ("is_first",),
        ("is_last",),
        ("is_terminal",),
    }
    for key in sorted(steps - {*actions, REWARD, TERMINATED, TRUNCATED}):
        if key[:1] in reserved or any(not part for part in key):
            raise InvalidParameter(f"key {'/'.join(key)!r} would collide with an RLDS step feature; rename it")
        c = episodes.column(key)
        leaves.append(_leaf(key, key, False, c.dtype, c.shape))
    for flag, dtype in (
        ("discount", np.float32),
        ("is_first", np.bool_),
        ("is_last", np.bool_),
        ("is_terminal", np.bool_),
    ):
        leaves.append(Leaf((flag,), None, False, np.dtype(dtype), (), "scalar"))
    return Plan(name=name, version=version, shard_bytes=int(mb * (1 << 20)), leaves=leaves)


def _features_json(plan: Plan) -> dict[str, Any]:
    def features_dict(features: dict[str, Any]) -> dict[str, Any]:
        return {"pythonClassName": _TFDS + "features_dict.FeaturesDict", "featuresDict": {"features": features}}

    tree: dict[str, Any] = {}
    for leaf in plan.leaves:
        node = tree
        for part in leaf.path[:-1]:
            node = node.setdefault(part, {})
        node[leaf.path[-1]] = leaf.feature()

    def build(node: dict[str, Any]) -> dict[str, Any]:
        return features_dict({k: v if "pythonClassName" in v else build(v) for k, v in node.items()})

    return features_dict(
        {
            "steps": {
                "pythonClassName": _TFDS + "dataset_feature.Dataset",
                "sequence": {"feature": build(tree), "length": "-1"},
            },
            "episode_metadata": features_dict(
                {
                    "episode_id": {
                        "pythonClassName": _TFDS + "scalar.Scalar",
                        "tensor": {"shape": {}, "dtype": "int64", "encoding": "none"},
                    }
                }
            ),
        }
    )


# -- tf.train.Example, encoded by hand (proto3 wire format) --------------------------------------
def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 as protobuf writes it: negative values take ten bytes
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varints(values: np.ndarray) -> bytes:
    """int64 values as packed protobuf varints, vectorised (10 bytes at most each)."""
    u = values.astype(np.int64).view(np.uint64)
    if not len(u):
        return b""
    groups = np.stack([(u >> np.uint64(7 * i)) & np.uint64(0x7F) for i in range(10)], axis=1).astype(np.uint8)
    rest = np.stack([(u >> np.uint64(7 * (i + 1))) != 0 for i in range(10)], axis=1)
    groups[rest] |= 0x80
    keep = np.concatenate([np.ones((len(u), 1), dtype=bool), rest[:, :-1]], axis=1)
    return groups[keep].tobytes()


def _feature(values: Any, kind: str) -> bytes:
    """A ``tf.train.Feature``: kind 1 bytes_list, 2 float_list, 3 int64_list."""
    if kind == "bytes":
        inner = b"".join(_field(1, v) for v in values)
        return _field(1, inner)
    if kind == "float":
        return _field(2, _field(1, np.ascontiguousarray(values, dtype="<f4").tobytes()))
    return _field(3, _field(1, _varints(np.asarray(values))))


def _example(features: dict[str, bytes]) -> bytes:
    entries = b"".join(_field(1, _field(1, name.encode()) + _field(2, value)) for name, value in features.items())
    return _field(1, entries)  # Example.features (field 1) holding Features.feature entries (field 1)


def _masked_crc(data: bytes) -> int:
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked_crc(length)) + data + struct.pack("<I", _masked_crc(data))


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    plane = image[..., 0] if image.shape[-1] == 1 else image
    Image.fromarray(np.ascontiguousarray(plane)).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def _steps_values(leaf: Leaf, episode: Episode) -> np.ndarray:
    """``[T + 1, *shape]`` values of one step feature (step T: the final observation, else zeros)."""
    n = episode.length
    if leaf.key is None:
        terminated = bool(episode.steps[TERMINATED].reshape(n)[-1]) if n else False
        values = np.zeros(n + 1, dtype=leaf.dtype)
        if leaf.path == ("discount",):
            values[:n] = 1.0 - episode.steps[TERMINATED].reshape(n)
        elif leaf.path == ("is_first",):
            values[0] = True
        elif leaf.path == ("is_last",):
            values[n] = True
        else:  # is_terminal
            values[n] = terminated
        return values
    if leaf.observation:
        return episode.observations[leaf.key]
    values = episode.steps[leaf.key].reshape(n, *leaf.shape)
    return np.concatenate([values, np.zeros((1, *leaf.shape), dtype=values.dtype)])


def _encode_episode(plan: Plan, episode: Episode) -> bytes:
    features: dict[str, bytes] = {}
    for leaf in plan.leaves:
        values = _steps_values(leaf, episode)
        name = "steps/" + "/".join(leaf.path)
        if leaf.kind == "image":
            features[name] = _feature([_png(v) for v in values], "bytes")
        elif str(leaf.dtype) in _AS_BYTES:
            features[name] = _feature(
                [np.ascontiguousarray(v).astype(v.dtype.newbyteorder("<")).tobytes() for v in values], "bytes"
            )
        elif leaf.dtype == np.float32:
            features[name] = _feature(values.reshape(-1), "float")
        else:
            features[name] = _feature(values.reshape(-1).astype(np.int64), "int64")
    features["episode_metadata/episode_id"] = _feature(np.array([episode.id]), "int64")
    return _example(features)


def write(plan: Plan, episodes: BuildEpisodes, staging: Path, progress: Any) -> None:
    """Write the shards (one episode per record, one record in memory at a time), then the JSON files."""
    shards: list[tuple[Path, int]] = []  # (file, episodes in it)
    handle: Any = None
    shard_bytes = total_bytes = 0
    try:
        for episode in episodes:
            record = _record(_encode_episode(plan, episode))
            if handle is not None and shard_bytes >= plan.shard_bytes:
                handle.close()
                handle, shard_bytes = None, 0
            if handle is None:
                shards.append((staging / f"shard-{len(shards):05d}", 0))
                handle = open(shards[-1][0], "wb")  # noqa: SIM115 - closed when the shard is full or in finally
            handle.write(record)
            shards[-1] = (shards[-1][0], shards[-1][1] + 1)
            shard_bytes += len(record)
            total_bytes += len(record)
            progress.update(episode.length)
    finally:
        if handle is not None:
            handle.close()
    for index, (path, _) in enumerate(shards):
        path.rename(staging / f"{plan.name}-train.tfrecord-{index:05d}-of-{len(shards):05d}")
    (staging / "features.json").write_text(json.dumps(_features_json(plan), indent=1))
    manifest = episodes.build.manifest
    info = {
        "name": plan.name,
        "version": plan.version,
        "fileFormat": "tfrecord",
        "description": (manifest.get("metadata") or {}).get("description")
        or f"{manifest.get('id')} exported by datasets_hub (build {manifest.get('fingerprint')})",
        "splits": [
            {
                "name": "train",
                "numBytes": str(total_bytes),
                "shardLengths": [str(count) for _, count in shards],
                "filepathTemplate": FILE_TEMPLATE,
            }
        ],
    }
    (staging / "dataset_info.json").write_text(json.dumps(info, indent=1))
