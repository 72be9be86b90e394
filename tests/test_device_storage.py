"""DeviceStorage: a build or any TensorDict storage copied to a device gathers the same rows."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub import LazyTensorStorage
from datasets_hub.buffers.device import memory
from datasets_hub.buffers.device.storage import DeviceStorage
from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.errors import InvalidParameter, ReadOnlyError

from fixtures.device import LENGTHS, N, host_build


def same(a, b):
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        assert a[key].dtype == b[key].dtype, key
        assert torch.equal(a[key], b[key]), key


def test_build_copy_gathers_exactly_the_host_rows():
    host = host_build()
    dev = host.device_copy("cpu")
    assert len(dev) == N and dev.nbytes > 0 and dev.device == torch.device("cpu")
    index = torch.randint(N, (300,), generator=torch.Generator().manual_seed(1))
    same(host.get(index), dev.get(index))
    # every episode boundary, both sides: next/observation never crosses into the next episode
    ends = torch.cumsum(torch.tensor(LENGTHS), 0)
    edges = torch.cat([ends - 1, ends[:-1]])
    same(host.get(edges), dev.get(edges))
    same(host.get(slice(None)), dev.get(slice(None)))
    assert torch.equal(dev.episode_index().start, host.episode_index().start)
    assert dev.device_episode_index().length.device == torch.device("cpu")


def test_gather_key_and_read_key_match_the_host():
    host, dev = host_build(), host_build().device_copy("cpu")
    rows = torch.tensor([0, 29, 30, 34, 35, N - 1])
    for key in ["observation", ("next", "observation"), "action", ("next", "reward"), ("next", "done"), "step"]:
        assert torch.equal(dev.gather_key(key, rows), host.gather_key(key, rows)), key
    assert torch.equal(dev.read_key(("next", "done")).reshape(-1), host.read_key(("next", "done")).reshape(-1))
    assert torch.equal(dev.read_key("episode"), host.read_key("episode"))


def test_host_indices_are_checked_and_negative_ones_wrap():
    dev = host_build().device_copy("cpu")
    assert torch.equal(dev.get(-1)["step"], dev.get(N - 1)["step"])
    assert dev.get([[0, 1], [2, 3]]).batch_size == (2, 2)
    with pytest.raises(IndexError, match="out of range"):
        dev.get([N])
    with pytest.raises(TypeError, match="integers"):
        dev.get(torch.tensor([0.5]))


def test_writes_are_refused():
    dev = host_build().device_copy("cpu")
    with pytest.raises(ReadOnlyError):
        dev.set(0, dev.get(torch.tensor([0])))
    with pytest.raises(ReadOnlyError):
        dev.empty()


def test_a_copy_that_does_not_fit_is_refused_naming_both_sizes(monkeypatch):
    monkeypatch.setattr(memory, "free_bytes", lambda device: 1000)
    with pytest.raises(InvalidParameter, match=r"needs [\d,]+ bytes .* on cpu, which has 1,000 bytes"):
        host_build().device_copy("cpu")


def test_free_memory_is_known_on_this_machine():
    free = memory.free_bytes(torch.device("cpu"))
    assert free is None or free > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(InvalidParameter, match="no usable CUDA device"):
        host_build().device_copy("cuda")


def test_flat_copy_of_a_tensor_storage_keeps_every_leaf():
    n = 40
    data = TensorDict(
        {"obs": torch.arange(n * 2.0).reshape(n, 2), "episode": torch.arange(n) // 10, "next": {"r": torch.rand(n, 1)}},
        [n],
    )
    storage = LazyTensorStorage(100)
    storage.set(torch.arange(n), data)
    episodes = EpisodeIndex.from_lengths([10, 10, 10, 10])
    dev = DeviceStorage.from_storage(storage, "cpu", episodes=episodes)
    assert len(dev) == n
    index = torch.tensor([3, 39, 0, 17])
    same(storage.get(index), dev.get(index))
    assert dev.episode_index().num_episodes == 4


def test_flat_copy_refuses_non_tensor_data():
    from datasets_hub import ListStorage

    storage = ListStorage(10)
    storage.set(0, {"a": 1})
    with pytest.raises(InvalidParameter, match="not a TensorDict"):
        DeviceStorage.from_storage(storage, "cpu")
