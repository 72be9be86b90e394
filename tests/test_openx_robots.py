"""BridgeData V2 (``openx/bridge``) and DROID (``openx/droid``) through the Open X loader.

Fixtures (tests/fixtures/openx_robots.py) are tiny releases in the exact TFDS layout with the real
feature specs: four 256x256 cameras, state, action, language instruction and 512-d embedding and the
``has_image_k``/``has_language`` metadata for BridgeData V2; three 180x320 cameras, float64 proprio,
``action`` beside ``action_dict``, three language annotations and the success-only last-step reward
for DROID. They are served over HTTP as a mirror of ``gs://gresearch/robotics`` and loaded through the
catalogue ids, so the catalogue's names, versions and shard counts are what the build asks for.
TFDS's own reading of the same files is tests/upstream/test_upstream_openx_robots.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import datasets_hub
from datasets_hub.catalogue import resolve
from datasets_hub.loader import DatasetSpec, LoaderContext
from datasets_hub.loaders.openx.loader import OpenXLoader, decode_text

from fixtures.openx_robots import (
    BRIDGE_HW,
    DROID_HW,
    bridge_release,
    check_load,
    droid_release,
    expected_columns,
    write_release,
)


def _load(release, tmp_path, monkeypatch, **params):
    from fixtures.http_server import serve_files

    files = write_release(release, tmp_path / "mirror")
    with serve_files({path: file.read_bytes() for path, file in files.items()}) as server:
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_OPENX", server.base_url)
        rb = datasets_hub.load(f"openx/{release.name}", **params)
        card = datasets_hub.info(f"openx/{release.name}", **params)
    return rb[:], card.notes


def test_catalogue_names_the_real_releases():
    for release in (bridge_release(), droid_release()):
        spec = resolve(f"openx/{release.name}")
        assert spec.loader == "openx"
        assert spec.params["version"] == release.version
        assert spec.params["num_shards"] == release.num_shards


def test_bridge_train_two_shards_value_exact(tmp_path, monkeypatch):
    release = bridge_release()
    td, notes = _load(release, tmp_path, monkeypatch, shards=[0, 1])
    check_load(td, release, "train", [0, 1], decode_text=decode_text)
    for camera in release.cameras:
        assert td["observation", camera].shape[1:] == (*BRIDGE_HW, 3)
        assert td["observation", camera].dtype == torch.uint8
    assert td["language_embedding"].shape[1:] == (512,) and td["action"].shape[1:] == (7,)
    # the missing wrist camera of episode 1 is TFDS's all-zero dummy, flagged in episode_metadata
    ep1 = td["episode"] == 1
    assert (td["observation", "image_3"][ep1] == 0).all()
    assert not td["info", "episode_metadata", "has_image_3"][ep1].any()
    assert td["info", "episode_metadata", "has_image_3"][~ep1].tolist() == [True] * 4 + [False] * 2
    assert not td["info", "episode_metadata", "has_language"][ep1].any()
    assert decode_text(td["language_instruction"][ep1]) == [""] * 3
    assert td["info", "episode_metadata", "episode_id"].dtype == torch.int32
    assert notes["episode_ends"] == {"terminal": 2, "truncated": 1}
    assert notes["text_keys"] == {"language_instruction": 512, "info/episode_metadata/file_path": 512}
    assert "skipped_keys" not in notes and "flag_anomalies" not in notes


def test_bridge_test_split(tmp_path, monkeypatch):
    release = bridge_release()
    td, notes = _load(release, tmp_path, monkeypatch, split="test", shards=[0])
    check_load(td, release, "test", [0], decode_text=decode_text)
    assert notes["records_per_shard"] == {"bridge-test.tfrecord-00000-of-00512": 1}


def test_droid_conventions_value_exact(tmp_path, monkeypatch):
    release = droid_release()
    td, notes = _load(release, tmp_path, monkeypatch, shards=[0, 1])
    check_load(td, release, "train", [0, 1], decode_text=decode_text)
    for camera in release.cameras:
        assert td["observation", camera].shape[1:] == (*DROID_HW, 3)
    # float64 as declared, holding the float32 values TFDS stored
    assert td["observation", "joint_position"].dtype == torch.float64
    assert td["action_dict", "joint_velocity"].dtype == torch.float64 and td["action"].dtype == torch.float64
    x = td["observation", "cartesian_position"][0, 1].item()
    assert x == float(np.float32(0.01)) and x != 0.01
    # every episode ends terminated (is_terminal on each last step); reward 1 only where it succeeded
    episode = td["episode"]
    last = torch.cat([episode[1:] != episode[:-1], torch.tensor([True])])
    assert torch.equal(td["next", "terminated"][:, 0], last)
    assert not td["next", "truncated"].any()
    assert td["next", "reward"][:, 0].tolist() == [0, 0, 0, 1, 0, 0, 0, 0, 1]
    assert (td["next", "discount"] == 1).all()
    # three annotations; the once-annotated episode leaves _2 and _3 empty
    assert decode_text(td["language_instruction_2"][episode == 1]) == [""] * 3
    assert decode_text(td["language_instruction_3"][episode == 0])[0] == "place the 0th marker inside the mug"
    assert notes["episode_ends"] == {"terminal": 3, "truncated": 0}
    assert set(notes["text_keys"]) == {
        "language_instruction",
        "language_instruction_2",
        "language_instruction_3",
        "info/episode_metadata/file_path",
        "info/episode_metadata/recording_folderpath",
        "info/episode_metadata/building",
        "info/episode_metadata/collector_id",
        "info/episode_metadata/date",
    }


def test_droid_final_step_observation_moves_is_terminal_to_the_previous_row(tmp_path):
    release = droid_release()
    files = write_release(release, tmp_path)
    local = {path.split("gresearch/robotics/", 1)[1]: file for path, file in files.items()}
    spec = DatasetSpec(
        id="openx/droid",
        loader="openx",
        params={"version": "1.0.1", "num_shards": {"train": 2048}, "shards": [0, 1], "final_step": "observation"},
    )
    td = torch.cat(list(OpenXLoader().episodes(spec, local, LoaderContext(chunk_rows=100))))
    rows = expected_columns(release, "train", [0, 1])["rows"]
    kept = [r for r in rows if r["next"] is not None]  # T-1 rows per episode
    assert len(td) == len(kept) == 9 - 3
    for r, row in enumerate(kept):
        assert td["next", "terminated"][r].item() == (row["next"]["steps/is_last"][0])
        np.testing.assert_array_equal(
            td["next", "observation", "joint_position"][r].numpy(),
            row["next"]["steps/observation/joint_position"].astype(np.float32).astype(np.float64),
        )
    # the reward of the (dropped) last step is RLDS's "invalid": the success reward is not moved
    assert td["next", "reward"].sum().item() == 0


@pytest.mark.parametrize("make", [bridge_release, droid_release])
def test_fixture_declares_the_catalogued_shard_count(tmp_path, make):
    import json

    release = make()
    files = write_release(release, tmp_path)
    info = json.loads(files[f"{release.prefix}/dataset_info.json"].read_text())
    assert {s["name"]: len(s["shardLengths"]) for s in info["splits"]} == release.num_shards


def test_bridge_dataset_entry_fetches_the_authors_release():
    spec = resolve("openx/bridge_dataset", split="val", shards=[127])
    urls = [r.urls[0] for r in OpenXLoader().resources(spec)]
    base = "https://rail.eecs.berkeley.edu/datasets/bridge_release/data/tfds/bridge_dataset/1.0.0"
    assert urls == [
        f"{base}/dataset_info.json",
        f"{base}/features.json",
        f"{base}/bridge_dataset-val.tfrecord-00127-of-00128",
    ]


def test_droid_record_missing_a_declared_language_field_names_shard_and_offset(tmp_path):
    from datasets_hub.errors import LoaderError

    release = droid_release()
    step = release.step_values

    def without_third_instruction(release, g, e, t, episode):
        values = step(release, g, e, t, episode)
        if e == 1:  # the second record of shard 0 lacks a feature features.json declares
            del values["steps/language_instruction_3"]
        return values

    release.step_values = without_third_instruction
    files = write_release(release, tmp_path)
    local = {path.split("gresearch/robotics/", 1)[1]: file for path, file in files.items()}
    spec = DatasetSpec(id="openx/droid", loader="openx", params={"version": "1.0.1", "num_shards": {"train": 2048}})
    spec.params["shards"] = [0]
    with pytest.raises(
        LoaderError,
        match=r"droid-train\.tfrecord-00000-of-02048 \(record at byte offset [1-9]\d*\).*language_instruction_3",
    ):
        list(OpenXLoader().episodes(spec, local, LoaderContext(chunk_rows=100)))
