"""Image transforms for samples, under TorchRL's names and with its keys and semantics, without torchrl.

``ToTensorImage``, ``Resize`` and ``GrayScale`` act on each of their ``in_keys`` (default ``"pixels"``, as
TorchRL) and write ``out_keys`` (default: the same keys). In a buffer they run on every sample (``rb.sample()``,
``rb[i]``), so a build keeps its images as uint8 HWC on disk and the model sees float CHW. They are per-key
transforms (:class:`~datasets_hub.buffers.transforms.Transform` with ``in_keys``), usable on a TensorDict
directly: ``ToTensorImage(in_keys=["observation"])(td)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from datasets_hub.buffers.transforms import Transform
from datasets_hub.errors import InvalidArgument, WrongDataType

IMAGE_KEYS = ["pixels"]
_INTERPOLATIONS = ("nearest", "nearest-exact", "bilinear", "bicubic")
# ITU-R 601-2 luma, the weights torchvision's rgb_to_grayscale (which TorchRL's GrayScale calls) uses
_LUMA = (0.2989, 0.587, 0.114)


def _image(value: Any, who: str, min_dims: int = 3) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise WrongDataType(f"{who} transforms image tensors, got {type(value).__name__}")
    if value.ndim < min_dims:
        raise InvalidArgument(
            f"{who} needs images of at least {min_dims} dims ([..., C, H, W]), got shape {list(value.shape)}"
        )
    return value


class ToTensorImage(Transform):
    """``[..., H, W, C]`` images to ``[..., C, H, W]`` floats, scaled to ``[0, 1]`` when they are integers.

    ``from_int``: divide by 255 (default: when the input dtype is not floating point). ``dtype``: the output
    dtype (default ``torch.get_default_dtype()``). ``unsqueeze=True`` adds a leading dim to a single
    ``[C, H, W]`` image. ``shape_tolerant=True`` leaves the layout of images whose last dim is not 3 alone
    (already CHW).
    """

    def __init__(
        self,
        from_int: bool | None = None,
        unsqueeze: bool = False,
        dtype: torch.dtype | None = None,
        *,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
        shape_tolerant: bool = False,
    ) -> None:
        super().__init__(in_keys=IMAGE_KEYS if in_keys is None else in_keys, out_keys=out_keys)
        self.from_int = from_int
        self.unsqueeze = bool(unsqueeze)
        self.dtype = torch.get_default_dtype() if dtype is None else dtype
        self.shape_tolerant = bool(shape_tolerant)

    def _apply_transform(self, value: Any) -> torch.Tensor:
        image = _image(value, "ToTensorImage")
        if not self.shape_tolerant or image.shape[-1] == 3:
            image = image.movedim(-1, -3)
        if self.from_int or (self.from_int is None and not image.is_floating_point()):
            image = image.div(255)
        image = image.to(self.dtype)
        if self.unsqueeze and image.ndim == 3:
            image = image.unsqueeze(0)
        return image

    def __repr__(self) -> str:
        return f"ToTensorImage(in_keys={self.in_keys}, out_keys={self.out_keys}, dtype={self.dtype})"


class Resize(Transform):
    """Resize ``[..., C, H, W]`` images so that their last two dims are ``(w, h)`` (``h`` defaults to ``w``).

    As TorchRL's ``Resize``: the first size given is the size of dim -2, the second of dim -1, and
    images already of that size are returned as they are. ``interpolation``: ``"bilinear"`` (default),
    ``"bicubic"`` (both antialiased, as torchvision's ``resize(antialias=True)``), ``"nearest"`` or
    ``"nearest-exact"``. Integer images are rounded and clamped back to their dtype.
    """

    def __init__(
        self,
        w: int | Sequence[int],
        h: int | None = None,
        interpolation: str = "bilinear",
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
    ) -> None:
        sizes: tuple[Any, ...]
        if isinstance(w, (list, tuple)):
            if len(w) != 2 or h is not None:
                raise InvalidArgument(f"Resize takes Resize(w, h) or Resize((w, h)), got w={w!r}, h={h!r}")
            sizes = tuple(w)
        else:
            sizes = (w, w if h is None else h)
        for name, size in zip(("w", "h"), sizes, strict=True):
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                raise InvalidArgument(f"Resize {name} must be a positive int, got {size!r}")
        interpolation = getattr(interpolation, "value", interpolation)  # torchvision's InterpolationMode
        if interpolation not in _INTERPOLATIONS:
            raise InvalidArgument(f"Resize interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}")
        super().__init__(in_keys=IMAGE_KEYS if in_keys is None else in_keys, out_keys=out_keys)
        self.w, self.h = (int(size) for size in sizes)
        self.interpolation = interpolation

    def _apply_transform(self, value: Any) -> torch.Tensor:
        image = _image(value, "Resize")
        if image.shape[-2:] == (self.w, self.h):
            return image
        lead = image.shape[:-3]
        flat = image.reshape(-1, *image.shape[-3:])
        antialias = self.interpolation in ("bilinear", "bicubic")
        out = F.interpolate(
            flat if flat.is_floating_point() else flat.float(),
            size=(self.w, self.h),
            mode=self.interpolation,
            antialias=antialias,
            align_corners=False if antialias else None,
        )
        if not image.is_floating_point():
            info = torch.iinfo(image.dtype)
            out = out.round_().clamp_(info.min, info.max).to(image.dtype)
        return out.reshape(*lead, *out.shape[-3:])

    def __repr__(self) -> str:
        return f"Resize(w={self.w}, h={self.h}, interpolation={self.interpolation!r}, in_keys={self.in_keys})"


class GrayScale(Transform):
    """``[..., 3, H, W]`` RGB images to ``[..., 1, H, W]`` luma (ITU-R 601-2 weights, as torchvision).

    Integer images keep their dtype (the weighted sum is truncated, as torchvision does); one-channel
    images are returned as they are.
    """

    def __init__(self, in_keys: Sequence[Any] | None = None, out_keys: Sequence[Any] | None = None) -> None:
        super().__init__(in_keys=IMAGE_KEYS if in_keys is None else in_keys, out_keys=out_keys)

    def _apply_transform(self, value: Any) -> torch.Tensor:
        image = _image(value, "GrayScale")
        channels = image.shape[-3]
        if channels == 1:
            return image
        if channels != 3:
            raise InvalidArgument(
                f"GrayScale needs [..., 3, H, W] RGB images (or one channel), got shape {list(image.shape)}: "
                "put ToTensorImage() first for HWC images"
            )
        r, g, b = image.unbind(-3)
        gray = (_LUMA[0] * r + _LUMA[1] * g + _LUMA[2] * b).to(image.dtype)
        return gray.unsqueeze(-3)

    def __repr__(self) -> str:
        return f"GrayScale(in_keys={self.in_keys}, out_keys={self.out_keys})"
