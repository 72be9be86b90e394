"""Pool mode of a remote build (``resident="pool"``): K whole episodes resident, sampling only from them.

For links too slow for exactly uniform sampling (``resident="lazy"`` waits for every chunk a batch
touches), :class:`PoolStorage` keeps ``pool_episodes`` (K) whole episodes of the published build on
local disk and shows samplers an episode index holding only those episodes. A background thread
replaces the oldest member by an episode drawn uniformly among the episodes outside the pool, then waits
``pool_refresh_s`` seconds before the next replacement (``None``: only when
:meth:`PoolStorage.refresh_pool` is called).

**The bias, stated.** Within a window of time, samples come from the K episodes of the pool, not from
the whole dataset: two samples are far more likely to share an episode than under uniform sampling,
and an episode outside the pool cannot be sampled at all. Inside the pool, transitions are drawn as the
sampler draws them from a dataset of those K episodes (so a long episode weighs more than a short one,
as in uniform sampling). Over time the bias fades: every episode enters the pool with the same
probability (replacements are uniform over the dataset, and each member stays for K replacements), so
the share of samples each transition gets approaches the uniform one as refreshes accumulate. Pool
mode therefore gives no same-seed reproducibility across runs unless ``pool_refresh_s=None`` and the
refreshes are called at the same steps (the pool's own draws then follow ``generator``'s seed).

Guarantees:

- an episode joins the index samplers see only after every chunk of it, in every leaf, is fetched,
  verified and written: a refresh never serves a half-written episode, and a refresh that fails
  (network gone, corrupt chunk) leaves the pool as it was and is reported by :meth:`pool_status`;
- the chunks of members are pinned: ``max_bytes`` eviction never takes them. A member that leaves the
  pool stays pinned one refresh longer, so a batch drawn just before a refresh still reads resident
  rows; a read of any other row is still served (fetched if needed, never garbage) and counted in
  ``pool_status()["reads_outside_pool"]``;
- ``max_bytes`` must hold K + 2 episodes (the members, one arriving, one leaving) plus the episode
  index, with the largest episodes of the build; a smaller budget is refused when the pool opens;
- ``pool_episodes`` larger than the dataset's episode count is refused.

Samplers must draw through the episode index: ``SliceSampler`` and its variants, ``WindowSampler``,
``GoalSampler``, ``NStepReturnSampler``, ``FullStackSampler`` (the pool's index carries its episodes'
history frame counts; history frames are always resident), or :class:`PoolSampler` (uniform rows of
the pool, the default). Samplers that draw row numbers over ``len(storage)`` (``RandomSampler``,
``SamplerWithoutReplacement``, ``PrioritizedSampler``) would read outside the pool and are refused.

A pickled pool (a DataLoader worker) follows its owner's pool: it reads the membership the owner
publishes in the local copy (``pools/<token>.members``) and never refreshes or evicts itself. The owner
holds a lock on that file while it lives; the membership files of owners killed before they could remove
them are swept by the next process that opens the copy (:func:`remove_orphan_pools`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.samplers import AnchorSampler, Sampler
from datasets_hub.buffers.samplers.episode_rows import EpisodeRows
from datasets_hub.errors import CacheError, InvalidParameter
from datasets_hub.files import open_nofollow, open_rw_nofollow, real_dirs
from datasets_hub.remote.chunks import always_resident
from datasets_hub.remote.files import RemoteFolder
from datasets_hub.remote.storage import ResidentStorage

POOL_DIR = "pools"
_HEADER = 3  # version, member count, retired member (-1: none)


def check_pool_params(pool_episodes: Any, pool_refresh_s: Any) -> None:
    """Refuse pool parameters that are not a positive episode count and a non-negative period (or None)."""
    if isinstance(pool_episodes, bool) or not isinstance(pool_episodes, int) or pool_episodes < 1:
        raise InvalidParameter(f"pool_episodes must be a positive number of episodes, got {pool_episodes!r}")
    if pool_refresh_s is not None and (
        isinstance(pool_refresh_s, bool)
        or not isinstance(pool_refresh_s, (int, float))
        or not 0 <= pool_refresh_s <= threading.TIMEOUT_MAX  # refuses nan (a busy loop) and inf (a dead thread)
    ):
        raise InvalidParameter(
            f"pool_refresh_s must be a finite number of seconds >= 0 (or None: refresh only by calling "
            f"refresh_pool()), got {pool_refresh_s!r}"
        )


def check_pool_sampler(sampler: Any) -> None:
    """Refuse a sampler that draws row numbers over the whole storage instead of through the episode
    index: in pool mode it would sample episodes that are not resident."""
    from datasets_hub.buffers.samplers import PrioritizedSampler, RandomSampler, SamplerWithoutReplacement

    inner = sampler
    while inner is not None:
        if isinstance(inner, (RandomSampler, SamplerWithoutReplacement, PrioritizedSampler)):
            raise InvalidParameter(
                f"resident='pool' samples only the episodes in the pool, but {type(inner).__name__} draws rows "
                "over the whole dataset; leave sampler=None (uniform rows of the pool) or use a sampler that "
                "goes through the episode index (SliceSampler, WindowSampler, GoalSampler, NStepReturnSampler)"
            )
        inner = inner.sampler if isinstance(inner, AnchorSampler) else None


class PoolSampler(Sampler):
    """Uniform over the transitions of the episodes in ``storage.episode_index()``: in pool mode, the
    rows of the resident pool (the default sampler of ``resident="pool"``); on a plain build, every row."""

    def __init__(self) -> None:
        self._rows = EpisodeRows()

    def sample(self, storage: Any, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        self._rows.refresh(storage)
        return torch.from_numpy(self._rows.draw(batch_size, self.generator)), {}


class PoolStorage(ResidentStorage):
    """A partially resident copy that shows samplers only its pool of K resident episodes (see the
    module docstring for the bias, the refresh and the guarantees).

    ``seed`` seeds the pool's own draws (initial members and replacements). ``follow`` (a pool token) makes
    a follower that reads another process's pool instead of owning one (what unpickling gives).
    """

    resident_mode = "pool"

    def __init__(
        self,
        path: Path,
        folder: RemoteFolder,
        published: dict[str, Any],
        *,
        pool_episodes: int,
        pool_refresh_s: float | None = 1.0,
        max_bytes: int | None = None,
        seed: int | None = None,
        follow: str | None = None,
    ) -> None:
        check_pool_params(pool_episodes, pool_refresh_s)
        super().__init__(path, folder, published, fill=False, max_bytes=max_bytes, resident="pool")
        total = self._index.num_episodes
        if pool_episodes > total:
            raise InvalidParameter(
                f"pool_episodes={pool_episodes} but {self.url} holds only {total} episodes: a pool cannot be larger "
                f"than the dataset; pass pool_episodes <= {total} (or resident='full' to keep all of it)"
            )
        self.pool_episodes = pool_episodes
        self.pool_refresh_s = pool_refresh_s
        self.draws = np.zeros(total, dtype=np.int64)  # how often each episode was drawn into the pool
        self.refreshes = 0
        self.reads_outside_pool = 0
        self._first, self._last = self._episode_chunks()
        self._members: list[int] = []  # oldest first
        self._retired: int | None = None
        self._version = -1
        self._pool_index = EpisodeIndex(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
        self._in_pool = np.zeros(total, dtype=bool)
        self._shown_members = np.zeros(0, dtype=np.int64)
        self._error: BaseException | None = None
        self._refresh_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._owner_pid = os.getpid() if follow is None else -1  # a forked child of the owner follows it
        self.token = follow if follow is not None else f"{os.getpid()}-{secrets.token_hex(4)}"
        members_path = path / POOL_DIR / f"{self.token}.members"
        if follow is not None:
            try:
                self._members_file = np.memmap(members_path, dtype=np.int64, mode="r")
            except OSError as exc:
                raise CacheError(
                    f"the pool {self.token} of {self.url} is gone (its owner closed it or exited): load the URL "
                    "again in this process"
                ) from exc
            self._sync()
            return
        self._check_budget(max_bytes)
        self._rng = np.random.default_rng(seed)
        initial = self._rng.choice(total, size=pool_episodes, replace=False).tolist()
        for episode in initial:
            self.chunks.pin(self.episode_span(episode), +1)
        self.chunks.ensure(self._chunks_of(initial))  # one concurrent fetch for the whole first pool
        self._members = [int(e) for e in initial]
        self.draws[initial] += 1
        real_dirs(path, members_path.parent)
        with _pools_lock(members_path.parent):  # a sweep never sees the file before its owner holds it
            with open_nofollow(members_path, "wb") as handle:  # never through a planted link
                handle.truncate((_HEADER + pool_episodes) * 8)
            with open_rw_nofollow(members_path) as handle:
                self._members_file = np.memmap(handle, dtype=np.int64, mode="r+", shape=(_HEADER + pool_episodes,))
            # held (shared) for the owner's life, by its forked workers too: while any holds it, no sweep removes
            # the file; when the last one dies (kill -9 included) the kernel lets go and a later sweep may
            self._owner_fd = os.open(members_path, os.O_RDONLY | os.O_NOFOLLOW)
            fcntl.flock(self._owner_fd, fcntl.LOCK_SH)
        self._publish()
        if pool_refresh_s is not None and pool_episodes < total:
            # the thread holds the storage weakly: a pool nobody uses any more stops refreshing
            self._thread = threading.Thread(
                target=_refresh_loop,
                args=(weakref.ref(self), self._stop, pool_refresh_s),
                name="datasets_hub-remote-pool",
                daemon=True,
            )
            self._thread.start()

    def __del__(self) -> None:  # dropped without close(): stop refreshing, remove the membership file
        with contextlib.suppress(Exception):
            self._stop.set()
            if self.owner:
                (self.path / POOL_DIR / f"{self.token}.members").unlink()
                os.close(self._owner_fd)

    @property
    def owner(self) -> bool:
        """Whether this process owns the pool (refreshes it); a pickled or forked copy follows the owner."""
        return self._owner_pid == os.getpid()

    # -- which chunks an episode needs --------------------------------------------------------------
    def _episode_chunks(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """First and last chunk of every episode in every leaf (obs leaves: T+1 rows per episode)."""
        start = self._start_np
        length = self._length.numpy()
        ordinal = np.arange(start.size, dtype=np.int64)
        first, last = {}, {}
        for name in self._obs_leaves + self._step_leaves:
            rows = int(self.chunks.arrays[name]["chunk_rows"])
            if name in self._blob_set:  # a compressed key: the bytes of the episode's T + 1 frames
                offsets = self._offsets[name]
                low, high = offsets[start + ordinal], np.maximum(offsets[start + ordinal + length + 1] - 1, 0)
            elif name in self._obs_leaves:
                low, high = start + ordinal, start + ordinal + length
            else:
                low, high = start, start + length - 1
            first[name], last[name] = low // rows, high // rows
        return first, last

    def episode_span(self, episode: int) -> dict[str, tuple[int, int]]:
        """First and last chunk, per leaf, that episode ``episode`` (an ordinal of the build) needs."""
        return {name: (int(self._first[name][episode]), int(self._last[name][episode])) for name in self._first}

    def _chunks_of(self, episodes: list[int]) -> dict[str, np.ndarray]:
        return {
            name: np.concatenate([np.arange(self._first[name][e], self._last[name][e] + 1) for e in episodes])
            for name in self._first
        }

    def episode_bytes(self) -> np.ndarray:
        """Bytes of the chunks each episode needs (whole chunks: an upper bound of its resident size)."""
        total = np.zeros(self._start_np.size, dtype=np.int64)
        for name in self._first:
            per_chunk = int(self.chunks.arrays[name]["chunk_rows"]) * self.chunks.row_bytes[name]
            total += (self._last[name] - self._first[name] + 1) * per_chunk
        return total

    def _check_budget(self, max_bytes: int | None) -> None:
        if max_bytes is None:
            return
        sizes = np.sort(self.episode_bytes())[::-1]
        pinned = int(sizes[: self.pool_episodes + 2].sum())
        index = sum(  # the episode index and history frames: always resident
            self.chunks.chunk_bytes(name, chunk)
            for name, spec in self.chunks.arrays.items()
            if always_resident(name)
            for chunk in range(int(spec["chunks"]))
        )
        if pinned + index > max_bytes:
            raise InvalidParameter(
                f"max_bytes={max_bytes:,} cannot hold a pool of {self.pool_episodes} episodes of {self.url}: with "
                f"its largest episodes, {self.pool_episodes} members + 1 arriving + 1 leaving need up to "
                f"{pinned:,} bytes, plus {index:,} for the episode index; raise max_bytes to at least "
                f"{pinned + index:,} or lower pool_episodes"
            )

    # -- membership ---------------------------------------------------------------------------------
    def _publish(self) -> None:
        """Show samplers the current members (owner): a new episode index, and the shared membership file."""
        members = np.sort(np.asarray(self._members, dtype=np.int64))
        with self.chunks.locked(exclusive=True):
            self._members_file[_HEADER : _HEADER + members.size] = members
            self._members_file[1] = members.size
            self._members_file[2] = -1 if self._retired is None else self._retired
            self._members_file[0] += 1  # a shared mapping: other processes see it at once (no msync needed)
        self._show(members, self._retired, int(self._members_file[0]))

    def _show(self, members: np.ndarray, retired: int | None, version: int) -> None:
        in_pool = np.zeros(self._start_np.size, dtype=bool)  # replaced whole, never mutated: readers race it
        in_pool[members] = True
        if retired is not None:
            in_pool[retired] = True
        self._shown_members = members
        rows = torch.from_numpy(members)
        # history frames are always resident: FullStackSampler counts them for the pool's episodes too
        history = self.history_index()[1][rows].clone() if self.history_keys() else None
        self._pool_index = EpisodeIndex(self._start[rows].clone(), self._length[rows].clone(), history)
        self._in_pool = in_pool
        self._version = version

    def _sync(self) -> None:
        """A follower's view of its owner's pool, reread when the owner published a new one."""
        if self.owner or int(self._members_file[0]) == self._version:
            return
        self.chunks.max_bytes = None  # a follower never evicts: the owner keeps the budget and its pins
        with self.chunks.locked(exclusive=False):
            header = np.array(self._members_file[:_HEADER])
            members = np.array(self._members_file[_HEADER : _HEADER + int(header[1])])
        self._show(members, None if header[2] < 0 else int(header[2]), int(header[0]))

    def episode_index(self) -> EpisodeIndex:
        """The episodes of the pool (not of the whole build): what samplers draw from."""
        self._sync()
        return self._pool_index

    def members(self) -> list[int]:
        """The pool's episodes, as ordinals of the build's episode index, sorted."""
        self._sync()
        return self._shown_members.tolist()

    # -- reads ------------------------------------------------------------------------------------
    def _reading(self, rows: np.ndarray) -> None:
        episode = np.searchsorted(self._start_np, rows, side="right") - 1
        self.reads_outside_pool += int(np.count_nonzero(~self._in_pool[episode]))

    def gather_key(self, key: str | tuple[str, ...], rows: Any, **kw: Any) -> Any:
        kw.pop("episodes", None)  # a sampler's episode ordinals are the pool's, not the build's: not a hint here
        return super().gather_key(key, rows, **kw)

    # -- refreshing ---------------------------------------------------------------------------------
    def refresh_pool(self, episodes: int = 1) -> int:
        """Replace the ``episodes`` oldest members, one at a time, by episodes drawn uniformly among those
        outside the pool; return how many were replaced. Each newcomer is fetched whole before it joins.
        A failure (a chunk that cannot be had) leaves the pool as it was and raises."""
        if not self.owner:
            raise InvalidParameter("a pickled pool follows its owner's pool; call refresh_pool() in the owner process")
        total = self._start_np.size
        done = 0
        with self._refresh_lock:
            for _ in range(episodes):
                if len(self._members) >= total:
                    break
                member = np.zeros(total, dtype=bool)
                member[self._members] = True
                if 2 * len(self._members) <= total:  # rejection: at most two draws on average
                    new = int(self._rng.integers(total))
                    while member[new]:
                        new = int(self._rng.integers(total))
                else:
                    new = int(self._rng.choice(np.flatnonzero(~member)))
                span = self.episode_span(new)
                self.chunks.pin(span, +1)
                try:
                    self.chunks.ensure(self._chunks_of([new]))
                except BaseException:
                    self.chunks.pin(span, -1)
                    raise
                leaving = self._members.pop(0)
                self._members.append(new)
                before, self._retired = self._retired, leaving
                self._publish()
                if before is not None:  # left the pool one refresh ago: now its chunks may be evicted
                    self.chunks.pin(self.episode_span(before), -1)
                self.draws[new] += 1
                self.refreshes += 1
                done += 1
        return done

    def refresh_failed(self, error: BaseException | None) -> None:
        """Record the background refresh's last error (``None`` after a refresh that worked)."""
        self._error = error

    def pool_status(self) -> dict[str, Any]:
        """The pool now: members (episode ordinals), size, refreshes done, the draws per episode so far,
        rows read outside the pool, and the last refresh error (``None`` when the last refresh worked)."""
        return {
            "members": self.members(),
            "pool_episodes": self.pool_episodes,
            "episodes": int(self._start_np.size),
            "refreshes": self.refreshes,
            "draws": self.draws.copy(),
            "reads_outside_pool": self.reads_outside_pool,
            "resident_bytes": self.chunks.resident_bytes(),
            "error": None if self._error is None else repr(self._error),
        }

    # -- pickling and closing -----------------------------------------------------------------------
    def pickle_state(self) -> dict[str, Any]:
        return {**super().pickle_state(), "pool_episodes": self.pool_episodes, "pool_token": self.token}

    @classmethod
    def from_pickle_state(
        cls, path: Path, folder: RemoteFolder, published: dict[str, Any], state: dict[str, Any]
    ) -> ResidentStorage:
        return cls(path, folder, published, pool_episodes=state["pool_episodes"], follow=state["pool_token"])

    def close(self) -> None:
        self._stop.set()
        if not self.owner:
            super().close()
            return
        if self._thread is not None:
            self._thread.join()
        with contextlib.suppress(OSError):
            (self.path / POOL_DIR / f"{self.token}.members").unlink()
        with contextlib.suppress(OSError, AttributeError):
            os.close(self._owner_fd)
            del self._owner_fd  # closed once (close() then __del__)
        super().close()


