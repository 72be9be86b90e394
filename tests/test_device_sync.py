"""The no-host-sync guarantee of device sampling: checked by the ops themselves on the CPU, and with
CUDA's own sync debug mode where a GPU is present."""

from __future__ import annotations

import pytest
import torch

from datasets_hub import (
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from datasets_hub.buffers.device import HostSyncError, no_host_sync, to_device

from fixtures.device import N, gen, host_build

X = torch.arange(10.0)
SYNCING = {
    "item": lambda: X.sum().item(),
    "int": lambda: int(X[0]),
    "if on a tensor": lambda: 1 if (X > 3).any() else 0,
    "tolist": X.tolist,
    "numpy": X.numpy,
    "cpu": X.cpu,
    "nonzero": lambda: torch.nonzero(X > 3),
    "where(cond)": lambda: torch.where(X > 3),
    "boolean mask": lambda: X[X > 3],
    "boolean mask write": lambda: X.clone().index_put_((X > 3,), torch.zeros(())),
    "unique": lambda: torch.unique(X),
    "unique_consecutive": lambda: torch.unique_consecutive(X),
    "masked_select": lambda: X.masked_select(X > 3),
    "repeat_interleave without output_size": lambda: torch.repeat_interleave(torch.ones(3, dtype=torch.long)),
    "tensor repeats without output_size": lambda: X[:3].repeat_interleave(torch.ones(3, dtype=torch.long)),
    "bincount": lambda: torch.bincount(torch.ones(3, dtype=torch.long)),
    "torch.tensor from host data": lambda: torch.tensor([1, 2]),
    "copy to another device": lambda: X.to("meta"),
    "torch.equal": lambda: torch.equal(X, X),
}


@pytest.mark.parametrize("name", sorted(SYNCING))
def test_the_checker_catches_each_syncing_operation(name):
    with pytest.raises(HostSyncError), no_host_sync():
        SYNCING[name]()


def test_the_checker_lets_device_side_work_through():
    g = gen(0)
    with no_host_sync() as ops:
        r = torch.randint(10, (5,), generator=g)
        torch.repeat_interleave(r, torch.ones_like(r), output_size=5)
        torch.where(X > 3, X, 0.0)
        torch.searchsorted(X, r.to(torch.float32))
        torch.index_select(X, 0, r)
    assert "aten.randint.generator" in ops and "aten.searchsorted.Tensor" in ops


SAMPLERS = {
    "uniform": RandomSampler,
    "without replacement": SamplerWithoutReplacement,
    "slices": lambda: SliceSampler(slice_len=8),
    "slices without replacement": lambda: SliceSamplerWithoutReplacement(slice_len=8),
    "prioritized": lambda: PrioritizedSampler(N, 0.6, 0.4),
    "prioritized slices": lambda: PrioritizedSliceSampler(N, 0.6, 0.4, slice_len=8),
}


def device_buffer(name, device="cpu"):
    host = TensorDictReplayBuffer(storage=host_build(), sampler=SAMPLERS[name](), batch_size=64)
    rb = to_device(host, device, generator=gen(1, device))
    if "prioritized" in name:
        rb.sampler.extend(torch.arange(N))
        rb.sampler.prepare(rb.storage, 64)
    return rb


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_buffer_sampling_on_the_device_never_syncs(name):
    rb = device_buffer(name)
    with no_host_sync():
        for _ in range(12):  # crosses epoch ends for the samplers without replacement
            batch = rb.sample()
            if "prioritized" in name:
                rb.update_priority(batch["index"], batch["index"].to(torch.float64) % 3)
    assert 0 < batch.batch_size[0] <= 64 and batch.device == torch.device("cpu")


@pytest.mark.parametrize("name", ["prioritized", "prioritized slices"])
def test_the_first_sample_after_new_rows_never_syncs(name):
    """Without ``prepare``, the first ``sample()`` builds the sampler's device tables (slice-start
    trees, say), and so does the first one after ``extend``: that work must not sync either."""
    host = TensorDictReplayBuffer(storage=host_build(), sampler=SAMPLERS[name](), batch_size=64)
    rb = to_device(host, "cpu", generator=gen(1))
    rb.sampler.extend(torch.arange(N))
    with no_host_sync():
        rb.sample()
    rb.sampler.extend(torch.arange(5))
    with no_host_sync():
        rb.sample()


def test_the_checker_fails_on_the_host_slice_sampler():
    rb = TensorDictReplayBuffer(storage=host_build(), sampler=SliceSampler(slice_len=8), batch_size=64)
    rb.sample()
    with pytest.raises(HostSyncError), no_host_sync():
        rb.sample()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the CPU check above covers the ops")
@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_cuda_sampling_passes_cuda_sync_debug_mode(name):
    rb = device_buffer(name, "cuda")
    rb.sample()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(12):
            batch = rb.sample()
            if "prioritized" in name:
                rb.update_priority(batch["index"], batch["index"].to(torch.float64) % 3)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    assert batch.device.type == "cuda"
