"""Import stand-in (see tests/upstream_shims/README.md)."""

from . import v2  # noqa: F401 - makes the submodule an attribute, as in torchvision


class ToTensor:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("torchvision stand-in: transforms.ToTensor is not available")
