"""ReplayBufferEnsemble: shapes, ids, weights, seeds, per-buffer transforms, clear key errors."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.ensemble import ReplayBufferEnsemble
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers import SamplerWithoutReplacement
from datasets_hub.buffers.slice_samplers import SliceSampler
from datasets_hub.buffers.tensor_storages import LazyMemmapStorage, LazyTensorStorage
from datasets_hub.buffers.transforms import Rename


def buffer(offset, n=100, seed=0, transform=None, key="obs", storage=None, sampler=None):
    rb = TensorDictReplayBuffer(
        storage=storage or LazyTensorStorage(n),
        transform=transform,
        sampler=sampler,
        generator=torch.Generator().manual_seed(seed),
    )
    rb.extend(TensorDict({key: torch.arange(offset, offset + n), "episode": torch.arange(n) // 10}, batch_size=[n]))
    return rb


def test_sample_shape_ids_and_indices(tmp_path):
    e = ReplayBufferEnsemble(
        buffer(0), buffer(1000, storage=LazyMemmapStorage(100, scratch_dir=tmp_path / "m")), sample_from_all=True
    )
    out = e.sample(10)
    assert out.shape == (2, 5)
    assert torch.equal(out["index", "buffer_ids"], torch.tensor([[0] * 5, [1] * 5]))
    local = out["index", "index"]
    assert torch.equal(out["obs"], local + torch.tensor([[0], [1000]]))  # the index points at the row
    assert len(e) == 2 and e[1] is e._buffers[1]
    assert int(e[1, 3]["obs"]) == 1003


def test_weights_choose_buffers_with_the_ensemble_generator():
    def make(seed):
        return ReplayBufferEnsemble(
            buffer(0, seed=1),
            buffer(1000, seed=2),
            p=[0.9, 0.1],
            num_buffer_sampled=4,
            generator=torch.Generator().manual_seed(seed),
        )

    e = make(0)
    ids = torch.stack([e.sample(8)["index", "buffer_ids"][:, 0] for _ in range(2000)])
    frac = (ids == 1).double().mean()
    assert abs(float(frac) - 0.1) < 0.02  # 8000 draws: std 0.0034
    a, b = make(5), make(5)
    for _ in range(5):
        assert (a.sample(8) == b.sample(8)).all()


def test_transforms_align_keys_before_stacking():
    rb0 = buffer(0, key="obs")
    rb1 = buffer(1000, key="pixels", transform=Rename(["pixels"], ["obs"]))
    e = ReplayBufferEnsemble(rb0, rb1, sample_from_all=True, transform=lambda td: td.set("twice", td["obs"] * 2))
    out = e.sample(6)
    assert out.shape == (2, 3) and (out["obs"][1] >= 1000).all()
    assert torch.equal(out["twice"], out["obs"] * 2)


def test_differing_keys_are_a_clear_error():
    e = ReplayBufferEnsemble(buffer(0, key="obs"), buffer(0, key="pixels"), sample_from_all=True)
    with pytest.raises(ValueError, match=r"only in buffer 0: \['obs'\].*only in buffer 1: \['pixels'\].*Rename"):
        e.sample(4)


def test_argument_errors():
    with pytest.raises(ValueError, match="sample_from_all"):
        ReplayBufferEnsemble(buffer(0), buffer(0), p=[0.5, 0.5], sample_from_all=True)
    with pytest.raises(ValueError, match="one weight per buffer"):
        ReplayBufferEnsemble(buffer(0), buffer(0), p=[1.0])
    with pytest.raises(ValueError, match="divisible"):
        ReplayBufferEnsemble(buffer(0), buffer(0)).sample(5)


def test_slice_buffers_in_an_ensemble():
    rb0 = buffer(0, sampler=SliceSampler(slice_len=5))
    rb1 = buffer(1000, sampler=SliceSampler(slice_len=5))
    out = ReplayBufferEnsemble(rb0, rb1, sample_from_all=True).sample(20)
    assert out.shape == (2, 10)
    slices = out["obs"].reshape(2, 2, 5)
    assert (torch.diff(slices, dim=-1) == 1).all()
    assert out["next", "truncated"].reshape(2, 2, 5)[..., -1].all()


def test_iteration_stops_when_a_buffer_runs_out():
    e = ReplayBufferEnsemble(
        buffer(0, n=20, sampler=SamplerWithoutReplacement()),
        buffer(1000, n=20, sampler=SamplerWithoutReplacement()),
        sample_from_all=True,
        batch_size=10,
    )
    assert len(list(e)) == 4
