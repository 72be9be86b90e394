"""export(format='rlds'): a TFDS builder directory of RLDS episodes, read back by our TFRecord reader and
the Open X (RLDS) loader."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import datasets_hub as dh
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import InvalidParameter
from datasets_hub.exporters import export_build
from datasets_hub.loaders.formats.tf_example import parse_example
from datasets_hub.loaders.formats.tfrecord import iter_records

from fixtures.export_builds import LENGTHS, chunk, make_build

pytest.importorskip("google_crc32c")
pytest.importorskip("google.protobuf")


def _export(tmp_path, td, **options):
    build = make_build([td])
    out = export_build(build, tmp_path / "fake_export" / "1.0.0", "rlds", **options)
    return build, out


def test_records_follow_rlds_with_the_final_observation_as_a_last_step(tmp_path):
    build, out = _export(tmp_path, chunk(image=False))
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["name"] == "fake_export" and info["splits"][0]["shardLengths"] == ["3"]
    shard = out / "fake_export-train.tfrecord-00000-of-00001"
    examples = [parse_example(r) for _, r in iter_records(shard)]
    expected = DatasetStorage(build)[:]
    start = 0
    for e, (example, length) in enumerate(zip(examples, LENGTHS, strict=True)):
        rows = slice(start, start + length)
        obs = example["steps/observation"].reshape(length + 1, 3)
        np.testing.assert_array_equal(obs[:-1], expected["observation"][rows].numpy())
        np.testing.assert_array_equal(obs[1:], expected["next", "observation"][rows].numpy())
        np.testing.assert_array_equal(example["steps/action"].reshape(-1, 2)[:-1], expected["action"][rows].numpy())
        np.testing.assert_array_equal(example["steps/reward"][:-1], expected["next", "reward"][rows].numpy().ravel())
        np.testing.assert_array_equal(example["steps/info/step_code"][:-1], expected["info", "step_code"][rows].numpy())
        terminated = bool(expected["next", "terminated"][start + length - 1])
        assert example["steps/is_first"].tolist() == [1] + [0] * length
        assert example["steps/is_last"].tolist() == [0] * length + [1]
        assert example["steps/is_terminal"].tolist() == [0] * length + [int(terminated)]
        assert example["episode_metadata/episode_id"].tolist() == [e]
        start += length


def test_round_trip_through_the_rlds_loader(tmp_path, request):
    from datasets_hub import catalogue

    build, out = _export(tmp_path, chunk())
    dh.register_dataset("openx/fake_export", params={"version": "1.0.0", "num_shards": 1})
    request.addfinalizer(lambda: catalogue.unregister_dataset("openx/fake_export"))
    rb = dh.load("openx/fake_export", base_url=out.as_uri(), final_step="observation")
    got, expected = rb.storage[:], DatasetStorage(build)[:]
    pairs = {
        "observation": ("observation", "observation"),
        ("next", "observation"): ("next", "observation", "observation"),
        "pixels": ("observation", "pixels"),
        ("next", "pixels"): ("next", "observation", "pixels"),
        "action": "action",
        ("next", "reward"): ("next", "reward"),
        ("next", "terminated"): ("next", "terminated"),
        ("next", "truncated"): ("next", "truncated"),
        ("info", "step_code"): ("info", "info", "step_code"),  # the openx loader nests reserved names
        "step": "step",
        "episode": "episode",
    }
    for ours, theirs in pairs.items():
        assert torch.equal(got.get(theirs), expected.get(ours)), ours


def test_float64_values_travel_as_bytes_exactly(tmp_path):
    td = chunk((2, 3), image=False)
    td.set(("info", "precise"), torch.arange(5, dtype=torch.float64) / 3 + 1e-12)
    _, out = _export(tmp_path, td)
    features = json.loads((out / "features.json").read_text())
    steps = features["featuresDict"]["features"]["steps"]["sequence"]["feature"]["featuresDict"]["features"]
    assert steps["info"]["featuresDict"]["features"]["precise"]["tensor"]["encoding"] == "bytes"
    example = parse_example(next(iter_records(out / "fake_export-train.tfrecord-00000-of-00001"))[1])
    values = np.frombuffer(b"".join(example["steps/info/precise"][:-1]), dtype="<f8")
    np.testing.assert_array_equal(values, (torch.arange(2, dtype=torch.float64) / 3 + 1e-12).numpy())


def test_bad_options_are_refused(tmp_path):
    build = make_build([chunk(image=False)])
    with pytest.raises(InvalidParameter, match="TFDS dataset name"):
        export_build(build, tmp_path / "x", "rlds", name="Bad-Name")
    with pytest.raises(InvalidParameter, match=r"1\.0\.0"):
        export_build(build, tmp_path / "x", "rlds", version="1")
    assert not (tmp_path / "x").exists()
