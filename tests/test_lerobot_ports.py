"""LeRobot ports of LIBERO, DROID and RoboCasa365 through the ``lerobot`` loader.

Each fixture (tests/fixtures/lerobot_ports.py) is a tiny LeRobot v3.0 dataset with the port's real
feature names, dtypes, shapes, fps, robot type and camera keys (images in the parquet files for
LIBERO, AV1 videos for DROID and RoboCasa365). It is loaded by its catalogue id, read in place with
``root=``; every feature of every row must hold the value the writer put there. LeRobot 0.4.4's own
reader on the same files is tests/test_lerobot_ports_upstream.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import datasets_hub
from datasets_hub.catalogue import resolve
from datasets_hub.loaders.lerobot.loader import decode_text

from fixtures import lerobot_writer as lw
from fixtures.lerobot_ports import DROID, DROID_COLUMNS, DROID_INSTRUCTIONS, LIBERO, PORTS, ROBOCASA, ROBOCASA_COLUMNS


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = {}
    for repo, spec in PORTS.items():
        root = tmp_path_factory.mktemp(repo.replace("/", "_"))
        out[repo] = (root, lw.write_dataset(root, spec))
    return out


def _load(written, repo, **params):
    root, summary = written[repo]
    rb = datasets_hub.load(f"lerobot/{repo}", root=str(root), num_workers=1, **params)
    notes = datasets_hub.info(f"lerobot/{repo}", root=str(root), num_workers=1, **params).notes
    return rb[:], notes, summary


def _rows(spec):
    starts = np.concatenate([[0], np.cumsum(spec.lengths)[:-1]]).astype(int)
    return [(e, t, int(starts[e]) + t) for e in range(len(spec.lengths)) for t in range(spec.lengths[e])]


def _check_common(td, spec, notes, cameras_source):
    rows = _rows(spec)
    assert td.batch_size[0] == len(rows)
    for r, (e, t, i) in enumerate(rows):
        state = lw.state_of(e, t, spec.state_dim, spec.state_dtype)
        assert np.array_equal(td["observation", "state"][r].numpy(), state), r
        assert np.array_equal(td["action"][r].numpy(), -state[: spec.action_dim]), r
        assert td["episode"][r].item() == e and td["info", "frame_index"][r].item() == t
        assert td["info", "index"][r].item() == i
        assert decode_text(td["task"][r : r + 1]) == [spec.tasks[e]]
        for c, cam in enumerate(spec.cameras):
            frame = td[("observation", "images", cam.rsplit(".", 1)[1])][r].numpy()
            assert frame.shape == (spec.height, spec.width, 3)
            assert lw.read_index(frame) == (i, c), (r, cam)
        last = t == spec.lengths[e] - 1
        assert td["next", "truncated"][r].item() == (last and not td["next", "terminated"][r].item())
    assert td["observation", "state"].dtype == getattr(torch, spec.state_dtype)
    assert notes["fps"] == spec.fps and notes["robot_type"] == spec.robot_type
    assert {k: v["source"] for k, v in notes["cameras"].items()} == dict.fromkeys(spec.cameras, cameras_source)


def test_catalogue_lists_the_ports():
    for repo in PORTS:
        spec = resolve(f"lerobot/{repo}")
        assert spec.loader == "lerobot"
        assert f"lerobot/{repo}" in datasets_hub.list_datasets(loader="lerobot")


def test_libero_images_in_parquet(written):
    td, notes, _ = _load(written, "HuggingFaceVLA/libero")
    _check_common(td, LIBERO, notes, "image")
    assert td["observation", "state"].shape[1:] == (8,) and td["action"].shape[1:] == (7,)
    assert notes["tasks"] == {"0": LIBERO.tasks[0], "1": LIBERO.tasks[1]}
    # no reward recorded: zeros and a card note; every demo ends truncated
    assert not td["next", "reward"].any() and "reward" in notes
    assert int(td["next", "truncated"].sum()) == 3 and not td["next", "terminated"].any()


def test_droid_every_feature(written):
    td, notes, _ = _load(written, "lerobot/droid_1.0.1")
    _check_common(td, DROID, notes, "video")
    rows = _rows(DROID)
    for name, (entry, value) in DROID_COLUMNS.items():
        # nested names keep their dotted tail where another feature owns the leaf
        key = {
            "observation.state.gripper_position": ("observation", "state.gripper_position"),
            "observation.state.cartesian_position": ("observation", "state.cartesian_position"),
            "observation.state.joint_position": ("observation", "state.joint_position"),
        }.get(name, ("info", name))
        got = td.get(key)
        for r, (e, t, i) in enumerate(rows):
            want = value(e, t, i)
            if entry["dtype"] == "string":
                assert decode_text(got[r : r + 1]) == [want], (name, r)
            else:
                assert np.array_equal(got[r].numpy().reshape(-1), np.asarray(want, dtype=entry["dtype"]).reshape(-1)), (
                    name,
                    r,
                )
    # the port carries RLDS's step fields: reward (after the step's action) and is_terminal stand in for
    # LeRobot's next.reward / next.done, and stay under info too
    rlds_reward = [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1]
    assert td["info", "reward"].reshape(-1).tolist() == rlds_reward
    assert td["next", "reward"].reshape(-1).tolist() == rlds_reward
    last = [t == DROID.lengths[e] - 1 for e, t, _ in rows]
    assert td["next", "terminated"].reshape(-1).tolist() == last
    assert not td["next", "truncated"].any()
    assert "RLDS" in notes["reward"] and notes["episode_end"].startswith("is_terminal")
    assert decode_text(td["info", "language_instruction_2"])[4:7] == ["", "", ""]
    assert decode_text(td["info", "language_instruction_3"])[0] == DROID_INSTRUCTIONS[0][2]
    assert notes["text_keys"]["info/language_instruction_3"] == 512
    assert td["observation", "state.joint_position"].shape[1:] == (7,)


def test_droid_text_longer_than_text_width_is_refused(written):
    from datasets_hub.errors import LoaderError

    with pytest.raises(LoaderError, match=r"language_instruction.*longer than text_width=8; load with text_width="):
        _load(written, "lerobot/droid_1.0.1", text_width=8)


def test_robocasa_float64_state_reward_and_annotations(written):
    td, notes, _ = _load(written, "ember-lab-berkeley/robocasa365-target-atomic")
    _check_common(td, ROBOCASA, notes, "video")
    assert td["observation", "state"].shape[1:] == (16,) and td["action"].shape[1:] == (12,)
    assert td["action"].dtype == torch.float64
    x = td["observation", "state"][0, 1].item()
    assert x == 0.1 and x != float(np.float32(0.1))  # float64 kept, not narrowed
    rows = _rows(ROBOCASA)
    assert td["next", "reward"].reshape(-1).tolist() == [np.float32(i / 2) for _, _, i in rows]
    ends = [t == ROBOCASA.lengths[e] - 1 for e, t, _ in rows]
    assert td["next", "terminated"].reshape(-1).tolist() == ends  # next.done on each last row
    for name, (_, value) in ROBOCASA_COLUMNS.items():
        assert td["info", name].reshape(-1).tolist() == [value(e, t, i) for e, t, i in rows]


def test_a_string_feature_holding_numbers_is_refused(tmp_path):
    import dataclasses
    import json

    from datasets_hub.errors import LoaderError

    columns = dict(DROID.columns)
    columns["language_instruction_2"] = (
        columns["language_instruction_2"][0] | {"dtype": "float32"},
        lambda e, t, i: 1.0,
    )
    root = tmp_path / "droid"
    lw.write_dataset(root, dataclasses.replace(DROID, columns=columns))
    info = root / "meta" / "info.json"
    meta = json.loads(info.read_text())
    meta["features"]["language_instruction_2"]["dtype"] = "string"  # info.json says text, the parquet holds floats
    info.write_text(json.dumps(meta))
    with pytest.raises(
        LoaderError,
        match=r"episode 0 \(data/chunk-000/file-000\.parquet\): column 'language_instruction_2' holds float.*declares a string",
    ):
        datasets_hub.load("lerobot/lerobot/droid_1.0.1", root=str(root), num_workers=1)
