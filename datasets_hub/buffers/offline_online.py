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
  read-only build draws and reads ``READ_AHEAD_ROWS`` rows at once, and each batch takes the next of
  them (offline shares of up to a quarter of that and ``READ_AHEAD_SHARE_BYTES``; larger ones are drawn
  when asked for, once none drawn ahead is left). ``randint`` fills its output in generator order, so the offline rows are those of drawing each
  batch's share when it is asked for (the generator is only ahead of them); each batch is a copy of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from datasets_hub.buffers.memmap_storage import LazyMemmapStorage
from datasets_hub.buffers.nested_keys import Key, as_key, key_to_str, nest
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.row_blocks import BatchMemory, fill_rows
from datasets_hub.buffers.samplers.random import RandomSampler
from datasets_hub.errors import InvalidParameter

_BOOKKEEPING = {("index",), ("_weight",)}
#: offline rows drawn and read at once (module docstring), at most this many bytes of them
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
        self.online = TensorDictReplayBuffer(
            storage=LazyMemmapStorage(capacity, scratch_dir=scratch_dir, existsok=True),
            sampler=online_sampler if online_sampler is not None else RandomSampler(),
            generator=generator,
        )
        self.steps = 0  # sample() calls so far: the argument of a ratio schedule
        self._masks: dict[tuple[int, int], np.ndarray] = {}
        first = offline.storage[0:1]  # one stored item: the schema online writes must follow
        self.schema = {
            as_key(k): (v.dtype, tuple(v.shape[1:]))
            for k, v in first.items(include_nested=True, leaves_only=True)
            if isinstance(v, torch.Tensor) and as_key(k)[:1] not in _BOOKKEEPING
        }
        # a batch: the stored keys, each part's positions and which part; one block of memory per batch
        layout = [
            (key, shape, torch.empty((), dtype=dtype).numpy().dtype) for key, (dtype, shape) in self.schema.items()
        ]
        self._memory = BatchMemory(
            [*layout, (("index", "index"), (), np.dtype(np.int64)), (("index", "online"), (), np.dtype(np.bool_))]
        )
        # offline rows drawn ahead (each batch copies the next ones): their arrays, and how many are used
        self._ahead: dict[Key, np.ndarray] = {}
        self._ahead_used = 0
        self._reads_ahead = (
            type(getattr(offline, "sampler", None)) is RandomSampler
            and bool(getattr(offline.storage, "read_only", False))
            and callable(getattr(offline, "draw_rows", None))
            and callable(getattr(offline.storage, "gather_into", None))
        )
        self._row_bytes = self._memory.row_bytes
        self._ahead_rows = max(1, min(READ_AHEAD_ROWS, READ_AHEAD_BYTES // max(1, self._row_bytes)))

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
        arrays = self._memory.arrays(batch_size)
        row = 0
        for part, count in ((self.offline, n_offline), (self.online, batch_size - n_offline)):
            if count and part is self.offline and self._reads_ahead and self._ahead_pays(count):
                self._write_ahead(arrays, count)
            elif count:
                _write(part, arrays, row, count, self.schema)
            row += count
        np.copyto(arrays[("index", "online")], self._online_mask(n_offline, batch_size))
        keys = list(arrays)
        values = [torch.from_numpy(a) for a in arrays.values()]
        # the leaves were checked against the schema on the way in: no second validation per batch
        out = TensorDict._new_unsafe(
            source=cast(Any, nest(keys, values)), batch_size=torch.Size([batch_size]), nested=True
        )
        if return_info:
            return out, {"index": out.get(("index", "index")), "online": out.get(("index", "online"))}
        return out

    def _ahead_pays(self, count: int) -> bool:
        """Rows drawn ahead save a small share its per-call work, and cost a large one a copy: drawn ahead
        for shares of at most a quarter of ``_ahead_rows``, and while any drawn ahead are left (so that
        the rows keep the generator's order)."""
        left = len(self._ahead.get(("index", "index"), ())) - self._ahead_used
        small = count <= self._ahead_rows // 4 and count * self._row_bytes <= READ_AHEAD_SHARE_BYTES
        return small or left > 0

    def _write_ahead(self, arrays: dict[Key, np.ndarray], count: int) -> None:
        """The next ``count`` offline rows drawn ahead copied into rows ``0:count`` of ``arrays``, more drawn
        and read (``_ahead_rows`` at once) when those run out."""
        done = 0
        while done < count:
            held = len(self._ahead.get(("index", "index"), ()))
            if self._ahead_used == held:
                self._draw_ahead()
                held = len(self._ahead[("index", "index")])
            take = min(count - done, held - self._ahead_used)
            at = self._ahead_used
            for key, ahead in self._ahead.items():
                np.copyto(arrays[key][done : done + take], ahead[at : at + take])
            self._ahead_used += take
            done += take

    def _draw_ahead(self) -> None:
        n = self._ahead_rows
        if not self._ahead:  # allocated once: private, only ever copied from
            self._ahead = {
                key: np.empty((n, *shape), torch.empty((), dtype=dtype).numpy().dtype)
                for key, (dtype, shape) in self.schema.items()
            }
            self._ahead[("index", "index")] = np.empty(n, np.int64)
        _write(self.offline, self._ahead, 0, n, self.schema)
        self._ahead_used = 0

    def _online_mask(self, n_offline: int, batch_size: int) -> np.ndarray:
        mask = self._masks.get((n_offline, batch_size))
        if mask is None:
            mask = np.arange(batch_size) >= n_offline
            if len(self._masks) < 64:  # a fixed ratio repeats one; a schedule moves through a few
                self._masks[(n_offline, batch_size)] = mask
        return mask

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


def _write(part: Any, arrays: dict[Key, np.ndarray], row: int, count: int, schema: dict[Key, Any]) -> None:
    """``count`` items of ``part`` written into rows ``row:row + count`` of ``arrays`` (their positions in
    ``("index", "index")``): drawn and gathered straight into them where the buffer and its storage allow
    (``draw_rows``, ``gather_into``), else sampled and copied."""
    end = row + count
    draw = part.draw_rows(count) if callable(getattr(part, "draw_rows", None)) else None
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
    np.copyto(arrays[("index", "index")][row:end], torch.as_tensor(index).reshape(-1).numpy())
