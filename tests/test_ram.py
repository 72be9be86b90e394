"""RAM-resident builds: ``load(..., in_memory=True)`` gives the memmap path's values, or refuses clearly."""

from __future__ import annotations

import pickle

import pytest
import torch

import datasets_hub as dh
from datasets_hub.build import memory as ram
from datasets_hub.build.reader import open_build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import InvalidParameter

from fixtures.builds import assert_same_batches

ID = "gym/cartpole-random-v0"
SMALL = {"steps": 600, "seed": 1}


def _batches(rb, n=4):
    return [rb.sample() for _ in range(n)]


@pytest.mark.parametrize(
    "sampler", [None, lambda: dh.SliceSampler(slice_len=8), lambda: dh.SliceSampler(num_slices=4, strict_length=False)]
)
def test_in_memory_samples_equal_the_memmap_path_under_the_same_seed(sampler):
    def batches(in_memory):
        rb = dh.load(
            ID,
            batch_size=32,
            sampler=sampler() if sampler else None,
            generator=torch.Generator().manual_seed(3),
            in_memory=in_memory,
            **SMALL,
        )
        return rb, _batches(rb)

    memmap_rb, memmap = batches(False)
    ram_rb, in_ram = batches(True)
    assert_same_batches(memmap, in_ram)
    assert_same_batches([memmap_rb[:]], [ram_rb[:]])
    assert ram_rb.storage.in_memory and not memmap_rb.storage.in_memory


def test_in_memory_leaves_live_in_anonymous_memory_not_in_the_files():
    path = dh.load(ID, **SMALL).storage.path
    mapped, copied = open_build(path), open_build(path, in_memory=True)
    for key, column in copied.obs.items():
        assert torch.equal(column, mapped.obs[key])
        assert column.untyped_storage().data_ptr() != mapped.obs[key].untyped_storage().data_ptr()
        column[0] = column[0] + 1  # private memory: a write changes neither the file nor another opening
    again = open_build(path)
    for key, column in again.obs.items():
        assert torch.equal(column, mapped.obs[key])


def test_a_build_that_does_not_fit_is_refused_naming_the_size_and_the_memory(monkeypatch):
    path = dh.load(ID, **SMALL).storage.path
    monkeypatch.setattr(ram, "available_memory", lambda: (ram.GIB // 2, 8 * ram.GIB))
    with pytest.raises(InvalidParameter) as err:
        DatasetStorage(path, in_memory=True)
    message = str(err.value)
    assert "GiB of RAM" in message and "0.50 GiB available" in message and "in_memory=False" in message
    with pytest.raises(InvalidParameter, match="needs"):
        dh.load(ID, in_memory=True, **SMALL)
    DatasetStorage(path)  # the memmap path needs no such room


def test_the_margin_is_kept_free(monkeypatch):
    total = 16 * ram.GIB
    monkeypatch.setattr(ram, "available_memory", lambda: (4 * ram.GIB, total))
    ram.check_fits(4 * ram.GIB - ram.margin_bytes(total), "x")
    with pytest.raises(InvalidParameter):
        ram.check_fits(4 * ram.GIB - ram.margin_bytes(total) + 1, "x")
    assert ram.margin_bytes(total) == int(0.1 * total) and ram.margin_bytes(None) == ram.MIN_MARGIN


def test_meminfo_reads_kilobytes(tmp_path):
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       2048 kB\nMemAvailable:   1024 kB\nHugePages_Total:       0\n")
    assert ram.meminfo(info) == {"MemTotal": 2048 * 1024, "MemAvailable": 1024 * 1024, "HugePages_Total": 0}
    assert ram.meminfo(tmp_path / "missing") == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.bool, torch.int64])
def test_anonymous_copy_keeps_values_dtype_and_shape(dtype):
    source = (torch.arange(24).reshape(2, 3, 4) % 5).to(dtype)
    copy = ram.anonymous_copy(source)
    assert copy.dtype == dtype and copy.shape == source.shape and torch.equal(copy, source)
    assert ram.anonymous_copy(source[:0]).shape == (0, 3, 4)


def test_an_in_memory_storage_pickles_by_reference_and_reopens_in_memory():
    storage = dh.load(ID, in_memory=True, **SMALL).storage
    again = pickle.loads(pickle.dumps(storage))
    assert again.in_memory and len(pickle.dumps(storage)) < 1000
    index = torch.arange(0, 600, 7)
    assert_same_batches([storage.get(index)], [again.get(index)])


def test_in_memory_must_be_a_bool_and_applies_to_local_builds():
    with pytest.raises(InvalidParameter, match="True or False"):
        dh.load(ID, in_memory="yes", **SMALL)
    with pytest.raises(InvalidParameter, match="loaded by id"):
        dh.load("file:///nowhere/build", in_memory=True)


@pytest.mark.parametrize("in_memory", [False, True])
def test_sample_many_over_a_build_equals_successive_samples(in_memory):
    def buffer():
        return dh.load(
            ID,
            batch_size=32,
            sampler=dh.SliceSampler(slice_len=8),
            generator=torch.Generator().manual_seed(11),
            in_memory=in_memory,
            **SMALL,
        )

    many = buffer().sample_many(3)
    assert many.batch_size == (3, 32)
    assert_same_batches(list(many.unbind(0)), _batches(buffer(), 3))


def test_an_address_space_limit_is_a_clear_refusal_not_enomem(monkeypatch):
    """Under ``ulimit -v`` MemAvailable may be plenty while the mapping fails: both checks name the fix."""
    from datasets_hub.build import memory

    monkeypatch.setattr(memory, "address_space_left", lambda: 1 << 20)
    with pytest.raises(InvalidParameter, match="address-space limit"):
        memory.check_fits(1 << 30, "the build 'x'")

    def refused(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(memory.mmap, "mmap", refused)
    with pytest.raises(InvalidParameter, match="in_memory=False"):
        memory.anonymous_copy(torch.arange(10))


def test_the_address_space_left_is_read_from_the_process_limit():
    import resource

    from datasets_hub.build import memory

    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    left = memory.address_space_left()
    assert (left is None) == (soft == resource.RLIM_INFINITY)
