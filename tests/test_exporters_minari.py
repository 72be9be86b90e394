"""export(format='minari'): a dataset folder that minari.load_dataset and our Minari loader read back exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import datasets_hub as dh
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import InvalidParameter
from datasets_hub.exporters import export_build

from fixtures.export_builds import LENGTHS, chunk, make_build

minari = pytest.importorskip("minari")
pytest.importorskip("h5py")


@pytest.fixture
def store(tmp_path, monkeypatch):
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def test_minari_reads_every_value_back(store):
    build = make_build([chunk()])
    export_build(build, store / "hub" / "fake-v0", "minari", dataset_id="hub/fake-v0")
    dataset = minari.load_dataset("hub/fake-v0")
    assert dataset.total_episodes == len(LENGTHS) and dataset.total_steps == sum(LENGTHS)
    expected = DatasetStorage(build)[:]
    obs, next_obs = expected.get("observation").numpy(), expected.get(("next", "observation")).numpy()
    pixels, next_pixels = expected.get("pixels").numpy(), expected.get(("next", "pixels")).numpy()
    start = 0
    for episode, length in zip(dataset.iterate_episodes(), LENGTHS, strict=True):
        rows = slice(start, start + length)
        # T + 1 observations: the final next observation is held
        np.testing.assert_array_equal(episode.observations["observation"][:-1], obs[rows])
        np.testing.assert_array_equal(episode.observations["observation"][1:], next_obs[rows])
        np.testing.assert_array_equal(episode.observations["pixels"][1:], next_pixels[rows])
        np.testing.assert_array_equal(episode.observations["pixels"][:-1], pixels[rows])
        np.testing.assert_array_equal(episode.actions, expected.get("action")[rows].numpy())
        np.testing.assert_array_equal(episode.rewards, expected.get(("next", "reward"))[rows].numpy().reshape(-1))
        np.testing.assert_array_equal(episode.terminations, expected.get(("next", "terminated"))[rows].numpy().ravel())
        np.testing.assert_array_equal(episode.truncations, expected.get(("next", "truncated"))[rows].numpy().ravel())
        np.testing.assert_array_equal(episode.infos["step_code"], expected.get(("info", "step_code"))[rows].numpy())
        start += length
    space = dataset.observation_space
    assert space["pixels"].dtype == np.uint8 and space["pixels"].shape == (6, 8, 3)
    assert dataset.action_space.shape == (2,)


def test_round_trip_through_our_minari_loader(store):
    build = make_build([chunk(image=False)])
    export_build(build, store / "fake-v1", "minari")
    got = dh.load("minari/fake-v1").storage[:]
    expected = DatasetStorage(build)[:]
    for key in ("observation", ("next", "observation"), "action", ("next", "reward"), ("next", "terminated"),
                ("next", "truncated"), "step", "episode"):  # fmt: skip
        assert torch.equal(got.get(key), expected.get(key)), key
    assert torch.equal(got.get(("info", "step_code")), expected.get(("info", "step_code")))


def test_spaces_from_a_minari_card_are_kept(store, tmp_path):
    build = make_build([chunk(image=False)])
    export_build(build, store / "first-v0", "minari")
    metadata = json.loads((store / "first-v0" / "data" / "metadata.json").read_text())
    action_space = json.loads(metadata["action_space"])
    assert action_space["type"] == "Box" and action_space["low"] == [-np.inf, -np.inf]
    # a build loaded from Minari keeps minari's spaces on its card: exporting it writes them again
    bounded = {"type": "Box", "dtype": "float32", "shape": [2], "low": [-5.0, -5.0], "high": [5.0, 5.0]}
    metadata["action_space"] = json.dumps(bounded)
    (store / "first-v0" / "data" / "metadata.json").write_text(json.dumps(metadata))
    rb = dh.load("minari/first-v0")
    export_build(rb.storage.path, store / "second-v0", "minari")
    second = json.loads((store / "second-v0" / "data" / "metadata.json").read_text())
    assert json.loads(second["action_space"]) == bounded


def test_refusals_before_anything_is_written(store):
    build = make_build([chunk(image=False)])
    with pytest.raises(InvalidParameter, match="-v<N>"):
        export_build(build, store / "no-version", "minari")
    with pytest.raises(InvalidParameter, match="ending with"):
        export_build(build, store / "elsewhere-v0", "minari", dataset_id="hub/fake-v0")
    assert not store.exists() or not any(store.iterdir())
