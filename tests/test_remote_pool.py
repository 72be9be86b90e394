"""resident="pool": K whole episodes resident, sampling only from them, refreshed uniformly over the dataset."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import datasets_hub as dh
from datasets_hub import RandomSampler, SliceSampler, WindowSampler
from datasets_hub.errors import DownloadError, InvalidParameter
from datasets_hub.remote.pool import PoolStorage
from datasets_hub.remote.publish import PUBLISHED

from fixtures.remote import local_build, publish, same, serve_folder

pytest.importorskip("zarr")  # an optional extra (datasets-hub[remote]); make test installs it

KEYS = ["observation", "action", "episode", "step", ("next", "reward"), ("next", "observation")]


@pytest.fixture
def local_rb():
    return local_build()


@pytest.fixture
def published(local_rb, tmp_path) -> Path:
    return publish(local_rb, tmp_path / "published", chunk_bytes=1024)  # ~3 episodes per chunk


def _pool(url: str, k: int = 6, refresh: float | None = None, seed: int = 0, **kw):
    return dh.load(
        url,
        resident="pool",
        pool_episodes=k,
        pool_refresh_s=refresh,
        generator=torch.Generator().manual_seed(seed),
        **kw,
    )


def _episode_ordinals(local_rb, ids: torch.Tensor) -> set[int]:
    """Episode ids of a sample -> ordinals of the build's episode index (what pool members are)."""
    by_ordinal = local_rb[local_rb.storage.episode_index().start]["episode"].tolist()
    lookup = {int(v): i for i, v in enumerate(by_ordinal)}
    return {lookup[int(i)] for i in ids.reshape(-1).tolist()}


def _chi2_quantile_999(df: int) -> float:
    """The 0.999 quantile of chi-square with ``df`` degrees of freedom (Wilson-Hilferty; < 0.5% off here)."""
    z = 3.0902
    return df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3


def test_episodes_drawn_into_the_pool_are_uniform_over_the_dataset(published):
    rb = _pool(f"file://{published}", k=8)
    storage = rb.storage
    assert isinstance(storage, PoolStorage)
    episodes = storage.pool_status()["episodes"]
    assert storage.refresh_pool(3000) == 3000
    draws = storage.pool_status()["draws"]
    assert draws.sum() == 8 + 3000
    expected = draws.sum() / episodes
    chi2 = float(((draws - expected) ** 2 / expected).sum())
    assert chi2 < _chi2_quantile_999(episodes - 1), (chi2, episodes)
    assert (draws > 0).all()  # over time every episode was resident


def test_samples_come_only_from_resident_pool_members(published, local_rb):
    for sampler in (None, SliceSampler(slice_len=4)):
        rb = _pool(f"file://{published}", k=5, batch_size=40, sampler=sampler)
        storage = rb.storage
        seen: set[int] = set()
        for _ in range(40):
            members = set(storage.members())
            assert len(members) == 5
            index = storage.episode_index()
            assert index.num_episodes == 5  # samplers see the pool, not the build
            batch = rb.sample()
            drawn = _episode_ordinals(local_rb, batch["episode"])
            assert drawn <= members, (drawn, members)
            seen |= drawn
            for name, spec in storage.chunks.arrays.items():  # every row read was resident
                assert storage.chunks.maps[name][: spec["chunks"]].any()
            assert same(batch.select(*KEYS), local_rb[batch["index"]].select(*KEYS))
            storage.refresh_pool(2)
        assert storage.pool_status()["reads_outside_pool"] == 0
        assert len(seen) > 20  # refreshes moved the pool across the dataset


def test_the_background_thread_refreshes_the_pool_while_batches_are_drawn(published, local_rb):
    rb = _pool(f"file://{published}", k=5, refresh=0.02, batch_size=32, sampler=SliceSampler(slice_len=4))
    storage = rb.storage
    deadline = time.monotonic() + 150  # a refresh fetches and checks a whole episode: seconds on a loaded machine
    while storage.pool_status()["refreshes"] < 8:
        assert time.monotonic() < deadline, storage.pool_status()
        batch = rb.sample()
        assert same(batch.select(*KEYS), local_rb[batch["index"]].select(*KEYS))
    status = storage.pool_status()
    assert status["error"] is None
    assert status["reads_outside_pool"] == 0  # a member that just left stays resident one refresh longer
    storage.close()
    assert not (storage.path / "pools" / f"{storage.token}.members").exists()


