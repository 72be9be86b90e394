"""Transform fingerprints: when a cached preprocessing result may be reused (docs/guide/preprocessing.md).

``transform-fp = hash(parent fingerprint, fn, version)``, where ``fn`` is identified by what it
computes, not by its name alone:

- a Python function by its module, qualname, source text and compiled code (so two lambdas on
  one line differ), its defaults and keyword defaults, the values of its closure cells, and the
  globals its code reads (user functions it calls are fingerprinted the same way, recursively;
  modules and library functions by name and package version);
- ``functools.partial`` by its function and bound arguments; a bound method by its function and
  the state of ``self``; a callable object by its class (source) and its state.

Values (defaults, closures, globals, bound arguments, ``version``) are hashed by content: tensors
and arrays by their bytes, sets order-independently, everything else through ``pickle``. What
cannot be identified (a builtin passed directly has no source; a closure over an open file or a
lock cannot be pickled) raises :class:`Unfingerprintable`; :func:`transform_fingerprint` turns
that into one :class:`UncachedPreprocessWarning` per function and ``None`` (= do not cache):
a result that cannot be identified must never be reused.

Fingerprints are stable across processes and sessions of the same Python minor version.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import io
import pickle
import sys
import sysconfig
import textwrap
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datasets_hub.files import sha256_file, sha256_json

#: Bump when the description below changes: every cached result is then recomputed once.
#: 2: the preprocessing settings that can change a result (``by``, an explicit ``chunk_size``) joined
#: the hash; results of version 1 were computed without the row-wise check and are not reused.
FINGERPRINT_VERSION = 2


class Unfingerprintable(Exception):
    """``fn`` (or a value it depends on) cannot be identified reliably; the message says what and why."""


class UncachedPreprocessWarning(UserWarning):
    """A preprocessing result is computed but not cached, because its transform has no fingerprint."""


_WARNED: set[tuple[str, str]] = set()


def describe_name(fn: Any) -> str:
    """A readable name for ``fn`` (``module.qualname``; partials and callable objects unwrapped)."""
    if isinstance(fn, functools.partial):
        return f"partial({describe_name(fn.func)})"
    target = fn if hasattr(fn, "__qualname__") else type(fn)
    module = getattr(target, "__module__", None) or "?"
    return f"{module}.{getattr(target, '__qualname__', repr(target))}"


def fingerprint_callable(fn: Callable) -> str:
    """The sha256 hex digest of what ``fn`` computes; raises :class:`Unfingerprintable`."""
    return _digest(_Describer().callable(fn, describe_name(fn), top=True))


def transform_fingerprint(
    parent: str, fn: Callable, version: Any = None, *, settings: dict[str, Any] | None = None, stacklevel: int = 2
) -> str | None:
    """``hash(parent, fn, version, settings)`` as 16 hex chars, or ``None`` (after one warning per
    function) when ``fn`` cannot be fingerprinted. ``settings``: JSON values of every other option
    that can change the result (preprocess passes ``by`` and an explicit ``chunk_size``)."""
    try:
        payload = {
            "format": FINGERPRINT_VERSION,
            "parent": parent,
            "fn": fingerprint_callable(fn),
            "version": _Describer().value(version, "version="),
            "settings": settings or {},
        }
    except Unfingerprintable as exc:
        key = (describe_name(fn), str(exc))
        if key not in _WARNED:
            _WARNED.add(key)
            warnings.warn(
                f"preprocess: cannot fingerprint {describe_name(fn)} ({exc}); the result is computed but NOT "
                "cached, so the next call computes it again. To cache it, make fn depend only on plain values "
                "(bind them with functools.partial or default arguments) and wrap builtins in a def",
                UncachedPreprocessWarning,
                stacklevel=stacklevel + 1,
            )
        return None
    return _digest(payload)[:16]


def _digest(payload: Any) -> str:
    return sha256_json(payload)


# ------------------------------------------------------------------------------------ libraries
@functools.cache
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    return tuple(str(Path(r).resolve()) for r in roots)


@functools.lru_cache(maxsize=4096)
def _module_identity(module_name: str) -> tuple[bool, str | None]:
    """``(is_library, version)``: standard-library and installed modules are identified by their
    version (hashing their source would be slow and tell nothing new); user code is not a library."""
    top_name = module_name.split(".")[0]
    if module_name in sys.builtin_module_names or top_name in sys.stdlib_module_names:
        return True, sys.version.split()[0]
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if file is None:
        return False, None  # __main__ of `python -c`, a notebook, or a module created at run time
    resolved = str(Path(file).resolve())
    if not any(resolved.startswith(root + "/") for root in _library_roots()):
        return False, None
    version = getattr(sys.modules.get(top_name), "__version__", None)
    return True, str(version) if version is not None else None


@functools.lru_cache(maxsize=1024)
def _user_module_digest(module_name: str) -> str | None:
    """sha256 of a user module's file: a function reached through ``module.attr`` is covered by it."""
    file = getattr(sys.modules.get(module_name), "__file__", None)
    try:
        return sha256_file(file) if file else None
    except OSError:
        return None


