"""``CompressedListStorage``: a list storage whose items are compressed on write and decompressed on read.

TorchRL 0.14's class (docs/guide/buffers.md): each item's tensors (a tensor item, or every tensor leaf of a
TensorDict item, nested ones included) are compressed one by one with ``compression_fn`` (default: ``zlib`` at
``compression_level``, what TorchRL uses before Python 3.14) and rebuilt with their dtype and shape on ``get``.
Other values (strings, numbers, non-tensor TensorDict entries) are kept as they are. It suits observations
that compress well (images, sparse or repeated frames) in a buffer held in host memory.

A slot holds a dict of plain values (tensors, strings, lists) marked with ``_MARK``, so the ``ListStorage``
state and checkpoint (``items.pt`` with ``torch.save``) carry the compressed bytes without a second format.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import is_non_tensor

from datasets_hub.buffers.storages import ListStorage

_MARK = "__datasets_hub_compressed__"  # a slot written by this storage (never a user's dict key by chance)


def _dtype(name: str) -> torch.dtype:
    value = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in a compressed item")
    return value


class CompressedListStorage(ListStorage):
    """A ``ListStorage`` of compressed items (TorchRL's ``CompressedListStorage``).

    - ``compression_fn(tensor) -> uint8 tensor`` and ``decompression_fn(compressed, metadata) -> tensor`` replace
      the default ``zlib`` pair; ``metadata`` holds the original ``"dtype"``, ``"shape"`` and ``"device"``.
      A custom pair may be lossy: items come back as its ``decompression_fn`` makes them.
    - ``compression_level`` (default 3) is ``zlib``'s, from 0 (none) to 9 (smallest); ``-1`` is zlib's default.
    - Reads decompress: ``get(i)`` returns an item equal to the one written (dtype, shape, values), on the CPU
      (``device`` other than the CPU is refused, as for ``ListStorage``). ``contains(i)`` says whether slot
      ``i`` holds an item.
    """

    def __init__(
        self,
        max_size: int | None = 1000,
        *,
        compression_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        decompression_fn: Callable[[torch.Tensor, dict[str, Any]], torch.Tensor] | None = None,
        compression_level: int = 3,
        device: Any = None,
        compilable: bool = False,
    ) -> None:
        if (compression_fn is None) != (decompression_fn is None):
            raise ValueError(
                "compression_fn and decompression_fn come as a pair: give both (a custom format) or neither (zlib)"
            )
        if isinstance(compression_level, bool) or not isinstance(compression_level, int):
            raise TypeError(f"compression_level must be an int, got {compression_level!r}")
        if compression_fn is None and not -1 <= compression_level <= 9:
            raise ValueError(
                f"compression_level={compression_level}: zlib takes -1 (its default) or 0 (none) to 9 (smallest)"
            )
        super().__init__(max_size, compilable=compilable, device=device)
        self.compression_level = compression_level
        self.compression_fn = compression_fn if compression_fn is not None else self._zlib_compress
        self.decompression_fn = decompression_fn if decompression_fn is not None else self._zlib_decompress

    # -- the default compressor ---------------------------------------------------------------------
    def _zlib_compress(self, tensor: torch.Tensor) -> torch.Tensor:
        raw = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return torch.frombuffer(bytearray(zlib.compress(raw, self.compression_level)), dtype=torch.uint8)

    @staticmethod
    def _zlib_decompress(compressed: torch.Tensor, metadata: dict[str, Any]) -> torch.Tensor:
        raw = zlib.decompress(compressed.cpu().numpy().tobytes())
        dtype, shape = metadata["dtype"], metadata["shape"]
        if not raw:  # an empty tensor: frombuffer refuses an empty buffer
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)

    # -- items <-> slots ------------------------------------------------------------------------------
    def _pack_tensor(self, tensor: torch.Tensor) -> dict[str, Any]:
        return {
            _MARK: "tensor",
            "data": self.compression_fn(tensor),
            "dtype": str(tensor.dtype),
            "shape": list(tensor.shape),
        }

    def _unpack_tensor(self, slot: dict[str, Any]) -> torch.Tensor:
        metadata = {"dtype": _dtype(slot["dtype"]), "shape": torch.Size(slot["shape"]), "device": torch.device("cpu")}
        return self.decompression_fn(slot["data"], metadata)

    def _pack(self, item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            return self._pack_tensor(item)
        if isinstance(item, TensorDictBase):
            fields: list[list[Any]] = []  # [key path, packed tensor or plain value]

            def walk(td: TensorDictBase, prefix: list[str]) -> None:
                for key, value in td.items():
                    if isinstance(value, torch.Tensor):
                        fields.append([[*prefix, key], self._pack_tensor(value)])
                    elif is_non_tensor(value):
                        fields.append([[*prefix, key], {_MARK: "plain", "value": td.get_non_tensor(key)}])
                    elif isinstance(value, TensorDictBase):
                        walk(value, [*prefix, key])
                    else:  # a tensorclass inside: kept whole, uncompressed
                        fields.append([[*prefix, key], {_MARK: "plain", "value": value}])

            walk(item, [])
            return {_MARK: "tensordict", "batch_size": list(item.batch_size), "fields": fields}
        return item  # other objects are kept as they are

    def _unpack(self, slot: Any) -> Any:
        kind = slot.get(_MARK) if isinstance(slot, dict) else None
        if kind == "tensor":
            return self._unpack_tensor(slot)
        if kind == "tensordict":
            out = TensorDict({}, batch_size=slot["batch_size"])
            for path, packed in slot["fields"]:
                key = tuple(path) if len(path) > 1 else path[0]
                out[key] = packed["value"] if packed[_MARK] == "plain" else self._unpack_tensor(packed)
            return out
        return slot

    # -- the ListStorage contract with packing in between ---------------------------------------------
    def set(self, cursor: Any, data: Any) -> None:
        if isinstance(cursor, (int, np.integer)):  # one item, as ListStorage tells them apart
            super().set(cursor, self._pack(data))
            return
        items = list(data.unbind(0)) if isinstance(data, (torch.Tensor, TensorDictBase)) else list(data)
        super().set(cursor, [self._pack(x) for x in items])

    def get(self, index: Any) -> Any:
        slots = super().get(index)
        if isinstance(index, (int, np.integer)):
            return self._unpack(slots)
        return [self._unpack(s) for s in slots]

    def read_key(self, key: str | tuple[str, ...]) -> torch.Tensor:
        if not len(self):
            raise KeyError(key)
        return torch.stack([torch.as_tensor(item[key]) for item in self.get(slice(None))])

    def contains(self, index: int) -> bool:
        """True when slot ``index`` holds an item (TorchRL's ``contains``)."""
        return 0 <= int(index) < len(self)

    def __repr__(self) -> str:
        return f"CompressedListStorage(max_size={self.max_size}, len={len(self)}, level={self.compression_level})"