def test_a_refresh_never_serves_a_half_written_episode(published, local_rb):
    """Chunks of new episodes are corrupt on the server: a refresh fails after fetching part of an episode
    (some leaves' chunks verified and written), and that episode never joins the pool."""
    from fixtures.http_server import serve_files

    files = json.loads((published / PUBLISHED).read_text())["files"]
    with serve_files() as server:
        url = serve_folder(server, published)
        rb = _pool(url, k=4, batch_size=32, sampler=SliceSampler(slice_len=4))
        storage = rb.storage
        maps = storage.chunks.maps
        # corrupt every chunk of the action leaf that is not resident: any episode needing one cannot join
        for relpath in files:
            if relpath.startswith("data.zarr/steps/action/c/"):
                chunk = int(relpath.rsplit("/c/", 1)[1].split("/")[0])
                if not maps["steps/action"][chunk]:
                    server.fault(f"pub/{relpath}", corrupt=True)
        failed = 0
        for _ in range(30):
            members, index = storage.members(), storage.episode_index()
            try:
                storage.refresh_pool(1)
            except DownloadError:
                failed += 1
                assert storage.members() == members and storage.episode_index() is index  # left as it was
            batch = rb.sample()
            assert _episode_ordinals(local_rb, batch["episode"]) <= set(storage.members())
            assert same(batch.select(*KEYS), local_rb[batch["index"]].select(*KEYS))  # never a hole's zeros
        assert failed > 0
        assert storage.pool_status()["reads_outside_pool"] == 0


def test_the_byte_budget_holds_the_pool_and_never_evicts_a_member(published, local_rb, monkeypatch, tmp_path):
    probe = _pool(f"file://{published}", k=4).storage
    sizes = np.sort(probe.episode_bytes())[::-1]
    index = sum(
        probe.chunks.chunk_bytes(n, c)
        for n, s in probe.chunks.arrays.items()
        if n.startswith(("episodes/", "history/"))
        for c in range(s["chunks"])
    )
    budget = int(sizes[:6].sum()) + index
    probe.close()
    monkeypatch.setenv("DATASETS_HUB_CACHE", str(tmp_path / "other-cache"))
    with pytest.raises(InvalidParameter, match="cannot hold a pool of 4 episodes"):
        _pool(f"file://{published}", k=4, max_bytes=budget - 1)
    rb = _pool(f"file://{published}", k=4, max_bytes=budget, batch_size=16, sampler=SliceSampler(slice_len=2))
    storage = rb.storage
    evicted = False
    for _ in range(60):
        storage.refresh_pool(1)
        assert storage.chunks.resident_bytes() <= budget
        for member in storage.members():  # every chunk of every member is resident
            for name, (first, last) in storage.episode_span(member).items():
                assert storage.chunks.maps[name][first : last + 1].all(), (member, name)
        batch = rb.sample()
        assert same(batch.select(*KEYS), local_rb[batch["index"]].select(*KEYS))
        evicted |= storage.chunks.resident_bytes() < storage.fill_status()["total_bytes"]
    assert evicted


def test_pool_refusals(published):
    url = f"file://{published}"
    episodes = local_build().storage.episode_index().num_episodes
    with pytest.raises(InvalidParameter, match=f"holds only {episodes} episodes"):
        _pool(url, k=episodes + 1)
    for bad in (0, -2, "3", 2.5, True):
        with pytest.raises(InvalidParameter, match="pool_episodes"):
            _pool(url, k=bad)
    for bad in (-1, float("nan"), float("inf"), 1e300):  # nan busy-looped, inf killed the refresh thread
        with pytest.raises(InvalidParameter, match="pool_refresh_s must be a finite number"):
            _pool(url, refresh=bad)
    with pytest.raises(InvalidParameter, match="RandomSampler draws rows over the whole dataset"):
        _pool(url, sampler=RandomSampler())
    with pytest.raises(InvalidParameter, match="RandomSampler"):  # the anchors of a window sampler too
        _pool(url, sampler=WindowSampler([0, 1], sampler=RandomSampler()))
    with pytest.raises(InvalidParameter, match="device="):
        _pool(url, device="cpu")
    with pytest.raises(InvalidParameter, match="needs pool_episodes"):
        dh.load(url, resident="pool")
    with pytest.raises(InvalidParameter, match="pass resident='pool'"):
        dh.load(url, resident="lazy", pool_episodes=3)
    with pytest.raises(InvalidParameter, match="published builds loaded by URL"):
        dh.load("gym/cartpole-random-v0", resident="pool", pool_episodes=3, steps=3000, seed=7)


