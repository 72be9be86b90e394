"""Weighted ensembles of replay buffers (docs/guide/sampling.md), as TorchRL's ``ReplayBufferEnsemble``."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase, is_non_tensor

from datasets_hub.buffers.ensemble_parts import SamplerEnsemble, StorageEnsemble, WriterEnsemble
from datasets_hub.buffers.nested_keys import key_to_str


def _buffers_from_parts(buffers: tuple, storages: Any, samplers: Any, writers: Any) -> tuple:
    """One ``ReplayBuffer`` per member of the given part ensembles (TorchRL's second constructor form)."""
    from datasets_hub.buffers.replay_buffers import ReplayBuffer

    if buffers:
        raise ValueError("pass either buffers or storages= (with optional samplers=, writers=), not both")
    members = storages.storages if isinstance(storages, StorageEnsemble) else tuple(storages)
    n = len(members)
    samp = samplers.samplers if isinstance(samplers, SamplerEnsemble) else samplers
    wr = writers.writers if isinstance(writers, WriterEnsemble) else writers
    for name, parts in (("samplers", samp), ("writers", wr)):
        if parts is not None and len(parts) != n:
            raise ValueError(f"{name} has {len(parts)} members for {n} storages: give one per storage")
    transforms = storages.transforms if isinstance(storages, StorageEnsemble) else [None] * n
    return tuple(
        ReplayBuffer(
            storage=members[i],
            sampler=None if samp is None else samp[i],
            writer=None if wr is None else wr[i],
            transform=transforms[i],
        )
        for i in range(n)
    )


class ReplayBufferEnsemble:
    """Sample from several replay buffers at once and stack the results.

    ``sample(n)`` picks ``k = num_buffer_sampled`` buffers (default: all of them) and draws
    ``n // k`` items from each; the result is a TensorDict of shape ``[k, n // k]`` (``[k, n // k,
    ...]`` when the buffers return more dims) holding, besides the data, ``("index",
    "buffer_ids")`` (which buffer each row comes from) and ``("index", "index")`` (the row's index
    in that buffer). ``n`` must be divisible by ``k``.

    - ``sample_from_all=True``: buffer ``i`` fills row ``i`` (no ``p`` then).
    - Otherwise the ``k`` buffers are drawn with replacement, uniformly or with weights ``p``
      (normalised), using the ensemble's ``generator`` (``set_rng``): the same seed picks the same
      buffers. Each buffer draws its items with its own generator, so seed those too for
      identical batches.
    - Each buffer's own transform runs inside its ``sample`` (before stacking): use it to align
      datasets whose keys differ (``Rename``, ``Select``, ``Exclude``). ``transform`` runs on the
      stacked batch. Buffers whose samples still differ in keys, shapes or dtypes raise a
      ``ValueError`` naming the keys and the buffers.
    - ``len(ensemble)`` is the number of buffers; ``ensemble[i]`` is buffer ``i`` and
      ``ensemble[i, idx]`` is ``ensemble[i][idx]``.

    Weights ``p`` choose a buffer *per row* of the ``[k, n // k]`` batch, as in TorchRL: with
    ``p=[0.8, 0.2]`` and two rows, a batch is entirely from buffer 0 with probability 0.64, so the
    mixture holds only on average over batches. ``mix="batch"`` instead gives every batch its
    share: ``sample(n)`` returns a flat ``[n]`` batch with ``round(p_i * n)`` items of buffer ``i``
    (largest remainders; the counts always sum to ``n``), buffer by buffer in order, with the same
    ``("index", "buffer_ids")`` and ``("index", "index")`` keys (``num_buffer_sampled`` and
    ``sample_from_all`` do not apply; ``p=None`` means equal shares).
    """

    def __init__(
        self,
        *buffers: Any,
        storages: Any = None,
        samplers: Any = None,
        writers: Any = None,
        p: Sequence[float] | torch.Tensor | None = None,
        sample_from_all: bool = False,
        num_buffer_sampled: int | None = None,
        transform: Any = None,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
        mix: str = "row",
    ) -> None:
        if mix not in ("row", "batch"):
            raise ValueError(
                f"mix must be 'row' (a buffer per row, as TorchRL) or 'batch' (p of each batch), got {mix!r}"
            )
        if mix == "batch" and (sample_from_all or num_buffer_sampled is not None):
            raise ValueError(
                "mix='batch' fills every batch with p of each buffer: num_buffer_sampled and "
                "sample_from_all do not apply"
            )
        self.mix = mix
        if len(buffers) == 1 and isinstance(buffers[0], (list, tuple)):
            buffers = tuple(buffers[0])
        if storages is not None:
            buffers = _buffers_from_parts(buffers, storages, samplers, writers)
        elif samplers is not None or writers is not None:
            raise ValueError(
                "samplers= and writers= go with storages=: ReplayBufferEnsemble(storages=StorageEnsemble(...), ...)"
            )
        if not buffers:
            raise ValueError("ReplayBufferEnsemble needs at least one buffer: ReplayBufferEnsemble(rb0, rb1, ...)")
        for i, rb in enumerate(buffers):
            if not hasattr(rb, "sample"):
                raise TypeError(f"argument {i} is a {type(rb).__name__}, not a replay buffer")
        self._buffers = tuple(buffers)
        n = len(buffers)
        if sample_from_all:
            if p is not None:
                raise ValueError("sample_from_all=True samples every buffer: it cannot be combined with p")
            if num_buffer_sampled not in (None, n):
                raise ValueError(
                    f"sample_from_all=True samples all {n} buffers; num_buffer_sampled must be None or {n}"
                )
        if p is not None:
            p = torch.as_tensor(p, dtype=torch.float64).reshape(-1)
            if p.numel() != n:
                raise ValueError(f"p has {p.numel()} weights for {n} buffers: give one weight per buffer")
            if not torch.isfinite(p).all() or (p < 0).any() or float(p.sum()) <= 0:
                raise ValueError(f"p must be finite, non-negative weights with a positive sum, got {p.tolist()}")
            p = p / p.sum()
        self.p = p
        self.sample_from_all = bool(sample_from_all)
        if num_buffer_sampled is not None and (not isinstance(num_buffer_sampled, int) or num_buffer_sampled < 1):
            raise ValueError(f"num_buffer_sampled must be a positive int, got {num_buffer_sampled!r}")
        self.num_buffer_sampled = n if num_buffer_sampled is None else num_buffer_sampled
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
        self.batch_size = batch_size
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        self.transform = transform
        self.generator = generator
        self._view_shapes: dict[tuple[int, int], dict] = {}  # (k, sub) -> {leaf shape: [k, sub, ...] shape}
        self._id_blocks: dict[tuple, np.ndarray] = {}  # (buffer ids, sub) -> [k, sub] ids

    def as_dataset(self, *, num_batches: int | None = None) -> Any:
        """TorchRL 0.15's ``as_dataset()`` for an ensemble: an iterable over its batches (see
        :class:`~datasets_hub.buffers.pytorch_datasets.ReplayBufferDataset`). In a DataLoader worker each
        member is forked with its own seed stream; a member whose sampler keeps shared state is refused
        there. The map-style view is per member: ``ensemble[i].storage.as_dataset()``."""
        from datasets_hub.buffers.pytorch_datasets import ReplayBufferDataset

        return ReplayBufferDataset(self, num_batches=num_batches)

    def fork_seeded(self, seed: int) -> ReplayBufferEnsemble:
        """A fork for one DataLoader worker (see :func:`~datasets_hub.buffers.pytorch_datasets.worker_fork`):
        the choice generator (where the ensemble has one) and every member get independent streams of
        ``seed``."""
        from datasets_hub.buffers.pytorch_datasets import stream_seed, worker_fork

        members = [worker_fork(self[i], stream_seed(seed, i + 1)) for i in range(len(self))]
        return self.fork(None if self.generator is None else torch.Generator().manual_seed(seed), members)

    def fork(self, generator: torch.Generator | None, members: Sequence[Any]) -> ReplayBufferEnsemble:
        """A shallow copy over ``members`` (forks of ``self[i]``, same order) choosing buffers with
        ``generator``: the ensemble's part of :meth:`ReplayBuffer.fork`."""
        if len(members) != len(self._buffers):
            raise ValueError(f"fork needs {len(self._buffers)} member buffers, got {len(members)}")
        clone = copy.copy(self)
        clone._buffers = tuple(members)
        clone.set_rng(generator)
        return clone

    def set_rng(self, generator: torch.Generator | None) -> None:
        """Make ``generator`` the source of the ensemble's buffer choices."""
        self.generator = generator

    # -- parts (TorchRL's StorageEnsemble / SamplerEnsemble / WriterEnsemble) -------------------------
    @property
    def storage(self) -> StorageEnsemble:
        """The members' storages as one :class:`StorageEnsemble` (read with ``(buffer_id, index)``)."""
        return StorageEnsemble(*[rb.storage for rb in self._buffers])

    @property
    def sampler(self) -> SamplerEnsemble:
        """The members' samplers with this ensemble's choice rule (``p``, ``sample_from_all``, ...)."""
        out = SamplerEnsemble(
            *[rb.sampler for rb in self._buffers],
            p=self.p,
            sample_from_all=self.sample_from_all,
            num_buffer_sampled=None if self.sample_from_all else self.num_buffer_sampled,
        )
        out.generator = self.generator
        return out

    @property
    def writer(self) -> WriterEnsemble:
        return WriterEnsemble(*[rb.writer for rb in self._buffers])

    # -- container -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._buffers)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, tuple):
            if not index:
                raise IndexError("empty index")
            rb = self._buffers[index[0]]
            rest = index[1:]
            return rb[rest[0] if len(rest) == 1 else rest] if rest else rb
        if isinstance(index, slice):
            return self._buffers[index]
        return self._buffers[int(index)]

    def __iter__(self) -> Iterator[Any]:
        """Batches of ``batch_size`` until a sampled buffer runs out (forever with uniform samplers)."""
        if self.batch_size is None:
            raise RuntimeError("cannot iterate over an ensemble without a batch size: build it with batch_size=...")
        while True:
            yield self.sample()
            if any(getattr(rb.sampler, "ran_out", False) for rb in self._buffers if hasattr(rb, "sampler")):
                return

    # -- sampling ------------------------------------------------------------------------------------
    def _choose(self) -> torch.Tensor:
        n = len(self._buffers)
        if self.sample_from_all:
            return torch.arange(n)
        if self.p is None:
            return torch.randint(n, (self.num_buffer_sampled,), generator=self.generator)
        return torch.multinomial(self.p, self.num_buffer_sampled, replacement=True, generator=self.generator)

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """``[k, batch_size // k]`` items (see the class docstring), and ``info`` if ``return_info``."""
        if batch_size is None:
            batch_size = self.batch_size
            if batch_size is None:
                raise RuntimeError(
                    "batch_size not specified: pass sample(batch_size=...) or build the ensemble with batch_size=..."
                )
        if self.mix == "batch":
            return self._sample_mixed(batch_size, return_info)
        k = self.num_buffer_sampled
        if batch_size % k:
            raise ValueError(
                f"batch_size={batch_size} is not divisible by the {k} buffers sampled per batch: use a multiple "
                f"of {k} (e.g. {max(1, batch_size // k) * k})"
            )
        sub = batch_size // k
        buffer_ids = self._choose()
        ids = buffer_ids.tolist()
        counts: dict[int, int] = {}
        for b in ids:
            counts[b] = counts.get(b, 0) + 1
        # one draw per distinct buffer, in buffer order: the same buffer picked twice draws once, then splits
        drawn = self._draw(sorted(counts), counts, sub)
        data, local = self._read(ids, drawn, sub, buffer_ids)
        index = local.view(k, sub)
        out = self._stack(data, k, sub, index, buffer_ids, ids)
        if self.transform is not None:
            out = self.transform(out)
        if return_info:
            return out, {"buffer_ids": buffer_ids, "index": index}
        return out

    def shares(self, batch_size: int) -> list[int]:
        """Items of each buffer in a ``mix="batch"`` batch of ``batch_size``: ``round(p_i * n)`` by
        largest remainders (ties to the lower index), summing to ``batch_size``."""
        n = len(self._buffers)
        p = self.p if self.p is not None else torch.full((n,), 1.0 / n, dtype=torch.float64)
        exact = p * batch_size
        counts = torch.floor(exact).to(torch.int64)
        rest = batch_size - int(counts.sum())
        if rest:
            order = sorted(range(n), key=lambda i: (-(float(exact[i]) - int(counts[i])), i))
            for i in order[:rest]:
                counts[i] += 1
        return [int(c) for c in counts]

    def _sample_mixed(self, batch_size: int, return_info: bool) -> Any:
        pieces, ids, locals_ = [], [], []
        for b, count in enumerate(self.shares(batch_size)):
            if not count:
                continue
            check = getattr(getattr(self._buffers[b], "sampler", None), "check_batch_size", None)
            if callable(check):
                try:
                    check(count)
                except ValueError as exc:
                    raise ValueError(
                        f"mix='batch' gives buffer {b} {count} of {batch_size} items, which its sampler cannot "
                        f"split: {exc}. Choose batch_size and p so that each share suits its sampler"
                    ) from None
            data, info = self._buffers[b].sample(count, return_info=True)
            if not isinstance(data, TensorDictBase):
                raise TypeError(f"mix='batch' stacks TensorDicts; buffer {b} returned a {type(data).__name__}")
            pieces.append((b, data.exclude("index")))
            ids.append(torch.full((count,), b, dtype=torch.int64))
            locals_.append(torch.as_tensor(info["index"]).reshape(-1))
        self._check_compatible([(b, dict(d.items(include_nested=True, leaves_only=True))) for b, d in pieces])
        out = cast(TensorDictBase, torch.cat(cast(Any, [d for _, d in pieces])))  # torch's stubs know only tensors
        buffer_ids, index = torch.cat(ids), torch.cat(locals_)
        out.set(("index", "buffer_ids"), buffer_ids)
        out.set(("index", "index"), index)
        if self.transform is not None:
            out = self.transform(out)
        if return_info:
            return out, {"buffer_ids": buffer_ids, "index": index}
        return out

    def _draw(self, distinct: list[int], counts: dict[int, int], sub: int) -> dict[int, list[Any]]:
        """``{buffer: [data or None, index, info]}``: each buffer's draw of ``sub * counts[b]`` items.

        Buffers over one read-only storage only draw here (``data`` None) when every one of them can
        (:meth:`ReplayBuffer.draw_index`): :meth:`_read` then reads all their rows in one gather,
        the same rows and values as their own ``sample`` calls (nothing can change in between); so
        does one buffer alone over a storage that ``gathers_batches`` (its ``[k, sub]`` batch at once)."""
        buffers = self._buffers
        first = buffers[distinct[0]]
        storage = first.storage
        joint = (
            getattr(storage, "read_only", False)
            and (len(distinct) > 1 or getattr(storage, "gathers_batches", False))
            and all(buffers[b].storage is storage and type(buffers[b]) is type(first) for b in distinct[1:])
        )
        drawn: dict[int, list[Any]] = {}
        for b in distinct:
            rb, want = buffers[b], sub * counts[b]
            draw = rb.draw_rows(want) if joint else None
            rows = None
            if draw is None:
                data, info = rb.sample(want, return_info=True)
                local = torch.as_tensor(info["index"])
            else:
                data, (local, info, rows) = None, draw
            got = len(rows) if rows is not None else local.shape[0] if local.ndim else 0
            if got != want:
                raise RuntimeError(
                    f"buffer {b} returned {got} items for a request of {want}: ensembles need "
                    "samplers that return full batches (e.g. SliceSampler(strict_length=True))"
                )
            drawn[b] = [data, local, info, rows]
        return drawn

    def _read(
        self, ids: list[int], drawn: dict[int, list[Any]], sub: int, buffer_ids: torch.Tensor
    ) -> tuple[list[tuple[int, Any, int]], torch.Tensor]:
        """``(parts, index)``: for each position of the batch ``(buffer, data, first row in data)``,
        and the flat local index of every row, position after position. A joint read of a storage
        that ``gathers_batches`` is one part ``(buffer, [k, sub] data, -1)``, or ``-2`` when the data
        is the whole result already (the ``("index", ...)`` keys gathered in with it)."""
        pieces: list[tuple[int, int]] = []  # (buffer, first row in its draw) per position
        seen: dict[int, int] = {}
        for b in ids:
            j = seen.get(b, 0)
            seen[b] = j + 1
            pieces.append((b, j * sub))
        rows = None  # the numpy rows of every position, when every draw came with them (draw_rows)
        if len(drawn) == 1:  # one buffer drew every row, in position order
            local, rows = drawn[ids[0]][1], drawn[ids[0]][3]
        elif all(entry[3] is not None for entry in drawn.values()):  # joined in numpy: cheaper than torch.cat
            if ids == list(drawn):
                rows = np.concatenate([entry[3] for entry in drawn.values()])
            else:
                rows = np.concatenate([drawn[b][3][lo : lo + sub] for b, lo in pieces])
            local = torch.from_numpy(rows)
        elif ids == list(drawn):  # each buffer once, in buffer order: each draw whole
            local = torch.cat([entry[1] for entry in drawn.values()])
        else:
            local = torch.cat([drawn[b][1][lo : lo + sub] for b, lo in pieces])
        if all(entry[0] is not None for entry in drawn.values()):
            return [(b, drawn[b][0], lo) for b, lo in pieces], local
        joint = self._joint_info(drawn, pieces, sub)
        if joint is None:  # the draws' infos differ: each buffer reads its own rows
            for b, entry in drawn.items():
                if entry[0] is None:
                    entry[0] = self._buffers[b].gather_drawn(entry[1], entry[2])
            return [(b, drawn[b][0], lo) for b, lo in pieces], local
        reader = self._buffers[ids[0]]
        # read as [k, sub] at once where the storage can: no reshape of every leaf after
        if getattr(reader.storage, "gathers_batches", False):
            k = len(ids)
            shaped: dict[Any, Any] = {key: v.view(k, sub, *v.shape[1:]) for key, v in joint.items()}
            if rows is not None:
                # every draw came with valid rows and per-item info (draw_rows): the storage skips its
                # checks and builds the result itself, ("index", ...) keys included
                # copies made in numpy (cheaper than torch clones): the batch shares no memory with the draws
                shaped[("index", "index")] = torch.from_numpy(rows.reshape(k, sub).copy())
                shaped[("index", "buffer_ids")] = self._ids_block(ids, sub)
                shaped_rows = rows.reshape(k, sub)
                return [(ids[0], reader.gather_drawn(local.view(k, sub), shaped, shaped_rows), -2)], local
            return [(ids[0], reader.gather_drawn(local.view(k, sub), shaped), -1)], local
        data = reader.gather_drawn(local, joint)
        return [(b, data, pos * sub) for pos, (b, _) in enumerate(pieces)], local

    @staticmethod
    def _joint_info(drawn: dict[int, list[Any]], pieces: list[tuple[int, int]], sub: int) -> dict[str, Any] | None:
        """The draws' per-item info (slice flags, weights), position after position; None when the
        buffers' samplers report different keys."""
        infos = {b: entry[2] for b, entry in drawn.items()}
        keys = None
        for b, info in infos.items():
            mine = {
                k
                for k, v in info.items()
                if isinstance(v, torch.Tensor) and v.ndim and v.shape[0] == drawn[b][1].shape[0]
            }
            if keys is None:
                keys = mine
            elif mine != keys:
                return None
        return {key: torch.cat([infos[b][key][lo : lo + sub] for b, lo in pieces]) for key in keys or ()}

    def _stack(
        self,
        parts: list[tuple[int, Any, int]],
        k: int,
        sub: int,
        index: torch.Tensor,
        buffer_ids: torch.Tensor,
        ids: list[int],
    ) -> Any:
        first = parts[0][1]
        if parts[0][2] == -2:  # the storage built the whole result (see _read)
            return first
        whole = all(data is first and lo == pos * sub for pos, (_, data, lo) in enumerate(parts))
        if not isinstance(first, TensorDictBase):
            if parts[0][2] == -1:
                return first
            if whole and isinstance(first, torch.Tensor) and first.shape[0] == k * sub:
                return first.reshape(k, sub, *first.shape[1:])
            pieces = [data[lo : lo + sub] for _, data, lo in parts]
            if all(isinstance(p, torch.Tensor) for p in pieces):
                return torch.stack(pieces)
            return pieces
        tree: dict[str, Any]
        batch = torch.Size([k, sub, *first.batch_size[1:]])
        nested = False  # the tree holds TensorDicts below its root, not dicts
        if parts[0][2] == -1:  # one read gave the [k, sub] batch itself (Storage.gathers_batches)
            batch = first.batch_size
            tree = {key: value for key, value in first.items() if key != "index"}
        elif whole and first.batch_size[0] == k * sub:  # one read gave every row in order: a view per leaf
            shapes = self._view_shapes.get((k, sub))
            if shapes is None:
                shapes = self._view_shapes[(k, sub)] = {}
            tree = _unflatten(first, k, sub, shapes, batch)
            tree.pop("index", None)
        else:
            tree, nested = self._stack_leaves(parts, sub), True
        if len(batch) == 2:
            tree["index"] = TensorDict._new_unsafe(
                source={"index": index.clone(), "buffer_ids": self._ids_block(ids, sub)},
                batch_size=batch,
                nested=False,
            )
        else:
            extra, nested = [1] * (len(batch) - 2), True
            tree["index"] = {
                "index": index.reshape(*index.shape, *extra).expand(batch).clone(),
                "buffer_ids": buffer_ids.reshape(-1, 1, *extra).expand(batch).clone(),
            }
        # the shapes are right by construction: no per-leaf validation (it cost as much as the stacking)
        return TensorDict._new_unsafe(source=cast(Any, tree), batch_size=batch, nested=nested)

    def _ids_block(self, ids: list[int], sub: int) -> torch.Tensor:
        """``[k, sub]``: row ``i`` filled with ``buffer_ids[i]`` (a numpy copy of a cached block: cheaper
        than a torch clone)."""
        key = (tuple(ids), sub)
        block = self._id_blocks.get(key)
        if block is None:
            block = np.repeat(np.asarray(ids, dtype=np.int64), sub).reshape(len(ids), sub)
            if len(self._id_blocks) < 64:  # a few choices repeat (all buffers, two of two, ...)
                self._id_blocks[key] = block
        return torch.from_numpy(block.copy())

    def _stack_leaves(self, parts: list[tuple[int, Any, int]], sub: int) -> dict[str, Any]:
        """Stack the parts' rows leaf by leaf (cheaper than stacking TensorDicts) into a nested dict."""
        trees: dict[int, dict] = {}  # one plain tree per distinct sample
        for b, data, _ in parts:
            if id(data) not in trees:
                if not isinstance(data, TensorDictBase):
                    raise TypeError(
                        f"buffer {b} returned a {type(data).__name__} where buffer {parts[0][0]} returned a TensorDict"
                    )
                tree = _plain_tree(data)
                tree.pop("index", None)
                trees[id(data)] = tree
        whole = all(lo == 0 and data.batch_size[0] == sub for _, data, lo in parts)
        rows = [(trees[id(data)], None if whole else slice(lo, lo + sub)) for _, data, lo in parts]
        out = _stack_trees(rows)
        if out is None:  # keys, shapes or dtypes differ: say which, and how to align them
            samples = {b: data for b, data, _ in parts}
            self._check_compatible(
                [(b, dict(d.items(include_nested=True, leaves_only=True))) for b, d in samples.items()]
            )
            raise ValueError("cannot stack the buffers' samples: their leaves differ")  # pragma: no cover
        return out

    @staticmethod
    def _check_compatible(leaves: list[tuple[int, dict]]) -> None:
        b0, l0 = leaves[0]
        spec0 = {k: (tuple(v.shape[1:]), v.dtype) for k, v in l0.items()}
        for b, lv in leaves[1:]:
            spec = {k: (tuple(v.shape[1:]), v.dtype) for k, v in lv.items()}
            if spec.keys() != spec0.keys():
                only0 = sorted(key_to_str(k) for k in spec0.keys() - spec.keys())
                only = sorted(key_to_str(k) for k in spec.keys() - spec0.keys())
                raise ValueError(
                    f"cannot stack samples of buffers {b0} and {b}: their keys differ "
                    f"(only in buffer {b0}: {only0 or 'none'}; only in buffer {b}: {only or 'none'}). "
                    "Give each buffer a transform that aligns them before stacking, e.g. "
                    "transform=Rename(in_keys=[...], out_keys=[...]), Select(...) or Exclude(...)"
                )
            for key, (shape, dtype) in spec.items():
                if (shape, dtype) != spec0[key]:
                    raise ValueError(
                        f"cannot stack {key_to_str(key)!r}: buffer {b0} gives per-item shape {list(spec0[key][0])} "
                        f"{spec0[key][1]} but buffer {b} gives {list(shape)} {dtype}. Align them with a "
                        "per-buffer transform (convert or drop the key: Exclude(...) / Select(...))"
                    )

    def __repr__(self) -> str:
        p = None if self.p is None else [round(x, 4) for x in self.p.tolist()]
        return (
            f"ReplayBufferEnsemble({len(self._buffers)} buffers, p={p}, sample_from_all={self.sample_from_all}, "
            f"num_buffer_sampled={self.num_buffer_sampled})"
        )


def _unflatten(data: TensorDictBase, k: int, sub: int, shapes: dict, batch: torch.Size) -> dict[str, Any]:
    """The leaves of ``data`` (batch ``[k * sub, ...]``) as ``[k, sub, ...]`` views: a dict of them and
    of sub-TensorDicts of ``batch``. ``shapes`` caches each leaf shape's target (spelling a shape out
    costs more than the view)."""
    tree: dict[str, Any] = {}
    for key, value in data.items():
        if type(value) is torch.Tensor and value.is_contiguous():
            shape = shapes.get(value.shape)
            if shape is None:
                shape = shapes[value.shape] = (k, sub, *value.shape[1:])
            tree[key] = value.view(*shape)
        elif isinstance(value, TensorDictBase):
            inner = cast(Any, _unflatten(value, k, sub, shapes, batch))  # tensordict's stubs: tensor values only
            tree[key] = TensorDict._new_unsafe(source=inner, batch_size=batch, nested=False)
        else:
            tree[key] = value.unflatten(0, (k, sub))
    return tree


def _plain_tree(data: TensorDictBase) -> dict[str, Any]:
    """A TensorDict's tensor leaves as a nested dict, as ``items(include_nested=True, leaves_only=True)``
    sees them: non-tensor data and sub-TensorDicts without tensors are left out. (Walking each
    sample once beats one lookup per leaf and sample.)"""
    tree: dict[str, Any] = {}
    for key, value in data.items():
        if type(value) is torch.Tensor:
            tree[key] = value
        elif is_non_tensor(value):
            continue
        elif isinstance(value, TensorDictBase):
            inner = _plain_tree(value)
            if inner:
                tree[key] = inner
        else:
            tree[key] = value  # a tensor subclass (or a tensorclass: torch.stack stacks those too)
    return tree


def _stack_trees(rows: list[tuple[dict, slice | None]]) -> dict[str, Any] | None:
    """``torch.stack`` of each leaf over the trees (each cut to its slice); None when their keys,
    per-item shapes or dtypes differ."""
    first = rows[0][0]
    for tree, _ in rows[1:]:
        if tree.keys() != first.keys():
            return None
    out: dict[str, Any] = {}
    for key, value in first.items():
        if type(value) is dict:
            inner = _stack_trees([(tree[key], cut) for tree, cut in rows])
            if inner is None:
                return None
            out[key] = inner
            continue
        pieces = [tree[key] if cut is None else tree[key][cut] for tree, cut in rows]
        dtype, shape = value.dtype, value.shape[1:]
        for piece in pieces:
            if type(piece) is dict or piece.dtype != dtype or piece.shape[1:] != shape:
                return None
        out[key] = torch.stack(pieces)
    return out
