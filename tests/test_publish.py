"""export(): the published form of a build (zarr v3 chunks, verbatim manifest, hashes, dataset card)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import datasets_hub as dh
from datasets_hub.cli import main as cli_main
from datasets_hub.errors import InvalidParameter
from datasets_hub.remote.publish import PUBLISHED, export

zarr = pytest.importorskip("zarr")  # an optional extra (datasets-hub[remote]); make test installs it

ID = "gym/pendulum-random-v0"
PARAMS = {"steps": 600, "seed": 4}


@pytest.fixture
def build_rb():
    return dh.load(ID, **PARAMS)


def test_export_writes_every_leaf_as_a_zarr_array_with_identical_values(build_rb, tmp_path):
    out = export(build_rb, tmp_path / "pub", chunk_bytes=2048)
    manifest = json.loads((out / "manifest.json").read_text())
    group = zarr.open_group(str(out / "data.zarr"), mode="r")
    for name, spec in manifest["schema"].items():
        array = group[name]
        stored = np.fromfile(build_rb.storage.path / "data" / (name + ".memmap"), dtype=array.dtype)
        np.testing.assert_array_equal(array[:].reshape(-1), stored)
        assert array.shape[0] == spec["rows"]
        assert array.chunks[0] == json.loads((out / PUBLISHED).read_text())["arrays"][name]["chunk_rows"]


def test_manifest_is_verbatim_and_every_file_is_hashed(build_rb, tmp_path):
    out = export(build_rb, tmp_path / "pub", chunk_bytes=2048)
    original = (build_rb.storage.path / "manifest.json").read_bytes()
    assert (out / "manifest.json").read_bytes() == original
    published = json.loads((out / PUBLISHED).read_text())
    assert published["manifest_sha256"] == hashlib.sha256(original).hexdigest()
    on_disk = {p.relative_to(out).as_posix() for p in (out / "data.zarr").rglob("*") if p.is_file()}
    assert on_disk == set(published["files"])
    for relpath, record in published["files"].items():
        data = (out / relpath).read_bytes()
        assert hashlib.sha256(data).hexdigest() == record["sha256"] and len(data) == record["bytes"]
    # every chunk exists, also those whose values are all zero (a reader fetches each by name)
    for name, spec in published["arrays"].items():
        chunk_files = [r for r in published["files"] if r.startswith(f"data.zarr/{name}/c/")]
        assert len(chunk_files) == spec["chunks"], name


def test_dataset_card_has_front_matter_counts_schema_and_provenance(build_rb, tmp_path):
    out = export(build_rb, tmp_path / "pub")
    card = (out / "README.md").read_text()
    front, body = card.split("---\n")[1], card.split("---\n", 2)[2]
    assert "license: mit" in front and "reinforcement-learning" in front and "offline-rl" in front
    assert f"# {ID}" in body
    assert "| transitions | 600 |" in body
    assert "`steps/action`" in body and "Episode returns" in body
    assert build_rb.storage.manifest["fingerprint"] in body
    assert "## Feature statistics" in body and "| `observation` |" in body  # recorded while building


def test_export_refuses_a_non_empty_folder_and_leaves_no_staging(build_rb, tmp_path):
    target = tmp_path / "pub"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(InvalidParameter, match="overwrite=True"):
        export(build_rb, target)
    assert (target / "keep.txt").read_text() == "mine"
    export(build_rb, target, overwrite=True)
    assert not (target / "keep.txt").exists()
    assert not (tmp_path / "pub.incomplete").exists()


def test_export_by_id_builds_first_and_cli_export(tmp_path, capsys):
    out = export(ID, tmp_path / "by-id", **PARAMS)
    assert json.loads((out / PUBLISHED).read_text())["id"] == ID
    code = cli_main(["export", ID, str(tmp_path / "cli"), "-p", "steps=600", "-p", "seed=4", "--chunk-mb", "0.01"])
    assert code == 0
    assert "exported" in capsys.readouterr().out
    assert (tmp_path / "cli" / PUBLISHED).exists()


def test_export_rejects_a_tiny_chunk_size(build_rb, tmp_path):
    with pytest.raises(InvalidParameter, match="chunk_bytes"):
        export(build_rb, tmp_path / "pub", chunk_bytes=10)


def test_push_exports_then_uploads_the_folder_through_huggingface_hub(build_rb, monkeypatch, tmp_path):
    """push is a thin call of huggingface_hub (no honest local stand-in for the Hub's upload API exists
    here): check what it hands over, i.e. a dataset repo and a complete published folder."""
    import huggingface_hub

    calls: dict[str, object] = {}

    class RecordingApi:
        def create_repo(self, repo_id, **kw):
            calls["create"] = (repo_id, kw)

        def upload_folder(self, *, repo_id, folder_path, repo_type, revision):
            calls["files"] = sorted(p.relative_to(folder_path).as_posix() for p in Path(folder_path).rglob("*.json"))
            calls["upload"] = (repo_id, repo_type, revision)

    monkeypatch.setattr(huggingface_hub, "HfApi", RecordingApi)
    url = dh.push(build_rb, "org/pendulum", revision="v1")
    assert url == "hf://datasets/org/pendulum@v1"
    assert calls["create"] == ("org/pendulum", {"repo_type": "dataset", "private": None, "exist_ok": True})
    assert calls["upload"] == ("org/pendulum", "dataset", "v1")
    assert {"manifest.json", PUBLISHED, "data.zarr/zarr.json"} <= set(calls["files"])


# -- issue 27: no user data is deleted, every refusal is clear -----------------------------------
def test_an_incomplete_folder_not_left_by_export_is_refused_not_deleted(build_rb, tmp_path):
    staging = tmp_path / "results.incomplete"
    staging.mkdir()
    (staging / "notes.txt").write_text("mine")
    with pytest.raises(InvalidParameter, match=r"results\.incomplete exists and was not left by an interrupted export"):
        export(build_rb, tmp_path / "results")
    assert (staging / "notes.txt").read_text() == "mine" and not (tmp_path / "results").exists()


def test_a_staging_folder_an_interrupted_export_left_is_replaced(build_rb, tmp_path, monkeypatch):
    import datasets_hub.remote.publish as publish

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(publish, "sha256_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export(build_rb, tmp_path / "results")
    assert (tmp_path / "results.incomplete" / publish.STAGING_MARK).exists()
    monkeypatch.undo()
    out = export(build_rb, tmp_path / "results")
    assert (out / PUBLISHED).exists() and not (out / publish.STAGING_MARK).exists()
    assert not (tmp_path / "results.incomplete").exists()


def test_export_into_a_regular_file_is_a_clear_error(build_rb, tmp_path):
    (tmp_path / "results").write_text("a file")
    for overwrite in (False, True):
        with pytest.raises(InvalidParameter, match="is not a folder"):
            export(build_rb, tmp_path / "results", overwrite=overwrite)
    assert (tmp_path / "results").read_text() == "a file"


def test_push_never_empties_a_users_out_dir(build_rb, monkeypatch, tmp_path):
    """A folder of the user's own is refused before anything is written; a token the Hub refuses fails
    before out_dir is touched (the repo is created first)."""
    import huggingface_hub

    class RefusingApi:
        def create_repo(self, repo_id, **kw):
            raise PermissionError("401 Unauthorized")

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    monkeypatch.setattr(huggingface_hub, "HfApi", RefusingApi)
    with pytest.raises(InvalidParameter, match="not an earlier export"):
        dh.push(build_rb, "org/x", out_dir=mine)
    assert (mine / "thesis.tex").read_text() == "years of work"
    earlier = export(build_rb, tmp_path / "earlier")
    before = (earlier / PUBLISHED).read_bytes()
    with pytest.raises(dh.UploadError, match="401 Unauthorized"):  # one line naming the fix, from the PermissionError
        dh.push(build_rb, "org/x", out_dir=earlier)
    assert (earlier / PUBLISHED).read_bytes() == before


@pytest.mark.parametrize("chunk_mb", ["1e9", "inf", "nan", "-1"])
def test_cli_export_refuses_a_chunk_size_that_cannot_be_allocated(tmp_path, capsys, chunk_mb):
    assert (
        cli_main(["export", ID, str(tmp_path / "out"), "-p", "steps=600", "-p", "seed=4", "--chunk-mb", chunk_mb]) == 2
    )
    assert "--chunk-mb must be a number of MB above 0 and at most 1024" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_export_refuses_a_chunk_size_above_one_gib(build_rb, tmp_path):
    with pytest.raises(InvalidParameter, match="from 1024 to"):
        export(build_rb, tmp_path / "pub", chunk_bytes=10**15)
