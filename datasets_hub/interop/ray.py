"""A replay buffer served by a Ray actor, for users who outgrow one machine (docs/guide/interop.md).

One actor owns the buffer; :class:`RayReplayBuffer` is a small handle with the buffer's methods
(``sample``, ``extend``, ``add``, ``update_priority``, ``len``) that can be passed to Ray tasks
and actors, or re-found by name from another driver process (:meth:`RayReplayBuffer.connect`).
The actor runs one call at a time, so writes, draws and priority updates never interleave.

How the actor gets its buffer:

- ``RayReplayBuffer(rb)``: ``rb`` is pickled *by reference* to its build (path + fingerprint, see
  :func:`datasets_hub.interop.torch_data.dumps_by_reference`); the actor reopens the memmaps itself, so
  the build must be on a filesystem the actor's node sees (a shared filesystem for many nodes).
  In-memory storages travel by value; sampler, transforms and batch size come along.
- ``RayReplayBuffer.from_dataset(id, **load_kwargs)``: the actor calls ``datasets_hub.load``
  (its ``DATASETS_HUB_CACHE`` should point at the shared cache).
- ``RayReplayBuffer(factory)``: any zero-argument callable returning a buffer, called in the actor
  (e.g. an online ``TensorDictPrioritizedReplayBuffer`` fed by many collectors).

Samples travel back through Ray's object store (one copy of the batch, as any Ray result).
``handle.actor`` is the raw Ray actor for asynchronous calls (``handle.actor.sample.remote(256)``).
Needs the ``ray`` extra: ``pip install 'datasets-hub[ray]'``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datasets_hub.errors import MissingDependency

_INSTALL = "pip install 'datasets-hub[ray]'"


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise MissingDependency(f"RayReplayBuffer needs Ray, which is not installed ({exc}); run: {_INSTALL}") from exc
    return ray


class _BufferActor:
    """The actor body: holds one buffer and forwards calls to it."""

    def __init__(self, kind: str, payload: Any) -> None:
        if kind == "blob":
            from datasets_hub.interop.torch_data import loads_by_reference

            self.buffer = loads_by_reference(payload)
        elif kind == "factory":
            self.buffer = payload()
        else:  # pragma: no cover - the handle only sends the two kinds above
            raise ValueError(f"unknown buffer source kind {kind!r}")

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        return self.buffer.sample(batch_size, return_info=return_info)

    def extend(self, data: Any) -> Any:
        return self.buffer.extend(data)

    def add(self, data: Any) -> int:
        return self.buffer.add(data)

    def update_priority(self, index: Any, priority: Any) -> None:
        self.buffer.update_priority(index, priority)

    def update_tensordict_priority(self, data: Any) -> None:
        self.buffer.update_tensordict_priority(data)

    def getitem(self, index: Any) -> Any:
        return self.buffer[index]

    def len(self) -> int:
        return len(self.buffer)

    def describe(self) -> dict[str, Any]:
        storage = self.buffer.storage
        return {
            "buffer": repr(self.buffer),
            "len": len(self.buffer),
            "path": str(storage.path) if hasattr(storage, "path") else None,
            "pid": os.getpid(),
        }

    def state_dict(self) -> dict[str, Any]:
        return self.buffer.state_dict()

    def dumps(self, path: str) -> None:
        self.buffer.dumps(path)


@functools.cache
def _actor_class() -> Any:
    return _ray().remote(_BufferActor)


class RayReplayBuffer:
    """Handle to a buffer served by a Ray actor (see the module docstring for the three sources).

    ``name``/``namespace`` name the actor so other drivers can :meth:`connect` to it;
    ``detached=True`` keeps it alive after this driver exits (end it with :meth:`kill`).
    ``actor_options`` go to Ray's ``.options(...)`` (e.g. ``{"num_cpus": 1, "resources": ...}``).
    Ray is initialised the usual way (``ray.init(...)`` first, or Ray's auto-init on first use).
    Every method blocks until the actor answered; errors raised in the actor are re-raised here.
    """

    def __init__(
        self,
        buffer: Any = None,
        *,
        name: str | None = None,
        namespace: str | None = None,
        detached: bool = False,
        actor_options: dict[str, Any] | None = None,
        _actor: Any = None,
    ) -> None:
        ray = _ray()
        if _actor is not None:
            self._actor = _actor
            return
        if buffer is None:
            raise TypeError(
                "RayReplayBuffer needs a buffer: RayReplayBuffer(rb), RayReplayBuffer(lambda: make_buffer()), "
                "RayReplayBuffer.from_dataset(id), or RayReplayBuffer.connect(name) for an existing actor"
            )
        if isinstance(buffer, (str, Path)):
            from datasets_hub.interop.torch_data import as_buffer

            buffer = as_buffer(buffer)
        if callable(buffer) and not hasattr(buffer, "sample"):
            kind, payload = "factory", buffer
        else:
            from datasets_hub.interop.torch_data import dumps_by_reference

            kind, payload = "blob", dumps_by_reference(buffer)
        options = dict(actor_options or {})
        if name is not None:
            options["name"] = name
        if namespace is not None:
            options["namespace"] = namespace
        if detached:
            options["lifetime"] = "detached"
        actor_cls = _actor_class()
        self._actor = (actor_cls.options(**options) if options else actor_cls).remote(kind, payload)
        ray.get(self._actor.len.remote())  # surface construction errors (bad path, failing factory) here

    @classmethod
    def from_dataset(
        cls,
        dataset_id: str,
        *,
        name: str | None = None,
        namespace: str | None = None,
        detached: bool = False,
        actor_options: dict[str, Any] | None = None,
        **load_kwargs: Any,
    ) -> RayReplayBuffer:
        """An actor that calls ``datasets_hub.load(dataset_id, **load_kwargs)`` itself."""
        from datasets_hub.hub import load

        return cls(
            functools.partial(load, dataset_id, **load_kwargs),
            name=name,
            namespace=namespace,
            detached=detached,
            actor_options=actor_options,
        )

    @classmethod
    def connect(cls, name: str, namespace: str | None = None) -> RayReplayBuffer:
        """A handle to the actor started elsewhere with ``name=name`` (same Ray cluster)."""
        ray = _ray()
        try:
            actor = ray.get_actor(name, namespace=namespace)
        except ValueError as exc:
            raise ValueError(
                f"no Ray replay-buffer actor named {name!r} in namespace {namespace!r}: start one with "
                f"RayReplayBuffer(..., name={name!r}) in the same cluster (ray.init(address='auto'))"
            ) from exc
        return cls(_actor=actor)

    @property
    def actor(self) -> Any:
        """The Ray actor handle (methods return ObjectRefs: ``ray.get(h.actor.sample.remote(256))``)."""
        return self._actor

    def _call(self, method: str, *args: Any) -> Any:
        return _ray().get(getattr(self._actor, method).remote(*args))

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        return self._call("sample", batch_size, return_info)

    def extend(self, data: Any) -> Any:
        """Write a batch in the actor's buffer; returns the positions written."""
        return self._call("extend", data)

    def add(self, data: Any) -> int:
        return self._call("add", data)

    def update_priority(self, index: Any, priority: Any) -> None:
        self._call("update_priority", index, priority)

    def update_tensordict_priority(self, data: Any) -> None:
        self._call("update_tensordict_priority", data)

    def __getitem__(self, index: Any) -> Any:
        return self._call("getitem", index)

    def __len__(self) -> int:
        return self._call("len")

    def len(self) -> int:
        """``len(handle)``, named for Ray's method style."""
        return len(self)

    def describe(self) -> dict[str, Any]:
        """What the actor holds: the buffer's repr, length, build path (if any) and the actor's pid."""
        return self._call("describe")

    def state_dict(self) -> dict[str, Any]:
        return self._call("state_dict")

    def dumps(self, path: str | Path) -> None:
        """Save the buffer from the actor's process (``path`` as the actor's node sees it)."""
        self._call("dumps", str(path))

    def kill(self) -> None:
        """End the actor (its buffer goes with it)."""
        _ray().kill(self._actor)

    def __reduce__(self) -> tuple[Callable[..., RayReplayBuffer], tuple[Any, ...]]:
        # Ray serialises actor handles inside tasks' arguments; the handle needs nothing else
        return _from_actor, (self._actor,)

    def __repr__(self) -> str:
        return f"RayReplayBuffer(actor={self._actor!r})"


def _from_actor(actor: Any) -> RayReplayBuffer:
    return RayReplayBuffer(_actor=actor)
