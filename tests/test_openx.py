"""The Open X-Embodiment loader on RLDS shards written here in the exact TFDS layout.

The fixture follows fractal20220817_data's schema (``features.json`` / ``dataset_info.json`` as
TFDS writes them, 1024 train shards declared): two camera images (one JPEG, one PNG) at tiny
resolution, a state vector, a language instruction and embedding in the observation, a dict action,
reward, discount, the RLDS flags, a step-level ``language_instruction`` and ``episode_metadata``.
Every value is a function of the global step ``g`` (and episode ``e``), so a row tells where it came
from; the expected TED rows are built by a plain per-row loop. Examples and TFRecord framing are
encoded by ``tests/test_tfrecord.py``'s own encoder (protobuf wire format, masked CRC-32C).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from test_tfrecord import encode_example, write_tfrecord

from datasets_hub.errors import InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, LoaderContext
from datasets_hub.loaders.openx import UNKNOWN_KEY, OpenXLoader, decode_text, parse_features

DATASET, VERSION, NUM_SHARDS = "fractal20220817_data", "0.1.0", 1024
PREFIX = f"gresearch/robotics/{DATASET}/{VERSION}"
# shard -> episodes (length, ends with is_terminal)
SHARDS = {0: [(3, True), (5, False)], 1: [(4, True), (1, False)]}
JPEG_HW, PNG_HW, STATE, EMB = (8, 8), (4, 6), 7, 4


def _tensor(shape, dtype):
    return {
        "pythonClassName": "tensorflow_datasets.core.features.tensor_feature.Tensor",
        "tensor": {"shape": {"dimensions": [str(d) for d in shape]}, "dtype": dtype, "encoding": "none"},
    }


def _scalar(dtype):
    return {
        "pythonClassName": "tensorflow_datasets.core.features.scalar.Scalar",
        "tensor": {"shape": {}, "dtype": dtype, "encoding": "none"},
    }


def _image(hw, fmt):
    return {
        "pythonClassName": "tensorflow_datasets.core.features.image_feature.Image",
        "image": {"shape": {"dimensions": [str(hw[0]), str(hw[1]), "3"]}, "dtype": "uint8", "encodingFormat": fmt},
    }


def _dict(features):
    return {
        "pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
        "featuresDict": {"features": features},
    }


TEXT = {"pythonClassName": "tensorflow_datasets.core.features.text_feature.Text", "text": {}}


def features_json(extra_steps=None):
    steps = {
        "action": _dict(
            {
                "world_vector": _tensor([3], "float32"),
                "rotation_delta": _tensor([3], "float32"),
                "gripper_closedness_action": _tensor([1], "float32"),
                "terminate_episode": _tensor([3], "int32"),
            }
        ),
        "is_first": _scalar("bool"),
        "is_last": _scalar("bool"),
        "is_terminal": _scalar("bool"),
        "reward": _scalar("float32"),
        "discount": _scalar("float32"),
        "language_instruction": TEXT,
        "observation": _dict(
            {
                "image": _image(JPEG_HW, "jpeg"),
                "wrist_image": _image(PNG_HW, "png"),
                "base_pose_tool_reached": _tensor([STATE], "float32"),
                "natural_language_embedding": _tensor([EMB], "float32"),
                "natural_language_instruction": TEXT,
            }
        ),
        **(extra_steps or {}),
    }
    return _dict(
        {
            "steps": {
                "pythonClassName": "tensorflow_datasets.core.features.dataset_feature.Dataset",
                "sequence": {"feature": _dict(steps), "length": "-1"},
            },
            "episode_metadata": _dict({"file_path": TEXT, "episode_id": _scalar("int64")}),
        }
    )


def dataset_info(num_shards=NUM_SHARDS):
    lengths = [len(SHARDS.get(i, [])) for i in range(num_shards)]
    return {
        "name": DATASET,
        "version": VERSION,
        "fileFormat": "tfrecord",
        "description": "fixture",
        "splits": [
            {
                "name": "train",
                "numBytes": "1",
                "shardLengths": [str(x) for x in lengths],
                "filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}",
            }
        ],
    }


# ---------------------------------------------------------------------------------------- values
def jpeg_colour(g):
    return np.array([(20 * g + 10) % 240, 90, 200 - (5 * g) % 150], dtype=np.uint8)


def png_pixels(g):
    y, x, c = np.meshgrid(np.arange(PNG_HW[0]), np.arange(PNG_HW[1]), np.arange(3), indexing="ij")
    return ((7 * g + 6 * y + x + 50 * c) % 256).astype(np.uint8)


def encode_png(array):
    out = io.BytesIO()
    Image.fromarray(array).save(out, format="PNG")
    return out.getvalue()


def jpeg_source(g):
    """Step g's colour with a texture: on flat images every IDCT agrees; on texture the fast IDCT
    TFDS uses and Pillow's accurate one differ (the defect this fixture can see)."""
    y, x = np.mgrid[0 : JPEG_HW[0], 0 : JPEG_HW[1]]
    texture = (((x * 5 + y * 3 + g) % 7) - 3) * 9
    return np.clip(jpeg_colour(g).astype(int) + texture[..., None], 0, 255).astype(np.uint8)


