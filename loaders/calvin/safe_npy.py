"""Reading a pickled ``.npy`` (an object array, e.g. CALVIN's ``auto_lang_ann.npy``) without running its code.

``np.load(path, allow_pickle=True)`` unpickles whatever the file holds, and unpickling can call any importable
function: a downloaded file would run code. :func:`load_object_npy` reads the ``.npy`` header itself and then
unpickles with an allow-list: plain containers and scalars (which pickle builds without importing anything)
and the few numpy globals an array needs to be rebuilt (``ndarray``, ``dtype``, ``_reconstruct``, ``scalar``).
Any other global in the stream is refused with :class:`UnsafePickle`, naming it; nothing is called first.
"""

from __future__ import annotations

import io
import pickle
from typing import IO, Any

import numpy as np

__all__ = ["UnsafePickle", "load_object_npy"]

# (module, name) -> the object pickle may use; numpy 1.x wrote numpy.core.*, numpy 2.x writes numpy._core.*
_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}
for _module in ("numpy.core.multiarray", "numpy._core.multiarray"):
    _ALLOWED[(_module, "_reconstruct")] = np.ndarray.__reduce__(np.zeros(0))[0]  # numpy's own reconstructor
    _ALLOWED[(_module, "scalar")] = np.int64(0).__reduce__()[0]  # numpy's scalar rebuilder


class UnsafePickle(pickle.UnpicklingError):
    """The pickle names a global outside the allow-list (it could run code when loaded)."""


class _AllowListUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickle(
                f"the pickle asks for {module}.{name}, which is not on the allow-list of numpy array "
                f"types ({', '.join(sorted({f'{m}.{n}' for m, n in _ALLOWED}))}); it is not loaded"
            ) from None


def load_object_npy(stream: IO[bytes] | bytes) -> Any:
    """The object stored in a ``.npy`` file (``np.save(path, obj)`` of a dict, a list, …), unpickled with the
    allow-list of the module docstring. A non-object array is returned as it is (no pickle involved).
    Raises ``ValueError`` for a stream that is not ``.npy``, :class:`UnsafePickle` for a refused global."""
    from numpy.lib import format as npy_format

    fh = io.BytesIO(stream) if isinstance(stream, bytes) else stream
    version = npy_format.read_magic(fh)
    if version == (1, 0):
        shape, fortran, dtype = npy_format.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, fortran, dtype = npy_format.read_array_header_2_0(fh)
    else:
        raise ValueError(f".npy format version {version} is not supported")
    if not dtype.hasobject:
        count = int(np.prod(shape)) if shape else 1
        data = np.frombuffer(fh.read(count * dtype.itemsize), dtype=dtype, count=count)
        return data.reshape(shape, order="F" if fortran else "C")
    try:
        array = _AllowListUnpickler(fh).load()
    except UnsafePickle:
        raise
    except (pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"the pickled object array cannot be read ({type(exc).__name__}: {exc})") from exc
    if not isinstance(array, np.ndarray):
        raise ValueError(f"the pickle holds a {type(array).__name__}, not a numpy object array")
    return array.item() if array.shape == () else array
