"""Helpers for plugin authors and for our own tests.

``check_loader(cls, spec, files)`` checks a loader against the whole plugin contract, and
``check_loader("prefix/name")`` a catalogue entry end to end (:mod:`datasets_hub.loader_check`);
``fake_episodes(...)`` makes a TED chunk whose every value tells where it came from, and
``naive_ted(chunk)`` is the plain, non-lean TED copy a build must reproduce exactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import cast

import torch
from tensordict import TensorDict, TensorDictBase

from datasets_hub.loader import DatasetSpec, Loader, LoaderContext
from datasets_hub.loader_check import check_loader

__all__ = ["FakeLoader", "check_loader", "fake_episodes", "naive_ted"]


def fake_episodes(
    lengths: Sequence[int] = (5, 3, 4),
    *,
    obs_dim: int = 3,
    act_dim: int = 2,
    first_episode: int = 0,
    first_row: int = 0,
    ends: Sequence[str] | None = None,
) -> TensorDict:
    """A TED chunk of whole episodes with distinct values per step.

    ``observation[i, d] = row * 100 + d`` where ``row`` counts observations over the whole fake
    dataset (T+1 per episode, starting at ``first_row``), so ``next/observation`` of a step is
    the following observation row; ``action = -(transition * 10 + d)``; ``reward = transition``,
    where ``transition`` counts steps over the whole fake dataset (``first_row - first_episode``
    before this chunk).
    ``ends[e]`` is ``"terminated"``, ``"truncated"`` or ``"none"`` (default: alternating).
    """
    ends = (
        list(ends) if ends is not None else ["terminated" if e % 2 == 0 else "truncated" for e in range(len(lengths))]
    )
    n = int(sum(lengths))
    obs, nxt, episode = [], [], []
    terminated = torch.zeros(n, 1, dtype=torch.bool)
    truncated = torch.zeros(n, 1, dtype=torch.bool)
    row, t = first_row, 0
    dims = torch.arange(obs_dim, dtype=torch.float32)
    for e, length in enumerate(lengths):
        rows = torch.arange(row, row + length + 1, dtype=torch.float32)[:, None] * 100 + dims
        obs.append(rows[:-1])
        nxt.append(rows[1:])
        episode.append(torch.full((length,), first_episode + e, dtype=torch.int64))
        if ends[e] == "terminated":
            terminated[t + length - 1] = True
        elif ends[e] == "truncated":
            truncated[t + length - 1] = True
        row += length + 1
        t += length
    first_transition = first_row - first_episode  # every earlier episode had one more observation than steps
    transition = torch.arange(first_transition, first_transition + n, dtype=torch.float32)
    return TensorDict(
        {
            "observation": torch.cat(obs),
            "action": -(transition[:, None] * 10 + torch.arange(act_dim, dtype=torch.float32)),
            "episode": torch.cat(episode),
            "next": {
                "observation": torch.cat(nxt),
                "reward": transition[:, None].clone(),
                "terminated": terminated,
                "truncated": truncated,
            },
        },
        batch_size=[n],
    )


def naive_ted(chunks: TensorDictBase | Sequence[TensorDictBase]) -> TensorDict:
    """The full TED copy of ``chunks`` as a build must return it (root flags False, ``step``,
    ``next/done`` added)."""
    chunks = [chunks] if isinstance(chunks, TensorDictBase) else list(chunks)
    td = cast(TensorDict, torch.cat([c.clone() for c in chunks]))  # torch's stubs know only tensors
    if "history" in td.keys():  # history-only rows are frames before an episode, not transitions
        td = td[~td.get("history")].exclude("history")
    n = td.batch_size[0]
    episode = td.get("episode")
    step = torch.zeros(n, dtype=torch.int64)
    for i in range(1, n):
        step[i] = step[i - 1] + 1 if episode[i] == episode[i - 1] else 0
    td.set("step", step)
    for flag in ("done", "terminated", "truncated"):
        td.set(flag, torch.zeros(n, 1, dtype=torch.bool))
    td.set(("next", "done"), td.get(("next", "terminated")) | td.get(("next", "truncated")))
    return td


class FakeLoader(Loader):
    """A loader over :func:`fake_episodes`; params ``lengths`` (list of ints) and ``chunks`` (how many
    chunks to split the episodes into)."""

    name = "fake"
    format_version = 1

    def resources(self, spec: DatasetSpec) -> list:
        return []

    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDict]:
        lengths = list(spec.params.get("lengths", [5, 3, 4]))
        parts = max(1, int(spec.params.get("chunks", 1)))
        per = -(-len(lengths) // parts)
        row = episode = 0
        for start in range(0, len(lengths), per):
            group = lengths[start : start + per]
            yield fake_episodes(group, first_episode=episode, first_row=row)
            episode += len(group)
            row += sum(group) + len(group)
