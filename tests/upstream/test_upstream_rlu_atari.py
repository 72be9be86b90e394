"""The ``rlu_atari`` loader against TFDS's own ``rlu_atari`` reading of the same shards.

TFDS's builder turns each record into an RLDS episode with ``RluAtari.generate_examples_one_file``
(``tf.data.TFRecordDataset(..., compression_type="GZIP")`` mapped by
``atari_utils.atari_example_to_rlds``) and decodes frames with its ``Image`` feature. Its full
``download_and_prepare`` runs those steps under Apache Beam, which we do not install: the test calls
the same two functions directly on shards written by ``tests/test_rlu_atari.py``.
Every RLDS step t < L-1 must be our transition t (observation, action, reward, discount), step
t + 1's observation our next observation, and ``is_terminal`` of the last step our ``terminated``.
"""

from __future__ import annotations

import numpy as np
import pytest
from upstream_ref import upstream

import datasets_hub

from fixtures.rlu_atari import SHARDS, write_shards


@pytest.fixture(scope="module")
def tfds_rlu():
    upstream("tensorflow")
    return upstream("tensorflow_datasets.rl_unplugged.rlu_atari.rlu_atari")


def test_every_step_equals_tfds(tfds_rlu, tmp_path):
    import tensorflow as tf

    folder = write_shards(tmp_path / "atari_episodes_ordered")
    builder = tfds_rlu.RluAtari(config="Pong_run_1", data_dir=str(tmp_path / "tfds"))
    image = builder.info.features["steps"]["observation"]
    rb = datasets_hub.load("rlu_atari/Pong/1", shards=sorted(SHARDS), base_url=folder.as_uri())
    ours = rb[:]
    row = 0
    episodes = 0
    for shard in sorted(SHARDS):
        path = folder / "Pong" / f"run_1-{shard:05d}-of-00050"
        for _key, episode in builder.generate_examples_one_file(str(path)):
            steps = episode["steps"]
            length = len(steps["action"])
            if length < 2:
                continue  # no transition: we skip it too (counted on the card)
            frames = [image.decode_example(tf.constant(png)).numpy() for png in steps["observation"]]
            for t in range(length - 1):
                assert np.array_equal(ours["observation"][row].numpy(), frames[t]), (shard, t)
                assert np.array_equal(ours["next", "observation"][row].numpy(), frames[t + 1]), (shard, t)
                assert int(ours["action"][row]) == int(steps["action"][t])
                assert float(ours["next", "reward"][row, 0]) == float(steps["reward"][t])
                assert float(ours["next", "discount"][row, 0]) == float(steps["discount"][t])
                last = t == length - 2
                assert bool(ours["next", "terminated"][row, 0]) == (last and bool(steps["is_terminal"][-1]))
                assert bool(ours["next", "truncated"][row, 0]) == (last and not bool(steps["is_terminal"][-1]))
                assert int(ours["info", "episode_idx"][row]) == int(episode["episode_id"])
                assert int(ours["info", "checkpoint_idx"][row]) == int(episode["checkpoint_id"])
                assert float(ours["info", "episode_return"][row]) == float(episode["episode_return"])
                row += 1
            episodes += 1
    assert row == len(ours) and episodes == rb.storage.episode_index().num_episodes
