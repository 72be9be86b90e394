"""The ``rlu_atari`` loader plugin (entry point ``datasets_hub.loaders.rlu_atari:RLUAtariLoader``)."""

from datasets_hub.loaders.rlu_atari.loader import RLUAtariLoader

__all__ = ["RLUAtariLoader"]
