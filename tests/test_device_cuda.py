"""Device sampling on a real CUDA device: values, rules and laws (skipped on a machine without CUDA).

The other device tests run the device code path with ``device="cpu"``, where a seeded device sampler
draws exactly what the host sampler draws. A CUDA generator draws other numbers, so here each batch is
checked against what must hold whatever the draw: every leaf equals the host build's row at the
returned index, slices stay inside one episode and are contiguous, an epoch without replacement
covers each row once, prioritized trees equal the host trees bit for bit, goals are rows of their
episode, and the draws follow their law (chi-square). ``torch.cuda.set_sync_debug_mode("error")``
surrounds every ``sample()``.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch

import datasets_hub as dh
from datasets_hub import (
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from datasets_hub.buffers.device import DeviceStorage, device_sampler, to_device
from datasets_hub.buffers.device.samplers import reduce_repeated
from datasets_hub.buffers.device.trees import device_max_tree, device_min_tree, device_sum_tree
from datasets_hub.buffers.samplers.goal import GoalSampler
from datasets_hub.buffers.samplers.prioritized import max_tree, min_tree, reduce_priorities, sum_tree
from datasets_hub.errors import InvalidParameter

from fixtures.device import LENGTHS, N, chi_square_ok, gen, host_build

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA = torch.device("cuda")
STARTS = torch.tensor([0, *LENGTHS]).cumsum(0)[:-1]


@contextmanager
def cuda_never_syncs():
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()


def sample(rb):
    with cuda_never_syncs():
        return rb.sample()


def assert_rows_of(host, batch, slice_len=None):
    """Every leaf of ``batch`` (on CUDA) equals the host build's rows at ``batch["index"]``; with
    ``slice_len``, ``("next", "truncated")`` also marks each slice's last row (and ``done`` follows)."""
    assert batch.device.type == "cuda"
    expected = host.get(batch["index"].cpu())
    if slice_len is not None:
        cut = torch.zeros(batch.numel(), 1, dtype=torch.bool)
        cut[slice_len - 1 :: slice_len] = True
        expected["next", "truncated"] = expected["next", "truncated"] | cut
        expected["next", "done"] = expected["next", "done"] | cut
    for key in expected.keys(True, True):
        assert torch.equal(batch[key].cpu(), expected[key]), key


def cuda_buffer(sampler, batch_size=64, seed=1):
    host = TensorDictReplayBuffer(storage=host_build(), sampler=sampler, batch_size=batch_size)
    return host.storage, to_device(host, "cuda", generator=gen(seed, "cuda"))


def test_the_cuda_copy_holds_the_host_values():
    host = host_build()
    dev = host.device_copy("cuda")
    assert isinstance(dev, DeviceStorage) and len(dev) == N
    every = torch.arange(N)
    got, expected = dev.get(every.to(CUDA)), host.get(every)
    for key in expected.keys(True, True):
        assert torch.equal(got[key].cpu(), expected[key]), key


def test_uniform_batches_are_host_rows_drawn_uniformly():
    host, rb = cuda_buffer(RandomSampler(), batch_size=512)
    counts = torch.zeros(N)
    for _ in range(60):
        batch = sample(rb)
        assert_rows_of(host, batch)
        counts += torch.bincount(batch["index"].cpu(), minlength=N)
    stat, crit = chi_square_ok(counts, torch.ones(N))
    assert stat < crit, (stat, crit)


def test_an_epoch_without_replacement_covers_every_row_once():
    host, rb = cuda_buffer(SamplerWithoutReplacement(drop_last=False), batch_size=50)
    seen = []
    while True:
        batch = sample(rb)
        assert_rows_of(host, batch)
        seen.append(batch["index"].cpu())
        if rb.sampler.ran_out:
            break
    rows = torch.cat(seen)
    assert rows.numel() == N and torch.equal(rows.sort().values, torch.arange(N))


@pytest.mark.parametrize(
    "make", [lambda: SliceSampler(slice_len=8), lambda: SliceSamplerWithoutReplacement(slice_len=8)]
)
def test_slices_are_contiguous_rows_of_one_episode(make):
    host, rb = cuda_buffer(make(), batch_size=64)
    for _ in range(10):
        batch = sample(rb)
        assert_rows_of(host, batch, slice_len=8)
        ep, step = batch["episode"].cpu().reshape(-1, 8), batch["step"].cpu().reshape(-1, 8)
        assert (ep == ep[:, :1]).all(), "a slice crossed an episode end"
        assert (torch.diff(step, dim=1) == 1).all(), "slices must be contiguous"


