"""Returns at sample time from one stored reward-to-go column (docs/guide/sampling.md).

TorchRL computes n-step returns when data is written (``MultiStepTransform``), so a new ``n`` or
``gamma`` means rewriting the buffer. Here a build stores, once, the per-episode discounted
reward-to-go ``R_t = sum_{k >= t} gamma^(k-t) r_k`` (``rb.preprocess(ReturnToGo(gamma))`` or
``load(id, preprocess=ReturnToGo(gamma))``: cached and fingerprinted, see
:mod:`datasets_hub.buffers.returns`), and :class:`NStepReturnSampler` turns it into any n-step
return in O(1) per sampled row:

- ``m = min(n, L - t)`` steps (fewer near the episode end, never across it);
- ``G = R_t - gamma^m R_{t+m}`` (``R_{t+m} = 0`` when ``t + m`` is the episode end): the discounted
  sum of the ``m`` rewards ``r_t .. r_{t+m-1}``;
- the bootstrap state ``s_{t+m}`` is ``("next", key)`` of row ``t + m - 1``;
- the bootstrap mask is False only when the window reaches the end of a *terminated* episode (no
  value after a true end); a truncated (time-limit) end is bootstrapped.

The full target is ``G + discount * mask * V(s_{t+m})``. What a sample gains (``[B]`` rows;
``TensorDictReplayBuffer`` writes the sampler's info into it):

- ``("n_step", "return")`` ``[B, 1]`` float64: ``G``; ``("n_step", "steps")`` int64: ``m``;
  ``("n_step", "discount")`` ``[B, 1]`` float64: ``gamma^m``; ``("n_step", "mask")`` ``[B, 1]`` bool;
- ``("n_step", *key)`` for each of ``obs_keys`` (default ``("observation",)``): ``s_{t+m}``;
- ``("n_step", "mc_return")`` ``[B, 1]`` float64: the Monte-Carlo return ``R_t`` (Cal-QL's ``mc_return``).

``n`` is an int, or ``(low, high)`` to draw ``n`` per row uniformly from ``low .. high`` (inclusive)
with the buffer's generator. The column must have been computed with the same ``gamma`` (the sampler
cannot know which ``gamma`` a stored column used; name it after its ``gamma`` when you store several).
Decision Transformer's undiscounted return-to-go is the column itself with ``gamma = 1``
(``ReturnToGo(1.0)``); windows of it come from :class:`~datasets_hub.buffers.samplers.window.WindowSampler`.
Precision: ``G`` is a difference of two stored values, exact to about ``eps(dtype) * |R|``; store the
column as float64 (``ReturnToGo(gamma, dtype=torch.float64)``) when rewards are large or episodes long.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.samplers.episode_rows import AnchorDraw, AnchorSampler
from datasets_hub.buffers.storages import Storage

NestedKey = Any


def _key(key: NestedKey) -> tuple[str, ...]:
    if isinstance(key, str):
        return (key,)
    if isinstance(key, tuple) and key and all(isinstance(k, str) for k in key):
        return key
    raise TypeError(f"a key is a string or a tuple of strings, got {key!r}")


def _flat(key: tuple[str, ...]) -> NestedKey:
    return key[0] if len(key) == 1 else key


class NStepReturnSampler(AnchorSampler):
    """Transitions plus their n-step return, bootstrap state and mask, from a stored reward-to-go
    column (see the module docstring). ``sampler`` draws the transitions (default: uniform over every
    row in an episode); ``traj_key`` / ``end_key`` say where episodes are in an online buffer."""

    def __init__(
        self,
        gamma: float,
        n: int | tuple[int, int] = 1,
        *,
        rtg_key: NestedKey = "return_to_go",
        obs_keys: Any = ("observation",),
        terminated_key: NestedKey = ("next", "terminated"),
        sampler: Sampler | None = None,
        traj_key: NestedKey | None = None,
        end_key: NestedKey | None = None,
    ) -> None:
        super().__init__(sampler=sampler, traj_key=traj_key, end_key=end_key)
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 <= float(gamma) <= 1.0:
            raise ValueError(f"gamma must be a number in [0, 1] (the discount of the stored column), got {gamma!r}")
        self.gamma = float(gamma)
        if isinstance(n, tuple):
            ok = len(n) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in n) and 1 <= n[0] <= n[1]
            if not ok:
                raise ValueError(f"n=(low, high) needs ints with 1 <= low <= high, got {n!r}")
            self.n_range: tuple[int, int] = (int(n[0]), int(n[1]))
        elif isinstance(n, int) and not isinstance(n, bool) and n >= 1:
            self.n_range = (n, n)
        else:
            raise ValueError(f"n must be an int >= 1 or a (low, high) range, got {n!r}")
        self.rtg_key = _key(rtg_key)
        if isinstance(obs_keys, str):
            obs_keys = [obs_keys]
        self.obs_keys = [_key(k) for k in obs_keys]
        self.terminated_key = _key(terminated_key)
        self._pow: np.ndarray | None = None
        self._term: tuple[int, np.ndarray] | None = None

    def _powers(self, m: int) -> np.ndarray:
        """``gamma ** k`` for ``k = 0 .. m`` (cached, grown on demand)."""
        if self._pow is None or self._pow.size <= m:
            self._pow = np.power(self.gamma, np.arange(max(m + 1, 64), dtype=np.float64))
        return self._pow

    def _bootstraps(self, storage: Storage) -> np.ndarray:
        """Per episode: whether its end is bootstrapped (its last row is not a true end); read once
        per episode layout, O(episodes)."""
        eps = self.episodes
        if self._term is None or self._term[0] != eps.version:
            flags = self._read(
                storage,
                self.terminated_key,
                eps.end - 1,
                "pass terminated_key=<the key of true-end flags>",
                **eps.hint(np.arange(eps.end.size)),
            )
            self._term = (eps.version, ~flags.reshape(-1).to(torch.bool).numpy())
        return self._term[1]

    def empty(self) -> None:
        super().empty()
        self._term = None

    def _read(self, storage: Storage, key: tuple[str, ...], rows: np.ndarray, hint: str, **kw: Any) -> torch.Tensor:
        try:
            return storage.gather_key(_flat(key), torch.from_numpy(rows), **kw)
        except KeyError:
            raise KeyError(f"{'/'.join(key)!r} is not in the stored data: {hint}") from None

    def draw_batch(self, storage: Storage, batch_size: int) -> AnchorDraw:
        """The anchors, then (for ``n=(low, high)``) each row's ``n``."""
        index, rows, episode, info, promised = self.anchor_rows(storage, batch_size)
        low, high = self.n_range
        n = None if low == high else torch.randint(low, high + 1, (rows.size,), generator=self.generator).numpy()
        return AnchorDraw(index, rows, episode, info, n, promised)

    def draws_at(self, rows: int, generator: torch.Generator | None) -> np.ndarray | None:
        """Each given anchor's ``n`` (for ``n=(low, high)``; nothing for a fixed ``n``)."""
        low, high = self.n_range
        return None if low == high else torch.randint(low, high + 1, (rows,), generator=generator).numpy()

    def draw_batches(self, storage: Storage, k: int, batch_size: int) -> AnchorDraw:
        """``k`` batches' draws; with a fixed ``n`` and no inner sampler, the anchors of all ``k`` in one draw."""
        low, high = self.n_range
        if self.sampler is None and low == high:
            index, rows, episode, info, promised = self.anchor_rows(storage, k * batch_size)
            return AnchorDraw(index, rows, episode, info, None, promised, batch_size)
        return super().draw_batches(storage, k, batch_size)

    def finish(self, storage: Storage, drawn: AnchorDraw) -> tuple[torch.Tensor, dict[NestedKey, Any], Any]:
        """The n-step returns, bootstrap states and masks of ``drawn``'s anchors (row-wise)."""
        index, rows, episode, info = drawn.index, drawn.rows, drawn.episode, drawn.info
        eps = self.episodes
        b = rows.size
        low, high = self.n_range
        n: Any = low if drawn.draws is None else drawn.draws
        left = eps.end.take(episode)
        left -= rows  # >= 1: rows to the episode end
        steps = np.minimum(left, n)  # m = min(n, L - t): never past the episode end
        inside = left > n  # t + m is still in the episode: R_{t+m} is stored there
        # one read of the column serves R_t and R_{t+m} (where t + m is the episode end, R is 0: the row
        # read there, kept inside the storage, is not used)
        both = np.empty(2 * b, dtype=np.int64)
        both[:b] = rows
        later = both[b:]
        np.add(rows, steps, out=later)
        last = later - 1  # s_{t+m} is the state after row t + m - 1: ("next", key) there
        stored = self._read(
            storage,
            self.rtg_key,
            np.minimum(both, len(storage) - 1, out=both),
            "store a reward-to-go column first, e.g. rb = rb.preprocess(ReturnToGo(gamma)) or "
            "load(id, preprocess=ReturnToGo(gamma)), or pass rtg_key=<its key>",
        )
        column = stored.numpy().reshape(2, b)
        if column.dtype != np.float64:
            column = column.astype(np.float64)
        r_now = column[0]
        discount = self._powers(high).take(steps)  # gamma^m from a table of powers
        value = np.where(inside, column[1], 0.0)
        value *= discount
        np.subtract(r_now, value, out=value)
        mask = self._bootstraps(storage).take(episode)
        mask |= inside
        hint = eps.hint(episode)
        last_t = torch.from_numpy(last)
        for key in self.obs_keys:
            try:
                info[("n_step", *key)] = storage.gather_key(_flat(("next", *key)), last_t, **hint)
            except KeyError:
                raise KeyError(
                    f"{'/'.join(('next', *key))!r} is not in the stored data: pass obs_keys=[...] naming the "
                    "observation keys to bootstrap from"
                ) from None
        info[("n_step", "return")] = torch.from_numpy(value.reshape(b, 1))
        info[("n_step", "steps")] = torch.from_numpy(steps)
        info[("n_step", "discount")] = torch.from_numpy(discount.reshape(b, 1))
        info[("n_step", "mask")] = torch.from_numpy(mask.reshape(b, 1))
        info[("n_step", "mc_return")] = torch.from_numpy(r_now.reshape(b, 1))  # this batch's own memory
        return index, info, rows if drawn.promised else None

    def __repr__(self) -> str:
        low, high = self.n_range
        n = low if low == high else (low, high)
        return f"NStepReturnSampler(gamma={self.gamma}, n={n}, rtg_key={_flat(self.rtg_key)!r})"