@contextlib.contextmanager
def _pools_lock(folder: Path) -> Iterator[None]:
    """Exclusive lock over a copy's ``pools/`` folder: creating a membership file, sweeping orphans."""
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def remove_orphan_pools(path: Path) -> int:
    """Remove the membership files of pools whose owner is gone (killed with -9, say: ``close()`` never ran)
    from the local copy at ``path``; return how many. A file is an orphan when no process holds its lock (its
    owner and the owner's forked workers hold it while they live); the pool of a live process is never
    touched, and a follower already reading an orphan keeps its mapping."""
    folder = path / POOL_DIR
    if not folder.is_dir():
        return 0
    removed = 0
    with _pools_lock(folder):
        for members in folder.glob("*.members"):
            try:
                fd = os.open(members, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live owner holds it
            else:
                members.unlink(missing_ok=True)
                removed += 1
            finally:
                os.close(fd)
    return removed


def _refresh_loop(pool: weakref.ref[PoolStorage], stop: threading.Event, period: float) -> None:
    """The background refresh: one replacement, then ``period`` seconds of rest, until ``stop`` is set or
    the pool is gone. A failure is kept for ``pool_status()`` and retried at most once a second."""
    while not stop.wait(period):
        storage = pool()
        if storage is None:
            return
        try:
            storage.refresh_pool(1)
            storage.refresh_failed(None)
        except BaseException as exc:  # noqa: BLE001 - kept for pool_status(); the pool stays as it was
            storage.refresh_failed(exc)
            del storage
            if stop.wait(max(period, 1.0)):
                return
        else:
            del storage
