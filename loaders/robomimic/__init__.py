"""robomimic-format HDF5 datasets (robomimic v1.5, MimicGen, DexMimicGen, LIBERO): see :mod:`.loader`."""

from datasets_hub.loaders.robomimic.loader import RobomimicLoader, decode_text, demo_order

__all__ = ["RobomimicLoader", "decode_text", "demo_order"]
