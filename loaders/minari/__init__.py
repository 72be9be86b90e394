"""The ``minari`` loader plugin (entry point ``datasets_hub.loaders.minari:MinariLoader``)."""

from datasets_hub.loaders.minari.loader import MinariLoader

__all__ = ["MinariLoader"]
