"""Offline data mixed with online experience (docs/guide/mixtures.md): :class:`OfflineOnlineBuffer`.

Offline-to-online RL seeds training with a dataset and then adds the agent's own experience. Here the
offline part is a read-only buffer over a build and the online part a writable buffer over memory-mapped
files; nothing is copied from one to the other. Contract:

- Offline part: any replay buffer (``datasets_hub.load(id)``: its memory-mapped build, sampled where it
  lies). It is never written: seeding costs what opening the build costs, whatever its size, and
  touches no row of it.
- Online part: a ``TensorDictReplayBuffer`` over ``LazyMemmapStorage(capacity, scratch_dir)`` (files under
  ``scratch_dir``, a temporary directory by default), uniform by default or with the ``online_sampler``
  given (e.g. ``PrioritizedSampler``). ``add``/``extend`` write to it with TorchRL's semantics (returning
  the positions written; the oldest items are overwritten once ``capacity`` is reached);
  ``update_priority`` sets priorities of online items.
- Schema: an online write must hold exactly the keys of a stored offline item, each with the same
  dtype and per-item shape (``index``/``_weight`` aside). Anything else raises ``InvalidParameter``
  naming the key, before anything is written: a refused write writes nothing.
- ``sample(n)``: ``round(ratio * n)`` items from the offline part, the rest from the online part
  (all offline while the online part is empty), concatenated offline first. ``ratio`` is a number in
  ``[0, 1]`` or a function of the number of ``sample`` calls made so far (a schedule), checked at each
  call. Each batch holds the stored keys plus ``("index", "index")`` (the item's position in its part)
  and ``("index", "online")`` (bool: which part). Keys a sampler adds (goals, windows) are not kept:
  the two parts share the stored schema only.
- Offline rows drawn ahead: an offline part with a plain uniform sampler (``RandomSampler``) over a
  read-only build draws and reads ``READ_AHEAD_ROWS`` rows at once whenever a batch needs more than
  are left, and each batch takes the next of them (offline shares of up to a quarter of that and
  ``READ_AHEAD_SHARE_BYTES``; larger ones are drawn when asked for, once none drawn ahead is left).
  ``randint`` fills its output in generator order, so the offline rows are those of drawing each
  batch's share when it is asked for (the generator is only ahead of them), also when the share or the
  batch size changes between calls: no row drawn ahead is lost or reordered. The rows drawn are laid
  straight into the memory of the next batches of the same size and share (one copy per key for all of
  them, not one per batch); each batch's online rows are drawn and gathered when it is asked for, so an
  online write is in the very next batch. A batch handed out is never written again while it is
  referenced (``BatchMemory``).
- Online rows: gathered straight from the online storage's memory (``TensorStorage.numpy_columns``)
  where its sampler promises valid rows (``draw_rows``), else through the storage's own gather.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDictBase

from datasets_hub.buffers.memmap_storage import LazyMemmapStorage
from datasets_hub.buffers.nested_keys import Key, NestPlan, as_key, key_to_str
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.row_blocks import BatchMemory, batch_tensordict, batch_tensors, fill_rows
from datasets_hub.buffers.samplers.random import RandomSampler
from datasets_hub.errors import InvalidParameter

_BOOKKEEPING = {("index",), ("_weight",)}
_INDEX: Key = ("index", "index")
_ONLINE: Key = ("index", "online")
#: offline rows drawn and read at once (module docstring), at most this many bytes of them; the batches
#: laid ahead at once hold at most this many bytes too
READ_AHEAD_ROWS = 4096
READ_AHEAD_BYTES = 16 << 20
#: only offline shares of at most this many bytes (and a quarter of the rows drawn ahead) are read ahead:
#: each row costs one more copy, which outweighs the per-call work saved on larger shares
READ_AHEAD_SHARE_BYTES = 1 << 20


class OfflineOnlineBuffer:
    """A read-only offline buffer plus a writable memory-mapped online buffer (module docstring)."""

    def __init__(
        self,
        offline: Any,
        *,
        capacity: int,
        ratio: float | Callable[[int], float] = 0.5,
        scratch_dir: str | Path | None = None,
        online_sampler: Any = None,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if not hasattr(offline, "sample") or not hasattr(offline, "storage"):
            raise InvalidParameter(f"offline must be a replay buffer (e.g. datasets_hub.load(id)), got {offline!r}")
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise InvalidParameter(f"capacity must be a positive int (online items kept), got {capacity!r}")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise InvalidParameter(f"batch_size must be a positive int or None, got {batch_size!r}")
        if not callable(ratio):
            _check_ratio(ratio)
        self.ratio = ratio
        self.batch_size = batch_size
        self.offline = offline
        self._online_storage = LazyMemmapStorage(capacity, scratch_dir=scratch_dir, existsok=True)
        self.online = TensorDictReplayBuffer(
            storage=self._online_storage,
            sampler=online_sampler if online_sampler is not None else RandomSampler(),
            generator=generator,
        )
        self.steps = 0  # sample() calls so far: the argument of a ratio schedule
        first = offline.storage[0:1]  # one stored item: the schema online writes must follow
        self.schema = {
            as_key(k): (v.dtype, tuple(v.shape[1:]))
            for k, v in first.items(include_nested=True, leaves_only=True)
            if isinstance(v, torch.Tensor) and as_key(k)[:1] not in _BOOKKEEPING
        }
        # a batch: the stored keys, each part's positions and which part; one block of memory per batch, or
        # per batches laid ahead together (_OfflineRows)
        layout = [
            (key, shape, torch.empty((), dtype=dtype).numpy().dtype) for key, (dtype, shape) in self.schema.items()
        ]
        memory = BatchMemory([*layout, (_INDEX, (), np.dtype(np.int64)), (_ONLINE, (), np.dtype(np.bool_))])
        reads_ahead = (
            type(getattr(offline, "sampler", None)) is RandomSampler
            and bool(getattr(offline.storage, "read_only", False))
            and callable(getattr(offline, "draw_rows", None))
            and callable(getattr(offline.storage, "gather_into", None))
        )
        self._offline_rows = _OfflineRows(offline, self.schema, memory, reads_ahead)
        self._dtypes = {key: (shape, dtype) for key, shape, dtype in layout}
        self._tree = NestPlan(key for key, _, _ in memory.layout)  # a batch's keys, as its arrays are laid out
        # what the online share is gathered from: (the storage's numpy_columns(), per key its column or None)
        self._online_plan: tuple[Any, list[tuple[Key, np.ndarray]] | None] = (None, None)

    # -- writes -------------------------------------------------------------------------------------
    def _check(self, data: Any, batch_dims: int) -> None:
        if not isinstance(data, TensorDictBase):
            raise InvalidParameter(f"online writes are TensorDicts with the offline keys, got {type(data).__name__}")
        if data.batch_dims != batch_dims:
            what = "one item (batch size [])" if batch_dims == 0 else "a batch of items (batch size [n])"
            raise InvalidParameter(f"expected {what}, got batch size {list(data.batch_size)}")
        leaves = {
            as_key(k): v
            for k, v in data.items(include_nested=True, leaves_only=True)
            if as_key(k)[:1] not in _BOOKKEEPING
        }
        missing = sorted(key_to_str(k) for k in self.schema.keys() - leaves.keys())
        extra = sorted(key_to_str(k) for k in leaves.keys() - self.schema.keys())
        if missing or extra:
            raise InvalidParameter(
                f"an online write must hold the offline keys: missing {missing or 'none'}, unexpected "
                f"{extra or 'none'}; nothing was written"
            )
        for key, (dtype, shape) in self.schema.items():
            value = leaves[key]
            got = (getattr(value, "dtype", None), tuple(getattr(value, "shape", ())[batch_dims:]))
            if got != (dtype, shape):
                raise InvalidParameter(
                    f"online {key_to_str(key)!r} is {got[0]} {list(got[1])} per item but the offline data holds "
                    f"{dtype} {list(shape)}; nothing was written"
                )

    def add(self, data: TensorDictBase) -> int:
        """Write one item to the online part; returns its position there."""
        self._check(data, 0)
        return self.online.add(data)

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Write a batch of items to the online part; returns their positions there."""
        self._check(data, 1)
        return self.online.extend(data)

    def update_priority(self, index: Any, priority: Any, online: torch.Tensor | None = None) -> None:
        """Set priorities of online items at ``index``. With ``online`` (a batch's ``("index", "online")``),
        ``index`` and ``priority`` are a whole batch's and only its online items are updated."""
        if online is not None:
            online = torch.as_tensor(online, dtype=torch.bool).reshape(-1)
            index = torch.as_tensor(index).reshape(-1)[online]
            priority = torch.as_tensor(priority).reshape(-1)[online]
        self.online.update_priority(index, priority)

    # -- reads --------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.offline) + len(self.online)

    def current_ratio(self) -> float:
        """The offline share the next ``sample`` call uses."""
        value = self.ratio(self.steps) if callable(self.ratio) else self.ratio
        _check_ratio(value)
        return float(value)

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """``batch_size`` items: the offline share from the build, the rest online (module docstring)."""
        if batch_size is None:
            batch_size = self.batch_size
            if batch_size is None:
                raise InvalidParameter(
                    "sample() needs a batch size: sample(256) or OfflineOnlineBuffer(..., batch_size=)"
                )
        share = self.current_ratio()  # checked at every call, also while the online part is empty
        n_offline = round(share * batch_size) if len(self.online) else batch_size
        self.steps += 1
        values, rest = self._offline_rows.batch(batch_size, n_offline)
        if n_offline < batch_size:
            self._write_online(rest, batch_size - n_offline)
        out = batch_tensordict(self._tree, values, batch_size)  # the leaves were checked on the way in
        if return_info:
            return out, {"index": out.get(_INDEX), "online": out.get(_ONLINE)}
        return out

    def _write_online(self, arrays: dict[Key, np.ndarray], count: int) -> None:
        """``count`` online items drawn now (every write so far is visible) and written into ``arrays``
        (a batch's rows after its offline share): taken straight from the storage's columns where the
        sampler promises valid rows and adds no stored key, else through the storage's own gather
        (``_write_drawn``)."""
        draw = self.online.draw_rows(count)
        columns = self._online_columns()
        if (
            columns is not None
            and draw is not None
            and draw[2] is not None
            and not (draw[1] and _replaces(draw[1], self.schema))
        ):
            rows = draw[2]
            for key, column in columns:
                # valid rows into a contiguous batch slice of the column's dtype and item shape (checked
                # once, _online_columns): "clip" gathers with no intermediate buffer
                column.take(rows, axis=0, out=arrays[key], mode="clip")
            np.copyto(arrays[_INDEX], rows)
        else:
            _write_drawn(self.online, draw, arrays, 0, count, self.schema)

    def _online_columns(self) -> list[tuple[Key, np.ndarray]] | None:
        """Per stored key, the online storage's column (``numpy_columns``), worked out again only when
        the storage's memory moved; ``None`` where a key has no column of the batch's dtype and item shape."""
        columns = self._online_storage.numpy_columns()
        known, plan = self._online_plan
        if columns is known:
            return plan
        plan = None
        if columns is not None:
            plan = []
            for key in self.schema:
                column = columns.get(key)
                shape, dtype = self._dtypes[key]
                if column is None or column.dtype != dtype or column.shape[1:] != shape:
                    plan = None
                    break
                plan.append((key, column))
        self._online_plan = (columns, plan)
        return plan

    def __repr__(self) -> str:
        ratio = "schedule" if callable(self.ratio) else self.ratio
        return f"OfflineOnlineBuffer(offline={len(self.offline)}, online={len(self.online)}, ratio={ratio})"


