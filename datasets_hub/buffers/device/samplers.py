"""Device twins of the transition samplers: uniform, epochs without replacement, prioritized.

Every draw uses a ``torch.Generator`` on the storage's device and every shape is known on the host
(``len(storage)``, the batch size), so ``sample()`` queues device work and returns without waiting
for it. With the same seed on ``device="cpu"`` they return exactly the host samplers' batches.
"""

from __future__ import annotations

from typing import Any

import torch

from datasets_hub.buffers.device.memory import as_device, check_fits, same_device
from datasets_hub.buffers.device.storage import DeviceStorage
from datasets_hub.buffers.device.trees import DeviceSegmentTree, device_max_tree, device_min_tree, device_sum_tree
from datasets_hub.buffers.samplers.base import Sampler, as_index
from datasets_hub.buffers.samplers.prioritized import check_reduction, reduce_trailing
from datasets_hub.buffers.storages import Storage
from datasets_hub.errors import InvalidParameter


class DeviceSampler(Sampler):
    """Base of the device samplers: they sample a :class:`DeviceStorage` with a generator on its device.

    ``prepare(storage, batch_size)`` does, once, the host work a batch shape needs (layouts, trees)
    so that ``sample()`` never synchronises; ``sample()`` calls it when it was not done (the first
    call of a shape may then synchronise once).
    """

    device: torch.device | None = None

    def _check(self, storage: Storage) -> DeviceStorage:
        if not isinstance(storage, DeviceStorage):
            raise InvalidParameter(
                f"{type(self).__name__} samples a DeviceStorage, not {type(storage).__name__}: use "
                "load(..., device=...) or datasets_hub.buffers.device.to_device(buffer, device)"
            )
        gen = self.generator
        if gen is not None and not same_device(gen.device, storage.device):
            raise InvalidParameter(
                f"the generator is on {gen.device} but the data on {storage.device}: pass "
                f"generator=torch.Generator(device={str(storage.device)!r}).manual_seed(seed)"
            )
        if len(storage) == 0:
            raise RuntimeError("Cannot sample from an empty storage: add or extend data first")
        return storage

    def prepare(self, storage: Storage, batch_size: int) -> None:
        """Do the host work for batches of ``batch_size`` now (the default: only the checks)."""
        self._check(storage)


class DeviceRandomSampler(DeviceSampler):
    """Uniform rows with replacement (the device twin of :class:`RandomSampler`)."""

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        st = self._check(storage)
        return torch.randint(len(st), (batch_size,), generator=self.generator, device=st.device), {}


