"""The ``datasets-hub`` command line, run in-process through ``main([...])`` (plus one real console script)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from datasets_hub import catalogue
from datasets_hub.build.format import write_manifest_checksum

from fixtures.cli import CARTPOLE, SMALL, build_small, one_line


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")  # belt and braces: no test may open a connection


@pytest.fixture
def tiny_gym_id():
    """A catalogue id whose own params are small, so its catalogue-params build is cheap."""
    dataset_id = "gym/cli-tiny-v0"
    catalogue.register_dataset(
        dataset_id,
        loader="gym",
        params={"env": "CartPole-v1", "steps": 200, "seed": 3},
        description="a tiny CartPole rollout for the CLI tests",
    )
    yield dataset_id
    catalogue.unregister_dataset(dataset_id)


def flip_byte(path: Path, offset: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


# ------------------------------------------------------------------------------------------ basics
def test_version(run):
    code, out, _ = run("--version")
    assert code == 0 and out.startswith("datasets-hub ") and out.split()[1][0].isdigit()


def test_list_filters_by_loader_and_search(run):
    code, out, _ = run("list", "--loader", "gym")
    assert code == 0
    ids = [line.split()[0] for line in out.splitlines() if line.startswith("gym/")]
    assert ids == ["gym/cartpole-random-v0", "gym/mountaincar-random-v0", "gym/pendulum-random-v0"]
    assert "d4rl/" not in out
    assert "uniform random policy" in out  # the description column
    code, out, _ = run("list", "--search", "cartpole-random")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines() if line.strip() and "/" in line.split()[0]] == [CARTPOLE]
    code, out, _ = run("list", "--loader", "d4rl", "--search", "hopper-medium-v2")
    assert code == 0 and "d4rl/hopper-medium-v2" in out and "gym/" not in out
    code, out, _ = run("list", "--search", "no-such-dataset-anywhere")
    assert code == 0 and "no dataset matches" in out


def test_list_marks_cached_builds(run, tiny_gym_id):
    def marks() -> dict[str, str]:
        _code, out, _ = run("list", "--loader", "gym")
        return {
            line.split()[0]: line.split()[1]
            for line in out.splitlines()
            if line.startswith("gym/") and line.split()[1] in ("yes", "other")
        }

    assert marks() == {}
    assert run("download", tiny_gym_id)[0] == 0  # catalogue params
    assert run("download", CARTPOLE, *SMALL)[0] == 0  # overridden params only
    assert marks() == {tiny_gym_id: "yes", CARTPOLE: "other"}


def test_list_unknown_loader_is_a_usage_error(run):
    code, out, err = run("list", "--loader", "gmy")
    assert code == 2 and out == ""
    assert "Did you mean 'gym'" in one_line(err)


# ------------------------------------------------------------------------------------------ info
def test_info_before_and_after_download(run):
    code, out, _ = run("info", CARTPOLE, *SMALL)
    assert code == 0
    assert (
        "cached          no" in out
        and "transitions     " not in out
        and "built bytes" not in out
        and "license         MIT" in out
    )
    assert '"steps": 300' in out  # the params actually used, overrides merged
    assert run("download", CARTPOLE, *SMALL)[0] == 0
    code, out, _ = run("info", CARTPOLE, *SMALL)
    assert code == 0
    assert "cached          yes" in out and "transitions     300" in out
    for text in (
        "built bytes",
        "episode return",
        "episode length",
        "next/observation",
        "sample (one transition",
        "next/reward",
        "float32",
        "budget_truncated_episodes",
        "provenance",
        "fingerprint",
        "feature stats",
        "q01",
    ):
        assert text in out, text
    code, out, _ = run("info", CARTPOLE, *SMALL, "--json")
    card = json.loads(out)
    assert card["cached"] is True and card["manifest"]["counts"]["transitions"] == 300
    assert card["params"]["steps"] == 300 and Path(card["build_path"]).is_dir()
    assert card["built_bytes"] > 300 * 4 * 4  # at least the observations
    assert card["manifest"]["schema"]["obs/observation"]["shape"] == [4]
    assert card["feature_stats"]["observation"]["shape"] == [4] and "next/reward" in card["feature_stats"]


def test_info_plot_draws_a_png_from_the_build(run, tmp_path):
    target = tmp_path / "plots" / "hist.png"
    code, _out, err = run("info", CARTPOLE, *SMALL, "--plot", str(target))
    assert code == 1 and "not built yet" in one_line(err) and not target.exists()
    assert run("download", CARTPOLE, *SMALL)[0] == 0
    code, out, _ = run("info", CARTPOLE, *SMALL, "--plot", str(target))
    assert code == 0 and str(target) in out
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and target.stat().st_size > 5000


def test_info_plot_without_matplotlib_names_the_extra(run, tmp_path, monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    code, _out, err = run("info", CARTPOLE, *SMALL, "--plot", str(tmp_path / "x.png"))
    assert code == 1
    assert "pip install 'datasets-hub[plot]'" in one_line(err)


# ------------------------------------------------------------------------------------------ download
def test_download_several_ids_and_force(run):
    code, out, _ = run("download", CARTPOLE, "gym/pendulum-random-v0", *SMALL)
    assert code == 0
    paths = [Path(line.split(": ", 1)[1]) for line in out.splitlines()]
    assert len(paths) == 2 and all((p / "manifest.json").is_file() for p in paths)
    created = json.loads((paths[0] / "manifest.json").read_text())["build_seconds"]
    (paths[0] / "marker").write_text("x")  # a forced rebuild replaces the directory
    code, out, _ = run("download", CARTPOLE, *SMALL, "--force")
    assert code == 0 and not (paths[0] / "marker").exists() and created is not None
    # one bad id among good ones: the good ones are built, the exit code says something failed
    code, out, err = run("download", "gym/mountaincar-random-v0", "gym/nope-v0", *SMALL)
    assert code == 1 and "gym/mountaincar-random-v0: " in out and "gym/nope-v0" in one_line(err)


# ------------------------------------------------------------------------------------------ verify
def test_verify_passes_then_fails_on_a_flipped_byte(run):
    build = build_small(run)
    code, out, _ = run("verify", CARTPOLE, *SMALL)
    assert code == 0 and "all 11 checked files match" in out
    action = build / "data" / "steps" / "action.memmap"
    flip_byte(action, 17)
    code, out, _ = run("verify", CARTPOLE, *SMALL)
    assert code == 1
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and str(action) in failed[0] and "sha256" in failed[0]
    flip_byte(action, 17)  # restored: good again
    assert run("verify", CARTPOLE, *SMALL)[0] == 0


def test_verify_lists_every_mismatch(run):
    build = build_small(run)
    flip_byte(build / "data" / "obs" / "observation.memmap", 5)
    (build / "data" / "steps" / "next" / "reward.memmap").write_bytes(b"short")
    code, out, _ = run("verify", CARTPOLE, *SMALL)
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    assert code == 1 and len(failed) == 2
    assert "observation.memmap" in failed[0] + failed[1] and "reward.memmap" in failed[0] + failed[1]
    assert "5 bytes" in out  # the truncated file is reported by size


def test_verify_detects_an_edited_manifest_without_checksum_file(run):
    build = build_small(run)
    (build / "manifest.sha256").unlink()  # as in a build published before manifest checksums existed
    manifest = json.loads((build / "manifest.json").read_text())
    manifest["stats"]["episode_return"]["mean"] += 1.0
    (build / "manifest.json").write_text(json.dumps(manifest))
    code, out, _ = run("verify", CARTPOLE, *SMALL)
    assert code == 1 and "stats.episode_return.mean" in out and str(build / "manifest.json") in out
    assert "no manifest.sha256" in out  # says which check it fell back to


def test_verify_detects_an_edited_count_and_params(run):
    build = build_small(run)
    path = build / "manifest.json"
    original = path.read_text()
    manifest = json.loads(original)
    manifest["counts"]["transitions"] = 299
    path.write_text(json.dumps(manifest))
    code, out, _ = run("verify", CARTPOLE, *SMALL)
    assert code == 1 and "counts say 299" in out
    manifest = json.loads(original)
    manifest["params"]["seed"] = 1
    path.write_text(json.dumps(manifest))
    code, out, _ = run("verify", CARTPOLE, *SMALL)
    assert code == 1 and "fingerprint to" in out


def test_verify_uses_manifest_checksum_when_present(run):
    build = build_small(run)
    write_manifest_checksum(build)  # what the builder records (see build.format.MANIFEST_SHA256)
    code, out, _ = run("verify", CARTPOLE, *SMALL, "-v")
    assert code == 0 and "matches manifest.sha256" in out and "no manifest.sha256" not in out
    manifest = json.loads((build / "manifest.json").read_text())
    manifest["metadata"]["description"] = "edited"  # nothing else could tell
    (build / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    code, out, _ = run("verify", CARTPOLE, *SMALL)
    assert code == 1 and "the manifest was edited" in out


def test_verify_raw_file_tampering(run, d4rl_id, isolated_cache):
    code, out, _ = run("download", d4rl_id)
    assert code == 0, out
    raw = next((isolated_cache / "raw" / "d4rl").glob("*/cli/tiny.hdf5"))
    assert raw.is_file()
    code, out, _ = run("verify", d4rl_id, "-v")
    assert code == 0 and str(raw) in out
    flip_byte(raw, raw.stat().st_size // 2)
    code, out, _ = run("verify", d4rl_id)
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    assert code == 1 and len(failed) == 1 and str(raw) in failed[0]


def test_verify_json_says_the_same_and_text_starts_with_findings(run, d4rl_id, isolated_cache):
    """--json carries ok/checked/problems/notes; text output has no blank lines before its findings; a raw
    file's sha256 is labelled by where it was recorded (the build's manifest), never "catalogue"."""
    assert run("download", d4rl_id)[0] == 0
    code, out, _ = run("verify", d4rl_id)
    assert code == 0 and out.splitlines()[0].strip() and "catalogue" not in out
    code, out, _ = run("verify", d4rl_id, "-v")
    assert "build's manifest" in out and "catalogue" not in out
    code, out, _ = run("verify", d4rl_id, "--json")
    record = json.loads(out)
    assert code == 0 and record["ok"] is True and record["dataset_id"] == d4rl_id and record["checked"]
    raw = next((isolated_cache / "raw" / "d4rl").glob("*/cli/tiny.hdf5"))
    flip_byte(raw, raw.stat().st_size // 2)
    code, out, _ = run("verify", d4rl_id, "--json")
    record = json.loads(out)
    assert code == 1 and record["ok"] is False and any(str(raw) in p for p in record["problems"])


def test_a_file_source_prints_one_line_and_has_a_known_size(run, d4rl_id, tmp_path):
    code, _out, err = run("download", d4rl_id)
    lines = [line for line in err.splitlines() if "tiny.hdf5" in line]
    assert code == 0 and len(lines) <= 1 and not [line for line in lines if "downloading" in line]
    code, out, _ = run("info", d4rl_id)
    assert "(local file)" in out and "unknown" not in out.split("resources", 1)[1].split("cached", 1)[0]


def test_a_bare_name_suggests_its_id(run):
    code, _out, err = run("info", "hopper-medium-v2")
    assert code == 2 and "did you mean 'd4rl/hopper-medium-v2'?" in one_line(err).lower()


def test_rm_and_cache_rm_say_how_they_differ(run):
    code, out, _ = run("rm", "--help")
    assert code == 0 and "cache rm" in out and "raw" in out
    code, out, _ = run("cache", "rm", "--help")
    assert code == 0 and "rm ID --raw" in " ".join(out.split())


def test_check_runs_the_plugin_contract_check(run):
    code, out, _ = run("check", "gym")
    assert code == 0 and out.startswith("ok: the loader class") and "GymLoader" in out
    code, out, _ = run("check", CARTPOLE, "--param", "steps=60", "--runs", "2", "--json")
    summary = json.loads(out)
    assert code == 0 and summary["ok"] and summary["counts"]["transitions"] == 60
    code, _out, err = run("check", "nope")
    assert code == 2 and "no loader named 'nope'" in one_line(err)


def test_check_reports_a_breach_in_one_line(run, monkeypatch):
    from importlib.metadata import EntryPoint

    from datasets_hub import plugins

    real = plugins._entry_points()
    ep = EntryPoint(name="badfmt", value="fixtures.cli:BadFormatLoader", group=plugins.GROUP)
    monkeypatch.setattr(plugins, "_entry_points", lambda: {**real, "badfmt": ep})
    plugins.clear_cache()
    try:
        code, _out, err = run("check", "badfmt")
    finally:
        plugins.clear_cache()
    assert code == 1 and "format_version must be a positive int" in one_line(err)


def test_push_without_network_is_one_line(run, monkeypatch):
    build_small(run)
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")
    code, _out, err = run("push", CARTPOLE, "org/repo", *SMALL)
    assert code == 1 and "DATASETS_HUB_OFFLINE=1" in one_line(err)
    monkeypatch.delenv("DATASETS_HUB_OFFLINE")
    import huggingface_hub
    from huggingface_hub.errors import HfHubHTTPError

    client_error = next(b for b in HfHubHTTPError.__mro__[1:] if not issubclass(b, OSError))  # the HTTP client's

    def no_network(*args, **kwargs):
        raise client_error("[Errno -2] Name or service not known")  # what a machine without DNS gets

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", no_network)
    code, _out, err = run("push", CARTPOLE, "org/repo", *SMALL)
    assert code == 1 and "push to the Hugging Face dataset repo 'org/repo' failed" in one_line(err)


def test_verify_without_anything_cached_fails_in_one_line(run):
    code, _out, err = run("verify", CARTPOLE, *SMALL)
    assert code == 1 and "not in the cache" in one_line(err)


# ------------------------------------------------------------------------------------------ rm
def test_rm_one_build_then_all_builds(run, isolated_cache):
    small = build_small(run)
    code, out, _ = run("download", CARTPOLE, "--param", "steps=150")
    other = Path(out.strip().split(": ", 1)[1])
    code, out, _ = run("rm", CARTPOLE, *SMALL)
    assert code == 0 and f"removed {small}" in out
    assert not small.exists() and (other / "manifest.json").is_file()
    assert not list(small.parent.glob("*.deleting-*"))  # renamed aside, then really deleted
    code, out, _ = run("rm", CARTPOLE, *SMALL)
    assert code == 0 and "nothing to remove" in out
    code, out, _ = run("rm", CARTPOLE, "--all-builds")
    assert code == 0 and str(other) in out and not other.exists()
    left = isolated_cache / "datasets" / "gym" / "cartpole-random-v0"
    assert all(p.name.endswith(".lock") for p in left.iterdir())  # no build, no leftovers but locks
    code, out, _ = run("info", CARTPOLE, *SMALL)
    assert "cached          no" in out


def test_rm_keeps_raw_files_unless_asked(run, d4rl_id, isolated_cache):
    assert run("download", d4rl_id)[0] == 0
    raw = next((isolated_cache / "raw" / "d4rl").glob("*/cli/tiny.hdf5"))
    assert run("rm", d4rl_id)[0] == 0
    assert raw.is_file()
    assert run("download", d4rl_id)[0] == 0
    code, out, _ = run("rm", d4rl_id, "--raw")
    assert code == 0 and str(raw) in out
    assert not raw.exists() and not raw.with_name("tiny.hdf5.sha256").exists()


def test_rm_refuses_a_build_in_progress(run):
    from filelock import FileLock

    build = build_small(run)
    lock = FileLock(str(build.with_name(build.name + ".lock")))
    with lock:
        code, _out, err = run("rm", CARTPOLE, *SMALL)
    assert code == 1 and "being built by another process" in one_line(err)
    assert (build / "manifest.json").is_file()


# ------------------------------------------------------------------------------------------ cache


# ------------------------------------------------------------------------------------------ sample
def test_sample_prints_keys_shapes_and_dtypes(run):
    code, out, _ = run("sample", CARTPOLE, "--batch-size", "8", "--seed", "0", *SMALL)
    assert code == 0
    table = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:]}
    assert table["observation"] == ["[8,", "4]", "float32"]
    assert table["next/observation"] == ["[8,", "4]", "float32"]
    assert table["action"][-1] == "int64" and table["next/reward"] == ["[8,", "1]", "float32"]
    assert "from 300 transitions" in out


def test_sample_slices(run):
    code, out, _ = run("sample", CARTPOLE, "-b", "8", "--slice-len", "4", "--seed", "1", *SMALL)
    assert code == 0, out
    assert "2 slices of 4" in out and "observation" in out
    code, _out, err = run("sample", CARTPOLE, "-b", "10", "--slice-len", "4", *SMALL)
    assert code == 2 and "divisible" in one_line(err)


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "argv, needle",
    [
        (["info", "gym/cartpol-random-v0"], "Did you mean 'gym/cartpole-random-v0'"),
        (["download", "gym/cartpole"], "Did you mean"),
        (["info", "cartpole"], "no loader prefix"),
        (["lst"], "Did you mean 'list'"),
        (["cache", "size"], "unknown command 'size'"),
        (["cache"], "required"),
        (["sample", CARTPOLE], "--batch-size"),
        (["sample", CARTPOLE, "-b", "0"], "--batch-size must be a positive integer"),
        (["info", CARTPOLE, "--param", "steps"], "key=value"),
        (["info", CARTPOLE, "--param", "steps=-1"], "'steps' must be a positive integer"),
        (["info", CARTPOLE, "--param", "colour=red"], "for the gym loader"),
        (["cache", "prune", "--older-than", "soon"], "invalid float value"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(run, argv, needle):
    code, _out, err = run(*argv)
    assert code == 2
    assert needle in one_line(err)


def test_param_values_are_json_when_possible():
    from datasets_hub.cli import parse_param as _param

    assert _param("steps=300") == ("steps", 300)
    assert _param("policy=random") == ("policy", "random")
    assert _param("flags=[1, 2]") == ("flags", [1, 2])
    assert _param('x={"a": null}') == ("x", {"a": None})
    assert _param("name=a=b") == ("name", "a=b")
    assert _param("empty=") == ("empty", "")


# ------------------------------------------------------------------------------------------ real entry point
def test_installed_console_script(tmp_path):
    script = Path(sys.executable).parent / "datasets-hub"
    if not script.exists():
        pytest.skip(f"console script not installed beside {sys.executable} (run `pip install -e .`)")
    env = {**os.environ, "DATASETS_HUB_CACHE": str(tmp_path / "c"), "DATASETS_HUB_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [str(script), "list", "--loader", "gym"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert CARTPOLE in proc.stdout and "gym/pendulum-random-v0" in proc.stdout
    proc = subprocess.run([str(script), "info", "gym/nope"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


# ------------------------------------------------------------------------------------------ cache rm


def test_rm_dry_run_and_cache_ls_json(run):
    import json

    assert run("download", CARTPOLE, *SMALL)[0] == 0
    code, out, _ = run("rm", CARTPOLE, *SMALL, "--dry-run")
    assert code == 0 and out.startswith("would remove ")
    code, out, _ = run("cache", "ls", "--json")
    listing = json.loads(out)
    assert code == 0 and [b["id"] for b in listing["builds"]] == [CARTPOLE]  # the dry run removed nothing
    assert listing["builds"][0]["transitions"] == 300
    code, out, _ = run("list", "--loader", "gym", "--json")
    rows = {r["id"]: r for r in json.loads(out)}
    assert rows[CARTPOLE]["download"] == "local"
    code, out, _ = run("rm", CARTPOLE, *SMALL)
    assert code == 0 and out.startswith("removed ")


def test_no_broken_pipe_traceback_when_piped_to_head(isolated_cache):
    import os
    import subprocess
    import sys

    env = {**os.environ, "DATASETS_HUB_CACHE": str(isolated_cache)}
    proc = subprocess.run(
        f"{sys.executable} -m datasets_hub.cli list | head -1",
        shell=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.stdout.startswith("id ") and "BrokenPipe" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_param_nested_too_deep_is_a_usage_error(run):
    """A --param value nested 50,000 levels deep (a RecursionError in the JSON parser) or 33 levels: one
    usage line, no traceback (issue 27)."""
    for depth in (50_000, 33):
        code, _, err = run("info", CARTPOLE, "-p", "x=" + "[" * depth + "]" * depth)
        assert code == 2 and "nested more than 32 levels deep" in err and "Traceback" not in err
    from datasets_hub.cli import parse_param

    assert parse_param("x=" + "[" * 32 + "]" * 32)[0] == "x"


def test_frames_options_reach_the_build(run):
    """--frames/--frame-quality are load()'s frames=/frame_quality=: a dataset without camera keys refuses
    compression (never silently raw), a bad choice is refused by the parser, raw is the usual build."""
    code, _, err = run("download", CARTPOLE, *SMALL, "--frames", "jpeg")
    assert code != 0 and "no camera key" in one_line(err)
    code, _, err = run("download", CARTPOLE, *SMALL, "--frames", "webp")
    assert code != 0 and "'webp'" in err and "jpeg, png, h264" in err
    code, _, err = run("download", CARTPOLE, *SMALL, "--frames", "h264", "--frame-quality", "90")
    assert code != 0 and "x264's quantiser, an int from 1 (best) to 51" in one_line(err)
    code, out, _ = run("download", CARTPOLE, *SMALL, "--frames", "raw")
    assert code == 0 and Path(out.split(": ", 1)[1].strip()) == build_small(run)
    code, out, _ = run("info", CARTPOLE, *SMALL, "--frames", "raw")
    assert code == 0 and "frames " not in out  # a raw build lists no compressed keys
