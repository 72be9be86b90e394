"""Sample units: Transition (identity), Sequence windows (pad, stop, include_reset, burn-in, bootstrap,
dilation, the write seam), the buffer's sample_unit= keyword and priorities per anchor."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.replay_buffers import ReplayBuffer, TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer
from datasets_hub.buffers.samplers.sample_units import SampleUnit, Sequence, Transition
from datasets_hub.buffers.tensor_storages import LazyTensorStorage


def steps(n, done_at=()):
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[list(done_at)] = True
    return TensorDict({"obs": torch.arange(n) * 10, ("next", "done"): done}, [n])


def stored(n, done_at=(), capacity=None):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity or n), generator=torch.Generator().manual_seed(0))
    rb.extend(steps(n, done_at))
    return rb


def test_transition_is_the_identity_and_changes_nothing():
    index, info = torch.tensor([3, 1]), {"_weight": torch.tensor([0.5, 0.25])}
    assert Transition().expand(index, info, stored(4).storage) == (index, info)
    plain = TensorDictReplayBuffer(storage=LazyTensorStorage(8), generator=torch.Generator().manual_seed(1))
    unit = TensorDictReplayBuffer(
        storage=LazyTensorStorage(8), generator=torch.Generator().manual_seed(1), sample_unit=Transition()
    )
    for rb in (plain, unit):
        rb.extend(steps(8))
    assert (plain.sample(5)["obs"] == unit.sample(5)["obs"]).all()


def test_pad_keeps_the_anchor_and_clamps_inside_its_episode():
    rb = stored(10, done_at=[4, 9])
    index, info = Sequence(length=4).expand(torch.tensor([3, 5]), {}, rb.storage)
    assert index.tolist() == [3, 4, 4, 4, 5, 6, 7, 8]
    assert info["validity_mask"].tolist() == [True, True, False, False, True, True, True, True]
    assert info["sequence_id"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert info["step_in_sequence"].tolist() == [0, 1, 2, 3] * 2
    assert info["anchor_index"].tolist() == [3] * 4 + [5] * 4


def test_stop_moves_the_window_back_and_pads_a_short_episode():
    rb = stored(10, done_at=[2, 9])
    index, info = Sequence(length=4, episode_boundary="stop").expand(torch.tensor([8, 1]), {}, rb.storage)
    assert index.tolist() == [6, 7, 8, 9, 0, 1, 2, 2]  # ends at row 9; episode 0..2 is shorter than 4
    assert info["validity_mask"].tolist() == [True] * 7 + [False]
    assert info["anchor_index"].tolist() == [8] * 4 + [1] * 4  # the drawn anchor, not the moved start


def test_include_reset_crosses_episode_ends_but_not_the_write_seam():
    rb = stored(14, capacity=10)  # rows 0..3 hold steps 10..13, rows 4..9 steps 4..9
    unit = Sequence(length=4, episode_boundary="include_reset")
    index, info = unit.expand(torch.tensor([8, 2]), {}, rb.storage, cursor=rb.writer.cursor)
    assert (rb.storage[index]["obs"] // 10).tolist() == [8, 9, 10, 11, 12, 13, 13, 13]
    assert info["validity_mask"].tolist() == [True] * 6 + [False, False]
    index, _ = unit.expand(torch.tensor([8]), {}, rb.storage)  # no cursor: rows taken in order from row 0
    assert (rb.storage[index]["obs"] // 10).tolist() == [8, 9, 9, 9]
    partial = stored(6, capacity=20)
    index, info = unit.expand(torch.tensor([4]), {}, partial.storage)
    assert index.tolist() == [4, 5, 5, 5] and info["validity_mask"].tolist() == [True, True, False, False]


def test_burn_in_bootstrap_and_dilation():
    rb = stored(10, done_at=[4, 9])
    index, info = Sequence(length=2, burn_in=1, bootstrap=1).expand(torch.tensor([5]), {}, rb.storage)
    assert index.tolist() == [5, 5, 6, 7]  # burn-in clamps at the episode's first row
    assert info["learning_mask"].tolist() == [False, True, True, False]
    assert info["validity_mask"].tolist() == [False, True, True, True]
    index, _ = Sequence(length=3, dilation=2).expand(torch.tensor([0]), {}, rb.storage)
    assert index.tolist() == [0, 2, 4]


def test_done_key_none_and_a_custom_done_key():
    rb = stored(10, done_at=[4])
    assert Sequence(length=3, done_key=None).expand(torch.tensor([3]), {}, rb.storage)[0].tolist() == [3, 4, 5]
    custom = TensorDictReplayBuffer(storage=LazyTensorStorage(6))
    custom.extend(TensorDict({"obs": torch.arange(6), ("stats", "end"): torch.tensor([0, 1, 0, 0, 0, 1]).bool()}, [6]))
    index, _ = Sequence(length=3, done_key=("stats", "end")).expand(torch.tensor([0]), {}, custom.storage)
    assert index.tolist() == [0, 1, 1]
    with pytest.raises(KeyError, match="done_key"):
        Sequence(length=2, done_key="missing").expand(torch.tensor([0]), {}, rb.storage)


def test_per_anchor_info_is_repeated_and_scalars_pass_through():
    rb = stored(6)
    _, info = Sequence(length=2).expand(
        torch.tensor([0, 3]), {"_weight": torch.tensor([0.5, 0.75]), "step": 7}, rb.storage
    )
    assert info["_weight"].tolist() == [0.5, 0.5, 0.75, 0.75] and info["step"] == 7


def test_the_buffer_reads_the_windows_and_carries_their_metadata():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10),
        batch_size=3,
        sample_unit=Sequence(length=4),
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(steps(10, done_at=[4, 9]))
    sample, info = rb.sample(return_info=True)
    assert sample.shape == (12,)
    assert (sample["index"] == info["index"]).all()
    assert (sample["obs"] == sample["index"] * 10).all()
    for key in ("sequence_id", "step_in_sequence", "learning_mask", "validity_mask", "anchor_index"):
        assert sample[key].shape == (12,)
    with pytest.raises(ValueError, match="sample_unit"):
        rb.sample_at(torch.tensor([0]))
    assert rb.sample_many(2).shape == (2, 12)


def test_priorities_go_to_the_anchors_as_the_max_of_their_valid_records():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=1.0,
        storage=LazyTensorStorage(10),
        batch_size=2,
        sample_unit=Sequence(length=3),
        generator=torch.Generator().manual_seed(4),
    )
    rb.extend(steps(10, done_at=[4, 9]))
    sample = rb.sample()
    anchors = sample["anchor_index"].reshape(2, 3)[:, 0]
    td_error = torch.arange(6, dtype=torch.float32) + 1
    td_error[~sample["validity_mask"]] = 100.0  # padding must not reach any priority
    sample["td_error"] = td_error
    rb.update_tensordict_priority(sample)
    weights = rb.sampler.sampling_weights()
    valid = sample["validity_mask"].reshape(2, 3)
    for anchor in set(anchors.tolist()):  # the same anchor may be drawn twice: the max over both windows
        mine = anchors == anchor
        expected = td_error.reshape(2, 3)[mine][valid[mine]].max().item()
        assert weights[anchor].item() == pytest.approx(expected, rel=1e-5)


def test_refusals():
    with pytest.raises(TypeError, match="sample_unit"):
        ReplayBuffer(storage=LazyTensorStorage(4), sample_unit=object())
    for kwargs in ({"length": 0}, {"length": 2, "episode_boundary": "teleport"}, {"length": 2, "dilation": 0}):
        with pytest.raises(ValueError, match=r"length|episode_boundary|dilation"):
            Sequence(**kwargs)
    grid = ReplayBuffer(storage=LazyTensorStorage(8, ndim=2), sample_unit=Sequence(length=2))
    grid.extend(TensorDict({"obs": torch.arange(8).reshape(2, 4)}, [2, 4]))
    with pytest.raises(NotImplementedError, match="one-dimensional"):
        grid.sample(2)
    assert isinstance(Sequence(length=1), SampleUnit)
