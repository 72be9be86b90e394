"""What opening a build refuses (issue 12): tampered and crafted manifests, paths out of the build,
a garbage episode index, truncated preprocessing results, and `verify` over preprocessing results."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import datasets_hub as dh
from datasets_hub.build.format import write_manifest_checksum
from datasets_hub.cache.verify import verify
from datasets_hub.errors import CacheError

from fixtures.faults import double_observation

GYM = "gym/cartpole-random-v0"


@pytest.fixture
def build():
    return dh.download(GYM, steps=120)


def _edit(build, change, *, rehash: bool = True):
    """Edit the manifest; with ``rehash`` also forge manifest.sha256 (the consistency checks must still catch it)."""
    path = build / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))
    if rehash:
        write_manifest_checksum(build)


def _open_error(match: str):
    with pytest.raises(CacheError, match=match) as info:
        dh.load(GYM, steps=120)
    return str(info.value)


def test_an_edited_manifest_fails_its_hash_at_open(build):
    _edit(build, lambda m: m["counts"].update(transitions=119), rehash=False)
    assert "manifest was edited" in _open_error("sha256")


def test_rewards_reinterpreted_as_another_dtype_are_refused(build):
    _edit(build, lambda m: m["schema"]["steps/next/reward"].update(dtype="int32"), rehash=False)
    _open_error("manifest was edited")


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda m: m["schema"]["steps/action"].update(dtype="object"), "dtype 'object'"),
        (lambda m: m["schema"]["steps/action"].update(shape=[2**40, 2**40]), "impossible"),
        (lambda m: m["schema"]["steps/action"].update(shape=[-1]), "non-negative ints"),
        (lambda m: m.pop("layout"), "'layout' is missing"),
        (lambda m: m["counts"].update(transitions=119), "rows but counts say"),
        (
            lambda m: m["schema"].update({"steps/../../../../etc/passwd": m["schema"]["steps/action"]}),
            "leaves its folder",
        ),
        (lambda m: m["schema"].update({"/etc/passwd": m["schema"]["steps/action"]}), "leaves its folder"),
        (lambda m: m["layout"]["obs"].append("ghost"), "no column 'obs/ghost'"),
    ],
)
def test_crafted_manifests_get_clear_errors(build, change, words):
    _edit(build, change)
    _open_error(words)


@pytest.mark.parametrize("content", ["[1, 2, 3]", "[" * 100_000 + "]" * 100_000])
def test_a_json_list_or_deep_nesting_is_a_cache_error(build, content):
    (build / "manifest.json").write_text(content)
    write_manifest_checksum(build)
    _open_error("broken|not an object|unreadable")


def test_a_symlinked_column_outside_the_build_is_refused(build, tmp_path):
    outside = tmp_path / "secret.bin"
    column = build / "data" / "steps" / "action.memmap"
    outside.write_bytes(column.read_bytes())
    column.unlink()
    os.symlink(outside, column)
    _open_error("resolves outside")


def test_a_garbage_episode_index_is_refused(build):
    start = build / "data" / "episodes" / "start.memmap"
    values = np.fromfile(start, dtype=np.int64)
    values[1] += 3
    values.tofile(start)
    _open_error("episode index is inconsistent")


def test_a_truncated_or_escaping_preprocessed_result_is_a_clear_error(build):
    rb = dh.load(GYM, steps=120)
    out = rb.preprocess(double_observation, num_workers=0)
    result = out.storage.path
    manifest = json.loads((result / "manifest.json").read_text())
    first = next(iter(manifest["schema"].values()))
    leaf = result / first["file"]
    with open(leaf, "r+b") as fh:
        fh.truncate(leaf.stat().st_size // 2)
    with pytest.raises(CacheError, match="bytes where the manifest says"):
        dh.load(GYM, steps=120, preprocess=double_observation)
    assert any("bytes where the manifest says" in p for p in verify(GYM, params={"steps": 120}).problems)
    first["file"] = "../../../../../../etc/hostname"
    (result / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CacheError, match="leaves its folder"):
        dh.load(GYM, steps=120, preprocess=double_observation)


def test_verify_checks_preprocessed_results(build):
    rb = dh.load(GYM, steps=120)
    out = rb.preprocess(double_observation, num_workers=0)
    assert verify(GYM, params={"steps": 120}).ok
    manifest = json.loads((out.storage.path / "manifest.json").read_text())
    leaf = out.storage.path / next(iter(manifest["schema"].values()))["file"]
    data = bytearray(leaf.read_bytes())
    data[0] ^= 0xFF
    leaf.write_bytes(bytes(data))
    problems = verify(GYM, params={"steps": 120}).problems
    assert any(str(leaf) in p and "preprocessing manifest" in p for p in problems), problems
