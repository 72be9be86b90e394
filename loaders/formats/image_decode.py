"""Decoding the images of TFDS-prepared datasets without TensorFlow, pixel for pixel as TFDS does.

TFDS's ``Image`` feature decodes with ``tf.image.decode_image(..., channels=C)``. For JPEG,
TensorFlow calls libjpeg-turbo with its own defaults: the *fast* integer IDCT (``dct_method=""``
means ``JDCT_IFAST``, "sacrificing decoding image quality for speed") and fancy chroma upsampling.
Pillow always uses the accurate integer IDCT (``JDCT_ISLOW``) and offers no switch, so at quality
95 its pixels differ from TensorFlow's by up to ~15 levels. Two decoders are offered
(``jpeg_decoder=``):

- ``"tfds"`` (the default): libjpeg-turbo through ``simplejpeg`` with ``fastdct=True``,
  ``fastupsample=False``, the same settings TensorFlow uses: bit-identical to
  ``tf.image.decode_image`` (checked in ``tests/upstream/test_upstream_openx.py`` against
  TensorFlow 2.21 on 4:4:4, 4:2:2, 4:2:0 and grey JPEGs, qualities 50 to 100). Needs
  ``pip install simplejpeg`` (in the ``openx`` extra).
- ``"pillow"``: Pillow's accurate IDCT (closer to the encoder's pixels, not what TFDS users saw).

PNG is lossless: Pillow's pixels are TensorFlow's whatever the setting.
"""

from __future__ import annotations

import io

import numpy as np

from datasets_hub.errors import LoaderError, MissingDependency

JPEG_DECODERS = ("tfds", "pillow")
_JPEG_MAGIC = b"\xff\xd8\xff"
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
_SIMPLEJPEG_SPACE = {1: "GRAY", 3: "RGB"}


def is_jpeg(blob: bytes) -> bool:
    return bytes(blob[:3]) == _JPEG_MAGIC


def decode_uint8(blob: bytes, channels: int, jpeg_decoder: str) -> np.ndarray:
    """An encoded uint8 image as ``[H, W, channels]`` (converted to ``channels`` as TF's
    ``decode_image(channels=…)`` does for grey <-> RGB). Raises :class:`LoaderError` for bytes no
    decoder reads, :class:`MissingDependency` when the ``"tfds"`` JPEG decoder is not installed."""
    if jpeg_decoder not in JPEG_DECODERS:
        raise ValueError(f"jpeg_decoder must be one of {JPEG_DECODERS}, got {jpeg_decoder!r}")
    if jpeg_decoder == "tfds" and is_jpeg(blob):
        return _simplejpeg(blob, channels)
    return _pillow(blob, channels)


def _simplejpeg(blob: bytes, channels: int) -> np.ndarray:
    try:
        import simplejpeg
    except ImportError as exc:
        raise MissingDependency(
            "decoding JPEG images as TFDS does (jpeg_decoder='tfds', the default) needs simplejpeg: "
            "pip install 'datasets-hub[openx]' (or pip install simplejpeg); jpeg_decoder='pillow' decodes "
            "with Pillow's accurate IDCT instead (pixels differ from TFDS's by up to ~15 levels)"
        ) from exc
    space = _SIMPLEJPEG_SPACE.get(channels)
    if space is None:
        raise LoaderError(f"a JPEG cannot be decoded to {channels} channels (TFDS decodes JPEG to 1 or 3)")
    try:
        array = simplejpeg.decode_jpeg(bytes(blob), colorspace=space, fastdct=True, fastupsample=False)
    except ValueError as exc:
        raise LoaderError(f"a JPEG libjpeg-turbo cannot decode ({exc})") from exc
    return array.reshape(*array.shape[:2], channels)


def _pillow(blob: bytes, channels: int) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    mode = _MODES.get(channels)
    if mode is None:
        raise LoaderError(f"uint8 images with {channels} channels are not supported")
    try:
        with Image.open(io.BytesIO(blob)) as image:
            array = np.asarray(image if image.mode == mode else image.convert(mode))
    except (UnidentifiedImageError, OSError) as exc:
        raise LoaderError(f"an image that Pillow cannot decode ({exc})") from exc
    return array.reshape(*array.shape[:2], channels)
