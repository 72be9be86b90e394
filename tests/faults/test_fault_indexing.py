"""Buffer indexing and priorities (issue 12): Python's slicing, no silent float or short-mask indices,
finite sampler parameters, and a refused prioritized extend that writes nothing."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from datasets_hub import (
    LazyTensorStorage,
    PrioritizedSampler,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)


def _rb(n: int = 500) -> TensorDictReplayBuffer:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000))
    rb.extend(TensorDict({"x": torch.arange(n)}, batch_size=[n]))
    return rb


@pytest.mark.parametrize("index", [slice(None, None, -1), slice(5, None, -1), slice(-3, 2, -2), slice(400, 10, -7)])
def test_negative_steps_work_like_python(index):
    rb = _rb()
    assert rb[index]["x"].tolist() == list(range(500))[index]


@pytest.mark.parametrize("index", [1.5, torch.tensor([1.5]), [0.0, 2.0], slice(0.5, 3)])
def test_float_indices_are_errors(index):
    with pytest.raises(TypeError, match="int"):
        _rb()[index]


def test_a_boolean_mask_must_cover_every_item():
    rb = _rb()
    with pytest.raises(IndexError, match="one entry per stored item"):
        rb[torch.tensor([True, False, True])]
    mask = torch.zeros(500, dtype=torch.bool)
    mask[[3, 7]] = True
    assert rb[mask]["x"].tolist() == [3, 7]


def test_update_priority_refuses_float_indices():
    rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(100))
    rb.extend(TensorDict({"x": torch.arange(10)}, batch_size=[10]))
    before = rb.sampler.priorities(torch.arange(10)).clone()
    with pytest.raises(TypeError, match="integers"):
        rb.update_priority(torch.tensor([1.7, 2.2]), torch.tensor([5.0, 5.0]))
    assert torch.equal(rb.sampler.priorities(torch.arange(10)), before)


@pytest.mark.parametrize("name", ["alpha", "beta", "eps"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_sampler_parameters_are_refused(name, value):
    params = {"alpha": 0.7, "beta": 0.5, "eps": 1e-6, name: value}
    with pytest.raises(ValueError, match=f"{name} must be a finite number"):
        PrioritizedSampler(100, **params)


def test_a_refused_prioritized_extend_writes_nothing():
    rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(100))
    bad = TensorDict({"x": torch.arange(4), "td_error": torch.tensor([1.0, math.nan, 1.0, 1.0])}, batch_size=[4])
    with pytest.raises(ValueError, match="nothing was written"):
        rb.extend(bad)
    assert len(rb) == 0 and rb.write_count == 0
    bad["td_error"] = torch.ones(4)
    rb.extend(bad)  # the retry stores the rows once
    assert len(rb) == 4 and rb[:]["x"].tolist() == [0, 1, 2, 3]