def encode_jpeg(g):
    out = io.BytesIO()
    Image.fromarray(jpeg_source(g)).save(out, format="JPEG", quality=95)
    return out.getvalue()


def tfds_jpeg(g):
    """What TFDS gives for step g's JPEG: libjpeg-turbo with TensorFlow's fast IDCT (checked against
    TensorFlow itself in tests/upstream/test_upstream_openx.py)."""
    import simplejpeg

    return simplejpeg.decode_jpeg(encode_jpeg(g), colorspace="RGB", fastdct=True, fastupsample=False)


def step_values(g, e, t, length, terminal):
    last = t == length - 1
    d3 = np.arange(3)
    return {
        "steps/observation/image": encode_jpeg(g),
        "steps/observation/wrist_image": encode_png(png_pixels(g)),
        "steps/observation/base_pose_tool_reached": g + 0.01 * np.arange(STATE),
        "steps/observation/natural_language_embedding": -g - 0.1 * np.arange(EMB),
        "steps/observation/natural_language_instruction": f"episode {e} step {t}",
        "steps/action/world_vector": -(g + 0.1 * d3),
        "steps/action/rotation_delta": 0.5 * g + d3,
        "steps/action/gripper_closedness_action": np.array([float(g)]),
        "steps/action/terminate_episode": np.array([g, -g, int(last)]),
        "steps/reward": np.array([10.0 * g + last]),
        "steps/discount": np.array([1 - g / 1000]),
        "steps/is_first": np.array([t == 0]),
        "steps/is_last": np.array([last]),
        "steps/is_terminal": np.array([last and terminal]),
        "steps/language_instruction": f"do task {e} é",
    }


def episode_example(first_g, e, length, terminal):
    steps = [step_values(first_g + t, e, t, length, terminal) for t in range(length)]
    features = {}
    for name in steps[0]:
        values = [s[name] for s in steps]
        if isinstance(values[0], (bytes, str)):
            features[name] = list(values)
        else:
            array = np.concatenate([np.asarray(v).reshape(-1) for v in values])
            features[name] = array.astype(np.float32) if array.dtype.kind == "f" else array.astype(np.int64)
    features["episode_metadata/file_path"] = [f"/data/ep{e}.h5"]
    features["episode_metadata/episode_id"] = np.array([1000 + e])
    return encode_example(features)


def write_release(root: Path, num_shards=NUM_SHARDS, features=None) -> dict[str, Path]:
    """The release directory; returns {relative path under gresearch/robotics: file}."""
    folder = root / PREFIX
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "features.json").write_text(json.dumps(features or features_json(), indent=1))
    (folder / "dataset_info.json").write_text(json.dumps(dataset_info(num_shards), indent=1))
    g = e = 0
    for shard, episodes in SHARDS.items():
        records = []
        for length, terminal in episodes:
            records.append(episode_example(g, e, length, terminal))
            g, e = g + length, e + 1
        write_tfrecord(folder / f"{DATASET}-train.tfrecord-{shard:05d}-of-{num_shards:05d}", records)
    return {str(p.relative_to(root)): p for p in sorted(folder.iterdir())}


def expected_rows(shards, final_step="transition"):
    """Per-row truth by a plain loop over (shard, episode, step)."""
    g_of, g = {}, 0
    for shard, episodes in SHARDS.items():
        for i, (length, _) in enumerate(episodes):
            g_of[(shard, i)] = g
            g += length
    rows, episode, e_global = [], 0, {k: n for n, k in enumerate(g_of)}
    for shard in shards:
        for i, (length, terminal) in enumerate(SHARDS[shard]):
            g0, e = g_of[(shard, i)], e_global[(shard, i)]
            n = length if final_step == "transition" else length - 1
            for t in range(n):
                last = t == n - 1
                rows.append(
                    {
                        "g": g0 + t,
                        "e": e,
                        "t": t,
                        "episode": episode,
                        "next_g": None if (final_step == "transition" and last) else g0 + t + 1,
                        "terminated": last and terminal,
                        "truncated": last and not terminal,
                        "last_step": t == length - 1,
                    }
                )
            episode += n > 0
    return rows


