"""Sum and min segment trees held on one device, updated and searched without host synchronisation.

Same layout and arithmetic as :class:`datasets_hub.buffers.samplers.prioritized.SegmentTree` (leaves at
``[size, 2 * size)``, node ``k`` = ``op(2k, 2k + 1)``, float64), so the node values are bit for bit
those of the host tree given the same leaves. Updates go up one level at a time for the whole batch:
``O(log capacity)`` tensor ops, no Python loop per item, and no ``unique``: when several updated
leaves share a parent, every copy of the parent is recomputed from the same (final) children and so
writes the same value.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class DeviceSegmentTree:
    """A complete binary tree over ``capacity`` leaves combined with ``op``, as a float64 tensor on ``device``."""

    def __init__(
        self,
        capacity: int,
        op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        neutral: float,
        device: torch.device,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"a segment tree needs capacity >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.depth = max(0, (self.capacity - 1).bit_length())
        self.size = 1 << self.depth
        self.op, self.neutral, self.device = op, float(neutral), device
        self.tree = torch.full((2 * self.size,), self.neutral, dtype=torch.float64, device=device)

    @staticmethod
    def nbytes(capacity: int) -> int:
        """Device bytes one tree over ``capacity`` leaves takes."""
        return 2 * (1 << max(0, (int(capacity) - 1).bit_length())) * 8

    @property
    def root(self) -> torch.Tensor:
        """The combined value of every leaf, a 0-dim device tensor (reading it as a number is the caller's sync)."""
        return self.tree[1]

    def leaves(self) -> torch.Tensor:
        return self.tree[self.size : self.size + self.capacity]

    def __getitem__(self, index: torch.Tensor) -> torch.Tensor:
        return torch.index_select(self.tree, 0, index + self.size)

    def set_(self, index: torch.Tensor, values: torch.Tensor) -> None:
        """Set leaves ``index`` (1-D int64 on the device; repeated leaves must carry equal values) to
        ``values`` and refresh their ancestors, one level per step."""
        tree = self.tree
        pos = index + self.size
        tree.index_put_((pos,), values.to(torch.float64))
        for _ in range(self.depth):
            pos = pos >> 1
            left = torch.index_select(tree, 0, pos * 2)
            right = torch.index_select(tree, 0, pos * 2 + 1)
            tree.index_put_((pos,), self.op(left, right))

    def fill_(self, values: torch.Tensor) -> None:
        """Replace every leaf (``values`` has ``capacity`` entries) and rebuild the tree, one level per step."""
        tree = self.tree
        tree.fill_(self.neutral)
        tree[self.size : self.size + self.capacity] = values.to(torch.float64)
        for level in range(self.depth - 1, -1, -1):
            lo, hi = 1 << level, 1 << (level + 1)
            tree[lo:hi] = self.op(tree[2 * lo : 2 * hi : 2], tree[2 * lo + 1 : 2 * hi : 2])

    def find_prefix(self, mass: torch.Tensor) -> torch.Tensor:
        """Sum trees only: for each ``mass`` in ``[0, root)``, the leaf whose cumulative sum covers it.

        The same descent as the host tree (never into a subtree of zero mass), vectorised over the
        batch: ``depth`` steps of gathers and ``where``s."""
        tree = self.tree
        node = torch.ones(mass.shape, dtype=torch.int64, device=mass.device)
        for _ in range(self.depth):
            left = node * 2
            lv = torch.index_select(tree, 0, left)
            rv = torch.index_select(tree, 0, left + 1)
            go_right = ((mass >= lv) & (rv > 0)) | (lv <= 0)
            mass = torch.where(go_right, mass - lv, mass)
            node = left + go_right.to(torch.int64)
        return node - self.size


def device_sum_tree(capacity: int, device: torch.device) -> DeviceSegmentTree:
    return DeviceSegmentTree(capacity, torch.add, 0.0, device)


def device_min_tree(capacity: int, device: torch.device) -> DeviceSegmentTree:
    return DeviceSegmentTree(capacity, torch.minimum, float("inf"), device)


def device_max_tree(capacity: int, device: torch.device) -> DeviceSegmentTree:
    return DeviceSegmentTree(capacity, torch.maximum, 0.0, device)
