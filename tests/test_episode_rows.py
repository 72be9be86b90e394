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


def _anchor_samplers():
    from datasets_hub.buffers.samplers import SliceSampler
    from datasets_hub.buffers.samplers.goal import GoalSampler
    from datasets_hub.buffers.samplers.n_step import NStepReturnSampler
    from datasets_hub.buffers.samplers.window import WindowSampler

    def close(state, goal):  # depends on the whole batch: sample_many must call it once per batch
        gap = (state - goal).abs().sum(-1)
        return gap <= gap.median()

    return {
        "goals, value + actor + subgoal + success_fn": lambda: GoalSampler(
            0.2, 0.5, 0.3, actor={"p_future": 1.0, "future": "uniform"}, subgoal_steps=3, success_fn=close
        ),
        "goals, HER final (no uniform but the anchors')": lambda: GoalSampler.her("final"),
        "goals over slices": lambda: GoalSampler(0.1, 0.6, 0.3, future="episode", sampler=SliceSampler(slice_len=4)),
        "n-step, fixed n": lambda: NStepReturnSampler(0.9, 2, rtg_key=("next", "reward")),
        "n-step, n drawn per row": lambda: NStepReturnSampler(0.9, (1, 4), rtg_key=("next", "reward")),
        "n-step over slices": lambda: NStepReturnSampler(
            0.9, 3, rtg_key=("next", "reward"), sampler=SliceSampler(slice_len=4)
        ),
        "windows, padded": lambda: WindowSampler({"observation": range(-2, 3)}),
        "windows that fit": lambda: WindowSampler({"observation": range(-1, 2)}, pad=False),
    }


@pytest.mark.parametrize("name", list(_anchor_samplers()))
@pytest.mark.parametrize("where", ["online", "build"])
def test_sample_many_of_anchor_samplers_equals_k_successive_samples(name, where, tmp_path):
    """sample_many draws k batches, then does the per-row work once over all of them: the values, and
    the generator's state after it, are those of k sample() calls."""
    from datasets_hub.build.pipeline import build
    from datasets_hub.build.storage import DatasetStorage
    from datasets_hub.loader import DatasetSpec
    from datasets_hub.testing import FakeLoader

    chunk = fake_episodes([12, 3, 1, 9, 40, 7])
    path = None
    if where == "build":

        class ChunkLoader(FakeLoader):
            def episodes(self, spec, files, ctx):
                yield chunk.clone()

        path = build(DatasetSpec(id="fake/many", loader="fake", params={}), ChunkLoader(), {}, [])

    def buffer():
        make = _anchor_samplers()[name]
        generator = torch.Generator().manual_seed(11)
        if path is not None:
            return TensorDictReplayBuffer(storage=DatasetStorage(path), sampler=make(), generator=generator)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), sampler=make(), generator=generator)
        rb.extend(chunk.clone())
        return rb

    one, many = buffer(), buffer()
    expected = torch.stack([one.sample(16) for _ in range(5)])
    got = many.sample_many(5, 16)
    assert got.batch_size == (5, 16)
    assert set(got.keys(True, True)) == set(expected.keys(True, True))
    for key in expected.keys(True, True):
        assert got.get(key).dtype == expected.get(key).dtype, key
        assert torch.equal(got.get(key), expected.get(key)), key
    assert torch.equal(many.sample(16)["index"], one.sample(16)["index"])  # the streams go on alike


def test_an_anchor_sampler_with_its_own_sample_keeps_working_in_sample_many():
    """A subclass written against the older contract (its own sample(), no finish()) is called k times."""
    from datasets_hub.buffers.samplers.episode_rows import AnchorSampler

    class Anchors(AnchorSampler):
        def sample(self, storage, batch_size):
            index, _rows, episode, info = self.anchors(storage, batch_size)
            return index, {**info, "ep": torch.from_numpy(episode)}

    def buffer():
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(100), sampler=Anchors(), generator=torch.Generator().manual_seed(2)
        )
        rb.extend(fake_episodes([4, 6, 5]))
        return rb

    one, many = buffer(), buffer()
    expected = torch.stack([one.sample(8) for _ in range(3)])
    got = many.sample_many(3, 8)
    assert torch.equal(got["ep"], expected["ep"]) and torch.equal(got["index"], expected["index"])
    with pytest.raises(NotImplementedError, match="must implement finish"):
        AnchorSampler().sample_rows(one.storage, 4)
