"""Import stand-in for torchvision (see tests/upstream_shims/README.md): importable, unusable."""

from . import transforms  # noqa: F401 - makes the submodule an attribute, as in torchvision

__version__ = "0.0+standin"


def set_video_backend(backend):
    raise NotImplementedError("torchvision stand-in: the real torchvision is not importable in this venv")


def __getattr__(name):
    raise AttributeError(f"torchvision stand-in has no {name!r}: the real torchvision is not importable here")
