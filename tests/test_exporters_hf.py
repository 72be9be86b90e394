"""export(format='hf'): parquet shards with datasets features and a card, holding every key exactly."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import InvalidParameter
from datasets_hub.exporters import export_build

from fixtures.export_builds import LENGTHS, chunk, make_build


def _read_back(out):
    """Every column of every shard, in order, as numpy ``[rows, *shape]`` (images decoded)."""
    import io

    shards = sorted((out / "data").glob("train-*.parquet"))
    tables = [pq.read_table(p) for p in shards]
    meta = json.loads(tables[0].schema.metadata[b"datasets_hub"])["columns"]
    values = {}
    for name in tables[0].column_names:
        column = [v for t in tables for v in t.column(name).to_pylist()]
        if name in meta and isinstance(column[0], dict):
            column = [np.array(Image.open(io.BytesIO(v["bytes"]))) for v in column]
        array = np.array(column)
        if name in meta:
            array = array.reshape(len(array), *meta[name]["shape"]).astype(meta[name]["dtype"])
        values[name] = array
    return values, meta, shards


def test_every_key_and_every_next_observation_comes_back_exactly(tmp_path):
    build = make_build([chunk()])
    out = export_build(build, tmp_path / "hf", "hf")
    values, meta, _ = _read_back(out)
    expected = DatasetStorage(build)[:]
    for name, column in meta.items():
        np.testing.assert_array_equal(values[name], expected.get(tuple(column["key"])).numpy(), err_msg=name)
    # the final next observation of each episode is held too
    assert {"next.observation", "next.pixels", "next.terminated", "next.truncated"} <= set(meta)
    np.testing.assert_array_equal(values["episode_index"], expected.get("episode").numpy())
    np.testing.assert_array_equal(values["step"], expected.get("step").numpy())


def test_a_build_with_compressed_frames_exports_the_frames_it_serves(tmp_path):
    from datasets_hub.build.frames import FrameCodec

    build = make_build([chunk(image_hw=(16, 24))], frames=FrameCodec("jpeg", 90))
    out = export_build(build, tmp_path / "hf", "hf")
    values, _, _ = _read_back(out)
    expected = DatasetStorage(build)[:]
    np.testing.assert_array_equal(values["pixels"], expected.get("pixels").numpy())
    np.testing.assert_array_equal(values["next.pixels"], expected.get(("next", "pixels")).numpy())


def test_features_and_card(tmp_path):
    out = export_build(make_build([chunk()]), tmp_path / "hf", "hf", license="MIT")
    schema = pq.read_schema(next((out / "data").glob("*.parquet")))
    features = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
    assert features["pixels"] == {"_type": "Image"}
    assert features["observation"] == {
        "feature": {"dtype": "float32", "_type": "Value"},
        "length": 3,
        "_type": "Sequence",
    }
    assert features["next.reward"] == {"dtype": "float32", "_type": "Value"}
    assert features["next.terminated"] == {"dtype": "bool", "_type": "Value"}
    card = (out / "README.md").read_text()
    assert "license: mit" in card and "path: data/train-*.parquet" in card
    assert f"{sum(LENGTHS)} transitions in {len(LENGTHS)} episodes" in card
    assert "| `next.pixels` | `next/pixels` (observation at t + 1) |" in card


def test_shards_split_between_episodes_and_are_numbered(tmp_path):
    build = make_build([chunk((3, 3, 3), image=False)])
    out = export_build(build, tmp_path / "hf", "hf", shard_mb=1e-6)
    _, _, shards = _read_back(out)
    assert [p.name for p in shards] == [f"train-{i:05d}-of-00003.parquet" for i in range(3)]
    assert [pq.read_metadata(p).num_rows for p in shards] == [3, 3, 3]


def test_a_multi_dimensional_array_is_an_array_feature(tmp_path):
    td = chunk((2, 3), image=False)
    td.set(("info", "grid"), torch.arange(5 * 2 * 3, dtype=torch.int16).reshape(5, 2, 3))
    out = export_build(make_build([td]), tmp_path / "hf", "hf")
    values, _, _ = _read_back(out)
    schema = pq.read_schema(next((out / "data").glob("*.parquet")))
    features = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
    assert features["info.grid"] == {"shape": [2, 3], "dtype": "int16", "_type": "Array2D"}
    np.testing.assert_array_equal(values["info.grid"], td.get(("info", "grid")).numpy())


def test_a_key_level_with_a_dot_is_refused_before_writing(tmp_path):
    td = chunk((3,), image=False)
    td.set(("info", "a.b"), torch.zeros(3))
    with pytest.raises(InvalidParameter, match=r"a\.b"):
        export_build(make_build([td]), tmp_path / "hf", "hf")
    assert not (tmp_path / "hf").exists() and not (tmp_path / "hf.incomplete").exists()
