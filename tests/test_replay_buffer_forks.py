"""A buffer in a forked child: the parent's sampling threads do not exist there, and nothing waits for them.

A DataLoader with fork workers started while batches are drawn ahead works; a buffer whose batches were lost in
the fork, or whose sampler another thread was changing at that instant, refuses clearly instead of hanging or
serving a stream that skipped rows.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch
from tensordict import TensorDict

import datasets_hub as dh
from datasets_hub import LazyTensorStorage, ListStorage, ReplayBuffer

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX only")


def _slow(td):
    time.sleep(0.5)  # each batch drawn ahead stays in flight for a while
    return td


def _in_child(work) -> str:
    """Run ``work()`` in a forked child; what it returned or raised, as text (read through a pipe)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            answer = f"ok {work()}"
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            answer = f"{type(exc).__name__}: {exc}"
        os.write(write_end, answer.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    return answer


def _prefetching_buffer() -> dh.TensorDictReplayBuffer:
    rb = dh.TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=4, prefetch=2, transform=_slow)
    rb.extend(TensorDict(obs=torch.arange(100.0), batch_size=[100]))
    return rb


def test_dataloader_fork_workers_start_while_batches_are_in_flight():
    rb = _prefetching_buffer()
    rb.sample()  # two more batches are now in flight on the prefetch threads
    loader = torch.utils.data.DataLoader(
        rb.as_dataset(num_batches=4), batch_size=None, num_workers=2, multiprocessing_context="fork", timeout=60,
        collate_fn=lambda batch: batch,
    )  # fmt: skip
    batches = list(loader)  # before the fix, each worker waited forever on the parent's dead futures
    assert len(batches) == 4 and all(b["obs"].shape == (4,) for b in batches)


def test_a_child_refuses_to_sample_a_buffer_whose_drawn_ahead_batches_it_lost():
    rb = _prefetching_buffer()
    rb.sample()
    answer = _in_child(lambda: rb.sample()["obs"].shape)
    assert answer.startswith("InvalidArgument") and "in flight" in answer and "rb.fork(generator)" in answer
    # a copy for a worker draws a stream of its own: that is fine in the child
    assert _in_child(lambda: rb.fork(torch.Generator().manual_seed(1)).sample()["obs"].shape) == "ok torch.Size([4])"
    assert rb.sample()["obs"].shape == (4,)  # the parent is untouched


class _GatedStorage(ListStorage):
    """A storage whose reads wait for a gate: the sampling thread holds the buffer's lock meanwhile."""

    def __init__(self) -> None:
        super().__init__(10)
        self.reading, self.gate = threading.Event(), threading.Event()

    def get(self, index):
        self.reading.set()
        self.gate.wait(30)
        return super().get(index)


def test_a_fork_while_another_thread_samples_refuses_the_buffer_and_its_copies():
    storage = _GatedStorage()
    rb = ReplayBuffer(storage=storage, batch_size=2)
    rb.extend(list(range(10)))
    sampler = threading.Thread(target=rb.sample)
    sampler.start()
    assert storage.reading.wait(30)
    try:
        on_sample = _in_child(rb.sample)
        on_copy = _in_child(lambda: rb.fork(None))
    finally:
        storage.gate.set()
        sampler.join(30)
    assert on_sample.startswith("InvalidArgument") and "another thread was sampling" in on_sample
    assert on_copy.startswith("InvalidArgument") and "half-updated" in on_copy
    assert len(rb.sample()) == 2  # the parent goes on


def test_one_buffer_busy_past_the_wait_leaves_the_others_guarded(monkeypatch):
    """A buffer another thread samples for longer than the fork waits (a stalled read, say) is the only one left
    unguarded: every other buffer's lock is still taken for the fork, so none of their threads can start a
    sample at the fork's instant and leave it half-done in the child."""
    from datasets_hub.buffers import replay_buffers

    storage = _GatedStorage()
    busy = ReplayBuffer(storage=storage, batch_size=2)
    busy.extend(list(range(10)))
    others = [_prefetching_buffer() for _ in range(3)]
    monkeypatch.setattr(replay_buffers, "FORK_WAIT_S", 0.2)
    monkeypatch.setattr(replay_buffers, "_live_buffers", lambda: [busy, *others])  # the busy one swept first
    sampler = threading.Thread(target=busy.sample)
    sampler.start()
    assert storage.reading.wait(30)
    try:
        replay_buffers._hold_buffers_before_fork()  # what a fork runs first (os.register_at_fork)
        held = list(replay_buffers._HELD_FOR_FORK)
        replay_buffers._release_buffers_after_fork()
    finally:
        storage.gate.set()
        sampler.join(30)
    assert held == others
    assert all(rb.sample()["obs"].shape == (4,) for rb in others)  # every lock was given back
