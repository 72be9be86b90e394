"""The parts a :class:`~datasets_hub.buffers.ensemble.ReplayBufferEnsemble` is made of (TorchRL's
``StorageEnsemble``, ``SamplerEnsemble`` and ``WriterEnsemble``).

An ensemble index is a pair ``(buffer_ids, index)``: which member each item comes from and its
index in that member. ``SamplerEnsemble.sample`` returns such pairs, ``StorageEnsemble.get`` reads
them. Writing goes to one member (``ensemble[i].extend(data)``): ``WriterEnsemble`` refuses writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.storages import Storage
from datasets_hub.buffers.writers import Writer


def _members(parts: tuple, kind: type, name: str) -> tuple:
    if len(parts) == 1 and isinstance(parts[0], (list, tuple)):
        parts = tuple(parts[0])
    if not parts:
        raise ValueError(f"{name} needs at least one member: {name}(a, b, ...)")
    for i, part in enumerate(parts):
        if not isinstance(part, kind):
            raise TypeError(f"{name} member {i} is a {type(part).__name__}, not a {kind.__name__}")
    return parts


def check_weights(
    p: Sequence[float] | torch.Tensor | None, n: int, sample_from_all: bool, num_buffer_sampled: int | None
) -> tuple[torch.Tensor | None, int]:
    """Validate ensemble weights; returns ``(normalised p or None, members drawn per batch)``."""
    if sample_from_all:
        if p is not None:
            raise ValueError("sample_from_all=True samples every member: it cannot be combined with p")
        if num_buffer_sampled not in (None, n):
            raise ValueError(f"sample_from_all=True samples all {n} members; num_buffer_sampled must be None or {n}")
    if p is not None:
        p = torch.as_tensor(p, dtype=torch.float64).reshape(-1)
        if p.numel() != n:
            raise ValueError(f"p has {p.numel()} weights for {n} members: give one weight per member")
        if not torch.isfinite(p).all() or (p < 0).any() or float(p.sum()) <= 0:
            raise ValueError(f"p must be finite, non-negative weights with a positive sum, got {p.tolist()}")
        p = p / p.sum()
    if num_buffer_sampled is not None and (not isinstance(num_buffer_sampled, int) or num_buffer_sampled < 1):
        raise ValueError(f"num_buffer_sampled must be a positive int, got {num_buffer_sampled!r}")
    return p, n if num_buffer_sampled is None else num_buffer_sampled


class StorageEnsemble(Storage):
    """Several storages read as one: ``get((buffer_id, index))`` reads member ``buffer_id``.

    ``transforms`` (one callable or ``None`` per member) run on what each member returns. ``len`` is
    the number of members (as TorchRL); ``ensemble[i]`` is member ``i``. Writes go to a member.
    ``dumps``/``loads`` save every member under ``<path>/<i>`` (see ``StorageEnsembleCheckpointer``).
    """

    def __init__(self, *storages: Storage, transforms: Sequence[Any] | None = None) -> None:
        members = _members(storages, Storage, "StorageEnsemble")
        super().__init__(sum(s.max_size for s in members))
        self._members = members
        if transforms is not None and len(transforms) != len(members):
            raise ValueError(f"got {len(transforms)} transforms for {len(members)} storages: give one per storage")
        self.transforms = list(transforms) if transforms is not None else [None] * len(members)

    @property
    def storages(self) -> tuple[Storage, ...]:
        return self._members

    def __len__(self) -> int:
        return len(self._members)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, tuple):
            return self.get(index)
        return self._members[index]

    def get(self, index: Any) -> Any:
        """``index`` is ``(buffer_id, idx)``: ``idx`` read from member ``buffer_id`` (then transformed)."""
        if not isinstance(index, tuple) or len(index) != 2:
            raise IndexError("a StorageEnsemble is read with (buffer_id, index): storage_ensemble.get((0, idx))")
        buffer_id, idx = index
        data = self._members[int(buffer_id)].get(idx)
        transform = self.transforms[int(buffer_id)]
        return transform(data) if transform is not None else data

    def _default_checkpointer(self) -> Any:
        from datasets_hub.buffers.checkpointers import StorageEnsembleCheckpointer

        return StorageEnsembleCheckpointer()

    def set(self, cursor: Any, data: Any) -> None:
        raise RuntimeError("a StorageEnsemble is written member by member: storage_ensemble[i].set(cursor, data)")

    def empty(self) -> None:
        for s in self._members:
            s.empty()
        self._bump_version()

    def state_dict(self) -> dict[str, Any]:
        return {"members": [s.state_dict() for s in self._members]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        states = state_dict["members"]
        if len(states) != len(self._members):
            raise ValueError(f"the state holds {len(states)} storages, this ensemble {len(self._members)}")
        for s, st in zip(self._members, states, strict=True):
            s.load_state_dict(st)

    def __repr__(self) -> str:
        return f"StorageEnsemble({', '.join(repr(s) for s in self._members)})"


class SamplerEnsemble(Sampler):
    """One sampler per member storage, and the rule choosing the members of each batch.

    ``sample(storage_ensemble, batch_size)`` picks ``k = num_buffer_sampled`` members (all of them
    in order with ``sample_from_all=True``; else ``k`` draws with replacement, uniform or with
    weights ``p``, using this sampler's ``generator``) and draws ``batch_size // k`` items from each
    with the member's sampler. The index is ``(buffer_ids, index)``, both ``[k, batch_size // k]``;
    ``info`` holds the members' infos per draw under ``"infos"``.
    """

    def __init__(
        self,
        *samplers: Sampler,
        p: Sequence[float] | torch.Tensor | None = None,
        sample_from_all: bool = False,
        num_buffer_sampled: int | None = None,
    ) -> None:
        self._members = _members(samplers, Sampler, "SamplerEnsemble")
        self.p, self.num_buffer_sampled = check_weights(p, len(self._members), sample_from_all, num_buffer_sampled)
        self.sample_from_all = bool(sample_from_all)
        self.generator: torch.Generator | None = None

    @property
    def samplers(self) -> tuple[Sampler, ...]:
        return self._members

    @property
    def requires_shared_state(self) -> bool:  # type: ignore[override]  # any member's, not a constant
        return any(s.requires_shared_state for s in self._members)

    def __len__(self) -> int:
        return len(self._members)

    def __getitem__(self, index: int) -> Sampler:
        return self._members[index]

    def choose(self) -> torch.Tensor:
        """The members of the next batch (``[num_buffer_sampled]`` ids)."""
        n = len(self._members)
        if self.sample_from_all:
            return torch.arange(n)
        if self.p is None:
            return torch.randint(n, (self.num_buffer_sampled,), generator=self.generator)
        return torch.multinomial(self.p, self.num_buffer_sampled, replacement=True, generator=self.generator)

    def sample(self, storage: Storage, batch_size: int) -> tuple[Any, dict[str, Any]]:
        if not isinstance(storage, StorageEnsemble) or len(storage) != len(self._members):
            raise TypeError("SamplerEnsemble samples a StorageEnsemble with one storage per sampler")
        k = self.num_buffer_sampled
        if batch_size % k:
            raise ValueError(f"batch_size={batch_size} is not divisible by the {k} members drawn per batch")
        sub = batch_size // k
        ids = self.choose()
        local, infos = [], []
        for b in ids.tolist():
            index, info = self._members[b].sample(storage.storages[b], sub)
            if index.shape[0] != sub:
                raise RuntimeError(f"sampler {b} returned {index.shape[0]} items for a request of {sub}")
            local.append(index)
            infos.append(info)
        self._ran_out = any(s.ran_out for s in self._members)
        return (ids.unsqueeze(1).expand(k, sub).clone(), torch.stack(local)), {"infos": infos}

    def extend(self, index: Any) -> None:
        raise RuntimeError("a SamplerEnsemble is told about writes member by member: ensemble[i].extend(index)")

    def empty(self) -> None:
        for s in self._members:
            s.empty()

    def state_dict(self) -> dict[str, Any]:
        return {"members": [s.state_dict() for s in self._members]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for s, st in zip(self._members, state_dict["members"], strict=True):
            s.load_state_dict(st)


class WriterEnsemble(Writer):
    """The members' writers, kept together for state and ``empty``; writes go to one member."""

    def __init__(self, *writers: Writer) -> None:
        super().__init__()
        self._members = _members(writers, Writer, "WriterEnsemble")

    @property
    def writers(self) -> tuple[Writer, ...]:
        return self._members

    def __len__(self) -> int:
        return len(self._members)

    def __getitem__(self, index: int) -> Writer:
        return self._members[index]

    def _refuse(self) -> RuntimeError:
        return RuntimeError(
            "an ensemble is written member by member: ensemble[i].extend(data) (a WriterEnsemble cannot "
            "tell which member the data belongs to)"
        )

    def add(self, data: Any) -> int:
        raise self._refuse()

    def extend(self, data: Any) -> torch.Tensor:
        raise self._refuse()

    def register_storage(self, storage: Any) -> None:
        if isinstance(storage, StorageEnsemble):
            for w, s in zip(self._members, storage.storages, strict=True):
                w.register_storage(s)
        self._storage = storage

    @property
    def write_count(self) -> int:
        return sum(w.write_count for w in self._members)

    def empty(self) -> None:
        for w in self._members:
            w.empty()

    def state_dict(self) -> dict[str, Any]:
        return {"members": [w.state_dict() for w in self._members]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for w, st in zip(self._members, state_dict["members"], strict=True):
            w.load_state_dict(st)
