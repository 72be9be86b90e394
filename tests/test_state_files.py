"""dumps/loads of every writer and sampler: a new part of the same kind resumes where the saved one was."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers import (
    PrioritizedSampler,
    RandomSampler,
    SamplerWithoutReplacement,
    SliceSampler,
)
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.buffers.tensordict_writers import TensorDictMaxValueWriter, TensorDictRoundRobinWriter
from datasets_hub.buffers.writers import RoundRobinWriter


def steps(n: int) -> TensorDict:
    r = torch.arange(n)
    return TensorDict(
        {
            "obs": r.float(),
            "episode": r // 5,
            "next": {"reward": r.float()[:, None] * 10, "done": (r % 5 == 4)[:, None]},
        },
        [n],
    )


@pytest.mark.parametrize("writer_cls", [RoundRobinWriter, TensorDictRoundRobinWriter, TensorDictMaxValueWriter])
def test_writer_dumps_loads_resumes_its_cursor(tmp_path, writer_cls):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), writer=writer_cls())
    rb.extend(steps(11))
    rb.writer.dumps(tmp_path / "w")
    writer = writer_cls()
    storage = LazyTensorStorage(8)
    storage.set(torch.arange(8), rb.storage[:8])
    writer.register_storage(storage)
    writer.loads(tmp_path / "w")
    assert writer.write_count == rb.writer.write_count
    assert writer.state_dict().keys() == rb.writer.state_dict().keys()
    if writer_cls is RoundRobinWriter:
        assert writer.extend(steps(2)).tolist() == rb.writer.extend(steps(2)).tolist()  # same next rows


def test_sampler_without_replacement_dumps_loads_continues_the_epoch(tmp_path):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), sampler=SamplerWithoutReplacement(), batch_size=4)
    rb.set_rng(torch.Generator().manual_seed(3))
    rb.extend(steps(12))
    seen = rb.sample()["obs"].tolist()
    rb.sampler.dumps(tmp_path / "s")
    rest = SamplerWithoutReplacement()
    rest.loads(tmp_path / "s")
    left = []
    while not rest.ran_out:
        left += rest.sample(rb.storage, 4)[0].tolist()
    assert sorted(seen + left) == list(range(12))  # the epoch finishes with the rows not yet seen


def test_prioritized_and_slice_samplers_round_trip(tmp_path):
    sampler = PrioritizedSampler(max_capacity=10, alpha=0.7, beta=0.5)
    sampler.extend(torch.arange(6))
    sampler.update_priority(torch.tensor([1, 4]), torch.tensor([5.0, 9.0]))
    sampler.dumps(tmp_path / "p")
    again = PrioritizedSampler(max_capacity=10, alpha=0.7, beta=0.5)
    again.loads(tmp_path / "p")
    for key, value in sampler.state_dict().items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, again.state_dict()[key]), key
    SliceSampler(num_slices=2).dumps(tmp_path / "slice")
    SliceSampler(num_slices=2).loads(tmp_path / "slice")


def test_loads_refuses_another_kind_and_a_missing_dump(tmp_path):
    RandomSampler().dumps(tmp_path / "r")
    with pytest.raises(ValueError, match="holds the state of a RandomSampler, not of a SamplerWithoutReplacement"):
        SamplerWithoutReplacement().loads(tmp_path / "r")
    with pytest.raises(FileNotFoundError, match=r"writer_state\.pt is missing"):
        RoundRobinWriter().loads(tmp_path / "nothing")
