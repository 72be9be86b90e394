"""Items weighted by how fresh the policy that collected them is: :class:`StalenessAwareSampler`.

Asynchronous on-policy training (async PPO and the like) learns from items collected by older policies.
Each stored item carries the version of the policy that collected it; the learner says which version it
is at (``consumer_version``), and the sampler prefers fresh items and can exclude stale ones
(docs/guide/sampling.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.storages import Storage

NestedKey = Any


def inverse_staleness(staleness: torch.Tensor) -> torch.Tensor:
    """The default freshness weight ``1 / (staleness + 1)``: a current item weighs 1, one a version old 1/2."""
    return 1.0 / (staleness.float() + 1.0)


class StalenessAwareSampler(Sampler):
    """Rows drawn with a weight that decays with their staleness, ``consumer_version - version``, as TorchRL 0.14's
    sampler.

    - ``version_key`` (default ``"policy_version"``) holds each item's policy version (one number per item);
      a storage without it is a ``KeyError`` naming the key.
    - ``consumer_version`` (an int, 0 at first) is the learner's version: set it, or call
      ``increment_consumer_version()``, after each policy update.
    - ``max_staleness >= 0`` excludes the items staler than it (a ``RuntimeError`` naming ``max_staleness`` when
      every item is); ``-1`` (the default) excludes none.
    - The remaining items are drawn with probability proportional to ``staleness_weight_fn(staleness)``
      (default :func:`inverse_staleness`), without repeats within a batch unless the batch is larger than the
      number of items of positive weight. Weights must be finite and non-negative with a positive sum, else a ``ValueError`` (with the
      default weight, an item whose version is ahead of ``consumer_version`` by one or more has an infinite or
      negative weight: keep ``consumer_version`` up to date).
    - ``info["staleness"]`` (float) is each sampled item's staleness.
    - ``state_dict()`` holds ``consumer_version`` and ``max_staleness``; ``empty()`` sets ``consumer_version``
      back to 0, as TorchRL does. The draws use ``generator`` only.
    """

    requires_shared_state = True  # the consumer version the learner sets (TorchRL 0.15 lists it too)

    def __init__(
        self,
        max_staleness: int = -1,
        staleness_weight_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        version_key: NestedKey = "policy_version",
    ) -> None:
        self.max_staleness = max_staleness
        self.staleness_weight_fn = staleness_weight_fn if staleness_weight_fn is not None else inverse_staleness
        self.version_key = version_key
        self._consumer_version = 0

    @property
    def max_staleness(self) -> int:
        """Items staler than this are never drawn; ``-1``: no limit."""
        return self._max_staleness

    @max_staleness.setter
    def max_staleness(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < -1:
            raise ValueError(f"max_staleness must be an int >= 0, or -1 for no limit, got {value!r}")
        self._max_staleness = value

    @property
    def consumer_version(self) -> int:
        """The learner's policy version, against which staleness is measured."""
        return self._consumer_version

    @consumer_version.setter
    def consumer_version(self, value: int) -> None:
        self._consumer_version = int(value)

    def increment_consumer_version(self) -> None:
        """``consumer_version += 1`` (after a policy update)."""
        self._consumer_version += 1

    def _versions(self, storage: Storage) -> torch.Tensor:
        try:
            versions = storage.read_key(self.version_key)
        except KeyError:
            raise KeyError(
                f"StalenessAwareSampler: the stored items have no {self.version_key!r} entry (the version of the "
                "policy that collected each item): write it with the data (TorchRL's PolicyVersion transform does), "
                "or pass version_key=<the key holding it>"
            ) from None
        n = len(storage)
        if versions.numel() != n:
            raise ValueError(
                f"StalenessAwareSampler: {self.version_key!r} holds {versions.numel()} values for {n} items: it must "
                "hold one version per item"
            )
        return versions.reshape(n)

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        n = len(storage)
        if n == 0:
            raise RuntimeError("Cannot sample from an empty storage: add or extend data first")
        staleness = self._consumer_version - self._versions(storage).float()
        if self._max_staleness >= 0:
            rows = torch.nonzero(staleness <= self._max_staleness).reshape(-1)
            if rows.numel() == 0:
                raise RuntimeError(
                    f"StalenessAwareSampler: all {n} items are staler than max_staleness={self._max_staleness} "
                    f"(consumer_version={self._consumer_version}): raise max_staleness, or write items collected by a "
                    "newer policy"
                )
        else:
            rows = torch.arange(n)
        weights = torch.as_tensor(self.staleness_weight_fn(staleness[rows]), dtype=torch.float64)
        if weights.shape != rows.shape or not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
            raise ValueError(
                "StalenessAwareSampler: staleness_weight_fn must return one finite, non-negative weight per item; got "
                f"{'shape ' + str(tuple(weights.shape)) if weights.shape != rows.shape else 'inf, nan or negative'} "
                f"(staleness ranges over [{float(staleness.min()):g}, {float(staleness.max()):g}]: a negative "
                "staleness means consumer_version is behind the stored versions)"
            )
        drawable = int(torch.count_nonzero(weights))
        if drawable == 0:
            raise ValueError("StalenessAwareSampler: every item's weight is 0: no item can be drawn")
        drawn = torch.multinomial(weights, batch_size, replacement=batch_size > drawable, generator=self.generator)
        index = rows[drawn]
        return index, {"staleness": staleness[index]}

    def empty(self) -> None:
        self._consumer_version = 0

    def state_dict(self) -> dict[str, Any]:
        return {"consumer_version": self._consumer_version, "max_staleness": self._max_staleness}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.consumer_version = int(state_dict["consumer_version"])
        self.max_staleness = int(state_dict["max_staleness"])

    def __repr__(self) -> str:
        return f"StalenessAwareSampler(consumer_version={self._consumer_version}, max_staleness={self._max_staleness})"
