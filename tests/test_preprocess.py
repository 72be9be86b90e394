"""Cached, fingerprinted, parallel preprocessing (docs/guide/preprocessing.md): values, reuse, rebuilds, workers,
errors, atomic publication, slices over the result, the hub and the cache commands."""

from __future__ import annotations

import functools
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

import datasets_hub as dh
from datasets_hub import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
from datasets_hub.errors import CacheError, InvalidParameter, MissingDependency, PreprocessError, ReadOnlyError
from datasets_hub.files import human_bytes
from datasets_hub.fingerprint import UncachedPreprocessWarning
from datasets_hub.preprocess.chunks import probe_calls
from datasets_hub.preprocess.storage import PreprocessedStorage

from fixtures.preprocess import (
    LENGTHS,
    N,
    calls,
    counted,
    counted_by_every_worker,
    fails_on_row_170,
    fake_rb,
    obs_feature,
    published,
)


# ------------------------------------------------------------------------------------------ values
def test_values_match_fn_applied_directly_and_keep_ted_keys():
    rb = fake_rb(batch_size=8)
    out = rb.preprocess(obs_feature, num_workers=0, chunk_size=33)
    expected = obs_feature(rb[:])
    got = out[:]
    assert len(out) == N and set(got.keys(True, True)) == set(expected.keys(True, True))
    for key in expected.keys(True, True):
        torch.testing.assert_close(got[key], expected[key], msg=str(key))
    assert out.sample().batch_size == torch.Size([8])
    with pytest.raises(RuntimeError, match="read-only"):
        out.extend(got[:2])
    # the result is a full TED tensordict memmap that tensordict itself can open
    disk = TensorDict.load_memmap(out.storage.path / "data")
    torch.testing.assert_close(disk["feature"], expected["feature"])


def test_two_workers_write_disjoint_slices_equal_to_one_process(tmp_path):
    rb = fake_rb()
    log = tmp_path / "log"
    one = rb.preprocess(functools.partial(counted, log=str(log)), num_workers=0, chunk_size=30)[:]
    each = functools.partial(counted_by_every_worker, log=str(log), parent=os.getpid(), workers=2)
    two = rb.preprocess(each, num_workers=2, chunk_size=30, version="2w")[:]
    torch.testing.assert_close(one["r"], two["r"])
    pids = set(two["pid"].reshape(-1).tolist())
    assert os.getpid() not in pids and len(pids) == 2  # both workers wrote their own chunks
    # each chunk's rows were written by the process that computed them (disjoint, no gaps)
    assert calls(log) == 2 * (probe_calls(N) + 7)  # probes + 7 chunks, twice


def test_lambdas_and_closures_run_in_workers():
    rb = fake_rb()
    k = 3.0
    out = rb.preprocess(lambda td: td.select("action").apply(lambda x: x * k), num_workers=2, chunk_size=50)
    torch.testing.assert_close(out[:]["action"], rb[:]["action"] * 3)


