"""format='rlds' exports read by TFDS itself: ``tfds.builder_from_directory(...).as_dataset()`` must give
every step of every episode exactly (the final observation on the ``is_last`` step included).

The LeRobot and Hugging Face ``datasets`` exports are checked by their own readers in
``tests/test_exporters_upstream.py`` (venv ``.venv-upstream-lerobot``); Minari's by
``minari.load_dataset`` in ``tests/test_exporters_minari.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from upstream_ref import upstream

from datasets_hub.build.storage import DatasetStorage
from datasets_hub.exporters import export_build

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the shared fixtures
from fixtures.export_builds import LENGTHS, chunk, make_build


@pytest.fixture(scope="module")
def tfds():
    upstream("tensorflow")
    return upstream("tensorflow_datasets")


def test_tfds_reads_the_rlds_export_step_for_step(tfds, tmp_path):
    td = chunk()
    td.set(("info", "precise"), torch.arange(sum(LENGTHS), dtype=torch.float64) / 3)  # raw-bytes encoding
    build = make_build([td])
    out = export_build(build, tmp_path / "fake_export" / "1.0.0", "rlds")
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.splits["train"].num_examples == len(LENGTHS)
    expected = DatasetStorage(build)[:]
    row = 0
    for e, episode in enumerate(tfds.as_numpy(builder.as_dataset(split="train", shuffle_files=False))):
        steps = list(episode["steps"])
        length = LENGTHS[e]
        assert len(steps) == length + 1 and int(episode["episode_metadata"]["episode_id"]) == e
        for t, step in enumerate(steps):
            obs = step["observation"]
            if t < length:
                i = row + t
                np.testing.assert_array_equal(obs["observation"], expected["observation"][i].numpy())
                np.testing.assert_array_equal(obs["pixels"], expected["pixels"][i].numpy())
                np.testing.assert_array_equal(step["action"], expected["action"][i].numpy())
                assert step["reward"] == expected["next", "reward"][i, 0].item()
                assert step["info"]["step_code"] == expected["info", "step_code"][i].item()
                assert step["info"]["precise"] == expected["info", "precise"][i].item()
                assert step["discount"] == 1.0 - float(expected["next", "terminated"][i, 0])
            else:  # the last step holds the final observation
                last = row + length - 1
                np.testing.assert_array_equal(obs["observation"], expected["next", "observation"][last].numpy())
                np.testing.assert_array_equal(obs["pixels"], expected["next", "pixels"][last].numpy())
                assert bool(step["is_terminal"]) == bool(expected["next", "terminated"][last, 0])
            assert bool(step["is_first"]) == (t == 0) and bool(step["is_last"]) == (t == length)
        row += length
    assert row == sum(LENGTHS)
