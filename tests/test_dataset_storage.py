"""DatasetStorage's one-read paths give what the generic Storage paths give: ``gather_states`` (states at
rows and right after them, from the per-episode T+1 rows) and ``gather`` with extras (built into the
TensorDict in one go instead of set key by key)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datasets_hub.buffers.storages import Storage, attach_extras
from datasets_hub.testing import FakeLoader, fake_episodes, naive_ted

from fixtures.builds import as_format_version_1

LENGTHS = [5, 1, 8, 3]


@pytest.fixture
def storage():
    from datasets_hub.build.pipeline import build
    from datasets_hub.build.storage import DatasetStorage
    from datasets_hub.loader import DatasetSpec

    chunk = fake_episodes(LENGTHS)

    class ChunkLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            yield chunk.clone()

    return DatasetStorage(build(DatasetSpec(id="fake/states", loader="fake", params={}), ChunkLoader(), {}, []))


def test_gather_states_reads_the_state_at_or_after_each_row(storage):
    n = len(storage)
    rng = np.random.default_rng(0)
    rows = rng.integers(0, n, 200)
    after = rng.random(200) < 0.5
    everything = storage.get(torch.arange(n))
    want = torch.where(
        torch.from_numpy(after)[:, None],
        everything["next", "observation"][rows],
        everything["observation"][rows],
    )
    episodes = np.searchsorted(np.cumsum([0, *LENGTHS[:-1]]), rows, side="right") - 1
    for kw in ({}, {"episodes": episodes}):
        got = storage.gather_states(("observation",), rows, after, **kw)
        assert torch.equal(got, want)
        assert torch.equal(Storage.gather_states(storage, ("observation",), rows, after, **kw), want)  # generic path
    assert torch.equal(
        storage.gather_states(("observation",), rows, np.ones(200, bool)),
        everything["next", "observation"][rows],
    )
    assert torch.equal(storage.gather_states(("observation",), rows), everything["observation"][rows])
    with pytest.raises(IndexError):
        storage.gather_states(("observation",), np.array([n]), None)
    with pytest.raises(KeyError):
        storage.gather_states(("nope",), rows[:3], None)


def test_gather_with_extras_equals_get_then_set(storage):
    index = torch.tensor([0, 4, 5, 13, 2, 2])
    extras = {
        "index": index.clone(),
        ("goal", "observation"): torch.randn(6, 3),
        ("goal", "distance"): torch.arange(6),
        ("next", "truncated"): torch.ones(6, 1, dtype=torch.bool),  # a sampler's info overrides a stored key
    }
    obs = storage.get(index)["observation"]
    for more in (
        {},
        {"observation": torch.zeros(6, 2, *obs.shape[1:])},  # a window replacing the stored key: not read
        {("next", "observation"): torch.ones(6, *obs.shape[1:])},
        {"observation": obs + 1, ("next", "observation"): obs - 1},
    ):
        got = storage.gather(index, {**extras, **more})
        want = attach_extras(storage.get(index), {**extras, **more})
        assert set(got.keys(True, True)) == set(want.keys(True, True))
        for key in want.keys(True, True):
            assert torch.equal(got[key], want[key]), key


def test_a_2d_index_gives_items_shaped_like_it(storage):
    """``gathers_batches``: a ``[k, m]`` index reads ``[k, m]`` items at once, values of the flat read."""
    assert storage.gathers_batches
    index = torch.tensor([[0, 4, 5], [13, 2, 2]])
    flat = storage.gather(index.reshape(-1), {"flag": torch.arange(6)})
    for got in (storage.gather(index, {"flag": torch.arange(6).view(2, 3)}), storage.get(index)):
        assert got.batch_size == (2, 3) and got["next"].batch_size == (2, 3)
        for key in got.keys(True, True):
            assert got[key].shape[:2] == (2, 3), key
            assert torch.equal(got[key].reshape(6, *got[key].shape[2:]), flat[key]), key


# -- the sampling path: a fixed plan of reads and cuts, checked against the naive TED copy ----------
def _build_with_info(tmp_path, ids_from=0):
    """A build with nested per-step leaves (packed and, too wide to pack, unpacked), episode ids that
    are (``ids_from=0``) or are not their ordinals, and every kind of episode end."""
    from datasets_hub.build.packed_steps import MAX_FIELD_BYTES
    from datasets_hub.build.pipeline import build
    from datasets_hub.loader import DatasetSpec

    chunk = fake_episodes(LENGTHS, first_episode=ids_from, ends=["terminated", "truncated", "none", "truncated"])
    n = chunk.batch_size[0]
    chunk["info", "count"] = torch.arange(n, dtype=torch.int64)
    chunk["info", "wide"] = torch.arange(n * (MAX_FIELD_BYTES // 8 + 1), dtype=torch.float64).reshape(n, -1)
    chunk["next", "info", "cost"] = torch.arange(n, dtype=torch.float32)[:, None] / 7

    class ChunkLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            yield chunk.clone()

    spec = DatasetSpec(id=f"fake/plan{ids_from}", loader="fake", params={})
    return build(spec, ChunkLoader(), {}, []), naive_ted(chunk)


@pytest.mark.parametrize("ids_from", [0, 3])
@pytest.mark.parametrize("records", [True, False])
@pytest.mark.parametrize("in_memory", [False, True])
def test_every_sampled_leaf_is_the_naive_ted_value_and_contiguous(tmp_path, ids_from, records, in_memory):
    from datasets_hub.build.storage import DatasetStorage

    path, expected = _build_with_info(tmp_path, ids_from)
    if not records:
        path = as_format_version_1(path, tmp_path / "v1")
    storage = DatasetStorage(path, in_memory=in_memory)
    n = len(storage)
    rng = np.random.default_rng(1)
    replaced = {
        ("next", "truncated"): torch.ones(7, 1, dtype=torch.bool),
        ("next", "done"): torch.ones(7, 1, dtype=torch.bool),
    }
    for extras in (
        {},
        {"index": None},
        replaced,
        {("info", "count"): torch.full((7,), -1)},
        {("next", "info", "cost"): torch.zeros(7, 1)},
    ):
        for _ in range(3):  # the plan for these extras is made once, then reused
            index = torch.from_numpy(rng.integers(0, n, 7))
            given = {k: (index.clone() if v is None else v) for k, v in extras.items()}
            got = storage.gather(index, given)
            want = attach_extras(expected[index], given)
            assert set(got.keys(True, True)) == set(want.keys(True, True))
            for key in want.keys(True, True):
                assert got.get(key).is_contiguous(), key
                assert got.get(key).dtype == want.get(key).dtype, key
                assert torch.equal(got.get(key), want.get(key)), key
    # a batch is fresh memory: writing into one sample never shows in another
    first = storage.gather(torch.tensor([0, 1]))
    first["next", "done"].fill_(True)
    first["done"].fill_(True)
    assert not storage.gather(torch.tensor([0, 1]))["done"].any()
    assert torch.equal(storage.gather(torch.tensor([0, 1]))["next", "done"], expected["next", "done"][:2])


@pytest.mark.parametrize("records", [True, False])
def test_gather_into_writes_what_gather_gives_into_wider_or_narrower_sets_of_arrays(tmp_path, records):
    """gather_into fills caller-given arrays with exactly gather's values (every leaf, a subset of leaves,
    sampler extras, rows wider in the last dimension left as they were past the leaf's width)."""
    from datasets_hub.build.storage import DatasetStorage

    path, expected = _build_with_info(tmp_path, 3)
    if not records:
        path = as_format_version_1(path, tmp_path / "v1")
    storage = DatasetStorage(path)
    rng = np.random.default_rng(2)
    rows = rng.integers(0, len(storage), 9)
    want = expected[torch.from_numpy(rows)]
    every = [k if isinstance(k, tuple) else (k,) for k in want.keys(True, True)]
    for keys in (every, [("observation",), ("next", "done"), ("step",)], [("next", "observation")]):
        out = {k: np.full(tuple(want.get(k).shape), 7, dtype=want.get(k).numpy().dtype) for k in keys}
        storage.gather_into(rows, out)
        for key in keys:
            assert np.array_equal(out[key], want.get(key).numpy()), key
    wide = np.full((9, want["observation"].shape[-1] + 2), -5.0, dtype=np.float32)
    storage.gather_into(rows, {("observation",): wide})
    assert np.array_equal(wide[:, :-2], want["observation"].numpy()) and (wide[:, -2:] == -5).all()
    replaced = {("next", "truncated"): torch.ones(9, 1, dtype=torch.bool)}
    out = {("next", "truncated"): np.zeros((9, 1), bool), ("next", "done"): np.zeros((9, 1), bool)}
    storage.gather_into(rows, out, replaced)
    assert out[("next", "truncated")].all() and out[("next", "done")].all()
    with pytest.raises(KeyError, match="nope"):
        storage.gather_into(rows, {("nope",): np.zeros(9)})
    with pytest.raises(ValueError, match="cannot write"):
        storage.gather_into(rows, {("next", "reward"): np.zeros((9, 3, 1), np.float32)})


