"""Generation stamps of storage slots, and conditional updates through them (TorchRL 0.14's ``track_generations``).

A writer built with ``track_generations=True`` stamps every slot (a row along dim 0 of the storage) it writes:
``-1`` for a slot never written, ``0`` after the first write, ``+1`` on every later write and on ``empty()``
(so a handle taken before ``empty()`` goes stale at once, and stamps only grow). The stamps live on the storage
(``storage.slot_generations``): every writer of that storage, tracking or not, moves them, so two buffers
sharing a storage see each other's overwrites. ``sample()`` then carries ``"index_generation"`` (the stamps of
the sampled slots, read under the buffer's lock); ``rb.update_if_present(index=, generation=, patch=)`` writes
``patch`` only into the slots whose stamp is still the one given, and reports which were stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from datasets_hub.errors import InvalidArgument, InvalidParameter, WrongDataType


class SlotGenerations:
    """The stamps of one storage's slots, grown on demand (``-1`` = never written)."""

    def __init__(self, n_slots: int = 0) -> None:
        self.stamps = torch.full((n_slots,), -1, dtype=torch.int64)

    def _grow(self, n_slots: int) -> None:
        if n_slots > self.stamps.numel():
            grown = torch.full((n_slots,), -1, dtype=torch.int64)
            grown[: self.stamps.numel()] = self.stamps
            self.stamps = grown

    def bump(self, slots: torch.Tensor) -> None:
        """Record one write into each of ``slots`` (1-D, dim-0 rows; a slot listed twice is written twice)."""
        slots = slots.reshape(-1).to(torch.int64)
        if slots.numel():
            self._grow(int(slots.max()) + 1)
            self.stamps.index_add_(0, slots, torch.ones_like(slots))

    def invalidate(self) -> None:
        """``empty()``: every written slot's stamp moves on; never-written slots stay ``-1``."""
        self.stamps[self.stamps >= 0] += 1

    def of(self, slots: torch.Tensor) -> torch.Tensor:
        """Stamps of ``slots`` (any shape); ``-1`` for slots out of range or never written."""
        inside = (slots >= 0) & (slots < self.stamps.numel())
        out = torch.full(slots.shape, -1, dtype=torch.int64)
        out[inside] = self.stamps[slots[inside]]
        return out

    def state(self) -> list[int]:
        return self.stamps.tolist()

    def load(self, stamps: Any) -> None:
        self.stamps = torch.as_tensor(stamps, dtype=torch.int64).clone().reshape(-1)


def of_storage(storage: Any, create: bool = False) -> SlotGenerations | None:
    """The stamps kept on ``storage`` (made when ``create``), or None when nobody tracks them."""
    return on_storage(storage) if create else getattr(storage, "slot_generations", None)


def on_storage(storage: Any) -> SlotGenerations:
    """The stamps kept on ``storage``, made on first use."""
    stamps = getattr(storage, "slot_generations", None)
    if stamps is None:
        stamps = SlotGenerations()
        storage.slot_generations = stamps
    return stamps


def slots_of(index: Any, ndim: int) -> torch.Tensor:
    """The dim-0 slots of a buffer index: a 1-D tensor of slots, ``[N, ndim]`` coordinates (as ``extend``
    returns on a multi-dimensional storage) or a tuple of per-dim index tensors."""
    if isinstance(index, tuple):
        return torch.as_tensor(index[0], dtype=torch.int64)
    index = torch.as_tensor(index, dtype=torch.int64)
    if ndim > 1 and index.ndim == 2 and index.shape[-1] == ndim:
        return index[:, 0]
    return index


@dataclass(frozen=True)
class ConditionalUpdateResult:
    """What ``update_if_present`` did, one entry per item of ``index`` and each item in exactly one group:
    ``updated`` (still live, written), ``version_rejected`` (still live, lost the version comparison; ``None``
    without ``version_key``) or stale (its slot was rewritten or emptied since it was sampled)."""

    updated: torch.Tensor
    version_rejected: torch.Tensor | None = None

    @property
    def updated_count(self) -> int:
        return int(self.updated.sum())

    @property
    def version_rejected_count(self) -> int:
        return 0 if self.version_rejected is None else int(self.version_rejected.sum())

    @property
    def stale_count(self) -> int:
        return int(self.updated.numel()) - self.updated_count - self.version_rejected_count


