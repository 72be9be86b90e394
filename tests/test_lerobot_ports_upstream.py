"""The LIBERO, DROID and RoboCasa365 LeRobot ports: our load against ``LeRobotDataset`` (lerobot 0.4.4).

Runs only where ``lerobot`` imports (the venv ``.venv-upstream-lerobot`` of ``make
test-upstream-lerobot``; skipped elsewhere, a failure there). The fixtures of
tests/fixtures/lerobot_ports.py are read by both readers; every feature of every frame must agree:
numbers exactly (our dtype is info.json's; LeRobot 0.4.4 returns float64 list features as float32,
which the comparison notes), strings (DROID's three instructions and
episode metadata) as text, the task, indices, and camera frames (images stored in parquet exactly;
videos within the codec tolerance of tests/test_lerobot_upstream.py, since LeRobot decodes with
torchcodec and we with PyAV). LeRobot turns image features into tensors with torchvision, which
that venv only stubs (LeRobot pins a torch the real torchvision cannot go with): for LIBERO, whose
cameras are images, the rows come from the ``hf_dataset`` LeRobot loaded, with the images decoded by
``datasets`` (PIL) and the task looked up in LeRobot's task table, as ``__getitem__`` does.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from datasets_hub.loader import DatasetSpec, LoaderContext
from datasets_hub.loaders.lerobot.data import keys_of
from datasets_hub.loaders.lerobot.loader import LeRobotLoader, decode_text

from fixtures import lerobot_writer as lw
from fixtures.lerobot_ports import PORTS
from fixtures.upstream_lerobot import require_lerobot

require_lerobot()

os.environ.setdefault("SVT_LOG", "1")
FRAME_MEAN_TOLERANCE = 2.0  # as tests/test_lerobot_upstream.py: mean |difference| in uint8 levels
FRAME_MAX_TOLERANCE = 40
BOOKKEEPING = {
    "timestamp": ("info", "timestamp"),
    "frame_index": ("info", "frame_index"),
    "index": ("info", "index"),
    "task_index": ("info", "task_index"),
    "episode_index": ("episode",),
    "next.reward": ("next", "reward"),
    "next.done": ("info", "next.done"),
}


def _raw_item(row, meta):
    """A row of LeRobot's ``hf_dataset`` in ``__getitem__``'s form, without torchvision."""
    item = {}
    for name, value in row.items():
        feature = meta.features.get(name, {})
        if feature.get("dtype") == "image":
            item[name] = torch.from_numpy(np.asarray(value).copy()).permute(2, 0, 1).float() / 255
        elif isinstance(value, str):
            item[name] = value
        else:
            item[name] = torch.from_numpy(np.asarray(value, dtype=feature.get("dtype", None)))
    item["task"] = meta.tasks.iloc[int(row["task_index"])].name
    return item


def _ours(repo, root):
    files = {f"{repo}/{p}": root / p for p in lw.files_of(root)}
    spec = DatasetSpec(id=f"lerobot/{repo}", loader="lerobot", params={"num_workers": 1})
    return torch.cat(list(LeRobotLoader().episodes(spec, files, LoaderContext())))


@pytest.mark.parametrize("repo", list(PORTS))
def test_port_matches_lerobot_dataset(repo, tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    spec = PORTS[repo]
    root = tmp_path / repo
    lw.write_dataset(root, spec)
    dataset = LeRobotDataset(repo, root=root, video_backend="torchcodec")
    ours = _ours(repo, root)
    features = dataset.meta.features
    assert dataset.meta.fps == spec.fps and dataset.meta.robot_type == spec.robot_type
    assert sorted(dataset.meta.camera_keys) == sorted(spec.cameras)
    keys = {**keys_of(list(features)), **BOOKKEEPING}
    tasks = decode_text(ours["task"])
    assert len(dataset) == ours.batch_size[0]
    compared = set()
    images = any(f["dtype"] == "image" for f in features.values())
    raw = dataset.hf_dataset.with_format(None) if images else None
    for i in range(len(dataset)):
        item = dataset[i] if raw is None else _raw_item(raw[i], dataset.meta)
        assert item["task"] == tasks[i]
        for name, feature in features.items():
            got = ours.get(keys[name])[i]
            theirs = item[name]
            compared.add(name)
            if feature["dtype"] == "string":
                assert decode_text(got.reshape(1, -1)) == [theirs], (i, name)
            elif feature["dtype"] in ("video", "image"):
                mine = got.permute(2, 0, 1).float() / 255  # theirs: float32 CHW in [0, 1]
                diff = (theirs - mine).abs() * 255
                if feature["dtype"] == "image":
                    assert float(diff.max()) < 0.5, (i, name)  # PNG: the same pixels
                else:
                    assert float(diff.mean()) < FRAME_MEAN_TOLERANCE, (i, name, float(diff.mean()))
                    assert float(diff.max()) < FRAME_MAX_TOLERANCE, (i, name, float(diff.max()))
            else:
                assert str(got.dtype) == f"torch.{feature['dtype']}", (name, got.dtype)  # info.json's dtype
                if feature["dtype"] == "float64" and theirs.dtype == torch.float32:
                    # LeRobot 0.4.4 makes list features tensors of Python floats: float64 comes back
                    # float32; we keep the stored float64, equal once narrowed the same way
                    got = got.to(torch.float32)
                assert theirs.dtype == got.dtype, (name, theirs.dtype, got.dtype)
                assert torch.equal(theirs.reshape(-1), got.reshape(-1)), (i, name)
    assert compared == set(features)
