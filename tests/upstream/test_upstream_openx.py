"""The ``openx`` loader against TFDS itself: TFDS prepares a small RLDS dataset (TFDS's own writer:
JPEG and PNG images encoded by TensorFlow, features.json, dataset_info.json, TFRecord shards), and
our load must equal ``tfds.builder_from_directory(...).as_dataset()`` value for value, JPEG pixels
included. The TFDS-identical JPEG decoder is also checked against ``tf.io.decode_image`` on JPEGs of
every chroma subsampling, grey, and qualities 50..100.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from upstream_ref import upstream

import datasets_hub
from datasets_hub.loaders.formats.image_decode import decode_uint8
from datasets_hub.loaders.openx.loader import decode_text

EPISODES = (5, 3, 7)
IMG, WRIST, STATE, ACT = (24, 32, 3), (8, 8, 1), 5, 3


@pytest.fixture(scope="module")
def tf():
    return upstream("tensorflow")


@pytest.fixture(scope="module")
def tfds(tf):
    return upstream("tensorflow_datasets")


def _texture(h, w, c, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 7 + y * 3) % 256, (y * 11 + seed) % 256, (x * y + 3 * seed) % 256], -1)[..., :c]
    return np.clip(base + rng.normal(0, 25, base.shape), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("quality", [50, 75, 95, 100])
def test_tfds_jpeg_decoder_is_bit_identical_to_tensorflow(tf, quality):
    for seed, (h, w) in enumerate([(24, 32), (37, 53), (120, 160)]):
        for subsampling in (0, 1, 2):  # 4:4:4, 4:2:2, 4:2:0
            pixels = _texture(h, w, 3, seed)
            buffer = io.BytesIO()
            Image.fromarray(pixels).save(buffer, format="JPEG", quality=quality, subsampling=subsampling)
            blob = buffer.getvalue()
            want = tf.io.decode_image(blob, channels=3).numpy()
            assert np.array_equal(decode_uint8(blob, 3, "tfds"), want), (quality, subsampling, h, w)
            assert np.array_equal(decode_uint8(blob, 1, "tfds"), tf.io.decode_image(blob, channels=1).numpy())
        grey = tf.io.encode_jpeg(_texture(h, w, 1, seed), quality=quality).numpy()  # TensorFlow's own encoder
        assert np.array_equal(decode_uint8(grey, 1, "tfds"), tf.io.decode_image(grey, channels=1).numpy())
        assert np.array_equal(decode_uint8(grey, 3, "tfds"), tf.io.decode_image(grey, channels=3).numpy())


def _builder_class(tfds):
    class TinyRlds(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """An RLDS dataset the way Open X-Embodiment releases are made (TFDS writes every file)."""

        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            features = tfds.features
            return tfds.core.DatasetInfo(
                builder=self,
                features=features.FeaturesDict({
                    "steps": features.Dataset({
                        "observation": features.FeaturesDict({
                            "image": features.Image(shape=IMG, encoding_format="jpeg"),
                            "wrist_image": features.Image(shape=WRIST, encoding_format="png"),
                            "state": features.Tensor(shape=(STATE,), dtype=np.float32),
                        }),
                        "action": features.Tensor(shape=(ACT,), dtype=np.float32),
                        "reward": features.Scalar(dtype=np.float32),
                        "discount": features.Scalar(dtype=np.float32),
                        "is_first": np.bool_,
                        "is_last": np.bool_,
                        "is_terminal": np.bool_,
                        "language_instruction": features.Text(),
                    }),
                    "episode_metadata": features.FeaturesDict({"file_path": features.Text()}),
                }),
            )  # fmt: skip

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            g = 0
            for e, length in enumerate(EPISODES):
                steps = []
                for t in range(length):
                    steps.append({
                        "observation": {"image": _texture(*IMG, seed=g), "wrist_image": _texture(*WRIST, seed=1000 + g),
                                        "state": (g + 0.01 * np.arange(STATE)).astype(np.float32)},
                        "action": (-g - 0.1 * np.arange(ACT)).astype(np.float32),
                        "reward": np.float32(t == length - 1),
                        "discount": np.float32(1.0),
                        "is_first": t == 0,
                        "is_last": t == length - 1,
                        "is_terminal": t == length - 1 and e != 1,  # episode 1 is cut (truncated)
                        "language_instruction": f"task {e} step {t}",
                    })  # fmt: skip
                    g += 1
                yield f"episode_{e}", {"steps": steps, "episode_metadata": {"file_path": f"/data/ep{e}.h5"}}

    return TinyRlds


def test_openx_load_equals_tfds_as_dataset(tfds, tmp_path):
    builder = _builder_class(tfds)(data_dir=str(tmp_path / "tfds"))
    builder.download_and_prepare()
    folder = tmp_path / "tfds" / builder.name / "1.0.0"
    shards = sorted(p.name for p in folder.glob(f"{builder.name}-train.tfrecord-*"))
    assert shards, "TFDS wrote no shard"
    datasets_hub.register_dataset(
        f"openx/{builder.name}",
        loader="openx",
        params={"version": "1.0.0", "num_shards": {"train": len(shards)}, "base_url": folder.as_uri()},
    )
    ours = datasets_hub.load(f"openx/{builder.name}")[:]
    reference = tfds.builder_from_directory(str(folder)).as_dataset(split="train", shuffle_files=False)
    row = 0
    for episode in tfds.as_numpy(reference):
        steps = list(episode["steps"])
        for t, step in enumerate(steps):
            obs = ours["observation"]
            assert np.array_equal(obs["image"][row].numpy(), step["observation"]["image"]), (row, "image")
            assert np.array_equal(obs["wrist_image"][row].numpy(), step["observation"]["wrist_image"])
            assert np.array_equal(obs["state"][row].numpy(), step["observation"]["state"])
            assert np.array_equal(ours["action"][row].numpy(), step["action"])
            assert float(ours["next", "reward"][row, 0]) == float(step["reward"])
            assert float(ours["next", "discount"][row, 0]) == float(step["discount"])
            assert decode_text(ours["language_instruction"][row])[0] == step["language_instruction"].decode()
            path = decode_text(ours["info", "episode_metadata", "file_path"][row])[0]
            assert path == episode["episode_metadata"]["file_path"].decode()
            last = t == len(steps) - 1
            if not last:  # the next observation is the next step's
                nxt = steps[t + 1]["observation"]["image"]
                assert np.array_equal(ours["next", "observation", "image"][row].numpy(), nxt)
            assert bool(ours["next", "terminated"][row, 0]) == (last and bool(step["is_terminal"]))
            assert bool(ours["next", "truncated"][row, 0]) == (last and not bool(step["is_terminal"]))
            row += 1
    assert row == len(ours) == sum(EPISODES)
