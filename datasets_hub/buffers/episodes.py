"""Episodes as first-class objects: iterate, look up, filter (a view, no copy), split by episode.

``rb.episodes`` (any replay buffer over TED transitions) is an :class:`Episodes` table:

- ``len(eps)``, ``eps[i]`` and iteration give :class:`Episode` records (``id``, ``length``,
  ``ret`` = undiscounted return, ``terminated``/``truncated`` end, ``start`` row, ``data()``);
- ``eps.stats``: a TensorDict of batch ``[E]`` with ``id``, ``start``, ``length``, ``return``,
  ``terminated``, ``truncated`` (the same columns the predicates below see);
- ``eps.filter(pred)``: a read-only buffer over the episodes where ``pred(stats)`` (a bool
  ``[E]`` tensor) is True; ``eps.top(0.1)``: the best 10% by return (%BC); ``eps.split(0.1,
  seed=0)``: (train, validation) buffers over disjoint random sets of whole episodes;
  ``eps.sample(k, generator=...)``: ``k`` random episodes.

Subset buffers share the parent's storage: an :class:`EpisodeSubsetStorage` maps its rows onto
the parent's through the episode index (O(batch · log E) per gather, nothing per transition is
copied or even indexed), and exposes its own episode index, so slice samplers work on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.storages import Storage
from datasets_hub.errors import InvalidParameter

Key = str | tuple[str, ...]


def episode_index_of(storage: Any, n: int) -> EpisodeIndex:
    """The storage's build-time episode index, else runs of ``episode`` ids, else ``("next", "done")``
    flags (rows after the last flag form a final episode)."""
    index = storage.episode_index() if hasattr(storage, "episode_index") else None
    if index is not None:
        return index
    for key, derive in (("episode", EpisodeIndex.from_episode_ids), (("next", "done"), EpisodeIndex.from_done)):
        try:
            column = storage.read_key(key)
        except (KeyError, NotImplementedError, AttributeError):
            try:
                column = storage.get(slice(0, n)).get(key)
            except (KeyError, AttributeError):
                continue
        return derive(column[:n])
    raise InvalidParameter(
        "this buffer has no episode structure: no episode index, no 'episode' ids and no ('next', 'done') flags"
    )


def _column(storage: Any, key: Key, rows: torch.Tensor) -> torch.Tensor | None:
    try:
        return storage.gather_key(key, rows)
    except (KeyError, NotImplementedError, AttributeError):
        return None


@dataclass(frozen=True)
class Episode:
    """One episode of a buffer: where it lies and what it scored. ``data()`` reads its rows."""

    ordinal: int
    id: int
    start: int
    length: int
    ret: float
    terminated: bool
    truncated: bool
    _storage: Any = field(repr=False, compare=False)

    @property
    def rows(self) -> torch.Tensor:
        return torch.arange(self.start, self.start + self.length)

    def data(self) -> Any:
        """The episode's transitions, in order (a TED TensorDict of batch ``[length]``)."""
        return self._storage.get(self.rows)


