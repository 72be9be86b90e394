"""Sequence windows around sampled steps, with edge padding and ``<key>_is_pad`` masks (docs/guide/sampling.md).

What Diffusion Policy, ACT and Decision Transformer consume, and what LeRobot's ``delta_timestamps``
describe: for each sampled anchor step ``t`` of an episode, the rows ``t + o * stride`` for a list of
offsets ``o`` (e.g. ``-1, 0`` for two observation frames and ``0 .. 15`` for an action chunk).

Contract of :class:`WindowSampler` (samples of a ``TensorDictReplayBuffer``, which is what
``datasets_hub.load`` returns):

- The sample keeps its batch size ``[B]`` (one row per anchor, every other key at the anchor).
- Each window key becomes ``[B, T, *shape]`` (``T`` = that key's number of offsets, ``+ burn_in``),
  holding rows ``t + o * stride`` of the anchor's own episode, in offset order; dtype unchanged.
- A position outside the episode (before its first or after its last row) repeats the nearest
  edge row and is flagged True in ``<key>_is_pad`` (``[B, T]`` bool; for a nested key the flag sits
  beside it: ``("next", "observation_is_pad")``). A window never holds a row of another episode.
- ``burn_in=k`` prepends ``k`` positions before each key's first offset (offsets
  ``first - k .. first - 1``, times ``stride``): positions ``[:k]`` of every window are burn-in.
- ``pad=False`` draws only anchors whose windows lie wholly inside their episode (then no position
  is padded; episodes too short for the window are never drawn).
- Per call: ``O(B * T)`` rows read for the window keys only, one ``searchsorted`` over the episodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch

from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.samplers.episode_rows import AnchorDraw, AnchorSampler
from datasets_hub.buffers.storages import Storage
from datasets_hub.errors import InvalidParameter

NestedKey = Any


def _key(key: NestedKey) -> tuple[str, ...]:
    if isinstance(key, str):
        return (key,)
    if isinstance(key, tuple) and key and all(isinstance(k, str) for k in key):
        return key
    raise TypeError(f"a key is a string or a tuple of strings, got {key!r}")


def pad_key(key: NestedKey, suffix: str = "_is_pad") -> NestedKey:
    """The mask key of a window key: ``"action"`` -> ``"action_is_pad"``, ``("next", "obs")`` ->
    ``("next", "obs_is_pad")``."""
    key = _key(key)
    out = (*key[:-1], key[-1] + suffix)
    return out[0] if len(out) == 1 else out


def _offsets(value: Iterable[int], key: tuple[str, ...]) -> np.ndarray:
    try:
        offs = np.asarray(list(value))
    except TypeError:
        raise TypeError(f"offsets of {'/'.join(key)!r} must be a sequence of ints, got {value!r}") from None
    if offs.ndim != 1 or offs.size == 0 or not np.issubdtype(offs.dtype, np.integer):
        raise ValueError(
            f"offsets of {'/'.join(key)!r} must be a non-empty sequence of ints (steps relative to the "
            f"anchor, e.g. range(-1, 16)), got {value!r}; to give seconds, convert with the frame rate"
        )
    return offs.astype(np.int64)


class WindowSampler(AnchorSampler):
    """Anchor steps plus, for each window key, the rows at fixed offsets around them (see module docstring).

    ``offsets`` is either a mapping ``{key: offsets}`` (keys may differ in offsets, as LeRobot's
    ``delta_timestamps`` do) or one sequence of offsets applied to every key of ``keys``
    (default ``("observation", "action")``). ``stride`` multiplies every offset (frame skip).
    ``sampler`` draws the anchors (default: uniform over every row in an episode); ``traj_key`` /
    ``end_key`` say where episodes are in an online buffer (as for ``SliceSampler``).
    """

    def __init__(
        self,
        offsets: Mapping[NestedKey, Iterable[int]] | Iterable[int],
        keys: Iterable[NestedKey] | None = None,
        *,
        stride: int = 1,
        burn_in: int = 0,
        pad: bool = True,
        sampler: Sampler | None = None,
        traj_key: NestedKey | None = None,
        end_key: NestedKey | None = None,
        pad_suffix: str = "_is_pad",
    ) -> None:
        super().__init__(sampler=sampler, traj_key=traj_key, end_key=end_key)
        for name, value, low in (("stride", stride, 1), ("burn_in", burn_in, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        items: list[tuple[tuple[str, ...], Any]]
        if isinstance(offsets, Mapping):
            if keys is not None:
                raise ValueError("give the window keys either as the offsets mapping's keys or as keys=, not both")
            items = [(_key(k), v) for k, v in offsets.items()]
        else:
            keys = ("observation", "action") if keys is None else keys
            if isinstance(keys, str):
                keys = [keys]
            offsets = list(offsets)
            items = [(_key(k), offsets) for k in keys]
        if not items:
            raise ValueError("WindowSampler needs at least one window key")
        self.windows: dict[tuple[str, ...], np.ndarray] = {}
        for key, value in items:
            offs = _offsets(value, key)
            if burn_in:
                offs = np.concatenate([np.arange(offs[0] - burn_in, offs[0], dtype=np.int64), offs])
            self.windows[key] = offs * stride
        self.stride, self.burn_in, self.pad = stride, burn_in, bool(pad)
        self.pad_suffix = pad_suffix
        if not self.pad and sampler is not None:
            raise ValueError(
                "pad=False draws its own anchors (only those whose windows fit in their episode); it cannot "
                "use an inner sampler: drop sampler=, or keep pad=True and use the _is_pad masks"
            )
        every = np.concatenate(list(self.windows.values()))
        self._lo, self._hi = int(every.min()), int(every.max())
        self._fit: tuple[int, np.ndarray, np.ndarray, int] | None = None

    @property
    def window_keys(self) -> list[NestedKey]:
        return [k[0] if len(k) == 1 else k for k in self.windows]

    # -- anchors whose windows fit (pad=False) -----------------------------------------------------
    def _fitting(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, np.ndarray, np.ndarray, dict]:
        eps = self.episodes
        eps.refresh(storage)
        if self._fit is None or self._fit[0] != eps.version:
            first = max(0, -self._lo)  # first anchor step whose window starts inside the episode
            count = np.maximum(eps.length - first - max(0, self._hi), 0)
            self._fit = (eps.version, np.cumsum(count), count, first)
        _, cum, count, first = self._fit
        total = int(cum[-1]) if cum.size else 0
        if total == 0:
            raise RuntimeError(
                f"no episode is long enough for windows spanning offsets {self._lo}..{self._hi} without padding "
                f"(longest episode: {int(eps.length.max()) if eps.length.size else 0} rows): use pad=True "
                "(edge rows repeated, flagged in <key>_is_pad) or shorter windows"
            )
        u = torch.randint(total, (batch_size,), generator=self.generator).numpy()
        e = np.searchsorted(cum, u, side="right")
        rows = u - (cum[e] - count[e]) + eps.start[e] + first
        return torch.from_numpy(rows), rows, e, {}

    # -- sampling ---------------------------------------------------------------------------------
    def draw_batch(self, storage: Storage, batch_size: int) -> AnchorDraw:
        """The anchors: any row of an episode (``pad=True``, or the inner sampler's), else only rows whose
        windows fit in their episode."""
        if self.pad:
            return super().draw_batch(storage, batch_size)
        index, rows, episode, info = self._fitting(storage, batch_size)
        return AnchorDraw(index, rows, episode, info, None, False)

    def sample_at(
        self, storage: Storage, index: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[NestedKey, Any]]:
        """The windows at anchors ``index`` (``pad=True``: every row of an episode is an anchor)."""
        if not self.pad:
            raise InvalidParameter(
                "WindowSampler(pad=False) draws only the anchors whose windows fit in their episode, so a map-style "
                "view of every row has no item at the others: use pad=True (edge rows repeated, flagged in "
                "<key>_is_pad, as LeRobot's dataset[i] gives them), or iterate sampled batches (rb.as_iterable_dataset())"
            )
        return super().sample_at(storage, index, generator)

    def draw_batches(self, storage: Storage, k: int, batch_size: int) -> AnchorDraw:
        """``k`` batches' anchors; without an inner sampler, in one draw of ``k * batch_size`` rows."""
        if self.sampler is not None:
            return super().draw_batches(storage, k, batch_size)
        drawn = self.draw_batch(storage, k * batch_size)
        drawn.batch = batch_size
        return drawn

    def finish(self, storage: Storage, drawn: AnchorDraw) -> tuple[torch.Tensor, dict[NestedKey, Any], Any]:
        """The windows of ``drawn``'s anchors (row-wise)."""
        info = drawn.info
        info.update(self.windows_at(storage, drawn.rows, drawn.episode))
        return drawn.index, info, None

    def windows_at(self, storage: Storage, rows: np.ndarray, episode: np.ndarray) -> dict[NestedKey, torch.Tensor]:
        """The window tensors and ``_is_pad`` masks for anchor ``rows`` of episodes ``episode``
        (ordinals of ``self.episodes``, refreshed for ``storage``)."""
        eps = self.episodes
        start, length = eps.start[episode], eps.length[episode]
        step = rows - start
        b = rows.size
        out: dict[NestedKey, torch.Tensor] = {}
        for key, offs in self.windows.items():
            pos = step[:, None] + offs[None, :]
            is_pad = (pos < 0) | (pos >= length[:, None])
            pos = np.clip(pos, 0, length[:, None] - 1)
            flat = torch.from_numpy((start[:, None] + pos).reshape(-1))
            try:
                value = storage.gather_key(
                    key if len(key) > 1 else key[0], flat, **eps.hint(np.repeat(episode, offs.size))
                )
            except KeyError:
                raise KeyError(
                    f"window key {'/'.join(key)!r} is not in the stored data: name a stored key "
                    "(e.g. 'observation', 'action', ('next', 'reward'))"
                ) from None
            name = key[0] if len(key) == 1 else key
            out[name] = value.reshape(b, offs.size, *value.shape[1:])
            out[pad_key(key, self.pad_suffix)] = torch.from_numpy(is_pad)
        return out

    def __repr__(self) -> str:
        wins = ", ".join(f"{'/'.join(k)}: {v.tolist()}" for k, v in self.windows.items())
        return f"WindowSampler({{{wins}}}, stride={self.stride}, burn_in={self.burn_in}, pad={self.pad})"