def _is_library(obj: Any) -> tuple[bool, str | None]:
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str):
        return True, None
    return _module_identity(module)


# ------------------------------------------------------------------------------------ description
_BUILTIN_TYPES = (
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
)
_CODE_ATTRS = (
    "co_argcount",
    "co_posonlyargcount",
    "co_kwonlyargcount",
    "co_flags",
    "co_names",
    "co_varnames",
    "co_freevars",
    "co_cellvars",
)


class _Describer:
    """Builds a JSON-able description of callables and values; see the module docstring."""

    def __init__(self) -> None:
        self._active: set[int] = set()  # functions being described (recursion guard)

    # -- callables ----------------------------------------------------------------------------
    def callable(self, fn: Any, where: str, top: bool = False) -> Any:
        """Describe a callable; ``top`` is the transform itself (or what a partial/method wraps)."""
        if isinstance(fn, functools.partial):
            return {
                "partial": self.callable(fn.func, where, top),
                "args": self.value(fn.args, f"{where} bound args"),
                "kwargs": self.value(fn.keywords, f"{where} bound keywords"),
            }
        if isinstance(fn, types.MethodType):
            return {
                "method": self.callable(fn.__func__, where, top),
                "self": self.value(fn.__self__, f"the object {where} is bound to"),
            }
        if isinstance(fn, types.FunctionType):
            return self.function(fn, where)
        if isinstance(fn, type):
            return self.cls(fn)
        if isinstance(fn, _BUILTIN_TYPES) or (callable(fn) and not _has_python_call(type(fn))):
            if top:
                raise Unfingerprintable(f"{where} is a builtin without Python source; wrap it in a def")
            return {"builtin": describe_name(fn), "version": _is_library(fn)[1]}
        if callable(fn):
            return {"object": self.cls(type(fn)), "state": self.value(fn, f"the state of {where}")}
        raise Unfingerprintable(f"{where} is a {type(fn).__name__}, not a callable")

    def function(self, fn: types.FunctionType, where: str) -> Any:
        library, version = _is_library(fn)
        if library:
            return {"library_fn": describe_name(fn), "version": version}
        if id(fn) in self._active:
            return {"recursive": describe_name(fn)}
        self._active.add(id(fn))
        try:
            name = describe_name(fn)
            code = fn.__code__
            try:
                source = textwrap.dedent(inspect.getsource(fn))
            except (OSError, TypeError):
                source = None  # e.g. defined in `python -c`: the compiled code below still identifies it
            closure = {}
            for var, cell in zip(code.co_freevars, fn.__closure__ or (), strict=True):
                try:
                    value = cell.cell_contents
                except ValueError:
                    closure[var] = "<empty cell>"
                    continue
                closure[var] = self.value(value, f"the closure variable {var!r} of {name}")
            globals_ = {}
            namespace = fn.__globals__
            for ref in sorted(_referenced_names(code)):
                if ref in namespace:
                    globals_[ref] = self.value(namespace[ref], f"the global {ref!r} read by {name}")
            return {
                "function": name,
                "source": source,
                "code": _code_digest(code),
                "defaults": self.value(fn.__defaults__, f"the defaults of {name}"),
                "kwdefaults": self.value(fn.__kwdefaults__, f"the keyword defaults of {name}"),
                "closure": closure,
                "globals": globals_,
            }
        finally:
            self._active.discard(id(fn))

    def cls(self, cls: type) -> Any:
        library, version = _is_library(cls)
        if library:
            return {"class": describe_name(cls), "version": version}
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            source = None
        methods = {}
        if source is None:  # no source file: fingerprint the methods' code instead
            for attr, member in sorted(vars(cls).items()):
                if isinstance(member, types.FunctionType):
                    methods[attr] = _code_digest(member.__code__)
        return {"class": describe_name(cls), "source": source, "methods": methods}

    # -- values -------------------------------------------------------------------------------
    def value(self, obj: Any, where: str) -> str:
        """A content digest of ``obj``; raises :class:`Unfingerprintable` naming ``where``."""
        if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
            return f"{type(obj).__name__}:{obj!r}"
        buffer = io.BytesIO()
        try:
            _ContentPickler(buffer, self, where).dump(obj)
        except Unfingerprintable:
            raise
        except Exception as exc:  # pickling raises many types: TypeError, PicklingError, AttributeError, ...
            raise Unfingerprintable(f"{where} is a {type(obj).__name__} that cannot be pickled: {exc}") from exc
        return hashlib.sha256(buffer.getvalue()).hexdigest()