def check_rows(td, rows):
    assert td.batch_size[0] == len(rows)
    for r, row in enumerate(rows):
        g, e, nxt = row["g"], row["e"], row["next_g"]
        obs = td["observation"]
        np.testing.assert_array_equal(
            obs["base_pose_tool_reached"][r].numpy(), (g + 0.01 * np.arange(STATE)).astype(np.float32)
        )
        np.testing.assert_array_equal(obs["wrist_image"][r].numpy(), png_pixels(g))
        jpeg = tfds_jpeg(g)
        np.testing.assert_array_equal(obs["image"][r].numpy(), jpeg)  # TFDS's decoding, exactly
        assert np.abs(jpeg.astype(int) - jpeg_source(g)).max() <= 12  # and it is step g's image
        np.testing.assert_array_equal(
            obs["natural_language_embedding"][r].numpy(), (-g - 0.1 * np.arange(EMB)).astype(np.float32)
        )
        assert decode_text(obs["natural_language_instruction"][r]) == [f"episode {e} step {row['t']}"]
        nobs = td["next", "observation"]
        if nxt is None:
            assert torch.isnan(nobs["base_pose_tool_reached"][r]).all()
            assert (nobs["wrist_image"][r] == 0).all() and (nobs["natural_language_instruction"][r] == 0).all()
            assert td[UNKNOWN_KEY][r].item()
        else:
            np.testing.assert_array_equal(
                nobs["base_pose_tool_reached"][r].numpy(), (nxt + 0.01 * np.arange(STATE)).astype(np.float32)
            )
            np.testing.assert_array_equal(nobs["wrist_image"][r].numpy(), png_pixels(nxt))
            assert not td[UNKNOWN_KEY][r].item()
        act = td["action"]
        np.testing.assert_array_equal(act["world_vector"][r].numpy(), (-(g + 0.1 * np.arange(3))).astype(np.float32))
        np.testing.assert_array_equal(act["rotation_delta"][r].numpy(), (0.5 * g + np.arange(3)).astype(np.float32))
        assert act["gripper_closedness_action"][r].tolist() == [float(g)]
        assert act["terminate_episode"][r].tolist() == [g, -g, int(row["last_step"])]
        assert act["terminate_episode"].dtype == torch.int32
        assert td["next", "reward"][r].tolist() == [np.float32(10.0 * g + row["last_step"])]
        assert td["next", "discount"][r].tolist() == [np.float32(1 - g / 1000)]
        assert td["next", "terminated"][r].item() == row["terminated"], r
        assert td["next", "truncated"][r].item() == row["truncated"], r
        assert td["episode"][r].item() == row["episode"]
        assert decode_text(td["language_instruction"][r]) == [f"do task {e} é"]
        assert decode_text(td["info", "episode_metadata", "file_path"][r]) == [f"/data/ep{e}.h5"]
        assert td["info", "episode_metadata", "episode_id"][r].item() == 1000 + e


