"""Hash modules of the storage maps: ``SipHash``, ``RandomProjectionHash``, ``BinaryToDecimal``.

Each maps a batch of feature rows ``[batch, features]`` to one value per row ``[batch]``:

- :class:`SipHash`: Python's built-in ``hash`` (SipHash) of each row's bytes. Equal rows give equal
  values; values are stable within one process, and across processes only with a fixed
  ``PYTHONHASHSEED``. ``as_tensor=False`` returns the rows' bytes instead (a list).
- :class:`RandomProjectionHash`: a random linear projection to ``n_components`` dims (cast to
  ``dtype_cast``, bfloat16 by default, so that nearby inputs share a value), then :class:`SipHash`.
  The projection is drawn (``init_method``, default standard normal, from torch's global generator)
  at the first call, or by :meth:`RandomProjectionHash.fit`.
- :class:`BinaryToDecimal`: reads each group of ``num_bits`` features as a binary number (most
  significant first) and sums the groups of a row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from datasets_hub.errors import InvalidParameter


class BinaryToDecimal(nn.Module):
    """Rows of bits to integers: each ``num_bits`` group read as a binary number, the groups summed.

    ``convert_to_binary=True`` first maps every positive feature to 1 and every other to 0. A row
    length that is not a multiple of ``num_bits`` (or shorter) raises ``ValueError``.
    """

    def __init__(self, num_bits: int, device: Any, dtype: torch.dtype, convert_to_binary: bool = False) -> None:
        super().__init__()
        if not isinstance(num_bits, int) or isinstance(num_bits, bool) or num_bits < 1:
            raise InvalidParameter(f"num_bits must be a positive int, got {num_bits!r}")
        self.num_bits = num_bits
        self.convert_to_binary = convert_to_binary
        # place values of one group, most significant bit first: 2**(num_bits-1), ..., 2, 1
        self.bases = 2 ** torch.arange(num_bits - 1, -1, -1, device=device, dtype=dtype)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        width = features.shape[-1]
        if width < self.num_bits or width % self.num_bits:
            raise InvalidParameter(
                f"BinaryToDecimal(num_bits={self.num_bits}) reads rows whose length is a multiple of "
                f"{self.num_bits}, got rows of {width} features"
            )
        bits = (features > 0) if self.convert_to_binary else features
        groups = bits.to(self.bases.dtype).reshape(*features.shape[:-1], width // self.num_bits, self.num_bits)
        return (groups * self.bases).sum(-1).sum(-1)


class SipHash(nn.Module):
    """One hash per row of a ``[batch, features]`` tensor (see the module docstring)."""

    def __init__(self, as_tensor: bool = True) -> None:
        super().__init__()
        self.as_tensor = as_tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor | list[bytes]:
        if x.dtype == torch.bfloat16:  # numpy has no bfloat16: the same bits, viewed as int16
            x = x.view(torch.int16)
        rows = [row.tobytes() for row in x.detach().cpu().numpy()]
        if not self.as_tensor:
            return rows
        return torch.tensor([hash(row) for row in rows], dtype=torch.int64)


class RandomProjectionHash(SipHash):
    """:class:`SipHash` of a random low-dimensional projection of each row (see the module docstring)."""

    _N_COMPONENTS_DEFAULT = 16

    def __init__(
        self,
        *,
        n_components: int | None = None,
        dtype_cast: torch.dtype = torch.bfloat16,
        as_tensor: bool = True,
        init_method: Callable[[torch.Tensor], Any] | None = None,
    ) -> None:
        super().__init__(as_tensor=as_tensor)
        n_components = self._N_COMPONENTS_DEFAULT if n_components is None else n_components
        if not isinstance(n_components, int) or isinstance(n_components, bool) or n_components < 1:
            raise InvalidParameter(f"n_components must be a positive int, got {n_components!r}")
        self._n_components = n_components
        self.dtype_cast = dtype_cast
        self.init_method = torch.nn.init.normal_ if init_method is None else init_method
        self.projection: torch.Tensor | None = None

    @property
    def n_components(self) -> int:
        return self._n_components

    def fit(self, x: torch.Tensor) -> None:
        """Draw the projection ``[x.shape[-1], n_components]`` for rows like ``x``."""
        projection = torch.empty(x.shape[-1], self.n_components, dtype=self.dtype_cast, device=x.device)
        self.init_method(projection)
        self.projection = projection

    def forward(self, x: torch.Tensor) -> torch.Tensor | list[bytes]:
        if self.projection is None:
            self.fit(x)
        projection = self.projection
        if projection is None or projection.shape[0] != x.shape[-1]:
            raise InvalidParameter(
                f"RandomProjectionHash was fitted on rows of {None if projection is None else projection.shape[0]} "
                f"features, got {x.shape[-1]}: use one hash module per input width"
            )
        return super().forward(x.to(self.dtype_cast) @ projection)
