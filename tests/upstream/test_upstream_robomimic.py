"""The robomimic loader against robomimic's own reader, ``robomimic.utils.dataset.SequenceDataset`` (0.3.0).

The fixture file is written in robomimic's layout (``tests/fixtures/robomimic.py``: ``demo_10`` stored before
``demo_2``, ``mask/`` filter keys, ``dones`` set at success states inside demos). For the whole file and for each
filter key, every demo robomimic reads (``get_trajectory_at_index``, in its order) must equal our episode of the
same index, key by key and value by value: observations, next observations, actions, rewards, dones and states.
robomimic 0.3.0 is installed ``--no-deps`` (its declared egl_probe / tensorboard pins serve training only; the
reader needs numpy, h5py, torch, tqdm and termcolor).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared fixture writer

from upstream_ref import upstream

from datasets_hub.loader import DatasetSpec, LoaderContext, Resource
from datasets_hub.loaders.robomimic import RobomimicLoader

from fixtures.robomimic import MASKS, write_robomimic

OBS_KEYS = ("agentview_image", "object")
DATASET_KEYS = ("actions", "rewards", "dones", "states")


def ours(path: Path, split: str | None) -> list:
    params = {} if split is None else {"split": split}
    spec = DatasetSpec("robomimic/upstream", "robomimic", params=params, resources=[Resource(path.name, ("x",))])
    td = torch.cat(list(RobomimicLoader().episodes(spec, {path.name: path}, LoaderContext(chunk_rows=4))))
    episodes = td["episode"].numpy()
    return [td[torch.from_numpy(episodes == e)] for e in np.unique(episodes)]


@pytest.mark.upstream
@pytest.mark.parametrize("split", [None, "train", "valid"])
@pytest.mark.parametrize("next_obs", [True, False])
def test_every_demo_matches_sequence_dataset(tmp_path, split, next_obs):
    dataset_module = upstream("robomimic.utils.dataset")
    path = write_robomimic(tmp_path / "low_dim.hdf5", next_obs=next_obs)
    reference = dataset_module.SequenceDataset(
        hdf5_path=str(path),
        obs_keys=OBS_KEYS,
        dataset_keys=DATASET_KEYS,
        load_next_obs=next_obs,
        hdf5_cache_mode=None,
        hdf5_use_swmr=False,
        filter_by_attribute=split,
    )
    mine = ours(path, split)
    assert reference.n_demos == len(mine) == (len(MASKS[split]) if split else 5)
    for index, episode in enumerate(mine):
        theirs = reference.get_trajectory_at_index(index)
        n = episode.batch_size[0]
        for key in OBS_KEYS:
            np.testing.assert_array_equal(episode["observation", key].numpy(), theirs["obs"][key])
            assert episode["observation", key].numpy().dtype == np.asarray(theirs["obs"][key]).dtype
            if next_obs:
                np.testing.assert_array_equal(episode["next", "observation", key].numpy(), theirs["next_obs"][key])
        np.testing.assert_array_equal(episode["action"].numpy(), theirs["actions"])
        np.testing.assert_array_equal(episode["next", "reward"].numpy().reshape(n), theirs["rewards"])
        np.testing.assert_array_equal(episode["info", "dones"].numpy(), theirs["dones"])
        np.testing.assert_array_equal(episode["info", "states"].numpy(), theirs["states"])
        # the episode ends as robomimic's last dones says; no flag inside a demo
        last_done = bool(np.asarray(theirs["dones"])[-1])
        assert episode["next", "terminated"].numpy()[:, 0].tolist() == [False] * (n - 1) + [last_done]
        assert episode["next", "truncated"].numpy()[:, 0].tolist() == [False] * (n - 1) + [not last_done]
    reference.close_and_delete_hdf5_handle()