def test_slice_starts_follow_the_uniform_law_over_valid_starts():
    _host, rb = cuda_buffer(SliceSampler(slice_len=8), batch_size=8 * 64)
    counts = torch.zeros(N)
    for _ in range(100):
        index = sample(rb)["index"].cpu()
        counts += torch.bincount(index.reshape(-1, 8)[:, 0], minlength=N)
    valid = torch.zeros(N)
    for start, length in zip(STARTS.tolist(), LENGTHS, strict=True):
        if length >= 8:
            valid[start : start + length - 7] = 1
    stat, crit = chi_square_ok(counts, valid)
    assert stat < crit, (stat, crit)


@pytest.mark.parametrize(
    "device_tree, host_tree", [(device_sum_tree, sum_tree), (device_min_tree, min_tree), (device_max_tree, max_tree)]
)
def test_cuda_trees_equal_the_host_trees_bit_for_bit(device_tree, host_tree):
    g = gen(4)
    for capacity in (1, 5, 64, 1000):
        d, h = device_tree(capacity, CUDA), host_tree(capacity)
        for _ in range(5):
            index = torch.randint(capacity, (37,), generator=g)
            values = torch.rand(37, dtype=torch.float64, generator=g)
            uniq, vals = reduce_priorities(index, values, "max")
            h.set_(uniq, vals)
            # repeated indices carry equal values: CUDA's unordered duplicate writes must agree
            d.set_(index.to(CUDA), reduce_repeated(index, values, "max").to(CUDA))
            assert torch.equal(d.tree.cpu(), h.tree)
    s_d, s_h = device_sum_tree(1000, CUDA), sum_tree(1000)
    leaves = torch.rand(1000, dtype=torch.float64, generator=g) * (torch.rand(1000, generator=g) > 0.3)
    s_d.fill_(leaves.to(CUDA))
    s_h.fill_(leaves)
    mass = torch.rand(500, dtype=torch.float64, generator=g) * s_h.root
    assert torch.equal(s_d.find_prefix(mass.to(CUDA)).cpu(), s_h.find_prefix(mass))


@pytest.mark.parametrize("slices", [False, True])
def test_prioritized_draws_follow_the_priorities_and_updates_never_sync(slices):
    sampler = PrioritizedSliceSampler(N, 1.0, 0.5, slice_len=8) if slices else PrioritizedSampler(N, 1.0, 0.5)
    host, rb = cuda_buffer(sampler, batch_size=8 * 64)
    rb.sampler.extend(torch.arange(N, device=CUDA))
    prio = (torch.arange(N) % 7).to(torch.float64)
    rb.sampler.update_priority(torch.arange(N, device=CUDA), prio.to(CUDA))
    counts = torch.zeros(N)
    for _ in range(40):
        batch = sample(rb)
        assert_rows_of(host, batch, slice_len=8 if slices else None)
        index = batch["index"].cpu()
        counts += torch.bincount(index.reshape(-1, 8)[:, 0] if slices else index, minlength=N)
        assert (batch["_weight"] > 0).all()
    if not slices:
        stat, crit = chi_square_ok(counts, rb.sampler.sampling_weights().cpu())
        assert stat < crit, (stat, crit)
    with cuda_never_syncs():
        rb.sampler.update_priority(batch["index"], torch.rand(batch.numel(), dtype=torch.float64, device=CUDA))


@pytest.mark.parametrize("future", ["geometric", "uniform", "final"])
def test_goals_are_observations_of_their_episode(future):
    host = host_build()
    dev = host.device_copy("cuda")
    d = device_sampler(GoalSampler(p_current=0.2, p_future=0.5, p_random=0.3, future=future), CUDA)
    d.generator = gen(2, "cuda")
    d.prepare(dev, 1024)
    with cuda_never_syncs():
        index, info = d.sample(dev, 1024)
    index, distance = index.cpu(), info[("goal", "distance")].cpu()
    kind, goal = info[("goal", "kind")].cpu(), info[("goal", "observation")].cpu()
    data = host.get(index)
    length = torch.tensor(LENGTHS)[data["episode"]]
    fut = kind == 1
    # OGBench's law: a future goal is a stored observation of the episode (time <= L - 1), the current
    # state only at the episode's last transition
    assert (distance[fut] >= 0).all() and (data["step"] + distance <= length - 1)[fut].all()
    assert ((distance == 0) == (data["step"] == length - 1))[fut].all()
    rows = (index + distance)[fut].numpy()
    expected = host.gather_states(("observation",), rows, np.zeros_like(rows, dtype=bool))
    assert torch.equal(goal[fut], expected)
    current = kind == 0
    assert torch.equal(goal[current], data["observation"][current])
    counts = torch.bincount(kind, minlength=3).to(torch.float64)
    stat, crit = chi_square_ok(counts, torch.tensor([0.2, 0.5, 0.3]))
    assert stat < crit, (stat, crit)


