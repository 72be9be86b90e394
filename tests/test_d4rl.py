"""The D4RL loader on files in the exact upstream HDF5 layout, checked row by row.

Every fixture has distinct values per step: ``observations[t] = t + 0.001 * dim``, so any row of a
chunk tells which file row it came from, and a next observation taken from the wrong row (or the
wrong episode) is visible. The expected TED rows are computed by a plain per-row loop, independent
of the loader's vectorised code.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from datasets_hub import catalogue
from datasets_hub.errors import InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, LoaderContext, Resource
from datasets_hub.loaders.d4rl.loader import D4RLLoader

from fixtures.d4rl import ACT_DIM, EPISODES, QPOS_DIM, check_rows, convert, expected_rows, write_d4rl


@pytest.mark.parametrize("chunk_rows", [1, 4, 7, 100])
def test_timeouts_and_next_observations_row_by_row(tmp_path, chunk_rows):
    path = write_d4rl(tmp_path / "x.hdf5")
    chunks, notes = convert(path, chunk_rows=chunk_rows)
    check_rows(chunks, expected_rows(EPISODES), chunk_rows)
    assert notes["episodes"] == len(EPISODES)
    assert notes["episode_ends"] == {
        "terminal": 2,
        "timeout": 2,
        "terminal_and_timeout": 1,
        "max_episode_steps": 0,
        "end_of_file": 1,
    }
    assert notes["final_episode_truncated_by_end_of_file"] == {"rows": 4}
    assert notes["next_observation_unknown_rows"] == 0
    assert notes["next_observation_mismatch_rows"] == 0
    assert notes["timeouts"] == "present"


@pytest.mark.parametrize("chunk_rows", [3, 8, 1000])
def test_without_next_observations_last_rows_are_nan_and_flagged(tmp_path, chunk_rows):
    path = write_d4rl(tmp_path / "x.hdf5", next_obs=False)
    chunks, notes = convert(path, chunk_rows=chunk_rows)
    truth = expected_rows(EPISODES, next_obs=False)
    check_rows(chunks, truth, chunk_rows)
    assert notes["next_observation_unknown_rows"] == len(EPISODES) == sum(r[3] is None for r in truth)
    assert "next_observation_mismatch_rows" not in notes
    td = torch.cat(chunks)
    # no next observation is another episode's first observation
    same_ep_next = td["next", "observation"][:-1] == td["observation"][1:]
    crosses = td["episode"][:-1] != td["episode"][1:]
    assert not same_ep_next.all(-1)[crosses].any()


def test_without_timeouts_episodes_end_at_terminals_only(tmp_path):
    path = write_d4rl(tmp_path / "x.hdf5", timeouts=False, next_obs=False)
    chunks, notes = convert(path, chunk_rows=5)
    truth = expected_rows(EPISODES, timeouts=False, next_obs=False)
    check_rows(chunks, truth, 5)
    assert notes["timeouts"].startswith("absent")
    assert notes["episodes"] == 4  # terminals at rows 4, 19 (both), 20; then rows 21..33 to the end
    assert notes["final_episode_truncated_by_end_of_file"] == {"rows": 13}


@pytest.mark.parametrize("chunk_rows", [2, 3, 50])
def test_max_episode_steps_cuts_files_without_timeouts(tmp_path, chunk_rows):
    episodes = [(3, "terminal"), (12, "none"), (3, "terminal"), (9, "none"), (2, "none")]
    path = write_d4rl(tmp_path / "x.hdf5", episodes, timeouts=False)
    chunks, notes = convert(path, chunk_rows=chunk_rows, max_episode_steps=4)
    truth = expected_rows(episodes, timeouts=False, max_steps=4)
    # rows 3..17 run 15 steps to a terminal at row 17: cut after 4, 4 and 4 steps, then the terminal
    assert [r[0] for r in truth][3:18] == [1] * 4 + [2] * 4 + [3] * 4 + [4] * 3
    assert [r[2] for r in truth][3:18] == ([False] * 3 + [True]) * 3 + [False] * 3
    check_rows(chunks, truth, chunk_rows)
    assert notes["episode_ends"]["max_episode_steps"] == sum(r[2] for r in truth) - 1
    assert "max_episode_steps=4" in notes["timeouts"]


def test_max_episode_steps_ignored_when_file_has_timeouts(tmp_path):
    path = write_d4rl(tmp_path / "x.hdf5")
    chunks, notes = convert(path, max_episode_steps=2)
    check_rows(chunks, expected_rows(EPISODES), 7)
    assert notes["max_episode_steps"].startswith("ignored")


def test_dtypes_infos_and_metadata(tmp_path):
    path = write_d4rl(tmp_path / "x.hdf5", float_flags=True)
    chunks, notes = convert(path, chunk_rows=10)
    td = torch.cat(chunks)
    n = td.batch_size[0]
    assert td["observation"].dtype == torch.float32 and td["next", "observation"].dtype == torch.float32
    assert td["next", "reward"].shape == (n, 1) and td["next", "reward"].dtype == torch.float32
    assert td["next", "terminated"].dtype == torch.bool and td["next", "truncated"].dtype == torch.bool
    assert td["episode"].dtype == torch.int64
    assert td["info", "qpos"].dtype == torch.float64  # upstream dtype kept
    np.testing.assert_array_equal(td["info", "qpos"].numpy(), 100.0 * np.arange(n)[:, None] + np.arange(QPOS_DIM))
    np.testing.assert_array_equal(td["info", "goal", "xy"][:, 1].numpy(), -np.arange(n))
    np.testing.assert_array_equal(td["info", "extra_per_step"].numpy(), np.arange(n) % 7)
    assert td["info", "next_observation_unknown"].dtype == torch.bool
    meta = notes["metadata"]
    assert meta["algorithm"] == "SAC" and meta["seed"] == 7
    assert meta["policy/fc0/weight"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert meta["big"].startswith("<array shape=[10000]")
    assert "infos/scalar" in notes["skipped_keys"]
    json.dumps(notes, allow_nan=False)  # the card must be JSON


def test_mismatching_next_observations_are_counted(tmp_path):
    path = write_d4rl(tmp_path / "x.hdf5")
    with h5py.File(path, "r+") as f:
        f["next_observations"][2] = -1.0  # a hidden reset inside episode 0
    chunks, notes = convert(path)
    assert notes["next_observation_mismatch_rows"] == 1
    assert torch.cat(chunks)["next", "observation"][2].eq(-1).all()  # the file's value is kept


def test_single_row_file_and_all_terminal_rows(tmp_path):
    chunks, _notes = convert(write_d4rl(tmp_path / "a.hdf5", [(1, "none")], next_obs=False))
    td = torch.cat(chunks)
    assert td.batch_size == (1,) and td["next", "truncated"].item() and td["info", "next_observation_unknown"].item()
    eps = [(1, "terminal")] * 6
    chunks, _notes = convert(write_d4rl(tmp_path / "b.hdf5", eps), chunk_rows=4)
    check_rows(chunks, expected_rows(eps), 4)
    assert [c.batch_size[0] for c in chunks] == [4, 2]


def test_params_are_checked():
    loader = D4RLLoader()
    with pytest.raises(InvalidParameter, match="max_episode_steps"):
        loader.check_params(DatasetSpec("d4rl/x", "d4rl", params={"max_episode_step": 3}))
    with pytest.raises(InvalidParameter, match="positive int"):
        loader.check_params(DatasetSpec("d4rl/x", "d4rl", params={"max_episode_steps": 0}))
    with pytest.raises(InvalidParameter, match="url"):
        loader.check_params(DatasetSpec("d4rl/x", "d4rl", params={"url": []}))
    with pytest.raises(InvalidParameter, match="no resource"):
        loader.resources(DatasetSpec("d4rl/x", "d4rl"))


def test_resources_default_and_url_override():
    res = Resource(name="h.hdf5", urls=("http://127.0.0.1:9/h.hdf5",))
    loader = D4RLLoader()
    assert loader.resources(DatasetSpec("d4rl/x", "d4rl", resources=[res])) == [res]
    got = loader.resources(
        DatasetSpec(
            "d4rl/x",
            "d4rl",
            params={"url": ["http://127.0.0.1:9/a/m.hdf5", "http://127.0.0.1:9/b/m.hdf5"]},
            resources=[res],
        )
    )
    assert got == [Resource(name="m.hdf5", urls=("http://127.0.0.1:9/a/m.hdf5", "http://127.0.0.1:9/b/m.hdf5"))]


def test_bad_files_raise_loader_error(tmp_path):
    junk = tmp_path / "junk.hdf5"
    junk.write_bytes(b"not hdf5 at all")
    with pytest.raises(LoaderError, match="not a readable HDF5"):
        convert(junk)
    other = tmp_path / "other.hdf5"
    with h5py.File(other, "w") as f:
        f["observations"] = np.zeros((3, 2), np.float32)
    with pytest.raises(LoaderError, match="'actions'"):
        convert(other)
    short = write_d4rl(tmp_path / "short.hdf5")
    with h5py.File(short, "r+") as f:
        del f["actions"]
        f["actions"] = np.zeros((3, ACT_DIM), np.float32)
    with pytest.raises(LoaderError, match="rows"):
        convert(short)


def test_loader_declares_contract():
    assert D4RLLoader.name == "d4rl" and D4RLLoader.requires == ("h5py",)
    assert D4RLLoader.install_hint == "pip install h5py" and D4RLLoader.format_version == 1
    assert math.isfinite(D4RLLoader.format_version)


# -- the catalogue -----------------------------------------------------------------------------
def _d4rl_entries():
    import yaml

    with open(Path(__file__).resolve().parents[1] / "registry.yaml") as fh:
        data = yaml.safe_load(fh)
    return list(data), {k: v for k, v in data.items() if k.startswith("d4rl/")}


def test_catalogue_lists_every_gym_mujoco_and_adroit_dataset():
    _, entries = _d4rl_entries()
    for env in ("halfcheetah", "hopper", "walker2d", "ant"):
        for kind in ("random", "medium", "expert", "medium-replay", "medium-expert"):
            for version in ("v0", "v1", "v2"):
                assert f"d4rl/{env}-{kind}-{version}" in entries
        for version in ("v1", "v2"):
            assert f"d4rl/{env}-full-replay-{version}" in entries
    for env in ("pen", "hammer", "door", "relocate"):
        for kind in ("human", "cloned", "expert"):
            for version in ("v0", "v1"):
                assert f"d4rl/{env}-{kind}-{version}" in entries
    for prefix in (
        "antmaze-umaze-v2",
        "antmaze-large-diverse-v0",
        "maze2d-umaze-v1",
        "kitchen-mixed-v0",
        "flow-ring-random-v0",
        "carla-lane-v0",
    ):
        assert f"d4rl/{prefix}" in entries
    assert entries["d4rl/hopper-medium-v2"]["resources"] == [
        {
            "url": "http://rail.eecs.berkeley.edu/datasets/offline_rl/gym_mujoco_v2/hopper_medium-v2.hdf5",
            "size": 152756557,  # TensorFlow Datasets' checksums.tsv for this URL
        }
    ]
    sized = [e for e in entries.values() if "size" in e["resources"][0]]
    assert len(sized) == 97 and all(
        isinstance(e["resources"][0]["size"], int) and e["resources"][0]["size"] > 1_000_000 for e in sized
    )
    assert entries["d4rl/walker2d-medium-replay-v0"]["resources"][0]["url"].endswith("gym_mujoco/walker_mixed.hdf5")


def test_catalogue_entries_are_well_formed_and_sorted():
    keys, entries = _d4rl_entries()
    assert keys == sorted(keys)
    assert len(entries) > 150
    for dataset_id, entry in entries.items():
        assert entry["loader"] == "d4rl"
        assert entry["license"] and entry["citation"] and entry["description"]
        (resource,) = entry["resources"]
        url = resource["url"]
        assert url.startswith("http://rail.eecs.berkeley.edu/datasets/offline_rl/") and url.endswith(".hdf5")
        assert ("ref_min_score" in entry) == ("ref_max_score" in entry), dataset_id
        if "ref_min_score" in entry:
            assert entry["ref_min_score"] < entry["ref_max_score"], dataset_id
    urls = [e["resources"][0]["url"] for e in entries.values()]
    assert len(set(urls)) == len(urls)  # no two ids share a file


def test_catalogue_resolves_to_specs():
    from datasets_hub.catalogue import resolve

    spec = resolve("d4rl/hopper-medium-v2")
    assert spec.loader == "d4rl" and spec.metadata["ref_max_score"] == 3234.3
    assert D4RLLoader().resources(spec)[0].name == "hopper_medium-v2.hdf5"


# -- through the hub: served from 127.0.0.1, downloaded, built, loaded -------------------------
def test_check_loader_contract(tmp_path):
    from datasets_hub.testing import check_loader

    path = write_d4rl(tmp_path / "x.hdf5", next_obs=False)
    spec = DatasetSpec(
        id="d4rl/test-v0", loader="d4rl", resources=[Resource(name="x.hdf5", urls=("file://" + str(path),))]
    )
    summary = check_loader(D4RLLoader, spec, {"x.hdf5": path})
    assert summary


@pytest.mark.parametrize("next_obs", [True, False])
def test_load_from_local_mirror_row_by_row(tmp_path, monkeypatch, request, next_obs):
    import datasets_hub

    from fixtures.http_server import serve_files

    path = write_d4rl(tmp_path / "x.hdf5", next_obs=next_obs)
    upstream = "datasets/offline_rl/gym_mujoco_v2/hopper_medium-v2.hdf5"  # the catalogue's path
    # the fixture is not the real file, whose exact size the catalogue holds: the same URL under another id
    dataset_id = "d4rl/mirror-hopper-medium-v2"
    datasets_hub.register_dataset(
        dataset_id,
        resources=[{"url": "http://rail.eecs.berkeley.edu/" + upstream}],
        ref_min_score=-20.272305,
        ref_max_score=3234.3,
    )
    request.addfinalizer(lambda: catalogue.unregister_dataset(dataset_id))
    with serve_files({upstream: path.read_bytes()}) as server:
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_D4RL", server.base_url)
        rb = datasets_hub.load(dataset_id, batch_size=8)
        assert server.count(upstream) == 1
        rb2 = datasets_hub.load(dataset_id)  # cached: no second request
        assert server.count(upstream) == 1 and len(rb2) == len(rb)
    data = rb[:]
    check_rows([data], expected_rows(EPISODES, next_obs=next_obs), len(rb))
    np.testing.assert_array_equal(
        data["info", "qpos"].numpy(), 100.0 * np.arange(len(rb))[:, None] + np.arange(QPOS_DIM)
    )
    # samples are rows of the file: the observation tells which row, every other key must agree
    torch.manual_seed(0)
    batch = rb.sample()
    row = batch["observation"][:, 0].round().long()
    assert torch.equal(batch["episode"], data["episode"][row])
    assert torch.equal(batch["next", "reward"], data["next", "reward"][row])
    card = datasets_hub.info(dataset_id)
    assert card.cached and card.metadata["ref_max_score"] == 3234.3
    notes = card.notes
    assert notes["episodes"] == len(EPISODES)
    assert notes["next_observation_unknown_rows"] == (0 if next_obs else len(EPISODES))
    assert notes["metadata"]["algorithm"] == "SAC"


def test_big_endian_and_float64_sources_convert_to_native(tmp_path):
    path = write_d4rl(tmp_path / "x.hdf5", infos=False, metadata=False)
    with h5py.File(path, "r+") as f:
        obs = f["observations"][()]
        del f["observations"]
        f.create_dataset("observations", data=obs.astype(">f4"))
        rewards = f["rewards"][()]
        del f["rewards"]
        f["rewards"] = rewards.astype(np.float64)  # kept as float64, as upstream stores it
    chunks, _ = convert(path, chunk_rows=5)
    td = torch.cat(chunks)
    assert td["observation"].dtype == torch.float32 and td["next", "reward"].dtype == torch.float64
    check_rows([td.apply(lambda x: x.float() if x.dtype == torch.float64 else x)], expected_rows(EPISODES), len(td))


def test_the_loader_tells_the_build_how_many_rows_it_will_read(tmp_path):
    path = write_d4rl(tmp_path / "x.hdf5")
    expected, read = [], []
    spec = DatasetSpec(
        id="d4rl/test-v0", loader="d4rl", resources=[Resource(name=path.name, urls=("file://" + str(path),))]
    )
    ctx = LoaderContext(chunk_rows=7, progress=read.append, expect=expected.append)
    chunks = list(D4RLLoader().episodes(spec, {path.name: path}, ctx))
    with h5py.File(path, "r") as f:
        rows = int(f["rewards"].shape[0])
    assert expected == [rows] and sum(read) == rows  # the total comes first, then every row once
    assert sum(int(c.batch_size[0]) for c in chunks) <= rows


@pytest.mark.parametrize(
    "name, task",
    [("hopper-medium-v2", "gym MuJoCo Hopper"), ("antmaze-large-diverse-v2", None), ("bullet-hopper-medium-v0", None)],
)
def test_the_card_records_d4rls_environment_id(tmp_path, name, task):
    from datasets_hub.dataset_info import DatasetInfo

    path = write_d4rl(tmp_path / "x.hdf5")
    spec = DatasetSpec(id=f"d4rl/{name}", loader="d4rl", resources=[Resource(name=path.name, urls=("file:///x",))])
    ctx = LoaderContext(chunk_rows=16)
    list(D4RLLoader().episodes(spec, {path.name: path}, ctx))
    environment = ctx.notes["environment"]
    assert (environment["env_id"], environment["registry"], environment["registered_by"]) == (name, "gym", "d4rl")
    assert environment.get("task") == task
    card = DatasetInfo(spec.id, "d4rl", {}, [], {}, "test", True, manifest={"notes": ctx.notes})
    assert card.environment == environment and card.spaces == {}
    with pytest.raises(InvalidParameter, match=rf"gymnasium cannot make.*import d4rl; gym.make\('{name}'\)"):
        card.recover_environment()


def test_no_environment_is_guessed_for_other_names_or_a_url(tmp_path):
    path = write_d4rl(tmp_path / "x.hdf5")
    _chunks, notes = convert(path)  # d4rl/test-v0: not a D4RL environment id
    assert "environment" not in notes
    spec = DatasetSpec(id="d4rl/hopper-medium-v2", loader="d4rl", params={"url": "file:///elsewhere/mine.hdf5"})
    ctx = LoaderContext(chunk_rows=16)
    list(D4RLLoader().episodes(spec, {path.name: path}, ctx))
    assert "environment" not in ctx.notes  # the user's own file: its environment is not the id's
