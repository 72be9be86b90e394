"""How a replay buffer draws batches: one at a time under its lock, or prefetched in ticket order.

:class:`OrderedDraws` is a part of :class:`~datasets_hub.buffers.replay_buffers.ReplayBuffer`. One lock
guards writes and draws. With ``prefetch=N`` a thread pool keeps N batches in flight; draws take
numbered tickets and run in ticket order, so a seeded ``generator`` gives the same batches with or
without prefetching. Batches in flight are dropped (``_drain``) when the contents change under them
(``empty``, ``load_state_dict``, ``loads``); pickling leaves the threads behind and makes new ones.
``sample_many(k)`` draws ``k`` batches under one lock hold and gathers them in one storage read.
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torch.utils import _pytree

from datasets_hub.buffers.batch_size import check_batch_items


class OrderedDraws:
    """The drawing part of a replay buffer (a mixin: the buffer holds the state it reads)."""

    _prefetch: int
    _batch_size: int | None
    _compilable: bool
    _pin_memory: bool
    _collate_fn: Any
    _transform: Any
    _sampler: Any
    _storage: Any

    if TYPE_CHECKING:

        def _sample_now(self, batch_size: int) -> tuple[Any, dict[str, Any], bool]: ...
        def _fwd(self, data: Any) -> Any: ...
        def _gather(
            self,
            index: torch.Tensor,
            info: dict[str, Any],
            items: torch.Tensor | None = None,
            rows: np.ndarray | None = None,
        ) -> Any: ...
        def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any: ...

    def _init_threading(self) -> None:
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._next_ticket = 0  # next draw number to hand out
        self._turn = 0  # draw number allowed to use the sampler now
        self._queue: collections.deque = collections.deque()
        self._executor: ThreadPoolExecutor | None = None

    def _job(self, batch_size: int, ticket: int) -> tuple[Any, dict[str, Any], bool]:
        with self._cond:
            while self._turn != ticket:
                self._cond.wait()
            try:
                data, info, ran_out = self._sample_now(batch_size)
            finally:
                self._turn += 1
                self._cond.notify_all()
        return self._fwd(data), info, ran_out

    def _ticket(self) -> int:
        with self._lock:
            t = self._next_ticket
            self._next_ticket += 1
            return t

    def _draw(self, batch_size: int) -> tuple[Any, dict[str, Any], bool]:
        if self._compilable and torch.compiler.is_compiling():
            data, info, ran_out = self._sample_now(batch_size)  # no lock: dynamo cannot trace one
            return self._fwd(data), info, ran_out
        if not self._prefetch:
            with self._lock:
                data, info, ran_out = self._sample_now(batch_size)
            transform = self._transform  # inlined _fwd: this runs for every batch
            return (transform(data) if transform.transforms else data), info, ran_out
        if batch_size != self._batch_size or not self._queue:
            result = self._job(batch_size, self._ticket())
        else:
            result = self._queue.popleft().result()
        if batch_size == self._batch_size:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._prefetch, thread_name_prefix="datasets_hub_prefetch")
            while len(self._queue) < self._prefetch:
                self._queue.append(self._executor.submit(self._job, batch_size, self._ticket()))
        return result

    def sample_many(self, k: int, batch_size: int | None = None) -> Any:
        """``k`` batches in one call, stacked: a ``[k, batch_size]`` TensorDict (or tensor).

        The values are exactly those of ``k`` successive ``sample(batch_size)`` calls (the sampler draws
        the same indices from the same generator, ``Sampler.sample_many_rows``), but the storage gathers
        all ``k * batch_size`` items at once, and anchor samplers (goals, n-step returns, windows) do
        their per-row work once over all of them, so the per-call work is paid once. Buffers with
        transforms, a ``collate_fn``, ``prefetch`` or a multi-dimensional storage (and data that is not
        a tensor or TensorDict) stack ``k`` ``sample()`` calls. Batches must have equal sizes: an epoch sampler's short last batch
        is refused (use ``drop_last=True``).
        """
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"sample_many needs a number of batches k >= 1, got {k!r}")
        batch_size = self._batch_size if batch_size is None else batch_size
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(
                f"sample_many needs a positive batch_size (here or in the constructor), got {batch_size!r}"
            )
        check_batch_items(k * batch_size, f"sample_many({k}, batch_size={batch_size})")
        if not self._plain_gathers():
            return _stack([self.sample(batch_size) for _ in range(k)])
        with self._lock:
            index, info, rows = self._sampler.sample_many_rows(self._storage, k, batch_size)
            info = {**info, "index": index}
            if rows is not None and getattr(self._storage, "gathers_batches", False):
                # promised rows (every info entry per item) of a storage that gathers [k, m] batches: shaped
                # before the gather, so the batch comes out [k, batch_size] with no reshape of the result
                lead = (k, batch_size)
                info = {key: value.reshape(*lead, *value.shape[1:]) for key, value in info.items()}
                return self._gather(index.reshape(lead), info, None, rows.reshape(lead))
            data = self._gather(index, info, None, rows)
        if isinstance(data, (torch.Tensor, TensorDictBase)):
            return data.reshape(k, batch_size, *data.shape[1:])
        return _stack([data[i * batch_size : (i + 1) * batch_size] for i in range(k)])

    def _plain_gathers(self) -> bool:
        """True when a batch is exactly the storage's gather of the sampled index: no prefetch, pinning,
        ``collate_fn``, transform or multi-dimensional storage in between."""
        return (
            not self._prefetch
            and not self._pin_memory
            and self._collate_fn is None
            and not self._transform.transforms
            and getattr(self._storage, "ndim", 1) == 1
        )

    def draw_index(self, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]] | None:
        """The sampler's ``(index, info)`` for one batch of ``batch_size``, drawn under the buffer's lock
        exactly as ``sample`` draws it, without reading the storage; ``None`` (nothing drawn) when a
        batch is more than a plain gather (see ``sample_many``). With :meth:`gather_drawn`, a caller
        that reads several buffers over one storage (``ReplayBufferEnsemble``) reads it once."""
        if not self._plain_gathers():
            return None
        with self._lock:
            return self._sampler.sample(self._storage, batch_size)

    def draw_rows(self, batch_size: int) -> tuple[torch.Tensor, dict[str, Any], np.ndarray | None] | None:
        """:meth:`draw_index` with the sampler's promise (``Sampler.sample_rows``): ``(index, info, rows)``,
        ``rows`` the index as numpy rows, all valid, and every ``info`` entry a per-item tensor (``None``:
        no promise); ``None`` (nothing drawn) where :meth:`draw_index` gives ``None``."""
        if not self._plain_gathers():
            return None
        with self._lock:
            return self._sampler.sample_rows(self._storage, batch_size)

    def gather_drawn(self, index: torch.Tensor, info: dict[str, Any], rows: np.ndarray | None = None) -> Any:
        """What ``sample`` returns for a drawn 1-D ``index`` and its ``info`` (:meth:`draw_index`;
        the index of several draws of buffers sharing this storage may be concatenated). ``rows``: the
        index as numpy rows (shaped as ``index``) when every draw came with the promise of :meth:`draw_rows` (then ``info``
        must hold only per-item tensors), for a storage that can skip its checks (``Storage.gather_valid``)."""
        with self._lock:
            return self._gather(index, info, None, rows)

    def _drain(self) -> None:
        """Wait for in-flight prefetches and drop them (after empty/load, they would be stale)."""
        while self._queue:
            try:
                self._queue.popleft().result()
            except Exception:  # noqa: BLE001 - a failed stale batch is dropped with the others
                pass

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for k in ("_lock", "_cond", "_queue", "_executor", "_next_ticket", "_turn"):
            state.pop(k)
        state.pop("_episodes_cache", None)  # derived (ReplayBuffer.episodes); recomputed on first use
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_threading()

    def __del__(self) -> None:
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=False)


def _stack(batches: list[Any]) -> Any:
    """``k`` batches of equal size stacked along a new first dim (``sample_many``)."""
    if isinstance(batches[0], (torch.Tensor, TensorDictBase)):
        return torch.stack(batches)
    return _pytree.tree_map(lambda *xs: torch.stack(xs), *batches)
