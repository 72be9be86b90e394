"""export(format='lerobot'): a LeRobot v3.0 folder that our LeRobot loader reads back value for value."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

import datasets_hub as dh
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import InvalidParameter
from datasets_hub.exporters import export_build
from datasets_hub.loaders.formats.text import decode_text

from fixtures.export_builds import LENGTHS, chunk, make_build


@pytest.fixture
def exported(tmp_path):
    build = make_build([chunk()])
    out = export_build(build, tmp_path / "lerobot", "lerobot", fps=5, task="balance the pole")
    return build, out


def test_round_trip_through_the_lerobot_loader_gives_every_value_back(exported):
    build, out = exported
    expected = DatasetStorage(build)[:]
    got = dh.load("lerobot/local/export", root=str(out)).storage[:]
    n = expected.batch_size[0]
    assert got.batch_size[0] == n == sum(LENGTHS)
    same = {  # build key -> key the LeRobot loader gives it (module docstring of exporters.lerobot)
        "observation": ("observation", "state"),
        "pixels": ("observation", "pixels"),
        "action": "action",
        ("next", "reward"): ("next", "reward"),
        ("next", "terminated"): ("next", "terminated"),
        ("next", "truncated"): ("next", "truncated"),
        "episode": "episode",
        "step": "step",
    }
    for ours, theirs in same.items():
        assert torch.equal(got.get(theirs), expected.get(ours)), ours
    # scalars come back with LeRobot's shape [1]
    assert torch.equal(got.get(("info", "step_code")).reshape(n), expected.get(("info", "step_code")))
    # next observations: exact wherever LeRobot holds them (all but each episode's last step)
    last = torch.zeros(n, dtype=torch.bool)
    last[np.cumsum(LENGTHS) - 1] = True
    assert torch.equal(got.get(("info", "next_observation_unknown")), last)
    for ours, theirs in (("observation", ("observation", "state")), ("pixels", ("observation", "pixels"))):
        assert torch.equal(got.get(("next", *theirs))[~last], expected.get(("next", ours))[~last]), ours
    assert decode_text(got.get("task")) == ["balance the pole"] * n
    assert torch.allclose(got.get(("info", "timestamp")), (expected.get("step") / 5).float())


def test_metadata_follows_lerobot_v3(exported):
    _, out = exported
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 5
    assert info["total_episodes"] == len(LENGTHS) and info["total_frames"] == sum(LENGTHS)
    assert info["features"]["observation.pixels"] == {
        "dtype": "image",
        "shape": [6, 8, 3],
        "names": ["height", "width", "channels"],
    }
    episodes = pq.read_table(out / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
    assert [e["length"] for e in episodes] == list(LENGTHS)
    assert [(e["dataset_from_index"], e["dataset_to_index"]) for e in episodes] == [(0, 5), (5, 8), (8, 12)]
    stats = json.loads((out / "meta" / "stats.json").read_text())
    states = DatasetStorage(make_build([chunk()])).get(torch.arange(12)).get("observation").double().numpy()
    np.testing.assert_allclose(stats["observation.state"]["mean"], states.mean(0))
    np.testing.assert_allclose(stats["observation.state"]["std"], states.std(0))
    assert stats["observation.state"]["count"] == [12]
    assert np.array(stats["observation.pixels"]["mean"]).shape == (3, 1, 1)
    assert episodes[1]["stats/observation.state/min"] == states[5:8].min(0).tolist()


def test_tasks_that_change_within_an_episode_keep_their_frames_and_first_seen_order(tmp_path):
    from datasets_hub.loaders.formats.text import encode_text

    per_step = ["push"] * 5 + ["lift", "push", "lift"] + ["lift"] * 4  # episodes of LENGTHS (5, 3, 4)
    td = chunk(image=False)
    td.set("task", torch.from_numpy(encode_text(per_step, 8, ("task",))))
    out = export_build(make_build([td]), tmp_path / "lr", "lerobot")
    tasks = pq.read_table(out / "meta" / "tasks.parquet").to_pydict()
    names = dict(zip(tasks["task_index"], tasks["task"], strict=True))
    assert names == {0: "push", 1: "lift"}
    frames = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet").to_pydict()
    assert [names[i] for i in frames["task_index"]] == per_step
    episodes = pq.read_table(out / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pydict()
    assert episodes["tasks"] == [["push"], ["lift", "push"], ["lift"]]
    assert decode_text(dh.load("lerobot/local/lr", root=str(out)).storage[:].get("task")) == per_step


def test_several_data_files_when_episodes_exceed_the_file_size(tmp_path):
    build = make_build([chunk((4, 4, 4, 4), image=False)])
    out = export_build(build, tmp_path / "lr", "lerobot", data_file_mb=1e-6)
    files = sorted(p.name for p in (out / "data" / "chunk-000").iterdir())
    assert files == [f"file-{i:03d}.parquet" for i in range(4)]
    got = dh.load("lerobot/local/split", root=str(out)).storage[:]
    assert torch.equal(got.get("observation"), DatasetStorage(build)[:].get("observation"))


def test_a_key_level_with_a_dot_is_refused_before_writing(tmp_path):
    td = chunk((3,), image=False)
    td.set(("info", "x"), torch.zeros(3))
    td.set("odd.name", torch.zeros(3, 2))
    with pytest.raises(InvalidParameter, match=r"odd\.name"):
        export_build(make_build([td]), tmp_path / "lr", "lerobot")
    assert not (tmp_path / "lr.incomplete").exists()


def test_unknown_option_is_refused(tmp_path):
    with pytest.raises(InvalidParameter, match="fps"):
        export_build(make_build([chunk(image=False)]), tmp_path / "lr", "lerobot", fsp=3)


def test_a_build_loaded_from_lerobot_exports_back_to_the_same_build(tmp_path):
    from fixtures import lerobot_writer as lw

    source = tmp_path / "source"
    lw.write_dataset(source, lw.Spec(image_mode="image", cameras=("observation.images.top",), height=32, width=64))
    first = dh.load("lerobot/local/source", root=str(source))
    out = dh.export(first, tmp_path / "again", format="lerobot")
    second = dh.load("lerobot/local/again", root=str(out))
    a, b = first.storage[:], second.storage[:]
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):  # the unknown final next observations are NaN in both
        torch.testing.assert_close(b.get(key), a.get(key), rtol=0, atol=0, equal_nan=True, msg=str(key))
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["fps"] == 10 and info["robot_type"] == "koch"


@pytest.mark.parametrize("codec", ["libsvtav1", "libx264"])
def test_cameras_as_mp4_videos_keep_frame_identity_above_a_psnr_floor(tmp_path, codec):
    from fixtures import lerobot_writer as lw

    lengths = (4, 6)
    td = chunk(lengths, image=False)
    rows = torch.arange(sum(lengths) + len(lengths))  # observation rows, T + 1 per episode
    frames = torch.from_numpy(np.stack([lw.frame_image(int(r), 0, 32, 64) for r in rows]))
    step_rows = torch.cat([torch.arange(s, s + n) for s, n in ((0, 4), (5, 6))])
    td.set(("observation_cam",), frames[step_rows])  # a camera drawing its observation row (lw.read_index)
    td.set(("next", "observation_cam"), frames[step_rows + 1])
    build = make_build([td])
    out = export_build(build, tmp_path / "video", "lerobot", fps=10, video=True, video_codec=codec)
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["features"]["observation.observation_cam"]["dtype"] == "video"
    assert info["video_path"].startswith("videos/")
    got = dh.load("lerobot/local/video", root=str(out)).storage[:]
    expected = DatasetStorage(build)[:]
    decoded = got.get(("observation", "observation_cam")).numpy()
    truth = expected.get("observation_cam").numpy()
    for i in range(len(truth)):
        assert lw.read_index(decoded[i])[0] == lw.read_index(truth[i])[0]  # the right frame, every step
    mse = np.mean((decoded.astype(np.float64) - truth.astype(np.float64)) ** 2)
    assert 10 * np.log10(255**2 / mse) > 30  # lossy, but close
    assert torch.equal(got.get(("observation", "state")), expected.get("observation"))


def test_video_needs_even_frame_sizes(tmp_path):
    with pytest.raises(InvalidParameter, match="even height and width"):
        export_build(make_build([chunk((3,), image_hw=(7, 8))]), tmp_path / "v", "lerobot", video=True)
    assert not (tmp_path / "v").exists()
