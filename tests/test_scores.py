"""normalized_score: D4RL's formula on the catalogue's reference scores, for every input kind."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import datasets_hub
from datasets_hub.catalogue import register_dataset, unregister_dataset
from datasets_hub.errors import InvalidParameter, UnknownDataset
from datasets_hub.scores import normalized_score, reference_scores

HOPPER = "d4rl/hopper-medium-v2"
LOW, HIGH = -20.272305, 3234.3  # D4RL's hopper references


def test_reference_points_map_to_0_and_100():
    assert normalized_score(HOPPER, LOW) == pytest.approx(0.0, abs=1e-12)
    assert normalized_score(HOPPER, HIGH) == pytest.approx(100.0, abs=1e-12)
    assert datasets_hub.normalized_score is normalized_score
    assert reference_scores("d4rl/halfcheetah-medium-replay-v0") == (-280.178953, 12135.0)


def test_input_kinds_keep_their_kind():
    values = [LOW, 1000.0, HIGH]
    expected = [100 * (v - LOW) / (HIGH - LOW) for v in values]
    assert isinstance(normalized_score(HOPPER, 1000), float)
    assert normalized_score(HOPPER, 1000) == pytest.approx(expected[1])
    assert normalized_score(HOPPER, np.float32(1000.0)) == pytest.approx(expected[1], rel=1e-6)
    out = normalized_score(HOPPER, values)
    assert isinstance(out, list) and out == pytest.approx(expected)
    assert normalized_score(HOPPER, tuple(values)) == pytest.approx(expected)
    arr = normalized_score(HOPPER, np.array(values, dtype=np.float32).reshape(3, 1))
    assert isinstance(arr, np.ndarray) and arr.shape == (3, 1) and arr.dtype == np.float64
    np.testing.assert_allclose(arr[:, 0], expected, rtol=1e-6, atol=1e-5)  # float32 inputs
    ten = normalized_score(HOPPER, torch.tensor(values, dtype=torch.float32))
    assert isinstance(ten, torch.Tensor) and ten.dtype == torch.float32
    torch.testing.assert_close(ten, torch.tensor(expected, dtype=torch.float32))
    ints = normalized_score(HOPPER, torch.tensor([0, 1000]))
    assert ints.dtype == torch.float64 and ints[1].item() == pytest.approx(expected[1])


def test_bad_returns_are_rejected():
    for bad in ("100", True, [1.0, "x"], {"a": 1}, np.array(["a"])):
        with pytest.raises(InvalidParameter, match="returns must be"):
            normalized_score(HOPPER, bad)


def test_dataset_without_scores_names_the_ones_that_have_them():
    with pytest.raises(InvalidParameter) as err:
        normalized_score("d4rl/carla-town-full-v0", 1.0)
    msg = str(err.value)
    assert "'d4rl/carla-town-full-v0' has no reference scores" in msg
    assert "d4rl/ant-expert-v0" in msg and "have reference scores" in msg
    with pytest.raises(InvalidParameter, match="no reference scores"):
        normalized_score("gym/pendulum-random-v0", 1.0)


def test_unknown_id_suggests():
    with pytest.raises(UnknownDataset, match="hopper-medium-v2"):
        normalized_score("d4rl/hoper-medium-v2", 1.0)


def test_registered_entries_bring_their_own_scores():
    register_dataset(
        "d4rl/mine-v0",
        loader="d4rl",
        resources=[{"url": "file:///nonexistent.hdf5"}],
        ref_min_score=10,
        ref_max_score=20,
    )
    register_dataset(
        "d4rl/flat-v0", loader="d4rl", resources=[{"url": "file:///nonexistent.hdf5"}], ref_min_score=5, ref_max_score=5
    )
    try:
        assert normalized_score("d4rl/mine-v0", [10, 15, 20, 30]) == [0.0, 50.0, 100.0, 200.0]
        with pytest.raises(InvalidParameter, match="must be finite and differ"):
            normalized_score("d4rl/flat-v0", 1.0)
    finally:
        unregister_dataset("d4rl/mine-v0")
        unregister_dataset("d4rl/flat-v0")
