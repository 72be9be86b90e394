"""The RoboSet loader on robohive rollout files, served by a Hugging Face-compatible 127.0.0.1 Hub.

Fixtures are written the way robohive's ``Trace.save`` writes them: one ``Trial<N>`` group per
rollout, flattened keys such as ``env_infos/visual_dict/rgb:top_cam:4x5:2d`` (h5py makes the nested
groups), gzip level 4. Every value tells where it came from: ``base = file * 10000 + trial * 100 +
row``; ``observations[row, d] = base + d / 100``, so a sampled row (or a next observation taken
from the wrong row, trial or file) is visible. Expected TED rows come from a plain per-row loop.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from datasets_hub.errors import InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec
from datasets_hub.loaders.roboset import loader as rs
from datasets_hub.loaders.roboset.loader import RoboSetLoader

from fixtures.roboset import (
    CAM,
    DECOYS,
    FILES,
    ID,
    REPO,
    TASK,
    check_ted,
    convert,
    expected,
    local_files,
    write_rollouts,
)


@pytest.fixture
def hub(roboset_hub):
    return roboset_hub


# -- end to end, by name ---------------------------------------------------------------------------
def test_load_by_name_from_the_hub_row_by_row(hub):
    import datasets_hub

    rb = datasets_hub.load(ID, batch_size=16, generator=torch.Generator().manual_seed(0))
    truth = expected(FILES)
    data = rb[:]
    check_ted(data, truth)
    for name in FILES:
        assert hub.count(hub.hf_path(REPO, name)) == 1
    for name in DECOYS:  # other tasks' files and non-h5 files are never fetched
        assert hub.count(hub.hf_path(REPO, name)) == 0
    # the two files' Trial0 are two episodes; the card maps (file, trial) -> episode id
    notes = datasets_hub.info(ID).notes
    names = sorted(FILES)
    assert notes["episode_map"] == {
        names[0]: {"Trial0": 0, "Trial1": 1, "Trial2": 2, "Trial10": 3},
        names[1]: {"Trial0": 4, "Trial1": 5},
    }
    assert notes["episodes"] == 6 and notes["layout"].startswith("robohive")
    assert notes["episode_ends"] == {"terminated": 2, "truncated": 4}
    assert notes["upstream_done_inside_trials"] == 1 and notes["next_observation_unknown_rows"] == 0
    assert "env_infos/config" in notes["skipped_keys"]
    assert notes["file_list"].startswith("listed from the Hub")
    assert len(torch.unique(data["episode"])) == 6
    # samples are rows of the truth: the observation says which
    batch = rb.sample()
    assert batch.batch_size == torch.Size([16])
    row_of = {round(float(v), 6): i for i, v in enumerate(truth["obs"][:, 0])}
    rows = [row_of[round(float(v), 6)] for v in batch["observation"][:, 0]]
    np.testing.assert_array_equal(batch["next", "observation"].numpy(), truth["next_obs"][rows])
    np.testing.assert_array_equal(batch["info", "visual_dict", CAM].numpy(), truth["img"][rows])
    np.testing.assert_array_equal(batch["episode"].numpy(), truth["episode"][rows])
    # a second load opens the build: no file is fetched again, no listing (memoised per process)
    hub.reset_log()
    assert len(datasets_hub.load(ID)) == len(rb)
    assert hub.total_requests() == 0


def test_cached_build_reopens_offline_from_the_hf_cache_listing(hub, monkeypatch):
    import datasets_hub

    built = datasets_hub.download(ID)
    hub.reset_log()
    monkeypatch.setattr(rs, "_listings", {})  # a new process: nothing memoised
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert datasets_hub.download(ID) == built  # same files listed from the HF cache, same build
    assert len(datasets_hub.load(ID)) == len(expected(FILES)["episode"])
    assert hub.total_requests() == 0


def test_files_param_selects_a_subset_and_another_build(hub):
    import datasets_hub

    full = datasets_hub.download(ID)
    second = sorted(FILES)[1]
    subset = datasets_hub.download(ID, files=[second])
    assert subset != full
    rb = datasets_hub.load(ID, files=[second])
    check_ted(rb[:], expected({second: FILES[second]}))
    notes = datasets_hub.info(ID, files=[second]).notes
    assert notes["episode_map"] == {second: {"Trial0": 0, "Trial1": 1}}
    assert notes["file_list"] == "the files parameter"


def test_files_param_needs_no_listing_and_no_network(monkeypatch):
    """resources() is on the fast path: with files named it opens no connection (offline here)."""
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")
    spec = DatasetSpec(
        id=ID, loader="roboset", params={"files": [f"{TASK}_0.h5", f"{TASK}/part1.h5"], "revision": "abc123"}
    )
    res = RoboSetLoader().resources(spec)
    assert [r.name for r in res] == [f"{REPO}@abc123/{TASK}/part1.h5", f"{REPO}@abc123/{TASK}_0.h5"]
    assert res[0].urls == (f"hf://datasets/{REPO}/{TASK}/part1.h5@abc123",)
    from datasets_hub.downloads.huggingface import parse_hf_url

    ref = parse_hf_url(res[1].urls[0])
    assert (ref.repo_id, ref.path, ref.revision) == (REPO, f"{TASK}_0.h5", "abc123")


def test_listing_offline_without_cache_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(rs, "_listings", {})
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")
    spec = DatasetSpec(id=ID, loader="roboset")
    with pytest.raises(Exception, match="files=") as info:
        RoboSetLoader().resources(spec)
    assert "offline" in str(info.value)


def test_missing_task_upstream_is_a_clear_error(hub):
    spec = DatasetSpec(id="roboset/FK1-v4(expert)/NoSuchTask-v4", loader="roboset")
    with pytest.raises(InvalidParameter, match=r"no \.h5 file .* starts with 'FK1-v4\(expert\)/NoSuchTask-v4'"):
        RoboSetLoader().resources(spec)


def test_matches_task():
    assert rs.matches_task(f"{TASK}.h5", TASK)
    assert rs.matches_task(f"{TASK}/a/b.h5", TASK)
    assert rs.matches_task(f"{TASK}_seed1.h5", TASK)
    assert not rs.matches_task(f"{TASK}X.h5", TASK)
    assert not rs.matches_task(f"{TASK}/notes.md", TASK)
    assert not rs.matches_task("FK1-v4(expert)/other_task.h5", TASK)


# -- conversion details ----------------------------------------------------------------------------
@pytest.mark.parametrize("chunk_rows", [1, 5, 1000])
def test_chunks_hold_whole_trials_in_order(tmp_path, chunk_rows):
    chunks, notes = convert(local_files(tmp_path), chunk_rows=chunk_rows)
    td = torch.cat(chunks)
    check_ted(td, expected(FILES))
    for chunk in chunks:  # whole trials per chunk, none split across chunks
        for e in torch.unique(chunk["episode"]):
            assert (chunk["episode"] == e).sum() == (td["episode"] == e).sum()
    if chunk_rows == 1:
        assert len(chunks) == 6
    assert notes["trials_per_file"] == {name: len(t) for name, t in FILES.items()}


def test_paths_layout_final_next_observation_is_never_fabricated(tmp_path):
    files = local_files(tmp_path, layout="paths")
    chunks, notes = convert(files)  # auto: the last actions are finite
    td = torch.cat(chunks)
    check_ted(td, expected(FILES, "paths"), "paths")
    assert notes["layout"].startswith("paths (auto")
    assert notes["next_observation_unknown_rows"] == 6
    ends = td["info", "next_observation_unknown"]
    assert torch.isnan(td["next", "observation"][ends]).all()
    assert not torch.isnan(td["next", "observation"][~ends]).any()


def test_layout_param_and_mixed_layouts(tmp_path):
    mixed = {"a.h5": {"Trial0": (4, False, ())}, "b.h5": {"Trial0": (3, True, ())}}
    files = {}
    for f, (name, layout) in enumerate([("a.h5", "robohive"), ("b.h5", "paths")]):
        files[name] = tmp_path / name
        write_rollouts(files[name], f, mixed[name], layout=layout)
    with pytest.raises(LoaderError, match="layout='robohive' or layout='paths'"):
        convert(files)
    chunks, notes = convert(files, layout="paths")  # forced: the NaN action row of a.h5 is then a step
    td = torch.cat(chunks)
    assert td.batch_size[0] == 4 + 3 and notes["layout"] == "paths (parameter)"
    assert torch.isnan(td["action"][3]).all()
    chunks, _ = convert({"a.h5": files["a.h5"]}, layout="robohive")
    assert torch.cat(chunks).batch_size[0] == 3


def test_observations_as_a_group_become_nested_keys(tmp_path):
    path = tmp_path / "dict.h5"
    with h5py.File(path, "w") as h:
        g = h.create_group("Trial0")
        g["observations/qp"] = np.arange(4.0)[:, None] * np.ones(2)
        g["observations/rgb"] = np.arange(4, dtype=np.uint8)[:, None, None, None] * np.ones((4, 2, 2, 3), np.uint8)
        g["actions"] = np.array([[1.0], [2.0], [3.0], [np.nan]])
        g["rewards"] = np.array([0.0, 10.0, 20.0, 30.0])
        g["done"] = np.array([0, 0, 0, 1], dtype=np.int8)  # robohive may numpify bools to int8
    chunks, notes = convert({"dict.h5": path})
    td = chunks[0]
    assert td["observation", "rgb"].dtype == torch.uint8
    np.testing.assert_array_equal(td["observation", "qp"][:, 0].numpy(), [0, 1, 2])
    np.testing.assert_array_equal(td["next", "observation", "qp"][:, 0].numpy(), [1, 2, 3])
    np.testing.assert_array_equal(td["next", "observation", "rgb"][:, 0, 0, 0].numpy(), [1, 2, 3])
    np.testing.assert_array_equal(td["next", "reward"][:, 0].numpy(), [10, 20, 30])
    assert td["next", "terminated"][:, 0].tolist() == [False, False, True]
    assert notes["episode_ends"] == {"terminated": 1, "truncated": 0}


def test_two_upstream_keys_never_become_one(tmp_path):
    """The top-level `time` and env_infos/time stay apart (checked by check_ted on every build); a file
    whose env_infos also has a trial/time group cannot map both to one key: a clear error, never a
    silent overwrite."""
    path = tmp_path / "clash.h5"
    write_rollouts(path, 0, {"Trial0": (4, False, ())})
    with h5py.File(path, "r+") as h:
        h["Trial0/env_infos/trial/time"] = np.arange(4.0)
    with pytest.raises(LoaderError, match="would both become 'info/trial/time'"):
        convert({"clash.h5": path})


def test_bad_files_raise_loader_error(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not hdf5")
    with pytest.raises(LoaderError, match="not a readable HDF5"):
        convert({"junk.h5": junk})
    d4rl_like = tmp_path / "d4rl.h5"
    with h5py.File(d4rl_like, "w") as h:
        h["observations"] = np.zeros((3, 2))
    with pytest.raises(LoaderError, match="no Trial<N> group"):
        convert({"d4rl.h5": d4rl_like})
    no_rewards = tmp_path / "nr.h5"
    with h5py.File(no_rewards, "w") as h:
        h["Trial0/actions"] = np.zeros((3, 2))
        h["Trial0/observations"] = np.zeros((3, 2))
    with pytest.raises(LoaderError, match="has no 'rewards'"):
        convert({"nr.h5": no_rewards})
    differing = tmp_path / "diff.h5"
    write_rollouts(differing, 0, {"Trial0": (3, False, ()), "Trial1": (3, False, ())})
    with h5py.File(differing, "r+") as h:
        del h["Trial1/env_infos/obs_dict/qp"]
    with pytest.raises(LoaderError, match="missing \\['info/obs_dict/qp', 'next/info/obs_dict/qp'\\]"):
        convert({"diff.h5": differing})


def test_params_are_checked():
    loader = RoboSetLoader()
    for params, match in [
        ({"layot": "auto"}, "Did you mean 'layout'"),
        ({"layout": "gym"}, "layout must be"),
        ({"files": []}, "non-empty list"),
        ({"files": ["a.hdf5"]}, "not an .h5 path"),
        ({"files": ["../a.h5"]}, "not an .h5 path"),
        ({"files": ["a.h5", "a.h5"]}, "twice"),
        ({"repo": "noslash"}, "owner/name"),
        ({"revision": ""}, "non-empty string"),
    ]:
        with pytest.raises(InvalidParameter, match=match):
            loader.check_params(DatasetSpec(id=ID, loader="roboset", params=params))


def test_check_loader_contract(tmp_path):
    from datasets_hub.testing import check_loader

    summary = check_loader(RoboSetLoader, DatasetSpec(id=ID, loader="roboset"), local_files(tmp_path))
    assert summary


def test_catalogue_has_the_known_tasks_sorted():
    import datasets_hub
    from datasets_hub.catalogue import resolve

    ids = datasets_hub.list_datasets(loader="roboset")
    assert ID in ids and len(ids) >= 20
    assert "roboset/DAPG(human)/relocate_v2d-v1" in ids
    assert "roboset/FK1-v4(human)/human_demos_by_task/FK1_SdoorOpenRandom_v2d-v4" in ids
    spec = resolve(ID)
    assert spec.loader == "roboset" and "RoboHive" in spec.metadata["citation"]
    assert spec.metadata["license"] and spec.metadata["description"]


def test_slices_stay_inside_one_trial(hub):
    import datasets_hub
    from datasets_hub import SliceSampler

    rb = datasets_hub.load(
        ID, sampler=SliceSampler(slice_len=2), batch_size=40, generator=torch.Generator().manual_seed(1)
    )
    batch = rb.sample()
    first, second = batch[0::2], batch[1::2]
    assert torch.equal(first["episode"], second["episode"])
    assert torch.equal(first["next", "observation"], second["observation"])  # contiguous rows of one trial
    assert torch.equal(first["next", "info", "visual_dict", CAM], second["info", "visual_dict", CAM])
