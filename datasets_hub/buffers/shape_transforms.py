"""``UnsqueezeTransform`` and ``SqueezeTransform`` under TorchRL's names, keys and semantics, without torchrl.

Both are per-key transforms (:class:`~datasets_hub.buffers.transforms.Transform`): ``in_keys``/``out_keys`` on
samples, ``in_keys_inv``/``out_keys_inv`` on writes, where each does the other's operation (so a buffer can
store ``[B]`` rewards written as ``[B, 1]`` and hand them back as ``[B, 1]``). ``dim`` must be negative, counted
from the last dim, unless ``allow_positive_dim=True``: a negative dim means the same thing whatever the batch
shape of the data (a single item, a batch, a ``[B, T]`` slice batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from datasets_hub.buffers.transforms import Transform
from datasets_hub.errors import InvalidArgument, WrongDataType


class UnsqueezeTransform(Transform):
    """Insert a dim of size one at ``dim`` in each ``in_keys`` entry (samples); remove it on writes."""

    def __init__(
        self,
        dim: int,
        *,
        allow_positive_dim: bool = False,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
        in_keys_inv: Sequence[Any] | None = None,
        out_keys_inv: Sequence[Any] | None = None,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise InvalidArgument(f"{type(self).__name__} needs an int dim (e.g. dim=-1), got {dim!r}")
        if dim >= 0 and not allow_positive_dim:
            raise InvalidArgument(
                f"{type(self).__name__}(dim={dim}): dim should be smaller than 0 so that it means the same dim "
                "whatever the batch shape of the data; pass allow_positive_dim=True to count from the first dim"
            )
        super().__init__(in_keys=in_keys, out_keys=out_keys, in_keys_inv=in_keys_inv, out_keys_inv=out_keys_inv)
        self.dim = dim
        self.allow_positive_dim = bool(allow_positive_dim)

    def _apply_transform(self, value: Any) -> torch.Tensor:
        return _tensor(value, self).unsqueeze(self.dim)

    def _inv_apply_transform(self, value: Any) -> torch.Tensor:
        return _squeeze(_tensor(value, self), self.dim, self)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dim={self.dim}, in_keys={self.in_keys}, out_keys={self.out_keys}, "
            f"in_keys_inv={self.in_keys_inv}, out_keys_inv={self.out_keys_inv})"
        )


class SqueezeTransform(UnsqueezeTransform):
    """Remove the dim of size one at ``dim`` from each ``in_keys`` entry (samples); insert it on writes."""

    def _apply_transform(self, value: Any) -> torch.Tensor:
        return _squeeze(_tensor(value, self), self.dim, self)

    def _inv_apply_transform(self, value: Any) -> torch.Tensor:
        return _tensor(value, self).unsqueeze(self.dim)


def _tensor(value: Any, who: Transform) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise WrongDataType(f"{type(who).__name__} reshapes tensors, got {type(value).__name__}")
    return value


def _squeeze(value: torch.Tensor, dim: int, who: Transform) -> torch.Tensor:
    if value.ndim == 0 or value.shape[dim] != 1:
        # torch.squeeze would return the tensor unchanged: a silently wrong shape downstream
        raise InvalidArgument(
            f"{type(who).__name__}(dim={dim}) removes a dim of size 1, and the entry has shape {list(value.shape)}"
        )
    return value.squeeze(dim)