# ---------------------------------------------------------------------------------------- through the hub
def test_load_one_shard_from_local_mirror_row_by_row(tmp_path, monkeypatch):
    from http_server import serve_files

    import datasets_hub

    files = write_release(tmp_path / "mirror")
    with serve_files({path: file.read_bytes() for path, file in files.items()}) as server:
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_OPENX", server.base_url)
        rb = datasets_hub.load(f"openx/{DATASET}", shards=[0], batch_size=4)
        shard1 = f"{PREFIX}/{DATASET}-train.tfrecord-00001-of-01024"
        assert server.count(f"{PREFIX}/{DATASET}-train.tfrecord-00000-of-01024") == 1
        assert server.count(shard1) == 0  # only the asked-for shard is fetched
        again = datasets_hub.load(f"openx/{DATASET}", shards=[0])  # cached build, no new request
        assert len(again) == len(rb) and server.count(f"{PREFIX}/features.json") == 1
    data = rb[:]
    check_rows(data, expected_rows([0]))
    assert data["observation", "image"].dtype == torch.uint8
    assert data["observation", "image"].shape[1:] == (*JPEG_HW, 3)
    # a sampled row is a row of the data: the state vector says which step it is
    torch.manual_seed(0)
    batch = rb.sample()
    g = batch["observation", "base_pose_tool_reached"][:, 0].round().long()
    row = torch.tensor([[r["g"] for r in expected_rows([0])].index(int(x)) for x in g])
    assert torch.equal(batch["action", "world_vector"], data["action", "world_vector"][row])
    card = datasets_hub.info(f"openx/{DATASET}", shards=[0])
    notes = card.notes
    assert notes["episodes"] == 2 and notes["episode_ends"] == {"terminal": 1, "truncated": 1}
    assert notes["next_observation_unknown_rows"] == 2
    assert notes["records_per_shard"] == {f"{DATASET}-train.tfrecord-00000-of-01024": 2}
    assert "shard_length_mismatch" not in notes and "flag_anomalies" not in notes
    assert notes["text_keys"]["language_instruction"] == 512


def test_bad_crc_in_a_served_shard_names_the_file(tmp_path, monkeypatch):
    from http_server import serve_files

    import datasets_hub

    files = write_release(tmp_path / "mirror")
    served = {path: file.read_bytes() for path, file in files.items()}
    name = f"{DATASET}-train.tfrecord-00000-of-01024"
    raw = bytearray(served[f"{PREFIX}/{name}"])
    raw[40] ^= 0xFF  # inside the first record's data
    served[f"{PREFIX}/{name}"] = bytes(raw)
    with serve_files(served) as server:
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_OPENX", server.base_url)
        with pytest.raises(LoaderError, match=rf"{name}.*offset 0.*CRC"):
            datasets_hub.load(f"openx/{DATASET}", shards=[0])


# ---------------------------------------------------------------------------------------- loader directly
def spec_for(files, **params):
    params = {"version": VERSION, "num_shards": {"train": NUM_SHARDS}, **params}
    return DatasetSpec(id=f"openx/{DATASET}", loader="openx", params=params)


def local_files(files):
    return {path.split("gresearch/robotics/", 1)[1]: file for path, file in files.items()}


def convert(files, chunk_rows=1000, **params):
    spec = spec_for(files, **params)
    ctx = LoaderContext(chunk_rows=chunk_rows)
    chunks = list(OpenXLoader().episodes(spec, local_files(files), ctx))
    return chunks, ctx.notes


@pytest.mark.parametrize("chunk_rows", [1, 6, 1000])
def test_shard_order_and_chunks_of_whole_episodes(tmp_path, chunk_rows):
    files = write_release(tmp_path)
    chunks, notes = convert(files, chunk_rows=chunk_rows, shards=[1, 0])
    td = torch.cat(chunks)
    check_rows(td, expected_rows([1, 0]))
    for chunk in chunks:  # whole episodes: each id's rows all in one chunk
        for ep in chunk["episode"].unique():
            assert (chunk["episode"] == ep).sum() == (td["episode"] == ep).sum()
        assert chunk.batch_size[0] <= chunk_rows or chunk["episode"].unique().numel() == 1
    assert notes["episodes"] == 4


def test_final_step_observation_follows_rlds_strictly(tmp_path):
    files = write_release(tmp_path)
    chunks, notes = convert(files, shards=[0, 1], final_step="observation")
    td = torch.cat(chunks)
    rows = expected_rows([0, 1], final_step="observation")
    check_rows(td, rows)
    assert not td[UNKNOWN_KEY].any()
    assert notes["skipped_episodes"] == {"no_steps": 0, "one_step_with_final_step_observation": 1}
    assert notes["episodes"] == 3 and notes["next_observation_unknown_rows"] == 0


def test_check_loader_contract(tmp_path):
    from datasets_hub.testing import check_loader

    files = write_release(tmp_path)
    summary = check_loader(OpenXLoader, spec_for(files, shards=[0, 1]), local_files(files))
    assert summary