class DeviceSamplerWithoutReplacement(DeviceSampler):
    """Epochs over the rows, each row at most once per epoch (the device twin of
    :class:`SamplerWithoutReplacement`, same ``drop_last``/``shuffle``/``ran_out`` rules; the
    storage is read-only, so it never grows within an epoch). The epoch's order is one device
    ``randperm``; batches are slices of it."""

    requires_shared_state = True  # the epoch's remaining rows

    def __init__(self, drop_last: bool = False, shuffle: bool = True) -> None:
        self.drop_last, self.shuffle = bool(drop_last), bool(shuffle)
        self._remaining: torch.Tensor | None = None
        self._ran_out = False

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        st = self._check(storage)
        n = len(st)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        remaining = self._remaining
        if remaining is not None and remaining.device != st.device:  # restored from a state dict
            remaining = remaining.to(st.device)
        if remaining is None or remaining.numel() == 0:
            if self.shuffle:
                remaining = torch.randperm(n, generator=self.generator, device=st.device)
            else:
                remaining = torch.arange(n, device=st.device)
        if self.drop_last and remaining.numel() < batch_size:
            raise ValueError(
                f"SamplerWithoutReplacement(drop_last=True) cannot make a batch of {batch_size} from "
                f"{remaining.numel()} rows: lower the batch size or use drop_last=False"
            )
        index, remaining = remaining[:batch_size], remaining[batch_size:]
        self._ran_out = remaining.numel() == 0 or (self.drop_last and remaining.numel() < batch_size)
        self._remaining = None if self._ran_out else remaining
        return index, {}

    def empty(self) -> None:
        self._remaining, self._ran_out = None, False

    def state_dict(self) -> dict[str, Any]:
        """The rows still to visit this epoch (on the CPU), so ``load_state_dict`` resumes at the exact
        position; the generator's state belongs to the buffer."""
        remaining = self._remaining
        return {
            "remaining": remaining.to("cpu", copy=True) if remaining is not None else torch.zeros(0, dtype=torch.int64),
            "has_epoch": remaining is not None,
            "ran_out": self._ran_out,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the epoch position (the rows go back to the device at the next ``sample``: one copy)."""
        self._remaining = state_dict["remaining"].clone() if state_dict["has_epoch"] else None
        self._ran_out = bool(state_dict["ran_out"])


def reduce_repeated(index: torch.Tensor, value: torch.Tensor, reduction: str) -> torch.Tensor:
    """Per item of ``index`` (1-D), ``reduction`` of ``value`` over every item with the same index:
    repeated indices all get the same value, with no host sync (sort, group by equal neighbours,
    reduce per group in a batch-sized buffer). ``"median"`` is the lower median, as on the host."""
    b = index.shape[0]
    if b == 0:
        return value
    if reduction == "median":
        order = torch.argsort(value, stable=True)
        order = order[torch.argsort(index[order], stable=True)]
    else:
        order = torch.argsort(index, stable=True)
    sorted_index, sorted_value = index[order], value[order]
    new_group = torch.ones(b, dtype=torch.bool, device=index.device)
    new_group[1:] = sorted_index[1:] != sorted_index[:-1]
    group = torch.cumsum(new_group.to(torch.int64), 0) - 1
    if reduction == "median":
        ones = torch.ones(b, dtype=torch.int64, device=index.device)
        count = torch.zeros(b, dtype=torch.int64, device=index.device).index_add_(0, group, ones)
        pos = torch.arange(b, device=index.device)
        first = torch.full((b,), b, dtype=torch.int64, device=index.device)
        first = first.scatter_reduce(0, group, pos, reduce="amin", include_self=True)
        pick = torch.index_select(first, 0, group) + (torch.index_select(count, 0, group) - 1) // 2
        reduced_sorted = torch.index_select(sorted_value, 0, pick)
    else:
        reduce = {"max": "amax", "min": "amin", "mean": "mean"}[reduction]
        per_group = torch.zeros(b, dtype=value.dtype, device=index.device)
        per_group = per_group.scatter_reduce(0, group, sorted_value, reduce=reduce, include_self=False)
        reduced_sorted = torch.index_select(per_group, 0, group)
    out = torch.empty_like(reduced_sorted)
    out[order] = reduced_sorted
    return out


class DevicePrioritizedSampler(DeviceSampler):
    """Prioritized replay on the device (the twin of :class:`PrioritizedSampler`, same parameters
    and formulas: ``P(i) = q_i / sum q``, ``q = (p + eps) ** alpha``, weights
    ``(q_i / min q) ** -beta``; new rows get the largest priority seen).

    The sum and min trees are float64 tensors on the device (``4 * 2**ceil(log2(max_capacity))``
    bytes each), updated and searched one level at a time for the whole batch. Node values are
    exactly the host sampler's given the same updates. ``update_priority`` does not synchronise
    either: repeated indices are reduced on the device, and a NaN, infinite or negative priority
    or an index outside ``max_capacity`` fails through a device-side assertion
    (``torch._assert_async``; on CUDA the error surfaces at the next synchronising call).
    """

    device: torch.device  # the trees' device, fixed by the constructor

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
        device: str | torch.device = "cpu",
    ) -> None:
        if isinstance(max_capacity, bool) or not isinstance(max_capacity, int) or max_capacity < 1:
            raise ValueError(f"max_capacity must be a positive int, got {max_capacity!r}")
        if not (alpha >= 0 and beta >= 0 and eps > 0):
            raise ValueError(f"alpha, beta must be >= 0 and eps > 0, got alpha={alpha}, beta={beta}, eps={eps}")
        check_reduction(reduction)
        self.max_capacity = int(max_capacity)
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self.dtype, self.reduction = dtype, reduction
        self.max_priority_within_buffer = bool(max_priority_within_buffer)
        self.device = as_device(device)
        trees = 3 if self.max_priority_within_buffer else 2
        check_fits(trees * DeviceSegmentTree.nbytes(self.max_capacity), self.device, "the priority trees")
        self._init_trees()

    def _init_trees(self) -> None:
        dev = self.device
        assert dev is not None
        self._sum = device_sum_tree(self.max_capacity, dev)
        self._min = device_min_tree(self.max_capacity, dev)
        self._max = device_max_tree(self.max_capacity, dev) if self.max_priority_within_buffer else None
        self._max_priority = torch.ones((), dtype=torch.float64, device=dev)  # largest raw priority seen
        self._has_rows = False  # host-side: some row was written (then the sum is > 0, as eps > 0)

    def _q(self, priority: torch.Tensor) -> torch.Tensor:
        return torch.pow(priority + self.eps, self.alpha)

    def sampling_weights(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """``q`` of ``rows`` (every row when None; 0 for rows never written), float64, on the device."""
        return self._sum.leaves() if rows is None else self._sum[rows]

    def default_priority(self) -> torch.Tensor:
        """The ``q`` given to new rows, a 0-dim device tensor."""
        q = self._q(self._max_priority)
        if self._max is not None:
            return torch.where(self._max.root > 0, self._max.root, q)
        return q

    def device_index(self, index: Any) -> torch.Tensor:
        """``index`` as 1-D int64 rows on the device, checked against ``max_capacity`` by a device-side assertion."""
        rows = as_index(index).reshape(-1).to(self.device)
        if rows.numel():
            ok = (rows >= 0).all() & (rows < self.max_capacity).all()
            torch._assert_async(ok, f"a row index is outside this sampler's max_capacity={self.max_capacity}")
        return rows

    def _set(self, index: torch.Tensor, q: torch.Tensor) -> None:
        self._sum.set_(index, q)
        self._min.set_(index, q)
        if self._max is not None:
            self._max.set_(index, q)

    def add(self, index: int) -> None:
        self.extend(torch.tensor([int(index)]))

    def extend(self, index: Any) -> None:
        rows = self.device_index(index)
        if rows.numel():
            self._set(rows, self.default_priority().expand(rows.shape))
            self._has_rows = True

    def update_priority(self, index: Any, priority: Any) -> None:
        index = as_index(index).to(self.device)
        priority = torch.as_tensor(priority).detach().to(self.device, torch.float64)
        if priority.ndim > index.ndim and priority.shape[: index.ndim] == index.shape and index.ndim:
            priority = reduce_trailing(priority.reshape(*index.shape, -1), self.reduction)
        rows = self.device_index(index)
        try:
            priority = priority.expand(rows.shape) if priority.numel() == 1 else priority.reshape(rows.shape)
        except RuntimeError as exc:
            raise ValueError(
                f"priority of shape {tuple(priority.shape)} does not match index of shape {tuple(index.shape)}: "
                "pass one priority per index (or a scalar)"
            ) from exc
        if not rows.numel():
            return
        torch._assert_async(
            (torch.isfinite(priority) & (priority >= 0)).all(),
            "priorities must be finite and >= 0 (got NaN, inf or a negative value): pass absolute TD errors",
        )
        priority = reduce_repeated(rows, priority, self.reduction)
        self._max_priority = torch.maximum(self._max_priority, priority.max())
        self._set(rows, self._q(priority))
        self._has_rows = True

    def priorities(self, index: Any) -> torch.Tensor:
        """The stored ``q`` of rows ``index`` (0 for rows never written), in ``dtype``, on the device."""
        return self._sum[as_index(index).reshape(-1).to(self.device)].to(self.dtype)

    def _check(self, storage: Storage) -> DeviceStorage:
        return self.check_storage(super()._check(storage))

    def check_storage(self, st: DeviceStorage, need_rows: bool = True) -> DeviceStorage:
        """Refuse a storage on another device, larger than ``max_capacity``, or (``need_rows``) before
        any row has a priority."""
        if not same_device(st.device, self.device):
            raise InvalidParameter(f"the priority trees are on {self.device} but the data on {st.device}")
        if len(st) > self.max_capacity:
            raise ValueError(
                f"the storage holds {len(st)} rows but max_capacity={self.max_capacity}: build the sampler "
                "with max_capacity >= the storage's size"
            )
        if need_rows and not self._has_rows:
            raise RuntimeError(
                f"{type(self).__name__} has no priorities for the stored rows: call "
                "sampler.extend(torch.arange(len(buffer))) (every row at the default priority) first"
            )
        return st

    def prepare(self, storage: Storage, batch_size: int) -> None:
        self.check_storage(super()._check(storage), need_rows=False)

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        st = self._check(storage)
        mass = torch.rand(batch_size, dtype=torch.float64, generator=self.generator, device=st.device)
        index = self._sum.find_prefix(mass * self._sum.root)
        weight = torch.pow(self._sum[index] / self._min.root, -self.beta).to(self.dtype)
        return index, {"_weight": weight}

    def empty(self) -> None:
        self._init_trees()

    def state_dict(self) -> dict[str, Any]:
        """The host sampler's state format (``q`` on the CPU): either class loads the other's."""
        return {
            "q": self._sum.leaves().to("cpu", copy=True),
            "max_priority": float(self._max_priority),
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
        self._max_priority = torch.tensor(float(state_dict["max_priority"]), dtype=torch.float64, device=self.device)
        q = q.to(self.device)
        self._sum.fill_(q)
        self._min.fill_(torch.where(q > 0, q, torch.inf))
        if self._max is not None:
            self._max.fill_(q)
        self._has_rows = bool((q > 0).any())

    def __repr__(self) -> str:
        return (
            f"DevicePrioritizedSampler(max_capacity={self.max_capacity}, alpha={self.alpha}, beta={self.beta}, "
            f"eps={self.eps}, reduction={self.reduction!r}, device={self.device})"
        )
