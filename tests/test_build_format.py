"""The lean-TED build: what it stores, and that it returns exactly what a naive TED copy would."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from datasets_hub.build.pipeline import build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import LoaderError, TEDError
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader, check_loader, fake_episodes, naive_ted


def _build(chunks, spec_id="fake/test", **params):
    class ChunkLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            yield from (c.clone() for c in chunks)

    return build(DatasetSpec(id=spec_id, loader="fake", params=params), ChunkLoader(), {}, [])


def _assert_same(sample, expected):
    assert set(sample.keys(True, True)) == set(expected.keys(True, True))
    for key in expected.keys(True, True):
        torch.testing.assert_close(sample.get(key), expected.get(key), rtol=0, atol=0, msg=f"key {key}")


def _chunks():
    first = fake_episodes([5, 3], first_episode=0, first_row=0)
    second = fake_episodes([4, 1, 6], first_episode=2, first_row=5 + 3 + 2, ends=["terminated", "truncated", "none"])
    return [first, second]


def test_build_returns_exactly_the_naive_ted_copy():
    chunks = _chunks()
    storage = DatasetStorage(_build(chunks))
    expected = naive_ted(chunks)
    assert len(storage) == expected.batch_size[0] == 19
    _assert_same(storage[:], expected)
    index = torch.tensor([18, 0, 4, 7, 8, 12, 13, 4])  # includes the last step of several episodes
    _assert_same(storage.get(index), expected[index])
    _assert_same(storage[-1], expected[-1])


def test_observations_are_stored_once_per_episode():
    path = _build(_chunks())
    manifest = json.loads((path / "manifest.json").read_text())
    schema = manifest["schema"]
    assert schema["obs/observation"]["rows"] == 19 + 5  # N + E rows
    assert "steps/next/observation" not in schema
    assert schema["steps/action"]["rows"] == 19
    assert manifest["counts"] == {
        "transitions": 19,
        "episodes": 5,
        "episodes_terminated": 2,
        "episodes_truncated": 2,
        "episodes_unflagged_end": 1,
    }
    index = DatasetStorage(path).episode_index()
    assert index.start.tolist() == [0, 5, 8, 12, 13]
    assert index.length.tolist() == [5, 3, 4, 1, 6]


def test_manifest_records_statistics_provenance_and_file_hashes():
    path = _build(_chunks(), seed=3)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format"] == "datasets_hub.ted" and manifest["version"] == 2
    assert manifest["params"] == {"seed": 3}
    returns = [sum(range(5)), sum(range(5, 8)), sum(range(8, 12)), 12, sum(range(13, 19))]
    assert manifest["stats"]["episode_return"]["max"] == max(returns)
    assert manifest["stats"]["episode_length"]["min"] == 1
    for name, entry in manifest["schema"].items():
        digest = hashlib.sha256((path / "data" / (name + ".memmap")).read_bytes()).hexdigest()
        assert digest == entry["sha256"], name
    assert torch.equal(DatasetStorage(path).episode_returns, torch.tensor(returns, dtype=torch.float64))


def test_next_values_that_do_not_follow_are_stored_per_step_and_backfilled():
    first, second = _chunks()
    second = second.clone()
    second["next", "observation"][1] += 0.5  # upstream says next obs differs from the following row
    storage = DatasetStorage(_build([first, second]))
    assert storage.manifest["layout"]["next_stored_per_step"] == ["observation"]
    _assert_same(storage[:], naive_ted([first, second]))


def test_nested_observation_keys_and_extra_info_are_kept():
    chunk = fake_episodes([3, 2])
    chunk["pixels"] = torch.arange(5 * 2 * 2, dtype=torch.uint8).reshape(5, 2, 2)
    chunk["next", "pixels"] = chunk["pixels"].roll(-1, 0)
    chunk["info", "qpos"] = torch.arange(5, dtype=torch.float64)[:, None]
    storage = DatasetStorage(_build([chunk]))
    _assert_same(storage[:], naive_ted(chunk))
    assert storage[:]["pixels"].dtype == torch.uint8


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c["next", "terminated"].__setitem__(1, True), "goes on"),
        (lambda c: c.__setitem__("episode", torch.tensor([0, 1, 0, 0, 0])), "contiguous"),
        (lambda c: c.exclude(("next", "reward")), "next/reward"),
    ],
)
def test_chunks_that_break_the_ted_contract_are_rejected(mutate, message):
    chunk = fake_episodes([5])
    out = mutate(chunk)
    chunk = out if out is not None else chunk
    with pytest.raises(TEDError, match=message):
        _build([chunk])


def test_a_repeated_episode_id_or_changed_schema_is_rejected():
    with pytest.raises(TEDError, match="appears in two chunks"):
        _build([fake_episodes([2]), fake_episodes([3])])
    with pytest.raises(TEDError, match="action"):
        _build([fake_episodes([2]), fake_episodes([3], act_dim=4, first_episode=1)])


def test_a_failing_loader_leaves_no_build_behind(isolated_cache):
    class Broken(FakeLoader):
        def episodes(self, spec, files, ctx):
            yield fake_episodes([3])
            raise ValueError("upstream file is truncated")

    with pytest.raises(LoaderError, match="upstream file is truncated"):
        build(DatasetSpec(id="fake/broken", loader="fake"), Broken(), {}, [])
    leftovers = [p.name for p in (isolated_cache / "datasets" / "fake" / "broken").iterdir()]
    assert all(name.endswith(".lock") for name in leftovers), leftovers


def test_force_rebuilds_and_the_same_spec_reuses():
    path = _build(_chunks())
    first_created = json.loads((path / "manifest.json").read_text())["created"]
    assert _build(_chunks()) == path
    loader = FakeLoader()
    rebuilt = build(DatasetSpec(id="fake/test", loader="fake"), loader, {}, [], force=True)
    assert rebuilt == path and json.loads((path / "manifest.json").read_text())["created"] >= first_created
    assert len(DatasetStorage(path)) == 12  # FakeLoader's own default episodes now


def test_check_loader_accepts_a_good_loader_and_catches_a_bad_one():
    summary = check_loader(
        FakeLoader, DatasetSpec(id="fake/x", loader="fake", params={"lengths": [2, 3, 4], "chunks": 2})
    )
    assert summary["counts"]["transitions"] == 9

    class NoName(FakeLoader):
        name = "Bad Name"

    with pytest.raises(AssertionError, match="lower-case"):
        check_loader(NoName)


def _with_history(chunk, flags):
    chunk = chunk.clone()
    chunk.set("history", torch.tensor(flags, dtype=torch.bool))
    return chunk


def test_history_rows_are_kept_as_frames_not_transitions():
    """Rows flagged ``history`` lead their episode: stored as frames before its first transition
    (times -k..-1), never as transitions; FrameStack reads them instead of padding."""
    from datasets_hub.buffers.frame_stack import FrameStack
    from datasets_hub.buffers.samplers.frame_stack import FullStackSampler

    chunk = fake_episodes([5, 3], first_episode=0, first_row=0)
    flags = [True, True, False, False, False, False, False, False]  # episode 0: 2 history rows
    storage = DatasetStorage(_build([_with_history(chunk, flags)]))
    kept = chunk[~torch.tensor(flags)]
    _assert_same(storage.get(torch.arange(len(storage))), naive_ted([kept]))
    assert len(storage) == 6 and storage.episode_index().length.tolist() == [3, 3]
    assert storage.history_keys() == [("observation",)]
    first, count = storage.history_index()
    assert count.tolist() == [2, 0] and first.tolist()[0] == 0
    assert torch.equal(storage.history_column("observation"), chunk["observation"][:2])
    stacked = FrameStack(4, storage=storage)(storage.get(torch.arange(6)))
    # episode 0, step 0: [0 (nothing before the history), h0, h1, own frame]
    expected = torch.stack([torch.zeros_like(chunk["observation"][0]), *chunk["observation"][:3]])
    assert torch.equal(stacked["observation"][0], expected)
    assert torch.equal(stacked["observation"][3][:3], torch.zeros_like(stacked["observation"][3][:3]))  # episode 1
    rows, _ = FullStackSampler(3, generator=torch.Generator().manual_seed(0)).sample(storage, 200)
    assert set(rows.tolist()) == {0, 1, 2, 5}  # history makes episode 0's stacks full from step 0


@pytest.mark.parametrize(
    "flags, message",
    [
        ([False, True, False, False, False, False, False, False], "after one of its transitions"),
        ([True, True, True, True, True, False, False, False], "no transition"),
    ],
)
def test_misplaced_history_rows_are_rejected(flags, message):
    chunk = fake_episodes([5, 3], first_episode=0, first_row=0)
    with pytest.raises(TEDError, match=message):
        _build([_with_history(chunk, flags)])


def test_a_leaf_removed_between_its_checks_and_its_mapping_is_a_cache_error(tmp_path, monkeypatch):
    """`rm` renames a build aside while another process opens it: a file that passed the size check and
    is gone when it is mapped is a CacheError saying to load again, never a bare FileNotFoundError."""
    import numpy as np

    from datasets_hub.build import reader as build_reader
    from datasets_hub.errors import CacheError

    leaf = tmp_path / "leaf.memmap"
    np.arange(6, dtype=np.float32).tofile(leaf)
    assert build_reader.open_leaf(leaf, "float32", (2,), 3).tolist() == [[0, 1], [2, 3], [4, 5]]

    def removed_meanwhile(path, *args, **kwargs):
        path.unlink()
        raise FileNotFoundError(2, "No such file or directory", str(path))

    monkeypatch.setattr(build_reader.np, "memmap", removed_meanwhile)
    with pytest.raises(CacheError, match="disappeared while the build was opened"):
        build_reader.open_leaf(leaf, "float32", (2,), 3)


def test_itemsizes_match_torch():
    """build/format.py knows sizes without torch: its table must agree with torch for every name in it."""
    import warnings

    import torch

    from datasets_hub.build.format import ITEMSIZE

    for name, size in ITEMSIZE.items():
        dtype = getattr(torch, name, None)
        if isinstance(dtype, torch.dtype):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # complex32 is "experimental"
                assert torch.empty(0, dtype=dtype).element_size() == size, name
