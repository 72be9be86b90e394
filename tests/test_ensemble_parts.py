"""StorageEnsemble, SamplerEnsemble and WriterEnsemble, and ReplayBufferEnsemble built from them."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub import (
    LazyTensorStorage,
    RandomSampler,
    ReplayBufferEnsemble,
    RoundRobinWriter,
    SamplerEnsemble,
    StorageEnsemble,
    TensorDictReplayBuffer,
    WriterEnsemble,
)


def _filled(value: float, n: int = 10) -> TensorDictReplayBuffer:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(n))
    rb.extend(TensorDict({"x": torch.full((n,), value), "i": torch.arange(n)}, [n]))
    return rb


def test_parts_read_and_sample_as_an_index_pair():
    rbs = [_filled(0.0), _filled(1.0)]
    storages = StorageEnsemble(*[rb.storage for rb in rbs])
    assert len(storages) == 2 and storages[1] is rbs[1].storage
    assert (storages.get((1, torch.tensor([3, 4])))["x"] == 1.0).all()
    sampler = SamplerEnsemble(RandomSampler(), RandomSampler(), sample_from_all=True)
    (ids, index), info = sampler.sample(storages, 8)
    assert ids.tolist() == [[0] * 4, [1] * 4] and index.shape == (2, 4) and len(info["infos"]) == 2
    with pytest.raises(RuntimeError, match="member by member"):
        WriterEnsemble(RoundRobinWriter(), RoundRobinWriter()).extend(None)
    with pytest.raises(RuntimeError, match="member by member"):
        storages.set(0, None)


def test_sampler_ensemble_weights_follow_p_with_its_generator():
    s = SamplerEnsemble(RandomSampler(), RandomSampler(), p=[0.0, 1.0], num_buffer_sampled=4)
    s.generator = torch.Generator().manual_seed(0)
    assert s.choose().tolist() == [1, 1, 1, 1]
    with pytest.raises(ValueError, match="one weight per member"):
        SamplerEnsemble(RandomSampler(), p=[0.5, 0.5])


def test_replay_buffer_ensemble_from_parts_matches_one_from_buffers():
    rbs = [_filled(0.0), _filled(1.0)]
    ens = ReplayBufferEnsemble(
        storages=StorageEnsemble(*[rb.storage for rb in rbs]),
        samplers=SamplerEnsemble(RandomSampler(), RandomSampler()),
        writers=WriterEnsemble(RoundRobinWriter(), RoundRobinWriter()),
        sample_from_all=True,
    )
    out = ens.sample(8)
    assert out.batch_size == (2, 4)
    assert (out["x"][0] == 0).all() and (out["x"][1] == 1).all()
    assert out["index", "buffer_ids"].tolist() == [[0] * 4, [1] * 4]
    composed = ReplayBufferEnsemble(*rbs, p=[0.25, 0.75])
    assert isinstance(composed.storage, StorageEnsemble) and len(composed.storage) == 2
    assert composed.sampler.p.tolist() == [0.25, 0.75]
    assert composed.writer.write_count == 20
    with pytest.raises(ValueError, match="one per storage"):
        ReplayBufferEnsemble(storages=StorageEnsemble(*[rb.storage for rb in rbs]), samplers=[RandomSampler()])
