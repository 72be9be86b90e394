"""The data doctor finds nothing in clean data, across the loaders: builds made from each loader's
own conversion of its upstream-format fixture, and the raw upstream files themselves (LeRobot v3.0
and v2.1, D4RL HDF5, OGBench npz, Open X-Embodiment TFRecords). A finding here is either a doctor bug
or a defect the fixture plants on purpose: those are named where they are expected."""

from __future__ import annotations

import os

import pytest

from datasets_hub.doctor import diagnose
from datasets_hub.loader import DatasetSpec, LoaderContext
from datasets_hub.testing import FakeLoader, fake_episodes

os.environ.setdefault("SVT_LOG", "1")


def build_chunks(chunks, notes, name):
    """A build of a loader's converted ``chunks`` (with its card ``notes``), through the hub's build."""
    from datasets_hub.build.pipeline import build

    class Converted(FakeLoader):
        def episodes(self, spec, files, ctx):
            for key, value in notes.items():
                ctx.note(key, value)
            for chunk in chunks:
                yield chunk.clone()

    return build(DatasetSpec(id=f"doctor/{name}", loader="fake", params={}), Converted(), {}, [])


def clean(report, expected=()):
    """No finding but the ``expected`` classes (defects the fixture plants on purpose)."""
    found = sorted({f.name for f in report.findings})
    assert found == sorted(expected), "\n".join(report.table())
    return report


def test_fake_episodes_build():
    chunk = fake_episodes([30, 45, 25, 60])
    clean(diagnose(build_chunks([chunk], {}, "fake")))


def test_d4rl_build_and_raw(tmp_path):
    from fixtures.d4rl import convert, write_d4rl

    path = write_d4rl(tmp_path / "clean.hdf5", [(5, "terminal"), (12, "timeout"), (9, "timeout"), (4, "terminal")])
    chunks, notes = convert(path)
    clean(diagnose(build_chunks(chunks, notes, "d4rl")))
    clean(diagnose(path))
    # the fixture's own planted quirks: a step both terminal and timeout, a last episode with no flag
    quirky = write_d4rl(tmp_path / "quirky.hdf5")
    clean(diagnose(quirky), ["episode-end-unflagged", "terminated-and-truncated"])


def test_ogbench_build_and_raw(tmp_path):
    from datasets_hub.loaders.ogbench import OGBenchLoader

    from fixtures.ogbench_files import write_ogbench

    path = tmp_path / "cube-single-play-v0.npz"
    write_ogbench(path, [6, 3, 9, 4])
    spec = DatasetSpec(id="ogbench/cube-single-play-v0", loader="ogbench", params={})
    ctx = LoaderContext(chunk_rows=7)
    chunks = list(OGBenchLoader().episodes(spec, {"cube-single-play-v0.npz": path}, ctx))
    clean(diagnose(build_chunks(chunks, ctx.notes, "ogbench")))
    # raw: each trajectory's final row (terminals=1) has no action of its own in OGBench's layout, so
    # the flat reading (terminals end an episode after that row) is the layout, not a defect
    clean(diagnose(path))


def test_roboset_build(tmp_path):
    from fixtures.roboset import convert, local_files

    chunks, notes = convert(local_files(tmp_path))
    clean(diagnose(build_chunks(chunks, notes, "roboset")))


def test_roboset_raw_reports_the_done_flag_the_fixture_plants_inside_an_episode(tmp_path):
    from fixtures.roboset import local_files

    reports = [diagnose(path) for path in local_files(tmp_path).values()]
    assert [sorted({f.name for f in r.findings}) for r in reports] == [["flag-mid-episode"], []]
    # Trial2 (third in natural order) is done on arriving at row 2: transition 1 (robohive's convention)
    assert reports[0].of("flag-mid-episode")[0].examples == [(2, 1)]


def test_openx_build_and_raw(tmp_path):
    from datasets_hub.loaders.openx import OpenXLoader

    from fixtures.openx import write_release

    files = write_release(tmp_path)
    local = {path.split("gresearch/robotics/", 1)[1]: file for path, file in files.items()}
    from fixtures.openx import DATASET, NUM_SHARDS, VERSION

    spec = DatasetSpec(
        id=f"openx/{DATASET}",
        loader="openx",
        params={"version": VERSION, "num_shards": {"train": NUM_SHARDS}, "shards": [0, 1]},
    )
    ctx = LoaderContext(chunk_rows=1000)
    chunks = list(OpenXLoader().episodes(spec, local, ctx))
    clean(diagnose(build_chunks(chunks, ctx.notes, "openx")))
    report = clean(diagnose(next(iter(files.values())).parent))
    assert report.kind == "tfrecord" and report.episodes == 4 and "rlds steps" in report.checks


