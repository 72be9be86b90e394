"""Prioritized experience replay (Schaul et al., 2016) on vectorised segment trees.

The trees are flat tensors updated and searched one *level* at a time with tensor ops, so the
cost of a batch is ``O(batch * log capacity)`` tensor work and ``O(log capacity)`` Python steps,
never a Python loop per item. :class:`PrioritizedSampler` draws transitions by priority,
:class:`PrioritizedSliceSampler` slices whose start row is drawn by priority.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from datasets_hub.buffers.samplers.base import Sampler, as_index, refuse_without_replacement
from datasets_hub.buffers.samplers.slice import SliceSampler
from datasets_hub.buffers.samplers.slice_layout import SliceLayout
from datasets_hub.buffers.storages import Storage

NestedKey = Any

#: how several priorities become one (per-step priorities of one item, repeated indices): TorchRL's set
REDUCTIONS = ("max", "min", "mean", "median")


class SegmentTree:
    """A complete binary tree over ``capacity`` leaves combined with ``op`` (sum, min or max).

    Node ``k`` has children ``2k`` and ``2k+1``; leaves live at ``[size, 2*size)`` where ``size``
    is ``capacity`` rounded up to a power of two. Unset leaves hold ``neutral``. Values are
    float64 whatever the sampler's dtype: a float32 sum over a million priorities loses the
    precision that the prefix search needs.
    """

    def __init__(self, capacity: int, op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], neutral: float) -> None:
        if capacity < 1:
            raise ValueError(f"a segment tree needs capacity >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.depth = max(0, (self.capacity - 1).bit_length())
        self.size = 1 << self.depth
        self.op, self.neutral = op, float(neutral)
        self.tree = torch.full((2 * self.size,), self.neutral, dtype=torch.float64)

    @property
    def root(self) -> float:
        return float(self.tree[1]) if self.size > 1 else float(self.tree[self.size])

    def leaves(self) -> torch.Tensor:
        return self.tree[self.size : self.size + self.capacity]

    def __getitem__(self, index: torch.Tensor) -> torch.Tensor:
        return self.tree[index + self.size]

    def set_(self, index: torch.Tensor, values: torch.Tensor) -> None:
        """Set leaves ``index`` (1-D int64, no duplicates) to ``values`` and refresh their ancestors."""
        if index.numel() == 0:
            return
        tree = self.tree
        pos = index + self.size
        tree[pos] = values.to(torch.float64)
        pos = torch.unique(pos >> 1)  # sorted, so parents of later levels stay sorted
        for _ in range(self.depth):
            tree[pos] = self.op(tree[2 * pos], tree[2 * pos + 1])
            pos = torch.unique_consecutive(pos >> 1)

    def fill_(self, values: torch.Tensor) -> None:
        """Replace every leaf (``values`` has ``capacity`` entries) and rebuild the tree in ``O(capacity)``."""
        tree = self.tree
        tree.fill_(self.neutral)
        tree[self.size : self.size + self.capacity] = values.to(torch.float64)
        for level in range(self.depth - 1, -1, -1):
            lo, hi = 1 << level, 1 << (level + 1)
            tree[lo:hi] = self.op(tree[2 * lo : 2 * hi : 2], tree[2 * lo + 1 : 2 * hi : 2])

    def find_prefix(self, mass: torch.Tensor) -> torch.Tensor:
        """Sum trees only: for each ``mass`` in ``[0, root)``, the leaf whose cumulative sum covers it.

        The descent never enters a subtree of zero mass, so a rounding error can never return a
        leaf of zero priority (an unset row or an invalid slice start).
        """
        tree = self.tree
        node = torch.ones(mass.shape, dtype=torch.int64)
        for _ in range(self.depth):
            left = node * 2
            lv = tree[left]
            go_right = ((mass >= lv) & (tree[left + 1] > 0)) | (lv <= 0)
            mass = torch.where(go_right, mass - lv, mass)
            node = left + go_right
        return node - self.size


def sum_tree(capacity: int) -> SegmentTree:
    return SegmentTree(capacity, torch.add, 0.0)


def min_tree(capacity: int) -> SegmentTree:
    return SegmentTree(capacity, torch.minimum, float("inf"))


def max_tree(capacity: int) -> SegmentTree:
    return SegmentTree(capacity, torch.maximum, 0.0)


def check_reduction(reduction: str) -> str:
    """``reduction`` if it is one of :data:`REDUCTIONS`, else a ``ValueError`` listing them."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    return reduction


def reduce_trailing(priority: torch.Tensor, reduction: str) -> torch.Tensor:
    """One priority per leading index: ``priority`` reduced over its last dim with ``reduction``."""
    if reduction == "median":
        return priority.median(-1).values
    return getattr(priority, {"max": "amax", "min": "amin", "mean": "mean"}[reduction])(-1)


