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
