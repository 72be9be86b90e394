"""Open X-Embodiment episodes: RLDS ``tf.train.Example`` records to TED chunks (see :mod:`.loader` for the contract).

:class:`EpisodeConverter` reads the shards one record (one episode) at a time, decodes every leaf
``features.json`` describes (images as TFDS does, text to fixed-width bytes, narrow unsigned ints
widened), checks that every episode has the schema of the first, and yields chunks of whole
episodes of about ``CHUNK_BYTES``.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from datasets_hub.errors import LoaderError
from datasets_hub.loader import DatasetSpec, LoaderContext
from datasets_hub.loaders.formats.image_decode import decode_uint8, is_jpeg
from datasets_hub.loaders.formats.text import encode_text
from datasets_hub.loaders.formats.tfds_features import Leaf

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    from tensordict import TensorDictBase

CHUNK_BYTES = 128 << 20
UNKNOWN_KEY = ("info", "next_observation_unknown")
_RESERVED = {"episode", "step", "done", "terminated", "truncated", "next", "info", "observation", "action"}
_FLAGS = ("is_first", "is_last", "is_terminal")
_WIDEN = {"uint16": "int32", "uint32": "int64"}

Key = tuple[str, ...]


# ---------------------------------------------------------------------------------------- episodes
class EpisodeConverter:
    """Shards in, TED chunks of whole episodes out (one record decoded at a time)."""

    def __init__(
        self,
        spec: DatasetSpec,
        leaves: list[Leaf],
        ctx: LoaderContext,
        *,
        final_step: str,
        text_width: int,
        jpeg_decoder: str = "tfds",
    ) -> None:
        self.spec, self.ctx, self.final_step, self.text_width = spec, ctx, final_step, text_width
        self.jpeg_decoder = jpeg_decoder
        self.image_formats: dict[str, int] = {}
        self.skipped = {leaf.name: leaf.why for leaf in leaves if leaf.kind == "skip"}
        usable = []
        for leaf in leaves:
            if leaf.kind == "skip":
                continue
            if leaf.kind in ("tensor", "text") and any(d < 0 for d in leaf.shape):
                self.skipped[leaf.name] = f"dynamic shape {list(leaf.shape)} (rows of one key must share a shape)"
            elif leaf.kind == "text" and leaf.shape:
                self.skipped[leaf.name] = f"a text tensor of shape {list(leaf.shape)} (only scalar text is kept)"
            else:
                usable.append(leaf)
        self.step_leaves = [x for x in usable if x.path[0] == "steps" and len(x.path) > 1]
        self.episode_leaves = [x for x in usable if x.path[0] != "steps"]
        if not self.step_leaves:
            raise LoaderError(
                f"{spec.id}: features.json has no usable 'steps' features, so it is not an RLDS dataset "
                f"(skipped: {self.skipped})"
            )
        self.has_reward = any(x.path[1:] == ("reward",) for x in self.step_leaves)
        self.schema: dict[Key, tuple[np.dtype, tuple[int, ...]]] | None = None
        self.records: dict[str, int] = {}
        self.length_mismatch: dict[str, dict[str, int]] = {}
        self.ends = {"terminal": 0, "truncated": 0}
        self.anomalies = {"is_first_not_only_first": 0, "is_last_not_only_last": 0, "is_terminal_before_last": 0}
        self.skipped_episodes = {"no_steps": 0, "one_step_with_final_step_observation": 0}
        self.unknown_rows = 0
        self.widened: dict[str, str] = {}

    # -- one feature ----------------------------------------------------------------------------
    def _values(self, example: Mapping[str, Any], leaf: Leaf, where: str) -> Any:
        if leaf.name not in example:
            raise LoaderError(
                f"{self.spec.id}: {where} has no feature {leaf.name!r} although features.json "
                f"declares it; the shard does not match its features.json"
            )
        return example[leaf.name]

    def _decode(self, leaf: Leaf, values: Any, count: int, where: str) -> np.ndarray:
        bad = f"{self.spec.id}: {where}: feature {leaf.name!r}"
        if leaf.kind == "tensor" and leaf.encoding == "none":
            if isinstance(values, list):
                raise LoaderError(f"{bad} holds bytes but features.json declares a {leaf.dtype} tensor")
            per = int(np.prod(leaf.shape, dtype=np.int64))
            if values.size != count * per:
                raise LoaderError(
                    f"{bad} has {values.size} values; {count} steps of shape {list(leaf.shape)} need {count * per}"
                )
            array = values.reshape(count, *leaf.shape)
            return array != 0 if leaf.dtype == "bool" else array.astype(leaf.dtype, copy=False)
        if not isinstance(values, list) or len(values) != count:
            got = len(values) if isinstance(values, list) else f"a numeric list of {values.size}"
            raise LoaderError(f"{bad} should hold {count} byte strings (one per step), got {got}")
        if leaf.kind == "text":
            longest = max((len(v) for v in values), default=0)
            if longest > self.text_width:
                raise LoaderError(
                    f"{bad} holds a {longest}-byte text, longer than text_width={self.text_width}; "
                    f"load with text_width={max(longest, 2 * self.text_width)}"
                )
            return encode_text(values, self.text_width, leaf.path)
        if leaf.kind == "image":
            return (
                np.stack([self._image(leaf, blob, bad) for blob in values])
                if values
                else np.zeros((0, *leaf.shape), dtype=leaf.dtype)
            )
        # tensor stored as raw bytes (Encoding.BYTES / ZLIB): numpy's little-endian buffer per step
        rows = []
        for blob in values:
            raw = zlib.decompress(blob) if leaf.encoding == "zlib" else blob
            try:
                rows.append(np.frombuffer(raw, dtype=np.dtype(leaf.dtype).newbyteorder("<")).reshape(leaf.shape))
            except ValueError as exc:
                raise LoaderError(
                    f"{bad}: {len(raw)} bytes do not make a {leaf.dtype} tensor of shape {list(leaf.shape)}"
                ) from exc
        return np.stack(rows).astype(leaf.dtype) if rows else np.zeros((0, *leaf.shape), dtype=leaf.dtype)

    def _image(self, leaf: Leaf, blob: bytes, bad: str) -> np.ndarray:
        from PIL import Image, UnidentifiedImageError

        channels = leaf.shape[2]
        kind = "jpeg" if is_jpeg(blob) else "other"
        self.image_formats[kind] = self.image_formats.get(kind, 0) + 1
        if leaf.dtype == "uint8":
            try:
                array = decode_uint8(blob, channels, self.jpeg_decoder)
            except LoaderError as exc:
                raise LoaderError(f"{bad}: {exc}") from exc
        else:
            try:
                with Image.open(io.BytesIO(blob)) as image:
                    if leaf.dtype == "float32":  # TFDS stores float32 pixels as 4 PNG bytes (RGBA)
                        array = np.asarray(image.convert("RGBA")).copy().view("<f4").astype(np.float32)
                    else:
                        array = np.asarray(image).astype(np.uint16)
            except (UnidentifiedImageError, OSError) as exc:
                raise LoaderError(f"{bad}: an image that Pillow cannot decode ({exc})") from exc
        if array.ndim == 2:
            array = array[:, :, None]
        expected = tuple(d if d >= 0 else array.shape[i] for i, d in enumerate(leaf.shape))
        if array.shape != expected:
            raise LoaderError(
                f"{bad}: decoded image has shape {list(array.shape)}, features.json says {list(leaf.shape)}"
            )
        return array

    def _widen(self, leaf: Leaf, array: np.ndarray) -> np.ndarray:
        """uint16/uint32 -> int32/int64: torch cannot copy rows of unsigned types beyond uint8
        (``index_copy_`` is not implemented for UInt16), so the values are kept exactly, one size up."""
        wider = _WIDEN.get(array.dtype.name)
        if wider is None:
            return array
        self.widened[leaf.name] = f"{array.dtype.name} -> {wider}"
        return array.astype(wider)

    # -- one episode ----------------------------------------------------------------------------
    def _target(self, rest: Key) -> Key | None:
        if rest[0] in ("observation", "action"):
            return rest
        if rest in (("reward",), ("discount",)):
            return ("next", *rest)
        if rest[0] in _FLAGS and len(rest) == 1:
            return None
        return ("info", *rest) if rest[0] in _RESERVED else rest

    def convert(self, example: Mapping[str, Any], where: str, episode_id: int) -> dict[Key, np.ndarray] | None:
        """The TED columns of one episode, or ``None`` when it yields no row (counted)."""
        first = next((x for x in self.step_leaves if x.path[1:] == ("is_first",)), self.step_leaves[0])
        values = self._values(example, first, where)
        if isinstance(values, list):
            steps = len(values)
        elif first.kind == "tensor" and first.encoding == "none":
            steps = values.size // max(1, int(np.prod(first.shape, dtype=np.int64)))
        else:
            steps = len(values)
        if steps == 0:
            self.skipped_episodes["no_steps"] += 1
            return None
        observation_mode = self.final_step == "observation"
        if observation_mode and steps < 2:
            self.skipped_episodes["one_step_with_final_step_observation"] += 1
            return None
        rows = steps - 1 if observation_mode else steps
        out: dict[Key, np.ndarray] = {}
        flags: dict[str, np.ndarray] = {}
        for leaf in self.step_leaves:
            array = self._widen(leaf, self._decode(leaf, self._values(example, leaf, where), steps, where))
            target = self._target(leaf.path[1:])
            if target is None:
                flags[leaf.path[1]] = array.reshape(steps).astype(bool)
            elif target[0] == "observation":
                out[target] = array[:rows]
                if observation_mode:
                    out[("next", *target)] = array[1:]
                else:
                    nxt = np.empty_like(array)
                    nxt[:-1] = array[1:]
                    nxt[-1] = np.nan if array.dtype.kind == "f" else 0
                    out[("next", *target)] = nxt
            elif target[0] == "next" and array.ndim == 1:
                out[target] = array[:rows].reshape(rows, 1)
            else:
                out[target] = array[:rows]
        if ("next", "reward") not in out:
            out[("next", "reward")] = np.zeros((rows, 1), dtype=np.float32)
        self._count_flags(flags, steps)
        terminal = bool(flags["is_terminal"][-1]) if "is_terminal" in flags else False
        terminated = np.zeros((rows, 1), dtype=bool)
        terminated[-1] = terminal
        out[("next", "terminated")] = terminated
        out[("next", "truncated")] = ~terminated & (np.arange(rows) == rows - 1)[:, None]
        self.ends["terminal" if terminal else "truncated"] += 1
        unknown = np.zeros(rows, dtype=bool)
        if not observation_mode:
            unknown[-1] = True
            self.unknown_rows += 1
        out[UNKNOWN_KEY] = unknown
        for leaf in self.episode_leaves:
            value = self._widen(leaf, self._decode(leaf, self._values(example, leaf, where), 1, where))
            out[("info", *leaf.path)] = np.repeat(value, rows, axis=0)
        out[("episode",)] = np.full(rows, episode_id, dtype=np.int64)
        return out

    def _count_flags(self, flags: Mapping[str, np.ndarray], steps: int) -> None:
        if "is_first" in flags and (not flags["is_first"][0] or flags["is_first"][1:].any()):
            self.anomalies["is_first_not_only_first"] += 1
        if "is_last" in flags and (not flags["is_last"][-1] or flags["is_last"][:-1].any()):
            self.anomalies["is_last_not_only_last"] += 1
        if "is_terminal" in flags and steps > 1 and flags["is_terminal"][:-1].any():
            self.anomalies["is_terminal_before_last"] += 1

    def _check_schema(self, columns: Mapping[Key, np.ndarray], where: str) -> None:
        schema = {k: (v.dtype, v.shape[1:]) for k, v in columns.items()}
        if self.schema is None:
            self.schema = schema
        elif schema != self.schema:
            key = next(k for k in set(schema) | set(self.schema) if schema.get(k) != self.schema.get(k))
            raise LoaderError(
                f"{self.spec.id}: {where}: {'/'.join(key)!r} is {schema.get(key)} here but "
                f"{self.schema.get(key)} in the first episode (dtype, per-row shape); every episode of a build "
                f"must share one schema"
            )

    # -- the pass -------------------------------------------------------------------------------
    def run(self, shard_paths: list[tuple[int, Path]], lengths: list[int] | None) -> Iterator[TensorDictBase]:
        from datasets_hub.loaders.formats.tf_example import parse_example
        from datasets_hub.loaders.formats.tfrecord import crc32c_implementation, iter_records

        pending: list[dict[Key, np.ndarray]] = []
        rows = nbytes = episode_id = 0
        limit = max(1, self.ctx.chunk_rows)
        for index, path in shard_paths:
            count = 0
            for offset, record in iter_records(path):
                where = f"{path.name} (record at byte offset {offset})"
                try:
                    example = parse_example(record)
                except ValueError as exc:
                    raise LoaderError(
                        f"{self.spec.id}: {where} is not a tf.train.Example ({exc}); the file is "
                        f"damaged: delete {path} and download it again"
                    ) from exc
                count += 1
                columns = self.convert(example, where, episode_id)
                del example
                if columns is None:
                    continue
                self._check_schema(columns, where)
                episode_id += 1
                n = len(columns[("episode",)])
                size = sum(v.nbytes for v in columns.values())
                if pending and (rows + n > limit or nbytes + size > CHUNK_BYTES):
                    yield _chunk(pending)  # this episode would overflow the chunk: start a new one
                    pending, rows, nbytes = [], 0, 0
                pending.append(columns)
                rows += n
                nbytes += size
                self.ctx.progress(n)
                if rows >= limit or nbytes >= CHUNK_BYTES:
                    yield _chunk(pending)
                    pending, rows, nbytes = [], 0, 0
            self.records[path.name] = count
            if lengths is not None and count != lengths[index]:
                self.length_mismatch[path.name] = {"records": count, "dataset_info": lengths[index]}
        if pending:
            yield _chunk(pending)
        if episode_id == 0:
            raise LoaderError(
                f"{self.spec.id}: the shards {[p.name for _, p in shard_paths]} hold no usable episode "
                f"(skipped: {self.skipped_episodes})"
            )
        self._write_notes(episode_id, crc32c_implementation())

    def _write_notes(self, episodes: int, crc: str) -> None:
        note = self.ctx.note
        note("episodes", episodes)
        note("episode_ends", dict(self.ends))
        note("records_per_shard", dict(self.records))
        note("crc32c", crc)
        note("final_step", self.final_step)
        if self.image_formats.get("jpeg"):
            note(
                "jpeg_decoder",
                f"{self.image_formats['jpeg']} JPEG images decoded with "
                + (
                    "libjpeg-turbo's fast IDCT, as TFDS/TensorFlow decode them (bit-identical)"
                    if self.jpeg_decoder == "tfds"
                    else "Pillow's accurate IDCT: pixels differ from what TFDS gives by up to ~15 levels at "
                    "quality 95 (jpeg_decoder='tfds' gives TFDS's pixels)"
                ),
            )
        note("next_observation_unknown_rows", self.unknown_rows)
        if self.unknown_rows:
            note(
                "next_observation_unknown",
                f"{self.unknown_rows} rows (the last step of each episode) have no next observation upstream: "
                f"('next', 'observation', …) is NaN (floats) or 0 there and {UNKNOWN_KEY} is True",
            )
        if not self.has_reward:
            note("reward", "absent upstream: ('next', 'reward') is 0 everywhere")
        text = {
            "/".join(self._target(x.path[1:]) or x.path)
            if x.path[0] == "steps"
            else "/".join(("info", *x.path)): self.text_width
            for x in self.step_leaves + self.episode_leaves
            if x.kind == "text"
        }
        if text:
            note("text_keys", text)
        if any(self.anomalies.values()):
            note("flag_anomalies", dict(self.anomalies))
        if any(self.skipped_episodes.values()):
            note("skipped_episodes", dict(self.skipped_episodes))
        if self.length_mismatch:
            note("shard_length_mismatch", dict(self.length_mismatch))
        if self.skipped:
            note("skipped_keys", dict(self.skipped))
        if self.widened:
            note("widened_dtypes", dict(self.widened))


def _chunk(episodes: list[dict[Key, np.ndarray]]) -> TensorDictBase:
    import torch
    from tensordict import TensorDict

    n = sum(len(e[("episode",)]) for e in episodes)
    out = TensorDict({}, batch_size=[n])
    for key in episodes[0]:
        parts = [e[key] for e in episodes]
        value = parts[0] if len(parts) == 1 else np.concatenate(parts)
        out.set(key, torch.from_numpy(np.ascontiguousarray(value)))
    return out