def test_the_whole_dataset_as_a_pool_samples_every_episode(published, local_rb):
    episodes = local_rb.storage.episode_index().num_episodes
    rb = _pool(f"file://{published}", k=episodes, refresh=0.01, batch_size=2000)
    assert rb.storage.refresh_pool(3) == 0  # nothing outside the pool to draw
    seen = _episode_ordinals(local_rb, torch.cat([rb.sample()["episode"] for _ in range(5)]))
    assert len(seen) > 0.9 * episodes


def test_a_window_sampler_reads_the_rows_of_its_own_episodes(published, local_rb):
    """Samplers that pass episode ordinals to gather_key get the pool's ordinals: the storage must not
    take them for the build's."""
    rb = _pool(f"file://{published}", k=6, batch_size=64, sampler=WindowSampler([0, 1, 2], ["observation"], pad=False))
    for _ in range(10):
        batch = rb.sample()
        for offset in range(3):
            want = local_rb[batch["index"] + offset]["observation"]
            assert same(batch["observation"][:, offset], want)
        assert _episode_ordinals(local_rb, batch["episode"]) <= set(rb.storage.members())


def test_dataloader_workers_follow_the_owners_pool(published, local_rb):
    """Workers (forked or spawned) sample the owner's pool and fetch nothing: its members are resident."""
    from fixtures.http_server import serve_files

    with serve_files() as server:
        url = serve_folder(server, published)
        rb = _pool(url, k=5, batch_size=32, sampler=SliceSampler(slice_len=4))
        members = set(rb.storage.members())
        requests = server.total_requests()
        for context in ("fork", "spawn"):
            loader = rb.as_iterable_dataset(num_batches=4, seed=1).dataloader(
                num_workers=2, multiprocessing_context=context
            )
            for batch in loader:
                assert _episode_ordinals(local_rb, batch["episode"]) <= members
                assert same(batch.select(*KEYS), local_rb[batch["index"]].select(*KEYS))
        assert server.total_requests() == requests
        rb.storage.refresh_pool(5)  # the owner moves on; a worker started now follows the new pool
        members = set(rb.storage.members())
        for batch in rb.as_iterable_dataset(num_batches=2, seed=2).dataloader(num_workers=2):
            assert _episode_ordinals(local_rb, batch["episode"]) <= members


def test_a_persistent_forked_worker_follows_the_owners_refreshes(published, local_rb):
    rb = _pool(f"file://{published}", k=4, batch_size=32, sampler=SliceSampler(slice_len=4))
    loader = rb.as_iterable_dataset(num_batches=2, seed=3).dataloader(
        num_workers=1, multiprocessing_context="fork", persistent_workers=True
    )
    for epoch in range(3):
        members = set(rb.storage.members())
        for batch in loader:
            assert _episode_ordinals(local_rb, batch["episode"]) <= members, epoch
        rb.storage.refresh_pool(4)  # a whole new pool: the live worker must see it next epoch


def test_a_dropped_pool_stops_refreshing(published):
    import gc
    import threading

    before = set(threading.enumerate())
    rb = _pool(f"file://{published}", k=4, refresh=0.01)
    (thread,) = [t for t in threading.enumerate() if t not in before and t.name == "datasets_hub-remote-pool"]
    folder = rb.storage.path / "pools"
    assert list(folder.glob("*.members"))
    del rb
    gc.collect()
    thread.join(10)
    assert not thread.is_alive()
    assert not list(folder.glob("*.members"))


