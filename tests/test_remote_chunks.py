"""Residency of a local copy's chunks (datasets_hub.remote.chunks): the lock-free read path once chunks are
resident, and what keeps it right across processes (chunks fetched elsewhere, evictions elsewhere, a chunk
whose bytes are there but which was never claimed, an eviction killed half-way)."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import datasets_hub as dh
from datasets_hub.build.format import leaf_path
from datasets_hub.remote.chunks import SEQUENCE, Chunks

from fixtures.remote import local_build, publish
from fixtures.remote import same as _same
from fixtures.remote import serve_folder as _serve

pytest.importorskip("zarr")  # an optional extra (datasets-hub[remote]); make test installs it


@pytest.fixture
def local_rb():
    return local_build()


@pytest.fixture
def published(local_rb, tmp_path):
    return publish(local_rb, tmp_path / "published")


def _chunk_gets(server) -> int:
    return sum(1 for r in server.requests if "/c/" in r.path)


def test_a_batch_whose_chunks_are_resident_reads_them_without_lock_or_fetch(published, local_rb, monkeypatch):
    rb = dh.load(f"file://{published}", resident="lazy", batch_size=64, generator=torch.Generator().manual_seed(0))
    chunks = rb.storage.chunks
    rb[:]  # every chunk resident
    monkeypatch.setattr(chunks, "ensure", lambda *a, **k: pytest.fail("fetched a resident chunk"))
    monkeypatch.setattr(chunks, "locked", lambda *a, **k: pytest.fail("took a lock on the resident path"))
    for _ in range(80):  # past the periodic check that remembers wholly resident leaves
        _, info = rb.sample(return_info=True)
    index = torch.as_tensor(info["index"]).reshape(-1)
    assert _same(rb[index], local_rb[index])
    _, full = chunks._full
    assert set(rb.storage._batch_leaves) <= full  # no per-leaf lookup any more


def test_a_batch_reads_only_the_leaves_it_needs(published, local_rb):
    """The per-step leaves held in the packed record are not fetched for batches (only for a read of that key)."""
    rb = dh.load(f"file://{published}", resident="lazy")
    chunks = rb.storage.chunks
    assert "steps/_packed" in rb.storage._batch_leaves
    assert "steps/next/reward" not in rb.storage._batch_leaves
    rows = torch.arange(0, len(local_rb), 7)
    assert _same(rb[rows], local_rb[rows])
    assert not chunks.maps["steps/next/reward"].any()
    reward = rb.storage.gather_key(("next", "reward"), rows)  # one leaf: fetched now, on its own
    assert _same(reward, local_rb[rows]["next", "reward"])
    assert chunks.maps["steps/next/reward"].any()


_FETCH_ALL = """
import sys, datasets_hub as dh
rb = dh.load(sys.argv[1], resident="lazy")
rb[:]
"""


def test_a_chunk_another_process_fetched_is_found_without_fetching(published, local_rb):
    from fixtures.http_server import serve_files

    with serve_files() as server:
        url = _serve(server, published)
        rb = dh.load(url, resident="lazy")  # opened before the other process fetches anything
        first = torch.arange(0, 5)
        assert _same(rb[first], local_rb[first])
        subprocess.run([sys.executable, "-c", _FETCH_ALL, url], check=True)
        before = _chunk_gets(server)
        rows = torch.arange(0, len(local_rb), 3)
        assert _same(rb[rows], local_rb[rows])
        assert _chunk_gets(server) == before  # all found in the shared maps


def test_bytes_without_their_residency_byte_are_never_served(published, local_rb):
    """A writer killed after writing a chunk's bytes but before claiming it (or bytes put there by anything
    else) leaves an unclaimed chunk: readers fetch and verify it again, never read those bytes."""
    rb = dh.load(f"file://{published}", resident="lazy")
    chunks = rb.storage.chunks
    name = "steps/_packed"
    span = chunks.chunk_rows[name] * chunks.row_bytes[name]
    with open(leaf_path(rb.storage.path, name), "r+b") as handle:
        handle.write(b"\xff" * span)  # chunk 0, unclaimed
    assert not chunks.maps[name][0]
    rows = torch.arange(0, 6)
    assert _same(rb[rows], local_rb[rows])
    assert chunks.maps[name][0]


def test_an_eviction_by_another_process_is_seen_by_a_reader_that_knew_the_leaf_resident(published, local_rb):
    """A reader without a budget caches 'this leaf is wholly resident'; a process with a budget evicts from the
    shared copy: the reader must notice (eviction sequence), fetch again, and never return punched zeros."""
    url = f"file://{published}"
    reader = dh.load(url, resident="lazy", batch_size=32, generator=torch.Generator().manual_seed(2))
    reader[:]
    for _ in range(80):
        reader.sample()
    sequence, full = reader.storage.chunks._full
    assert "steps/_packed" in full
    # a process with a budget far below the copy reads a leaf batches never read (not resident yet): to fetch
    # it, it evicts chunks, the reader's among them
    evictor = dh.load(url, resident="lazy", max_bytes=40_000)
    rows = torch.arange(0, 10)
    assert _same(evictor.storage.gather_key(("next", "reward"), rows), local_rb[rows]["next", "reward"])
    assert int(reader.storage.chunks._sequence[0]) == sequence + 2
    assert not reader.storage.chunks.maps["steps/_packed"].all()  # something the reader knew resident is gone
    everything = torch.arange(len(local_rb))
    assert _same(reader[everything], local_rb[everything])


def test_an_eviction_killed_half_way_is_repaired_by_the_next_reader(published, local_rb):
    rb = dh.load(f"file://{published}", resident="lazy")
    rows = torch.arange(0, 20)
    rb[rows]
    sequence = np.memmap(rb.storage.path / "resident" / SEQUENCE, dtype=np.int64, mode="r+", shape=(1,))
    sequence[0] += 1  # odd: as an evicting process killed before it finished leaves it
    assert _same(rb[rows], local_rb[rows])
    assert int(sequence[0]) % 2 == 0


def test_a_read_that_evictions_keep_racing_finishes_under_the_exclusive_lock(published, local_rb, monkeypatch):
    """Another process evicting a chunk of this read right after every fetch (a busy evictor under a small
    budget) must not starve the read: after a few tries it fetches and reads under the exclusive lock."""
    rb = dh.load(f"file://{published}", resident="lazy")
    chunks = rb.storage.chunks
    sequence = np.memmap(rb.storage.path / "resident" / SEQUENCE, dtype=np.int64, mode="r+", shape=(1,))
    real_ensure = chunks.ensure
    calls = {"raced": 0, "under_lock": 0}

    def ensure_then_evict(needed, *, lock_held=False):
        if lock_held:
            real_ensure(needed, lock_held=True)
            calls["under_lock"] += 1
            return
        real_ensure(needed)
        calls["raced"] += 1
        if calls["raced"] > 50:
            pytest.fail("the read never finished: evictions between its fetch and its read starve it")
        name = "steps/_packed"
        chunks.maps[name][int(needed[name][0])] = 0  # evicted by "another process" (unclaimed, as an eviction does)
        sequence[0] += 2

    monkeypatch.setattr(chunks, "ensure", ensure_then_evict)
    rows = torch.arange(0, 30)
    assert _same(rb[rows], local_rb[rows])
    assert calls["under_lock"] == 1 and calls["raced"] >= 4


def test_least_recently_used_chunks_go_first(published, local_rb):
    rb = dh.load(f"file://{published}", resident="lazy", max_bytes=60_000)
    chunks = rb.storage.chunks
    name = "steps/_packed"
    per_chunk = chunks.chunk_rows[name]
    rb[torch.arange(0, 4)]  # chunk 0
    rb[torch.arange(per_chunk, per_chunk + 4)]  # chunk 1
    rb[torch.arange(0, 4)]  # chunk 0 again: now chunk 1 is the least recently used
    far = len(local_rb) - 4
    while chunks.maps[name][0] and chunks.maps[name][1]:
        rb[torch.arange(far, far + 4)]
        far -= per_chunk
    assert chunks.maps[name][0] and not chunks.maps[name][1]


def test_whole_columns_of_a_lazy_copy_are_fetched_and_copied(published, local_rb):
    """read_key (episode views, done flags) fetches every chunk it reads, derived next/done included, and
    returns a copy that a later eviction by another process cannot turn into zeros."""
    url = f"file://{published}"
    rb = dh.load(url, resident="lazy")
    done = rb.storage.read_key(("next", "done"))
    assert _same(done, local_rb.storage.read_key(("next", "done")))
    reward = rb.storage.read_key(("next", "reward"))
    assert _same(reward, local_rb.storage.read_key(("next", "reward")))
    rb[:]  # the whole copy resident: far over the budget below
    evictor = dh.load(url, resident="lazy", max_bytes=40_000)
    evictor.storage.gather_key("action", torch.arange(0, 10))  # a fetch: evicts most of the copy
    assert not rb.storage.chunks.maps["steps/next/reward"].all()
    assert _same(reward, local_rb.storage.read_key(("next", "reward")))


def test_an_ensemble_over_lazy_copies_reads_its_batch_at_once_and_equals_the_local_rows(published, local_rb):
    """A storage over a build gathers an ensemble's [k, m] batch in one read (gathers_batches): over a lazy
    copy that read fetches its chunks first, and every sampled row equals the local build's."""
    from datasets_hub.buffers.ensemble import ReplayBufferEnsemble

    url = f"file://{published}"
    members = [
        dh.load(url, resident="lazy", sampler=dh.SliceSampler(slice_len=8), generator=torch.Generator().manual_seed(s))
        for s in (1, 2)
    ]
    assert members[0].storage.gathers_batches  # the case at stake: one [k, m] read
    remote = ReplayBufferEnsemble(*members, batch_size=64)
    keys = ["observation", "action", "episode", "step", ("next", "reward"), ("next", "observation")]
    for _ in range(5):
        got = remote.sample()
        assert got.shape == (2, 32)
        rows = got["index", "index"].reshape(-1)
        assert _same(got.reshape(-1).select(*keys), local_rb[rows].select(*keys))


