"""Whole groups of items that share a key (the prompt of LLM post-training): :class:`PromptGroupSampler`.

Group-relative objectives (GRPO and its replay variants) need a batch laid out as ``num_groups`` groups of
``samples_per_group`` items, each group's items sharing the value of ``group_key``. The sampler never
consumes the storage: past items of a group stay available to later batches (docs/guide/sampling.md).
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

import numpy as np
import torch
from tensordict import is_tensor_collection

from datasets_hub.buffers.samplers.base import Sampler, as_index
from datasets_hub.buffers.storages import Storage

NestedKey = Any
_STRATEGIES = ("random", "recency", "reward", "variance")


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a positive integer, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


class _Groups:
    """The storage's positions grouped by their ``group_key`` value: group ``g`` holds
    ``positions[offsets[g]:offsets[g + 1]]`` (ascending), and the per-item rewards when a strategy needs them."""

    def __init__(self, group_of: torch.Tensor, rewards: torch.Tensor | None) -> None:
        order = torch.argsort(group_of, stable=True)
        counts = torch.bincount(group_of)
        self.positions = order
        self.offsets = [0, *torch.cumsum(counts, 0).tolist()]
        self.rewards = rewards

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def members(self, group: int) -> torch.Tensor:
        return self.positions[self.offsets[group] : self.offsets[group + 1]]


class PromptGroupSampler(Sampler):
    """Batches of ``num_groups`` groups of ``samples_per_group`` items, the items of a group sharing the
    value stored under ``group_key`` (an int id or a string, e.g. the prompt), as TorchRL 0.14's sampler.

    - Exactly one of ``num_groups`` / ``samples_per_group`` is given (a positive int); the other is
      ``batch_size`` divided by it (a ``ValueError`` naming both when it does not divide).
    - Groups are drawn uniformly without repeats. Within a group, ``strategy`` picks the items:
      ``"random"`` uniformly without repeats, ``"recency"`` the most recently written ones (the write
      order the buffer reports through ``add``/``extend``; items it never reported, e.g. written by
      another buffer over the same storage, count as older than every reported one, in position order),
      ``"reward"`` the highest ``reward_key`` values, ``"variance"`` the subset whose rewards have the
      largest variance (ties: the largest total reward). Rewards are averaged over trailing dims to one
      value per item; these two strategies need a reward tensor (``TypeError`` otherwise).
    - Too few groups, or a group with too few items: the missing draws repeat groups / items, drawn
      with replacement, and a ``UserWarning`` saying so is raised once per sampler.
    - The group index is built from one read of the whole storage and kept while the storage's
      ``write_version`` and length are unchanged (every writer of the storage moves them, so buffers
      sharing a storage see each other's writes); ``cache_groups=False`` rebuilds it at every call.
    - Only one-dimensional storages whose reads are TensorDicts (tensor, memmap and lazy-stack storages):
      a ``ListStorage`` is a ``TypeError``, ``ndim > 1`` a ``NotImplementedError``.
    - ``state_dict()`` holds the recency stamps (``{}`` until the buffer reported a write with
      ``strategy="recency"``); the group index is never saved or pickled (it is rebuilt from the storage).
    - The draws use ``generator`` only.
    """

    requires_shared_state = True  # its group cache follows the storage (TorchRL 0.15 lists it too)

    def __init__(
        self,
        *,
        num_groups: int | None = None,
        samples_per_group: int | None = None,
        group_key: NestedKey = "query",
        strategy: str = "random",
        reward_key: NestedKey = ("next", "reward"),
        cache_groups: bool = True,
    ) -> None:
        if (num_groups is None) == (samples_per_group is None):
            raise TypeError(
                "PromptGroupSampler takes exactly one of num_groups or samples_per_group (the other is the batch "
                f"size divided by it), got num_groups={num_groups!r}, samples_per_group={samples_per_group!r}"
            )
        if strategy not in _STRATEGIES:
            raise ValueError(f"Unknown strategy={strategy!r}: expected one of {', '.join(map(repr, _STRATEGIES))}")
        self.num_groups = _positive("num_groups", num_groups) if num_groups is not None else None
        self.samples_per_group = (
            _positive("samples_per_group", samples_per_group) if samples_per_group is not None else None
        )
        self.group_key = group_key
        self.strategy = strategy
        self.reward_key = reward_key
        self.cache_groups = bool(cache_groups)
        self._group_index: _Groups | None = None  # the cache (TorchRL's attribute name)
        self._cache_key: tuple | None = None
        self._storage_ref: Any = None
        self._recency: torch.Tensor | None = None  # per position: write stamp, -1 when never reported
        self._recency_clock = 0
        self._warned_small_group = False

    # -- batch layout ------------------------------------------------------------------------------
    def _shape(self, batch_size: int) -> tuple[int, int]:
        if self.num_groups is not None:
            name, per = "num_groups", self.num_groups
        else:
            name, per = "samples_per_group", int(self.samples_per_group or 0)  # one of the two is set (__init__)
        if batch_size % per:
            raise ValueError(f"batch_size={batch_size} is not divisible by {name}={per}: pass a multiple of it")
        return (per, batch_size // per) if self.num_groups is not None else (batch_size // per, per)

    # -- the group index ---------------------------------------------------------------------------
    def _groups(self, storage: Storage) -> _Groups:
        n = len(storage)
        key = (storage.write_version, n)
        cached = self._group_index
        if (
            self.cache_groups
            and cached is not None
            and self._cache_key == key
            and self._storage_ref is not None
            and self._storage_ref() is storage
        ):
            return cached
        data = storage.get(slice(0, n))
        if not is_tensor_collection(data):
            raise TypeError(
                f"PromptGroupSampler reads group_key={self.group_key!r} from TensorDict reads, but "
                f"{type(storage).__name__} returns {type(data).__name__}: Plain ListStorage is not supported; use "
                "LazyTensorStorage, LazyMemmapStorage or LazyStackStorage"
            )
        group_of = self._group_ids(self._entry(data, self.group_key, "group_key"), n)
        rewards = self._rewards(data, n) if self.strategy in ("reward", "variance") else None
        groups = _Groups(group_of, rewards)
        self._group_index, self._cache_key, self._storage_ref = groups, key, weakref.ref(storage)
        return groups

    @staticmethod
    def _entry(data: Any, key: NestedKey, name: str) -> Any:
        value = data.get(key, None)
        if value is None:
            raise KeyError(
                f"PromptGroupSampler: the stored items have no {key!r} entry: pass {name}=<the key holding it>"
            )
        return value

    def _group_ids(self, values: Any, n: int) -> torch.Tensor:
        """Each item's group as an int64 id ``0..G-1``."""
        if isinstance(values, torch.Tensor) and not is_tensor_collection(values):
            if values.shape[:1] != (n,):
                raise RuntimeError(f"group_key={self.group_key!r} holds {tuple(values.shape)} values for {n} items")
            flat = values.reshape(n, -1) if values.ndim != 1 else values
            _, inverse = torch.unique(flat, dim=0, return_inverse=True)
            return inverse.reshape(n)
        items = values.tolist() if hasattr(values, "tolist") else list(values)
        if len(items) != n:
            raise RuntimeError(f"group_key={self.group_key!r} holds {len(items)} values for {n} items")
        ids: dict[Any, int] = {}
        keys = [tuple(v) if isinstance(v, list) else v for v in items]
        return torch.tensor([ids.setdefault(k, len(ids)) for k in keys], dtype=torch.int64)

    def _rewards(self, data: Any, n: int) -> torch.Tensor:
        reward = self._entry(data, self.reward_key, "reward_key")
        if not isinstance(reward, torch.Tensor) or is_tensor_collection(reward):
            raise TypeError(
                f"strategy={self.strategy!r} requires reward_key={self.reward_key!r} to hold a tensor, got "
                f"{type(reward).__name__}"
            )
        return reward.reshape(n, -1).double().mean(-1)

    # -- draws -------------------------------------------------------------------------------------
    def _warn_small(self) -> None:
        if not self._warned_small_group:
            warnings.warn(
                "PromptGroupSampler: a group (or the set of groups) held fewer items than requested; the draw was "
                "completed with replacement. Add data or lower num_groups / samples_per_group.",
                UserWarning,
                stacklevel=4,
            )
            self._warned_small_group = True

    def _pick(self, n: int, k: int) -> torch.Tensor:
        """``k`` of ``range(n)`` without repeats; when ``k > n``, all of them shuffled then uniform repeats."""
        perm = torch.randperm(n, generator=self.generator)
        if k <= n:
            return perm[:k]
        self._warn_small()
        return torch.cat([perm, torch.randint(n, (k - n,), generator=self.generator)])

    def _within(self, groups: _Groups, members: torch.Tensor, k: int) -> torch.Tensor:
        n = members.numel()
        if n < k:
            self._warn_small()
            repeats = members[torch.randint(n, (k - n,), generator=self.generator)]
            return torch.cat([self._within(groups, members, n), repeats])
        if self.strategy == "recency" and self._recency is not None:  # stamped by _ensure_recency
            return members[torch.argsort(self._recency[members], stable=True)[n - k :]]
        if groups.rewards is not None:  # "reward" and "variance" (_groups read them)
            rewards = groups.rewards[members]
            if self.strategy == "reward":
                return members[torch.topk(rewards, k).indices]
            return members[_max_variance_subset(rewards, k)]
        return members[torch.randperm(n, generator=self.generator)[:k]]

    def _ensure_recency(self, n: int) -> None:
        """Stamps for positions ``< n`` that no reported write stamped: older than every stamped one."""
        stamps = self._recency
        if stamps is None:
            self._recency = torch.arange(n, dtype=torch.int64)
            self._recency_clock = max(self._recency_clock, n)
            return
        if stamps.numel() < n:
            stamps = torch.cat([stamps, torch.full((n - stamps.numel(),), -1, dtype=torch.int64)])
            self._recency = stamps
        head = stamps[:n]
        missing = torch.nonzero(head < 0).reshape(-1)
        if missing.numel():
            known = head[head >= 0]
            first = int(known.min()) if known.numel() else missing.numel()
            head[missing] = torch.arange(first - missing.numel(), first, dtype=torch.int64)

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        n = len(storage)
        if n == 0:
            raise RuntimeError("Cannot sample from an empty storage: add or extend data first")
        ndim = getattr(storage, "ndim", 1)
        if ndim > 1:
            raise NotImplementedError(f"PromptGroupSampler samples one-dimensional storages only, got ndim={ndim}")
        num_groups, per_group = self._shape(batch_size)
        groups = self._groups(storage)
        if self.strategy == "recency":
            self._ensure_recency(n)
        chosen = self._pick(len(groups), num_groups)
        index = torch.cat([self._within(groups, groups.members(int(g)), per_group) for g in chosen.tolist()])
        return index, {}

    # -- buffer hooks ------------------------------------------------------------------------------
    def _record_write(self, index: Any) -> None:
        self._group_index = None
        if self.strategy != "recency":
            return
        rows = as_index(index).reshape(-1)
        if not rows.numel():
            return
        top = int(rows.max()) + 1
        stamps = self._recency
        if stamps is None or stamps.numel() < top:
            grown = torch.full((top,), -1, dtype=torch.int64)
            if stamps is not None:
                grown[: stamps.numel()] = stamps
            stamps = self._recency = grown
        stamps[rows] = torch.arange(self._recency_clock + 1, self._recency_clock + 1 + rows.numel())
        self._recency_clock += rows.numel()

    def add(self, index: int) -> None:
        self._record_write(index)

    def extend(self, index: torch.Tensor) -> None:
        self._record_write(index)

    def empty(self) -> None:
        self._group_index = self._cache_key = self._storage_ref = None
        self._recency, self._recency_clock, self._warned_small_group = None, 0, False

    # -- state -------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self._recency is None:
            return {}
        return {"position_recency": self._recency.clone(), "recency_clock": self._recency_clock}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        stamps = state_dict.get("position_recency")
        self._recency = torch.as_tensor(stamps, dtype=torch.int64).clone() if stamps is not None else None
        self._recency_clock = int(state_dict.get("recency_clock", 0))
        self._group_index = self._cache_key = self._storage_ref = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_group_index"] = state["_cache_key"] = state["_storage_ref"] = None  # rebuilt from the storage
        return state

    def __repr__(self) -> str:
        return (
            f"PromptGroupSampler(num_groups={self.num_groups}, samples_per_group={self.samples_per_group}, "
            f"group_key={self.group_key!r}, strategy={self.strategy!r})"
        )


def _max_variance_subset(rewards: torch.Tensor, k: int) -> torch.Tensor:
    """Positions (into ``rewards``) of ``k`` values with the largest variance, the largest total among equals.
    A subset of largest variance is always made of the ``j`` lowest and ``k - j`` highest values for some
    ``j``, so only those ``k + 1`` candidates (rows of ``ranks``) are scored."""
    n = rewards.numel()
    order = torch.argsort(rewards, stable=True)
    j = torch.arange(k + 1).unsqueeze(1)
    col = torch.arange(k).unsqueeze(0)
    ranks = torch.where(col < j, col, n - k + col)  # [k + 1, k]: candidate j's ranks in ascending order
    picked = rewards.double()[order[ranks]]
    variance, total = picked.var(dim=1, unbiased=False), picked.sum(dim=1)
    best = torch.isclose(variance, variance.max(), rtol=1e-12, atol=1e-12)
    winner = int(torch.where(best, total, total.new_full((), -torch.inf)).argmax())
    return order[ranks[winner]]