def reduce_priorities(index: Any, priority: Any, reduction: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalise ``update_priority`` arguments to unique 1-D ``(index, priority)``.

    Trailing priority dimensions beyond the index (per-step priorities of a stored trajectory)
    and repeated indices are both combined with ``reduction``.
    """
    index = as_index(index)
    priority = torch.as_tensor(priority).detach().to("cpu", torch.float64)
    if priority.ndim > index.ndim and priority.shape[: index.ndim] == index.shape and index.ndim:
        priority = reduce_trailing(priority.reshape(*index.shape, -1), reduction)
    index = index.reshape(-1)
    try:
        priority = priority.expand(index.shape) if priority.numel() == 1 else priority.reshape(index.shape)
    except RuntimeError as exc:
        raise ValueError(
            f"priority of shape {tuple(priority.shape)} does not match index of shape {tuple(index.shape)}: "
            "pass one priority per index (or a scalar)"
        ) from exc
    if not torch.isfinite(priority).all() or (priority < 0).any():
        raise ValueError(
            "priorities must be finite and >= 0 (got NaN, inf or a negative value): "
            "pass absolute TD errors, e.g. td_error.abs()"
        )
    uniq, inverse = torch.unique(index, return_inverse=True)
    if uniq.numel() == index.numel():
        order = torch.argsort(index)
        return index[order], priority[order]
    if reduction == "median":
        # lower median of each group: sort by priority, then stably by index
        order = torch.argsort(priority, stable=True)
        order = order[torch.argsort(index[order], stable=True)]
        _, counts = torch.unique_consecutive(index[order], return_counts=True)
        first = torch.cumsum(counts, 0) - counts
        return uniq, priority[order][first + (counts - 1) // 2]
    reduce = {"max": "amax", "min": "amin", "mean": "mean"}[reduction]
    out = torch.zeros(uniq.shape, dtype=torch.float64)
    out = out.scatter_reduce(0, inverse, priority, reduce=reduce, include_self=False)
    return uniq, out


class PrioritizedSampler(Sampler):
    """Sample row ``i`` with probability ``P(i) = q_i / sum_j q_j``, ``q_i = (p_i + eps) ** alpha``.

    - New rows (``add``/``extend``) get the largest priority seen so far (1.0 before any update),
      or with ``max_priority_within_buffer=True`` the largest priority of the rows currently held.
    - ``update_priority(index, priority)`` sets ``p_i``; extra trailing priority dimensions and
      repeated indices are combined with ``reduction`` (``"max"``, ``"min"``, ``"mean"``, ``"median"``).
    - ``sample`` returns ``info["_weight"]``: the importance weight
      ``w_i = (N * P(i)) ** -beta / max_j w_j`` (Schaul et al. 2016), in ``dtype``, where ``N`` is
      ``len(storage)`` and the max runs over the rows held (so ``w <= 1``).
    - ``max_capacity`` must be at least the storage capacity.
    """

    requires_shared_state = True  # the priorities the trainer updates

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        max_priority_within_buffer: bool = False,
        *,
        replacement: bool = True,
    ) -> None:
        refuse_without_replacement(type(self), replacement)
        for name, value in (("alpha", alpha), ("beta", beta), ("eps", eps)):
            try:
                finite = not isinstance(value, bool) and math.isfinite(float(value))
            except (TypeError, ValueError):
                finite = False
            if not finite:
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if alpha < 0 or beta < 0:
            raise ValueError(f"alpha and beta must be >= 0, got alpha={alpha}, beta={beta}")
        if eps <= 0:
            raise ValueError(f"eps must be > 0 so that no row has zero probability, got {eps}")
        if isinstance(max_capacity, bool) or not isinstance(max_capacity, (int, np.integer)) or max_capacity < 1:
            raise ValueError(f"max_capacity must be a positive int, got {max_capacity!r}")
        check_reduction(reduction)
        self.max_capacity = int(max_capacity)
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self.dtype, self.reduction = dtype, reduction
        self.max_priority_within_buffer = bool(max_priority_within_buffer)
        self._init_trees()

    def _init_trees(self) -> None:
        self._sum = sum_tree(self.max_capacity)
        self._min = min_tree(self.max_capacity)
        self._max = max_tree(self.max_capacity) if self.max_priority_within_buffer else None
        self._max_priority = 1.0  # largest raw priority seen

    # -- priorities --------------------------------------------------------------------------------
    def sampling_weights(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The unnormalised sampling weight ``(priority + eps) ** alpha`` of ``rows`` (all
        ``max_capacity`` rows when None; rows never written hold 0), float64, a view when ``rows`` is None."""
        return self._sum.leaves() if rows is None else self._sum[rows]

    def _q(self, priority: torch.Tensor) -> torch.Tensor:
        return torch.pow(priority + self.eps, self.alpha)

    @property
    def default_priority(self) -> float:
        """The ``q`` value given to new rows."""
        if self._max is not None and self._max.root > 0:
            return self._max.root
        return float(self._q(torch.tensor(self._max_priority, dtype=torch.float64)))

    def _check_index(self, index: torch.Tensor) -> None:
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= self.max_capacity):
            raise IndexError(
                f"row {int(index.max())} is outside this PrioritizedSampler's max_capacity={self.max_capacity}: "
                "build the sampler with max_capacity >= the storage's max_size"
            )

    def _set(self, index: torch.Tensor, q: torch.Tensor) -> None:
        self._sum.set_(index, q)
        self._min.set_(index, q)
        if self._max is not None:
            self._max.set_(index, q)

    def add(self, index: int) -> None:
        self.extend(torch.tensor([int(index)]))

    def extend(self, index: torch.Tensor) -> None:
        index = torch.unique(as_index(index).reshape(-1))
        self._check_index(index)
        self._set(index, torch.full(index.shape, self.default_priority, dtype=torch.float64))

    def update_priority(self, index: Any, priority: Any) -> None:
        index, priority = reduce_priorities(index, priority, self.reduction)
        self._check_index(index)
        if priority.numel():
            self._max_priority = max(self._max_priority, float(priority.max()))
        self._set(index, self._q(priority))

    def priorities(self, index: Any) -> torch.Tensor:
        """The stored ``q = (p + eps) ** alpha`` of rows ``index`` (0 for rows never written)."""
        return self._sum[as_index(index)].to(self.dtype)

    # -- sampling ----------------------------------------------------------------------------------
    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        n = len(storage)
        if n == 0:
            raise RuntimeError("Cannot sample from an empty storage: add or extend data first")
        total = self._sum.root
        if total <= 0:
            raise RuntimeError(
                f"PrioritizedSampler has no priorities for the {n} stored rows: write data through the "
                "buffer (it calls sampler.extend) or call sampler.extend(indices) yourself"
            )
        mass = torch.rand(batch_size, dtype=torch.float64, generator=self.generator) * total
        index = self._sum.find_prefix(mass)
        q = self._sum[index]
        # w_i / max_j w_j = (P_i / P_min) ** -beta = (q_i / q_min) ** -beta: N and the total cancel
        weight = torch.pow(q / self._min.root, -self.beta).to(self.dtype)
        return index, {"_weight": weight}

    def empty(self) -> None:
        self._init_trees()

    def state_dict(self) -> dict[str, Any]:
        return {
            "q": self._sum.leaves().clone(),
            "max_priority": self._max_priority,
            "alpha": self.alpha,
            "beta": self.beta,
            "eps": self.eps,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        q = state_dict["q"].to(torch.float64)
        if q.numel() != self.max_capacity:
            raise ValueError(
                f"the saved sampler has max_capacity={q.numel()}, this one {self.max_capacity}: build it "
                "with the same max_capacity"
            )
        self.alpha, self.beta, self.eps = state_dict["alpha"], state_dict["beta"], state_dict["eps"]
        self._max_priority = float(state_dict["max_priority"])
        self._sum.fill_(q)
        self._min.fill_(torch.where(q > 0, q, torch.inf))  # a written row always has q > 0
        if self._max is not None:
            self._max.fill_(q)

    def __repr__(self) -> str:
        return (
            f"PrioritizedSampler(max_capacity={self.max_capacity}, alpha={self.alpha}, beta={self.beta}, "
            f"eps={self.eps}, reduction={self.reduction!r})"
        )


class PrioritizedSliceSampler(SliceSampler):
    """Slices whose start row is drawn by priority.

    Priorities are per transition (row), as in :class:`PrioritizedSampler`: ``q_i = (p_i + eps) **
    alpha``, new rows get the largest priority seen, ``update_priority(index, priority)`` sets
    ``p`` for the given rows (pass the sampled index and one priority per row, or per slice start).
    A slice starting at valid start row ``i`` (same valid starts as :class:`SliceSampler`) is drawn
    with probability ``q_i / sum_{j valid} q_j``: only the start row's priority matters. Each row
    of a slice carries the slice's importance weight ``_weight = (q_i / min_{j valid} q_j) ** -beta``
    (the Schaul et al. weight of the drawn start, normalised so the largest is 1).
    Valid starts are re-derived after each write (``O(max_capacity)`` once per write, then
    ``O(batch * log capacity)`` per call).
    """

    requires_shared_state = True  # the priorities the trainer updates

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        max_priority_within_buffer: bool = False,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        traj_key: NestedKey | None = None,
        end_key: NestedKey | None = None,
        strict_length: bool = True,
        cache_values: bool = True,
        truncated_key: NestedKey | None = ("next", "truncated"),
        replacement: bool = True,
    ) -> None:
        refuse_without_replacement(type(self), replacement)
        super().__init__(
            num_slices=num_slices,
            slice_len=slice_len,
            traj_key=traj_key,
            end_key=end_key,
            strict_length=strict_length,
            cache_values=cache_values,
            truncated_key=truncated_key,
        )
        self._prio = PrioritizedSampler(max_capacity, alpha, beta, eps, dtype, reduction, max_priority_within_buffer)
        self._trees: tuple | None = None  # (layout, valid mask, sum tree, min tree) of valid starts

    @property
    def max_capacity(self) -> int:
        return self._prio.max_capacity

    @property
    def alpha(self) -> float:
        return self._prio.alpha

    @property
    def beta(self) -> float:
        return self._prio.beta

    def settings(self) -> dict[str, Any]:
        """The priority settings this sampler was built with (``max_capacity`` .. ``max_priority_within_buffer``),
        as keyword arguments: what a copy of it (e.g. its device twin) is built from."""
        prio = self._prio
        return {
            "max_capacity": prio.max_capacity,
            "alpha": prio.alpha,
            "beta": prio.beta,
            "eps": prio.eps,
            "dtype": prio.dtype,
            "reduction": prio.reduction,
            "max_priority_within_buffer": prio.max_priority_within_buffer,
        }

    def _on_new_episodes(self, storage: Storage) -> None:
        self._trees = None

    def _start_trees(self, layout: SliceLayout) -> tuple:
        if self._trees is None or self._trees[0] is not layout:
            cap = self._prio.max_capacity
            mask = layout.valid_start_mask(cap)
            q = self._prio.sampling_weights()
            s_tree, m_tree = sum_tree(cap), min_tree(cap)
            s_tree.fill_(torch.where(mask, q, 0.0))
            m_tree.fill_(torch.where(mask & (q > 0), q, torch.inf))
            self._trees = (layout, mask, s_tree, m_tree)
        return self._trees

    def add(self, index: int) -> None:
        self._prio.add(index)
        super().add(index)

    def extend(self, index: torch.Tensor) -> None:
        self._prio.extend(index)
        super().extend(index)

    def update_priority(self, index: Any, priority: Any) -> None:
        self._prio.update_priority(index, priority)
        if self._trees is not None:
            _, mask, s_tree, m_tree = self._trees
            rows = torch.unique(as_index(index).reshape(-1))
            q = self._prio.sampling_weights(rows)
            valid = mask[rows]
            s_tree.set_(rows, torch.where(valid, q, 0.0))
            m_tree.set_(rows, torch.where(valid, q, torch.inf))

    def priorities(self, index: Any) -> torch.Tensor:
        """The stored ``q = (p + eps) ** alpha`` of rows ``index``."""
        return self._prio.priorities(index)

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        if getattr(storage, "ndim", 1) > 1:
            raise NotImplementedError(
                "PrioritizedSliceSampler on a multi-dimensional storage is not supported: use SliceSampler "
                "(uniform slices within each environment's column), or PrioritizedSampler for transitions"
            )
        num_slices, slice_len = self._shape(batch_size)
        if len(storage) == 0:
            raise RuntimeError("Cannot sample from an empty storage: add or extend data first")
        if len(storage) > self._prio.max_capacity:
            raise ValueError(
                f"the storage holds {len(storage)} rows but max_capacity={self._prio.max_capacity}: build "
                "the sampler with max_capacity >= the storage's max_size"
            )
        layout = self._layout(storage, slice_len)
        _, _, s_tree, m_tree = self._start_trees(layout)
        total = s_tree.root
        if total <= 0:
            raise RuntimeError(
                "PrioritizedSliceSampler has no priorities for the stored rows: write data through the "
                "buffer (it calls sampler.extend) or call sampler.extend(indices) yourself"
            )
        mass = torch.rand(num_slices, dtype=torch.float64, generator=self.generator) * total
        rows = s_tree.find_prefix(mass)
        lengths = layout.slice_lengths(rows)
        index, info = self._slices(storage, rows, slice_len, lengths)
        weight = torch.pow(s_tree[rows] / m_tree.root, -self._prio.beta).to(self._prio.dtype)
        if lengths is None:
            weight = weight.repeat_interleave(slice_len)
        else:
            weight = weight.repeat_interleave(lengths)
        info["_weight"] = weight
        return index, info

    def empty(self) -> None:
        super().empty()
        self._prio.empty()
        self._trees = None

    def state_dict(self) -> dict[str, Any]:
        return {"write_end": self._write_end, "priorities": self._prio.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._prio.load_state_dict(state_dict["priorities"])
        self._trees = None
