"""``datasets-hub cache ls|du|rm|prune`` (datasets_hub/cli/cache_commands.py), run in-process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

import datasets_hub as dh
from datasets_hub.plugins import get_loader

from fixtures.cli import CARTPOLE, SMALL, build_small, one_line


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")  # belt and braces: no test may open a connection


def test_cache_ls_and_du(run, d4rl_id, isolated_cache):
    build = build_small(run)
    assert run("download", d4rl_id)[0] == 0
    pre = isolated_cache / "preprocessed" / build.name / "abcdef0123456789"
    pre.mkdir(parents=True)
    (pre / "x.memmap").write_bytes(b"\0" * 1000)
    code, out, _ = run("cache", "ls")
    assert code == 0
    build_lines = [line for line in out.splitlines() if CARTPOLE in line]
    assert len(build_lines) == 1 and build.name in build_lines[0] and "300" in build_lines[0]
    assert "d4rl/cli-tiny-v0" in out and "  d4rl/" in out and "cli/tiny.hdf5" in out
    assert ".sha256" not in out  # sidecars are not raw files
    assert f"{build.name}/abcdef0123456789" in out
    code, out, _ = run("cache", "du")
    assert code == 0
    sizes = {line.split()[0]: int(line.split()[-1].replace(",", "")) for line in out.splitlines()[2:]}
    from datasets_hub.cache.layout import dir_size

    assert sizes["datasets"] == dir_size(isolated_cache / "datasets")
    assert sizes["preprocessed"] == 1000
    assert sizes["raw"] >= (next((isolated_cache / "raw" / "d4rl").glob("*/cli/tiny.hdf5"))).stat().st_size
    assert sizes["total"] == sizes["raw"] + sizes["datasets"] + sizes["preprocessed"] + sizes["other"]


def test_cache_prune_removes_leftovers_and_skips_busy_builds(run, isolated_cache):
    from filelock import FileLock

    build = build_small(run)
    parent = build.parent
    stale = parent / "0000000000000000.incomplete"
    (stale / "data").mkdir(parents=True)
    (stale / "data" / "x.memmap").write_bytes(b"\1" * 100)
    busy = parent / "1111111111111111.incomplete"
    busy.mkdir()
    raw = isolated_cache / "raw" / "d4rl"
    raw.mkdir(parents=True)
    partial = raw / "big.hdf5.partial"
    partial.write_bytes(b"\2" * 50)
    corrupt = raw / "bad.hdf5.corrupt"
    corrupt.write_bytes(b"\3" * 20)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    deleting = parent / f"2222222222222222.deleting-{int(dead.stdout)}"
    deleting.mkdir()
    with FileLock(str(parent / "1111111111111111.lock")):
        code, out, _ = run("cache", "prune", "--dry-run")
        assert code == 0 and "would remove 4 item(s)" in out and "skipped" in out
        assert stale.exists() and partial.exists() and corrupt.exists() and deleting.exists()
        code, out, _ = run("cache", "prune")
    assert code == 0 and "removed 4 item(s)" in out
    assert f"skipped      {busy}" in out
    assert not stale.exists() and not partial.exists() and not corrupt.exists() and not deleting.exists()
    assert busy.exists() and (build / "manifest.json").is_file()  # in-progress and complete builds kept
    code, out, _ = run("cache", "prune", "--older-than", "30")
    assert code == 0 and (build / "manifest.json").is_file()  # made seconds ago
    code, out, _ = run("cache", "prune", "--older-than", "0")
    assert code == 0 and not build.exists() and "build older than 0 days" in out


def _double_observation(td):
    td.set("observation", td["observation"] * 2)
    return td


def _negate_reward(td):
    td.set(("next", "reward"), -td["next", "reward"])
    return td


def test_cache_rm_removes_one_preprocessed_variant(run):

    rb = dh.load(CARTPOLE, steps=300)
    doubled = rb.preprocess(_double_observation, num_workers=0)
    negated = rb.preprocess(_negate_reward, num_workers=0)
    code, out, _ = run("cache", "ls")
    assert code == 0 and "test_cli_cache._double_" in out and "test_cli_cache._negate_" in out  # the transform names
    build_fp, doubled_fp = doubled.storage.path.parent.name, doubled.storage.path.name
    negated_fp = negated.storage.path.name

    code, _out, err = run("cache", "rm", doubled_fp[:-1] + "x")  # a typo: nothing removed, a suggestion
    assert code == 2 and "Did you mean" in err and doubled.storage.path.is_dir()
    code, _out, err = run("cache", "rm", "../" + doubled_fp)
    assert code == 2 and "names nothing in the cache" in err

    code, out, _ = run("cache", "rm", f"{build_fp}/{doubled_fp}")
    assert code == 0 and "removed" in out and not doubled.storage.path.exists()
    assert (negated[:]["next", "reward"] == -rb[:]["next", "reward"]).all()  # the other variant is untouched
    code, out, _ = run("cache", "rm", negated_fp)  # the transform fingerprint alone, when unique
    assert code == 0 and not negated.storage.path.exists()
    code, out, _ = run("cache", "ls")
    assert "preprocessed variants" not in out
    assert rb.storage.path.is_dir()  # the build itself stays


def _set_manifest(build: Path, **fields) -> None:
    manifest = json.loads((build / "manifest.json").read_text())
    manifest.update(fields)
    (build / "manifest.json").write_text(json.dumps(manifest))


def test_cache_ls_shows_params_size_dates_last_use_variants_and_stale(run, isolated_cache):
    rb = dh.load(CARTPOLE, steps=300)  # opened: last use recorded
    variant = rb.preprocess(_double_observation, num_workers=0).storage.path
    other = Path(dh.download(CARTPOLE, steps=301))  # built, never opened
    _set_manifest(other, loader_format_version=0)
    code, out, _ = run("cache", "ls")
    assert code == 0
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith(f"  {CARTPOLE}")}
    used, stale = rows[rb.storage.path.name], rows[other.name]
    assert " steps=300 " in used and " steps=301 " in stale and "env=" not in used  # only what differs
    assert (
        used.rstrip().endswith("current")
        and "stale: made with the 'gym' loader's format_version 0; this installation writes" in stale
    )
    created = json.loads((rb.storage.path / "manifest.json").read_text())["created"]
    assert created[:16].replace("T", " ") in used
    assert used.split("  ")[-2].strip() != "-" and " -  " in stale  # last use: recorded vs never
    assert f"preprocessed {rb.storage.path.name}/{variant.name}  test_cli_cache._double_observation" in out
    assert "1 stale: `datasets-hub cache prune` removes them" in out

    code, out, _ = run("cache", "ls", "--json")
    builds = {b["fingerprint"]: b for b in json.loads(out)["builds"]}
    used, stale = builds[rb.storage.path.name], builds[other.name]
    assert used["changed_params"] == {"steps": 300} and used["params"]["steps"] == 300 and used["in_catalogue"]
    assert used["bytes"] > 0 and used["created"] == created and used["last_used"].endswith("Z")
    assert used["stale"] is None and used["variants"] == [f"{rb.storage.path.name}/{variant.name}"]
    assert stale["last_used"] is None and "format_version 0" in stale["stale"] and stale["variants"] == []


def test_cache_prune_dry_run_shows_the_stale_builds_then_removes_them(run, isolated_cache, monkeypatch):
    old = build_small(run)
    monkeypatch.setattr(type(get_loader("gym")), "format_version", get_loader("gym").format_version + 1)
    code, out, _ = run("cache", "prune", "--dry-run")
    assert code == 0 and f"would remove {old} (stale build" in out and "would remove 1 item(s)" in out
    assert old.is_dir()
    code, out, _ = run("cache", "prune", "--keep-stale")
    assert code == 0 and old.is_dir() and "removed 0 item(s)" in out
    code, out, _ = run("cache", "prune")
    assert code == 0 and not old.exists() and "removed 1 item(s)" in out
    fresh = build_small(run)  # the current loader builds anew, under another fingerprint
    assert fresh != old and run("cache", "prune")[0] == 0 and fresh.is_dir()


def test_cache_rm_removes_builds_by_id_params_or_fingerprint(run, isolated_cache):
    small = build_small(run)
    rb = dh.load(CARTPOLE, steps=400)
    variant = rb.preprocess(_double_observation, num_workers=0).storage.path
    large = rb.storage.path
    code, _out, err = run("cache", "rm", CARTPOLE)  # two builds: refused, both listed with their params
    message = one_line(err)
    assert code == 2 and "has 2 builds" in message and small.name in message and large.name in message
    assert "steps=300" in message and "steps=400" in message and "--all-builds" in message
    assert small.is_dir() and large.is_dir()

    code, out, _ = run("cache", "rm", CARTPOLE, "--param", "steps=400", "--dry-run")
    assert code == 0 and f"would remove build {large}" in out and f"would remove preprocessed variant {variant}" in out
    assert large.is_dir() and variant.is_dir()
    code, _out, err = run("cache", "rm", CARTPOLE, "--param", "steps=999")
    assert code == 1 and "no build of gym/cartpole-random-v0 has these params" in one_line(err)
    code, out, _ = run("cache", "rm", CARTPOLE, "--param", "steps=400")
    assert code == 0 and f"removed build {large}" in out and not large.exists() and not variant.exists()
    assert small.is_dir()

    code, _out, err = run("cache", "rm", small.name[:2])  # too short to be a fingerprint prefix
    assert code == 2 and small.name in one_line(err)  # did you mean
    code, out, _ = run("cache", "rm", small.name[:6])
    assert code == 0 and not small.exists()
    code, _out, err = run("cache", "rm", CARTPOLE)
    assert code == 1 and "no build of 'gym/cartpole-random-v0' in the cache" in one_line(err)


def test_cache_rm_all_builds_and_locks(run, isolated_cache):
    small = build_small(run)
    large = Path(dh.download(CARTPOLE, steps=301))
    with FileLock(str(large.with_name(large.name + ".lock"))):  # being rebuilt by another process
        code, _out, err = run("cache", "rm", CARTPOLE, "--all-builds")
    assert code == 1 and "another process" in one_line(err) and large.is_dir()
    assert small.is_dir()  # nothing removed, whichever build comes first
    code, _out, err = run("cache", "rm", small.name, "--all-builds")
    assert code == 2 and "pick among the builds of a dataset id" in one_line(err)
    code, out, _ = run("cache", "rm", CARTPOLE, "--all-variants")  # the same flag, by its other name
    assert code == 0 and not small.exists() and not large.exists()
    assert out.count("removed build") == 2
    assert run("download", CARTPOLE, *SMALL)[0] == 0  # the id builds again afterwards
