"""Packed per-step records: one gather returns exactly what a gather per leaf returns."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import datasets_hub as dh
from datasets_hub.build import memory as ram
from datasets_hub.build.format import FORMAT_VERSION, MANIFEST, format_version_of, write_manifest_checksum
from datasets_hub.build.packed_steps import MAX_FIELD_BYTES, RECORD_NAME, PackedSteps
from datasets_hub.build.reader import open_build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import CacheError, InvalidParameter

from fixtures.builds import as_format_version_1, assert_same_batches


def _columns(n: int) -> list:
    rng = np.random.default_rng(0)
    return [
        (("action",), rng.standard_normal((n, 6)).astype(np.float32)),
        (("next", "reward"), rng.standard_normal((n, 1)).astype(np.float32)),
        (("next", "terminated"), rng.random((n, 1)) < 0.1),
        (("info", "count"), np.arange(n, dtype=np.int64)),
        (("info", "small"), rng.integers(0, 255, (n, 3), dtype=np.uint8)),
        (("info", "wide"), rng.standard_normal((n, MAX_FIELD_BYTES // 8 + 1))),  # too wide: not packed
    ]


def test_gather_equals_one_take_per_leaf_and_the_episode_search():
    n = 500
    columns = _columns(n)
    starts = np.array([0, 7, 100, 101, 350])
    packed = PackedSteps.from_columns(columns, starts, n)
    assert packed is not None and ("info", "wide") not in packed.keys and len(packed.keys) == 5
    assert packed.records.shape[1] % 8 == 0
    rows = np.array([0, 6, 7, 99, 100, 101, 349, 350, 499, 3, 3])
    ordinal, leaves = packed.gather(rows)
    assert np.array_equal(ordinal, np.searchsorted(starts, rows, side="right") - 1)
    by_key = dict(leaves)
    for key, column in columns[:-1]:
        got = by_key[key]
        assert got.is_contiguous() and got.dtype == torch.from_numpy(column).dtype
        assert torch.equal(got, torch.from_numpy(column.take(rows, axis=0))), key


def test_nothing_small_enough_gives_no_record():
    n = 10
    wide = [(("x",), np.zeros((n, MAX_FIELD_BYTES + 1), dtype=np.uint8))]
    assert PackedSteps.from_columns(wide, np.array([0]), n) is None


def test_records_that_do_not_fit_are_refused(monkeypatch):
    monkeypatch.setattr(ram, "available_memory", lambda: (ram.MIN_MARGIN, None))
    with pytest.raises(InvalidParameter, match="packing the per-step leaves"):
        PackedSteps.from_columns(_columns(100), np.array([0]), 100)


# -- on disk: format version 2 writes the records, version 1 builds still open ---------------------
ID = "gym/cartpole-random-v0"
SMALL = {"steps": 600, "seed": 1}


def _samples(storage, sampler, seed=5, n=4):
    rb = dh.TensorDictReplayBuffer(
        storage=storage, sampler=sampler, batch_size=32, generator=torch.Generator().manual_seed(seed)
    )
    return [rb.sample() for _ in range(n)]


def test_a_build_writes_the_records_and_old_builds_give_the_same_samples(tmp_path):
    path = Path(dh.load(ID, **SMALL).storage.path)
    manifest = json.loads((path / MANIFEST).read_text())
    # a build without compressed frames is written as version 2 (the packed records), not FORMAT_VERSION (3)
    assert manifest["version"] == format_version_of(manifest["layout"]) == 2 < FORMAT_VERSION
    assert manifest["layout"]["packed"]["name"] == RECORD_NAME
    opened = open_build(path)
    assert opened.packed is not None and ("_packed",) not in opened.steps
    assert {("action",), ("next", "reward"), ("next", "terminated")} <= set(opened.packed.keys)
    old = as_format_version_1(path, tmp_path / "v1")
    assert open_build(old).packed is None
    for sampler in (dh.RandomSampler, lambda: dh.SliceSampler(slice_len=8)):
        new = _samples(DatasetStorage(path), sampler())
        assert_same_batches(new, _samples(DatasetStorage(old), sampler()))  # per-leaf gathers
        assert_same_batches(new, _samples(DatasetStorage(old, in_memory=True), sampler()))  # packed at open time
        assert_same_batches(
            new, _samples(DatasetStorage(path, in_memory=True), sampler())
        )  # the build's records, in RAM
    rows = torch.arange(600)
    assert_same_batches([DatasetStorage(path).get(rows)], [DatasetStorage(old).get(rows)])
    assert "_packed" not in DatasetStorage(path).get(rows[:3]).keys()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda p: p["fields"][0].update(offset=p["width"]), "outside"),
        (lambda p: p["fields"][1].update(offset=p["fields"][0]["offset"]), "overlaps"),
        (lambda p: p["fields"][0].update(dtype="float64"), "not a per-step column"),
        (lambda p: p.update(width=p["width"] + 8), "does not hold them"),
        (lambda p: p.pop("ordinal"), "malformed"),
    ],
)
def test_a_damaged_record_layout_is_refused(tmp_path, mutate, message):
    path = Path(dh.load(ID, **SMALL).storage.path)
    bad = tmp_path / "bad"
    shutil.copytree(path, bad)
    manifest = json.loads((bad / MANIFEST).read_text())
    mutate(manifest["layout"]["packed"])
    (bad / MANIFEST).write_text(json.dumps(manifest))
    write_manifest_checksum(bad)
    with pytest.raises(CacheError, match=message):
        open_build(bad)
