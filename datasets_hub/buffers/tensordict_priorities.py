"""Priorities carried by TensorDicts: read from ``priority_key`` on writes and by ``update_tensordict_priority``.

:class:`TensorDictPriorities` is a part of
:class:`~datasets_hub.buffers.replay_buffers.TensorDictReplayBuffer`: when the sampler is prioritized,
``add``/``extend`` set the priorities the data holds (refusing NaN, infinite or negative ones before
anything is written), and ``update_tensordict_priority(td)`` reads ``"index"`` and ``priority_key``
from a sample. Extra priority dims (per-step priorities of an item) are reduced with ``reduction``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase

from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.samplers.prioritized import reduce_trailing
from datasets_hub.buffers.storages import Storage
from datasets_hub.buffers.writers import Writer


def _reduce(priority: torch.Tensor, reduction: str) -> torch.Tensor:
    """One priority per item: reduce every dim after the first."""
    return priority if priority.ndim <= 1 else reduce_trailing(priority.reshape(priority.shape[0], -1), reduction)


class TensorDictPriorities:
    """Priorities from TensorDicts (a mixin: the buffer holds the state it reads)."""

    _storage: Storage
    _sampler: Sampler
    _writer: Writer
    _priority_key: str | tuple[str, ...]
    _reduction: str

    if TYPE_CHECKING:

        def update_priority(self, index: Any, priority: Any) -> None: ...

    @property
    def priority_key(self) -> str | tuple[str, ...]:
        return self._priority_key

    def _has_priorities(self) -> bool:
        return type(self._sampler).update_priority is not Sampler.update_priority

    def _check_priorities(self, data: Any) -> None:
        """Refuse NaN, infinite or negative priorities in ``data`` before anything is written."""
        if not isinstance(data, TensorDictBase) or not self._has_priorities():
            return
        priority = data.get(self._priority_key, None)
        if priority is None:
            return
        priority = torch.as_tensor(priority).detach()
        if priority.is_floating_point() and (not torch.isfinite(priority).all() or (priority < 0).any()):
            raise ValueError(
                f"{self._priority_key!r} holds NaN, inf or a negative value: priorities must be finite and >= 0 "
                "(pass absolute TD errors, e.g. td_error.abs()); nothing was written"
            )

    def _priorities_from(self, data: Any, index: torch.Tensor, single: bool = False) -> None:
        if not isinstance(data, TensorDictBase) or not self._has_priorities():
            return
        priority = data.get(self._priority_key, None)
        if priority is None:
            return
        priority = priority.reshape(1, *priority.shape) if single else priority
        if getattr(self._storage, "ndim", 1) > 1:
            raise NotImplementedError(
                f"priorities in the data ({self._priority_key!r}) on a multi-dimensional storage are not supported: "
                "extend without them, then call update_priority(index, priority) with the returned index"
            )
        priority = _reduce(priority, self._reduction)[-index.numel() :]
        if self._writer.may_drop_items:  # items a TensorDictMaxValueWriter declined have no row
            kept = index >= 0
            index, priority = index[kept], priority[kept]
        self.update_priority(index, priority)

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Update priorities from a sample: reads ``"index"`` and ``priority_key``, one value per item
        (extra dims reduced with ``reduction``)."""
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"update_tensordict_priority needs a TensorDict, got {type(data).__name__}")
        index = data.get("index", None)
        if index is None:
            raise KeyError(
                "the TensorDict has no 'index' entry: pass a sample from this buffer (samples carry 'index')"
            )
        priority = data.get(self._priority_key, None)
        if priority is None:
            raise KeyError(
                f"the TensorDict has no {self._priority_key!r} entry (this buffer's priority_key): "
                "write the new priorities there, e.g. td.set('td_error', loss.detach())"
            )
        if index.ndim > 1 and getattr(self._storage, "ndim", 1) == 1:
            index = index.reshape(index.shape[0], -1)[:, 0]
        self.update_priority(index, _reduce(priority.detach(), self._reduction))
