"""``LazyStackStorage``: items of different shapes, read back as a lazily stacked TensorDict (TorchRL's class)."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase, lazy_stack

from datasets_hub.buffers.storages import ListStorage


class LazyStackStorage(ListStorage):
    """A :class:`ListStorage` of TensorDicts whose reads are ``tensordict.lazy_stack`` of the items.

    Items may differ in shape (trajectories of different lengths, variable numbers of objects):
    ``storage[i]`` is item ``i``; a batch read (slice, list or tensor index, and every ``sample()``)
    is a ``LazyStackedTensorDict`` stacked along ``stack_dim``, each item keeping its own shape.
    ``extend`` takes a TensorDict (unbound along dim 0) or a list of TensorDicts. ``max_size=None``
    is unbounded. ``compilable`` is accepted (a Python list has nothing to change for compile);
    ``device`` must be the CPU. Saved with the ``ListStorageCheckpointer``.
    """

    def __init__(
        self, max_size: int | None = None, *, compilable: bool = False, stack_dim: int = 0, device: Any = None
    ) -> None:
        super().__init__(max_size, compilable=compilable, device=device)
        if not isinstance(stack_dim, int):
            raise TypeError(f"stack_dim must be an int, got {stack_dim!r}")
        self.stack_dim = stack_dim

    def set(self, cursor: Any, data: Any) -> None:
        items = [data] if isinstance(cursor, int) else (data.unbind(0) if isinstance(data, TensorDictBase) else data)
        for item in items:
            if not isinstance(item, TensorDictBase):
                raise TypeError(f"LazyStackStorage holds TensorDicts, got {type(item).__name__}")
        super().set(cursor, data)

    def get(self, index: Any) -> Any:
        out = super().get(index)
        if isinstance(out, list):
            if not out:
                raise IndexError("an empty index selects no item: LazyStackStorage cannot stack nothing")
            return lazy_stack(out, dim=self.stack_dim)
        return out