def test_rlu_atari_build(tmp_path):
    from fixtures.rlu_atari import convert, write_shards

    chunks, notes, _spec, _files = convert(write_shards(tmp_path))
    clean(diagnose(build_chunks(chunks, notes, "rlu_atari")))


def test_atari_build(tmp_path):
    from fixtures.atari import DopamineBuffer, convert, play, save_checkpoint

    buf = DopamineBuffer()
    play(buf, [7, 5, 9, 6, 8, 4], ["terminal", "terminal", "terminal", "terminal", "terminal", "running"])
    buf.log_final()
    for k, log in enumerate(buf.logs):
        save_checkpoint(tmp_path / "Pong" / "1" / "replay_logs", k, log)
    chunks, notes, _spec, _files = convert(tmp_path, range(len(buf.logs)))
    clean(diagnose(build_chunks(chunks, notes, "atari")))


@pytest.mark.parametrize("version", ["v3.0", "v2.1"])
def test_lerobot_raw(tmp_path, version):
    from fixtures import lerobot_writer as lw

    lw.write_dataset(tmp_path, lw.Spec(version=version, lengths=(5, 8, 3, 6), tasks=("push", "stack", "push", "wipe")))
    report = clean(diagnose(tmp_path))
    assert report.kind == "lerobot" and report.rows == 22 and report.episodes == 4
    assert {"lerobot metadata", "video headers", "video sampled decode", "timing"} <= set(report.checks)


def test_minari_raw_and_build(tmp_path, monkeypatch):
    import gymnasium as gym
    import minari
    import numpy as np
    from minari.data_collector.episode_buffer import EpisodeBuffer

    from datasets_hub.loaders.minari import MinariLoader

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    rng = np.random.default_rng(0)
    buffers = []
    for length in (30, 40, 25):
        obs = rng.normal(0, 1, (length + 1, 3)).astype(np.float32)
        buffers.append(
            EpisodeBuffer(
                observations=obs,
                actions=rng.uniform(-1, 1, (length, 2)).astype(np.float32),
                rewards=list(rng.normal(0, 1, length)),
                terminations=[False] * (length - 1) + [True],
                truncations=[False] * length,
            )
        )
    with pytest.warns(UserWarning, match="recommended"):  # minari asks for a code permalink, an email, ...
        minari.create_dataset_from_buffers(
            "hubtest/doctor-v0",
            buffers,
            observation_space=gym.spaces.Box(-10, 10, (3,), np.float32),
            action_space=gym.spaces.Box(-1, 1, (2,), np.float32),
            author="datasets_hub tests",
        )
    spec = DatasetSpec(id="minari/hubtest/doctor-v0", loader="minari")
    ctx = LoaderContext()
    chunks = list(MinariLoader().episodes(spec, {}, ctx))
    report = clean(diagnose(build_chunks(chunks, ctx.notes, "minari")))
    assert "action space" in report.checks and not any("no action space declared" in n for n in report.notes)
    raw = next((tmp_path / "minari").rglob("main_data.hdf5"))
    clean(diagnose(raw))


def test_lerobot_build(tmp_path):
    from datasets_hub.loaders.lerobot import LeRobotLoader

    from fixtures import lerobot_writer as lw

    root = tmp_path / "src"
    lw.write_dataset(root, lw.Spec(lengths=(5, 8, 3, 6), tasks=("push", "stack", "push", "wipe")))
    files = {f"acme/koch_push/{p.relative_to(root).as_posix()}": p for p in root.rglob("*") if p.is_file()}
    ctx = LoaderContext()
    chunks = list(LeRobotLoader().episodes(DatasetSpec(id="lerobot/acme/koch_push", loader="lerobot"), files, ctx))
    build = build_chunks(chunks, ctx.notes, "lerobot")
    clean(diagnose(build))
    from datasets_hub.doctor.build_source import read_build

    read = read_build(build, max_rows=1000)  # the timing and frame-index checks had LeRobot's columns
    assert read.has_step_column and read.table.fps == 10 and read.table.timestamp is not None
