"""datasets_hub.exporters: the format choice, refusals before writing, atomic folders, export()/CLI/push wiring."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest
import torch

import datasets_hub as dh
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.cli import main as cli_main
from datasets_hub.errors import CacheError, InvalidParameter
from datasets_hub.exporters import STAGING_MARKER, export_build
from datasets_hub.exporters import lerobot as lerobot_exporter

from fixtures.export_builds import chunk, make_build


@pytest.fixture
def build():
    return make_build([chunk(image=False)])


def test_unknown_format_says_what_exists(build, tmp_path):
    with pytest.raises(InvalidParameter, match="Did you mean 'lerobot'"):
        export_build(build, tmp_path / "x", "lerobbot")


def test_an_existing_target_is_refused_and_kept(build, tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    for fmt in ("lerobot", "hf"):
        with pytest.raises(InvalidParameter, match="already exists"):
            export_build(build, target, fmt)
    with pytest.raises(InvalidParameter, match="overwrite=True applies to the published form only"):
        dh.export(build, target, format="hf", overwrite=True)
    assert (target / "keep.txt").read_text() == "mine"
    assert not (tmp_path / "mine.incomplete").exists()


def test_a_build_being_written_is_refused(build, tmp_path):
    writing = tmp_path / "abc.incomplete"
    shutil.copytree(build, writing)
    with pytest.raises(CacheError, match="still being written"):
        export_build(writing, tmp_path / "out", "hf")
    unfinished = tmp_path / "abc"  # the final name, its build not yet renamed into place
    unfinished.mkdir()
    with pytest.raises(CacheError, match="still being written"):
        export_build(unfinished, tmp_path / "out", "hf")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.incomplete").exists()


def test_an_interrupted_export_leaves_no_folder_that_looks_complete(build, tmp_path, monkeypatch):
    calls = []

    def failing_write(plan, episodes, staging, progress):
        calls.append(staging)
        (staging / "meta").mkdir()
        raise KeyboardInterrupt  # the user stops it half-way

    monkeypatch.setattr(lerobot_exporter, "write", failing_write)
    with pytest.raises(KeyboardInterrupt):
        export_build(build, tmp_path / "lr", "lerobot")
    assert calls and not (tmp_path / "lr").exists() and not (tmp_path / "lr.incomplete").exists()


def test_a_staging_folder_left_by_a_killed_export_is_replaced_but_a_foreign_one_is_not(build, tmp_path):
    left = tmp_path / "hf.incomplete"
    left.mkdir()
    (left / "data.txt").write_text("someone else's")
    with pytest.raises(InvalidParameter, match="not left by an export"):
        export_build(build, tmp_path / "hf", "hf")
    assert (left / "data.txt").exists()
    (left / STAGING_MARKER).write_text("")  # as a killed export leaves it
    out = export_build(build, tmp_path / "hf", "hf")
    assert not left.exists() and (out / "README.md").exists() and not (out / STAGING_MARKER).exists()


def test_export_api_and_cli_take_a_format(tmp_path, capsys):
    rb = dh.load("gym/pendulum-random-v0", steps=60, seed=1)
    out = dh.export(rb, tmp_path / "api", format="lerobot", options={"fps": 20})
    assert (out / "meta" / "info.json").exists()
    with pytest.raises(InvalidParameter, match="takes no options"):
        dh.export(rb, tmp_path / "pub", options={"fps": 20})
    code = cli_main(
        ["export", "gym/pendulum-random-v0", str(tmp_path / "cli"), "-p", "steps=60", "-p", "seed=1",
         "--format", "hf", "-o", "shard_mb=1"]
    )  # fmt: skip
    assert code == 0 and "in hf format" in capsys.readouterr().out
    assert len(list((tmp_path / "cli" / "data").glob("train-*.parquet"))) == 1


def test_push_uploads_the_chosen_format(build, monkeypatch):
    import huggingface_hub

    uploaded = {}

    class RecordingApi:
        def create_repo(self, repo_id, **kw):
            pass

        def upload_folder(self, *, repo_id, folder_path, repo_type, revision):
            from pathlib import Path

            uploaded["files"] = sorted(p.relative_to(folder_path).as_posix() for p in Path(folder_path).rglob("*"))

    monkeypatch.setattr(huggingface_hub, "HfApi", RecordingApi)
    dh.push(build, "org/fake", format="hf")
    assert "README.md" in uploaded["files"] and "data/train-00000-of-00001.parquet" in uploaded["files"]


def test_history_frames_are_not_exported_and_the_export_says_so(tmp_path):
    td = chunk((5, 3), image=False)
    td.set("history", torch.tensor([True, True] + [False] * 6))  # episode 0 starts with 2 frames of history
    build = make_build([td])
    with pytest.warns(UserWarning, match="history"):
        out = export_build(build, tmp_path / "hf", "hf")
    table = pq.read_table(next((out / "data").glob("*.parquet")))
    assert table.num_rows == len(DatasetStorage(build)) == 6  # transitions only
