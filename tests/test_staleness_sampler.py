"""StalenessAwareSampler: freshness weights, the staleness gate, info, state and refusals."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers.staleness import StalenessAwareSampler, inverse_staleness
from datasets_hub.buffers.tensor_storages import LazyTensorStorage


def buffer(sampler, versions, batch_size=8):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(64),
        sampler=sampler,
        batch_size=batch_size,
        generator=torch.Generator().manual_seed(0),
    )
    n = len(versions)
    rb.extend(TensorDict({"policy_version": torch.tensor(versions), "row": torch.arange(n)}, [n]))
    return rb


def test_fresh_items_are_drawn_in_proportion_to_their_weight():
    sampler = StalenessAwareSampler()
    rb = buffer(sampler, [0] * 20 + [9] * 20, batch_size=1)  # staleness 10 (weight 1/11) and 1 (weight 1/2)
    sampler.consumer_version = 10
    fresh = sum(int(rb.sample()["row"].item() >= 20) for _ in range(400))
    assert 300 < fresh < 360  # expected 400 * (1/2) / (1/2 + 1/11) = 338


def test_the_gate_excludes_stale_items_and_refuses_when_all_are():
    sampler = StalenessAwareSampler(max_staleness=3)
    rb = buffer(sampler, [0, 0, 0, 5, 6])
    sampler.consumer_version = 8
    for _ in range(5):
        assert set(rb.sample(2)["row"].tolist()) == {3, 4}  # staleness 3 and 2; without repeats within a batch
    sampler.consumer_version = 20
    with pytest.raises(RuntimeError, match="max_staleness=3"):
        rb.sample()


def test_batches_larger_than_the_drawable_items_repeat_them():
    sampler = StalenessAwareSampler(max_staleness=0)
    rb = buffer(sampler, [1, 2, 2])
    sampler.consumer_version = 2
    assert sorted(set(rb.sample(6)["row"].tolist())) == [1, 2]


def test_staleness_is_in_the_info_and_the_sample():
    sampler = StalenessAwareSampler()
    rb = buffer(sampler, [3.0, 5.0, 6.0])
    sampler.consumer_version = 7
    _, info = sampler.sample(rb.storage, 3)
    assert sorted(info["staleness"].tolist()) == [1.0, 2.0, 4.0]
    sample = rb.sample(3)
    assert (sample["staleness"] == 7 - sample["policy_version"]).all()


def test_consumer_version_and_state_round_trip(tmp_path):
    sampler = StalenessAwareSampler(max_staleness=4)
    sampler.increment_consumer_version()
    sampler.increment_consumer_version()
    assert sampler.state_dict() == {"consumer_version": 2, "max_staleness": 4}
    sampler.dumps(tmp_path)
    restored = StalenessAwareSampler()
    restored.loads(tmp_path)
    assert (restored.consumer_version, restored.max_staleness) == (2, 4)
    restored.empty()
    assert restored.consumer_version == 0


def test_refusals():
    with pytest.raises(ValueError, match="max_staleness"):
        StalenessAwareSampler(max_staleness=-2)
    missing = TensorDictReplayBuffer(storage=LazyTensorStorage(4), sampler=StalenessAwareSampler(), batch_size=2)
    missing.extend(TensorDict({"row": torch.arange(3)}, [3]))
    with pytest.raises(KeyError, match="policy_version"):
        missing.sample()
    ahead = StalenessAwareSampler()
    rb = buffer(ahead, [0, 4])  # consumer_version 0 is behind version 4: weight 1 / (-4 + 1) < 0
    with pytest.raises(ValueError, match="consumer_version is behind"):
        rb.sample()
    zero = StalenessAwareSampler(staleness_weight_fn=torch.zeros_like)
    with pytest.raises(ValueError, match="weight is 0"):
        buffer(zero, [0, 0]).sample()


def test_custom_weight_and_version_key():
    sampler = StalenessAwareSampler(staleness_weight_fn=lambda s: (s == 0).float(), version_key="v")
    # 64 draws from the two fresh rows, seeded: a batch of 4 missed one of them one time in 8
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(8), sampler=sampler, batch_size=64, generator=torch.Generator().manual_seed(0)
    )
    rb.extend(TensorDict({"v": torch.tensor([1, 2, 2, 1]), "row": torch.arange(4)}, [4]))
    sampler.consumer_version = 2
    assert set(rb.sample()["row"].tolist()) == {1, 2}
    assert inverse_staleness(torch.tensor([0, 1, 3])).tolist() == [1.0, 0.5, 0.25]
