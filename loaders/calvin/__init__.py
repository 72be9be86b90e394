"""CALVIN (one .npz per time step, packed into episodes at build time): see :mod:`.loader`."""

from .loader import CalvinLoader
from .safe_npy import UnsafePickle, load_object_npy

__all__ = ["CalvinLoader", "UnsafePickle", "load_object_npy"]
