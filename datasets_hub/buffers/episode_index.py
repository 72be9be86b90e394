"""Where episodes start and how long they are: the index slice samplers stand on.

A read-only dataset build writes this index once (docs/design/on-disk.md); an online buffer derives it from
its ``episode`` ids or its ``("next", "done")`` flags and keeps it until the next write.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class EpisodeIndex:
    """Episodes as contiguous row ranges ``[start[e], start[e] + length[e])`` of a storage.

    Contract: ``start`` and ``length`` are 1-D int64 tensors of equal size, ``start`` strictly
    increasing, every ``length >= 1``, ranges disjoint. Rows not covered by any range (an online
    buffer's unfinished tail, say) belong to no episode.
    """

    start: torch.Tensor
    length: torch.Tensor
    #: optional: how many history frames (frames before an episode's first transition, for frame stacking)
    #: each episode has, for an index over some episodes of a build (a remote pool's); ``None``: the storage's
    #: ``history_index()`` (in build order) says, if it keeps any
    history: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.start.dtype != torch.int64 or self.length.dtype != torch.int64:
            raise TypeError("EpisodeIndex start and length must be int64 tensors")
        if self.start.shape != self.length.shape or self.start.ndim != 1:
            raise ValueError(
                f"EpisodeIndex start {tuple(self.start.shape)} and length {tuple(self.length.shape)} "
                "must be 1-D tensors of the same size"
            )
        if self.history is not None and self.history.shape != self.start.shape:
            raise ValueError(
                f"EpisodeIndex history {tuple(self.history.shape)} must have one count per episode "
                f"{tuple(self.start.shape)}"
            )

    @property
    def num_episodes(self) -> int:
        return int(self.start.numel())

    @property
    def num_transitions(self) -> int:
        return int(self.length.sum()) if self.length.numel() else 0

    @property
    def end(self) -> torch.Tensor:
        """One past the last row of each episode."""
        return self.start + self.length

    @classmethod
    def from_lengths(cls, lengths: torch.Tensor | list[int], offset: int = 0) -> EpisodeIndex:
        """Episodes laid end to end from row ``offset``."""
        length = torch.as_tensor(lengths, dtype=torch.int64).reshape(-1)
        if (length < 1).any():
            raise ValueError("every episode length must be >= 1")
        start = torch.cumsum(length, 0) - length + offset
        return cls(start, length)

    @classmethod
    def from_episode_ids(cls, episode: torch.Tensor) -> EpisodeIndex:
        """Runs of equal consecutive ids are episodes (ids may repeat after a wrap-around)."""
        episode = episode.reshape(-1)
        n = episode.numel()
        if n == 0:
            return cls(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
        change = torch.ones(n, dtype=torch.bool)
        change[1:] = episode[1:] != episode[:-1]
        start = torch.nonzero(change).reshape(-1)
        end = torch.cat([start[1:], torch.tensor([n])])
        return cls(start, end - start)

    @classmethod
    def from_done(cls, done: torch.Tensor) -> EpisodeIndex:
        """Episodes end at rows whose done flag is set; rows after the last flag form a final episode."""
        done = done.reshape(-1).to(torch.bool)
        n = done.numel()
        if n == 0:
            return cls(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
        last = torch.nonzero(done).reshape(-1)
        if last.numel() == 0 or int(last[-1]) != n - 1:
            last = torch.cat([last, torch.tensor([n - 1])])
        end = last + 1
        start = torch.cat([torch.zeros(1, dtype=torch.int64), end[:-1]])
        return cls(start, end - start)

    def episode_of(self, rows: torch.Tensor) -> torch.Tensor:
        """Ordinal of the episode holding each row (rows must lie inside an episode)."""
        return torch.searchsorted(self.start, rows, right=True) - 1