# ------------------------------------------------------------------------------------------ reuse
def test_same_fn_is_reused_without_calling_it_even_in_a_fresh_process(tmp_path, isolated_cache):
    rb = fake_rb()
    log = tmp_path / "log"
    fn = functools.partial(counted, log=str(log))
    first = rb.preprocess(fn, chunk_size=64, num_workers=0)
    n_calls = calls(log)
    assert n_calls == probe_calls(N) + 4  # the probes, then 4 chunks
    again = rb.preprocess(functools.partial(counted, log=str(log)), chunk_size=64, num_workers=2)
    assert calls(log) == n_calls and again.storage.path == first.storage.path
    # an explicit chunk_size is part of the fingerprint (a result must never depend on it, but if
    # fn breaks the row-wise contract where the probe did not look, a rechunked call is not a reuse)
    assert (
        rb.preprocess(functools.partial(counted, log=str(log)), chunk_size=17, num_workers=0).storage.path
        != first.storage.path
    )
    n_calls = calls(log)
    # the same function in a new interpreter finds the published result
    script = textwrap.dedent(f"""
        import functools, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from fixtures.preprocess import counted, fake_rb
        out = fake_rb().preprocess(functools.partial(counted, log={str(log)!r}), num_workers=0, chunk_size=64)
        print(out.storage.path)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DATASETS_HUB_CACHE": str(isolated_cache)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(first.storage.path)
    assert calls(log) == n_calls
    assert len(published(isolated_cache)) == 2


def test_changed_closure_default_or_version_rebuilds(tmp_path, isolated_cache):
    rb = fake_rb()
    log = tmp_path / "log"

    def make(scale):
        def scaled(td):
            return counted(td, str(log), scale)

        return scaled

    def with_default(td, scale=2.0):
        return counted(td, str(log), scale)

    paths = set()
    for fn, version in [(make(1.0), None), (make(2.0), None), (with_default, None), (with_default, "v2")]:
        before = calls(log)
        out = rb.preprocess(fn, version=version, num_workers=0)
        assert calls(log) > before, (fn, version)  # computed, not reused
        paths.add(out.storage.path)
    assert len(paths) == 4
    with_default.__defaults__ = (5.0,)
    before = calls(log)
    out = rb.preprocess(with_default, version="v2", num_workers=0)
    assert calls(log) > before and out.storage.path not in paths
    torch.testing.assert_close(out[:]["r"], rb[:]["next", "reward"] * 5)
    before = calls(log)
    rb.preprocess(make(2.0), num_workers=0)  # an equal closure value: reused
    assert calls(log) == before


def test_lambdas_made_in_a_loop_get_distinct_results():
    rb = fake_rb()
    outs = [rb.preprocess(lambda td, k=k: td.select("action").apply(lambda x: x * k), num_workers=0) for k in (1, 2, 3)]
    assert len({o.storage.path for o in outs}) == 3
    for k, out in zip((1, 2, 3), outs, strict=True):
        torch.testing.assert_close(out[:]["action"], rb[:]["action"] * k)


def test_unfingerprintable_fn_warns_once_and_is_never_cached(tmp_path, isolated_cache):
    rb = fake_rb()
    log = tmp_path / "log"
    lock = threading.Lock()

    def locked(td):
        with lock:
            return counted(td, str(log))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = rb.preprocess(locked, num_workers=0)
        n = calls(log)
        b = rb.preprocess(locked, num_workers=0)
    assert calls(log) == 2 * n  # computed twice
    assert [w.category for w in caught] == [UncachedPreprocessWarning]
    assert "'lock'" in str(caught[0].message) and "NOT cached" in str(caught[0].message)
    assert published(isolated_cache) == []
    torch.testing.assert_close(a[:]["r"], b[:]["r"])
    tmp = a.storage.path.parent
    assert tmp.exists()
    del a
    gc.collect()
    assert not tmp.exists()  # the temporary result goes with its buffer


def test_in_memory_buffers_are_computed_without_caching(isolated_cache):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
    rb.extend(TensorDict({"x": torch.arange(60.0)[:, None], "episode": torch.arange(60) // 20}, batch_size=[60]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # by design, not a warning
        out = rb.preprocess(lambda td: td.set("y", td["x"] ** 2), num_workers=2, chunk_size=16)
    torch.testing.assert_close(out[:]["y"], torch.arange(60.0)[:, None] ** 2)
    assert not (isolated_cache / "preprocessed").exists()


# ------------------------------------------------------------------------------------------ slices, chains, hub
def test_slices_follow_the_parent_episode_index_even_without_episode_keys():
    rb = fake_rb(batch_size=40, sampler=SliceSampler(slice_len=10), generator=torch.Generator().manual_seed(0))
    out = rb.preprocess(lambda td: td.select("observation"), num_workers=0)
    assert out.storage.episode_index() is not None and out.storage.episode_index().num_episodes == len(LENGTHS)
    for _ in range(5):
        obs = out.sample()["observation"][:, 0].reshape(4, 10)
        # consecutive rows of one episode differ by 100 in the fake data; an episode change jumps by 200
        assert ((obs[:, 1:] - obs[:, :-1]) == 100).all()


def test_chained_preprocessing_chains_fingerprints(tmp_path, isolated_cache):
    rb = fake_rb()
    log = tmp_path / "log"
    first = rb.preprocess(obs_feature, num_workers=0)
    second = first.preprocess(functools.partial(counted, log=str(log), scale=2.0), num_workers=0)
    n = calls(log)
    torch.testing.assert_close(second[:]["r"], rb[:]["next", "reward"] * 2)
    manifest = second.storage.manifest
    assert manifest["parent"] == first.storage.fingerprint and manifest["build"] == rb.storage.path.name
    assert manifest["chain"] == ["fixtures.preprocess.obs_feature", "partial(fixtures.preprocess.counted)"]
    assert second.storage.path.parent == first.storage.path.parent  # all under <cache>/preprocessed/<build-fp>
    again = rb.preprocess(obs_feature, num_workers=0).preprocess(functools.partial(counted, log=str(log), scale=2.0))
    assert calls(log) == n and again.storage.path == second.storage.path


def test_load_with_a_preprocess_chain_and_a_sample_transform():
    calls_before = len(dh.load("gym/cartpole-random-v0", steps=300, seed=2))
    rb = dh.load(
        "gym/cartpole-random-v0",
        steps=300,
        seed=2,
        batch_size=16,
        sampler=SliceSampler(slice_len=4),
        generator=torch.Generator().manual_seed(1),
        preprocess=[obs_feature, lambda td: td.exclude("action")],
        transform=lambda td: td.set("sampled", torch.ones(td.shape[0])),
    )
    assert len(rb) == calls_before == 300
    batch = rb.sample()
    assert batch.batch_size == torch.Size([16]) and "feature" in batch.keys() and "action" not in batch.keys()
    assert batch["sampled"].all()
    assert isinstance(rb.storage, PreprocessedStorage) and len(rb.storage.manifest["chain"]) == 2
    with pytest.raises(InvalidParameter, match="preprocess="):
        dh.load("gym/cartpole-random-v0", steps=300, seed=2, preprocess=[obs_feature, 3])


# ------------------------------------------------------------------------------------------ errors
def test_a_worker_error_names_fn_and_the_chunk(isolated_cache):
    rb = fake_rb()
    with pytest.raises(
        PreprocessError, match=r"fails_on_row_170 failed on transitions \[150, 200\): ValueError: row 170"
    ):
        rb.preprocess(fails_on_row_170, num_workers=2, chunk_size=50)
    with pytest.raises(PreprocessError, match=r"\[170, 180\)"):
        rb.preprocess(fails_on_row_170, num_workers=0, chunk_size=10)
    assert published(isolated_cache) == []
    assert not list((isolated_cache / "preprocessed").glob("*/*.incomplete"))


@pytest.mark.parametrize(
    "fn, match",
    [
        (lambda td: td["observation"], "returned Tensor"),
        (lambda td: td[:1], r"batch size \[1\]"),
        (lambda td: td.select("action") if td.shape[0] == 4 else td.select("observation"), "same keys"),
        (
            lambda td: td.select("action") if td.shape[0] == 4 else td.select("action").apply(lambda x: x.double()),
            "same dtypes",
        ),
    ],
)
def test_contract_violations_are_explained(fn, match):
    with pytest.raises(PreprocessError, match=match):
        fake_rb().preprocess(fn, num_workers=0, chunk_size=64)


def test_bad_arguments():
    rb = fake_rb()
    with pytest.raises(InvalidParameter, match="backend"):
        rb.preprocess(obs_feature, backend="dask")
    with pytest.raises(InvalidParameter, match="num_workers"):
        rb.preprocess(obs_feature, num_workers=-1)
    with pytest.raises(InvalidParameter, match="chunk_size"):
        rb.preprocess(obs_feature, chunk_size=0)
    with pytest.raises(InvalidParameter, match="empty"):
        TensorDictReplayBuffer(storage=LazyTensorStorage(4)).preprocess(obs_feature)


def test_ray_backend_without_ray_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingDependency, match=r"pip install 'datasets-hub\[ray\]'"):
        fake_rb().preprocess(obs_feature, backend="ray", version="ray-missing")


# ------------------------------------------------------------------------------------------ atomicity & cache
SLOW = textwrap.dedent("""
    import functools, os, sys, time
    sys.path.insert(0, {tests!r})
    from fixtures.preprocess import fake_rb

    def slow(td, log):
        with open(log, "a") as fh:
            fh.write(f"{{os.getpid()}}\\n")
        time.sleep(0.3)
        return td.select("action")

    if __name__ == "__main__":
        fake_rb().preprocess(functools.partial(slow, log={log!r}), num_workers=2, chunk_size=10)
        print("finished")
""")


@pytest.mark.slow  # a kill -9 trial: make test-faults runs it
def test_a_kill_midway_leaves_nothing_visible_and_workers_exit(tmp_path, isolated_cache):
    log = tmp_path / "pids"
    script = tmp_path / "slow.py"
    script.write_text(SLOW.format(tests=str(Path(__file__).parent), log=str(log)))
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "DATASETS_HUB_CACHE": str(isolated_cache)},
    )
    deadline = time.time() + 120
    while calls(log) < probe_calls(N) + 3 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)  # the probes and a few chunks ran: workers are mid-way
    assert proc.poll() is None, proc.communicate()
    os.kill(proc.pid, signal.SIGKILL)  # the parent only: its workers must notice and exit
    proc.wait()
    assert published(isolated_cache) == []
    assert list((isolated_cache / "preprocessed").glob("*/*.incomplete"))  # invisible leftovers, for prune
    workers = {int(p) for p in log.read_text().split()} - {proc.pid}
    deadline = time.time() + 15
    while time.time() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.2)
    assert not any(_alive(p) for p in workers)
    from datasets_hub.cache.listing import list_cache
    from datasets_hub.cache.maintenance import prune

    assert list_cache().preprocessed == []
    removed = prune()
    assert [i.reason for i in removed] == ["unfinished build (its process died)"]
    assert not list((isolated_cache / "preprocessed").glob("*/*.incomplete"))


def test_processes_asking_at_once_compute_once(tmp_path, isolated_cache):
    log = tmp_path / "log"
    script = textwrap.dedent(f"""
        import functools, sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from fixtures.preprocess import counted, fake_rb

        def slow(td, log):
            time.sleep(0.2)  # 2 s of work: the two processes overlap (each starts in ~3-5 s)
            return counted(td, log)

        if __name__ == "__main__":
            out = fake_rb().preprocess(functools.partial(slow, log={str(log)!r}), num_workers=0, chunk_size=20)
            print(out.storage.path, float(out[:]["r"].sum()))
    """)
    env = {**os.environ, "DATASETS_HUB_CACHE": str(isolated_cache)}
    fake_rb()  # build first: this test is about the preprocessing lock, not the build's
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outputs]
    assert len({o[0] for o in outputs}) == 1  # the same result, with the same values
    assert calls(log) == probe_calls(N) + 10  # the probes and 10 chunks: computed by one process only


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) counts as gone
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_cache_ls_rm_and_prune_cover_preprocessed_variants(isolated_cache, capsys):
    from datasets_hub.cache import listing as cl
    from datasets_hub.cache import maintenance as mt
    from datasets_hub.cli import main

    rb = fake_rb()
    out = rb.preprocess(obs_feature, num_workers=0)
    [entry] = cl.list_cache().preprocessed
    assert entry.transform == "fixtures.preprocess.obs_feature" and entry.id == "fake/pre"
    assert entry.fingerprint == out.storage.fingerprint and entry.transitions == N
    assert entry.bytes == mt.dir_size(out.storage.path) > 0
    assert main(["cache", "ls"]) == 0
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if out.storage.fingerprint in line)
    assert "obs_feature" in line and human_bytes(entry.bytes) in line and line.startswith("      preprocessed")
    build_line = text.splitlines()[text.splitlines().index(line) - 1]  # a variant is listed under its build
    assert build_line.startswith("  fake/pre ") and rb.storage.path.name in build_line
    # prune --older-than removes old variants (and never a fresh one)
    assert mt.prune(older_than_days=1) == []
    old = time.time() - 3 * 86400
    os.utime(out.storage.path / "manifest.json", (old, old))
    manifest = out.storage.manifest
    import json

    (out.storage.path / "manifest.json").write_text(json.dumps({**manifest, "created": "2000-01-01T00:00:00Z"}))
    items = mt.prune(older_than_days=1)
    assert [i.path for i in items] == [out.storage.path] and not out.storage.path.exists()
    # rm of the build removes its variants
    again = rb.preprocess(obs_feature, num_workers=0)
    assert again.storage.path.exists()
    mt._remove_build(rb.storage.path)
    assert not again.storage.path.exists() and cl.list_cache().preprocessed == []


def test_orphaned_variants_are_pruned(isolated_cache):
    from datasets_hub.cache import maintenance as mt

    rb = fake_rb()
    out = rb.preprocess(obs_feature, num_workers=0)
    from datasets_hub.cache.layout import remove_tree

    remove_tree(rb.storage.path)  # the build went away by other means
    items = mt.prune()
    assert [i.path for i in items] == [out.storage.path]  # each variant removed under its own lock
    assert "no longer exists" in items[0].reason and not out.storage.path.parent.exists()


def test_storage_pickles_by_path():
    import pickle

    out = fake_rb().preprocess(obs_feature, num_workers=0)
    clone = pickle.loads(pickle.dumps(out.storage))
    assert clone.path == out.storage.path and len(clone) == N
    torch.testing.assert_close(clone.get(torch.arange(5))["feature"], out.storage.get(torch.arange(5))["feature"])


def test_a_result_refuses_dumps_and_loads_with_an_explanation(tmp_path):
    out = fake_rb().preprocess(obs_feature, num_workers=0)
    with pytest.raises(CacheError, match="not dumped: it stays in the cache"):
        out.storage.dumps(tmp_path / "copy")
    with pytest.raises(ReadOnlyError, match="preprocessing result is read-only"):
        out.storage.loads(tmp_path / "copy")
    out.dumps(tmp_path / "buffer")  # the buffer's dump leaves the result out and keeps the rest
    assert (tmp_path / "buffer" / "sampler.pt").exists() and not (tmp_path / "buffer" / "storage").exists()


@pytest.mark.parametrize("workers", [1, 2])
def test_without_cloudpickle_unpicklable_fns_run_in_forked_workers(monkeypatch, workers):
    import faulthandler

    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # `import cloudpickle` raises ImportError
    x = torch.randn(1000, 1000)
    (x @ x).sin().sum()  # the parent's OpenMP pool is up: a forked child must not use it (it would hang)
    rb = fake_rb()
    offset = 7.0
    faulthandler.dump_traceback_later(90, exit=True)  # a hang fails the run loudly instead of blocking it
    try:
        # the big elementwise op runs a parallel region in the worker
        out = rb.preprocess(
            lambda td: td.select("action").apply(lambda x: x + offset + torch.zeros(10**6).sin().sum()),
            num_workers=workers,
            chunk_size=50,
        )
    finally:
        faulthandler.cancel_dump_traceback_later()
    torch.testing.assert_close(out[:]["action"], rb[:]["action"] + 7)
    assert out.storage.manifest["workers"] == workers
