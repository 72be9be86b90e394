"""Open X-Embodiment (RLDS / TFDS release) as TorchRL Episode Data (``openx/<dataset>``).

Source: the TFDS-prepared release ``<dataset>/<version>/`` on the public bucket
``gs://gresearch/robotics`` (HTTP endpoint ``https://storage.googleapis.com/gresearch/robotics``;
``DATASETS_HUB_ENDPOINT_OPENX`` points at a mirror with the same layout). Files fetched:
``dataset_info.json``, ``features.json`` and the shards
``<dataset>-<split>.tfrecord-<i:05d>-of-<n:05d>``. No TensorFlow: TFRecord framing (CRCs checked)
and ``tf.train.Example`` are read by :mod:`datasets_hub.loaders.formats.tfrecord`, guided by ``features.json``.

**Parameters** (catalogue values, overridable in ``load``; all are part of the build fingerprint):

- ``version`` (str): the TFDS version directory, e.g. ``"0.1.0"``.
- ``num_shards``: shards per split, ``{"train": 1024, "test": 64}`` (or an int for the chosen
  split). The catalogue carries the counts of each dataset's ``dataset_info.json``
  (``splits[].shardLengths``); the file list is derived from them, because the resources of a
  build must be known before anything is fetched. A dataset registered without it fails with the
  fix: pass ``num_shards=<len(shardLengths)>``. At build time the count is checked against the
  fetched ``dataset_info.json`` and each shard's record count against its ``shardLengths`` entry.
- ``split`` (default ``"train"``), ``shards`` (list of shard indices to load, default all; read in
  the order given), ``final_step`` (below), ``text_width`` (bytes per text value, default 512),
  ``base_url`` (a mirror directory holding the files, ``https://…``, ``file://…`` or
  ``gs://bucket/path``), ``dataset`` (the TFDS name when it differs from the id),
  ``jpeg_decoder`` (``"tfds"``, the default: libjpeg-turbo's fast IDCT through ``simplejpeg``,
  bit-identical to TensorFlow's ``decode_image``, i.e. the pixels every model trained through TFDS
  saw; ``"pillow"``: Pillow's accurate IDCT, up to ~15 levels away at quality 95; see
  :mod:`datasets_hub.loaders.formats.image_decode`).

**Mapping** (one ``tf.train.Example`` = one episode; TFDS flattens nested features with ``/``: step
features are ``steps/<path>`` with the T per-step values concatenated, episode features
``episode_metadata/<path>`` etc.):

==============================================  =================================================
upstream (``features.json`` kind)               TED
==============================================  =================================================
``steps/observation/<k…>``                      ``("observation", k…)`` and ``("next", "observation", k…)``
``steps/action`` or ``steps/action/<k…>``       ``"action"`` or ``("action", k…)``
``steps/reward``                                ``("next", "reward")`` ``[N, 1]`` (zeros + a card note
                                                when the dataset has no reward)
``steps/discount``                              ``("next", "discount")`` ``[N, 1]``
``steps/is_terminal`` at the last step          ``("next", "terminated")`` on the episode's last row
``steps/is_last`` without ``is_terminal``       ``("next", "truncated")`` on the episode's last row
other step features (``language_instruction``,  root keys of the same name (``("info", name)`` for
``language_embedding``, …)                      names TED reserves: episode, step, done, …)
episode features (``episode_metadata/<k…>``)    ``("info", "episode_metadata", k…)``, repeated per row
``Image`` (jpeg/png, uint8 or uint16)           decoded once at build time, HWC as declared: JPEG
                                                as TFDS decodes it (``jpeg_decoder``, below), PNG
                                                with Pillow (lossless: TFDS's pixels)
                                                (uint16 kept exactly as int32: torch cannot copy
                                                uint16 rows; the card lists ``widened_dtypes``)
``Image`` float32 (depth)                       the 4 PNG bytes per pixel reinterpreted as float32
``Text`` / string ``Tensor``                    uint8 ``[W]`` per row, UTF-8 zero-padded,
                                                ``W = text_width``: read with :func:`decode_text`
``Tensor`` / ``Scalar`` / ``ClassLabel``        upstream dtype and shape (bool from int64, float64
                                                from TFDS's float32 storage)
ragged / Video / Audio / other features         skipped, listed in the card (``skipped_keys``)
==============================================  =================================================

**The last step** (``final_step``). RLDS defines the ``is_last`` step as holding only the final
observation (its action and reward "are considered invalid"), but the Open X-Embodiment
conversions record a real action and reward at every step, the last one included (demos put
``reward = 1`` and ``is_terminal`` on their last step). So, by default (``"transition"``) every step
is a row: step t gives ``observation[t]``, ``action[t]``, ``reward[t]`` and ``next/observation[t] =
observation[t + 1]`` inside the episode. The last row's next observation was never recorded: we do
not fabricate one (house rule, as in the D4RL loader) and keep the row: its
``("next", "observation", …)`` is NaN for floats and 0 otherwise, and the per-step bool
``("info", "next_observation_unknown")`` is True (``next_observation_unknown_rows`` in the card).
``final_step="observation"`` follows RLDS strictly: the last step only provides the final next
observation, an episode of T steps gives T-1 rows, the last step's action and reward are dropped,
``is_terminal`` of the last step marks the previous row terminated, and no row is flagged unknown
(1-step episodes are skipped and counted).

Episode ids are 0..E-1 in the order shards are read (the order of ``shards``) and records within a
shard. Memory: one record (episode) is decoded at a time; a chunk holds at most ``ctx.chunk_rows``
rows or about 128 MiB, whichever comes first (one longer episode is yielded alone).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasets_hub.errors import CorruptFile, InvalidParameter, LoaderError, did_you_mean
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext, Resource
from datasets_hub.loaders.formats.image_decode import JPEG_DECODERS
from datasets_hub.loaders.formats.text import decode_text
from datasets_hub.loaders.formats.tfds_features import Leaf, parse_features
from datasets_hub.loaders.openx.convert import UNKNOWN_KEY, EpisodeConverter

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    from tensordict import TensorDictBase

__all__ = ["UNKNOWN_KEY", "Leaf", "OpenXLoader", "decode_text", "parse_features"]

PARAMS = ("base_url", "dataset", "final_step", "jpeg_decoder", "num_shards", "shards", "split", "text_width", "version")
FINAL_STEP = ("transition", "observation")
UPSTREAM = "https://storage.googleapis.com/gresearch/robotics"
DEFAULT_TEXT_WIDTH = 512


# ---------------------------------------------------------------------------------------- loader
class OpenXLoader(Loader):
    """Loader for the Open X-Embodiment RLDS release (see the module docstring)."""

    name = "openx"
    requires = ("PIL", "google.protobuf")
    install_hint = "pip install 'datasets-hub[openx]'"
    format_version = 2  # 2: JPEG decoded as TFDS does (fast IDCT) by default

    def check_params(self, spec: DatasetSpec) -> None:
        p = spec.params
        self.reject_unknown_params(spec, PARAMS)
        version = p.get("version")
        if not isinstance(version, str) or not version:
            raise InvalidParameter(
                f"{spec.id}: the openx loader needs version='<x.y.z>', the TFDS version directory of the "
                f"release (e.g. '0.1.0'), got {version!r}"
            )
        for name in ("split", "dataset", "base_url"):
            if name in p and (not isinstance(p[name], str) or not p[name]):
                raise InvalidParameter(f"{spec.id}: {name} must be a non-empty string, got {p[name]!r}")
        if p.get("final_step", "transition") not in FINAL_STEP:
            raise InvalidParameter(
                f"{spec.id}: final_step must be one of {FINAL_STEP}, got {p.get('final_step')!r}"
                f"{did_you_mean(str(p.get('final_step')), FINAL_STEP)}"
            )
        if p.get("jpeg_decoder", "tfds") not in JPEG_DECODERS:
            raise InvalidParameter(
                f"{spec.id}: jpeg_decoder must be one of {JPEG_DECODERS} ('tfds': TensorFlow's fast IDCT, the "
                f"pixels TFDS gives; 'pillow': Pillow's accurate IDCT), got {p.get('jpeg_decoder')!r}"
                f"{did_you_mean(str(p.get('jpeg_decoder')), JPEG_DECODERS)}"
            )
        width = p.get("text_width", DEFAULT_TEXT_WIDTH)
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise InvalidParameter(
                f"{spec.id}: text_width must be a positive int (bytes per text value), got {width!r}"
            )
        total = self._num_shards(spec)
        shards = p.get("shards")
        if shards is not None:
            if (
                not isinstance(shards, list)
                or not shards
                or not all(isinstance(s, int) and not isinstance(s, bool) for s in shards)
            ):
                raise InvalidParameter(
                    f"{spec.id}: shards must be a non-empty list of shard indices, e.g. [0, 1], got {shards!r}"
                )
            bad = [s for s in shards if not 0 <= s < total]
            if bad:
                raise InvalidParameter(
                    f"{spec.id}: shard index(es) {bad} out of range: split {self._split(spec)!r} has "
                    f"{total} shards (0..{total - 1})"
                )
            if len(set(shards)) != len(shards):
                raise InvalidParameter(f"{spec.id}: shards lists an index twice: {shards}")

    # -- what to fetch --------------------------------------------------------------------------
    @staticmethod
    def _split(spec: DatasetSpec) -> str:
        return spec.params.get("split", "train")

    @staticmethod
    def _dataset(spec: DatasetSpec) -> str:
        return spec.params.get("dataset") or spec.name

    def _num_shards(self, spec: DatasetSpec) -> int:
        counts, split = spec.params.get("num_shards"), self._split(spec)
        if isinstance(counts, Mapping):
            if split not in counts:
                raise InvalidParameter(
                    f"{spec.id}: no split {split!r}; the catalogue lists {sorted(counts)}."
                    f"{did_you_mean(split, list(counts))}"
                )
            counts = counts[split]
        if isinstance(counts, bool) or not isinstance(counts, int) or counts < 1:
            raise InvalidParameter(
                f"{spec.id}: the number of {split!r} shards is unknown or invalid ({counts!r}); pass "
                f"num_shards=<n>, the length of splits[name={split!r}].shardLengths in the dataset's "
                f"dataset_info.json (or the NNNNN of its '-of-NNNNN' file names)"
            )
        return counts

    def _base(self, spec: DatasetSpec) -> str:
        base = spec.params.get("base_url")
        if base is None:
            return f"{UPSTREAM}/{self._dataset(spec)}/{spec.params['version']}"
        if base.startswith("gs://"):
            base = "https://storage.googleapis.com/" + base[len("gs://") :]
        return base.rstrip("/")

    def shard_names(self, spec: DatasetSpec) -> list[str]:
        """The file names of the shards this build reads, in reading order."""
        total = self._num_shards(spec)
        shards = spec.params.get("shards") or list(range(total))
        prefix = f"{self._dataset(spec)}-{self._split(spec)}.tfrecord"
        return [f"{prefix}-{i:05d}-of-{total:05d}" for i in shards]

    def resources(self, spec: DatasetSpec) -> list[Resource]:
        self.check_params(spec)
        base, local = self._base(spec), f"{self._dataset(spec)}/{spec.params['version']}"
        known = {r.name: r for r in spec.resources}  # catalogue entries may pin sha256/size
        out = []
        for file in ("dataset_info.json", "features.json", *self.shard_names(spec)):
            name = f"{local}/{file}"
            out.append(known.get(name) or Resource(name=name, urls=(f"{base}/{file}",)))
        return out

    # -- conversion -----------------------------------------------------------------------------
    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDictBase]:
        self.check_params(spec)
        local = f"{self._dataset(spec)}/{spec.params['version']}"
        missing = [n for n in (f"{local}/dataset_info.json", f"{local}/features.json") if n not in files]
        if missing:
            raise LoaderError(f"{spec.id}: the build needs {missing}; they were not fetched")
        info = _read_json(Path(files[f"{local}/dataset_info.json"]), spec)
        features = _read_json(Path(files[f"{local}/features.json"]), spec)
        converter = EpisodeConverter(
            spec,
            parse_features(features),
            ctx,
            final_step=spec.params.get("final_step", "transition"),
            text_width=spec.params.get("text_width", DEFAULT_TEXT_WIDTH),
            jpeg_decoder=spec.params.get("jpeg_decoder", "tfds"),
        )
        lengths = _shard_lengths(info, self._split(spec), self._num_shards(spec), spec)
        shards = spec.params.get("shards") or list(range(self._num_shards(spec)))
        shard_paths = []
        for index, file in zip(shards, self.shard_names(spec), strict=True):
            if f"{local}/{file}" not in files:
                raise LoaderError(f"{spec.id}: shard {file} was not fetched")
            shard_paths.append((index, Path(files[f"{local}/{file}"])))
        yield from converter.run(shard_paths, lengths)
        ctx.note("dataset_info", {k: info.get(k) for k in ("name", "version", "description") if k in info})


def _read_json(path: Path, spec: DatasetSpec) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CorruptFile(
            f"{spec.id}: {path.name} is not readable JSON ({exc}); delete {path} and download again", path=path
        ) from exc
    if not isinstance(value, dict):
        raise LoaderError(f"{spec.id}: {path.name} holds {type(value).__name__}, not a JSON object")
    return value


def _shard_lengths(info: Mapping[str, Any], split: str, num_shards: int, spec: DatasetSpec) -> list[int] | None:
    """Episodes per shard from ``dataset_info.json`` (``None`` when it does not say)."""
    for entry in info.get("splits") or []:
        if isinstance(entry, Mapping) and entry.get("name") == split and entry.get("shardLengths"):
            lengths = [int(x) for x in entry["shardLengths"]]
            if len(lengths) != num_shards:
                raise LoaderError(
                    f"{spec.id}: dataset_info.json lists {len(lengths)} {split!r} shards but the catalogue "
                    f"says num_shards={num_shards}; load with num_shards={len(lengths)} (and tell us, "
                    f"so the catalogue gets fixed)"
                )
            return lengths
    return None