def test_resources_follow_the_release_layout():
    loader = OpenXLoader()
    spec = DatasetSpec(
        id=f"openx/{DATASET}",
        loader="openx",
        params={"version": VERSION, "num_shards": {"train": 1024}, "shards": [3, 1]},
    )
    got = [(r.name, r.urls) for r in loader.resources(spec)]
    base = f"https://storage.googleapis.com/{PREFIX}"
    assert got == [
        (f"{DATASET}/{VERSION}/dataset_info.json", (f"{base}/dataset_info.json",)),
        (f"{DATASET}/{VERSION}/features.json", (f"{base}/features.json",)),
        (
            f"{DATASET}/{VERSION}/{DATASET}-train.tfrecord-00003-of-01024",
            (f"{base}/{DATASET}-train.tfrecord-00003-of-01024",),
        ),
        (
            f"{DATASET}/{VERSION}/{DATASET}-train.tfrecord-00001-of-01024",
            (f"{base}/{DATASET}-train.tfrecord-00001-of-01024",),
        ),
    ]
    spec.params.update(split="test", num_shards={"train": 8, "test": 2}, shards=None, base_url="gs://my-bucket/copy/")
    assert [r.urls[0] for r in loader.resources(spec)][-2:] == [
        f"https://storage.googleapis.com/my-bucket/copy/{DATASET}-test.tfrecord-0000{i}-of-00002" for i in (0, 1)
    ]
    assert (
        len(loader.resources(DatasetSpec(id="openx/x", loader="openx", params={"version": "1", "num_shards": 5}))) == 7
    )


@pytest.mark.parametrize(
    "params, match",
    [
        ({"shard": [0]}, "(?i)did you mean .shards."),
        ({"shards": [1024]}, r"out of range.*1024 shards \(0..1023\)"),
        ({"shards": [0, 0]}, "twice"),
        ({"shards": []}, "non-empty list"),
        ({"split": "tset"}, "no split 'tset'"),
        ({"num_shards": None}, "num_shards=<n>.*shardLengths"),
        ({"version": None}, "version="),
        ({"final_step": "obs"}, "final_step must be one of"),
        ({"text_width": 0}, "text_width must be a positive int"),
    ],
)
def test_bad_parameters_teach(params, match):
    spec = DatasetSpec(
        id=f"openx/{DATASET}", loader="openx", params={"version": VERSION, "num_shards": {"train": 1024}, **params}
    )
    with pytest.raises(InvalidParameter, match=match):
        OpenXLoader().check_params(spec)


def test_catalogue_entries_resolve():
    from datasets_hub.catalogue import resolve

    spec = resolve(f"openx/{DATASET}", shards=[0])
    assert spec.params["version"] == VERSION and spec.params["num_shards"] == {"train": 1024}
    assert [r.name for r in OpenXLoader().resources(spec)][-1].endswith("-00000-of-01024")
    for dataset_id, split_count in (
        ("openx/bridge", {"test": 512, "train": 1024}),
        ("openx/language_table", {"train": 1024}),
    ):
        spec = resolve(dataset_id)
        assert spec.params["num_shards"] == split_count
        OpenXLoader().check_params(spec)


def test_shard_count_and_record_count_are_checked(tmp_path):
    files = write_release(tmp_path, num_shards=4)
    with pytest.raises(LoaderError, match=r"lists 4 'train' shards.*num_shards=1024.*num_shards=4"):
        convert(files, shards=[0])
    # dataset_info says shard 1 holds 2 episodes; rewrite it with 3 records to see the mismatch noted
    folder = tmp_path / PREFIX
    info = dataset_info(4)
    info["splits"][0]["shardLengths"][1] = "3"
    (folder / "dataset_info.json").write_text(json.dumps(info))
    _, notes = convert(files, num_shards=4, shards=[1])
    assert notes["shard_length_mismatch"] == {
        f"{DATASET}-train.tfrecord-00001-of-00004": {"records": 2, "dataset_info": 3}
    }