class Episodes:
    """The episode table of a buffer (see the module docstring)."""

    def __init__(self, rb: Any) -> None:
        self._rb = rb
        storage = rb.storage
        self._storage = storage
        self.index = episode_index_of(storage, len(rb))
        start, length = self.index.start, self.index.length
        last = start + length - 1
        ids = _column(storage, "episode", start)
        returns = getattr(storage, "episode_returns", None)
        if not isinstance(returns, torch.Tensor) or returns.shape[0] != start.shape[0]:
            from datasets_hub.buffers.returns import episode_returns

            reward = storage.read_key(("next", "reward")) if hasattr(storage, "read_key") else None
            returns = episode_returns(reward[: len(rb)], start, length) if reward is not None else None
        terminated = _column(storage, ("next", "terminated"), last)
        truncated = _column(storage, ("next", "truncated"), last)
        count = start.shape[0]
        self.stats = TensorDict(
            {
                "id": (ids.reshape(count).to(torch.int64) if ids is not None else torch.arange(count)),
                "start": start.clone(),
                "length": length.clone(),
                "return": (
                    returns.to(torch.float64)
                    if returns is not None
                    else torch.full((count,), float("nan"), dtype=torch.float64)
                ),
                "terminated": (
                    terminated.reshape(count).bool() if terminated is not None else torch.zeros(count, dtype=torch.bool)
                ),
                "truncated": (
                    truncated.reshape(count).bool() if truncated is not None else torch.zeros(count, dtype=torch.bool)
                ),
            },
            batch_size=[count],
        )

    def __len__(self) -> int:
        return self.stats.batch_size[0]

    def __getitem__(self, i: int) -> Episode:
        n = len(self)
        if not isinstance(i, int) or isinstance(i, bool) or not -n <= i < n:
            raise IndexError(f"episode index {i!r} out of range for {n} episodes (ordinals, not ids)")
        i %= n
        s = self.stats[i]
        return Episode(
            ordinal=i,
            id=int(s["id"]),
            start=int(s["start"]),
            length=int(s["length"]),
            ret=float(s["return"]),
            terminated=bool(s["terminated"]),
            truncated=bool(s["truncated"]),
            _storage=self._storage,
        )

    def __iter__(self) -> Iterator[Episode]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        lengths, rets = self.stats["length"], self.stats["return"]
        return (
            f"Episodes({len(self)} episodes, {int(lengths.sum())} transitions, length {int(lengths.min())}–"
            f"{int(lengths.max())}, return {float(rets.min()):.4g}–{float(rets.max()):.4g})"
            if len(self)
            else "Episodes(0 episodes)"
        )

    @property
    def lengths(self) -> torch.Tensor:
        return self.stats["length"]

    @property
    def returns(self) -> torch.Tensor:
        return self.stats["return"]

    @property
    def ids(self) -> torch.Tensor:
        return self.stats["id"]

    def by_id(self, episode_id: int) -> Episode:
        """The episode with dataset id ``episode_id`` (ids are those of the ``episode`` key)."""
        hits = torch.nonzero(self.stats["id"] == int(episode_id)).reshape(-1)
        if not hits.numel():
            raise KeyError(f"no episode with id {episode_id} in this buffer")
        return self[int(hits[0])]

    # -- subsets ----------------------------------------------------------------------------------
    def select(self, ordinals: torch.Tensor | list[int]) -> Any:
        """A read-only buffer over the episodes at ``ordinals`` (kept in buffer order), sharing the
        data; it keeps the sampler (a copy sharing the generator) and batch size, not the sample-time
        transforms (some are bound to their buffer: append them again to the subset)."""
        chosen = torch.as_tensor(ordinals, dtype=torch.int64).reshape(-1)
        if chosen.numel() and (int(chosen.min()) < 0 or int(chosen.max()) >= len(self)):
            raise InvalidParameter(f"episode ordinals must lie in [0, {len(self)})")
        chosen = torch.unique(chosen)  # sorted: rows keep the parent's order
        if not chosen.numel():
            raise InvalidParameter("the selection holds no episode; a buffer needs at least one")
        storage = EpisodeSubsetStorage(self._storage, self.index, chosen)
        return self._rb.read_only_view(storage, prefetch=0)

    def filter(self, predicate: Callable[[TensorDictBase], Any]) -> Any:
        """Episodes where ``predicate(stats)`` is True: it gets :attr:`stats` (batch ``[E]``) and returns a bool
        ``[E]`` tensor, e.g. ``lambda s: s["return"] >= s["return"].quantile(0.9)`` or ``lambda s: s["length"] > 100``."""
        mask = predicate(self.stats)
        mask = torch.as_tensor(mask)
        if mask.dtype != torch.bool or mask.shape != (len(self),):
            raise InvalidParameter(
                f"the predicate must return a bool tensor with one value per episode ([{len(self)}]), got "
                f"{mask.dtype} {list(mask.shape)}; it receives the stats of all episodes at once, e.g. "
                "lambda s: s['return'] > 100"
            )
        return self.select(torch.nonzero(mask).reshape(-1))

    def top(self, fraction: float, *, by: str = "return") -> Any:
        """The best ``fraction`` of episodes by ``by`` (a stats column), at least one (%BC)."""
        if not 0.0 < fraction <= 1.0:
            raise InvalidParameter(f"fraction must be in (0, 1], got {fraction!r}")
        k = max(1, round(fraction * len(self)))
        order = torch.argsort(self.stats[by].to(torch.float64), descending=True, stable=True)
        return self.select(order[:k])

    def split(self, val_fraction: float = 0.1, *, seed: int = 0) -> tuple[Any, Any]:
        """``(train, val)`` buffers over disjoint random sets of whole episodes (``round(val_fraction * E)``
        episodes, at least one, in validation); the same seed gives the same split in every process."""
        if not 0.0 < val_fraction < 1.0 or len(self) < 2:
            raise InvalidParameter(
                f"val_fraction must be in (0, 1) and the buffer needs 2+ episodes (has {len(self)}), got {val_fraction!r}"
            )
        k = min(len(self) - 1, max(1, round(val_fraction * len(self))))
        perm = torch.randperm(len(self), generator=torch.Generator().manual_seed(int(seed)))
        return self.select(perm[k:]), self.select(perm[:k])

    def sample(self, k: int, *, generator: torch.Generator | None = None, replace: bool = False) -> list[Episode]:
        """``k`` random episodes (Minari's ``sample_episodes``)."""
        if replace:
            picks = torch.randint(len(self), (k,), generator=generator)
        else:
            if k > len(self):
                raise InvalidParameter(f"cannot sample {k} distinct episodes from {len(self)}")
            picks = torch.randperm(len(self), generator=generator)[:k]
        return [self[int(i)] for i in picks]


