"""Transforms applied to what a buffer returns (and, inverted, to what it writes).

A transform is called on a sample (``t(td) -> td``) and ``t.inv(td)`` runs on data being written;
both default to the identity. Plain callables are accepted anywhere a transform is: they become
the forward call, with an identity inverse. ``Rename``, ``Select`` and ``Exclude`` align datasets
whose keys differ (nested keys are tuples), e.g. before an ensemble stacks their samples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tensordict import TensorDictBase

from datasets_hub.errors import did_you_mean


class Transform:
    """Base class, written either way TorchRL's ``Transform`` is.

    - Per key: call ``super().__init__(in_keys=, out_keys=, in_keys_inv=, out_keys_inv=)`` and override
      ``_apply_transform(tensor)`` (samples: each ``in_keys[i]`` is read, transformed and written to
      ``out_keys[i]``, default ``in_keys``) and/or ``_inv_apply_transform(tensor)`` (writes: each
      ``out_keys_inv[i]`` is read and written to ``in_keys_inv[i]`` of a shallow copy, so the caller's
      data is never changed). A key absent from the data raises ``KeyError``.
    - Whole sample: override ``forward(data)`` (sample side) and/or ``inverse(data)`` (write side).

    Without keys and overrides both sides are the identity.
    """

    # subclasses that do not call __init__ (whole-sample transforms) have no keys
    in_keys: Sequence[Any] = ()
    out_keys: Sequence[Any] = ()
    in_keys_inv: Sequence[Any] = ()
    out_keys_inv: Sequence[Any] = ()

    def __init__(
        self,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
        in_keys_inv: Sequence[Any] | None = None,
        out_keys_inv: Sequence[Any] | None = None,
    ) -> None:
        self.in_keys, self.out_keys = _key_pairs(in_keys, out_keys, type(self).__name__, "")
        self.in_keys_inv, self.out_keys_inv = _key_pairs(in_keys_inv, out_keys_inv, type(self).__name__, "_inv")

    def __call__(self, data: Any) -> Any:
        return self.forward(data)

    def forward(self, data: Any) -> Any:
        if not self.in_keys:
            return data
        data = _require_td(data, type(self).__name__)
        _missing(data, self.in_keys, type(self).__name__)
        for in_key, out_key in zip(self.in_keys, self.out_keys, strict=True):
            data.set(out_key, self._apply_transform(data.get(in_key)))
        return data

    def inv(self, data: Any) -> Any:
        return self.inverse(data)

    def inverse(self, data: Any) -> Any:
        if not self.in_keys_inv:
            return data
        data = _require_td(data, type(self).__name__).copy()
        _missing(data, self.out_keys_inv, type(self).__name__)
        for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv, strict=True):
            data.set(in_key, self._inv_apply_transform(data.get(out_key)))
        return data

    def _apply_transform(self, value: Any) -> Any:
        raise NotImplementedError(
            f"{type(self).__name__} has in_keys but no _apply_transform(tensor): override it, or override forward(data)"
        )

    def _inv_apply_transform(self, value: Any) -> Any:
        raise NotImplementedError(
            f"{type(self).__name__} has in_keys_inv but no _inv_apply_transform(tensor): override it, "
            "or override inverse(data)"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _CallableTransform(Transform):
    """A plain function as the forward call."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def forward(self, data: Any) -> Any:
        return self.fn(data)

    def __repr__(self) -> str:
        return f"{getattr(self.fn, '__qualname__', repr(self.fn))}"


class _Inverted(Transform):
    """Runs ``transform``'s forward call on writes and nothing on reads (``append_transform(invert=True)``)."""

    def __init__(self, transform: Transform) -> None:
        self.transform = transform

    def forward(self, data: Any) -> Any:
        return data

    def inverse(self, data: Any) -> Any:
        return self.transform(data)

    def __repr__(self) -> str:
        return f"Inverted({self.transform!r})"


