"""``RemoteTensorDictReplayBuffer``: a ``TensorDictReplayBuffer`` whose public methods ``torch.distributed.rpc``
callers can invoke on an ``RRef``, as TorchRL's class of that name.

Locally it is a ``TensorDictReplayBuffer``. Remotely, the process that owns the buffer creates it with
``rref = rpc.remote(owner, RemoteTensorDictReplayBuffer, kwargs=...)`` and any worker calls
``rpc.rpc_sync(rref.owner(), RemoteTensorDictReplayBuffer.sample, args=(rref, 32))``: each public method
accepts the ``RRef`` in place of ``self`` and runs on the owner's local object. The transport is torch's own
RPC (no home-made protocol); for many nodes, :mod:`datasets_hub.interop.ray` serves a buffer from a Ray actor.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer


def _accepts_rref(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` called with an ``RRef`` as ``self`` runs on the ``RRef``'s local value (its owner's buffer)."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        local_value = getattr(self, "local_value", None)
        if local_value is not None and not isinstance(self, TensorDictReplayBuffer):
            self = local_value()
        return method(self, *args, **kwargs)

    # RPC pickles the function by reference: it must be found under this class's name
    call.__module__ = __name__
    call.__qualname__ = f"RemoteTensorDictReplayBuffer.{method.__name__}"
    return call


class RemoteTensorDictReplayBuffer(TensorDictReplayBuffer):
    """A ``TensorDictReplayBuffer`` whose public methods also take a ``torch.distributed.rpc.RRef`` to it as
    ``self`` (see the module docstring)."""


for _name in dir(TensorDictReplayBuffer):
    _method = getattr(TensorDictReplayBuffer, _name)
    if not _name.startswith("_") and callable(_method) and not isinstance(_method, type):
        setattr(RemoteTensorDictReplayBuffer, _name, _accepts_rref(_method))
