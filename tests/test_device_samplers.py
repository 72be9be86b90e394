"""Device transition samplers: the host samplers' batches, priorities and trees, exactly, on the CPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from datasets_hub.buffers.device.samplers import (
    DevicePrioritizedSampler,
    DeviceRandomSampler,
    DeviceSamplerWithoutReplacement,
    reduce_repeated,
)
from datasets_hub.buffers.device.trees import device_max_tree, device_min_tree, device_sum_tree
from datasets_hub.buffers.samplers.prioritized import (
    PrioritizedSampler,
    max_tree,
    min_tree,
    reduce_priorities,
    sum_tree,
)
from datasets_hub.buffers.samplers.random import RandomSampler, SamplerWithoutReplacement
from datasets_hub.errors import InvalidParameter

from fixtures.device import N, chi_square_ok, gen, host_build


@pytest.fixture
def storages():
    host = host_build()
    return host, host.device_copy("cpu")


def test_uniform_draws_equal_the_host_sampler(storages):
    host, dev = storages
    h, d = RandomSampler(), DeviceRandomSampler()
    h.generator, d.generator = gen(5), gen(5)
    for _ in range(3):
        hi, _ = h.sample(host, 64)
        di, info = d.sample(dev, 64)
        assert torch.equal(hi, di) and info == {}


def test_a_generator_on_another_device_or_a_host_storage_is_refused(storages):
    host, dev = storages
    d = DeviceRandomSampler()
    with pytest.raises(InvalidParameter, match="samples a DeviceStorage"):
        d.sample(host, 4)
    d.generator = SimpleNamespace(device=torch.device("cuda", 0))  # no accelerator needed to check the refusal
    with pytest.raises(InvalidParameter, match=r"generator=torch.Generator\(device='cpu'\)"):
        d.sample(dev, 4)


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_epochs_without_replacement_equal_the_host_sampler(storages, drop_last, shuffle):
    host, dev = storages
    h, d = SamplerWithoutReplacement(drop_last, shuffle), DeviceSamplerWithoutReplacement(drop_last, shuffle)
    h.generator, d.generator = gen(2), gen(2)
    seen = []
    for _ in range(2 * (N // 50 + 1)):
        hi, _ = h.sample(host, 50)
        di, _ = d.sample(dev, 50)
        assert torch.equal(hi, di) and h.ran_out == d.ran_out
        seen.append(di)
        if d.ran_out:
            break
    rows = torch.cat(seen)
    assert rows.unique().numel() == rows.numel() == (N if not drop_last else N // 50 * 50)


@pytest.mark.parametrize("reduction", ["max", "min", "mean", "median"])
def test_repeated_indices_reduce_as_on_the_host(reduction):
    g = gen(3)
    index = torch.randint(20, (200,), generator=g)
    value = torch.rand(200, dtype=torch.float64, generator=g)
    uniq, expected = reduce_priorities(index, value, reduction)
    got = reduce_repeated(index, value, reduction)
    table = dict(zip(uniq.tolist(), expected.tolist(), strict=True))
    for i, v in zip(index.tolist(), got.tolist(), strict=True):
        assert v == pytest.approx(table[i], rel=1e-12, abs=0)


@pytest.mark.parametrize(
    "device_tree, host_tree", [(device_sum_tree, sum_tree), (device_min_tree, min_tree), (device_max_tree, max_tree)]
)
def test_tree_nodes_equal_the_host_tree_bit_for_bit(device_tree, host_tree):
    g = gen(4)
    for capacity in (1, 5, 64, 1000):
        d, h = device_tree(capacity, torch.device("cpu")), host_tree(capacity)
        for _ in range(5):
            index = torch.randint(capacity, (37,), generator=g)
            values = torch.rand(37, dtype=torch.float64, generator=g)
            uniq, vals = reduce_priorities(index, values, "max")
            h.set_(uniq, vals)
            d.set_(index, reduce_repeated(index, values, "max"))  # repeats carry equal values
            assert torch.equal(d.tree, h.tree)
        leaves = torch.rand(capacity, dtype=torch.float64, generator=g)
        d.fill_(leaves)
        h.fill_(leaves)
        assert torch.equal(d.tree, h.tree)
    s_d, s_h = device_sum_tree(1000, torch.device("cpu")), sum_tree(1000)
    leaves = torch.rand(1000, dtype=torch.float64, generator=g) * (torch.rand(1000, generator=g) > 0.3)
    s_d.fill_(leaves)
    s_h.fill_(leaves)
    mass = torch.rand(500, dtype=torch.float64, generator=g) * s_h.root
    assert torch.equal(s_d.find_prefix(mass), s_h.find_prefix(mass))


def _pair(**kwargs):
    h = PrioritizedSampler(N, 0.7, 0.4, **kwargs)
    d = DevicePrioritizedSampler(N, 0.7, 0.4, **kwargs, device="cpu")
    h.generator, d.generator = gen(9), gen(9)
    return h, d


@pytest.mark.parametrize("reduction", ["max", "mean"])
@pytest.mark.parametrize("within", [False, True])
def test_prioritized_sampling_and_updates_equal_the_host_sampler(storages, reduction, within):
    host, dev = storages
    h, d = _pair(reduction=reduction, max_priority_within_buffer=within)
    h.extend(torch.arange(N))
    d.extend(torch.arange(N))
    g = gen(11)
    for _ in range(4):
        hi, hinfo = h.sample(host, 128)
        di, dinfo = d.sample(dev, 128)
        assert torch.equal(hi, di)
        assert torch.equal(hinfo["_weight"], dinfo["_weight"])
        prio = torch.rand(128, dtype=torch.float64, generator=g) * 5
        h.update_priority(hi, prio)
        d.update_priority(di, prio)
        assert torch.allclose(h.sampling_weights(), d.sampling_weights(), rtol=1e-12, atol=0)
    h.extend(torch.arange(10))  # new rows take the largest priority seen (or held)
    d.extend(torch.arange(10))
    assert torch.allclose(h.priorities(torch.arange(N)), d.priorities(torch.arange(N)), rtol=1e-6)


def test_prioritized_sampling_follows_the_priorities(storages):
    _host, dev = storages
    d = DevicePrioritizedSampler(N, 1.0, 0.5, device="cpu")
    d.generator = gen(1)
    d.extend(torch.arange(N))
    prio = (torch.arange(N) % 7).to(torch.float64)
    d.update_priority(torch.arange(N), prio)
    counts = torch.zeros(N)
    for _ in range(40):
        index, _ = d.sample(dev, 1000)
        counts += torch.bincount(index, minlength=N)
    stat, crit = chi_square_ok(counts, d.sampling_weights())
    assert stat < crit, (stat, crit)


def test_prioritized_refusals(storages):
    _host, dev = storages
    d = DevicePrioritizedSampler(N, 0.5, 0.5, device="cpu")
    with pytest.raises(RuntimeError, match="no priorities"):
        d.sample(dev, 4)
    d.extend(torch.arange(N))
    with pytest.raises(RuntimeError, match="finite and >= 0"):
        d.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, float("nan")]))
    with pytest.raises(RuntimeError, match="max_capacity"):
        d.update_priority(torch.tensor([N + 5]), torch.tensor([1.0]))
    small = DevicePrioritizedSampler(10, 0.5, 0.5, device="cpu")
    small.extend(torch.arange(10))
    with pytest.raises(ValueError, match="max_capacity=10"):
        small.sample(dev, 4)


def test_prioritized_state_moves_between_host_and_device(storages):
    host, dev = storages
    h, d = _pair()
    h.extend(torch.arange(N))
    h.update_priority(torch.arange(0, N, 3), torch.rand(len(range(0, N, 3)), generator=gen(6)))
    d.load_state_dict(h.state_dict())
    assert torch.equal(h.sampling_weights(), d.sampling_weights())
    back = PrioritizedSampler(N, 0.7, 0.4)
    back.load_state_dict(d.state_dict())
    assert torch.equal(back.sampling_weights(), h.sampling_weights())
    hi, hinfo = h.sample(host, 64)
    di, dinfo = d.sample(dev, 64)
    assert torch.equal(hi, di) and torch.equal(hinfo["_weight"], dinfo["_weight"])


def test_an_epoch_resumes_from_its_state(storages):
    _host, dev = storages
    a = DeviceSamplerWithoutReplacement()
    a.generator = gen(6)
    a.sample(dev, 50)
    b = DeviceSamplerWithoutReplacement()
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.sample(dev, 50)[0], b.sample(dev, 50)[0])
