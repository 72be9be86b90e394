"""Sub-trajectory ("slice") samplers over episode boundaries (docs/guide/sampling.md).

This module holds one concept: the slice sampler (with and without replacement).

Where episodes are:
- a storage with a build-time index (``storage.episode_index()`` is not None, e.g. the hub's
  read-only dataset builds) is used as is;
- otherwise boundaries are derived once from ``traj_key`` (runs of equal ids, default
  ``"episode"``) or ``end_key`` (rows whose flag is set end an episode, default
  ``("next", "done")``) and kept until ``storage.write_version`` changes.

Online circular buffers: episodes are runs of *consecutive rows*, so an episode that wrapped past
the end of the storage counts as two pieces (its tail at the end, its head from row 0), and the
write cursor (one past the last row written, learnt from the buffer's ``extend`` calls) is always
a boundary: the newest rows are never glued to the oldest ones being overwritten. No slice ever
mixes unrelated data.

What a slice sampler returns: a flat index of ``num_slices`` contiguous slices, slice after slice,
and ``info`` with ``truncated_key`` (default ``("next", "truncated")``) True at the last row of
every slice, the matching ``done`` key (``("next", "done")``) = stored done | truncated and the
``terminated`` key = the stored terminated flags (False where the storage has none), all
``[len(index), 1]`` bool: as in TorchRL, a TensorDict buffer writes them into the sample, so each
slice reads as an episode cut by a time limit. (The stored done and terminated flags are gathered
at the sampled rows for this: two extra 1-byte-per-row reads.)
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from datasets_hub.buffers import multidim as mdim
from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.nested_keys import as_key
from datasets_hub.buffers.samplers.base import Sampler, as_index
from datasets_hub.buffers.samplers.random import SamplerWithoutReplacement
from datasets_hub.buffers.samplers.slice_layout import SliceLayout, cached_arange, cached_arange_np, check_slice_shape
from datasets_hub.buffers.storages import Storage
from datasets_hub.errors import InvalidArgument

NestedKey = Any
_AUTO_TRAJ_KEYS = (("collector", "traj_ids"), "episode")  # TorchRL's order: a collector's ids first
_DEFAULT_END_KEY = ("next", "done")


def _replace_last(key: NestedKey, name: str) -> NestedKey:
    return name if isinstance(key, str) else (*key[:-1], name)


class SliceSampler(Sampler):
    """Uniform sampling of contiguous slices that never cross an episode boundary.

    Exactly one of ``num_slices`` (slices per batch; ``slice_len = batch_size // num_slices``) or
    ``slice_len`` (rows per slice; ``num_slices = batch_size // slice_len``) is given, and the
    batch size must be a multiple of it. Every valid slice start (see module docstring for where
    episodes come from) is equally likely: long episodes give more slices than short ones. A call
    costs ``O(batch)`` plus one ``searchsorted`` over the episodes, whatever the storage size; the
    boundaries are derived once per storage version (``cache_values=False`` re-derives them at
    every call for storages without a build-time index).

    ``strict_length=True``: episodes shorter than ``slice_len`` are never sampled; output is
    exactly ``[num_slices * slice_len]``. ``strict_length=False``: such an episode counts as one
    valid start whose slice is the whole episode, so the output may be shorter than the batch
    size (the ``truncated`` mask tells where each slice ends), as in TorchRL.

    ``SliceSampler(replacement=False, ...)`` is a :class:`SliceSamplerWithoutReplacement` (which also takes
    ``drop_last`` and ``shuffle``), as in TorchRL.
    """

    def __new__(cls, *args: Any, replacement: bool = True, **kwargs: Any) -> SliceSampler:
        if cls is SliceSampler and not replacement:
            return super().__new__(SliceSamplerWithoutReplacement)
        return super().__new__(cls)

    def __init__(
        self,
        num_slices: int | None = None,
        slice_len: int | None = None,
        traj_key: NestedKey | None = None,
        end_key: NestedKey | None = None,
        strict_length: bool = True,
        cache_values: bool = True,
        truncated_key: NestedKey | None = ("next", "truncated"),
        *,
        replacement: bool = True,
        end_keys: Sequence[NestedKey] | None = None,
        pad_output: bool = False,
        span: bool | int | tuple[bool | int, bool | int] = False,
    ) -> None:
        if pad_output and strict_length:
            raise InvalidArgument(
                "pad_output=True is incompatible with strict_length=True: padding fills the slices of episodes "
                "shorter than slice_len, which strict_length=True never samples; pass strict_length=False"
            )
        if not replacement and not isinstance(self, SliceSamplerWithoutReplacement):
            raise InvalidArgument("replacement=False is SliceSamplerWithoutReplacement: build that class")
        if end_key is not None and end_keys is not None:
            raise InvalidArgument(
                "`end_key` and `end_keys` are exclusive: pass every key whose flags end an episode in end_keys"
            )
        if end_keys is not None and (isinstance(end_keys, str) or not len(end_keys)):
            raise InvalidArgument(f"end_keys must be a non-empty sequence of keys, got {end_keys!r}")
        check_slice_shape(num_slices, slice_len)
        self.span = _check_span(span)
        self.num_slices, self.slice_len = num_slices, slice_len
        self.traj_key, self.end_key = traj_key, end_key
        # no key given: the episode ids are looked for under _AUTO_TRAJ_KEYS at every derivation; traj_key then
        # records the key found, and TorchRL's flags say whether that happened (_traj_key_auto: not yet) and
        # whether ids cut the episodes (_fetch_traj; False: done flags did)
        self._auto_traj_key = traj_key is None and end_key is None and end_keys is None
        self._traj_key_auto = self._auto_traj_key
        self._fetch_traj = traj_key is not None or self._auto_traj_key
        self.end_keys = tuple(end_keys) if end_keys is not None else None
        self.strict_length, self.cache_values = bool(strict_length), bool(cache_values)
        self.truncated_key = truncated_key
        self.done_key = _replace_last(truncated_key, "done") if truncated_key is not None else None
        self.terminated_key = _replace_last(truncated_key, "terminated") if truncated_key is not None else None
        self.pad_output = bool(pad_output)
        self._flag_cache: dict[Any, tuple[torch.Tensor | None, np.ndarray | None]] = {}  # key -> stored flags
        self._flags_seen: tuple | None = None  # the _cache_key _flag_cache describes
        self._write_end: int | None = None  # one past the last row the buffer wrote
        self._cache_key: tuple | None = None
        self._episodes: EpisodeIndex | None = None
        self._layouts: dict[int, SliceLayout] = {}
        self._done: torch.Tensor | None = None
        self._done_np: Any = None
        self._done_at_ends = False  # stored done flags set only on episodes' last rows (see _stored_done)
        self._done_key_seen: tuple | None = None
        self._masks: dict[tuple[int, int], torch.Tensor] = {}
        self._end_flags: dict[tuple[int, int], np.ndarray] = {}
        self._storage_ref: Any = None  # the storage the cache describes (ids can be reused)
        self._perm: torch.Tensor | None = None  # position -> item (multi-dimensional storages)

    # -- buffer hooks ------------------------------------------------------------------------------
    def add(self, index: int) -> None:
        self._write_end = int(index) + 1

    def extend(self, index: torch.Tensor) -> None:
        index = as_index(index).reshape(-1)
        if index.numel():
            self._write_end = int(index[-1]) + 1

    def empty(self) -> None:
        self._write_end, self._cache_key, self._episodes, self._layouts = None, None, None, {}
        self._done = self._done_key_seen = self._flags_seen = None

    # -- shape of a batch --------------------------------------------------------------------------
    def check_batch_size(self, batch_size: int) -> None:
        """Raise ``ValueError`` if ``batch_size`` cannot be cut into whole slices (``load`` asks early)."""
        self._shape(batch_size)

    def _shape(self, batch_size: int) -> tuple[int, int]:
        num_slices, slice_len = self.num_slices, self.slice_len
        if num_slices is not None:
            if batch_size % num_slices:
                raise ValueError(
                    f"batch_size={batch_size} is not divisible by num_slices={num_slices}: use a "
                    f"multiple of {num_slices} (e.g. {max(1, batch_size // num_slices) * num_slices})"
                )
            return num_slices, batch_size // num_slices
        if slice_len is None:
            raise ValueError(
                f"{type(self).__name__} has neither num_slices nor slice_len (both were set to None after "
                "construction): set one of them"
            )
        if batch_size % slice_len:
            raise ValueError(
                f"batch_size={batch_size} is not divisible by slice_len={slice_len}: use a "
                f"multiple of {slice_len} (e.g. {max(1, batch_size // slice_len) * slice_len})"
            )
        return batch_size // slice_len, slice_len

    # -- episodes ----------------------------------------------------------------------------------
    def _read(self, storage: Storage, key: NestedKey) -> torch.Tensor:
        """One flag or id row per position (column-major on a multi-dimensional storage)."""
        value = storage.read_key(key)
        value = value.reshape(value.shape[0], -1)
        return value if self._perm is None else value[self._perm]

    def _read_ends(self, storage: Storage, key: NestedKey) -> torch.Tensor:
        """The end-of-episode flags of ``key``, one per position (bool); flags with more than one value per
        position (per-agent dones, say) are refused, as TorchRL does: OR-ing them would be a guess."""
        value = self._read(storage, key)
        if value.shape[1] != 1:
            raise InvalidArgument(
                f"Expected the end-of-trajectory signal to be 1-dimensional (one flag per stored item), but {key!r} "
                f"holds {value.shape[1]} values per item: pass end_key=<a key with one done flag per item> or "
                "traj_key=<key of episode ids>"
            )
        return value[:, 0].to(torch.bool)

    def _derive_starts(self, storage: Storage) -> torch.Tensor:
        """Bool per position: True where an episode starts.

        ``traj_key`` (default: the first of ``("collector", "traj_ids")`` and ``"episode"`` the storage holds,
        then recorded in ``traj_key``, as TorchRL does) starts one where the id changes, ``end_key`` (default
        ``("next", "done")``, one flag per item) one after every set flag. Given both, both cut (TorchRL uses ``traj_key`` and falls back to ``end_key`` when it is absent; we also
        cut at done flags, so that a slice never crosses one when the ids and the flags disagree).
        """
        starts = None
        end_given = self.end_key is not None or self.end_keys is not None
        keys = [self.traj_key] if self.traj_key is not None else []
        if self._auto_traj_key:
            keys = list(_AUTO_TRAJ_KEYS)
        self._fetch_traj = False
        for key in keys:
            try:
                ids = self._read(storage, key)
            except KeyError:
                if not self._auto_traj_key and self.traj_key is not None and not end_given:
                    raise KeyError(
                        f"traj_key {key!r} is not in the stored data: pass the key holding episode ids, "
                        "or end_key=('next', 'done') to cut episodes at done flags"
                    ) from None
                continue
            starts = torch.ones(ids.shape[0], dtype=torch.bool)
            starts[1:] = (ids[1:] != ids[:-1]).any(1)
            self._fetch_traj = True
            if self._auto_traj_key:
                self.traj_key, self._traj_key_auto = key, False
            break
        if starts is not None and not end_given:
            return starts
        if self.end_keys is not None:  # TorchRL's end_keys: the flags of every key present, OR-ed
            flags = []
            for key in self.end_keys:
                try:
                    flags.append(self._read_ends(storage, key))
                except KeyError:
                    continue
            if flags:
                done = flags[0]
                for more in flags[1:]:
                    done = done | more
            elif starts is not None:
                return starts
            else:
                raise KeyError(
                    f"none of end_keys {list(self.end_keys)} is in the stored data: pass the keys of done flags "
                    "it holds (e.g. end_keys=[('next', 'done'), ('next', 'truncated')])"
                )
            after_done = torch.zeros_like(done)
            after_done[0] = True
            after_done[1:] = done[:-1]
            return after_done if starts is None else starts | after_done
        key = self.end_key if self.end_key is not None else _DEFAULT_END_KEY
        try:
            done = self._read_ends(storage, key)
        except KeyError:
            if starts is not None:
                return starts  # traj_key found; end_key absent: ids alone
            raise KeyError(
                f"cannot find episode boundaries: the storage has no episode index and no {key!r} entry"
                + ("" if self.end_key is not None else f" nor any of {list(_AUTO_TRAJ_KEYS)}")
                + ": pass traj_key=<key of episode ids> or end_key=<key of done flags>"
            ) from None
        after_done = torch.zeros_like(done)
        after_done[0] = True
        after_done[1:] = done[:-1]
        return after_done if starts is None else starts | after_done

    def _derive(self, storage: Storage) -> EpisodeIndex:
        """Episodes of an online buffer (positions column-major when ``storage.ndim > 1``)."""
        ndim = getattr(storage, "ndim", 1)
        rows, per_row = len(storage), 1
        if ndim > 1:  # each environment's column is its own sequence of time steps
            rows = storage.len_along_dim0()
            per_row = len(storage) // max(rows, 1)
            self._perm = mdim.column_order(rows, per_row)
        else:
            self._perm = None
        n = len(storage)
        if n == 0:
            return EpisodeIndex(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
        starts = self._derive_starts(storage)
        if ndim > 1:
            cursor = None if self._write_end is None else self._write_end // per_row
            start = mdim.column_boundaries(starts, rows, per_row, cursor)
        else:
            start = torch.nonzero(starts).reshape(-1)
        end = torch.cat([start[1:], torch.tensor([n])])
        episodes = EpisodeIndex(start, end - start)
        return episodes if ndim > 1 else self._split_at_cursor(episodes, n)

    def _split_at_cursor(self, episodes: EpisodeIndex, n: int) -> EpisodeIndex:
        cut = self._write_end
        if cut is None or not 0 < cut < n or episodes.num_episodes == 0:
            return episodes
        start, end = episodes.start, episodes.end
        e = int(torch.searchsorted(start, torch.tensor(cut), right=True)) - 1
        if e < 0 or not int(start[e]) < cut < int(end[e]):
            return episodes
        new_start = torch.cat([start[: e + 1], torch.tensor([cut]), start[e + 1 :]])
        new_end = torch.cat([end[:e], torch.tensor([cut]), end[e:]])
        return EpisodeIndex(new_start, new_end - new_start)

    def episodes(self, storage: Storage) -> EpisodeIndex:
        """The episodes slices are drawn from (cached; see the module docstring)."""
        index = storage.episode_index()
        if index is not None and index is self._episodes and self._cache_key is not None:
            # the build-time index of last time (the cache holds it: its identity cannot be reused), if
            # the storage is the same one too
            ref = self._storage_ref
            if ref is not None and ref() is storage:
                return index
        key: tuple
        if index is not None:
            key = ("index", id(storage), id(index))
        else:
            key = ("derived", id(storage), storage.write_version, len(storage), self._write_end)
        ref = self._storage_ref
        episodes = self._episodes
        if (
            episodes is None
            or key != self._cache_key
            or ref is None
            or ref() is not storage
            or (index is None and not self.cache_values)
        ):
            if index is None:
                index = self._derive(storage)
            else:
                self._perm = None
            episodes = index
            self._episodes, self._layouts, self._cache_key = episodes, {}, key
            self._storage_ref = weakref.ref(storage) if _weakrefable(storage) else (lambda s=storage: s)
            self._done = self._done_key_seen = self._flags_seen = None
            self._on_new_episodes(storage)
        return episodes

    def _on_new_episodes(self, storage: Storage) -> None:
        """Hook for subclasses: the episode structure changed."""
        return None

    def _layout(self, storage: Storage, slice_len: int) -> SliceLayout:
        episodes = self.episodes(storage)
        layout = self._layouts.get(slice_len)
        if layout is None:
            layout = SliceLayout(episodes, slice_len, self.strict_length, self._span_rows(slice_len))
            if layout.total == 0:
                self._no_valid_start(episodes, slice_len)
            self._layouts[slice_len] = layout
        return layout

    def _span_rows(self, slice_len: int) -> tuple[int, int]:
        """``span`` as rows a slice of ``slice_len`` may hang over each end of its episode."""
        sides = [slice_len - 1 if side is True else int(side) for side in self.span]  # True: keep one row
        if max(sides) >= slice_len:
            raise ValueError(
                f"The right and left span must be strictly lower than the sequence length: span={self.span} "
                f"for slices of {slice_len} rows (a slice keeps at least slice_len - span rows of its episode)"
            )
        return sides[0], sides[1]

    @staticmethod
    def _no_valid_start(episodes: EpisodeIndex, slice_len: int) -> None:
        if episodes.num_episodes == 0:
            raise RuntimeError("the buffer holds no complete episode to slice: add data first")
        longest = int(torch.argmax(episodes.length))
        raise RuntimeError(
            f"no episode is long enough for slices of {slice_len} rows: the longest of the "
            f"{episodes.num_episodes} episodes has {int(episodes.length[longest])} rows (the one starting "
            f"at row {int(episodes.start[longest])}). Use a smaller slice_len (or more num_slices), or "
            "strict_length=False to accept shorter slices"
        )

    # -- info --------------------------------------------------------------------------------------
    def _read_flags(self, storage: Storage, key: NestedKey | None) -> tuple[torch.Tensor | None, np.ndarray | None]:
        """The stored per-row flags of ``key`` by position (``None`` when absent or not one flag per row,
        e.g. per-agent flags), and a numpy view of them when the leaf is a CPU tensor."""
        try:
            flags = storage.read_key(key) if key is not None else None
        except (KeyError, NotImplementedError):
            flags = None
        if flags is not None and (
            not isinstance(flags, torch.Tensor) or flags.ndim > 2 or (flags.ndim == 2 and flags.shape[1] != 1)
        ):
            flags = None
        if flags is not None and self._perm is not None:
            flags = flags[self._perm]  # positions are column-major on a multi-dimensional storage
        flags_np = None
        if flags is not None and type(flags) is torch.Tensor and flags.device.type == "cpu":
            try:
                flags_np = flags.detach().numpy()  # a view: no copy of the leaf
            except (RuntimeError, TypeError):
                flags_np = None
        return flags, flags_np

    def _stored_done(self, storage: Storage) -> torch.Tensor | None:
        if self._done_key_seen != self._cache_key and self._vouched_done(storage):
            # the storage's own episodes, and it vouches that its done flags lie only on their last rows:
            # done = truncated, without reading (O(rows)) the flags
            self._done, self._done_np, self._done_at_ends = None, None, True
            self._done_key_seen = self._cache_key
        elif self._done_key_seen != self._cache_key:
            done, self._done_np = self._read_flags(storage, self.done_key)  # None: done = truncated then
            self._done = done
            self._done_at_ends = _only_at_ends(done, self._episodes)
            self._done_key_seen = self._cache_key
        return self._done

    def _vouched_done(self, storage: Storage) -> bool:
        """Whether ``storage`` vouches for where its ``("next", "done")`` flags lie, on the episodes sampled here."""
        return (
            self.done_key is not None
            and as_key(self.done_key) == ("next", "done")
            and self._perm is None
            and self._episodes is not None
            and self._episodes is storage.episode_index()
            and storage.done_only_at_episode_ends()
        )

    def _flags_at(
        self, storage: Storage, key: NestedKey, index: torch.Tensor, index_np: np.ndarray | None
    ) -> torch.Tensor | None:
        """``[len(index), 1]`` bool: the stored flags of ``key`` at positions ``index`` (``None`` without any);
        each key is read once per episode structure."""
        if self._flags_seen != self._cache_key:
            self._flag_cache, self._flags_seen = {}, self._cache_key
        cached = self._flag_cache.get(key)
        if cached is None:
            cached = self._flag_cache[key] = self._read_flags(storage, key)
        flags, flags_np = cached
        if flags is None:
            return None
        if flags_np is not None and index_np is not None:
            return torch.from_numpy(flags_np.reshape(-1).take(index_np).astype(np.bool_, copy=False).reshape(-1, 1))
        return torch.index_select(flags, 0, index).reshape(-1, 1).to(torch.bool)

    def _terminated_at(self, storage: Storage, index: torch.Tensor, index_np: np.ndarray | None) -> torch.Tensor:
        """``[len(index), 1]`` bool: the stored terminated flags at positions ``index`` (False without any)."""
        flags = self._flags_at(storage, self.terminated_key, index, index_np)
        return flags if flags is not None else torch.zeros(index.numel(), 1, dtype=torch.bool)

    def _mark_slice_starts(
        self, storage: Storage, info: dict[Any, Any], index: torch.Tensor, index_np: np.ndarray | None, starts: Any
    ) -> None:
        """Where the storage holds ``"is_init"`` flags (TorchRL's ``InitTracker``), ``info["is_init"]`` is them
        at ``index`` with every slice's first row (positions ``starts`` of the sample) set too: a recurrent
        module then treats each slice as its own sequence. Without stored flags nothing is added."""
        flags = self._flags_at(storage, "is_init", index, index_np)
        if flags is not None:
            flags[starts] = True
            info["is_init"] = flags

    def _slice_end_mask(self, num_slices: int, slice_len: int) -> torch.Tensor:
        """``[num_slices * slice_len, 1]``, True on the last row of each full slice (cached: never mutate)."""
        mask = self._masks.get((num_slices, slice_len))
        if mask is None:
            mask = torch.zeros(num_slices, slice_len, dtype=torch.bool)
            mask[:, -1] = True
            mask = self._masks[(num_slices, slice_len)] = mask.reshape(-1, 1)
        return mask

    def _info(
        self,
        storage: Storage,
        index: torch.Tensor,
        num_slices: int,
        slice_len: int,
        lengths: torch.Tensor | None,
        padded: bool = False,
    ) -> dict[Any, Any]:
        """The truncated / done / terminated flags of a sample of ``num_slices`` slices: ``lengths`` None
        when every slice has ``slice_len`` rows; ``padded`` when each slice fills ``slice_len`` rows of
        which its first ``lengths`` are real (the flags end at the last real row)."""
        if self.truncated_key is None:
            return {}
        if lengths is None:
            truncated = self._slice_end_mask(num_slices, slice_len).clone()
        else:
            truncated = torch.zeros(index.numel(), 1, dtype=torch.bool)
            if padded:
                truncated[torch.arange(lengths.numel()) * slice_len + lengths - 1] = True
            else:
                truncated[torch.cumsum(lengths, 0) - 1] = True
        stored = self._stored_done(storage)
        if stored is not None and self._done_at_ends and not padded:
            done = truncated.clone()  # a slice lies in one episode: stored flags can only be on its last row
        elif stored is not None:
            # index_select, not stored[index]: advanced indexing is ~100x slower on a memmap leaf
            done = torch.index_select(stored, 0, index)
            if lengths is None and not padded and done.dtype == torch.bool and done.ndim == 2:
                done.view(num_slices, slice_len)[:, -1] = True  # = stored | truncated, in place
            else:
                done = done.reshape(-1, 1).to(torch.bool) | truncated
        else:
            done = truncated.clone()
        terminated = self._terminated_at(storage, index, None)
        return {self.truncated_key: truncated, self.done_key: done, self.terminated_key: terminated}

    # -- sampling ----------------------------------------------------------------------------------
    @staticmethod
    def _expand(rows: torch.Tensor, slice_len: int, lengths: torch.Tensor | None) -> torch.Tensor:
        if lengths is None:
            return (rows.unsqueeze(1) + cached_arange(slice_len)).view(-1)
        total = int(lengths.sum())
        first = torch.cumsum(lengths, 0) - lengths
        return torch.repeat_interleave(rows - first, lengths, output_size=total) + torch.arange(total)

    def _slices(
        self, storage: Storage, rows: torch.Tensor, slice_len: int, lengths: torch.Tensor | None
    ) -> tuple[torch.Tensor, dict[Any, Any]]:
        """The sample of the slices starting at positions ``rows``, of ``lengths`` rows each (``None``: all
        ``slice_len``). With ``pad_output`` and a short slice, every slice fills ``slice_len`` rows, the last
        real row repeated, and ``info[("collector", "mask")]`` (``[len(index)]`` bool) is True on real rows."""
        num_slices = rows.numel()
        if lengths is not None and self.pad_output:
            steps = cached_arange(slice_len).unsqueeze(0)
            last = (lengths - 1).unsqueeze(1)
            index = (rows.unsqueeze(1) + torch.minimum(steps, last)).reshape(-1)
            info = self._info(storage, index, num_slices, slice_len, lengths, padded=True)
            info[("collector", "mask")] = (steps <= last).reshape(-1)
            starts: Any = torch.arange(num_slices) * slice_len
        else:
            index = self._expand(rows, slice_len, lengths)
            info = self._info(storage, index, num_slices, slice_len, lengths)
            starts = slice(None, None, slice_len) if lengths is None else torch.cumsum(lengths, 0) - lengths
        self._mark_slice_starts(storage, info, index, None, starts)
        return index, info

    def _starts(self, layout: SliceLayout, num_slices: int) -> torch.Tensor:
        u = torch.randint(layout.total, (num_slices,), generator=self.generator)
        return layout.rows_of(u)

    def _sample_full(
        self, storage: Storage, layout: SliceLayout, num_slices: int, slice_len: int
    ) -> tuple[torch.Tensor, dict[str, Any], np.ndarray]:
        """The hot path when every slice is full: one torch draw, then a few numpy ops on the batch.
        Also returns the index as numpy rows: valid rows of ``storage`` by construction (``sample_rows``)."""
        u = torch.randint(layout.total, (num_slices,), generator=self.generator).numpy()
        rows = layout.rows_of_np(u)
        # into a fresh array: numpy's broadcast add allocating its own output costs about twice as much
        index_np = np.add(rows[:, None], cached_arange_np(slice_len), out=np.empty((num_slices, slice_len), np.int64))
        index_np = index_np.reshape(-1)
        index = torch.from_numpy(index_np)
        if self.truncated_key is None:
            info: dict[Any, Any] = {}
            self._mark_slice_starts(storage, info, index, index_np, slice(None, None, slice_len))
            return index, info, index_np
        stored = self._stored_done(storage)
        stored_np = self._done_np
        # truncated and done from one copy of the cached end flags (numpy: a torch clone costs twice as much)
        flags = self._slice_end_flags(num_slices, slice_len).copy()
        truncated = torch.from_numpy(flags[0])
        if stored is None or self._done_at_ends:
            done = torch.from_numpy(flags[1])  # a slice lies in one episode: stored flags only on its last row
        elif stored_np is not None:
            d = stored_np.reshape(-1).take(index_np)
            d = d.astype(np.bool_, copy=False).reshape(-1, 1)
            d.reshape(num_slices, slice_len)[:, -1] = True  # = stored | truncated, in place
            done = torch.from_numpy(d)
        else:
            done = torch.index_select(stored, 0, index).reshape(-1, 1).to(torch.bool) | truncated
        terminated = self._terminated_at(storage, index, index_np)
        info = {self.truncated_key: truncated, self.done_key: done, self.terminated_key: terminated}
        self._mark_slice_starts(storage, info, index, index_np, slice(None, None, slice_len))
        return index, info, index_np

    def _slice_end_flags(self, num_slices: int, slice_len: int) -> np.ndarray:
        """``[2, num_slices * slice_len, 1]`` bool, True on the last row of each slice (cached: copy it)."""
        flags = self._end_flags.get((num_slices, slice_len))
        if flags is None:
            flags = np.zeros((2, num_slices, slice_len), dtype=np.bool_)
            flags[:, :, -1] = True
            flags = self._end_flags[(num_slices, slice_len)] = flags.reshape(2, -1, 1)
        return flags

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """``(index, info)``: items of ``num_slices`` slices (on a multi-dimensional storage, each slice
        lies in one environment's column; positions are mapped back to items here)."""
        index, info = self._sample_positions(storage, batch_size)
        perm = self._perm
        if perm is not None:
            index = perm[index]
        return index, info

    def sample_rows(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any], np.ndarray | None]:
        cls = type(self)
        if (
            cls.sample is not SliceSampler.sample
            or cls._sample_positions is not SliceSampler._sample_positions
            or cls._sample_full is not SliceSampler._sample_full
        ):  # a subclass draws its own way: no promise
            return (*self.sample(storage, batch_size), None)
        index, info, rows = self._positions(storage, batch_size)
        perm = self._perm
        if perm is not None:
            return perm[index], info, None
        return index, info, rows

    def sample_many_rows(
        self, storage: Storage, k: int, batch_size: int
    ) -> tuple[torch.Tensor, dict[str, Any], np.ndarray | None]:
        """With ``slice_len`` given and every slice full (``_sample_full``), one draw of ``k`` times the
        slices: ``randint`` fills its output in generator order and the rest is worked out per slice, so
        these are the values (and the generator state after them) of ``k`` draws; else ``k`` draws."""
        cls = type(self)
        plain = (
            cls.sample is SliceSampler.sample
            and cls._sample_positions is SliceSampler._sample_positions
            and cls._sample_full is SliceSampler._sample_full
            and cls._positions is SliceSampler._positions
        )
        if not plain or self.num_slices is not None or len(storage) == 0:
            return super().sample_many_rows(storage, k, batch_size)
        num_slices, slice_len = self._shape(batch_size)
        layout = self._layout(storage, slice_len)
        if not layout.uniform_len or self._perm is not None:
            return super().sample_many_rows(storage, k, batch_size)
        return self._sample_full(storage, layout, k * num_slices, slice_len)

    def _sample_positions(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        index, info, _ = self._positions(storage, batch_size)
        return index, info

    def _positions(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any], np.ndarray | None]:
        """``_sample_positions`` with the numpy rows of the full-slice path (``None`` elsewhere)."""
        num_slices, slice_len = self._shape(batch_size)
        if len(storage) == 0:
            raise RuntimeError("Cannot sample from an empty storage: add or extend data first")
        layout = self._layout(storage, slice_len)
        if layout.uniform_len:
            return self._sample_full(storage, layout, num_slices, slice_len)
        if layout.span != (0, 0):
            u = torch.randint(layout.total, (num_slices,), generator=self.generator)
            rows, lengths = layout.spans_of(u)
            index, info = self._slices(storage, rows, slice_len, lengths)
            return index, info, None
        rows = self._starts(layout, num_slices)
        index, info = self._slices(storage, rows, slice_len, layout.slice_lengths(rows))
        return index, info, None

    def state_dict(self) -> dict[str, Any]:
        return {"write_end": self._write_end}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._write_end = state_dict.get("write_end")
        self._cache_key = None

    def __repr__(self) -> str:
        size = f"num_slices={self.num_slices}" if self.num_slices is not None else f"slice_len={self.slice_len}"
        return f"{type(self).__name__}({size}, strict_length={self.strict_length})"


def _check_span(span: Any) -> tuple[bool | int, bool | int]:
    """TorchRL's ``span`` as ``(left, right)``: each False (slices stay inside the episode), True (a slice may
    hang over that end of its episode as long as it keeps one row) or an int ``i >= 0`` (it keeps at least
    ``slice_len - i`` rows; checked against the slice length at the first sample)."""
    sides = span if isinstance(span, tuple) else (span, span)
    if len(sides) != 2 or any(
        not isinstance(side, (bool, int)) or (not isinstance(side, bool) and side < 0) for side in sides
    ):
        raise InvalidArgument(f"span must be a bool, an int >= 0 or a (left, right) pair of them, got {span!r}")
    return sides[0], sides[1]


def _only_at_ends(done: torch.Tensor | None, episodes: EpisodeIndex | None) -> bool:
    """True when every set flag of ``done`` (one per position) is on an episode's last row.

    Then no slice (it lies inside one episode) holds a set flag except on its last row, which its
    ``truncated`` mark sets anyway: the ``done`` of a sample equals its ``truncated`` mask without
    reading the stored flags. Checked once per episode structure (``O(rows)``)."""
    if done is None or episodes is None or done.ndim == 0:
        return False
    flags = done.reshape(done.shape[0], -1).to(torch.bool).any(1)
    at_end = torch.zeros(flags.shape[0], dtype=torch.bool)
    last = episodes.end - 1
    last = last[(last >= 0) & (last < flags.shape[0]) & (episodes.length > 0)]
    at_end[last] = True
    return not bool((flags & ~at_end).any())


def _weakrefable(obj: Any) -> bool:
    try:
        weakref.ref(obj)
        return True
    except TypeError:
        return False


class SliceSamplerWithoutReplacement(SliceSampler, SamplerWithoutReplacement):
    """Epochs of non-overlapping slices: every row is returned at most once per epoch.

    It is both a :class:`SliceSampler` and a :class:`SamplerWithoutReplacement` (as in TorchRL, so
    ``isinstance`` checks ported from it hold); every method it uses is the slice sampler's.
    ``_sample_list`` (TorchRL's name, read-only) is the start rows of the slices still to serve this
    epoch, in serving order.

    The exact rule. When an epoch starts, each episode of ``L`` rows is cut, for slices of ``s``
    rows, into ``k = L // s`` consecutive non-overlapping slices starting at rows
    ``first + o + j * s`` (``j = 0 .. k-1``), where the offset ``o`` is drawn uniformly from
    ``{0, ..., L - k * s}`` with the generator, once per episode and epoch. The ``L - k * s``
    rows left out (some at the head, the rest at the tail) change from epoch to epoch. An episode
    shorter than ``s`` gives no slice (``strict_length=True``) or one slice holding the whole
    episode (``strict_length=False``). All slices of the epoch are shuffled (``shuffle=True``)
    and served ``num_slices`` per batch; the last batch holds the rest (``drop_last=False``) or
    is skipped when it would be short (``drop_last=True``). ``ran_out`` is True right after the
    last batch; the next call starts a new epoch. A write to the storage (its ``write_version``
    or length changes) or a new slice length also starts a new epoch at the next call.
    Same generator seed, same epochs.
    """

    requires_shared_state = True  # the epoch's remaining slices

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
        *,
        replacement: bool = False,
        end_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        if replacement:
            raise InvalidArgument(
                "SliceSamplerWithoutReplacement samples each slice once per epoch: for replacement=True use SliceSampler"
            )
        super().__init__(
            num_slices=num_slices,
            slice_len=slice_len,
            traj_key=traj_key,
            end_key=end_key,
            strict_length=strict_length,
            cache_values=True,
            truncated_key=truncated_key,
            end_keys=end_keys,
        )
        self.drop_last, self.shuffle = bool(drop_last), bool(shuffle)
        self._rows: torch.Tensor | None = None  # starts of the slices still to serve this epoch
        self._lens: torch.Tensor | None = None
        self._epoch_sig: tuple | None = None
        self._ran_out = False

    # no item at a given row: the slice sampler's refusal, not the row sampler's identity
    sample_at = Sampler.sample_at

    @property
    def _sample_list(self) -> torch.Tensor | None:  # type: ignore[override]  # read-only here: the epoch's state is _rows
        return self._rows

    def _new_epoch(self, storage: Storage, slice_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Cut the episodes into this epoch's slices: their start rows and lengths, in serving order."""
        episodes = self.episodes(storage)
        start, length = episodes.start, episodes.length
        k = length // slice_len
        if not self.strict_length:
            k = torch.where(length < slice_len, torch.ones_like(k), k)
        if int(k.sum()) == 0:
            self._no_valid_start(episodes, slice_len)
        spare = (length - k * slice_len).clamp_min(0)
        offset = (torch.rand(start.shape, dtype=torch.float64, generator=self.generator) * (spare + 1)).long()
        offset = torch.minimum(offset, spare)  # rand < 1, but keep float rounding out of the rows
        total = int(k.sum())
        within = torch.arange(total) - torch.repeat_interleave(torch.cumsum(k, 0) - k, k, output_size=total)
        rows = torch.repeat_interleave(start + offset, k, output_size=total) + within * slice_len
        lens = torch.repeat_interleave(length.clamp_max(slice_len), k, output_size=total)
        if self.shuffle:
            perm = torch.randperm(total, generator=self.generator)
            rows, lens = rows[perm], lens[perm]
        self._rows, self._lens = rows, lens
        return rows, lens

    def _signature(self, storage: Storage, slice_len: int) -> tuple:
        return (storage.write_version, len(storage), self._write_end, slice_len)

    def _sample_positions(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        num_slices, slice_len = self._shape(batch_size)
        if len(storage) == 0:
            raise RuntimeError("Cannot sample from an empty storage: add or extend data first")
        sig = self._signature(storage, slice_len)
        todo, todo_lens = self._rows, self._lens
        if todo is None or todo_lens is None or todo.numel() == 0 or sig != self._epoch_sig:
            todo, todo_lens = self._new_epoch(storage, slice_len)
            self._epoch_sig = sig
        if self.drop_last and todo.numel() < num_slices:
            raise ValueError(
                f"drop_last=True and an epoch holds only {todo.numel()} slices of {slice_len} rows, "
                f"fewer than num_slices={num_slices}: lower the batch size or use drop_last=False"
            )
        rows, self._rows = todo[:num_slices], todo[num_slices:]
        lens, self._lens = todo_lens[:num_slices], todo_lens[num_slices:]
        left = self._rows.numel()
        self._ran_out = left == 0 or (self.drop_last and left < num_slices)
        if self._ran_out:
            self._rows = self._lens = None
        full = bool((lens == slice_len).all()) and rows.numel() == num_slices
        return self._slices(storage, rows, slice_len, None if full else lens)

    def empty(self) -> None:
        super().empty()
        self._rows = self._lens = self._epoch_sig = None
        self._ran_out = False

    def state_dict(self) -> dict[str, Any]:
        empty = torch.zeros(0, dtype=torch.int64)
        return {
            "write_end": self._write_end,
            "ran_out": self._ran_out,
            "has_epoch": self._rows is not None,
            "rows": self._rows.clone() if self._rows is not None else empty,
            "lens": self._lens.clone() if self._lens is not None else empty,
            "epoch_sig": list(self._epoch_sig) if self._epoch_sig is not None else None,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._ran_out = bool(state_dict["ran_out"])
        has = state_dict["has_epoch"]
        self._rows = state_dict["rows"].clone() if has else None
        self._lens = state_dict["lens"].clone() if has else None
        sig = state_dict["epoch_sig"]
        self._epoch_sig = tuple(sig) if sig is not None else None
