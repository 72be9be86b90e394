"""CALVIN (one .npz per time step, packed into episodes at build time): see :mod:`.loader`."""

from datasets_hub.loaders.calvin.loader import CalvinLoader
from datasets_hub.loaders.calvin.safe_npy import UnsafePickle, load_object_npy

__all__ = ["CalvinLoader", "UnsafePickle", "load_object_npy"]
