"""A replay buffer served by a Ray actor, used from Ray tasks and by name (issue 5, Ray interop).

Ray starts once for the module (``ray.init(num_cpus=2)``: a few seconds on this machine).
"""

from __future__ import annotations

import functools
import os

import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.replay_buffers import TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer
from datasets_hub.buffers.samplers.slice import SliceSampler
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.build.pipeline import build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.interop.ray import RayReplayBuffer
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray  # slow start-up: `make test-ray` runs these, `make test` may deselect them


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="datasets_hub_tests")
    yield
    ray.shutdown()


@ray.remote
def draw(handle, batch_size):
    return handle.sample(batch_size)


@ray.remote
def feed(name, first, count):
    handle = RayReplayBuffer.connect(name, namespace="datasets_hub_tests")  # found by name, in another process
    values = torch.arange(first, first + count, dtype=torch.float32)
    index = handle.extend(TensorDict({"x": values}, batch_size=[count]))
    return index.tolist(), os.getpid()


# the actor calls the factory; a partial of importable names pickles anywhere (a test module's
# own functions are not importable in Ray's workers)
_online_buffer = functools.partial(
    TensorDictPrioritizedReplayBuffer, alpha=1.0, beta=1.0, storage=LazyTensorStorage(200), batch_size=32
)


def test_a_build_served_by_an_actor_to_tasks(ray_cluster):
    path = build(DatasetSpec(id="fake/ray", loader="fake", params={"lengths": [6, 9, 4, 7]}), FakeLoader(), {}, [])
    local = DatasetStorage(path)
    rb = TensorDictReplayBuffer(storage=local, sampler=SliceSampler(slice_len=3), batch_size=9)
    handle = RayReplayBuffer(rb)
    described = handle.describe()
    assert described["path"] == str(path) and described["pid"] != os.getpid()  # the actor opened the build itself
    assert len(handle) == handle.len() == 26
    for batch in [handle.sample(), ray.get(draw.remote(handle, 6))]:
        expected = local.get(batch["index"])
        torch.testing.assert_close(batch["observation"], expected["observation"], rtol=0, atol=0)
        torch.testing.assert_close(batch["next", "observation"], batch["observation"] + 100)
        episodes = batch["episode"].reshape(-1, 3)
        assert (episodes == episodes[:, :1]).all()  # the buffer's own slice sampler came along
    with pytest.raises(RuntimeError, match="read-only"):
        handle.extend(local.get(torch.arange(2)))
    handle.kill()


def test_an_online_prioritized_buffer_fed_and_sampled_from_tasks(ray_cluster):
    handle = RayReplayBuffer(_online_buffer, name="shared-buffer")
    written = ray.get([feed.remote("shared-buffer", 0, 50), feed.remote("shared-buffer", 50, 50)])
    assert sorted(i for index, _ in written for i in index) == list(range(100))
    assert all(pid != os.getpid() for _, pid in written)
    assert len(handle) == 100
    values = handle[torch.arange(100)]["x"]
    assert sorted(values.tolist()) == list(range(100))
    # priorities live in the actor: make one item dominant and every client sees it
    handle.update_priority(torch.arange(100), torch.full((100,), 1e-6))
    handle.update_priority(torch.tensor([7]), torch.tensor([1.0]))
    batch = ray.get(draw.remote(handle, 64))
    assert (batch["index"] == 7).float().mean() > 0.95  # p = 1 / (1 + 99e-6)
    handle.kill()
    with pytest.raises(ValueError, match="no Ray replay-buffer actor"):
        RayReplayBuffer.connect("no-such-buffer", namespace="datasets_hub_tests")