def test_rows_outside_the_dataset_are_refused_and_negative_rows_count_from_the_end(storage):
    n = len(storage)
    everything = storage.get(torch.arange(n))
    for bad in ([n], [0, n + 5], [-n - 1], [3, -(2**62)]):
        for index in (torch.tensor(bad), np.array(bad), bad):
            with pytest.raises(IndexError, match="out of range"):
                storage.get(index)
        with pytest.raises(IndexError, match="out of range"):
            storage.gather(torch.tensor(bad), {"index": torch.tensor(bad)})
    got = storage.gather(torch.tensor([-1, 0, -n]))
    assert torch.equal(got["observation"], everything["observation"][[n - 1, 0, 0]])
    assert torch.equal(
        storage.get(torch.tensor([[1, 2], [-1, 3]]))["step"], everything["step"][torch.tensor([[1, 2], [n - 1, 3]])]
    )
    assert storage.get(torch.tensor([], dtype=torch.int64)).batch_size == torch.Size([0])


def test_huge_pages_are_asked_for_the_files_a_batch_reads_when_they_fit_in_memory(tmp_path, monkeypatch):
    from datasets_hub.build import storage as ds

    path, _ = _build_with_info(tmp_path)
    advised = []
    monkeypatch.setattr(ds, "huge_pages", lambda column: advised.append(column.nbytes))
    monkeypatch.setattr(ds, "available_memory", lambda: (64 << 30, 128 << 30))
    storage = ds.DatasetStorage(path)
    # the frames, the packed records and the one per-step leaf too wide to pack
    assert len(advised) == 3 and sum(advised) == storage.manifest["schema"]["obs/observation"]["rows"] * 3 * 4 + (
        len(storage) * (storage.manifest["layout"]["packed"]["width"] + 33 * 8)
    )
    advised.clear()
    monkeypatch.setattr(ds, "available_memory", lambda: (1 << 30, 128 << 30))  # less than the margin
    ds.DatasetStorage(path)
    ds.DatasetStorage(path, in_memory=True)  # anonymous memory: advised when copied (build/memory.py)
    assert advised == []
