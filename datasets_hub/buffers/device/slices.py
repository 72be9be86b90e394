"""Device twins of the slice samplers: uniform slices, epochs of slices, prioritized slice starts.

Same rules as :mod:`datasets_hub.buffers.samplers.slice` (valid starts, ``strict_length``, the
``truncated``/``done`` info, the epoch rule of the sampler without replacement, start-row
priorities), with the layout of valid starts computed once per slice length on the host from the
storage's episode index and kept on the device. A batch is then ``randint`` + ``searchsorted`` +
gathers on the device. With the same seed on ``device="cpu"`` the batches equal the host samplers'.

Not on the device: ``strict_length=False`` when some episode is shorter than the slice (the batch
size would depend on the draw, which the host would have to read back); it is refused with the fix.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from datasets_hub.buffers.device.memory import check_fits
from datasets_hub.buffers.device.samplers import DevicePrioritizedSampler, DeviceSampler
from datasets_hub.buffers.device.storage import DeviceStorage
from datasets_hub.buffers.device.trees import DeviceSegmentTree, device_min_tree, device_sum_tree
from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.samplers.slice_layout import check_slice_shape
from datasets_hub.buffers.storages import Storage
from datasets_hub.errors import InvalidParameter

NestedKey = Any


def _replace_last(key: NestedKey, name: str) -> NestedKey:
    return name if isinstance(key, str) else (*key[:-1], name)


class DeviceSliceLayout:
    """Valid slice starts of one episode index for one slice length, on the device.

    Start number ``u`` in ``[0, total)`` is row ``u + base[searchsorted(bounds, u, right=True)]``.
    """

    def __init__(self, episodes: EpisodeIndex, slice_len: int, strict: bool, device: torch.device) -> None:
        start, length = episodes.start, episodes.length
        count = length - slice_len + 1
        count = count.clamp_min(0) if strict else torch.where(length >= slice_len, count, torch.ones_like(count))
        keep = count > 0
        if bool((length[keep] < slice_len).any()):
            shortest = int(length[keep].min())
            raise InvalidParameter(
                f"strict_length=False with episodes shorter than slice_len={slice_len} (the shortest has "
                f"{shortest} rows) gives batches whose size depends on the draw, which a device sampler cannot "
                "return without a host sync: use strict_length=True (short episodes are skipped), a smaller "
                "slice_len, or sample on the host (drop device=)"
            )
        k_start, k_count = start[keep], count[keep]
        excl = torch.cumsum(k_count, 0) - k_count
        self.total = int(k_count.sum()) if k_count.numel() else 0
        self.slice_len = slice_len
        # a sentinel past every start number keeps the boundaries non-empty (a single episode)
        self.bounds = torch.cat([excl[1:], torch.tensor([torch.iinfo(torch.int64).max])]).to(device)
        self.base = (k_start - excl).to(device)
        self.count = k_count.to(device)
        self.arange = torch.arange(slice_len, device=device)

    def rows_of(self, u: torch.Tensor) -> torch.Tensor:
        e = torch.searchsorted(self.bounds, u, right=True)
        return u + torch.index_select(self.base, 0, e)

    def valid_start_mask(self, size: int) -> torch.Tensor:
        """Bool ``[size]`` on the device: True at the rows that are valid slice starts."""
        device = self.base.device
        mask = torch.zeros(size, dtype=torch.bool, device=device)
        if self.total:
            offsets = torch.repeat_interleave(self.base, self.count, output_size=self.total)
            # index_fill_ takes the value as a kernel argument; `mask[rows] = True` would copy a host scalar
            mask.index_fill_(0, torch.arange(self.total, device=device) + offsets, True)
        return mask

    def expand(self, rows: torch.Tensor) -> torch.Tensor:
        return (rows.unsqueeze(1) + self.arange).reshape(-1)


def no_valid_start(episodes: EpisodeIndex, slice_len: int) -> RuntimeError:
    if episodes.num_episodes == 0:
        return RuntimeError("the buffer holds no complete episode to slice: add data first")
    longest = int(torch.argmax(episodes.length))
    return RuntimeError(
        f"no episode is long enough for slices of {slice_len} rows: the longest of the "
        f"{episodes.num_episodes} episodes has {int(episodes.length[longest])} rows (the one starting "
        f"at row {int(episodes.start[longest])}). Use a smaller slice_len (or more num_slices), or "
        "strict_length=False to accept shorter slices"
    )


class DeviceSliceSampler(DeviceSampler):
    """Uniform slices on the device (the twin of :class:`SliceSampler`: same arguments and rules).

    ``traj_key``/``end_key`` matter only when a buffer is moved to the device (they say where the
    episodes of an online buffer are); the device storage carries its episode index.
    """

    def __init__(
        self,
        num_slices: int | None = None,
        slice_len: int | None = None,
        traj_key: NestedKey | None = None,
        end_key: NestedKey | None = None,
        strict_length: bool = True,
        cache_values: bool = True,
        truncated_key: NestedKey | None = ("next", "truncated"),
    ) -> None:
        check_slice_shape(num_slices, slice_len)
        self.num_slices, self.slice_len = num_slices, slice_len
        self.traj_key, self.end_key = traj_key, end_key
        self.strict_length, self.cache_values = bool(strict_length), bool(cache_values)
        self.truncated_key = truncated_key
        self.done_key = _replace_last(truncated_key, "done") if truncated_key is not None else None
        self.terminated_key = _replace_last(truncated_key, "terminated") if truncated_key is not None else None
        self._storage: Any = None  # a weak reference: a copied sampler (fork) must not copy the data
        self._layouts: dict[int, DeviceSliceLayout] = {}
        self._masks: dict[tuple[int, int], torch.Tensor] = {}

    def check_batch_size(self, batch_size: int) -> None:
        """Raise ``ValueError`` if ``batch_size`` cannot be cut into whole slices."""
        self._shape(batch_size)

    def _shape(self, batch_size: int) -> tuple[int, int]:
        if self.num_slices is not None:
            if batch_size % self.num_slices:
                raise ValueError(
                    f"batch_size={batch_size} is not divisible by num_slices={self.num_slices}: use a multiple of it"
                )
            return self.num_slices, batch_size // self.num_slices
        assert self.slice_len is not None
        if batch_size % self.slice_len:
            raise ValueError(
                f"batch_size={batch_size} is not divisible by slice_len={self.slice_len}: use a multiple of it"
            )
        return batch_size // self.slice_len, self.slice_len

    def _bind(self, storage: Storage) -> DeviceStorage:
        st = self._check(storage)
        if self._storage is None or self._storage() is not st:
            if st.device_episode_index() is None:
                raise InvalidParameter(
                    "the device copy has no episode index, so slices cannot respect episode ends: move a "
                    "storage with episodes (a hub build, or a buffer whose sampler finds them) to the device"
                )
            self._storage, self._layouts, self._masks = weakref.ref(st), {}, {}
            self._on_new_storage(st)
        return st

    def _on_new_storage(self, storage: DeviceStorage) -> None:
        return None

    def layout(self, storage: DeviceStorage, slice_len: int) -> DeviceSliceLayout:
        layout = self._layouts.get(slice_len)
        if layout is None:
            episodes = storage.episode_index()
            assert episodes is not None
            layout = DeviceSliceLayout(episodes, slice_len, self.strict_length, storage.device)
            if layout.total == 0:
                raise no_valid_start(episodes, slice_len)
            self._layouts[slice_len] = layout
        return layout

    def prepare(self, storage: Storage, batch_size: int) -> None:
        """Build the layout of valid starts, the slice-end mask and the stored done column now."""
        st = self._bind(storage)
        num_slices, slice_len = self._shape(batch_size)
        self.layout(st, slice_len)
        self._end_mask(st, num_slices, slice_len)
        self._stored_done(st)
        self._stored_terminated(st)

    def _stored_terminated(self, storage: DeviceStorage) -> torch.Tensor | None:
        # one flag per row, or None (terminated is False then, as on the host); the storage keeps it
        return storage.flag_column(self.terminated_key) if self.terminated_key is not None else None

    def _stored_done(self, storage: DeviceStorage) -> torch.Tensor | None:
        # one flag per row, or None (done = truncated then, as on the host); the storage keeps it
        return storage.flag_column(self.done_key) if self.done_key is not None else None

    def _end_mask(self, storage: DeviceStorage, num_slices: int, slice_len: int) -> torch.Tensor:
        mask = self._masks.get((num_slices, slice_len))
        if mask is None:
            # built from an arange (no host scalar written into device memory): the last, shorter
            # batch of an epoch makes a new shape inside sample()
            rows = torch.arange(num_slices * slice_len, device=storage.device)
            mask = self._masks[(num_slices, slice_len)] = (rows % slice_len == slice_len - 1).reshape(-1, 1)
        return mask

    def _info(self, storage: DeviceStorage, index: torch.Tensor, num_slices: int, slice_len: int) -> dict[Any, Any]:
        if self.truncated_key is None:
            return {}
        truncated = self._end_mask(storage, num_slices, slice_len).clone()
        stored = self._stored_done(storage)
        done = truncated.clone() if stored is None else torch.index_select(stored, 0, index).reshape(-1, 1) | truncated
        stored_terminated = self._stored_terminated(storage)
        terminated = (
            torch.zeros_like(truncated)
            if stored_terminated is None
            else torch.index_select(stored_terminated, 0, index).reshape(-1, 1)
        )
        return {self.truncated_key: truncated, self.done_key: done, self.terminated_key: terminated}

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        st = self._bind(storage)
        num_slices, slice_len = self._shape(batch_size)
        layout = self.layout(st, slice_len)
        u = torch.randint(layout.total, (num_slices,), generator=self.generator, device=st.device)
        index = layout.expand(layout.rows_of(u))
        return index, self._info(st, index, num_slices, slice_len)

    def empty(self) -> None:
        self._storage, self._layouts, self._masks = None, {}, {}

    def __repr__(self) -> str:
        size = f"num_slices={self.num_slices}" if self.num_slices is not None else f"slice_len={self.slice_len}"
        return f"{type(self).__name__}({size}, strict_length={self.strict_length})"


class DeviceSliceSamplerWithoutReplacement(DeviceSliceSampler):
    """Epochs of non-overlapping slices on the device (the twin of :class:`SliceSamplerWithoutReplacement`:
    the same cutting rule with one random offset per episode and epoch, the same shuffling,
    ``drop_last`` and ``ran_out``). An epoch is built with one ``rand``, a ``repeat_interleave``
    of known size and one ``randperm`` on the device."""

    def __init__(
        self,
        num_slices: int | None = None,
        slice_len: int | None = None,
        drop_last: bool = False,
        traj_key: NestedKey | None = None,
        end_key: NestedKey | None = None,
        strict_length: bool = True,
        shuffle: bool = True,
        truncated_key: NestedKey | None = ("next", "truncated"),
    ) -> None:
        super().__init__(
            num_slices=num_slices,
            slice_len=slice_len,
            traj_key=traj_key,
            end_key=end_key,
            strict_length=strict_length,
            truncated_key=truncated_key,
        )
        self.drop_last, self.shuffle = bool(drop_last), bool(shuffle)
        self._rows: torch.Tensor | None = None
        self._epoch_len: int | None = None
        self._cuts: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]] = {}
        self._ran_out = False
        self._restored = False

    def _on_new_storage(self, storage: DeviceStorage) -> None:
        if not self._restored:  # a loaded epoch continues on the storage it is first used with
            self._rows, self._epoch_len = None, None
        self._cuts, self._restored = {}, False

    def _cut(self, storage: DeviceStorage, slice_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """Per episode on the device: slices ``k``, spare rows, first row; and the epoch's slice count."""
        cut = self._cuts.get(slice_len)
        if cut is None:
            episodes = storage.episode_index()
            assert episodes is not None
            start, length = episodes.start, episodes.length
            k = length // slice_len
            if not self.strict_length:
                short = length < slice_len
                if bool(short.any()):
                    raise InvalidParameter(
                        f"strict_length=False with episodes shorter than slice_len={slice_len} (the shortest "
                        f"has {int(length.min())} rows) gives slices of several lengths, which a device sampler "
                        "cannot return without a host sync: use strict_length=True or sample on the host"
                    )
            total = int(k.sum())
            if total == 0:
                raise no_valid_start(episodes, slice_len)
            spare = (length - k * slice_len).clamp_min(0)
            dev = storage.device
            cut = self._cuts[slice_len] = (k.to(dev), spare.to(dev), start.to(dev), total)
        return cut

    def _new_epoch(self, storage: DeviceStorage, slice_len: int) -> torch.Tensor:
        k, spare, start, total = self._cut(storage, slice_len)
        dev = storage.device
        u = torch.rand(start.shape, dtype=torch.float64, generator=self.generator, device=dev)
        offset = torch.minimum((u * (spare + 1)).long(), spare)
        first = torch.cumsum(k, 0) - k
        within = torch.arange(total, device=dev) - torch.repeat_interleave(first, k, output_size=total)
        rows = torch.repeat_interleave(start + offset, k, output_size=total) + within * slice_len
        if self.shuffle:
            rows = rows[torch.randperm(total, generator=self.generator, device=dev)]
        return rows

    def prepare(self, storage: Storage, batch_size: int) -> None:
        super().prepare(storage, batch_size)
        self._cut(self._bind(storage), self._shape(batch_size)[1])

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        st = self._bind(storage)
        num_slices, slice_len = self._shape(batch_size)
        if self._rows is None or self._rows.numel() == 0 or self._epoch_len != slice_len:
            self._rows, self._epoch_len = self._new_epoch(st, slice_len), slice_len
        rows = self._rows
        if rows.device != st.device:  # restored from a state dict
            rows = self._rows = rows.to(st.device)
        if self.drop_last and rows.numel() < num_slices:
            raise ValueError(
                f"drop_last=True and an epoch holds only {rows.numel()} slices of {slice_len} rows, "
                f"fewer than num_slices={num_slices}: lower the batch size or use drop_last=False"
            )
        rows, self._rows = rows[:num_slices], rows[num_slices:]
        left = self._rows.numel()
        self._ran_out = left == 0 or (self.drop_last and left < num_slices)
        if self._ran_out:
            self._rows = None
        index = (rows.unsqueeze(1) + torch.arange(slice_len, device=st.device)).reshape(-1)
        return index, self._info(st, index, rows.numel(), slice_len)

    def empty(self) -> None:
        super().empty()
        self._rows, self._epoch_len, self._cuts, self._ran_out = None, None, {}, False

    def state_dict(self) -> dict[str, Any]:
        """The slice starts still to serve this epoch (on the CPU) and the slice length they were cut for."""
        rows = self._rows
        return {
            "rows": rows.to("cpu", copy=True) if rows is not None else torch.zeros(0, dtype=torch.int64),
            "has_epoch": rows is not None,
            "epoch_len": self._epoch_len,
            "ran_out": self._ran_out,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume the epoch (its rows go back to the device at the next ``sample``: one copy)."""
        self._rows = state_dict["rows"].clone() if state_dict["has_epoch"] else None
        self._epoch_len = state_dict["epoch_len"]
        self._ran_out = bool(state_dict["ran_out"])
        self._restored = True


class DevicePrioritizedSliceSampler(DeviceSliceSampler):
    """Slices whose start row is drawn by priority, on the device (the twin of
    :class:`PrioritizedSliceSampler`: per-row priorities, ``P(start i) = q_i / sum_{valid j} q_j``,
    every row of a slice weighted ``(q_i / min_{valid j} q_j) ** -beta``). Priorities live in a
    :class:`DevicePrioritizedSampler`; the trees over valid starts are built once per slice length."""

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
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(
            num_slices=num_slices,
            slice_len=slice_len,
            traj_key=traj_key,
            end_key=end_key,
            strict_length=strict_length,
            cache_values=cache_values,
            truncated_key=truncated_key,
        )
        self.prio = DevicePrioritizedSampler(
            max_capacity, alpha, beta, eps, dtype, reduction, max_priority_within_buffer, device=device
        )
        self.device = self.prio.device
        self._trees: tuple[DeviceSliceLayout, torch.Tensor, DeviceSegmentTree, DeviceSegmentTree] | None = None

    @property
    def max_capacity(self) -> int:
        return self.prio.max_capacity

    @property
    def alpha(self) -> float:
        return self.prio.alpha

    @property
    def beta(self) -> float:
        return self.prio.beta

    def _on_new_storage(self, storage: DeviceStorage) -> None:
        self._trees = None

    def _start_trees(self, layout: DeviceSliceLayout) -> tuple:
        if self._trees is None or self._trees[0] is not layout:
            cap = self.prio.max_capacity
            check_fits(2 * DeviceSegmentTree.nbytes(cap) + cap, self.prio.device, "the slice-start priority trees")
            mask = layout.valid_start_mask(cap)
            q = self.prio.sampling_weights()
            s_tree, m_tree = device_sum_tree(cap, self.prio.device), device_min_tree(cap, self.prio.device)
            s_tree.fill_(torch.where(mask, q, 0.0))
            m_tree.fill_(torch.where(mask & (q > 0), q, torch.inf))
            self._trees = (layout, mask, s_tree, m_tree)
        return self._trees

    def add(self, index: int) -> None:
        self.prio.add(index)
        self._trees = None

    def extend(self, index: Any) -> None:
        self.prio.extend(index)
        self._trees = None

    def update_priority(self, index: Any, priority: Any) -> None:
        self.prio.update_priority(index, priority)
        if self._trees is not None:
            _, mask, s_tree, m_tree = self._trees
            rows = self.prio.device_index(index)
            q = self.prio.sampling_weights(rows)
            valid = torch.index_select(mask, 0, rows)
            s_tree.set_(rows, torch.where(valid, q, 0.0))
            m_tree.set_(rows, torch.where(valid, q, torch.inf))

    def priorities(self, index: Any) -> torch.Tensor:
        return self.prio.priorities(index)

    def prepare(self, storage: Storage, batch_size: int) -> None:
        super().prepare(storage, batch_size)
        self.prio.check_storage(self._bind(storage), need_rows=False)
        self._start_trees(self.layout(self._bind(storage), self._shape(batch_size)[1]))

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        st = self._bind(storage)
        self.prio.check_storage(st)
        num_slices, slice_len = self._shape(batch_size)
        layout = self.layout(st, slice_len)
        _, _, s_tree, m_tree = self._start_trees(layout)
        mass = torch.rand(num_slices, dtype=torch.float64, generator=self.generator, device=st.device)
        rows = s_tree.find_prefix(mass * s_tree.root)
        index = layout.expand(rows)
        info = self._info(st, index, num_slices, slice_len)
        weight = torch.pow(s_tree[rows] / m_tree.root, -self.prio.beta).to(self.prio.dtype)
        info["_weight"] = weight.unsqueeze(1).expand(num_slices, slice_len).reshape(-1)
        return index, info

    def empty(self) -> None:
        super().empty()
        self.prio.empty()
        self._trees = None

    def state_dict(self) -> dict[str, Any]:
        return {"write_end": None, "priorities": self.prio.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.prio.load_state_dict(state_dict["priorities"])
        self._trees = None
