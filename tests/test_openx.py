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

import numpy as np
import pytest
import torch
from PIL import Image

from datasets_hub.errors import InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, LoaderContext
from datasets_hub.loaders.openx.loader import UNKNOWN_KEY, OpenXLoader, parse_features

from fixtures.openx import (
    DATASET,
    JPEG_HW,
    NUM_SHARDS,
    PREFIX,
    SHARDS,
    VERSION,
    _dict,
    _tensor,
    check_rows,
    dataset_info,
    encode_jpeg,
    encode_png,
    expected_rows,
    features_json,
    tfds_jpeg,
    write_release,
)
from fixtures.tfrecord import encode_example, write_tfrecord


# ---------------------------------------------------------------------------------------- through the hub
def test_load_one_shard_from_local_mirror_row_by_row(tmp_path, monkeypatch):
    import datasets_hub

    from fixtures.http_server import serve_files

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
    import datasets_hub

    from fixtures.http_server import serve_files

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
    from datasets_hub.loaders.formats.tf_example import parse_example
    from datasets_hub.loaders.formats.tfrecord import iter_records

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


def test_camera_keys_stored_compressed_read_back_exactly(tmp_path, monkeypatch):
    """frames="png" (datasets_hub/build/frames.py): the writer compresses the loader's image keys, no loader code
    involved; images under 8 pixels a side stay raw; every value reads back as the raw build's."""
    import datasets_hub

    from fixtures.http_server import serve_files

    files = write_release(tmp_path / "mirror")
    with serve_files({path: file.read_bytes() for path, file in files.items()}) as server:
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_OPENX", server.base_url)
        raw = datasets_hub.load(f"openx/{DATASET}", shards=[0])
        png = datasets_hub.load(f"openx/{DATASET}", shards=[0], frames="png")
    assert list(png.storage.manifest["layout"]["frames"]) == ["observation/image"]  # wrist_image is 4x6: raw
    a, b = raw[:], png[:]
    for key in a.keys(include_nested=True, leaves_only=True):
        assert torch.equal(a[key], b[key]) or (
            a[key].is_floating_point() and torch.allclose(a[key], b[key], equal_nan=True)
        )