def _check_ratio(value: Any) -> None:
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not 0 <= value <= 1
    ):
        raise InvalidParameter(f"ratio (the offline share of a batch) must be a number in [0, 1], got {value!r}")


def _replaces(info: dict[str, Any], schema: dict[Key, Any]) -> bool:
    """Whether a sampler's ``info`` holds entries that replace stored keys (``gather_into``'s extras)."""
    return any(as_key(k) in schema for k in info)


def _write(part: Any, arrays: dict[Key, np.ndarray], row: int, count: int, schema: dict[Key, Any]) -> None:
    """``count`` items of ``part`` drawn now and written into rows ``row:row + count`` of ``arrays``
    (``_write_drawn``)."""
    draw = part.draw_rows(count) if callable(getattr(part, "draw_rows", None)) else None
    _write_drawn(part, draw, arrays, row, count, schema)


def _write_drawn(
    part: Any, draw: Any, arrays: dict[Key, np.ndarray], row: int, count: int, schema: dict[Key, Any]
) -> None:
    """The ``count`` items of ``draw`` (``part.draw_rows(count)``; ``None``: sampled here) written into rows
    ``row:row + count`` of ``arrays`` (their positions in ``("index", "index")``): gathered straight into
    them where the buffer and its storage allow (promised rows, ``gather_into``), else gathered and copied."""
    end = row + count
    gather_into = getattr(part.storage, "gather_into", None)
    if draw is not None and draw[2] is not None and callable(gather_into):
        index, info, rows = draw
        views = {key: arrays[key][row:end] for key in schema}
        extras = {k: v for k, v in info.items() if isinstance(v, torch.Tensor) and as_key(k) in views}
        gather_into(rows, views, extras)
    else:
        if draw is not None:  # drawn, but the rows were not promised: the storage's own gather of the index
            index, info, _ = draw
            extras = {k: v for k, v in info.items() if isinstance(v, torch.Tensor) and v.shape[:1] == (count,)}
            data = part.storage.gather(index, extras)
        else:
            data, info = part.sample(count, return_info=True)
            index = info["index"]
        for key in schema:
            fill_rows(arrays[key][row:end], data.get(key).numpy())
    np.copyto(arrays[_INDEX][row:end], torch.as_tensor(index).reshape(-1).numpy())


