"""Writers for TensorDict data (TorchRL's ``TensorDictRoundRobinWriter`` and ``TensorDictMaxValueWriter``)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase, is_tensor_collection

from datasets_hub.buffers.shared_counters import being_spawned
from datasets_hub.buffers.writers import RoundRobinWriter, Writer
from datasets_hub.errors import InvalidArgument, NotShareable, WrongDataType

# TorchRL's message says "expects data to be a tensor collection": code matching on it keeps working
_NOT_A_COLLECTION = (
    "TensorDictMaxValueWriter expects data to be a tensor collection (a TensorDict or a tensorclass) holding "
    "its rank_key, got {}: use RoundRobinWriter for other data"
)

NestedKey = Any
_REDUCTIONS = ("sum", "max", "min", "mean", "median")


class TensorDictRoundRobinWriter(RoundRobinWriter):
    """A :class:`RoundRobinWriter` that stores each item's position in its ``"index"`` entry.

    As in TorchRL, the written TensorDict gets ``"index"`` (int64, expanded over any trailing batch
    dims) before it is stored, so the stored rows know where they live; the caller's TensorDict is
    not modified by the writer (a ``TensorDictReplayBuffer`` sets ``"index"`` there itself).
    """

    def _prepare(self, data: Any, index: Any) -> Any:
        if not isinstance(data, TensorDictBase):
            raise WrongDataType(f"TensorDictRoundRobinWriter writes TensorDicts, got {type(data).__name__}")
        if isinstance(index, int):
            value = torch.full(data.batch_size, index, dtype=torch.int64)
        else:
            lead = index.reshape(-1, *([1] * (data.batch_dims - 1)))
            value = lead.expand(data.batch_size).clone()
        out = data.copy()  # shallow: the caller's TensorDict keeps its keys
        out.set("index", value)
        return out


class TensorDictMaxValueWriter(Writer):
    """Keep the items of highest rank; when full, a new item replaces the lowest-ranked one.

    ``rank_key`` (default ``("next", "reward")``) holds each item's value; when an item's entry has
    more than one element it is reduced with ``reduction`` (``"sum"``, ``"max"``, ``"min"``,
    ``"mean"`` or ``"median"``). While the storage has free rows, every item is written. When it is
    full, an item is written only if its rank is strictly greater than the lowest rank stored (on
    a tie the stored item stays), and it takes that item's row. ``extend`` returns, per item, the
    row it was written to or ``-1`` when it was dropped (as TorchRL), and a prioritized sampler is
    told only about the rows written. ``extend`` is vectorised: the rows it may evict are among the
    ``k`` lowest stored ranks (``k`` = items offered), found with one ``topk``, so a batch costs
    ``O(capacity + k log k)`` tensor work and no Python loop per item.

    The ranks of the stored items (TorchRL's heap) are part of ``state_dict``, hence saved by
    ``rb.dumps`` and restored by ``rb.loads``. Works on one-dimensional tensor storages of
    TensorDicts. ``compilable`` is accepted for TorchRL's signature: this writer holds no counters
    that processes share, so it changes nothing.
    """

    may_drop_items = True

    def __init__(self, rank_key: NestedKey | None = None, reduction: str = "sum", **kwargs: Any) -> None:
        compilable = kwargs.pop("compilable", False)
        if kwargs:
            raise TypeError(f"TensorDictMaxValueWriter got unexpected keyword arguments {sorted(kwargs)}")
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        super().__init__()
        self.rank_key = ("next", "reward") if rank_key is None else rank_key
        self.reduction = reduction
        self.compilable = bool(compilable)
        self._values = torch.zeros(0, dtype=torch.float64)  # rank of the item at each stored row
        self._written = 0

    def register_storage(self, storage: Any) -> None:
        if getattr(storage, "ndim", 1) > 1:
            raise NotImplementedError(
                "TensorDictMaxValueWriter keeps single items by rank: use a storage with ndim=1 "
                "(flatten the batch with td.reshape(-1) before extend)"
            )
        # ranks loaded before any storage was registered (``loads`` on a fresh writer) are kept
        loaded = self._values if self._storage is None else self._values[:0]
        if loaded.numel() > storage.max_size:
            raise ValueError(f"the writer ranks {loaded.numel()} items; this storage holds {storage.max_size}")
        super().register_storage(storage)
        self._values = torch.full((storage.max_size,), float("-inf"), dtype=torch.float64)
        self._values[: loaded.numel()] = loaded

    @property
    def write_count(self) -> int:
        return self._written

    @property
    def _cursor(self) -> int:
        """TorchRL's attribute: the next row a write fills while the storage is not full (0 once full)."""
        storage = self.storage
        return len(storage) % storage.max_size

    @property
    def _current_top_values(self) -> list[tuple[float, int]]:
        """TorchRL's attribute: ``(rank, row)`` of every stored item, lowest rank first (a valid heap)."""
        n = len(self._storage) if self._storage is not None else self._values.numel()
        ranks = self._values[:n]
        order = torch.sort(ranks, stable=True).indices
        return [(float(ranks[i]), int(i)) for i in order]

    def _ranks(self, data: Any, n: int) -> torch.Tensor:
        if not is_tensor_collection(data):
            raise WrongDataType(_NOT_A_COLLECTION.format(type(data).__name__))
        value = data.get(self.rank_key, None)
        if value is None:
            raise KeyError(
                f"the data has no rank_key {self.rank_key!r}: pass TensorDictMaxValueWriter(rank_key=<key of "
                "the value to keep the best items by>)"
            )
        value = value.detach().reshape(n, -1).to(torch.float64)
        if value.shape[1] != 1:
            if self.reduction == "median":
                value = value.median(dim=1).values
            else:
                value = getattr(value, {"max": "amax", "min": "amin"}.get(self.reduction, self.reduction))(dim=1)
        value = value.reshape(n)
        if torch.isnan(value).any():
            raise ValueError(f"rank_key {self.rank_key!r} holds NaN: ranks must be comparable numbers")
        return value

    def add(self, data: Any) -> int:
        if not is_tensor_collection(data):
            raise WrongDataType(_NOT_A_COLLECTION.format(type(data).__name__))
        return int(self.extend(data.unsqueeze(0))[0])

    def extend(self, data: Any) -> torch.Tensor:
        storage = self.storage
        if not is_tensor_collection(data):
            raise WrongDataType(_NOT_A_COLLECTION.format(type(data).__name__))
        if data.batch_dims == 0:
            raise InvalidArgument("TensorDictMaxValueWriter.extend needs a TensorDict with a leading batch dim")
        k = int(data.batch_size[0])
        ranks = self._ranks(data, k)
        n, cap = len(storage), storage.max_size
        out = torch.full((k,), -1, dtype=torch.int64)
        if k == 0:
            return out
        m = min(n, k)
        weak_vals, weak_rows = torch.topk(self._values[:n], m, largest=False) if m else (ranks[:0], out[:0])
        # candidates: the m weakest stored items, then the k new ones; keep the best of them
        evict = max(0, n + k - cap)
        cand = torch.cat([weak_vals, ranks])
        order = torch.sort(cand, descending=True, stable=True).indices  # stored first on ties
        kept = order[: cand.numel() - evict]
        kept_stored = torch.zeros(m, dtype=torch.bool)
        kept_stored[kept[kept < m]] = True
        new_kept = torch.sort(kept[kept >= m] - m).values  # in the data's order
        free_rows = torch.sort(weak_rows[~kept_stored]).values
        dest = torch.cat([free_rows, torch.arange(n, n + min(k, cap - n))])
        if new_kept.numel() != dest.numel():  # guards the counting argument in the docstring
            raise RuntimeError("TensorDictMaxValueWriter: rows to fill and items to write differ")
        if new_kept.numel():
            storage.set(dest, data[new_kept] if new_kept.numel() != k else data)
            self._values[dest] = ranks[new_kept]
            out[new_kept] = dest
            self._written += int(new_kept.numel())
        return out

    def get_insert_index(self, data: Any) -> int | None:
        """The row ``add(data)`` would write to, or ``None`` if it would be dropped (TorchRL's method)."""
        rank = float(self._ranks(data.unsqueeze(0) if data.batch_dims == 0 else data, 1)[0])
        storage = self.storage
        n, cap = len(storage), storage.max_size
        if n < cap:
            return n
        low, row = torch.min(self._values[:n], 0)
        return int(row) if rank > float(low) else None

    def empty(self) -> None:
        self._values.fill_(float("-inf"))
        self._written = 0

    def keep_write_count(self, count: int) -> None:
        self._written = int(count)

    def state_dict(self) -> dict[str, Any]:
        n = len(self._storage) if self._storage is not None else self._values.numel()
        return {"ranks": self._values[:n].tolist(), "write_count": self._written}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the ranks; a writer without a storage yet keeps them until ``register_storage``."""
        ranks = torch.tensor(state_dict["ranks"], dtype=torch.float64)
        if self._storage is None:
            self._values = ranks
        else:
            if ranks.numel() > self._values.numel():
                raise ValueError(
                    f"the saved writer ranks {ranks.numel()} items; this storage holds {self._values.numel()}"
                )
            self._values.fill_(float("-inf"))
            self._values[: ranks.numel()] = ranks
        self._written = int(state_dict["write_count"])

    def __getstate__(self) -> dict[str, Any]:
        if being_spawned():  # the ranks are this process's: a child's writes would not be ranked with ours
            raise NotShareable(
                "TensorDictMaxValueWriter cannot be shared between processes: it ranks the items in this "
                "process. Use a RoundRobinWriter for a buffer other processes write to"
            )
        return self.__dict__.copy()

    def __repr__(self) -> str:
        return f"TensorDictMaxValueWriter(rank_key={self.rank_key!r}, reduction={self.reduction!r})"
