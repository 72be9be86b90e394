"""The CALVIN loader on a tiny task split in the exact upstream layout (``tests/fixtures/calvin.py``).

Each frame's values encode its frame number, so a row from the wrong frame or a next observation taken
across an episode gap is visible; expected rows come from a plain per-frame loop.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from datasets_hub import catalogue
from datasets_hub.errors import CorruptFile, InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, LoaderContext, Resource
from datasets_hub.loaders.calvin import CalvinLoader, UnsafePickle, load_object_npy

from fixtures.calvin import ANNOTATIONS, EPISODES, write_folder, write_zip
from fixtures.docs_tables import docs_pins

OBS = ("depth_static", "rgb_gripper", "rgb_static", "robot_obs", "scene_obs")


def convert(path: Path, split: str = "training", **params):
    if path.suffix == ".zip":
        spec = DatasetSpec(
            "calvin/t", "calvin", params={"split": split, **params}, resources=[Resource(path.name, ("x",))]
        )
        files = {path.name: path}
    else:
        spec = DatasetSpec("calvin/t", "calvin", params={"split": split, "root": str(path), **params})
        files = {}
    ctx = LoaderContext(chunk_rows=4)
    chunks = list(CalvinLoader().episodes(spec, files, ctx))
    return chunks, ctx.notes


def check_rows(td, split: str = "training", keys=OBS, action_key: str = "rel_actions") -> None:
    from fixtures.calvin import expected_rows

    truth = expected_rows(split)
    assert td.batch_size[0] == len(truth)
    np.testing.assert_array_equal(td["episode"].numpy(), [r["episode"] for r in truth])
    np.testing.assert_array_equal(td["info", "frame"].numpy(), [r["frame"] for r in truth])
    for key in keys:
        np.testing.assert_array_equal(td["observation", key].numpy(), np.stack([r["now"][key] for r in truth]))
        np.testing.assert_array_equal(td["next", "observation", key].numpy(), np.stack([r["next"][key] for r in truth]))
    other = "actions" if action_key == "rel_actions" else "rel_actions"
    np.testing.assert_array_equal(td["action"].numpy(), np.stack([r["now"][action_key] for r in truth]))
    np.testing.assert_array_equal(td["info", other].numpy(), np.stack([r["now"][other] for r in truth]))
    last = [r["last"] for r in truth]
    np.testing.assert_array_equal(td["next", "truncated"].numpy()[:, 0], last)
    np.testing.assert_array_equal(td["info", "next_observation_unknown"].numpy(), last)
    assert not td["next", "terminated"].any() and td["next", "reward"].eq(0).all()


@pytest.mark.parametrize("form", ["zip", "folder"])
def test_frames_packed_into_episodes_row_by_row(tmp_path, form):
    path = write_zip(tmp_path / "task_D_D.zip") if form == "zip" else write_folder(tmp_path / "task_D_D")
    chunks, notes = convert(path)
    assert [c.batch_size[0] for c in chunks] == [e - s + 1 for s, e in EPISODES["training"]]  # one episode each
    td = torch.cat(chunks)
    check_rows(td)
    assert (
        td["observation", "rgb_static"].dtype == torch.uint8 and td["observation", "robot_obs"].dtype == torch.float64
    )
    assert notes["episodes"] == [{"start_frame": s, "end_frame": e} for s, e in EPISODES["training"]]


def test_annotations_attached_to_their_frame_ranges(tmp_path):
    _, notes = convert(write_zip(tmp_path / "task_D_D.zip"))
    ann = notes["language_annotations"]
    assert ann["task"] == [t for _, t, _ in ANNOTATIONS["training"]]
    assert ann["ann"] == [a for _, _, a in ANNOTATIONS["training"]]
    # (4, 6) and (5, 7) in episode 0 (frames 3..7), overlapping; (20, 22) is episode 1; (31, 33) episode 2
    assert ann["episode"] == [0, 1, 2, 0]
    assert ann["start_step"] == [1, 0, 1, 2] and ann["end_step"] == [3, 2, 3, 4]
    assert ann["start_frame"] == [4, 20, 31, 5] and ann["end_frame"] == [6, 22, 33, 7]


def test_validation_split_and_action_key(tmp_path):
    chunks, notes = convert(write_zip(tmp_path / "task_D_D.zip"), split="validation", action_key="actions")
    check_rows(torch.cat(chunks), "validation", action_key="actions")
    assert notes["language_annotations"]["episode"] == [0] and notes["action_key"] == "actions"


def test_obs_keys_selects_observations(tmp_path):
    chunks, _ = convert(write_folder(tmp_path / "t"), obs_keys=["robot_obs", "rgb_static"])
    td = torch.cat(chunks)
    assert set(td["observation"].keys()) == {"robot_obs", "rgb_static"}
    check_rows(td, keys=("robot_obs", "rgb_static"))
    with pytest.raises(InvalidParameter, match=r"'rgb_statik'.*Did you mean 'rgb_static'"):
        convert(write_folder(tmp_path / "u"), obs_keys=["rgb_statik"])


def test_a_missing_frame_names_file_and_index(tmp_path):
    root = write_folder(tmp_path / "t")
    os.remove(root / "training" / "episode_0000021.npz")
    with pytest.raises(LoaderError, match=r"training/episode_0000021\.npz is missing: frame 21 of episode 1"):
        convert(root)


def test_an_annotation_outside_its_episode_names_file_and_index(tmp_path):
    bad = [*ANNOTATIONS["training"][:2], ((6, 20), "stack_block", "stack the blocks")]
    root = write_folder(tmp_path / "t", annotations=bad)
    with pytest.raises(
        LoaderError, match=r"lang_annotations/auto_lang_ann\.npy: annotation 2 \('stack_block', frames 6\.\.20\)"
    ):
        convert(root)


def test_a_pickle_asking_for_code_is_refused_not_run(tmp_path):
    root = write_folder(tmp_path / "t")
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    buffer = io.BytesIO()
    np.save(buffer, np.array([Payload()], dtype=object), allow_pickle=True)
    (root / "training" / "lang_annotations" / "auto_lang_ann.npy").write_bytes(buffer.getvalue())
    with pytest.raises(LoaderError, match=r"auto_lang_ann\.npy is refused: the pickle asks for pathlib\.Path\.touch"):
        convert(root)
    assert not marker.exists()
    with pytest.raises(UnsafePickle):
        load_object_npy(buffer.getvalue())


def test_load_object_npy_reads_plain_arrays_and_calvin_dicts():
    buffer = io.BytesIO()
    np.save(buffer, np.arange(6, dtype=np.int32).reshape(3, 2))
    np.testing.assert_array_equal(load_object_npy(buffer.getvalue()), np.arange(6).reshape(3, 2))
    buffer = io.BytesIO()
    np.save(buffer, {"a": [(1, np.int64(2))], "emb": np.ones((1, 2), np.float32)}, allow_pickle=True)
    value = load_object_npy(buffer.getvalue())
    assert value["a"] == [(1, 2)] and value["emb"].dtype == np.float32
    with pytest.raises(ValueError, match="magic"):
        load_object_npy(b"not npy")


def test_bad_zips_and_frames_are_clear_errors(tmp_path):
    good = write_zip(tmp_path / "task_D_D.zip")
    cut = tmp_path / "cut.zip"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CorruptFile, match=r"cut\.zip"):
        convert(cut)
    root = write_folder(tmp_path / "t")
    (root / "training" / "episode_0000005.npz").write_bytes(b"garbage")
    with pytest.raises(LoaderError, match=r"episode_0000005\.npz \(frame 5\) cannot be read"):
        convert(root)
    other = write_folder(tmp_path / "o")
    np.save(other / "training" / "ep_start_end_ids.npy", np.array([[3, 7], [22, 20]]))
    with pytest.raises(LoaderError, match="episode 1 ends"):
        convert(other)


def test_params_are_checked(tmp_path):
    loader = CalvinLoader()
    with pytest.raises(InvalidParameter, match=r"split.*Did you mean 'training'"):
        loader.check_params(DatasetSpec("calvin/x", "calvin", params={"split": "train"}))
    with pytest.raises(InvalidParameter, match="action_key"):
        loader.check_params(DatasetSpec("calvin/x", "calvin", params={"split": "training", "action_key": "act"}))
    with pytest.raises(InvalidParameter, match=r"no training/ep_start_end_ids\.npy"):
        loader.check_params(DatasetSpec("calvin/x", "calvin", params={"split": "training", "root": str(tmp_path)}))
    with pytest.raises(InvalidParameter, match="no resource"):
        loader.resources(DatasetSpec("calvin/x", "calvin", params={"split": "training"}))
    root = write_folder(tmp_path / "t")
    assert loader.resources(DatasetSpec("calvin/x", "calvin", params={"split": "training", "root": str(root)})) == []


def test_check_loader_contract(tmp_path):
    from datasets_hub.testing import check_loader

    path = write_zip(tmp_path / "task_D_D.zip")
    spec = DatasetSpec("calvin/t", "calvin", params={"split": "training"}, resources=[Resource(path.name, ("x",))])
    summary = check_loader(CalvinLoader, spec, {path.name: path})
    assert summary["counts"]["episodes"] == len(EPISODES["training"])


def test_load_end_to_end_from_the_zip(tmp_path, request):
    import datasets_hub

    path = write_zip(tmp_path / "task_D_D.zip")
    dataset_id = "calvin/test/training"
    datasets_hub.register_dataset(
        dataset_id, loader="calvin", params={"split": "training"}, resources=[{"url": "file://" + str(path)}]
    )
    request.addfinalizer(lambda: catalogue.unregister_dataset(dataset_id))
    rb = datasets_hub.load(dataset_id, batch_size=4)
    check_rows(rb[:])
    assert datasets_hub.info(dataset_id).notes["language_annotations"]["episode"] == [0, 1, 2, 0]


def test_catalogue_has_the_task_splits():
    for split in ("task_ABC_D", "task_ABCD_D", "task_D_D", "debug"):
        for part in ("training", "validation"):
            spec = catalogue.resolve(f"calvin/{split}/{part}")
            assert spec.params["split"] == part
            (resource,) = CalvinLoader().resources(spec)
            assert resource.urls[0].startswith("http://calvin.cs.uni-freiburg.de/dataset/")


def test_catalogue_pins_match_the_docs_table():
    """Both ids of a split pin the same zip with the same size and sha256, and those are the docs table's
    figures (each with its public record there): a pin changed in one place and not the other fails."""
    table = docs_pins("calvin.md", r"[\w.]+\.zip", "none found")
    assert sorted(table) == ["calvin_debug_dataset.zip", "task_ABCD_D.zip", "task_ABC_D.zip", "task_D_D.zip"]
    for split in ("task_ABC_D", "task_ABCD_D", "task_D_D", "debug"):
        pins = {
            (r.name, r.size, r.sha256)
            for part in ("training", "validation")
            for r in CalvinLoader().resources(catalogue.resolve(f"calvin/{split}/{part}"))
        }
        ((name, size, sha256),) = pins
        assert table[name] == (size, sha256), name
