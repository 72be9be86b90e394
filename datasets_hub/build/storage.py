"""Read-only storage over one lean-TED build (docs/design/ted.md, docs/design/on-disk.md).

This module holds one concept: the read-only storage of one build (:class:`DatasetStorage`) and its gathers.

Observation-like keys are stored once per episode with T+1 rows; ``observation[t]`` and
``next/observation[t]`` are gathered from the same array at rows ``i + e`` and ``i + e + 1``
(transition ``i`` of episode ``e``). Samples are exactly what a naive TED copy would return.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from tensordict import TensorDict

from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.nested_keys import Key, as_key, nest, parse_key, put
from datasets_hub.buffers.row_blocks import fill_rows, take_rows
from datasets_hub.buffers.storages import ReadOnlyStorage
from datasets_hub.build.frame_device import decode_on_device
from datasets_hub.build.frames import FrameColumn
from datasets_hub.build.memory import LARGE_ROW, available_memory, huge_pages, margin_bytes, will_need
from datasets_hub.build.packed_steps import FieldCut, PackedSteps
from datasets_hub.build.reader import open_build
from datasets_hub.cache.layout import mark_used
from datasets_hub.errors import CacheError, InvalidParameter

_TERMINATED, _TRUNCATED = ("next", "terminated"), ("next", "truncated")
_AT_T_AND_NEXT = np.array([[0], [1]], dtype=np.int64)
#: leaves of a sample made from others: the episode id, the step in it, the root flags, next/done
_DERIVED = {("episode",), ("step",), ("done",), ("terminated",), ("truncated",), ("next", "done")}


def reopen_build(
    path: str, fingerprint: str | None, in_memory: bool = False, decode_device: str | None = None
) -> DatasetStorage:
    """Open the build at ``path`` again (how a pickled :class:`DatasetStorage` comes back), refusing a
    build whose fingerprint is no longer ``fingerprint``: it was rebuilt or replaced in between."""
    storage = DatasetStorage(path, in_memory=in_memory, decode_device=decode_device)
    found = storage.manifest.get("fingerprint")
    if fingerprint is not None and found != fingerprint:
        raise CacheError(
            f"the build at {path} has fingerprint {found!r}, but the pickled buffer was made from "
            f"{fingerprint!r}: it was rebuilt or replaced in between. Load the dataset again and re-send it"
        )
    return storage


class DatasetStorage(ReadOnlyStorage):
    """A read-only :class:`Storage` over the build at ``path`` (the directory holding manifest.json).

    ``get`` returns a TED TensorDict: root ``observation``-like keys, ``action``, ``episode``,
    ``step``, ``done``/``terminated``/``truncated`` (False), and ``next`` with the next
    observation-like keys, ``reward``, ``terminated``, ``truncated`` and ``done``. Writes raise.
    Opening it records a use of the build (``datasets-hub cache ls``); ``record_use=False`` is a look that
    is not one (the hub reading one row for the dataset card).
    """

    read_only_what = "dataset build"
    gathers_batches = True

    def __init__(
        self,
        path: str | Path,
        *,
        in_memory: bool = False,
        decode_device: str | torch.device | None = None,
        record_use: bool = True,
    ) -> None:
        self.path = Path(path)
        self.in_memory = bool(in_memory)
        # compressed frames decoded on this device (nvJPEG on CUDA, see frame_device.decode_on_device); None: host threads
        self.decode_device = None if decode_device is None else torch.device(decode_device)
        # the one reader of the format (checks the files against the manifest; copies them into RAM)
        build = open_build(self.path, in_memory=self.in_memory)
        self.manifest = build.manifest
        # a compressed camera key is a FrameColumn: its take() decodes the rows asked for (frames.py)
        self._obs: list[tuple[Key, np.ndarray | FrameColumn, bool]] = [
            (key, column if isinstance(column, FrameColumn) else column.numpy(), key in build.shared_next)
            for key, column in build.obs.items()
        ]
        self._frames = build.obs
        if self.decode_device is not None and not any(isinstance(c, FrameColumn) for _, c, _ in self._obs):
            raise InvalidParameter(
                f"decode_device={str(self.decode_device)!r}: the build {self.manifest.get('id')!r} holds no compressed "
                "frames to decode (its frames are raw); drop decode_device=, copy the build with device=, or build it "
                "with frames='jpeg'"
            )
        self._steps: list[tuple[Key, torch.Tensor]] = list(build.steps.items())
        self._start = build.episodes["start"]
        self._start_np = np.ascontiguousarray(self._start.numpy())
        self._steps_np = [(key, column.numpy()) for key, column in self._steps]
        self._length = build.episodes["length"]
        self._episode_id = build.episodes["id"]
        self._episode_id_np = self._episode_id.numpy()
        self.episode_returns = build.episodes["return"]
        self._index = EpisodeIndex(self._start.clone(), self._length.clone())
        self._len = build.transitions
        self._terminated = build.steps[("next", "terminated")]
        self._truncated = build.steps[("next", "truncated")]
        self._ordinal: tuple[np.ndarray, np.ndarray] | bool | None = False  # id -> ordinal, built on first use
        self._history = build.history
        self._history_index: tuple[torch.Tensor, torch.Tensor] | None = None
        # the small per-step leaves packed into one record per row (one gather per batch): written by the
        # build (format 2), or packed now for an older build copied into RAM
        self._packed = build.packed
        if self._packed is None and self.in_memory:
            self._packed = PackedSteps.from_columns(self._steps_np, self._start_np, self._len)
        packed = set(self._packed.keys) if self._packed is not None else set()
        self._unpacked_np = [(key, column) for key, column in self._steps_np if key not in packed]
        # episode ids are their ordinals (every built-in loader): a sample's ids need no lookup
        ids = self._episode_id_np
        self._ids_are_ordinals = ids.dtype == np.int64 and bool(np.array_equal(ids, np.arange(ids.size)))
        self._plans: dict[tuple, _Plan] = {}
        self._keys: frozenset[Key] | None = None  # the keys of a batch (read_key)
        self._into_plans: dict[tuple, tuple] = {}  # gather_into's reads by (out keys, extras keys)
        self._plain_get = type(self).get is DatasetStorage.get
        # per sampling thread, the frames its last host-side decode of each compressed key returned (see _reusable)
        self._decoded_last = threading.local()
        if not self.in_memory:
            self._advise_huge_pages()
        super().__init__(self._len)
        if record_use:
            mark_used(self.path)  # `cache ls` shows the last use (one stat; never fails a read-only cache)

    def _advise_huge_pages(self) -> None:
        """Transparent huge pages for the files every batch reads at random rows, when they fit in the
        memory available (they end up cached whole): fewer TLB misses per row. Not for larger builds,
        where a fault would read 2 MiB of the file for one row."""
        columns = [column for _, column, _ in self._obs if isinstance(column, np.ndarray)]
        columns += [column for _, column in self._unpacked_np]
        if self._packed is not None:
            columns.append(self._packed.records)
        available, total = available_memory()
        if available is None or sum(c.nbytes for c in columns) + margin_bytes(total) > available:
            return
        for column in columns:
            huge_pages(column)

    def __reduce__(self) -> tuple[Any, tuple[str, str | None, bool, str | None]]:
        # Pickled by reference (path + fingerprint), never by value: a buffer over a 10 GB build
        # reaches DataLoader workers, Ray actors and preprocess workers as a few hundred bytes,
        # and each process maps the files itself (the build must be on a filesystem it sees).
        # An in-memory storage is copied into RAM again by each receiving process (its own check).
        device = None if self.decode_device is None else str(self.decode_device)
        return reopen_build, (str(self.path), self.manifest.get("fingerprint"), self.in_memory, device)

    def __len__(self) -> int:
        return self._len

    def _decoded(self, column: FrameColumn, rows: np.ndarray) -> torch.Tensor:
        """The frames of a compressed column at ``rows`` (any shape): decoded on ``decode_device`` if set.

        A host decode is remembered (this thread's last one per key: its rows and a weak reference to the
        frames) so that the gather of the same batch can copy the frames it shares with it (see
        :meth:`_reusable`) instead of decoding them again."""
        if self.decode_device is None:
            frames = torch.from_numpy(column.take(rows))
            last = self._decoded_last.__dict__
            last[column.key] = (np.asarray(rows, dtype=np.int64).reshape(-1), weakref.ref(frames))
            return frames
        return decode_on_device(column, rows, self.decode_device)

    def _reusable(self, column: FrameColumn, extras: dict[Any, Any] | None) -> tuple[np.ndarray, np.ndarray] | None:
        """``(rows, frames)`` this thread decoded last for ``column`` when those frames are a value of
        ``extras``: a window a sampler read just now for the batch being gathered (a ``WindowSampler``'s
        ``delta_timestamps`` window holds the anchor's frame and the next one). The frames in the batch are
        then the ones decoded from those rows, so a frame of the plain keys at the same row is copied
        from them: each frame of a batch is decoded once. Anything else (no such window, a window the
        sampler replaced by another tensor): None, and every frame is decoded."""
        if not extras:
            return None
        entry: tuple[np.ndarray, weakref.ref[torch.Tensor]] | None = self._decoded_last.__dict__.get(column.key)
        if entry is None:
            return None
        frames = entry[1]()
        if frames is None:
            return None
        ptr, size = frames.data_ptr(), frames.numel()
        for value in extras.values():
            if type(value) is torch.Tensor and value.data_ptr() == ptr and value.numel() == size:
                return entry[0], frames.numpy()
        return None

    def episode_index(self) -> EpisodeIndex:
        return self._index

    def done_only_at_episode_ends(self) -> bool:
        """True: the build writer refuses a chunk with a done flag on any row but its episode's last
        (:class:`~datasets_hub.build.writer.LeanTEDWriter`), so no sampler has to scan 10^8 flags to learn it."""
        return True

    def frame_keys(self) -> frozenset[Key]:
        """The observation-like keys stored once per episode (T+1 rows): what :meth:`episode_frames` serves."""
        return frozenset(key for key, _column, shared in self._obs if shared)

    def episode_frames(
        self, keys: list[Key], episode: torch.Tensor, times: torch.Tensor
    ) -> tuple[dict[Key, torch.Tensor], dict[Key, torch.Tensor]]:
        """Values of ``keys`` at times ``times`` (``[B, W]`` int64, ``t <= length``; ``t = length`` is the
        episode's final next value) of the episodes whose ids are ``episode`` (``[B]``), as
        ``[B, W, *shape]`` tensors, and per key a ``[B, W]`` bool mask of the values that are real frames.

        A negative time reads the build's history frame of that episode when it keeps one (see
        :meth:`history_index`); else the value is the episode's first frame and its mask is False.
        One read per key from the per-episode frame file (plus one from the history file)."""
        unknown = [k for k in keys if k not in self.frame_keys()]
        if unknown:
            raise KeyError(
                f"{'/'.join(unknown[0])!r} is not stored once per episode in this build "
                f"(such keys: {sorted('/'.join(k) for k in self.frame_keys())})"
            )
        ordinal = self._episode_ordinal(episode.reshape(-1).to(torch.int64))
        before = times < 0
        rows = (self._start[ordinal] + ordinal)[:, None] + times.clamp_min(0)
        frames, present = {}, {}
        with_history = set(self.history_keys()) if self._history else set()
        if with_history and before.any():
            first, count = self.history_index()
            n_hist = count[ordinal][:, None]
            has = before & (times >= -n_hist)
            hist_rows = (first[ordinal][:, None] + n_hist + times)[has]
        for key in keys:
            column = self._frames[key]
            if isinstance(column, FrameColumn):  # compressed: decode the window's frames only
                window = self._decoded(column, rows.numpy())
            else:
                window = torch.index_select(column, 0, rows.reshape(-1)).reshape(*times.shape, *column.shape[1:])
            mask = ~before
            if key in with_history and before.any():
                if hist_rows.numel():
                    window[has] = torch.index_select(self._history["/".join(key)], 0, hist_rows)
                mask = mask | has
            frames[key], present[key] = window, mask
        return frames, present

    def _episode_ordinal(self, episode: torch.Tensor) -> torch.Tensor:
        """Episode ids -> positions in the episode index (ids are the positions for every built-in loader)."""
        ordinal = self._ordinal
        if ordinal is False:
            ids = np.asarray(self._episode_id_np)
            if np.array_equal(ids, np.arange(ids.size)):
                ordinal = None
            else:
                order = np.argsort(ids, kind="stable")
                ordinal = (ids[order], order)
            self._ordinal = ordinal
        if not isinstance(ordinal, tuple):  # None: ids are the positions
            return episode
        sorted_ids, order = ordinal
        if not order.size:
            raise IndexError("this build holds no episode")
        pos = np.minimum(np.searchsorted(sorted_ids, episode.numpy()), order.size - 1)
        if not np.array_equal(sorted_ids[pos], episode.numpy()):
            raise KeyError(
                f"episode ids {sorted(set(episode.tolist()) - set(sorted_ids.tolist()))[:5]} are not in this build"
            )
        return torch.from_numpy(order[pos])

    def history_keys(self) -> list[Key]:
        """Observation-like keys for which the build keeps history frames (frames before an
        episode's first transition; see :mod:`datasets_hub.build.format`); ``[]`` for most builds."""
        return [parse_key(k) for k in self.manifest["layout"].get("history", [])]

    def history_index(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(first, count)`` per episode (in build order): episode ``e`` has ``count[e]`` history frames
        at rows ``first[e] .. first[e] + count[e] - 1`` of :meth:`history_column`, oldest first (times
        ``-count[e] .. -1``). Counts are 0 where an episode has none (or the build keeps none)."""
        if self._history_index is None:
            num = self._index.num_episodes
            first, count = torch.zeros(num, dtype=torch.int64), torch.zeros(num, dtype=torch.int64)
            ids = self._history.get("episode")
            if ids is not None and ids.numel():
                order = np.argsort(self._episode_id_np, kind="stable")
                pos = np.searchsorted(self._episode_id_np, ids.numpy(), sorter=order)
                pos = np.minimum(pos, len(order) - 1)
                ordinal = order[pos]
                if not np.array_equal(self._episode_id_np[ordinal], ids.numpy()):
                    raise CacheError(
                        f"{self.path}: history frames name episodes the build does not hold; the build "
                        "is damaged: run `datasets-hub rm` and load again"
                    )
                ordinal_t = torch.from_numpy(ordinal)
                count.index_add_(0, ordinal_t, torch.ones_like(ordinal_t))
                rows = torch.arange(ordinal_t.numel())
                first.fill_(ordinal_t.numel()).scatter_reduce_(0, ordinal_t, rows, reduce="amin")
                first[count == 0] = 0
            self._history_index = (first, count)
        return self._history_index

    def history_column(self, key: str | Key) -> torch.Tensor:
        """The history frames of ``key`` (rows addressed by :meth:`history_index`)."""
        key = (key,) if isinstance(key, str) else tuple(key)
        column = self._history.get("/".join(key))
        if column is None:
            raise KeyError(
                f"this build keeps no history frames of {'/'.join(key)!r} (keys with history: "
                f"{['/'.join(k) for k in self.history_keys()]})"
            )
        return column

    def _rows(self, index: Any) -> tuple[np.ndarray, tuple[int, ...]]:
        """``index`` as a flat int64 array of valid rows, plus the shape to give the result."""
        if type(index) is torch.Tensor and index.dtype == torch.int64:
            rows = index.numpy()
            # one reduction checks both ends: a negative row is a huge unsigned one
            if rows.ndim == 1 and (not rows.size or rows.view(np.uint64).max() < self._len):
                return rows, rows.shape
        if isinstance(index, slice):
            rows = np.arange(self._len)[index]
            return rows, rows.shape
        if isinstance(index, torch.Tensor):
            rows = index.numpy() if index.dtype != torch.bool else np.flatnonzero(index.numpy())
        else:
            rows = np.asarray(index)
            if rows.dtype == np.bool_:
                rows = np.flatnonzero(rows)
        shape = rows.shape
        rows = rows.reshape(-1).astype(np.int64, copy=False)
        if rows.size:
            low, high = rows.min(), rows.max()
            if high >= self._len or low < -self._len:
                raise IndexError(f"index out of range for a dataset of {self._len} transitions")
            if low < 0:
                rows = np.where(rows < 0, rows + self._len, rows)
        return rows, shape

    def get(self, index: Any) -> TensorDict:
        if isinstance(index, (int, np.integer)):
            return self.get(torch.tensor([int(index)]))[0]
        rows, shape = self._rows(index)
        if len(shape) == 2:  # [k, m] items (an ensemble's batch): shaped leaf by leaf, no TensorDict reshape
            return self._gather_rows(rows, None, shape)
        out = self._gather_rows(rows, None)
        return out.reshape(shape) if len(shape) != 1 else out

    def gather(self, index: torch.Tensor, extras: dict[Any, torch.Tensor] | None = None) -> TensorDict:
        """``get`` of a 1-D index with ``extras`` (``index``, sampler info) built into the same TensorDict;
        a 2-D ``[k, m]`` index gives ``[k, m]`` items, its extras shaped ``[k, m, ...]`` (``gathers_batches``)."""
        if (
            type(index) is not torch.Tensor
            or index.ndim not in (1, 2)
            or index.dtype != torch.int64
            or not self._plain_get  # a subclass that reads through get() keeps doing so
        ):
            return super().gather(index, extras)
        if index.ndim == 2:
            rows, _ = self._rows(index.reshape(-1))
            return self._gather_rows(rows, extras, (index.shape[0], index.shape[1]))
        rows, _ = self._rows(index)
        return self._gather_rows(rows, extras)

    def gather_valid(self, index: torch.Tensor, rows: np.ndarray, extras: dict[Any, torch.Tensor]) -> TensorDict:
        gather = self.gather
        if not self._plain_get or getattr(gather, "__func__", None) is not DatasetStorage.gather:
            return gather(index, extras)  # another gather (a remote build's chunk fetches, say) sees every read
        if rows.ndim == 2:  # an ensemble's [k, m] batch (gathers_batches)
            return self._gather_rows(rows, extras, rows.shape)
        return self._gather_rows(rows, extras)  # valid rows, per-item extras: nothing left to check

    def gather_into(
        self, rows: np.ndarray, out: dict[Key, np.ndarray], extras: dict[Any, torch.Tensor] | None = None
    ) -> None:
        """Write the sample at ``rows`` straight into ``out`` (what a mixture's one batch is made of).

        ``rows``: valid 1-D int64 rows (a sampler's promised rows, ``Sampler.sample_rows``). ``out``: for
        each key of the sample to read (as :meth:`gather` nests it), a CPU array of ``len(rows)`` rows
        whose dtype is the leaf's and whose per-item shape is the leaf's, or wider in its last dimension:
        the values then fill ``[..., :width]`` and the rest is left as it is. Keys of the sample that
        ``out`` does not name are not read. ``extras`` are per-item sampler entries that replace the
        stored leaves of the same keys, as in :meth:`gather`. A key of ``out`` the sample does not hold is
        a ``KeyError``. A subclass whose reads go through its own ``gather`` (a remote build fetching
        chunks) gathers there and the values are copied in."""
        extras = extras or {}
        if not self._plain_get or type(self).gather is not DatasetStorage.gather:
            sample = self.gather(torch.from_numpy(rows), {**extras})
            for key, dst in out.items():
                fill_rows(dst, sample.get(key).numpy())
            return
        plan = self._into_plans.get((tuple(out), tuple(extras)))
        if plan is None:
            plan = self._into_plan(out, extras)
        cuts, obs, unpacked, derived, flag_sources, ordinal_needed = plan
        episode: Any = None
        block: Any = None
        if self._packed is not None and (cuts or ordinal_needed or flag_sources):
            block = self._packed.take(rows)
            episode = self._packed.ordinal(block) if ordinal_needed else None
            for c, key in cuts:
                if c.aligned:
                    value = block.view(c.dtype)[:, c.lo : c.hi]
                    fill_rows(out[key], value.reshape(len(rows), *c.shape) if c.reshape else value)
                else:
                    fill_rows(out[key], PackedSteps.cut(block, c))
        elif ordinal_needed:
            episode = np.searchsorted(self._start_np, rows, side="right") - 1
        for column, key, after in obs:  # observation-like keys: frame row r + e (+ 1 for next)
            frames = rows + episode + after
            if isinstance(column, FrameColumn):
                dst = out[key]
                if self.decode_device is None and dst.shape[1:] == column.frame_shape and dst.flags.c_contiguous:
                    column.take(frames, out=dst)  # decoded straight into the batch (dtype checked by take)
                else:
                    fill_rows(dst, self._decoded(column, frames).numpy())
            else:
                take_rows(column, frames, out[key])
        for column, key in unpacked:
            take_rows(column, rows, out[key])
        flags: dict[Key, np.ndarray] = {}
        for key in derived:
            if key == ("episode",):
                fill_rows(out[key], episode if self._ids_are_ordinals else self._episode_id_np.take(episode))
            elif key == ("step",):
                fill_rows(out[key], rows - self._start_np.take(episode))
            elif key == ("next", "done"):  # stored terminated | truncated, or the sampler's replacements
                for flag, source in flag_sources:
                    if flag in extras:
                        flags[flag] = extras[flag].numpy()
                    elif isinstance(source, FieldCut):
                        flags[flag] = PackedSteps.cut(block, source)
                    else:
                        flags[flag] = source.take(rows, axis=0)
                fill_rows(out[key], np.logical_or(flags[_TERMINATED], flags[_TRUNCATED]))
            else:  # the root flags of a stored transition
                out[key][...] = False
        for name, value in extras.items():
            key = as_key(name)
            if key in out:
                fill_rows(out[key], value.numpy())

    def _into_plan(self, out: dict[Key, np.ndarray], extras: dict[Any, torch.Tensor]) -> tuple:
        """What :meth:`gather_into` reads for these ``out`` and ``extras`` keys (worked out once)."""
        replaced = {as_key(k) for k in extras}
        wanted = {k for k in out if k not in replaced}
        packed = {c.key: c for c in self._packed.cuts} if self._packed is not None else {}
        cuts = [(packed[k], k) for k in wanted if k in packed]
        obs = []
        for key, column, shared_next in self._obs:
            if key in wanted:
                obs.append((column, key, 0))
            if shared_next and ("next", *key) in wanted:
                obs.append((column, ("next", *key), 1))
        unpacked = [(column, key) for key, column in self._unpacked_np if key in wanted]
        derived = [k for k in wanted if k in _DERIVED]
        known = {k for _, k in cuts} | {k for _, k, _ in obs} | {k for _, k in unpacked} | set(derived)
        unknown = sorted(wanted - known)
        if unknown:
            raise KeyError(f"the samples of {self.manifest.get('id')!r} hold no {['/'.join(k) for k in unknown]}")
        flag_sources: list[tuple[Key, Any]] = []
        if ("next", "done") in wanted:
            columns = dict(self._unpacked_np)
            flag_sources = [(flag, packed.get(flag, columns.get(flag))) for flag in (_TERMINATED, _TRUNCATED)]
        ordinal_needed = bool(obs) or ("episode",) in wanted or ("step",) in wanted
        plan = (tuple(cuts), tuple(obs), tuple(unpacked), tuple(derived), tuple(flag_sources), ordinal_needed)
        if len(self._into_plans) >= 64:
            self._into_plans.clear()
        self._into_plans[(tuple(out), tuple(extras))] = plan
        return plan

    def _gather_rows(
        self, rows: np.ndarray, extras: dict[Any, torch.Tensor] | None, lead: tuple[int, ...] | None = None
    ) -> TensorDict:
        # numpy does the index arithmetic and the gathers: single-threaded and cheaper per call
        # than torch here (torch's parallel kernels cost milliseconds when the other cores are busy).
        # The plan (worked out once per set of extras keys) is the fixed sequence of reads and cuts.
        plan = self._plans.get(tuple(extras) if extras else ())
        if plan is None:
            plan = self._plan_for(extras)
        # a [k, m] batch (lead): the rows are shaped first, so that every take and cut comes out shaped
        shape = (rows.size,) if lead is None else lead
        if lead is not None:
            rows = rows.reshape(lead)
        from_numpy = torch.from_numpy
        root: dict[str, Any] = {}
        nxt: dict[str, Any] = {}
        trees = (root, nxt)
        flags: dict[Key, np.ndarray] = {}
        packed = self._packed
        if packed is not None:
            block = plan.records.take(rows, axis=0)  # one read for every small per-step leaf
            if plan.ordinal is None:
                episode = packed.ordinal(block.reshape(-1, block.shape[-1])).reshape(shape)
            else:  # inlined PackedSteps.ordinal
                episode = block.view(plan.ordinal[0])[..., plan.ordinal[1]].astype(np.int64)
            for c, where, tail, tree, name, keep in plan.cuts:
                if where is None:
                    value = packed.cut(block.reshape(-1, block.shape[-1]), c).reshape(*shape, *c.shape)
                else:  # inlined PackedSteps.cut: this runs for every leaf of every sample
                    value = block.view(c.dtype)[where]
                    value = (value if tail is None else value.reshape(*shape, *tail)).copy()
                if type(name) is str:
                    trees[tree][name] = from_numpy(value)
                else:
                    put(trees[tree], name, from_numpy(value))
                if keep:
                    flags[c.key] = value
        else:
            episode = np.searchsorted(self._start_np, rows, side="right") - 1
        if plan.obs:
            # [2, *shape]: frame rows at t, at t+1
            at = _AT_T_AND_NEXT if lead is None else _AT_T_AND_NEXT.reshape((2,) + (1,) * len(lead))
            both = rows + episode + at
            for column, at_t, at_next, advise in plan.obs:
                if type(column) is FrameColumn and self.decode_device is not None:
                    frames = self._decoded(column, both if at_t and at_next else both[0] if at_t else both[1])
                    if at_t and at_next:
                        _set(root, at_t, frames[0])
                        _set(nxt, at_next, frames[1])
                    else:
                        _set(root if at_t else nxt, at_t or at_next, frames)
                    continue
                if type(column) is FrameColumn:  # host decode: frames of this batch's windows are not decoded again
                    reuse = self._reusable(column, extras)
                    if at_t and at_next:
                        gathered = column.take(both, reuse=reuse)
                        _set(root, at_t, from_numpy(gathered[0]))
                        _set(nxt, at_next, from_numpy(gathered[1]))
                    else:
                        half = column.take(both[0] if at_t else both[1], reuse=reuse)
                        _set(root if at_t else nxt, at_t or at_next, from_numpy(half))
                    continue
                if at_t and at_next:
                    if advise:
                        will_need(column, both)
                    gathered = column.take(both, axis=0)  # one read serves t and t+1
                    if type(at_t) is str and type(at_next) is str:  # inlined _set
                        root[at_t] = from_numpy(gathered[0])
                        nxt[at_next] = from_numpy(gathered[1])
                    else:
                        _set(root, at_t, from_numpy(gathered[0]))
                        _set(nxt, at_next, from_numpy(gathered[1]))
                else:
                    half = both[0] if at_t else both[1]
                    if advise:
                        will_need(column, half)
                    _set(root if at_t else nxt, at_t or at_next, from_numpy(column.take(half, axis=0)))
        for key, column, tree, name, keep in plan.unpacked:
            value = column.take(rows, axis=0)
            _set(trees[tree], name, from_numpy(value))
            if keep:
                flags[key] = value
        if plan.done:  # stored terminated | truncated (never a sampler's replacement of either)
            nxt["done"] = from_numpy(np.logical_or(flags[_TERMINATED], flags[_TRUNCATED]))
        root["episode"] = from_numpy(episode if self._ids_are_ordinals else self._episode_id_np.take(episode))
        root["step"] = from_numpy(rows - self._start_np.take(episode))
        zeros = np.zeros((3, *shape, 1), dtype=np.bool_)  # the root flags: one allocation, three disjoint views
        root["done"] = from_numpy(zeros[0])
        root["terminated"] = from_numpy(zeros[1])
        root["truncated"] = from_numpy(zeros[2])
        root["next"] = nxt
        if extras:
            places = plan.extras
            if places is None:
                nest(extras.keys(), extras.values(), root)
            else:  # each in the root or in "next", where the plan says
                for (tree, name), extra in zip(places, extras.values(), strict=True):
                    trees[tree][name] = extra
        size = torch.Size(shape)
        if plan.flat:  # no dict below root but "next": both made without looking for more
            root["next"] = _NEW_TD(nxt, batch_size=size, nested=False)
            return _NEW_TD(root, batch_size=size, nested=False)
        return _NEW_TD(root, batch_size=size)

    def _plan_for(self, extras: dict[Any, torch.Tensor] | None) -> _Plan:
        """What a gather reads and where each value goes, for samples carrying ``extras``: a key the
        extras replace (a sampler's window of it, its ``next/truncated``) is not read, frames can be large."""
        replaced = {as_key(k) for k in extras} if extras else set()
        need_done = ("next", "done") not in replaced
        flag_keys = {_TERMINATED, _TRUNCATED} if need_done else set()
        cuts = []
        for c in self._packed.cuts if self._packed is not None else ():
            if c.key in replaced and c.key not in flag_keys:
                continue
            where = (Ellipsis, slice(c.lo, c.hi)) if c.aligned else None  # [B, ...] or [k, m, ...] blocks
            tail = c.shape if c.reshape else None
            cuts.append((c, where, tail, *_place(c.key), c.key in flag_keys))
        obs = []
        for key, column, shared_next in self._obs:
            name = key[0] if len(key) == 1 else key
            at_t = name if key not in replaced else None
            at_next = name if shared_next and ("next", *key) not in replaced else None
            if at_t or at_next:
                advise = isinstance(column, np.ndarray) and column.ndim > 0 and column.strides[0] >= LARGE_ROW
                obs.append((column, at_t, at_next, advise))
        unpacked = [
            (key, column, *_place(key), key in flag_keys)
            for key, column in self._unpacked_np
            if key not in replaced or key in flag_keys
        ]
        names = [name for *_, name, _keep in cuts] + [name for *_, name, _keep in unpacked]
        names += [name for _, at_t, at_next, _ in obs for name in (at_t, at_next) if name is not None]
        names += [k if isinstance(k, str) else k[1:] if len(k) == 2 and k[0] == "next" else k for k in replaced]
        flat = all(isinstance(name, str) or len(name) == 1 for name in names)
        places = [_place(as_key(k)) for k in extras] if extras else []
        extra_places = tuple(places) if all(type(name) is str for _, name in places) else None
        packed = self._packed
        records = packed.records if packed is not None else None
        ordinal = packed.ordinal_column if packed is not None else None
        plan = _Plan(tuple(cuts), tuple(obs), tuple(unpacked), need_done, flat, extra_places, records, ordinal)
        if len(self._plans) >= 64:  # samplers give a few sets of extras keys; anything else is not kept
            self._plans.clear()
        self._plans[tuple(extras) if extras else ()] = plan
        return plan

    def read_key(self, key: str | tuple[str, ...]) -> torch.Tensor:
        key = (key,) if isinstance(key, str) else tuple(key)
        if key == ("episode",):
            return torch.repeat_interleave(self._episode_id, self._length)
        if key == ("next", "done"):
            return self._terminated | self._truncated
        for stored, column in self._steps:
            if stored == key:
                return column
        if key not in self._batch_keys():
            raise KeyError(key)  # before gathering every row (10^8 at mt30's size) to find that out
        return self.get(slice(None)).get(key)

    def _batch_keys(self) -> frozenset[Key]:
        """The keys of a sampled batch (as tuples), from a batch of one row; cached."""
        keys = self._keys
        if keys is None:
            sample = self.get(torch.zeros(min(1, len(self)), dtype=torch.int64))
            keys = self._keys = frozenset(as_key(k) for k in sample.keys(include_nested=True, leaves_only=True))
        return keys

    def gather_key(
        self, key: str | tuple[str, ...], rows: torch.Tensor, *, episodes: np.ndarray | None = None
    ) -> torch.Tensor:
        """One leaf at transitions ``rows`` (1-D int64), read from its own file only: an observation-like
        key from the per-episode ``T+1`` rows (``("next", key)`` one row later), a per-step key from its
        column; derived keys (``episode``, ``step``, root flags, ``("next", "done")``) go through ``get``.
        ``episodes`` (each row's ordinal in :meth:`episode_index`) saves the search for them."""
        key = (key,) if isinstance(key, str) else tuple(key)
        rows_np, _ = self._rows(rows)
        for stored, column in self._steps_np:
            if stored == key:
                return torch.from_numpy(column.take(rows_np, axis=0))
        is_next = key[0] == "next"
        obs_key = key[1:] if is_next else key
        for stored, frame_column, shared_next in self._obs:
            if stored == obs_key and (shared_next or not is_next):
                if episodes is None:
                    episodes = np.searchsorted(self._start_np, rows_np, side="right") - 1
                frames = rows_np + episodes + int(is_next)
                if isinstance(frame_column, FrameColumn):
                    return self._decoded(frame_column, frames)
                will_need(frame_column, frames)  # large rows (camera frames): the kernel reads each run ahead
                return torch.from_numpy(frame_column.take(frames, axis=0))
        value = self.get(torch.from_numpy(rows_np)).get(key, None)
        if value is None:
            raise KeyError(key)
        return value

    def gather_states(
        self,
        key: tuple[str, ...],
        rows: np.ndarray,
        after: np.ndarray | None = None,
        *,
        episodes: np.ndarray | None = None,
    ) -> torch.Tensor:
        """One read of the per-episode ``T+1`` rows: the state at row ``r`` of episode ``e`` is frame
        row ``r + e``, the state after it ``r + e + 1`` (the episode's final state after its last row).
        A subclass that overrides ``gather_key`` (to see every read) gets the generic path through it."""
        if type(self).gather_key is not DatasetStorage.gather_key:
            return super().gather_states(key, rows, after, episodes=episodes)
        for stored, column, shared_next in self._obs:
            if stored == key and shared_next:
                rows = rows.astype(np.int64, copy=False)
                # one reduction checks both ends: a negative row is a huge unsigned one
                if rows.size and rows.view(np.uint64).max() >= self._len:
                    raise IndexError(f"index out of range for a dataset of {self._len} transitions")
                if episodes is None:
                    episodes = np.searchsorted(self._start_np, rows, side="right") - 1
                frame = rows + episodes
                if after is not None:
                    frame += after
                if isinstance(column, FrameColumn):
                    return self._decoded(column, frame)
                will_need(column, frame)
                return torch.from_numpy(column.take(frame, axis=0))
        return super().gather_states(key, rows, after, episodes=episodes)

    def device_copy(self, device: Any) -> Any:
        """This build in ``device``'s memory (a ``DeviceStorage``, lean layout; see :mod:`datasets_hub.build.device`)."""
        from datasets_hub.build.device import build_on_device

        return build_on_device(self.path, device)

    def state_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "fingerprint": self.manifest.get("fingerprint")}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("fingerprint") != self.manifest.get("fingerprint"):
            raise ValueError(
                f"this state belongs to build {state_dict.get('fingerprint')!r}, not {self.manifest.get('fingerprint')!r}"
            )

    def __repr__(self) -> str:
        where = ", in_memory=True" if self.in_memory else ""
        where += f", decode_device={str(self.decode_device)!r}" if self.decode_device is not None else ""
        return f"DatasetStorage({self.manifest.get('id')!r}, transitions={self._len}, path={str(self.path)!r}{where})"


class _Plan(NamedTuple):
    """A gather's fixed sequence (see ``DatasetStorage._plan_for``)."""

    # (FieldCut, block index or None, per-row shape to reshape to or None, tree, name, keep the array
    # for next/done): tree 0 is the root, 1 is "next"; name a string or a nested key to put()
    cuts: tuple
    obs: tuple  # (column, key at t or None, key at t+1 or None, madvise the rows)
    unpacked: tuple  # (key, column, tree, name, keep the array for next/done)
    done: bool  # derive next/done
    flat: bool  # every leaf lies in the root or in "next" (no deeper dict to convert)
    extras: tuple | None  # (tree, name) of each extras key, in order; None: some lies deeper (nest them)
    records: Any  # the packed records (PackedSteps.records), None without them
    ordinal: tuple | None  # (dtype, column) of the episode ordinal in a block (PackedSteps.ordinal_column)


def _set(tree: dict[str, Any], name: str | Key, value: Any) -> None:
    if type(name) is str:
        tree[name] = value
    else:
        put(tree, name, value)


def _place(key: Key) -> tuple[int, str | Key]:
    """Where a stored leaf goes: (0 root | 1 "next", its name there: a string, or a nested key to ``put``)."""
    tree, rest = (1, key[1:]) if key[0] == "next" and len(key) > 1 else (0, key)
    return tree, rest[0] if len(rest) == 1 else rest


def _checked_td(source: dict[str, Any], batch_size: torch.Size, nested: bool = True) -> TensorDict:
    return TensorDict(source, batch_size=batch_size)


#: nested dict of tensors of leading size ``batch_size`` -> TensorDict, skipping the checks the
#: constructor would repeat on every sample (the shapes are right by construction); ``nested=False``:
#: no value is a dict
_NEW_TD = getattr(TensorDict, "_new_unsafe", _checked_td)
