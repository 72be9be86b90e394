"""The ``atari`` loader plugin (entry point ``datasets_hub.loaders.atari:AtariLoader``)."""

from datasets_hub.loaders.atari.loader import AtariLoader

__all__ = ["AtariLoader"]