def test_load_on_cuda_gives_batches_of_the_build(isolated_cache):
    rb = dh.load(
        "gym/cartpole-random-v0", device="cuda", steps=600, seed=1, batch_size=64, sampler=SliceSampler(slice_len=8)
    )
    assert isinstance(rb.storage, DeviceStorage)
    host = dh.load("gym/cartpole-random-v0", steps=600, seed=1).storage
    for _ in range(3):
        assert_rows_of(host, sample(rb), slice_len=8)


GRAPHABLE = {
    "uniform": RandomSampler,
    "slices": lambda: SliceSampler(slice_len=8),
    "goals over slices": lambda: GoalSampler(
        p_current=0.2, p_future=0.5, p_random=0.3, sampler=SliceSampler(slice_len=8)
    ),
    "goals": lambda: GoalSampler(p_future=0.7, p_random=0.3, future="uniform"),
}


@pytest.mark.parametrize("kind", [TensorDictReplayBuffer, dh.ReplayBuffer])
@pytest.mark.parametrize("name", sorted(GRAPHABLE))
def test_cuda_graphs_give_the_eager_batches(name, kind):
    host = kind(storage=host_build(), sampler=GRAPHABLE[name](), batch_size=64)
    eager = to_device(host, "cuda", generator=gen(5, "cuda"))
    graphed = to_device(host, "cuda", generator=gen(5, "cuda"), cuda_graphs=True)
    kept = []
    for _ in range(4):
        a, a_info = eager.sample(return_info=True)
        with cuda_never_syncs():
            b, b_info = graphed.sample(return_info=True)
        assert b.device.type == "cuda"
        for key in a.keys(True, True):
            assert torch.equal(a[key], b[key]), key
        assert set(a_info) == set(b_info)
        for key, value in a_info.items():
            assert torch.equal(value, b_info[key]) if isinstance(value, torch.Tensor) else value == b_info[key], key
        kept.append((a.clone(), b))
    for a, b in kept:  # each batch is memory of its own: later replays did not overwrite it
        for key in a.keys(True, True):
            assert torch.equal(a[key], b[key]), key


def test_cuda_graphs_follow_a_new_generator_and_batch_size():
    host = TensorDictReplayBuffer(storage=host_build(), sampler=SliceSampler(slice_len=8), batch_size=64)
    eager = to_device(host, "cuda", generator=gen(5, "cuda"))
    graphed = to_device(host, "cuda", generator=gen(5, "cuda"), cuda_graphs=True)
    for rb in (eager, graphed):
        rb.sample()
        rb.set_rng(gen(9, "cuda"))
    for batch_size in (64, 128, 64):
        a, b = eager.sample(batch_size), graphed.sample(batch_size)
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["observation"], b["observation"])


def test_cuda_graphs_run_the_transform_on_each_batch():
    host = TensorDictReplayBuffer(storage=host_build(), sampler=RandomSampler(), batch_size=32)

    def double(td):
        return td.set("twice", td["observation"] * 2)

    rb = to_device(host, "cuda", generator=gen(1, "cuda"), transform=double, cuda_graphs=True)
    for _ in range(3):
        batch = rb.sample()
        assert torch.equal(batch["twice"], batch["observation"] * 2)


def test_cuda_graphs_refuse_stateful_samplers():
    host = TensorDictReplayBuffer(storage=host_build(), sampler=SamplerWithoutReplacement(), batch_size=32)
    with pytest.raises(InvalidParameter, match="host-side state between draws"):
        to_device(host, "cuda", cuda_graphs=True)


def test_load_with_cuda_graphs(isolated_cache):
    kwargs = {"steps": 600, "seed": 1, "batch_size": 64, "sampler": SliceSampler(slice_len=8)}
    rb = dh.load("gym/cartpole-random-v0", device="cuda", cuda_graphs=True, **kwargs)
    host = dh.load("gym/cartpole-random-v0", steps=600, seed=1).storage
    for _ in range(3):
        assert_rows_of(host, sample(rb), slice_len=8)
