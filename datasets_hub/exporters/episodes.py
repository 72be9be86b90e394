"""A build read episode by episode for the format writers of :mod:`datasets_hub.exporters`.

Every writer walks a build through :class:`BuildEpisodes`: one episode's values at a time, copied
out of the build's memory maps (so an export holds one episode in memory, whatever the build's
size). An episode of ``T`` steps gives

- ``observations[k]``: ``[T + 1, *shape]`` for every observation-like key ``k`` (row ``t`` = the
  value at time ``t``; row ``T`` = the next value after the last step). Keys whose next values the
  build stores per step (``layout["next_stored_per_step"]``, upstream next values that are not the
  following rows) are listed in :attr:`BuildEpisodes.next_per_step`; their next values are in
  ``steps[("next", *k)]`` and row ``T`` of ``observations[k]`` is then the build's row as stored;
  Camera keys a build stores compressed (``frames="jpeg"`` / ``"png"``) are decoded: an export holds
  the values the build serves;
- ``steps[k]``: ``[T, *shape]`` for every per-step key, as the build names them (``action``,
  ``("next", "reward")``, ``("next", "terminated")``, ``("next", "truncated")``, ``("info", ...)``).

Frames a build keeps before its episodes' first steps (``history/``, frame stacks) are no
transitions: no exporter writes them (:attr:`BuildEpisodes.has_history` tells).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from datasets_hub.buffers.nested_keys import Key
from datasets_hub.build.frames import FrameColumn
from datasets_hub.build.reader import OpenedBuild
from datasets_hub.errors import InvalidParameter

REWARD: Key = ("next", "reward")
TERMINATED: Key = ("next", "terminated")
TRUNCATED: Key = ("next", "truncated")


def _rows(column: torch.Tensor | FrameColumn, start: int, stop: int) -> np.ndarray:
    """Rows ``start..stop-1`` of a leaf as a fresh array (compressed frames decoded: the build's values)."""
    if isinstance(column, FrameColumn):
        return column.take(np.arange(start, stop))
    return np.array(column.numpy()[start:stop])


@dataclass(frozen=True)
class Episode:
    """One episode of a build (see the module docstring)."""

    position: int  #: 0-based position in the build
    id: int  #: the build's ``episodes/id``
    length: int
    observations: dict[Key, np.ndarray]
    steps: dict[Key, np.ndarray]


@dataclass(frozen=True)
class Column:
    """dtype and per-row shape of one key."""

    dtype: np.dtype
    shape: tuple[int, ...]


class BuildEpisodes:
    """The episodes of an opened build, in build order, one at a time."""

    def __init__(self, build: OpenedBuild) -> None:
        self.build = build
        self.observation_keys: list[Key] = list(build.obs)
        self.step_keys: list[Key] = list(build.steps)
        self.next_per_step: frozenset[Key] = frozenset(k for k in build.obs if k not in build.shared_next)
        self.starts = build.episodes["start"].numpy()
        self.lengths = build.episodes["length"].numpy()
        self.ids = build.episodes["id"].numpy()
        self.has_history = bool(build.history)

    def __len__(self) -> int:
        return len(self.lengths)

    def require_one_observation_per_step_with_action_and_reward(self, holds: str, needs: str) -> list[Key]:
        """Refuse a build a format whose steps hold one observation each cannot hold: next values stored per
        step (not the following observations), or no action or ``("next", "reward")`` key. ``holds`` and
        ``needs`` finish the messages (``"an RLDS step holds one observation"``, ``"every RLDS step has an
        action and a reward"``). Returns the action keys, sorted."""
        if self.next_per_step:
            shown = "/".join(sorted(self.next_per_step)[0])
            raise InvalidParameter(
                f"the build stores the next values of {shown!r} per step (they are not the following observations); "
                f"{holds} and cannot hold them. Export with format='hf'"
            )
        steps = set(self.step_keys)
        actions = sorted(k for k in steps if k[0] == "action")
        if not actions or REWARD not in steps:
            missing = "action" if not actions else "next/reward"
            raise InvalidParameter(f"{needs}; this build has no {missing!r} key")
        return actions

    @property
    def transitions(self) -> int:
        return self.build.transitions

    def column(self, key: Key) -> Column:
        """dtype and per-row shape of an observation or step key."""
        tensor = self.build.obs[key] if key in self.build.obs else self.build.steps[key]
        if isinstance(tensor, FrameColumn):  # a compressed camera key: uint8 frames once decoded
            return Column(np.dtype(np.uint8), tuple(int(d) for d in tensor.frame_shape))
        if tensor.dtype in (torch.bfloat16, torch.complex64, torch.complex128):
            raise InvalidParameter(
                f"key {'/'.join(key)!r} is {str(tensor.dtype).removeprefix('torch.')}, which no export format holds; "
                "cast it to float32 with load(..., preprocess=fn) and export that buffer"
            )
        return Column(np.dtype(tensor.numpy().dtype), tuple(int(d) for d in tensor.shape[1:]))

    def __iter__(self) -> Iterator[Episode]:
        for e in range(len(self)):
            yield self.episode(e)

    def episode(self, e: int) -> Episode:
        """Episode ``e``: its values copied out of the build (the memory maps stay untouched)."""
        start, length = int(self.starts[e]), int(self.lengths[e])
        first_obs = start + e  # every earlier episode has one more observation row than steps
        observations = {k: _rows(v, first_obs, first_obs + length + 1) for k, v in self.build.obs.items()}
        steps = {k: np.array(v.numpy()[start : start + length]) for k, v in self.build.steps.items()}
        return Episode(position=e, id=int(self.ids[e]), length=length, observations=observations, steps=steps)


def group_paths(keys: list[Key], head: str, container: str) -> dict[Key, tuple[str, ...]]:
    """Build keys -> entry paths inside one nested ``container`` (a Minari ``Dict`` space, an RLDS
    ``FeaturesDict``): the single key ``(head,)`` is the container's value itself (path ``()``),
    otherwise a leading ``head`` level is dropped (``observation/a`` -> ``a``, ``pixels`` -> ``pixels``).
    Refuses keys that would land on one path, or a value that is also a group of others."""
    if keys == [(head,)]:
        return {keys[0]: ()}
    paths = {k: k[1:] if k[0] == head and len(k) > 1 else k for k in keys}
    clash = sorted(p for p in paths.values() if any(q != p and q[: len(p)] == p for q in paths.values()))
    if clash or len(set(paths.values())) != len(paths):
        raise InvalidParameter(
            f"the {head} keys {sorted('/'.join(k) for k in keys)} cannot be entries of one {container} "
            "(one would be both a value and a group of others); rename them before exporting"
        )
    return paths