def as_transform(obj: Any, invert: bool = False) -> Transform:
    """A :class:`Transform` from a transform, any object with ``__call__`` (and maybe ``inv``), or a function."""
    if isinstance(obj, Transform):
        t = obj
    elif callable(obj):
        t = obj if hasattr(obj, "inv") else _CallableTransform(obj)
    else:
        raise TypeError(f"a transform must be callable, got {type(obj).__name__}")
    return _Inverted(t) if invert else t


class Compose(Transform):
    """Transforms run in order on samples, in reverse order (their ``inv``) on writes."""

    def __init__(self, *transforms: Any) -> None:
        if len(transforms) == 1 and isinstance(transforms[0], (list, tuple)):
            transforms = tuple(transforms[0])
        self.transforms: list[Transform] = [as_transform(t) for t in transforms]

    def forward(self, data: Any) -> Any:
        for t in self.transforms:
            data = t(data)
        return data

    def inverse(self, data: Any) -> Any:
        for t in reversed(self.transforms):
            inv = getattr(t, "inv", None)
            if inv is not None:
                data = inv(data)
                if data is None:  # held back (MultiStepTransform): nothing is left to write
                    return None
        return data

    def append(self, transform: Any) -> None:
        self.transforms.append(as_transform(transform))

    def insert(self, index: int, transform: Any) -> None:
        self.transforms.insert(index, as_transform(transform))

    def __len__(self) -> int:
        return len(self.transforms)

    def __getitem__(self, index: int) -> Transform:
        return self.transforms[index]

    def __iter__(self) -> Iterator[Transform]:
        return iter(self.transforms)

    def __repr__(self) -> str:
        return f"Compose({', '.join(map(repr, self.transforms))})"


def _key_pairs(keys: Sequence[Any] | None, out: Sequence[Any] | None, who: str, side: str) -> tuple[list, list]:
    """``(keys, out)`` as lists of keys (nested keys as tuples), ``out`` defaulting to ``keys``."""
    keys_list = [] if keys is None else [_norm(k) for k in ([keys] if isinstance(keys, (str, tuple)) else keys)]
    if out is None:
        return keys_list, list(keys_list)
    out_list = [_norm(k) for k in ([out] if isinstance(out, (str, tuple)) else out)]
    if len(out_list) != len(keys_list):
        raise ValueError(
            f"{who} needs as many out_keys{side} as in_keys{side}, got {len(keys_list)} and {len(out_list)}"
        )
    return keys_list, out_list


def _norm(key: Any) -> Any:
    if isinstance(key, tuple) and len(key) == 1:
        return key[0]
    if isinstance(key, list):
        return tuple(key)
    return key


def _require_td(data: Any, who: str) -> TensorDictBase:
    if not isinstance(data, TensorDictBase):
        raise TypeError(f"{who} works on TensorDict samples, got {type(data).__name__}")
    return data


def _missing(data: TensorDictBase, keys: Sequence[Any], who: str) -> None:
    present = set(data.keys(include_nested=True))
    absent = [k for k in keys if k not in present]
    if absent:
        names = [k if isinstance(k, str) else "/".join(k) for k in present]
        key = absent[0] if isinstance(absent[0], str) else "/".join(absent[0])
        raise KeyError(
            f"{who}: key {absent[0]!r} is not in the sample (keys: {sorted(names)}).{did_you_mean(key, names)}"
        )


class Rename(Transform):
    """Rename ``in_keys[i]`` to ``out_keys[i]`` in samples; the inverse renames back on writes."""

    def __init__(self, in_keys: Sequence[Any], out_keys: Sequence[Any]) -> None:
        if isinstance(in_keys, (str, tuple)) and not isinstance(in_keys, list):
            in_keys, out_keys = [in_keys], [out_keys]
        self.in_keys = [_norm(k) for k in in_keys]
        self.out_keys = [_norm(k) for k in out_keys]
        if len(self.in_keys) != len(self.out_keys):
            raise ValueError(
                f"Rename needs as many out_keys as in_keys, got {len(self.in_keys)} and {len(self.out_keys)}"
            )

    def _rename(self, data: Any, src: Sequence[Any], dst: Sequence[Any]) -> Any:
        data = _require_td(data, "Rename").copy()  # shallow: never mutate the caller's TensorDict
        _missing(data, src, "Rename")
        for a, b in zip(src, dst, strict=True):
            data.rename_key_(a, b)
        return data

    def forward(self, data: Any) -> Any:
        return self._rename(data, self.in_keys, self.out_keys)

    def inverse(self, data: Any) -> Any:
        present = set(_require_td(data, "Rename").keys(include_nested=True))
        pairs = [(b, a) for a, b in zip(self.in_keys, self.out_keys, strict=True) if b in present]
        return self._rename(data, [p[0] for p in pairs], [p[1] for p in pairs]) if pairs else data

    def __repr__(self) -> str:
        return f"Rename(in_keys={self.in_keys}, out_keys={self.out_keys})"


