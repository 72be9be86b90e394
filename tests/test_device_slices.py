"""Device slice samplers: the host slice samplers' rules and batches, exactly, on the CPU."""

from __future__ import annotations

import pytest
import torch

from datasets_hub.buffers.device.slices import (
    DevicePrioritizedSliceSampler,
    DeviceSliceSampler,
    DeviceSliceSamplerWithoutReplacement,
)
from datasets_hub.buffers.samplers.prioritized import PrioritizedSliceSampler
from datasets_hub.buffers.samplers.slice import SliceSampler, SliceSamplerWithoutReplacement
from datasets_hub.errors import InvalidParameter

from fixtures.device import LENGTHS, N, chi_square_ok, gen, host_build

TRUNC, DONE = ("next", "truncated"), ("next", "done")


@pytest.fixture
def storages():
    host = host_build()
    return host, host.device_copy("cpu")


def check_slices(dev, index, slice_len):
    data = dev.get(index)
    ep = data["episode"].reshape(-1, slice_len)
    step = data["step"].reshape(-1, slice_len)
    assert (ep == ep[:, :1]).all(), "a slice crossed an episode end"
    assert (torch.diff(step, dim=1) == 1).all(), "slices must be contiguous"
    return data


@pytest.mark.parametrize("spec", [{"slice_len": 8}, {"num_slices": 4}])
def test_uniform_slices_equal_the_host_sampler(storages, spec):
    host, dev = storages
    h, d = SliceSampler(**spec), DeviceSliceSampler(**spec)
    h.generator, d.generator = gen(7), gen(7)
    d.prepare(dev, 64)
    for _ in range(5):
        hi, hinfo = h.sample(host, 64)
        di, dinfo = d.sample(dev, 64)
        assert torch.equal(hi, di)
        assert torch.equal(hinfo[TRUNC], dinfo[TRUNC]) and torch.equal(hinfo[DONE], dinfo[DONE])
        check_slices(dev, di, 8 if "slice_len" in spec else 16)
    # episodes of 5 and 3 rows are never sampled with 8-row slices (strict_length=True)


def test_slice_starts_are_uniform_over_valid_starts(storages):
    _host, dev = storages
    d = DeviceSliceSampler(slice_len=8)
    d.generator = gen(1)
    counts = torch.zeros(N)
    for _ in range(100):
        index, _ = d.sample(dev, 8 * 64)
        counts += torch.bincount(index.reshape(-1, 8)[:, 0], minlength=N)
    valid = torch.zeros(N)
    start = 0
    for length in LENGTHS:
        if length >= 8:
            valid[start : start + length - 7] = 1
        start += length
    stat, crit = chi_square_ok(counts, valid)
    assert stat < crit, (stat, crit)


def test_done_is_stored_done_or_slice_end(storages):
    _host, dev = storages
    d = DeviceSliceSampler(slice_len=8)
    d.generator = gen(2)
    index, info = d.sample(dev, 8 * 200)
    stored = dev.gather_key(DONE, index).reshape(-1, 1)
    assert torch.equal(info[DONE], stored | info[TRUNC])
    assert info[TRUNC].reshape(-1, 8)[:, -1].all() and not info[TRUNC].reshape(-1, 8)[:, :-1].any()


def test_strict_length_false_is_refused_only_when_a_slice_would_be_short(storages):
    host, dev = storages
    with pytest.raises(InvalidParameter, match=r"strict_length=False .* shortest has 3 rows"):
        DeviceSliceSampler(slice_len=8, strict_length=False).sample(dev, 64)
    # every episode is at least 3 rows long: strict_length=False is then the same sampler
    h, d = SliceSampler(slice_len=3, strict_length=False), DeviceSliceSampler(slice_len=3, strict_length=False)
    h.generator, d.generator = gen(3), gen(3)
    assert torch.equal(h.sample(host, 30)[0], d.sample(dev, 30)[0])


def test_no_episode_long_enough_names_the_longest(storages):
    _host, dev = storages
    with pytest.raises(RuntimeError, match="longest of the 14 episodes has 50 rows"):
        DeviceSliceSampler(slice_len=51).sample(dev, 51)


def test_batch_size_must_be_a_multiple():
    with pytest.raises(ValueError, match="not divisible by slice_len=8"):
        DeviceSliceSampler(slice_len=8).check_batch_size(20)


