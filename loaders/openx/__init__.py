"""The ``openx`` loader plugin (entry point ``datasets_hub.loaders.openx:OpenXLoader``)."""

from datasets_hub.loaders.openx.loader import OpenXLoader

__all__ = ["OpenXLoader"]