def _has_python_call(cls: type) -> bool:
    call = getattr(cls, "__call__", None)  # noqa: B004 - fetches the function object, not a callable test
    return isinstance(call, types.FunctionType)


def _referenced_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _referenced_names(const)
    return names


def _code_digest(code: types.CodeType) -> str:
    digest = hashlib.sha256(code.co_code)
    for attr in _CODE_ATTRS:
        digest.update(repr(getattr(code, attr)).encode())
    for const in code.co_consts:
        digest.update(_const_repr(const).encode())
    return digest.hexdigest()


def _const_repr(const: Any) -> str:
    if isinstance(const, types.CodeType):
        return "code:" + _code_digest(const)
    if isinstance(const, frozenset):  # iteration order of str sets changes with hash randomisation
        return "frozenset:" + ",".join(sorted(_const_repr(c) for c in const))
    if isinstance(const, tuple):
        return "(" + ",".join(_const_repr(c) for c in const) + ")"
    return f"{type(const).__name__}:{const!r}"


class _ContentPickler(pickle.Pickler):
    """Pickles values for hashing: tensors and arrays by content, functions, classes and modules by
    their description, sets in a stable order (``persistent_id`` replaces them in the stream)."""

    def __init__(self, file: io.BytesIO, describer: _Describer, where: str) -> None:
        super().__init__(file, protocol=4)
        self._describer = describer
        self._where = where

    def persistent_id(self, obj: Any) -> Any:
        if obj is None or isinstance(obj, (bool, int, float, str, bytes, tuple, list, dict)):
            return None
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            return ("tensor", _tensor_digest(obj, self._where))
        np = sys.modules.get("numpy")
        if np is not None and isinstance(obj, np.ndarray):
            array = np.ascontiguousarray(obj)
            if array.dtype.hasobject:
                return None  # object arrays pickle their elements
            return (
                "ndarray",
                str(array.dtype),
                array.shape,
                hashlib.sha256(array.view(np.uint8).data).hexdigest() if array.size else "",
            )
        if isinstance(obj, types.ModuleType):
            library, version = _module_identity(obj.__name__)
            return ("module", obj.__name__, version if library else _user_module_digest(obj.__name__))
        if isinstance(obj, (set, frozenset)):
            return (type(obj).__name__, sorted(self._describer.value(e, self._where) for e in obj))
        if isinstance(obj, (types.FunctionType, functools.partial, types.MethodType)):
            return ("callable", _digest(self._describer.callable(obj, f"{describe_name(obj)} (in {self._where})")))
        if isinstance(obj, type):
            return ("class", _digest(self._describer.cls(obj)))
        if isinstance(obj, _BUILTIN_TYPES):
            return ("builtin", describe_name(obj), _is_library(obj)[1])
        return None


def _tensor_digest(tensor: Any, where: str) -> tuple:
    import torch

    if tensor.layout != torch.strided:
        raise Unfingerprintable(f"{where} holds a {tensor.layout} tensor; only dense tensors can be fingerprinted")
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    data = hashlib.sha256(flat.view(torch.uint8).numpy()).hexdigest() if flat.numel() else ""
    return (str(tensor.dtype), tuple(tensor.shape), data)