@pytest.mark.parametrize("drop_last", [False, True])
def test_epochs_of_slices_equal_the_host_sampler(storages, drop_last):
    host, dev = storages
    h = SliceSamplerWithoutReplacement(slice_len=8, drop_last=drop_last)
    d = DeviceSliceSamplerWithoutReplacement(slice_len=8, drop_last=drop_last)
    h.generator, d.generator = gen(4), gen(4)
    batches = []
    for _ in range(2):  # two epochs
        while True:
            hi, hinfo = h.sample(host, 80)
            di, dinfo = d.sample(dev, 80)
            assert torch.equal(hi, di) and torch.equal(hinfo[DONE], dinfo[DONE]) and h.ran_out == d.ran_out
            batches.append(di)
            if d.ran_out:
                break
    first_epoch = torch.cat(batches[: len(batches) // 2])
    assert first_epoch.unique().numel() == first_epoch.numel()
    check_slices(dev, first_epoch, 8)


def _prio_pair(**kwargs):
    h = PrioritizedSliceSampler(N, 0.8, 0.5, slice_len=8, **kwargs)
    d = DevicePrioritizedSliceSampler(N, 0.8, 0.5, slice_len=8, **kwargs, device="cpu")
    h.generator, d.generator = gen(8), gen(8)
    h.extend(torch.arange(N))
    d.extend(torch.arange(N))
    return h, d


def test_prioritized_slices_equal_the_host_sampler(storages):
    host, dev = storages
    h, d = _prio_pair()
    g = gen(12)
    for _ in range(4):
        hi, hinfo = h.sample(host, 64)
        di, dinfo = d.sample(dev, 64)
        assert torch.equal(hi, di)
        assert torch.equal(hinfo["_weight"], dinfo["_weight"]) and torch.equal(hinfo[DONE], dinfo[DONE])
        check_slices(dev, di, 8)
        prio = torch.rand(64, dtype=torch.float64, generator=g) * 3
        h.update_priority(hi, prio)
        d.update_priority(di, prio)
    assert torch.equal(h.priorities(torch.arange(N)), d.priorities(torch.arange(N)))


def test_prioritized_slice_starts_follow_start_priorities(storages):
    _host, dev = storages
    d = DevicePrioritizedSliceSampler(N, 1.0, 0.5, slice_len=8, device="cpu")
    d.generator = gen(5)
    d.extend(torch.arange(N))
    d.update_priority(torch.arange(N), (torch.arange(N) % 5).to(torch.float64) + 0.5)
    counts = torch.zeros(N)
    for _ in range(60):
        index, _ = d.sample(dev, 8 * 100)
        counts += torch.bincount(index.reshape(-1, 8)[:, 0], minlength=N)
    valid = torch.zeros(N, dtype=torch.bool)
    start = 0
    for length in LENGTHS:
        if length >= 8:
            valid[start : start + length - 7] = True
        start += length
    probs = torch.where(valid, d.priorities(torch.arange(N)).to(torch.float64), 0.0)
    stat, crit = chi_square_ok(counts, probs)
    assert stat < crit, (stat, crit)


def test_a_storage_without_episodes_is_refused_for_slices():
    from tensordict import TensorDict

    from datasets_hub.buffers.device.storage import DeviceStorage

    dev = DeviceStorage("cpu", 10, {("obs",): torch.zeros(10, 2)})
    assert isinstance(dev.get(torch.arange(3)), TensorDict)
    with pytest.raises(InvalidParameter, match="no episode index"):
        DeviceSliceSampler(slice_len=2).sample(dev, 4)


def test_an_epoch_of_slices_resumes_from_its_state(storages):
    _host, dev = storages
    a = DeviceSliceSamplerWithoutReplacement(slice_len=8)
    a.generator = gen(6)
    a.sample(dev, 80)
    state = a.state_dict()
    b = DeviceSliceSamplerWithoutReplacement(slice_len=8)
    b.load_state_dict(state)
    b.generator = gen(99)  # the rest of the epoch needs no draw
    assert torch.equal(a.sample(dev, 80)[0], b.sample(dev, 80)[0])


def test_one_episode_storage_slices_inside_it():
    from datasets_hub.buffers.device.storage import DeviceStorage
    from datasets_hub.buffers.episode_index import EpisodeIndex

    dev = DeviceStorage("cpu", 20, {("obs",): torch.arange(20)}, episodes=EpisodeIndex.from_lengths([20]))
    d = DeviceSliceSampler(slice_len=5)
    d.generator = gen(0)
    index, _ = d.sample(dev, 50)
    starts = index.reshape(10, 5)[:, 0]
    assert ((starts >= 0) & (starts <= 15)).all()
