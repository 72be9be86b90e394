"""The ``ogbench`` loader plugin (entry point ``datasets_hub.loaders.ogbench:OGBenchLoader``)."""

from datasets_hub.loaders.ogbench.loader import OGBenchLoader

__all__ = ["OGBenchLoader"]
