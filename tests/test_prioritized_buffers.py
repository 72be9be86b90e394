"""Prioritized buffers: priorities shift what is sampled (fixed seeds, stated tolerances), weights,
priorities from TensorDicts, reductions, dumps/loads."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.memmap_storage import LazyMemmapStorage
from datasets_hub.buffers.replay_buffers import PrioritizedReplayBuffer, TensorDictPrioritizedReplayBuffer
from datasets_hub.buffers.storages import ListStorage
from datasets_hub.buffers.tensor_storages import LazyTensorStorage

N_DRAWS = 20000  # binomial std of a frequency is at most 0.0035: the tolerances below are > 5 std


def rows(n: int, start: int = 0) -> TensorDict:
    r = torch.arange(start, start + n)
    return TensorDict({"obs": r.float(), "next": {"obs": r.float() + 1000}}, [n])


def frequencies(rb, n_items: int, seed: int = 0) -> torch.Tensor:
    rb.set_rng(torch.Generator().manual_seed(seed))
    _data, info = rb.sample(N_DRAWS, return_info=True)
    return torch.bincount(info["index"], minlength=n_items).float() / N_DRAWS


def test_defaults_and_construction():
    rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.5)
    assert isinstance(rb.storage, ListStorage) and rb.storage.max_size == 1000
    assert type(rb.sampler).__name__ == "PrioritizedSampler"
    with pytest.raises(TypeError, match="sampler="):
        PrioritizedReplayBuffer(alpha=0.7, beta=0.5, sampler=None)


def test_priorities_shift_samples():
    rb = PrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=LazyTensorStorage(10))
    rb.extend(torch.arange(10) * 10)  # item i holds 10 * i
    uniform = frequencies(rb, 10)
    assert torch.allclose(uniform, torch.full((10,), 0.1), atol=0.015)  # new rows share one priority
    rb.update_priority(torch.tensor([3]), torch.tensor([91.0]))  # others keep priority 1
    freq = frequencies(rb, 10)
    assert abs(freq[3].item() - 0.91) < 0.02  # P(3) = 91 / (91 + 9)
    assert abs(freq[5].item() - 0.01) < 0.005
    data, info = rb.sample(64, return_info=True)
    assert (data == info["index"] * 10).all()  # values identify rows
    # importance weights: w_i = (q_i / q_min) ** -beta, the rarest row gets 1
    w = info["_weight"]
    assert torch.allclose(w[info["index"] == 3], torch.tensor(1 / 91.0), rtol=1e-4)
    assert torch.allclose(w[info["index"] != 3], torch.tensor(1.0))


def test_alpha_zero_is_uniform():
    rb = PrioritizedReplayBuffer(alpha=0.0, beta=1.0, storage=LazyTensorStorage(4))
    rb.extend(torch.arange(4))
    rb.update_priority(torch.tensor([0, 1]), torch.tensor([100.0, 0.01]))
    assert torch.allclose(frequencies(rb, 4), torch.full((4,), 0.25), atol=0.02)


def test_tensordict_samples_carry_weight_and_index():
    rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=0.5, storage=LazyTensorStorage(20), batch_size=8)
    rb.extend(rows(20))
    s = rb.sample()
    assert s["_weight"].shape == (8,) and (s["obs"] == s["index"].float()).all()


@pytest.mark.parametrize(
    "make",
    [
        lambda tmp: LazyTensorStorage(10),
        lambda tmp: LazyMemmapStorage(10, scratch_dir=tmp / "mm"),
        lambda tmp: ListStorage(10),
    ],
)
def test_update_tensordict_priority_from_a_sample(make, tmp_path):
    rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=make(tmp_path))
    rb.extend(rows(10))
    s = rb.sample(200)
    s["td_error"] = torch.where(s["index"] == 6, 1000.0, 1e-6)  # what a loss would write
    rb.update_tensordict_priority(s)
    assert frequencies(rb, 10)[6] > 0.99


def test_priorities_are_read_from_the_data_on_extend():
    rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, priority_key="prio", storage=LazyTensorStorage(10))
    data = rows(10)
    data["prio"] = torch.full((10,), 1e-6)
    data["prio"][2] = 1000.0
    rb.extend(data)
    assert data["index"].tolist() == list(range(10))
    assert frequencies(rb, 10)[2] > 0.99
    one = rows(1, start=50)[0]
    one["prio"] = torch.tensor(5000.0)
    assert rb.add(one) == 0  # wraps onto row 0 with its own priority
    freq = frequencies(rb, 10)
    assert abs(freq[0].item() - 5000 / 6000) < 0.02


@pytest.mark.parametrize("reduction, expected", [("max", 0.75), ("mean", 0.5), ("min", 0.0)])
def test_multi_dim_priorities_are_reduced(reduction, expected):
    rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, reduction=reduction, storage=LazyTensorStorage(2))
    rb.extend(rows(2))
    s = rb[torch.tensor([0, 1])]
    s["index"] = torch.tensor([0, 1])
    s["td_error"] = torch.tensor([[1e-6, 1e-6, 9.0], [3.0, 3.0, 3.0]])
    rb.update_tensordict_priority(s)
    assert abs(frequencies(rb, 2)[0].item() - expected) < 0.02


def test_update_tensordict_priority_errors_teach():
    rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=LazyTensorStorage(4))
    rb.extend(rows(4))
    with pytest.raises(KeyError, match="index"):
        rb.update_tensordict_priority(rows(2))
    with pytest.raises(KeyError, match="td_error"):
        rb.update_tensordict_priority(rb.sample(2))
    with pytest.raises(ValueError, match="reduction"):
        TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, reduction="avg")


def test_dumps_loads_restores_priorities(tmp_path):
    def make(seed):
        return TensorDictPrioritizedReplayBuffer(
            alpha=0.8,
            beta=0.4,
            storage=LazyMemmapStorage(50, scratch_dir=tmp_path / f"m{seed}"),
            batch_size=16,
            generator=torch.Generator().manual_seed(seed),
        )

    rb = make(0)
    rb.extend(rows(50))
    rb.update_priority(torch.arange(50), torch.arange(50.0) ** 2)
    rb.dumps(tmp_path / "d")
    expected = [rb.sample()["index"].tolist() for _ in range(4)]
    other = make(1)
    other.loads(tmp_path / "d")
    assert [other.sample()["index"].tolist() for _ in range(4)] == expected
