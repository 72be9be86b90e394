"""A check, usable on any device (CPU included), that a piece of code never makes the host wait for a device.

On CUDA, ``torch.cuda.set_sync_debug_mode("error")`` catches synchronising calls, but only on a GPU.
:func:`no_host_sync` catches them everywhere by the operations themselves: under it every aten op
and every tensor method call is recorded, and one that synchronises on an accelerator raises
:class:`HostSyncError` naming it:

- reading values on the host: ``.item()``, ``int()``/``float()``/``bool()`` of a tensor (an ``if`` on
  a tensor value), ``.tolist()``, ``.numpy()``, ``.cpu()``, ``aten._local_scalar_dense``, ``aten.equal``;
- ops whose output size depends on the data: ``nonzero``/``argwhere``/one-argument ``where``,
  ``unique``/``unique_consecutive``, ``masked_select``, indexing or index assignment with a boolean
  mask, ``repeat_interleave`` with tensor repeats and no ``output_size``, ``bincount``;
- copies between devices and tensors built from host data (``torch.tensor(...)``: ``aten.lift_fresh``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

#: aten ops (by name) that read device values on the host or have data-dependent output sizes
SYNC_OPS = {
    "_local_scalar_dense": "reads a device value on the host (.item(), int(), float(), bool(), if)",
    "item": "reads a device value on the host",
    "is_nonzero": "reads a device value on the host (bool() of a tensor, an if on a tensor)",
    "equal": "compares on the host (torch.equal returns a Python bool)",
    "nonzero": "has a data-dependent output size (nonzero, argwhere, where(cond), boolean indexing)",
    "argwhere": "has a data-dependent output size",
    "masked_select": "has a data-dependent output size",
    "_unique": "has a data-dependent output size",
    "_unique2": "has a data-dependent output size",
    "unique_dim": "has a data-dependent output size",
    "unique_consecutive": "has a data-dependent output size",
    "bincount": "has a data-dependent output size",
    "lift_fresh": "builds a tensor from host data (torch.tensor(...)): a host-to-device copy",
    "lift_fresh_copy": "builds a tensor from host data (torch.tensor(...)): a host-to-device copy",
}
#: tensor methods that bring values to the host
SYNC_METHODS = {"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "__array__"}


class HostSyncError(RuntimeError):
    """An operation that makes the host wait for the device ran where none may (see :func:`no_host_sync`)."""


def _devices(values: Any) -> set[torch.device]:
    found: set[torch.device] = set()
    stack = [values]
    while stack:
        v = stack.pop()
        if isinstance(v, torch.Tensor):
            if v.ndim or v.device.type != "cpu":  # 0-dim CPU tensors are scalars: no copy to a device
                found.add(v.device)
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
    return found


class _Dispatch(TorchDispatchMode):
    def __init__(self, ops: list[str]) -> None:
        super().__init__()
        self.ops = ops

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = str(func)  # "aten.<op>.<overload>"
        self.ops.append(name)
        packet = name.split(".")[1]  # "<op>"
        if packet in SYNC_OPS:
            raise HostSyncError(f"{name} {SYNC_OPS[packet]}")
        if packet in ("index", "index_put", "index_put_", "_index_put_impl_"):
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ()):
                raise HostSyncError(f"{name} with a boolean mask has a data-dependent size (a nonzero inside)")
        if (
            name == "aten.repeat_interleave.Tensor"
            and kwargs.get("output_size") is None
            and (len(args) < 2 or args[1] is None)
        ):
            raise HostSyncError(f"{name} without output_size reads the total of the repeats on the host")
        if (
            name == "aten.repeat_interleave.self_Tensor"
            and kwargs.get("output_size") is None
            and (len(args) < 4 or args[3] is None)
        ):
            raise HostSyncError(f"{name} with tensor repeats and no output_size reads their total on the host")
        if packet in ("_to_copy", "copy_", "_copy_from"):
            devices = _devices(args) | _devices(kwargs)
            target = kwargs.get("device")
            if target is not None:
                devices.add(torch.device(target))
            if len(devices) > 1:
                raise HostSyncError(f"{name} copies between devices {sorted(map(str, devices))}")
        elif len(_devices(args) | _devices(kwargs)) > 1:
            raise HostSyncError(f"{name} mixes tensors of several devices")
        return func(*args, **kwargs)


class _Function(TorchFunctionMode):
    def __init__(self, calls: list[str]) -> None:
        super().__init__()
        self.calls = calls

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        self.calls.append(name)
        if name in SYNC_METHODS:
            raise HostSyncError(f"Tensor.{name}() brings device values to the host")
        if name == "to" and args and isinstance(args[0], torch.Tensor):
            target = kwargs.get("device")
            for a in args[1:]:
                if isinstance(a, (str, torch.device)):
                    target = a
                elif isinstance(a, torch.Tensor):
                    target = a.device
            if target is not None and torch.device(target) != args[0].device:
                raise HostSyncError(f"Tensor.to({target}) copies from {args[0].device}")
        return func(*args, **kwargs)


@contextlib.contextmanager
def no_host_sync() -> Iterator[list[str]]:
    """Run the body under the check; yields the list the aten ops it ran are appended to.

    Raises :class:`HostSyncError` at the first synchronising operation (see the module docstring).
    """
    ops: list[str] = []
    with _Function(ops), _Dispatch(ops):
        yield ops
