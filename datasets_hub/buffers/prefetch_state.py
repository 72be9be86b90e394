"""The batches a prefetching buffer has drawn ahead, as part of its saved state.

A buffer built with ``prefetch=N`` keeps up to ``N`` batches in flight; its sampler and generator
have already moved past them. Saving the sampler alone would make a restored buffer skip those
batches, so the saved state (``state_dict``, pickling, ``dumps``) also holds them, as TorchRL's
``"_prefetch_state"`` does: ``{"version": 1, "capacity": N, "queue": ((data, info, ran_out), ...)}``,
oldest first, every tensor a copy (changing a saved batch never changes a queued one). A restored
buffer hands those batches out first, then samples on from the restored sampler, so its batches
are the ones the saved buffer would have given.
"""

from __future__ import annotations

import copy
from concurrent.futures import Future
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from datasets_hub.errors import InvalidArgument

VERSION = 1


def clone_batch(value: Any) -> Any:
    """A copy of a drawn batch ``(data, info, ran_out)`` sharing no tensor with it (autograd flags kept)."""
    if isinstance(value, torch.Tensor):
        copied = value.detach().clone()
        return copied.requires_grad_() if value.requires_grad else copied
    if isinstance(value, TensorDictBase):
        return value.apply(clone_batch)
    if isinstance(value, tuple):
        return tuple(clone_batch(v) for v in value)
    if isinstance(value, list):
        return [clone_batch(v) for v in value]
    if isinstance(value, dict):
        return {k: clone_batch(v) for k, v in value.items()}
    return copy.deepcopy(value)


def capture(results: list[Any], capacity: int, clone: bool = True) -> dict[str, Any]:
    """The prefetch state of a buffer of ``capacity`` whose queue holds the settled ``results``."""
    queue = tuple(clone_batch(r) for r in results) if clone else tuple(results)
    return {"version": VERSION, "capacity": int(capacity), "queue": queue}


def check(state: dict[str, Any] | None, capacity: int) -> None:
    """Refuse a prefetch state this buffer (``prefetch=capacity``) cannot take, before anything changes."""
    if state is None:
        return
    if not isinstance(state, dict) or state.get("version") != VERSION:
        raise InvalidArgument(f"not a prefetch state of version {VERSION}: {type(state).__name__}")
    saved = state.get("capacity")
    if saved != capacity:
        raise InvalidArgument(
            f"Cannot restore a prefetch queue with capacity {saved} into a replay buffer with capacity {capacity}: "
            f"build the buffer with prefetch={saved}"
        )
    if len(state["queue"]) > capacity:
        raise InvalidArgument(f"the saved prefetch queue holds {len(state['queue'])} batches, more than {capacity}")


def settled(results: Any) -> list[Future]:
    """Completed futures holding copies of ``results`` (what a restored queue hands out)."""
    futures = []
    for result in results:
        future: Future = Future()
        future.set_result(clone_batch(result))
        futures.append(future)
    return futures


def to_file_form(state: dict[str, Any]) -> dict[str, Any] | None:
    """``state`` as ``torch.load(weights_only=True)`` reads it back (TensorDicts as plain dicts), or ``None``
    when a queued batch holds other objects (a ``collate_fn`` returning Python objects): such a dump keeps
    no queue, and the buffer loaded from it samples on from the restored sampler."""
    queue = []
    for data, info, ran_out in state["queue"]:
        stored: dict[str, Any]
        if isinstance(data, TensorDictBase):
            if type(data) is not TensorDict or any(
                isinstance(v, TensorDictBase) and v.batch_dims != data.batch_dims for v in data.values(True)
            ):
                return None  # a plain dict would not keep a lazy stack or a nested TensorDict's own batch dims
            stored = {"tensordict": data.to_dict(), "batch_size": list(data.batch_size)}
        elif isinstance(data, torch.Tensor):
            stored = {"tensor": data}
        else:
            return None
        if not all(isinstance(v, torch.Tensor) for v in info.values()):
            return None
        queue.append((stored, dict(info), bool(ran_out)))
    return {**state, "queue": queue}


def from_file_form(state: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`to_file_form`."""
    queue = []
    for data, info, ran_out in state["queue"]:
        if "tensor" in data:
            value = data["tensor"]
        else:
            value = TensorDict(data["tensordict"], batch_size=data["batch_size"])
        queue.append((value, info, ran_out))
    return {**state, "queue": tuple(queue)}