def test_other_feature_kinds(tmp_path):
    """uint16 and float32 (depth) images, a bytes-encoded tensor, a ragged step feature, a video."""
    depth = {
        "pythonClassName": "tensorflow_datasets.core.features.image_feature.Image",
        "image": {"shape": {"dimensions": ["2", "3", "1"]}, "dtype": "float32", "encodingFormat": "png"},
    }
    deep = {
        "pythonClassName": "tensorflow_datasets.core.features.image_feature.Image",
        "image": {"shape": {"dimensions": ["2", "3", "1"]}, "dtype": "uint16", "encodingFormat": "png"},
    }
    raw = {
        "pythonClassName": "tensorflow_datasets.core.features.tensor_feature.Tensor",
        "tensor": {"shape": {"dimensions": ["2"]}, "dtype": "float64", "encoding": "bytes"},
    }
    ragged = _tensor([-1], "float32")
    video = {"pythonClassName": "tensorflow_datasets.core.features.video_feature.Video", "video": {}}
    features = features_json(
        {"observation_extra": _dict({"depth": depth, "deep": deep}), "raw": raw, "points": ragged, "clip": video}
    )
    leaves = {leaf.name: leaf.kind for leaf in parse_features(features)}
    assert leaves["steps/raw"] == "tensor" and leaves["steps/clip"] == "skip"
    files = write_release(tmp_path, features=features)
    # add the extra features' values to shard 1's records by rewriting it
    folder = tmp_path / PREFIX
    g, e, records = 8, 2, []
    from datasets_hub.loaders.tf_example import parse_example
    from datasets_hub.loaders.tfrecord import iter_records

    for (length, _terminal), (_, rec) in zip(
        SHARDS[1], iter_records(folder / f"{DATASET}-train.tfrecord-00001-of-01024"), strict=True
    ):
        ex = parse_example(rec)
        ex["steps/observation_extra/depth"] = [
            encode_png(np.full((2, 3), g + t + 0.25, "<f4").view(np.uint8).reshape(2, 3, 4)) for t in range(length)
        ]
        ex["steps/observation_extra/deep"] = [
            encode_png(np.full((2, 3), 60000 + g + t, np.uint16)) for t in range(length)
        ]
        ex["steps/raw"] = [np.array([g + t, -1.5], "<f8").tobytes() for t in range(length)]
        ex["steps/points"] = np.zeros(0, np.float32)
        records.append(encode_example(ex))
        g, e = g + length, e + 1
    write_tfrecord(folder / f"{DATASET}-train.tfrecord-00001-of-01024", records)
    chunks, notes = convert(files, shards=[1])
    td = torch.cat(chunks)
    assert td["observation_extra", "depth"][:, 0, 0, 0].tolist() == [8.25, 9.25, 10.25, 11.25, 12.25]
    assert td["observation_extra", "deep"].dtype == torch.int32
    assert td["observation_extra", "deep"][:, 1, 2, 0].tolist() == [60008, 60009, 60010, 60011, 60012]
    assert td["raw"].dtype == torch.float64 and td["raw"][:, 0].tolist() == [8, 9, 10, 11, 12]
    assert notes["widened_dtypes"] == {"steps/observation_extra/deep": "uint16 -> int32"}
    assert set(notes["skipped_keys"]) == {"steps/points", "steps/clip"}


def test_text_longer_than_text_width_says_which_width_to_use(tmp_path):
    files = write_release(tmp_path)
    with pytest.raises(LoaderError, match=r"language_instruction.*text_width=4; load with text_width="):
        convert(files, shards=[0], text_width=4)


def test_loader_declares_contract():
    from datasets_hub.testing import check_loader

    check_loader(OpenXLoader)
    assert OpenXLoader.name == "openx" and OpenXLoader.requires == ("PIL", "google.protobuf")


def test_jpeg_decoded_as_tfds_by_default_pillow_on_request(tmp_path):
    """TFDS decodes JPEG with TensorFlow's fast IDCT; Pillow's accurate IDCT gives other pixels on
    textured images. The default must give TFDS's pixels; jpeg_decoder='pillow' Pillow's; the card
    says which ran."""
    files = write_release(tmp_path / "mirror")
    rows = expected_rows([0])
    default, notes = convert(files, shards=[0])
    pillow, pillow_notes = convert(files, shards=[0], jpeg_decoder="pillow")
    got, got_pillow = torch.cat(default)["observation", "image"], torch.cat(pillow)["observation", "image"]
    differs = 0
    for r, row in enumerate(rows):
        by_pillow = np.asarray(Image.open(io.BytesIO(encode_jpeg(row["g"]))).convert("RGB"))
        np.testing.assert_array_equal(got[r].numpy(), tfds_jpeg(row["g"]))
        np.testing.assert_array_equal(got_pillow[r].numpy(), by_pillow)
        differs += not np.array_equal(by_pillow, tfds_jpeg(row["g"]))
    assert differs > 0  # the fixture does tell the two decoders apart
    assert "fast IDCT" in notes["jpeg_decoder"] and "accurate IDCT" in pillow_notes["jpeg_decoder"]
    with pytest.raises(InvalidParameter, match="jpeg_decoder must be one of"):
        convert(files, shards=[0], jpeg_decoder="turbo")
