"""Exports read by the tools they are for: LeRobot 0.4.4's ``LeRobotDataset`` and ``datasets.load_dataset``.

Runs only where ``lerobot`` imports: the venv ``.venv-upstream-lerobot`` that ``make test-upstream``
builds (``make test-upstream-lerobot``; it also holds ``datasets>=4,<5``, LeRobot's own reader of
parquet, and torchcodec, which decodes LeRobot's videos). Elsewhere the module is skipped; under
``DATASETS_HUB_UPSTREAM_REQUIRED=1`` a missing reader fails instead. Minari's reader is checked in ``tests/test_exporters_minari.py`` (minari is
installed with the hub's test extras).
"""

from __future__ import annotations

import numpy as np
import torch

from datasets_hub.build.storage import DatasetStorage
from datasets_hub.exporters import export_build

from fixtures.export_builds import LENGTHS, chunk, make_build
from fixtures.upstream_lerobot import require_lerobot

datasets = require_lerobot("datasets")[1]


def test_lerobot_dataset_reads_the_export_value_for_value(tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    build = make_build([chunk(image=False)])
    out = export_build(build, tmp_path / "acme" / "export", "lerobot", fps=10, task="reach")
    dataset = LeRobotDataset("acme/export", root=out)  # LeRobot's timestamp checks run here (tolerance_s=1e-4)
    expected = DatasetStorage(build)[:]
    assert len(dataset) == sum(LENGTHS) and dataset.num_episodes == len(LENGTHS)
    for i in range(len(dataset)):
        item = dataset[i]
        assert torch.equal(item["observation"], expected["observation"][i])
        assert torch.equal(item["action"], expected["action"][i])
        assert torch.equal(item["next.reward"].reshape(1), expected["next", "reward"][i])
        assert bool(item["next.done"]) == bool(expected["next", "terminated"][i])
        assert int(item["step_code"]) == int(expected["info", "step_code"][i])
        assert int(item["episode_index"]) == int(expected["episode"][i])
        assert int(item["frame_index"]) == int(expected["step"][i])
        assert int(item["index"]) == i
        assert item["task"] == "reach"


def test_lerobot_dataset_decodes_the_png_image_features(tmp_path):
    """LeRobot 0.4.4 reads an ``image`` feature as a Hugging Face ``Image`` column (its ``load_hf_dataset``:
    features from ``meta/info.json``, PNG bytes decoded by PIL), then turns each PIL image into a tensor with
    torchvision's ``ToTensor``. Everything up to that last call is LeRobot's own code here: its dataset is
    opened (metadata, episodes, timestamp checks) and its ``hf_dataset`` read without the final transform,
    because this venv's torchvision may be the import stand-in (tests/upstream_shims). Every frame, the last
    step of each episode included, is the build's exact pixels."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from PIL import Image

    build = make_build([chunk()])  # pixels: uint8 [6, 8, 3], distinct per observation row
    out = export_build(build, tmp_path / "acme" / "pixels", "lerobot", fps=10, task="reach")
    dataset = LeRobotDataset("acme/pixels", root=out)
    assert dataset.meta.features["observation.pixels"]["dtype"] == "image"
    assert isinstance(dataset.hf_dataset.features["observation.pixels"], datasets.Image)
    frames = dataset.hf_dataset.with_format(None)  # LeRobot's columns, before torchvision's ToTensor
    expected = DatasetStorage(build)[:]
    assert len(frames) == sum(LENGTHS)
    for i in range(len(frames)):
        image = frames[i]["observation.pixels"]
        assert isinstance(image, Image.Image) and image.mode == "RGB"
        np.testing.assert_array_equal(np.asarray(image), expected["pixels"][i].numpy(), err_msg=f"frame {i}")
        state = frames[i]["observation.state"]  # "observation" beside another observation key
        np.testing.assert_array_equal(np.asarray(state, dtype=np.float32), expected["observation"][i].numpy())


def test_lerobot_dataset_decodes_the_exported_videos(tmp_path):
    """Cameras exported with video=True, decoded by LeRobot with torchcodec: every frame is its own step's
    (the frame code of lerobot_writer survives the codec) and close to the build's pixels."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from fixtures import lerobot_writer as lw

    lengths = (4, 6)
    td = chunk(lengths, image=False)
    rows = torch.arange(sum(lengths) + len(lengths))  # observation rows, T + 1 per episode
    frames = torch.from_numpy(np.stack([lw.frame_image(int(r), 0, 32, 64) for r in rows]))
    step_rows = torch.cat([torch.arange(0, 4), torch.arange(5, 11)])
    td.set("camera", frames[step_rows])
    td.set(("next", "camera"), frames[step_rows + 1])
    build = make_build([td])
    out = export_build(build, tmp_path / "acme" / "video", "lerobot", fps=10, video=True)
    dataset = LeRobotDataset("acme/video", root=out, video_backend="torchcodec")
    expected = DatasetStorage(build)[:]
    for i in range(len(dataset)):
        theirs = (dataset[i]["observation.camera"] * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
        mine = expected["camera"][i].numpy()
        assert lw.read_index(theirs)[0] == lw.read_index(mine)[0]
        mse = np.mean((theirs.astype(np.float64) - mine.astype(np.float64)) ** 2)
        assert 10 * np.log10(255**2 / max(mse, 1e-12)) > 30


def test_datasets_load_dataset_reads_the_hf_export_value_for_value(tmp_path):
    build = make_build([chunk()])
    out = export_build(build, tmp_path / "hf", "hf")
    dataset = datasets.load_dataset(str(out), split="train")
    expected = DatasetStorage(build)[:]
    assert dataset.num_rows == sum(LENGTHS)
    assert isinstance(dataset.features["pixels"], datasets.Image)
    columns = {
        "observation": "observation",
        "next.observation": ("next", "observation"),
        "action": "action",
        "info.step_code": ("info", "step_code"),
        "episode_index": "episode",
        "step": "step",
    }
    for name, key in columns.items():
        want = expected.get(key).numpy()
        np.testing.assert_array_equal(np.asarray(dataset[name]).reshape(want.shape), want, err_msg=name)
    for name, key in (("next.reward", ("next", "reward")), ("next.terminated", ("next", "terminated"))):
        np.testing.assert_array_equal(np.asarray(dataset[name]), expected.get(key).numpy().reshape(-1), err_msg=name)
    for i in (0, 4, 5, 11):  # the last step of an episode included: its next image is the final observation
        np.testing.assert_array_equal(np.asarray(dataset[i]["pixels"]), expected["pixels"][i].numpy())
        np.testing.assert_array_equal(np.asarray(dataset[i]["next.pixels"]), expected["next", "pixels"][i].numpy())
