"""The ``roboset`` loader plugin (entry point ``datasets_hub.loaders.roboset:RoboSetLoader``)."""

from datasets_hub.loaders.roboset.loader import RoboSetLoader

__all__ = ["RoboSetLoader"]