class _OfflineRows:
    """Each batch's offline share (module docstring): the batch's leaves (tensors over its memory, its
    first ``count`` rows written, values and positions, and its whole ``("index", "online")`` mask) and
    the arrays of its rows after the share, left for the online rows.

    Read ahead (``reads_ahead``: a plain uniform sampler over a read-only build) for small shares
    (``_ahead_pays``): rows are drawn ``ahead_rows`` at a time into ``pool`` (private, only ever copied
    from) whenever fewer than a batch needs are left, and as many next batches of the asked size and
    share as the rows left fill (at most ``READ_AHEAD_BYTES`` of batches) are laid at once in one
    ``BatchMemory`` block: each batch's offline rows, positions and mask written, one copy per key for
    them all, and their tensors made, one call per key for them all. The next calls asking for that size and share hand them out in order. Rows drawn and not
    handed out are, in order, those of the laid batches and then ``pool[used:held]``; a call asking for
    another size or share first moves the laid rows back to the front of the pool (``_unlay``) and takes
    its rows in that order, so no drawn row is lost or reordered; the offline part is drawn at the same
    calls, with the same sizes, whether batches are laid ahead or not."""

    def __init__(self, offline: Any, schema: dict[Key, Any], memory: BatchMemory, reads_ahead: bool) -> None:
        self.offline = offline
        self.schema = schema
        self.memory = memory
        self.reads_ahead = reads_ahead
        self.row_bytes = memory.row_bytes
        self.ahead_rows = max(1, min(READ_AHEAD_ROWS, READ_AHEAD_BYTES // max(1, self.row_bytes)))
        # what a drawn row holds: the stored keys and the position
        self.specs = {key: (shape, dtype) for key, shape, dtype in memory.layout if key != _ONLINE}
        self.keys = [key for key, _, _ in memory.layout]  # a batch's leaves are in this order
        self.pool: dict[Key, np.ndarray] = {}
        self.used = 0  # pool rows handed out (or laid)
        self.held = 0  # pool rows drawn
        self.laid: dict[Key, np.ndarray] | None = None  # the laid batches' block, each key [laid_count * size]
        self.laid_shape = (0, 0)  # their batch size and offline share
        self.laid_count = 0
        self.laid_next = 0  # the next one to hand out
        self.laid_values: list[tuple[torch.Tensor, ...]] = []  # each laid batch's leaves
        self.laid_rest: dict[Key, np.ndarray] = {}  # per key [laid_count, size - share]: each one's online rows
        self._masks: dict[tuple[int, int], np.ndarray] = {}

    def batch(self, batch_size: int, count: int) -> tuple[tuple[torch.Tensor, ...], dict[Key, np.ndarray]]:
        """The next batch of ``batch_size`` rows, its first ``count`` (the offline share) written: its
        leaves in the order of ``keys``, and per stored key and ``("index", "index")`` the array of its
        rows after the share (none when it is the whole batch)."""
        if self.laid is not None and self.laid_shape == (batch_size, count):
            return self._next_laid()
        if not (count and self.reads_ahead and (self._ahead_pays(count) or self._left() > 0)):
            arrays = self.memory.arrays(batch_size)
            if count:
                _write(self.offline, arrays, 0, count, self.schema)
            np.copyto(arrays[_ONLINE], self._mask(count, batch_size))
            return self._handed(arrays, batch_size, count)
        if self.laid is not None:
            self._unlay()
        while self.held - self.used < count:
            self._draw()
        if self._ahead_pays(count):
            self._lay(batch_size, count)
            return self._next_laid()
        # a large share taking the rows left (then drawn when asked for: _ahead_pays is False once none is)
        arrays = self.memory.arrays(batch_size)
        for key, pool in self.pool.items():
            np.copyto(arrays[key][:count], pool[self.used : self.used + count])
        self.used += count
        np.copyto(arrays[_ONLINE], self._mask(count, batch_size))
        return self._handed(arrays, batch_size, count)

    def _handed(
        self, arrays: dict[Key, np.ndarray], batch_size: int, count: int
    ) -> tuple[tuple[torch.Tensor, ...], dict[Key, np.ndarray]]:
        """What ``batch`` returns of one batch's arrays."""
        rest = {key: arrays[key][count:] for key in self.specs} if count < batch_size else {}
        return tuple(torch.from_numpy(arrays[key]) for key in self.keys), rest

    def _left(self) -> int:
        """Rows drawn ahead and not handed out yet."""
        return (self.laid_count - self.laid_next) * self.laid_shape[1] + self.held - self.used

    def _ahead_pays(self, count: int) -> bool:
        """Rows drawn ahead save a small share its per-call work, and cost a large one a copy."""
        return count <= self.ahead_rows // 4 and count * self.row_bytes <= READ_AHEAD_SHARE_BYTES

    def _draw(self) -> None:
        """``ahead_rows`` more rows drawn and read into the pool, after the rows not used yet (moved to
        its front)."""
        at = self._place_unused(0, self.ahead_rows)
        _write(self.offline, self.pool, at, self.ahead_rows, self.schema)
        self.held = at + self.ahead_rows

    def _place_unused(self, at: int, room: int) -> int:
        """The pool's unused rows (``used:held``) moved to start at row ``at``, with ``room`` rows free
        after them (the pool grown where needed); returns the row after them."""
        left = self.held - self.used
        end = at + left
        if not self.pool or len(self.pool[_INDEX]) < end + room:
            grown = {key: np.empty((end + room, *shape), dtype) for key, (shape, dtype) in self.specs.items()}
            for key, pool in self.pool.items():
                grown[key][at:end] = pool[self.used : self.held]
            self.pool = grown
        elif at != self.used:
            for pool in self.pool.values():
                pool[at:end] = pool[self.used : self.held]  # numpy copies overlapping rows correctly
        self.used, self.held = at, end
        return end

    def _lay(self, batch_size: int, count: int) -> None:
        """The next batches of this size and share, as many as the unused pool rows fill (at least
        ``count`` are left) and ``READ_AHEAD_BYTES`` allows, laid in one block: rows ``j * batch_size``
        to ``j * batch_size + count`` of batch ``j``, its mask, and the rest left for its online rows."""
        fits = (self.held - self.used) // count
        k = max(1, min(fits, READ_AHEAD_BYTES // max(1, batch_size * self.row_bytes)))
        block = self.memory.arrays(k * batch_size)
        start, stop = self.used, self.used + k * count
        for key, (shape, _) in self.specs.items():
            laid = block[key].reshape(k, batch_size, *shape)[:, :count]
            fill_rows(laid, self.pool[key][start:stop].reshape(k, count, *shape))
        block[_ONLINE].reshape(k, batch_size)[...] = self._mask(count, batch_size)
        self.used = stop
        self.laid, self.laid_shape, self.laid_count, self.laid_next = block, (batch_size, count), k, 0
        self.laid_values = batch_tensors(block.values(), k, batch_size)  # the memory's layout order: ``keys``
        if count < batch_size:
            self.laid_rest = {
                key: block[key].reshape(k, batch_size, *shape)[:, count:] for key, (shape, _) in self.specs.items()
            }

    def _next_laid(self) -> tuple[tuple[torch.Tensor, ...], dict[Key, np.ndarray]]:
        """What ``batch`` returns of the next laid batch (views of the block); the block is let go after
        the last one."""
        j = self.laid_next
        values = self.laid_values[j]
        rest = {key: rows[j] for key, rows in self.laid_rest.items()}
        self.laid_next += 1
        if self.laid_next == self.laid_count:  # all handed out: the block is theirs alone (BatchMemory)
            self._let_go()
        return values, rest

    def _let_go(self) -> None:
        """No batch laid any more: the block, its tensors and views dropped."""
        self.laid, self.laid_count, self.laid_next = None, 0, 0
        self.laid_values, self.laid_rest = [], {}

    def _unlay(self) -> None:
        """The laid batches not handed out taken apart: their offline rows moved to the front of the pool,
        before its unused rows (the order they were drawn in)."""
        laid = cast(dict[Key, np.ndarray], self.laid)
        size, count = self.laid_shape
        n = (self.laid_count - self.laid_next) * count
        self._place_unused(n, 0)
        for key, (shape, _) in self.specs.items():
            rows = laid[key].reshape(self.laid_count, size, *shape)[self.laid_next :, :count]
            fill_rows(self.pool[key][:n].reshape(rows.shape), rows)
        self.used = 0
        self._let_go()

    def _mask(self, n_offline: int, batch_size: int) -> np.ndarray:
        """``("index", "online")`` of a batch: ``n_offline`` False, then True."""
        mask = self._masks.get((n_offline, batch_size))
        if mask is None:
            mask = np.arange(batch_size) >= n_offline
            if len(self._masks) < 64:  # a fixed ratio repeats one; a schedule moves through a few
                self._masks[(n_offline, batch_size)] = mask
        return mask