class EpisodeSubsetStorage(Storage):
    """A read-only view of some episodes of another storage, laid end to end (no data copied).

    Row ``r`` of the view is row ``start[e] + (r - offset[e])`` of the parent, where ``e`` is the
    view episode holding ``r``; the view's own episode index is contiguous from 0.
    """

    read_only = True

    def __init__(self, parent: Any, index: EpisodeIndex, ordinals: torch.Tensor) -> None:
        self.parent = parent
        self.ordinals = ordinals
        self._parent_start = index.start[ordinals]
        self._index = EpisodeIndex.from_lengths(index.length[ordinals])
        self._len = self._index.num_transitions
        super().__init__(self._len)

    def __len__(self) -> int:
        return self._len

    def episode_index(self) -> EpisodeIndex:
        return self._index

    def parent_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """The parent's rows for rows of this view."""
        episode = self._index.episode_of(rows)
        return self._parent_start[episode] + (rows - self._index.start[episode])

    def _rows(self, index: Any) -> torch.Tensor:
        if isinstance(index, slice):
            return torch.arange(self._len)[index]
        rows = torch.as_tensor(index)
        if rows.dtype == torch.bool:
            rows = torch.nonzero(rows).reshape(-1)
        rows = rows.to(torch.int64)
        rows = torch.where(rows < 0, rows + self._len, rows)
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= self._len):
            raise IndexError(f"row index out of range for a view of {self._len} transitions")
        return rows

    def get(self, index: Any) -> Any:
        rows = self._rows(index)
        flat = rows.reshape(-1)
        data = self.parent.get(self.parent_rows(flat))
        return data.reshape(rows.shape) if isinstance(data, TensorDictBase) and rows.ndim != 1 else data

    def read_key(self, key: Key) -> torch.Tensor:
        return self.gather_key(key, torch.arange(self._len))

    def gather_key(self, key: Key, rows: torch.Tensor, *, episodes: Any = None) -> torch.Tensor:
        # ``episodes`` (a caller's per-row episode hint) refers to this view's episodes, not the parent's
        return self.parent.gather_key(key, self.parent_rows(torch.as_tensor(rows, dtype=torch.int64)))

    def set(self, cursor: Any, data: Any) -> None:
        raise RuntimeError("an episode subset is a read-only view of its parent buffer's data")

    def empty(self) -> None:
        self.set(None, None)

    def state_dict(self) -> dict[str, Any]:
        return {"ordinals": self.ordinals.clone()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not torch.equal(state_dict.get("ordinals", torch.empty(0)), self.ordinals):
            raise ValueError("this state belongs to another episode subset")

    def __repr__(self) -> str:
        return f"EpisodeSubsetStorage({self._index.num_episodes} episodes, {self._len} transitions of {self.parent!r})"