def test_sampling_goes_on_while_a_refresh_waits_for_a_slow_link(published, local_rb):
    """A refresh fetches with no lock held: batches of the resident pool never wait for it (also under a
    byte budget, whose reads hold the shared lock)."""
    import threading

    from fixtures.http_server import serve_files

    files = json.loads((published / PUBLISHED).read_text())["files"]
    with serve_files() as server:
        url = serve_folder(server, published)
        rb = _pool(url, k=4, batch_size=32, sampler=SliceSampler(slice_len=4), max_bytes=10**9)
        storage = rb.storage
        for relpath in files:  # every chunk not resident yet trickles in over seconds
            if "/c/" in relpath and not relpath.startswith("data.zarr/episodes/"):
                name, number = relpath[len("data.zarr/") :].rsplit("/c/", 1)
                if not storage.chunks.maps[name][int(number.split("/")[0])]:
                    server.fault(f"pub/{relpath}", trickle=0.3, trickle_chunk=64)
        for _ in range(10):
            index = storage.episode_index()
            refresh = threading.Thread(target=storage.refresh_pool)
            refresh.start()
            slowest, deadline = 0.0, time.monotonic() + 1.5
            while refresh.is_alive() and time.monotonic() < deadline:
                t0 = time.perf_counter()
                batch = rb.sample()
                slowest = max(slowest, time.perf_counter() - t0)
                assert storage.episode_index() is index or not refresh.is_alive()  # not before it is whole
                assert same(batch.select(*KEYS), local_rb[batch["index"]].select(*KEYS))
            stalled = refresh.is_alive()
            refresh.join()
            if stalled:
                assert slowest < 0.9, slowest
                assert storage.episode_index() is not index
                break
        else:
            pytest.fail("no refresh needed a chunk that was not resident")


def test_full_stack_sampler_in_a_pool_counts_history_frames(tmp_path):
    """An Atari build keeps history frames (real frames before an episode's first transition): in a pool,
    FullStackSampler draws only the pool's rows whose whole stack is real, history frames counted, and
    FrameStack builds the same stacks as on the local build."""
    from datasets_hub import FrameStack
    from datasets_hub.buffers.samplers.frame_stack import FullStackSampler

    from fixtures.atari import ENDS, LENGTHS, DopamineBuffer, play, save_checkpoint

    buf = DopamineBuffer()
    play(buf, LENGTHS, ENDS)
    buf.log_final()
    folder = tmp_path / "dqn" / "Pong" / "1" / "replay_logs"
    for k, log in enumerate(buf.logs):
        save_checkpoint(folder, k, log)
    local = dh.load("atari/Pong/1", checkpoints=list(range(len(buf.logs))), base_url=(tmp_path / "dqn").as_uri())
    history = local.storage.history_index()[1]
    assert local.storage.history_keys() and int(history.sum()) > 0  # the case at stake
    published = publish(local, tmp_path / "published", chunk_bytes=2048)
    with_history = int(torch.nonzero(history).reshape(-1)[0])
    pool = _pool(f"file://{published}", k=4, sampler=FullStackSampler(4), batch_size=64)
    storage = pool.storage
    while with_history not in storage.members():  # an episode with history frames in the pool
        storage.refresh_pool(1)
    index = storage.episode_index()
    assert index.history is not None and index.history.tolist() == history[storage.members()].tolist()
    stack = FrameStack(4)
    rows_seen = []
    for _ in range(20):
        batch, info = pool.sample(return_info=True)
        rows = torch.as_tensor(info["index"]).reshape(-1)
        rows_seen.append(rows)
        got = stack.bind(pool)(batch)
        want = stack.bind(local)(local[rows])
        assert same(got["observation"], want["observation"])
        assert (got["observation"].reshape(rows.numel(), 4, -1) != 0).any(-1).all()  # never a padded frame
    steps = local[torch.cat(rows_seen)]["step"]
    assert (steps < 3).any()  # rows whose stack reaches into the history frames are drawn


_POOL_CHILD = """
import sys, datasets_hub as dh
rb = dh.load(sys.argv[1], resident="pool", pool_episodes=3, pool_refresh_s=None)
print(rb.storage.token, flush=True)
sys.stdin.readline()
"""


def test_membership_files_of_killed_owners_are_swept_by_the_next_open(published):
    import signal
    import subprocess
    import sys

    from datasets_hub.remote.pool import POOL_DIR

    url = f"file://{published}"
    live = _pool(url, k=3)  # a pool of this (live) process: never swept
    child = subprocess.Popen(
        [sys.executable, "-c", _POOL_CHILD, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    token = child.stdout.readline().strip()
    pools = live.storage.path / POOL_DIR
    assert (pools / f"{token}.members").exists()
    dh.load(url, resident="lazy")  # the child is alive: its pool stays
    assert (pools / f"{token}.members").exists()
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert (pools / f"{token}.members").exists()  # close() never ran: an orphan
    dh.load(url, resident="lazy")
    assert not (pools / f"{token}.members").exists()
    assert (pools / f"{live.storage.token}.members").exists()
    live.sample(8)  # the live pool goes on
    live.storage.close()
    assert not (pools / f"{live.storage.token}.members").exists()
