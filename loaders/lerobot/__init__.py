"""The ``lerobot`` loader plugin (entry point ``datasets_hub.loaders.lerobot:LeRobotLoader``)."""

from datasets_hub.loaders.lerobot.loader import LeRobotLoader

__all__ = ["LeRobotLoader"]
