"""BridgeData V2 and DROID RLDS fixtures read back by TFDS itself, against our ``openx`` load.

The fixtures of tests/fixtures/openx_robots.py are written without TensorFlow. Here TFDS (1) parses
their ``features.json`` into the same feature tree as the published specs built with
``tfds.features`` (BridgeData V2 from the TFDS catalogue page of ``bridge``, DROID from the DROID
dataset schema), and (2) reads the shards through ``tfds.builder_from_directory(...).as_dataset()``;
every feature of every step must equal our build's row, JPEG pixels, float64 values, the three DROID
language fields and the episode metadata included, and the RLDS flags must give our terminated /
truncated.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from upstream_ref import upstream

import datasets_hub
from datasets_hub.loaders.openx.loader import decode_text

from fixtures.openx_robots import (
    BRIDGE_CAMERAS,
    BRIDGE_HW,
    DROID_ACTION_DICT,
    DROID_CAMERAS,
    DROID_HW,
    DROID_OBSERVATION,
    DROID_TEXT_METADATA,
    bridge_release,
    droid_release,
    write_release,
)


@pytest.fixture(scope="module")
def tfds():
    upstream("tensorflow")
    return upstream("tensorflow_datasets")


def _published_bridge(tfds):
    f = tfds.features
    return f.FeaturesDict({
        "steps": f.Dataset({
            "action": f.Tensor(shape=(7,), dtype=np.float32),
            "discount": f.Scalar(dtype=np.float32),
            "is_first": np.bool_,
            "is_last": np.bool_,
            "is_terminal": np.bool_,
            "language_embedding": f.Tensor(shape=(512,), dtype=np.float32),
            "language_instruction": f.Text(),
            "observation": f.FeaturesDict({
                **{c: f.Image(shape=(*BRIDGE_HW, 3), encoding_format="jpeg") for c in BRIDGE_CAMERAS},
                "state": f.Tensor(shape=(7,), dtype=np.float32),
            }),
            "reward": f.Scalar(dtype=np.float32),
        }),
        "episode_metadata": f.FeaturesDict({
            "episode_id": f.Scalar(dtype=np.int32),
            "file_path": f.Text(),
            **{f"has_image_{k}": f.Scalar(dtype=np.bool_) for k in range(4)},
            "has_language": f.Scalar(dtype=np.bool_),
        }),
    })  # fmt: skip


def _published_droid(tfds):
    f = tfds.features
    return f.FeaturesDict({
        "steps": f.Dataset({
            "action": f.Tensor(shape=(7,), dtype=np.float64),
            "action_dict": f.FeaturesDict({k: f.Tensor(shape=(n,), dtype=np.float64) for k, n in DROID_ACTION_DICT.items()}),
            "discount": f.Scalar(dtype=np.float32),
            "is_first": f.Scalar(dtype=np.bool_),
            "is_last": f.Scalar(dtype=np.bool_),
            "is_terminal": f.Scalar(dtype=np.bool_),
            "language_instruction": f.Text(),
            "language_instruction_2": f.Text(),
            "language_instruction_3": f.Text(),
            "observation": f.FeaturesDict({
                **{k: f.Tensor(shape=(n,), dtype=np.float64) for k, n in DROID_OBSERVATION.items()},
                **{c: f.Image(shape=(*DROID_HW, 3), encoding_format="jpeg") for c in DROID_CAMERAS},
            }),
            "reward": f.Scalar(dtype=np.float32),
        }),
        "episode_metadata": f.FeaturesDict({
            "file_path": f.Text(), "recording_folderpath": f.Text(),
            **{k: f.Text() for k in DROID_TEXT_METADATA},  # read as text by LeRobot's port of 1.0.1
        }),
    })  # fmt: skip


def _flat(tree, prefix=()):
    for name, value in tree.items():
        if isinstance(value, dict):
            yield from _flat(value, (*prefix, name))
        else:
            yield (*prefix, name), value


def _ours(path):
    """Where the openx loader puts a step feature (see loaders/openx/loader.py's mapping table)."""
    if path in (("reward",), ("discount",)):
        return ("next", *path)
    return path


CASES = [(bridge_release, _published_bridge, "train"), (bridge_release, _published_bridge, "test"),
         (droid_release, _published_droid, "train")]  # fmt: skip


@pytest.mark.parametrize("make, published, split", CASES)
def test_tfds_reads_the_fixture_as_we_load_it(tfds, tmp_path, make, published, split):
    release = make()
    write_release(release, tmp_path)
    folder = tmp_path / release.prefix
    ours_spec = tfds.features.FeatureConnector.from_json(json.loads((folder / "features.json").read_text()))
    assert ours_spec.to_json() == published(tfds).to_json(), "features.json is not the published spec"

    shards = sorted(release.episodes[split])
    dataset_id = f"openx/{release.name}_upstream_{split}"
    datasets_hub.register_dataset(
        dataset_id,
        loader="openx",
        params={
            "version": release.version,
            "dataset": release.name,
            "num_shards": release.num_shards,
            "split": split,
            "shards": shards,
            "base_url": folder.as_uri(),
        },
    )
    ours = datasets_hub.load(dataset_id)[:]
    reference = tfds.builder_from_directory(str(folder)).as_dataset(split=split, shuffle_files=False)
    row = checked = 0
    for episode in tfds.as_numpy(reference):
        steps = list(episode["steps"])
        for t, step in enumerate(steps):
            last = t == len(steps) - 1
            for path, value in _flat(step):
                if path[0].startswith("is_"):
                    continue
                got = ours.get(_ours(path))[row]
                if isinstance(value, bytes):
                    assert decode_text(got) == [value.decode()], (row, path)
                elif path[0] in ("reward", "discount"):
                    assert float(got[0]) == float(value), (row, path)
                else:
                    assert got.numpy().dtype == value.dtype, (row, path, got.dtype, value.dtype)
                    assert np.array_equal(got.numpy(), value), (row, path)
                if path[0] == "observation" and not last:
                    nxt = dict(_flat(steps[t + 1]))[path]
                    assert np.array_equal(ours.get(("next", *path))[row].numpy(), nxt), (row, path)
                checked += 1
            for path, value in _flat(episode["episode_metadata"]):
                got = ours.get(("info", "episode_metadata", *path))[row]
                want = [value.decode()] if isinstance(value, bytes) else value
                assert (decode_text(got) if isinstance(value, bytes) else got.item()) == (
                    want if isinstance(value, bytes) else want.item()
                ), (row, path)
            assert bool(step["is_first"]) == (t == 0) and bool(step["is_last"]) == last
            assert bool(ours["next", "terminated"][row, 0]) == (last and bool(step["is_terminal"]))
            assert bool(ours["next", "truncated"][row, 0]) == (last and not bool(step["is_terminal"]))
            row += 1
    assert row == len(ours) == sum(e["length"] for s in shards for e in release.episodes[split][s])
    assert checked > 0