class Select(Transform):
    """Keep only ``keys`` (plus ``"index"`` and other buffer bookkeeping when present) in samples."""

    _bookkeeping = ("index", "_weight")

    def __init__(self, *keys: Any) -> None:
        if len(keys) == 1 and isinstance(keys[0], list):
            keys = tuple(keys[0])
        self.keys = [_norm(k) for k in keys]

    def forward(self, data: Any) -> Any:
        data = _require_td(data, "Select")
        _missing(data, self.keys, "Select")
        extra = [k for k in self._bookkeeping if k in data.keys()]
        return data.select(*self.keys, *extra)

    def __repr__(self) -> str:
        return f"Select({', '.join(map(repr, self.keys))})"


class Exclude(Transform):
    """Drop ``keys`` from samples (absent keys are ignored)."""

    def __init__(self, *keys: Any) -> None:
        if len(keys) == 1 and isinstance(keys[0], list):
            keys = tuple(keys[0])
        self.keys = [_norm(k) for k in keys]

    def forward(self, data: Any) -> Any:
        return _require_td(data, "Exclude").exclude(*self.keys)

    def __repr__(self) -> str:
        return f"Exclude({', '.join(map(repr, self.keys))})"


class DoubleToFloat(Transform):
    """Cast float64 leaves of samples to float32: every float64 leaf, or only ``in_keys``.

    Where TorchRL's offline scripts append ``DoubleToFloat`` (D4RL and several Minari datasets store
    float64 observations, which builds keep): ``load(id, transform=DoubleToFloat())``. It runs on
    each sampled batch, never on the build. With ``in_keys``, a key missing from a sample or whose
    dtype is neither float64 nor float32 is an error naming it, and the inverse (writes) casts those
    keys back to float64; without ``in_keys`` writes pass unchanged.
    """

    def __init__(self, in_keys: Sequence[Any] | None = None) -> None:
        if isinstance(in_keys, (str, tuple)):
            in_keys = [in_keys]
        self.every_float64 = in_keys is None  # no in_keys: every float64 leaf of the sample
        self.in_keys = [] if in_keys is None else [_norm(k) for k in in_keys]

    def _cast(self, data: Any, source: Any, target: Any) -> Any:
        data = _require_td(data, "DoubleToFloat").copy()  # shallow: never mutate the caller's TensorDict
        if self.every_float64:
            keys = [k for k, v in data.items(include_nested=True, leaves_only=True) if v.dtype == source]
        else:
            _missing(data, self.in_keys, "DoubleToFloat")
            keys = list(self.in_keys)
            for key in keys:
                if data.get(key).dtype not in (source, target):
                    raise TypeError(f"DoubleToFloat: {key!r} is {data.get(key).dtype}, not a float64 or float32 leaf")
        for key in keys:
            data.set(key, data.get(key).to(target))
        return data

    def forward(self, data: Any) -> Any:
        import torch

        return self._cast(data, torch.float64, torch.float32)

    def inverse(self, data: Any) -> Any:
        import torch

        if self.every_float64:
            return data  # which leaves were float64 is unknown on the write side
        return self._cast(data, torch.float32, torch.float64)

    def __repr__(self) -> str:
        return f"DoubleToFloat(in_keys={None if self.every_float64 else self.in_keys})"
