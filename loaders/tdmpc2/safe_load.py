"""Reading a pickled TensorDict (``torch.save(td, path)``) without running code from the file.

``torch.load(path, weights_only=False)`` (what TD-MPC2's offline trainer calls) unpickles anything, so a
downloaded chunk could run code. :func:`load_tensordict` calls ``torch.load(weights_only=True)``: torch's
restricted unpickler rebuilds tensors, ``torch.Size`` and ``OrderedDict`` and refuses every other global.
On top of torch's list (and the classes tensordict itself registers as safe for ``weights_only``), it allows
the two names a TensorDict was pickled under that nobody registers, mapped to stand-ins of our own that only
record the pickled state: ``tensordict.tensordict.TensorDict`` (older tensordict versions pickle the object
and its ``__dict__``) and ``tensordict._reductions._make_td(cls, state)`` (newer versions; ``cls`` must be
``TensorDict`` itself). The state's ``_tensordict`` (tensors or nested TensorDicts) and ``_batch_size`` are
then rebuilt into a ``TensorDict``. A file asking for anything else is refused with :class:`UnsafeChunk`
naming the global; nothing of it runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasets_hub.errors import CorruptFile, LoaderError

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    from tensordict import TensorDict

__all__ = ["UnsafeChunk", "load_tensordict"]

_LEGACY_CLASS_NAMES = ("tensordict.tensordict.TensorDict",)
_MAKE_TD_NAMES = ("tensordict._reductions._make_td",)
_MAKE_TD_CLASSES = ("tensordict._td.TensorDict",)  # the class newer versions hand to _make_td


class UnsafeChunk(LoaderError):
    """The pickle is not an allow-listed TensorDict (loading it could run code, or it holds something else)."""


class _PickledTensorDict:
    """Stand-in for a pickled TensorDict: holds the state pickle hands it, runs nothing of tensordict."""

    state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state


def _make_td(cls: Any, state: Any) -> _PickledTensorDict:
    """Stand-in for ``tensordict._reductions._make_td``: record the state; ``cls`` is the stand-in class."""
    from tensordict import TensorDict

    if cls is not _PickledTensorDict and cls is not TensorDict:
        raise LoaderError(f"the pickle rebuilds a TensorDict through {cls!r}, which is not allow-listed")
    out = _PickledTensorDict()
    out.state = state
    return out


def _allow_list() -> list[Callable[..., Any] | tuple[Callable[..., Any], str]]:
    import torch

    registered = {
        f"{g.__module__}.{g.__qualname__}" if not isinstance(g, tuple) else g[1]
        for g in torch.serialization.get_safe_globals()
    }
    stand_ins: list[Callable[..., Any] | tuple[Callable[..., Any], str]] = [
        (_PickledTensorDict, name) for name in _LEGACY_CLASS_NAMES
    ]
    # tensordict registers its own _make_td (and the class it is handed) as weights_only-safe in recent versions
    # (0.15): ours only stand in otherwise, the class included (tensordict 0.14 registers neither, and a chunk
    # saved by 0.14 or later names it as _make_td's first argument)
    for name in _MAKE_TD_NAMES:
        if name not in registered:
            stand_ins += [(_make_td, name), *((_PickledTensorDict, c) for c in _MAKE_TD_CLASSES if c not in registered)]
    return stand_ins


def load_tensordict(path: Path, *, mmap: bool = True) -> TensorDict:
    """The TensorDict stored at ``path`` (``mmap``: tensors stay memory-mapped on the file, not read into RAM).
    Raises :class:`UnsafeChunk` for a pickle outside the allow-list (see the module docstring),
    ``CorruptFile`` for bytes ``torch.load`` cannot read and ``LoaderError`` for a TensorDict that does not
    hold tensors."""
    import pickle

    import torch
    from tensordict import TensorDict

    try:
        with torch.serialization.safe_globals(_allow_list()):
            try:
                obj = torch.load(path, weights_only=True, mmap=mmap, map_location="cpu")
            except RuntimeError as exc:
                if not mmap or "mmap" not in str(exc):
                    raise
                # a chunk in torch's legacy (pre-zip) serialization cannot be memory-mapped: read it whole
                obj = torch.load(path, weights_only=True, mmap=False, map_location="cpu")
    except pickle.UnpicklingError as exc:
        found = re.search(r"(?:unsupported|Unsupported global:) GLOBAL (\S+)", str(exc))
        refused = f"it asks for {found.group(1)}" if found else str(exc).split("\n")[0]
        raise UnsafeChunk(
            f"{path.name} is refused: it is not a TensorDict of tensors that can be loaded without running code "
            f"({refused}). Only TensorDict pickles of tensors are read (torch.load weights_only=True with an "
            "allow-list); the file is not loaded"
        ) from exc
    except (RuntimeError, OSError, EOFError, ValueError) as exc:  # the bytes: truncated, damaged, not torch.save
        raise CorruptFile(f"{path.name} cannot be read by torch.load ({type(exc).__name__}: {exc})", path=path) from exc
    if isinstance(obj, TensorDict):  # rebuilt by a reducer tensordict registers as weights_only-safe
        for key, value in obj.items(include_nested=True, leaves_only=True):
            if not isinstance(value, torch.Tensor):
                raise LoaderError(f"{path.name}: entry {key!r} is a {type(value).__name__}, not a tensor")
        return obj
    if not isinstance(obj, _PickledTensorDict):
        raise UnsafeChunk(f"{path.name} holds a {type(obj).__name__}, not a TensorDict")
    return _rebuild(obj, path.name)


def _rebuild(obj: _PickledTensorDict, where: str) -> TensorDict:
    import torch
    from tensordict import TensorDict

    state = obj.state
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], Mapping):
        state = state[0]  # (dict state, slot state) from object.__reduce_ex__
    if not isinstance(state, Mapping) or "_tensordict" not in state or "_batch_size" not in state:
        keys = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise LoaderError(f"{where}: the pickled TensorDict state has no _tensordict/_batch_size (it has {keys})")
    entries = state["_tensordict"]
    if not isinstance(entries, Mapping):
        raise LoaderError(f"{where}: the pickled TensorDict's _tensordict is a {type(entries).__name__}, not a mapping")
    out = TensorDict({}, batch_size=torch.Size(state["_batch_size"]))
    for key, value in entries.items():
        if isinstance(value, _PickledTensorDict):
            out.set(str(key), _rebuild(value, f"{where}/{key}"))
        elif isinstance(value, torch.Tensor):
            out.set(str(key), value)
        else:
            raise LoaderError(f"{where}: entry {key!r} is a {type(value).__name__}, not a tensor")
    return out
