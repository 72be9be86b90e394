"""benchmarks/goals_floor.py: the goal benchmark's Python floor returns exactly what the buffer returns.

The floor is a hand-written copy of ``GoalSampler``'s laws and random layout; this test makes a floor that
drifts from the sampler (a changed stream, a new key, another dtype) fail CI, not only the benchmark run.
"""

from __future__ import annotations

import importlib
from functools import partial
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    """The benchmark modules, imported as the benchmark script imports them (benchmarks/ on sys.path)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("goals"), importlib.import_module("goals_floor")


def _buffer(goals, storage, batch):
    """seed -> the benchmark's goal buffer's ``sample(batch)`` (generator seeded with ``seed``)."""
    return lambda seed: partial(goals.goal_buffer(storage, torch.Generator().manual_seed(seed)).sample, batch)


def test_floor_returns_the_buffers_batches(bench):
    goals, goals_floor = bench
    n = 5 * goals.EPISODE_LEN  # random goals often fall in the anchor's own episode: both branches run
    storage, _ = goals.build_dataset(n)
    floor = goals_floor.GoalFloor(goals.chunks(n), goals.EPISODE_LEN)
    for batch in (1, 256, 1024):
        goals_floor.check_same(
            _buffer(goals, storage, batch),
            lambda seed, batch=batch: floor.sampler(torch.Generator().manual_seed(seed), batch),
            seeds=range(4),
            calls=3,
        )
    goals_floor.check_same(  # sample_many(k): k such batches, stacked
        lambda seed: partial(goals.goal_buffer(storage, torch.Generator().manual_seed(seed)).sample_many, 3, 128),
        lambda seed: floor.batches(torch.Generator().manual_seed(seed), 128, 3),
        seeds=range(2),
        calls=2,
    )
    td = floor.sampler(torch.Generator().manual_seed(0), 4096)()
    kind, in_episode = td["goal", "kind"], td["goal", "in_episode"]
    assert (torch.bincount(kind, minlength=3) > 0).all()
    assert in_episode[kind == 2].any() and not in_episode[kind == 2].all()

    # a floor that drifts from the sampler is caught: another law (gamma), another stream (seed)
    with pytest.raises(RuntimeError, match="differs from our buffer"):
        goals_floor.check_same(
            _buffer(goals, storage, 1024),
            lambda seed: floor.sampler(torch.Generator().manual_seed(seed), 1024, gamma=0.9),
        )
    with pytest.raises(RuntimeError, match="differs from our buffer"):
        goals_floor.check_same(
            _buffer(goals, storage, 64), lambda seed: floor.sampler(torch.Generator().manual_seed(seed + 1), 64)
        )


def test_floor_refuses_what_it_does_not_lay_out(bench):
    goals, goals_floor = bench
    chunk = next(goals.chunks(goals.EPISODE_LEN))
    with pytest.raises(ValueError, match="whole episodes"):
        goals_floor.GoalFloor([chunk[:500]], goals.EPISODE_LEN)
    floor = goals_floor.GoalFloor([chunk], goals.EPISODE_LEN)
    with pytest.raises(ValueError, match="all three kinds"):
        floor.sampler(torch.Generator(), 8, p_current=0.0)
