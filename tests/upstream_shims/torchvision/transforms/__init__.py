"""Import stand-in (see tests/upstream_shims/README.md)."""

from . import v2  # noqa: F401


class ToTensor:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("torchvision stand-in: transforms.ToTensor is not available")
