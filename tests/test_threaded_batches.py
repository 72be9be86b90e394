"""ThreadedBatches: SampledBatches.dataloader(num_workers=k) over a build samples in k threads, giving the
batches (values, order, seeds) that k DataLoader worker processes give, without any batch crossing processes."""

from __future__ import annotations

import threading

import pytest
import torch

from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers import SliceSampler
from datasets_hub.build.pipeline import build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import InvalidParameter
from datasets_hub.interop.threaded_batches import ThreadedBatches
from datasets_hub.interop.torch_data import SampledBatches
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader, fake_episodes


@pytest.fixture
def rb():
    class ChunkLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            yield fake_episodes([7, 12, 3, 20, 9, 15])

    path = build(DatasetSpec(id="fake/threads", loader="fake", params={}), ChunkLoader(), {}, [])
    return TensorDictReplayBuffer(storage=DatasetStorage(path), sampler=SliceSampler(slice_len=3), batch_size=6)


def _all(loader):
    return list(loader)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_threads_give_the_batches_worker_processes_give(rb, workers):
    ds = SampledBatches(rb, num_batches=7, seed=5)
    threaded = ds.dataloader(num_workers=workers)  # a build: threads by default
    assert isinstance(threaded, ThreadedBatches) and len(threaded) == 7
    processes = ds.dataloader(num_workers=workers, workers="processes", multiprocessing_context="spawn")
    a, b = _all(threaded), _all(processes)
    assert len(a) == len(b) == 7
    for x, y in zip(a, b, strict=True):
        assert set(x.keys(True, True)) == set(y.keys(True, True))
        for key in x.keys(True, True):
            assert torch.equal(x[key], y[key]), key
    # each batch is the build's rows at its index (slices of 3 consecutive steps of one episode)
    for batch in a:
        assert torch.equal(batch["observation"], rb.storage.get(batch["index"])["observation"])
        steps = batch["step"].reshape(2, 3)
        assert (steps[:, 1:] - steps[:, :-1] == 1).all()


def test_one_generator_gives_the_same_batches_with_threads_and_processes(rb):
    """dataloader(generator=g) without seed=: threads draw the base seed from g exactly as a DataLoader does."""
    ds = SampledBatches(rb, num_batches=6)
    threaded = ds.dataloader(num_workers=2, generator=torch.Generator().manual_seed(1))
    processes = ds.dataloader(
        num_workers=2, workers="processes", multiprocessing_context="spawn", generator=torch.Generator().manual_seed(1)
    )
    a, b = _all(threaded), _all(processes)
    assert len(a) == len(b) == 6
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x["index"], y["index"])
        assert torch.equal(x["observation"], y["observation"])
    other = _all(ds.dataloader(num_workers=2, generator=torch.Generator().manual_seed(2)))
    assert [x["index"].tolist() for x in a] != [x["index"].tolist() for x in other]


def test_generator_seeds_the_streams_and_endless_streams_stop(rb):
    def first(seed, n=4):
        out = []
        for batch in SampledBatches(rb).dataloader(num_workers=2, generator=torch.Generator().manual_seed(seed)):
            out.append(batch["index"].tolist())
            if len(out) == n:
                break  # an endless stream: leaving the loop stops the threads
        return out

    assert first(1) == first(1) != first(2)
    assert not [t for t in threading.enumerate() if t.name.startswith("datasets_hub_sampler_")]


def test_errors_reach_the_consumer_and_bad_options_teach(rb):
    class Boom(SliceSampler):
        def sample(self, storage, batch_size):
            raise RuntimeError("sampler failed")

    broken = TensorDictReplayBuffer(storage=rb.storage, sampler=Boom(slice_len=3), batch_size=6)
    with pytest.raises(RuntimeError, match="sampler failed"):
        _all(SampledBatches(broken, num_batches=2, seed=0).dataloader(num_workers=2))
    ds = SampledBatches(rb, num_batches=2, seed=0)
    with pytest.raises(InvalidParameter, match="thread workers"):
        ds.dataloader(num_workers=2, workers="threads", multiprocessing_context="spawn")
    # a process-only option asks for DataLoader worker processes
    assert isinstance(ds.dataloader(num_workers=2, multiprocessing_context="spawn"), torch.utils.data.DataLoader)
    with pytest.raises(InvalidParameter, match="workers must be"):
        ds.dataloader(num_workers=2, workers="fibers")
    with pytest.raises(ValueError, match="num_workers"):
        ThreadedBatches(ds, 0)
