"""to_device(rb) and load(..., device=...): the same batches as the host buffer, on the device path."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import datasets_hub as dh
from datasets_hub import (
    LazyTensorStorage,
    PrioritizedSliceSampler,
    ReplayBuffer,
    SliceSampler,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from datasets_hub.buffers.device import DeviceSliceSampler, DeviceStorage, device_sampler, to_device
from datasets_hub.errors import InvalidParameter, ReadOnlyError

from fixtures.device import N, gen, host_build

ID = "gym/cartpole-random-v0"
SMALL = {"steps": 600, "seed": 1}


def test_to_device_gives_the_host_batches():
    host = TensorDictReplayBuffer(storage=host_build(), sampler=SliceSampler(slice_len=8), batch_size=64)
    host.set_rng(gen(3))
    dev = to_device(host, "cpu", generator=gen(3))
    assert isinstance(dev.storage, DeviceStorage) and isinstance(dev.sampler, DeviceSliceSampler)
    for _ in range(3):
        a, b = host.sample(), dev.sample()
        for key in a.keys(True, True):
            assert torch.equal(a[key], b[key]), key
    with pytest.raises(ReadOnlyError):
        dev.extend(a)


def test_an_online_buffer_moves_with_the_episodes_its_slice_sampler_finds():
    n = 60
    episode = torch.arange(n) // 12  # five episodes of 12 rows, found from the episode ids
    data = TensorDict({"obs": torch.arange(n, dtype=torch.float32)[:, None], "episode": episode}, [n])
    host = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=SliceSampler(slice_len=4), batch_size=40)
    host.extend(data)
    dev = to_device(host, "cpu", generator=gen(0))
    assert dev.storage.episode_index().num_episodes == 5
    batch = dev.sample()
    ep = batch["episode"].reshape(10, 4)
    assert (ep == ep[:, :1]).all()
    assert torch.equal(batch["obs"].reshape(-1).long(), batch["index"])


def test_a_sampler_without_a_device_twin_is_refused():
    from datasets_hub.buffers.samplers.window import WindowSampler

    with pytest.raises(InvalidParameter, match="WindowSampler has no device twin: device sampling supports"):
        device_sampler(WindowSampler(keys=["observation"], offsets=[-1, 0]), torch.device("cpu"))
    with pytest.raises(InvalidParameter, match="ReplayBuffer or TensorDictReplayBuffer"):
        to_device(TensorDictPrioritizedReplayBuffer(alpha=0.5, beta=0.5, storage=host_build()), "cpu")


def test_prioritized_slice_settings_and_priorities_move_to_the_device():
    host_sampler = PrioritizedSliceSampler(N, 0.3, 0.9, eps=1e-3, reduction="mean", slice_len=8)
    host_sampler.extend(torch.arange(N))
    host_sampler.update_priority(torch.arange(10), torch.arange(10.0))
    twin = device_sampler(host_sampler, torch.device("cpu"))
    assert (twin.prio.eps, twin.prio.reduction, twin.alpha, twin.beta) == (1e-3, "mean", 0.3, 0.9)
    assert torch.equal(twin.priorities(torch.arange(N)), host_sampler.priorities(torch.arange(N)))


def test_a_generator_on_another_device_is_refused():
    from types import SimpleNamespace

    rb = ReplayBuffer(storage=host_build(), batch_size=4)
    with pytest.raises(InvalidParameter, match=r"pass generator=torch.Generator\(device='cpu'\)"):
        to_device(rb, "cpu", generator=SimpleNamespace(device=torch.device("cuda", 0)))


def test_load_on_the_cpu_device_samples_the_rows_it_claims():
    rb = dh.load(ID, batch_size=64, sampler=SliceSampler(slice_len=16), device="cpu", generator=gen(1), **SMALL)
    host = dh.load(ID, batch_size=64, sampler=SliceSampler(slice_len=16), generator=gen(1), **SMALL)
    assert isinstance(rb.storage, DeviceStorage)
    a, b = rb.sample(), host.sample()
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), key
    rows = host.storage.get(b["index"])
    assert torch.equal(rows["observation"], a["observation"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_load_on_cuda_without_a_gpu_fails_before_building(isolated_cache):
    with pytest.raises(InvalidParameter, match="no usable CUDA device"):
        dh.load(ID, device="cuda", **SMALL)
    assert not list(isolated_cache.rglob("manifest.json"))


def test_a_device_copy_is_never_pickled_and_forks_share_it():
    import pickle

    rb = to_device(
        TensorDictReplayBuffer(storage=host_build(), sampler=SliceSampler(slice_len=8), batch_size=16), "cpu"
    )
    rb.sample()
    with pytest.raises(InvalidParameter, match="not pickled or deep-copied"):
        pickle.dumps(rb.storage)
    worker = rb.fork(gen(5))  # the sampler is copied, the data is not
    assert worker.storage is rb.storage and worker.sample().batch_size == (16,)


def test_buffers_derived_on_the_host_refuse_device_samplers():
    rb = to_device(TensorDictReplayBuffer(storage=host_build(), batch_size=16), "cpu")
    subset = rb.episodes.filter(lambda stats: stats["length"] > 10)
    with pytest.raises(InvalidParameter, match="samples a DeviceStorage, not EpisodeSubsetStorage: use"):
        subset.sample()


def test_load_with_preprocessing_moves_the_preprocessed_rows():
    from fixtures.preprocess import obs_feature

    kwargs = {"batch_size": 32, "preprocess": obs_feature, **SMALL}
    host = dh.load(ID, generator=gen(2), **kwargs)
    dev = dh.load(ID, device="cpu", generator=gen(2), **kwargs)
    assert isinstance(dev.storage, DeviceStorage) and len(dev) == len(host)
    a, b = host.sample(), dev.sample()
    assert torch.equal(a["index"], b["index"]) and torch.equal(a["feature"], b["feature"])


def test_prefetching_keeps_the_device_batches_in_order():
    kwargs = {"batch_size": 64, "sampler": SliceSampler(slice_len=8), "device": "cpu", **SMALL}
    ahead = dh.load(ID, prefetch=3, generator=gen(0), **kwargs)
    plain = dh.load(ID, generator=gen(0), **kwargs)
    for _ in range(6):
        assert torch.equal(ahead.sample()["index"], plain.sample()["index"])


def test_cuda_graphs_are_refused_off_cuda_and_for_stateful_samplers():
    from datasets_hub import SamplerWithoutReplacement
    from datasets_hub.buffers.device.graphs import graphable

    host = TensorDictReplayBuffer(storage=host_build(), sampler=SliceSampler(slice_len=8), batch_size=64)
    with pytest.raises(InvalidParameter, match="needs device='cuda'"):
        to_device(host, "cpu", cuda_graphs=True)
    with pytest.raises(InvalidParameter, match="cuda_graphs must be True or False"):
        to_device(host, "cpu", cuda_graphs="yes")
    assert graphable(device_sampler(SliceSampler(slice_len=8), torch.device("cpu"))) is None
    for sampler in (SamplerWithoutReplacement(), PrioritizedSliceSampler(N, 0.6, 0.4, slice_len=8)):
        reason = graphable(device_sampler(sampler, torch.device("cpu")))
        assert reason is not None and "host-side state between draws" in reason


def test_load_refuses_cuda_graphs_without_a_device(isolated_cache):
    with pytest.raises(InvalidParameter, match="pass device='cuda' with it"):
        dh.load(ID, cuda_graphs=True, **SMALL)


@pytest.mark.parametrize("kind", [ReplayBuffer, TensorDictReplayBuffer])
def test_sample_goes_through_the_hook_the_graphed_buffers_override(kind, monkeypatch):
    """GraphedReplayBuffer/GraphedTensorDictReplayBuffer replay graphs in ``_sample_now``: every draw
    (sample, iteration, prefetch) must reach it, or graphs would silently stop being used."""
    calls = []
    real = kind._sample_now

    def counting(self, batch_size):
        calls.append(batch_size)
        return real(self, batch_size)

    monkeypatch.setattr(kind, "_sample_now", counting)
    rb = kind(storage=host_build(), sampler=SliceSampler(slice_len=8), batch_size=16)
    rb.sample()
    next(iter(rb))
    assert calls == [16, 16]