_SAMPLE_UNDER_A_BUDGET = """
import sys, torch, datasets_hub as dh
rb = dh.load(sys.argv[1], resident="lazy", max_bytes=40_000)
for start in range(0, len(rb) - 10, 150):
    rb[torch.arange(start, start + 10)]
"""


def test_a_process_sampling_under_a_budget_never_evicts_what_a_full_fill_fetched(published, local_rb, monkeypatch):
    """A full fill paused after its first leaves, another process sampling the whole copy lazily with a byte
    budget far below it: that process used to evict the chunks the fill had counted in, and the fill's check
    against the manifest then failed ('published build is inconsistent'). A copy being filled is never evicted."""
    paused, release = threading.Event(), threading.Event()
    ensure = Chunks.ensure

    def pause_before_the_packed_steps(self, needed, **kw):
        if threading.current_thread().name == "datasets_hub-remote-fill" and "steps/_packed" in needed:
            paused.set()  # every chunk of the observations is in by now
            release.wait(120)
        return ensure(self, needed, **kw)

    monkeypatch.setattr(Chunks, "ensure", pause_before_the_packed_steps)
    url = f"file://{published}"
    full = dh.load(url)
    try:
        assert paused.wait(120)
        observations = full.storage.chunks.maps["obs/observation"]
        assert observations.all()
        subprocess.run([sys.executable, "-c", _SAMPLE_UNDER_A_BUDGET, url], check=True)
        assert observations.all()  # the other process went over its budget rather than evict them
    finally:
        release.set()
    full.storage.wait_complete(120)
    assert (full.storage.path / "complete").exists()
    everything = torch.arange(len(local_rb))
    assert _same(full[everything], local_rb[everything])
    assert _same(dh.load(url, resident="lazy")[everything], local_rb[everything])  # the complete copy, reopened
