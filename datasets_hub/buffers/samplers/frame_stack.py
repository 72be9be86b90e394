"""The sampler option of frame stacking: only transitions whose whole stack lies in their episode.

Pair :class:`FullStackSampler` with :class:`~datasets_hub.buffers.frame_stack.FrameStack` (the transform
that builds the stacks; see there for the stacking contract) to train without padded stacks.
"""

from __future__ import annotations

from typing import Any

import torch

from datasets_hub.buffers.samplers.base import Sampler


class FullStackSampler(Sampler):
    """Uniform over the transitions whose ``n``-frame stack lies inside their episode (``step >= n - 1``,
    or fewer steps where the build keeps history frames before the episode's first transition).

    The sampler option for training without padded stacks: rows within ``n - 1`` steps of an
    episode start are never drawn, the others equally often. Needs a storage with an episode index
    (every hub build has one). Pair it with ``FrameStack(n)``, which then never pads.
    """

    def __init__(self, n: int = 4, generator: torch.Generator | None = None) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"FullStackSampler needs a positive number of frames, got {n!r}")
        self.n = n
        self.generator = generator
        self._cache: tuple[Any, torch.Tensor, torch.Tensor] | None = None

    def _valid(self, storage: Any) -> tuple[torch.Tensor, torch.Tensor]:
        index = storage.episode_index() if hasattr(storage, "episode_index") else None
        if index is None:
            raise RuntimeError(
                "FullStackSampler needs a storage with an episode index (a hub build, e.g. from "
                "datasets_hub.load); this storage has none"
            )
        if self._cache is None or self._cache[0] is not index:
            # history frames kept before an episode's first transition count towards a full stack (an index
            # over some episodes of a build, a remote pool's, carries its own counts)
            history: Any = index.history
            if history is None:
                history = storage.history_index()[1] if getattr(storage, "history_keys", list)() else 0
            skip = (self.n - 1 - torch.as_tensor(history)).clamp_min(0)
            count = (index.length - skip).clamp_min(0)
            first = index.start + skip
            self._cache = (index, torch.cumsum(count, 0), first)
        return self._cache[1], self._cache[2]

    def sample(self, storage: Any, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        cum, first = self._valid(storage)
        total = int(cum[-1]) if cum.numel() else 0
        if total == 0:
            raise RuntimeError(
                f"no episode is at least {self.n} steps long: nothing to sample with full {self.n}-frame stacks"
            )
        draw = torch.randint(total, (batch_size,), generator=self.generator)
        episode = torch.searchsorted(cum, draw, right=True)
        before = torch.where(episode > 0, cum[(episode - 1).clamp_min(0)], torch.zeros_like(draw))
        return first[episode] + (draw - before), {}
