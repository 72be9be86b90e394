"""datasets_hub.cache.listing (what ``cache ls`` shows) and the last-use marker of datasets_hub.cache.layout."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

import datasets_hub as dh
from datasets_hub.build.pipeline import build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.cache import listing as cl
from datasets_hub.cache import maintenance as mt
from datasets_hub.cache.layout import LAST_USED, dir_size, last_used, mark_used
from datasets_hub.loader import DatasetSpec
from datasets_hub.plugins import get_loader
from datasets_hub.testing import FakeLoader

CARTPOLE = "gym/cartpole-random-v0"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")


def fake_build(name: str = "fake/listing", lengths=(5, 3, 4)) -> Path:
    """A real build of fake episodes; its id is in no catalogue and its loader is not installed."""
    spec = DatasetSpec(id=name, loader="fake", params={"lengths": list(lengths)})
    return build(spec, FakeLoader(), {}, [])


def edit_manifest(build_dir: Path, **fields) -> None:
    manifest = json.loads((build_dir / "manifest.json").read_text())
    manifest.update(fields)
    (build_dir / "manifest.json").write_text(json.dumps(manifest))


def test_listing_usage_and_cached_ids(isolated_cache):
    a = fake_build()
    raw = isolated_cache / "raw" / "d4rl" / "sub"
    raw.mkdir(parents=True)
    (raw / "f.hdf5").write_bytes(b"x" * 300)
    for side in (".sha256", ".lock", ".partial", ".corrupt"):
        (raw / ("f.hdf5" + side)).write_bytes(b"y")
    listing = cl.list_cache()
    assert [(b.id, b.fingerprint, b.transitions, b.episodes) for b in listing.builds] == [
        ("fake/listing", a.name, 12, 3)
    ]
    entry = listing.builds[0]
    assert entry.bytes == dir_size(a)
    assert not entry.in_catalogue and entry.changed_params == {"lengths": [5, 3, 4]}  # unknown id: every param
    assert entry.stale is None and entry.last_used is None and entry.variants == []
    assert listing.raw == {"d4rl": [("sub/f.hdf5", 300)]}
    sizes = cl.usage()
    assert sizes["raw"] == 304 and sizes["datasets"] >= listing.builds[0].bytes and sizes["preprocessed"] == 0
    assert sizes["total"] == sum(v for k, v in sizes.items() if k != "total")
    assert cl.cached_ids() == {"fake/listing": [{"lengths": [5, 3, 4]}]}


def test_params_shown_are_those_that_differ_from_the_catalogue(isolated_cache):
    catalogue_params = dict(dh.info(CARTPOLE).params)
    assert catalogue_params["steps"] != 300
    dh.download(CARTPOLE, steps=300)
    dh.download(CARTPOLE, steps=300, seed=catalogue_params.get("seed", 0) + 1)
    changed = sorted(json.dumps(b.changed_params, sort_keys=True) for b in cl.list_cache().builds)
    seed = catalogue_params.get("seed", 0) + 1
    assert changed == sorted([json.dumps({"steps": 300}), json.dumps({"seed": seed, "steps": 300}, sort_keys=True)])
    assert all(b.in_catalogue and b.params["env"] == catalogue_params["env"] for b in cl.list_cache().builds)


def test_opening_a_build_records_its_last_use_at_most_once_per_resolution(isolated_cache):
    a = fake_build()
    assert last_used(a) is None  # building is not using
    before = time.time()
    DatasetStorage(a)
    first = last_used(a)
    assert first is not None and first >= before - 1
    listed = cl.list_cache().builds[0].last_used
    assert listed == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(first))
    recent = time.time() - 60  # touched a minute ago: opening again writes nothing
    os.utime(a / LAST_USED, (recent, recent))
    DatasetStorage(a)
    assert last_used(a) == pytest.approx(recent)
    old = time.time() - 3600  # an hour ago: opening again records now
    os.utime(a / LAST_USED, (old, old))
    DatasetStorage(a)
    assert last_used(a) > time.time() - 60
    mark_used(a, resolution_s=0)  # the resolution is a parameter
    assert (a / LAST_USED).stat().st_size == 0


def test_a_read_only_cache_opens_without_recording_use(isolated_cache, monkeypatch):
    a = fake_build()
    real_open, real_utime = os.open, os.utime

    def refuse(path, *args, **kwargs):
        if str(path).endswith(LAST_USED):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, *args, **kwargs)

    def refuse_utime(target, *args, **kwargs):
        if isinstance(target, (str, os.PathLike)) and str(target).endswith(LAST_USED):
            raise OSError(errno.EROFS, "Read-only file system", str(target))
        return real_utime(target, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    monkeypatch.setattr(os, "utime", refuse_utime)
    storage = DatasetStorage(a)  # no error: the marker simply is not written
    assert len(storage) == 12 and last_used(a) is None
    monkeypatch.undo()
    (a / LAST_USED).symlink_to(isolated_cache / "elsewhere")  # a planted symlink is never followed
    DatasetStorage(a)
    assert not (isolated_cache / "elsewhere").exists()


def test_variants_are_listed_under_their_build(isolated_cache):
    rb = dh.load(CARTPOLE, steps=300)
    result = rb.preprocess(_scale_observation, num_workers=0)
    listing = cl.list_cache()
    (entry,) = listing.builds
    assert entry.variants == [f"{rb.storage.path.name}/{result.storage.path.name}"]
    (variant,) = listing.preprocessed
    assert variant.name == entry.variants[0] and variant.last_used is not None  # preprocess opened it
    assert entry.last_used is not None  # load opened the build


def _scale_observation(td):
    td["observation"] = td["observation"] * 2
    return td


def test_stale_builds_name_the_version_that_changed(isolated_cache, monkeypatch):
    current = Path(dh.download(CARTPOLE, steps=300))
    old_storage = Path(dh.download(CARTPOLE, steps=301))
    edit_manifest(old_storage, storage_format_version=0)
    old_format = Path(dh.download(CARTPOLE, steps=302))
    edit_manifest(old_format, version=0)
    reasons = {b.path: b.stale for b in cl.list_cache().builds}
    assert reasons[current] is None
    assert "made with storage format 0; this installation writes storage format 1" in reasons[old_storage]
    assert "on-disk format version 0" in reasons[old_format]
    assert {p for p, _m, _why in cl.stale_builds()} == {old_storage, old_format}
    newer = Path(dh.download(CARTPOLE, steps=303))
    edit_manifest(newer, storage_format_version=99)  # a newer installation shares this cache
    (entry,) = [b for b in cl.list_cache().builds if b.path == newer]
    assert entry.stale is None and "storage format 99, newer than this installation's" in entry.newer
    assert newer not in {p for p, _m, _why in cl.stale_builds()}
    assert newer not in {i.path for i in mt.prune(dry_run=True)}  # never pruned
    # the gym loader converts differently now: every gym build is stale, and says why
    monkeypatch.setattr(type(get_loader("gym")), "format_version", get_loader("gym").format_version + 1)
    reasons = {b.path: b.stale for b in cl.list_cache().builds}
    assert "format_version" in reasons[current] and "gym" in reasons[current]


def test_prune_removes_stale_builds_with_their_variants(isolated_cache, monkeypatch):
    rb = dh.load(CARTPOLE, steps=300)
    variant = rb.preprocess(_scale_observation, num_workers=0).storage.path
    keep = Path(dh.download(CARTPOLE, steps=301))
    stale = rb.storage.path
    edit_manifest(stale, loader_format_version=0)
    items = mt.prune(dry_run=True)
    assert {i.path for i in items} == {stale, variant} and stale.exists() and variant.exists()
    assert any("stale build" in i.reason and "format_version 0" in i.reason for i in items)
    assert mt.prune(keep_stale=True, dry_run=True) == []
    mt.prune()
    assert not stale.exists() and not variant.exists() and (keep / "manifest.json").is_file()