def update_if_present(
    storage: Any,
    writer: Any,
    index: Any,
    generation: Any,
    patch: Any,
    version_key: Any = None,
    version: Any = None,
    require_newer: bool = False,
) -> ConditionalUpdateResult:
    """Write ``patch`` (a dict or TensorDict of entries for every item of ``index``) into the items of ``index``
    whose slot stamp equals ``generation``; stale items are left alone. With ``version_key`` (a stored scalar
    per item) and ``version`` (a scalar, or one per item), a live item is written only if ``version`` is at
    least its stored one (greater with ``require_newer``), and the accepted version is written with the patch;
    an item addressed twice keeps only the row with the highest version (the last on ties). Every key, shape
    and dtype is checked before anything is written. Callers hold the buffer's lock."""
    if not getattr(writer, "tracks_generations", False):
        raise InvalidArgument(
            "update_if_present is a conditional write: it needs generation stamps, which this buffer's writer does "
            "not keep. Build the buffer with writer=RoundRobinWriter(track_generations=True)"
        )
    if not callable(getattr(storage, "gather", None)) or not hasattr(storage, "checkpoint_state"):
        raise WrongDataType(
            f"update_if_present is a conditional write into TensorDict storages; a {type(storage).__name__} holds "
            "arbitrary items: use LazyTensorStorage or LazyMemmapStorage"
        )
    if getattr(storage, "ndim", 1) != 1:
        raise InvalidArgument("update_if_present writes into 1-D storages (ndim=1); this storage has ndim > 1")
    if (version_key is None) != (version is None):
        raise InvalidParameter("update_if_present: pass version_key and version together (or neither)")
    index = torch.as_tensor(index, dtype=torch.int64).reshape(-1)
    n = index.numel()
    generation = torch.as_tensor(generation, dtype=torch.int64).reshape(-1)
    if generation.numel() != n:
        raise InvalidArgument(f"update_if_present: {n} indices but {generation.numel()} generations")
    stamps = of_storage(storage)
    live = (stamps.of(index) == generation) if stamps is not None else torch.zeros(n, dtype=torch.bool)
    patch = patch.clone(False) if isinstance(patch, TensorDictBase) else TensorDict(dict(patch), batch_size=[])
    reference = storage.get(index[:1]) if n else None
    if version_key is not None:
        version_key = _version_key(version_key, patch)
        stored = None if reference is None else reference.get(version_key, None)
        if reference is not None and stored is None:
            raise KeyError(f"update_if_present: the storage has no version entry {version_key!r}")
        shape = () if stored is None else tuple(stored.shape[1:])
        if any(d != 1 for d in shape):
            raise InvalidParameter(
                f"update_if_present: version_key {version_key!r} must hold one scalar per item; it holds {list(shape)}"
            )
        incoming = torch.as_tensor(version)
        while incoming.ndim > 1 and incoming.shape[-1] == 1:
            incoming = incoming.squeeze(-1)
        if incoming.ndim == 0:
            incoming = incoming.expand(n)
        elif incoming.ndim != 1 or incoming.numel() != n:
            raise InvalidParameter(
                f"update_if_present: version must be a scalar or one per item ({n}), got shape {list(incoming.shape)}"
            )
        if stored is not None:
            incoming = incoming.to(stored.dtype)
        patch.set(version_key, incoming.reshape(n, *shape))
    for key, value in patch.items(include_nested=True, leaves_only=True):
        stored = None if reference is None else reference.get(key, None)
        if reference is not None and stored is None:
            keys = sorted(map(str, reference.keys(include_nested=True, leaves_only=True)))
            raise KeyError(f"update_if_present: the storage has no entry {key!r} (its entries: {keys})")
        if stored is not None and (value.shape != (n, *stored.shape[1:]) or value.dtype != stored.dtype):
            raise InvalidArgument(
                f"update_if_present: {key!r} must be {n} items of shape {list(stored.shape[1:])} and dtype "
                f"{stored.dtype}, got shape {list(value.shape)} and dtype {value.dtype}"
            )
    rejected = None
    if version_key is not None:
        accepted = _version_accepted(
            storage, index, live, patch.get(version_key).reshape(n), version_key, require_newer
        )
        rejected = live & ~accepted
        live = live & accepted
    if bool(live.any()):
        rows = storage.get(index[live])
        for key, value in patch.items(include_nested=True, leaves_only=True):
            rows.set(key, value[live])
        storage.set(index[live], rows)
    return ConditionalUpdateResult(updated=live, version_rejected=rejected)


def _version_key(version_key: Any, patch: TensorDictBase) -> tuple[str, ...]:
    if isinstance(version_key, str) and "." in version_key:
        raise InvalidParameter(
            f"update_if_present: Dotted-string version keys are not read as nested keys: use "
            f"{tuple(version_key.split('.'))!r} for {version_key!r}"
        )
    key = (version_key,) if isinstance(version_key, str) else tuple(version_key)
    if patch.get(key, None) is not None:
        raise InvalidParameter(
            f"update_if_present: version_key {key!r} may not appear in patch (it is written from version=)"
        )
    return key


def _version_accepted(
    storage: Any, index: torch.Tensor, live: torch.Tensor, incoming: torch.Tensor, key: Any, require_newer: bool
) -> torch.Tensor:
    """Per item: live, its incoming version beats the stored one, and it is the row of its slot with the highest
    incoming version (the last such row on ties)."""
    n = index.numel()
    accepted = torch.zeros(n, dtype=torch.bool)
    if not bool(live.any()):
        return accepted
    rows = torch.nonzero(live).reshape(-1)
    stored = storage.get(index[rows]).get(key).reshape(-1)
    wins = incoming[rows] > stored if require_newer else incoming[rows] >= stored
    best: dict[int, int] = {}  # slot -> the row that keeps it
    for row in rows.tolist():
        slot = int(index[row])
        if slot not in best or incoming[row] >= incoming[best[slot]]:
            best[slot] = row
    keep = torch.zeros(n, dtype=torch.bool)
    keep[list(best.values())] = True
    accepted[rows] = wins & keep[rows]
    return accepted
