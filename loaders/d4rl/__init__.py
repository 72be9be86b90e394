"""The ``d4rl`` loader plugin (entry point ``datasets_hub.loaders.d4rl:D4RLLoader``)."""

from datasets_hub.loaders.d4rl.loader import D4RLLoader

__all__ = ["D4RLLoader"]
