"""The robomimic loader on files in the exact robomimic / LIBERO HDF5 layout, checked row by row.

Fixtures (``tests/fixtures/robomimic.py``) give every step distinct values (``base = file * 10000 +
demo * 100 + t``), so a row from the wrong demo, the wrong step or the wrong file is visible; the
expected rows come from a plain per-row loop.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from datasets_hub import catalogue
from datasets_hub.errors import CorruptFile, InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, LoaderContext, Resource
from datasets_hub.loaders.robomimic import RobomimicLoader, decode_text, demo_order

from fixtures.docs_tables import docs_pins
from fixtures.robomimic import DEMOS, IMG, MASKS, check_rows, expected_rows, write_robomimic


def _spec(paths: list[Path], **params) -> DatasetSpec:
    resources = [Resource(p.name, ("file://" + str(p),)) for p in paths]
    return DatasetSpec("robomimic/test", "robomimic", params=params, resources=resources)


def convert(paths: Path | list[Path], chunk_rows: int = 1000, **params):
    paths = [paths] if isinstance(paths, Path) else paths
    ctx = LoaderContext(chunk_rows=chunk_rows)
    chunks = list(RobomimicLoader().episodes(_spec(paths, **params), {p.name: p for p in paths}, ctx))
    return chunks, ctx.notes


@pytest.mark.parametrize("chunk_rows", [1, 4, 1000])
def test_demos_in_number_order_row_by_row(tmp_path, chunk_rows):
    chunks, notes = convert(write_robomimic(tmp_path / "low_dim.hdf5"), chunk_rows=chunk_rows)
    check_rows(torch.cat(chunks), expected_rows())
    for chunk in chunks:  # whole demos only
        episodes = chunk["episode"].unique().tolist()
        assert sum(DEMOS[sorted(DEMOS)[e]][0] for e in episodes) == chunk.batch_size[0]
    assert notes["episode_map"] == {"low_dim.hdf5": {"demo_0": 0, "demo_1": 1, "demo_2": 2, "demo_9": 3, "demo_10": 4}}
    assert notes["episode_ends"] == {"terminated": 4, "truncated": 1}
    assert notes["dones_inside_demos"] == 2  # demo_2 row 3, demo_9 row 0: success states inside a demo
    assert notes["next_observation_unknown_rows"] == 0
    assert notes["filter_keys"] == {"low_dim.hdf5": {"train": 3, "valid": 2}}
    attrs = notes["file_attributes"]["low_dim.hdf5"]
    assert attrs["env_args"]["env_name"] == "Lift" and attrs["total"] == sum(r for r, _ in DEMOS.values())
    environment = notes["environment"]  # robomimic's env metadata: what create_env_from_metadata makes
    assert (environment["env_id"], environment["registry"]) == ("Lift", "robosuite")
    assert environment["env_meta"] == {"env_name": "Lift", "type": 1, "env_kwargs": {"control_freq": 20}}
    assert "extra_not_per_step" in notes["skipped_keys"]
    json.dumps(notes, allow_nan=False)  # the card must be JSON


def test_demo_order_is_numeric_and_refuses_other_names():
    assert demo_order(["demo_10", "demo_2", "demo_1", "demo_0"], "x") == ["demo_0", "demo_1", "demo_2", "demo_10"]
    with pytest.raises(LoaderError, match="not named demo_<N>"):
        demo_order(["demo_1", "traj_2"], "x")
    with pytest.raises(LoaderError, match="same number"):
        demo_order(["demo_1", "demo_01"], "x")


@pytest.mark.parametrize("split", ["train", "valid"])
def test_split_keeps_the_filter_keys_demos_in_number_order(tmp_path, split):
    chunks, notes = convert(write_robomimic(tmp_path / "x.hdf5"), chunk_rows=3, split=split)
    check_rows(torch.cat(chunks), expected_rows(select=MASKS[split]))
    assert notes["split"] == split
    assert list(notes["episode_map"]["x.hdf5"]) == [f"demo_{d}" for d in sorted(MASKS[split])]


def test_unknown_split_names_the_available_filter_keys(tmp_path):
    path = write_robomimic(tmp_path / "x.hdf5")
    with pytest.raises(InvalidParameter, match=r"no filter key 'trian'.*train, valid.*Did you mean 'train'"):
        convert(path, split="trian")
    bare = write_robomimic(tmp_path / "bare.hdf5", masks=None)
    with pytest.raises(InvalidParameter, match="no mask/ group"):
        convert(bare, split="train")


def test_a_mask_naming_a_missing_demo_is_refused(tmp_path):
    path = write_robomimic(tmp_path / "x.hdf5", masks={"train": [0, 7]})
    with pytest.raises(LoaderError, match=r"mask/train lists 'demo_7'"):
        convert(path, split="train")


def test_without_next_obs_the_last_row_is_never_fabricated(tmp_path):
    chunks, notes = convert(write_robomimic(tmp_path / "x.hdf5", next_obs=False), chunk_rows=2)
    td = torch.cat(chunks)
    check_rows(td, expected_rows(next_obs=False))
    assert notes["next_observation_unknown_rows"] == len(DEMOS)
    assert td["observation", "agentview_image"].dtype == torch.uint8
    assert tuple(td["observation", "agentview_image"].shape[1:]) == IMG  # HWC as stored


def test_dtypes_are_upstream(tmp_path):
    td = torch.cat(convert(write_robomimic(tmp_path / "x.hdf5"))[0])
    assert td["observation", "object"].dtype == torch.float64 and td["action"].dtype == torch.float64
    assert td["next", "reward"].shape == (td.batch_size[0], 1) and td["next", "reward"].dtype == torch.float64
    assert td["info", "dones"].dtype == torch.int64 and td["info", "datagen_info", "eef_pose"].dtype == torch.float32
    assert td["next", "terminated"].dtype == torch.bool and td["next", "truncated"].shape == (td.batch_size[0], 1)


def test_obs_keys_selects_observations(tmp_path):
    td = torch.cat(convert(write_robomimic(tmp_path / "x.hdf5"), obs_keys=["object"])[0])
    assert set(td["observation"].keys()) == {"object"} and set(td["next", "observation"].keys()) == {"object"}
    with pytest.raises(InvalidParameter, match=r"'objekt', which is not under obs/.*Did you mean 'object'"):
        convert(write_robomimic(tmp_path / "y.hdf5"), obs_keys=["objekt"])


def test_libero_language_and_several_files_in_resource_order(tmp_path):
    libero = {"next_obs": False, "masks": None}  # LIBERO's files: no next_obs, no filter keys
    a = write_robomimic(
        tmp_path / "b_task_demo.hdf5", {0: (3, (2,)), 1: (2, (1,))}, f=1, language="open the top drawer", **libero
    )
    b = write_robomimic(tmp_path / "a_task_demo.hdf5", {0: (2, (1,))}, f=2, language="turn on the stove", **libero)
    chunks, notes = convert([a, b], chunk_rows=2)  # resource order a (b_task...), then b: not name order
    td = torch.cat(chunks)
    truth = expected_rows({0: (3, (2,)), 1: (2, (1,))}, f=1, next_obs=False) + expected_rows(
        {0: (2, (1,))}, f=2, next_obs=False, first_episode=2
    )
    check_rows(td, truth)
    assert decode_text(td["task"]) == ["open the top drawer"] * 5 + ["turn on the stove"] * 2
    assert notes["tasks"] == ["open the top drawer", "turn on the stove"]
    assert notes["episode_map"] == {"b_task_demo.hdf5": {"demo_0": 0, "demo_1": 1}, "a_task_demo.hdf5": {"demo_0": 2}}
    assert notes["file_attributes"]["b_task_demo.hdf5"]["problem_info"]["language_instruction"] == "open the top drawer"


def test_per_demo_language_from_ep_meta(tmp_path):
    path = write_robomimic(tmp_path / "x.hdf5", {0: (2, (1,)), 1: (1, (0,))}, ep_meta={0: "pick the cup", 1: "é"})
    td = torch.cat(convert(path)[0])
    assert decode_text(td["task"]) == ["pick the cup", "pick the cup", "é"]


def test_files_without_language_have_no_task_key(tmp_path):
    td = torch.cat(convert(write_robomimic(tmp_path / "x.hdf5"))[0])
    assert "task" not in td.keys()


def test_missing_rewards_and_dones_read_as_robomimic_reads_them(tmp_path):
    path = write_robomimic(tmp_path / "x.hdf5", {0: (3, (2,))})
    with h5py.File(path, "r+") as f:
        del f["data/demo_0/rewards"], f["data/demo_0/dones"]
    chunks, notes = convert(path)
    td = torch.cat(chunks)
    assert td["next", "reward"].eq(0).all() and td["info", "dones"].eq(0).all()
    assert td["next", "truncated"][-1].item() and not td["next", "terminated"].any()
    assert "rewards_absent" in notes and "dones_absent" in notes


def test_bad_files_are_clear_errors_naming_the_file(tmp_path):
    junk = tmp_path / "junk.hdf5"
    junk.write_bytes(b"not hdf5 at all")
    with pytest.raises(CorruptFile, match=r"junk\.hdf5.*not a readable HDF5"):
        convert(junk)
    good = write_robomimic(tmp_path / "cut.hdf5")
    cut = tmp_path / "truncated.hdf5"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CorruptFile, match=r"truncated\.hdf5") as info:
        convert(cut)
    assert Path(info.value.path) == cut
    raw = tmp_path / "raw.hdf5"
    write_robomimic(raw)
    with h5py.File(raw, "r+") as f:
        del f["data/demo_1/obs"]
    with pytest.raises(LoaderError, match=r"raw.hdf5: data/demo_1 has no 'obs' group.*dataset_states_to_obs"):
        convert(raw)
    short = write_robomimic(tmp_path / "short.hdf5")
    with h5py.File(short, "r+") as f:
        del f["data/demo_2/obs/object"]
        f["data/demo_2/obs/object"] = np.zeros((2, 3))
    with pytest.raises(LoaderError, match=r"short.hdf5: data/demo_2: obs/object has shape \(2, 3\), not 5 rows"):
        convert(short)
    other = tmp_path / "other.hdf5"
    with h5py.File(other, "w") as f:
        f["observations"] = np.zeros(3)
    with pytest.raises(LoaderError, match="no 'data' group"):
        convert(other)


def test_demos_with_different_keys_are_refused(tmp_path):
    path = write_robomimic(tmp_path / "x.hdf5")
    with h5py.File(path, "r+") as f:
        del f["data/demo_9/obs/agentview_image"], f["data/demo_9/next_obs/agentview_image"]
    with pytest.raises(LoaderError, match=r"data/demo_9: '(next/)?observation/agentview_image' is absent.*obs_keys"):
        convert(path)
    td = torch.cat(convert(path, obs_keys=["object"])[0])  # the fix the message names works
    assert td.batch_size[0] == sum(r for r, _ in DEMOS.values())


def test_params_are_checked():
    loader = RobomimicLoader()
    with pytest.raises(InvalidParameter, match="split"):
        loader.check_params(DatasetSpec("robomimic/x", "robomimic", params={"spilt": "train"}))
    with pytest.raises(InvalidParameter, match="filter key"):
        loader.check_params(DatasetSpec("robomimic/x", "robomimic", params={"split": ""}))
    with pytest.raises(InvalidParameter, match="obs_keys"):
        loader.check_params(DatasetSpec("robomimic/x", "robomimic", params={"obs_keys": "object"}))
    with pytest.raises(InvalidParameter, match="no resource"):
        loader.resources(DatasetSpec("robomimic/x", "robomimic"))
    got = loader.resources(DatasetSpec("robomimic/x", "robomimic", params={"url": "http://127.0.0.1:9/a/m.hdf5"}))
    assert got == [Resource(name="m.hdf5", urls=("http://127.0.0.1:9/a/m.hdf5",))]


def test_check_loader_contract(tmp_path):
    from datasets_hub.testing import check_loader

    path = write_robomimic(tmp_path / "x.hdf5", language="stack the blocks")
    summary = check_loader(RobomimicLoader, _spec([path]), {path.name: path})
    assert summary["counts"]["episodes"] == len(DEMOS)


def test_load_end_to_end_and_a_truncated_file_builds_nothing(tmp_path, request):
    import datasets_hub

    path = write_robomimic(tmp_path / "low_dim.hdf5")
    dataset_id = "robomimic/test/local"
    datasets_hub.register_dataset(dataset_id, loader="robomimic", resources=[{"url": "file://" + str(path)}])
    request.addfinalizer(lambda: catalogue.unregister_dataset(dataset_id))
    rb = datasets_hub.load(dataset_id, split="train", batch_size=4)
    check_rows(rb[:], expected_rows(select=MASKS["train"]))
    assert rb.sample()["observation", "agentview_image"].dtype == torch.uint8

    cut = tmp_path / "cut.hdf5"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    bad_id = "robomimic/test/truncated"
    datasets_hub.register_dataset(bad_id, loader="robomimic", resources=[{"url": "file://" + str(cut)}])
    request.addfinalizer(lambda: catalogue.unregister_dataset(bad_id))
    with pytest.raises(CorruptFile, match=r"cut\.hdf5"):
        datasets_hub.load(bad_id)
    builds = Path(datasets_hub.env.cache_root()) / "datasets" / "robomimic" / "test" / "truncated"
    assert not list(builds.rglob("manifest.json"))  # nothing half-built is ever served


# -- the catalogue -----------------------------------------------------------------------------------
def _entries() -> dict:
    import yaml

    with open(Path(__file__).resolve().parents[1] / "registry.yaml") as fh:
        data = yaml.safe_load(fh)
    return {k: v for k, v in data.items() if k.startswith("robomimic/")}


def test_catalogue_entries_name_real_files():
    entries = _entries()
    assert entries["robomimic/v1.5/lift/ph/low_dim"]["resources"][0]["url"] == (
        "hf://datasets/robomimic/robomimic_datasets/v1.5/lift/ph/low_dim_v15.hdf5"
        "@74fa018461f479cd9fd15b924a16103012096203"  # the revision its pinned size and sha256 are from
    )
    assert entries["robomimic/v1.5/lift/mh/low_dim"]["resources"][0]["url"] == (
        "hf://datasets/robomimic/robomimic_datasets/v1.5/lift/mh/low_dim_v15.hdf5"
    )
    assert entries["robomimic/mimicgen/core/coffee_d0"]["resources"][0]["url"] == (
        "hf://datasets/amandlek/mimicgen_datasets/core/coffee_d0.hdf5"
    )
    goal = entries["robomimic/libero/libero_goal"]["resources"]
    assert len(goal) == 10 and goal[0]["url"].startswith("hf://datasets/yifengzhu-hf/LIBERO-datasets/libero_goal/")
    assert len(entries["robomimic/libero/libero_90"]["resources"]) == 90
    names = [r.get("name") for e in entries.values() for r in e["resources"]]
    assert len(set(names)) == len(names)  # no two files share a raw-cache name
    for entry in entries.values():
        assert entry["loader"] == "robomimic" and entry["license"] and entry["citation"] and entry["description"]


# the Hub revision each repo's pins were recorded at (docs/datasets/robomimic.md, "Sizes and checksums")
PIN_REVISIONS = {
    "robomimic/robomimic_datasets": "74fa018461f479cd9fd15b924a16103012096203",
    "amandlek/mimicgen_datasets": "9bcacb0446b0f895dd352164bd39938710df4a1e",
    "yifengzhu-hf/LIBERO-datasets": "f13aa24a3da8c43c7225569f28c562979fa0e35a",
}


def test_pinned_sizes_and_sha256_are_the_docs_table_at_the_revision_it_names():
    """Every resource with a size or sha256 is a row of the docs table with exactly those figures, at the Hub
    revision the docs name for its repo; every row is such a resource (a figure changed in one place only fails)."""
    pinned = {}
    for entry in _entries().values():
        for resource in entry["resources"]:
            if "size" in resource or "sha256" in resource:
                repo = "/".join(resource["url"].split("/")[3:5])
                assert resource["url"].endswith("@" + PIN_REVISIONS[repo]), resource["url"]
                pinned[resource["name"]] = (resource.get("size"), resource.get("sha256"))
    table = docs_pins("robomimic.md", r"[\w./-]+\.hdf5", "not found")
    assert pinned == table and len(table) == 24


def test_catalogue_resolves_to_specs():
    for dataset_id in ("robomimic/v1.5/can/mh/low_dim", "robomimic/libero/libero_10"):
        spec = catalogue.resolve(dataset_id)
        assert spec.loader == "robomimic" and RobomimicLoader().resources(spec)


def test_a_libero_style_suite_of_several_files_loads_in_resource_order(tmp_path, request):
    import datasets_hub

    libero = {"next_obs": False, "masks": None}
    second = write_robomimic(tmp_path / "z_task_demo.hdf5", {0: (3, (2,))}, f=1, language="first task", **libero)
    first = write_robomimic(tmp_path / "a_task_demo.hdf5", {0: (2, (1,))}, f=2, language="second task", **libero)
    dataset_id = "robomimic/test/suite"
    resources = [{"url": "file://" + str(second)}, {"url": "file://" + str(first)}]  # the suite's order, not names'
    datasets_hub.register_dataset(dataset_id, loader="robomimic", resources=resources)
    request.addfinalizer(lambda: catalogue.unregister_dataset(dataset_id))
    data = datasets_hub.load(dataset_id, batch_size=2)[:]
    truth = expected_rows({0: (3, (2,))}, f=1, next_obs=False) + expected_rows(
        {0: (2, (1,))}, f=2, next_obs=False, first_episode=1
    )
    check_rows(data, truth)
    assert decode_text(data["task"]) == ["first task"] * 3 + ["second task"] * 2


def test_the_environment_is_recorded_only_when_every_file_agrees(tmp_path):
    from datasets_hub.dataset_info import DatasetInfo
    from datasets_hub.loaders.robomimic.loader import environment_card

    lift = {"env_args": {"env_name": "Lift", "type": 1, "env_kwargs": {}}}
    can = {"env_args": {"env_name": "PickPlaceCan", "type": 1, "env_kwargs": {}}}
    assert environment_card([lift, lift])["env_id"] == "Lift"
    assert environment_card([lift, can]) == {} and environment_card([{}]) == {} and environment_card([]) == {}
    card = DatasetInfo(
        "robomimic/x", "robomimic", {}, [], {}, "t", True, manifest={"notes": {"environment": environment_card([lift])}}
    )
    with pytest.raises(InvalidParameter, match=r"gymnasium cannot make; make it with `robomimic.utils.env_utils"):
        card.recover_environment()
