"""EpisodeRows: rows located in their episodes, for every layout the lookup has a path for."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers.episode_rows import EpisodeRows
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.testing import fake_episodes


def rows_of(lengths):
    """The episodes of an online storage holding episodes of ``lengths``."""
    chunk = fake_episodes(list(lengths))
    storage = LazyTensorStorage(1000)
    TensorDictReplayBuffer(storage=storage).extend(chunk)
    eps = EpisodeRows()
    eps.refresh(storage)
    return eps


@pytest.mark.parametrize(
    "lengths", [[5] * 7, [1] * 9, [3, 70, 1, 2, 64, 65, 9], [200]], ids=["equal", "ones", "varied", "one"]
)
def test_locate_finds_every_row_and_draws_need_no_check(lengths):
    eps = rows_of(lengths)
    starts = np.cumsum([0, *lengths[:-1]])
    rows = np.arange(sum(lengths))
    expected = np.searchsorted(starts, rows, side="right") - 1
    assert np.array_equal(eps.locate(rows), expected)
    drawn = eps.draw(500, torch.Generator().manual_seed(0))
    assert np.array_equal(eps.locate(drawn, drawn=True), np.searchsorted(starts, drawn, side="right") - 1)


@pytest.mark.parametrize("lengths", [[5] * 4, [3, 8, 2]], ids=["equal", "varied"])
def test_rows_outside_every_episode_are_refused(lengths):
    eps = rows_of(lengths)
    total = sum(lengths)
    assert np.array_equal(eps.locate(np.array([0, total - 1])), [0, len(lengths) - 1])
    for row in (total, total + 2, -1):
        with pytest.raises(IndexError, match=f"row {row} lies in no complete episode"):
            eps.locate(np.array([0, row]))


@pytest.mark.parametrize("lengths", [[5] * 7, [3, 70, 1, 2], [128, 128, 256]], ids=["equal", "varied", "512 rows"])
def test_rows_at_maps_the_largest_uniform_below_one_to_the_last_row(lengths):
    eps = rows_of(lengths)
    total = sum(lengths)
    u = np.array([0.0, 0.5, np.nextafter(1.0, 0.0)])  # torch.rand's float64 uniforms are at most 1 - 2**-53
    rows = eps.rows_at(u)
    assert rows[0] == 0 and rows[-1] == total - 1
    assert rows[1] == total // 2
