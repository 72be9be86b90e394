"""The lerobot loader against LeRobot's own reader, ``LeRobotDataset`` (lerobot 0.4.4).

Runs only where ``lerobot`` imports: the separate venv ``.venv-upstream-lerobot`` that
``make test-upstream`` builds (lerobot pins ``torch<2.11``; it is installed with ``--no-deps`` next
to our CPU torch, with torchcodec for decoding). Elsewhere the module is skipped.

The same files (written by ``lerobot_writer``: 2 cameras, 3 episodes, AV1 videos) are read by
both; states, actions, timestamps, indices, rewards, done flags and task texts must be equal
exactly; frames within the codec's tolerance (LeRobot decodes with torchcodec over the system's
FFmpeg, we with PyAV's bundled FFmpeg: both use dav1d, but the YUV -> RGB conversions differ by a
few levels). LeRobot 0.4.4 reads only v3.0: the v2.1 files are converted with LeRobot's own
converter and the result read by ``LeRobotDataset`` is compared with our reading of the v2.1 files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import torch

from datasets_hub.loader import DatasetSpec, LoaderContext
from datasets_hub.loaders.lerobot.loader import LeRobotLoader, decode_text

from fixtures import lerobot_writer as lw
from fixtures.upstream_lerobot import require_lerobot

require_lerobot()

os.environ.setdefault("SVT_LOG", "1")
REPO = "acme/koch_push"
CAMS = ("observation.images.top", "observation.images.wrist")
FRAME_MEAN_TOLERANCE = 2.0  # mean |difference| in uint8 levels between the two decoders
FRAME_MAX_TOLERANCE = 40


def ours(root: Path, **params) -> dict:
    """Our conversion of the files under ``root`` (no Hub: the files mapping the core would pass)."""
    files = {f"{REPO}/{p}": root / p for p in lw.files_of(root)}
    spec = DatasetSpec(id=f"lerobot/{REPO}", loader="lerobot", params={"num_workers": 1, **params})
    chunks = list(LeRobotLoader().episodes(spec, files, LoaderContext()))
    return torch.cat([c.to_tensordict() if hasattr(c, "to_tensordict") else c for c in chunks])


def compare(td, dataset, cameras=CAMS) -> None:
    assert len(dataset) == td.batch_size[0]
    tasks = decode_text(td["task"])
    worst = 0.0
    for i in range(len(dataset)):
        item = dataset[i]
        assert int(item["index"]) == int(td["info", "index"][i])
        assert int(item["episode_index"]) == int(td["episode"][i])
        assert int(item["frame_index"]) == int(td["info", "frame_index"][i])
        assert torch.equal(item["observation.state"], td["observation", "state"][i])
        assert torch.equal(item["action"], td["action"][i])
        assert torch.equal(item["timestamp"].reshape(()), td["info", "timestamp"][i].reshape(()))
        assert torch.equal(item["next.reward"].reshape(()), td["next", "reward"][i].reshape(()))
        assert bool(item["next.done"]) == bool(td["info", "next.done"][i])
        assert item["task"] == tasks[i]
        for cam in cameras:
            theirs = item[cam]  # float32 CHW in [0, 1]
            mine = td[("observation", "images", cam.rsplit(".", 1)[1])][i].permute(2, 0, 1).float() / 255
            diff = (theirs - mine).abs() * 255
            worst = max(worst, float(diff.mean()))
            assert float(diff.mean()) < FRAME_MEAN_TOLERANCE, (i, cam, float(diff.mean()))
            assert float(diff.max()) < FRAME_MAX_TOLERANCE, (i, cam, float(diff.max()))
            assert lw.read_index((theirs * 255).round().byte().permute(1, 2, 0).numpy())[0] == int(item["index"])
    print(f"largest mean frame difference: {worst:.3f} levels")


def test_v3_matches_lerobot_dataset(tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = tmp_path / REPO
    lw.write_dataset(root, lw.Spec(version="v3.0"))
    dataset = LeRobotDataset(REPO, root=root, video_backend="torchcodec")
    compare(ours(root), dataset)


def test_v3_episode_subset_matches(tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = tmp_path / REPO
    lw.write_dataset(root, lw.Spec(version="v3.0"))
    dataset = LeRobotDataset(REPO, root=root, episodes=[1, 2], video_backend="torchcodec")
    compare(ours(root, episodes=[1, 2]), dataset)


def test_v21_matches_lerobot_after_its_own_conversion(tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.datasets.v30.convert_dataset_v21_to_v30 import convert_dataset

    original = tmp_path / "v21" / REPO
    lw.write_dataset(original, lw.Spec(version="v2.1"))
    converted_parent = tmp_path / "converted"
    shutil.copytree(original, converted_parent / REPO)  # the converter renames its input in place
    convert_dataset(REPO, root=converted_parent, push_to_hub=False, force_conversion=True)
    dataset = LeRobotDataset(REPO, root=converted_parent / REPO, video_backend="torchcodec")
    compare(ours(original), dataset)


def test_delta_timestamps_windows_match(tmp_path):
    """Our delta_timestamps windows (WindowSampler offsets at the dataset's fps, padded at episode
    edges with ``<key>_is_pad``) give LeRobot's values and padding masks, for every frame."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
    from datasets_hub.buffers.tensor_storages import LazyTensorStorage
    from datasets_hub.loaders.lerobot.windows import delta_timestamps_sampler, ted_key

    root = tmp_path / REPO
    lw.write_dataset(root, lw.Spec(version="v3.0"))
    delta = {"observation.state": [-0.2, -0.1, 0.0], "action": [0.0, 0.1, 0.2, 0.3], "next.reward": [-0.1, 0.0]}
    dataset = LeRobotDataset(REPO, root=root, delta_timestamps=delta, video_backend="torchcodec")
    td = ours(root)
    n = td.batch_size[0]
    sampler = delta_timestamps_sampler(delta, fps=10)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(n), sampler=sampler)
    rb.extend(td)
    sampler.episodes.refresh(rb.storage)
    rows = np.arange(n)
    episode = np.searchsorted(sampler.episodes.start, rows, side="right") - 1
    got = sampler.windows_at(rb.storage, rows, episode)
    for i in range(n):
        item = dataset[i]
        for name in delta:
            key = ted_key(name)
            pad = (*key[:-1], key[-1] + "_is_pad")
            np.testing.assert_array_equal(
                got[key if len(key) > 1 else key[0]][i].reshape(-1).numpy(), item[name].reshape(-1).numpy()
            )
            np.testing.assert_array_equal(
                got[pad if len(pad) > 1 else pad[0]][i].numpy(), item[f"{name}_is_pad"].numpy()
            )
