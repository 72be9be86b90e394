"""LazyMemmapStorage: TorchRL's keywords (auto_cleanup, shared_init, existsok, compilable)."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.multiprocessing as mp

from datasets_hub import LazyMemmapStorage, ReplayBuffer


def test_auto_cleanup_defaults_follow_the_scratch_dir(tmp_path):
    temp = LazyMemmapStorage(4)
    assert temp.auto_cleanup
    path = temp.scratch_dir
    rb = ReplayBuffer(storage=temp)
    rb.extend(torch.arange(4.0))
    assert path.exists()
    del rb, temp
    gc.collect()
    assert not path.exists()
    named = LazyMemmapStorage(4, scratch_dir=tmp_path / "mine")
    assert not named.auto_cleanup
    ReplayBuffer(storage=named).extend(torch.arange(4.0))
    del named
    gc.collect()
    assert (tmp_path / "mine" / "storage.json").exists()
    cleaned = LazyMemmapStorage(4, scratch_dir=tmp_path / "gone", auto_cleanup=True)
    ReplayBuffer(storage=cleaned).extend(torch.arange(4.0))
    del cleaned
    gc.collect()
    assert not (tmp_path / "gone").exists()


def _child_extends(rb):
    rb.extend(torch.arange(3.0) + 10)


def test_shared_init_lets_a_child_allocate_before_the_parent_writes(tmp_path):
    storage = LazyMemmapStorage(8, scratch_dir=tmp_path / "s", shared_init=True)
    rb = ReplayBuffer(storage=storage, batch_size=2, shared=True)
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_child_extends, args=(rb,))
    p.start()
    p.join(120)
    assert p.exitcode == 0
    assert len(rb) == 3
    assert rb[:].tolist() == [10.0, 11.0, 12.0]


def test_cleanup_removes_the_files_and_refuses_later_writes(tmp_path):
    storage = LazyMemmapStorage(6, scratch_dir=tmp_path / "mm")
    assert storage.cleanup() is False  # nothing written: no files
    storage = LazyMemmapStorage(6, scratch_dir=tmp_path / "mm2", existsok=True)
    rb = ReplayBuffer(storage=storage)
    rb.extend(torch.arange(3.0) + 7)
    assert storage.cleanup() is True
    assert not (tmp_path / "mm2").exists() and len(storage) == 0 and storage.cleaned_up
    assert storage.cleanup() is False
    with pytest.raises(RuntimeError, match="cleanup"):
        rb.extend(torch.arange(2.0))
