"""The ``gym`` loader plugin (entry point ``datasets_hub.loaders.gym:GymLoader``)."""

from datasets_hub.loaders.gym.loader import GymLoader

__all__ = ["GymLoader"]
