"""``QueryModule`` and ``HashToInt``: from the entries of a TensorDict to the index of a storage row.

:class:`QueryModule` hashes each of its ``in_keys`` with its own hash module (rows of
``[batch, features]``), combines the per-key hashes of a row with ``aggregator`` when there are
several keys, and turns each combined hash into a storage index with ``hash_to_int`` (a
:class:`HashToInt` by default). It writes the index under ``index_key`` and, unless
``write_hash=False``, the hash under ``hash_key``, into the TensorDict it was given (a shallow copy
with ``clone=True``), and returns it.

:class:`HashToInt` numbers hashes in the order it first sees them: ``extend=True`` gives a new
hash the next free number; ``extend=False`` leaves the table as it is, and a hash it does not know
gets ``len(table)``: the row a map would write it to next, never one in use.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tensordict import NestedKey, TensorDictBase
from tensordict.utils import unravel_key
from torch import nn

from datasets_hub.buffers.maps.hashing import SipHash
from datasets_hub.errors import InvalidArgument, InvalidParameter


class HashToInt(nn.Module):
    """Hashes to consecutive ints ``0, 1, 2, ...`` in first-seen order (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.table: dict[int, int] = {}

    def __call__(self, key: torch.Tensor, extend: bool = False) -> torch.Tensor:
        table = self.table
        if extend:
            numbers = [table.setdefault(h, len(table)) for h in key.tolist()]
        else:
            numbers = [table.get(h, len(table)) for h in key.tolist()]
        return torch.tensor(numbers, device=key.device, dtype=key.dtype)

    def __len__(self) -> int:
        return len(self.table)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:  # type: ignore[override]  # a table, not parameters
        return {
            "keys": torch.tensor(list(self.table.keys()), dtype=torch.int64),
            "values": torch.tensor(list(self.table.values()), dtype=torch.int64),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        keys, values = state_dict["keys"].tolist(), state_dict["values"].tolist()
        if len(keys) != len(values):
            raise InvalidParameter(f"HashToInt state holds {len(keys)} keys and {len(values)} values")
        self.table = dict(zip(keys, values, strict=True))
        return None


def _one_key(key: Any) -> NestedKey:
    """``(("a",), "b")`` -> ``("a", "b")``; ``("a",)`` -> ``"a"``."""
    key = unravel_key(key)
    return key[0] if isinstance(key, tuple) and len(key) == 1 else key


class QueryModule(nn.Module):
    """Entries of a TensorDict to storage indices (see the module docstring).

    ``hash_module``: one hash module (copied per key when there are several keys), a list of one per
    key, or ``None`` (a :class:`SipHash` per key). ``aggregator`` combines several keys' hashes; by
    default the single ``hash_module`` given, else a :class:`SipHash` (one given with a single in_key warns: it
    has nothing to combine). ``clone`` is the default of
    ``forward``'s ``clone``.
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey,
        index_key: NestedKey = "_index",
        hash_key: NestedKey = "_hash",
        *,
        hash_module: Callable[[Any], Any] | list[Callable[[Any], Any]] | None = None,
        hash_to_int: Callable[..., torch.Tensor] | None = None,
        aggregator: Callable[[Any], Any] | None = None,
        clone: bool = False,
    ) -> None:
        super().__init__()
        keys = list(in_keys) if isinstance(in_keys, list) else [in_keys]
        if not keys:
            raise InvalidParameter("QueryModule needs at least one in_key to hash")
        self.in_keys: list[NestedKey] = [_one_key(k) for k in keys]
        self.index_key: NestedKey = _one_key(index_key)
        self.hash_key: NestedKey = _one_key(hash_key)
        self.out_keys = [self.index_key, self.hash_key]
        if hash_module is None:
            modules: list[Any] = [SipHash() for _ in self.in_keys]
        elif isinstance(hash_module, list):
            if len(hash_module) != len(self.in_keys):
                raise InvalidParameter(
                    f"QueryModule needs one hash module per in_key: {len(hash_module)} hash modules for "
                    f"{len(self.in_keys)} in_keys"
                )
            modules = list(hash_module)
        elif len(self.in_keys) == 1:
            modules = [hash_module]
        else:
            try:
                modules = [copy.deepcopy(hash_module) for _ in self.in_keys]
            except Exception as err:
                raise InvalidArgument(
                    "QueryModule copies a single hash_module once per in_key and this one cannot be deep-copied: "
                    "pass a list with one hash module per in_key"
                ) from err
        if aggregator is not None and len(self.in_keys) == 1:
            warnings.warn(
                "QueryModule: an aggregator combines the hashes of several in_keys, and there is one: it is not used",
                UserWarning,
                stacklevel=2,
            )
        if aggregator is None:
            aggregator = hash_module if hash_module is not None and not isinstance(hash_module, list) else SipHash()
        self.aggregator = aggregator
        self.hash_module = dict(zip(self.in_keys, modules, strict=True))
        self.hash_to_int = HashToInt() if hash_to_int is None else hash_to_int
        self.clone = clone

    def forward(
        self,
        tensordict: TensorDictBase,
        *,
        extend: bool = True,
        write_hash: bool = True,
        clone: bool | None = None,
    ) -> TensorDictBase:
        """Write ``index_key`` (and ``hash_key``) into ``tensordict`` (a shallow copy when cloning), return it.

        ``extend=True`` numbers hashes not seen before; ``extend=False`` does not change the table."""
        hashes = [self.hash_module[k](tensordict.get(k)) for k in self.in_keys]
        combined = hashes[0] if len(hashes) == 1 else self.aggregator(torch.stack(hashes, dim=-1))
        index = self.hash_to_int(combined, extend=extend)
        output = tensordict.copy() if (self.clone if clone is None else clone) else tensordict
        output.set(self.index_key, index)
        if write_hash:
            output.set(self.hash_key, combined)
        return output
