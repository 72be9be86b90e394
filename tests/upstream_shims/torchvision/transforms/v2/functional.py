"""Import stand-in (see tests/upstream_shims/README.md)."""


def __getattr__(name):
    raise AttributeError(f"torchvision stand-in: transforms.v2.functional.{name} is not available")
