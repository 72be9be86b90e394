"""``datasets-hub verify --deep`` and ``verify(id, deep=True)``: the checksums, then the data doctor's
table or JSON, with the exit code of the worst finding (datasets_hub/cli/doctor_command.py)."""

from __future__ import annotations

import json

import h5py
import numpy as np

from datasets_hub import catalogue

from fixtures.cli import CARTPOLE, SMALL, build_small


def test_verify_deep_on_a_clean_build_prints_the_table_and_exits_0(run):
    build_small(run)
    code, out, _ = run("verify", CARTPOLE, *SMALL, "--deep")
    # CartPole pays 1 every step: an info, which does not fail the command by default
    assert code == 0, out
    assert "constant-column" in out and "next/reward" in out and "consequence:" in out
    assert run("verify", CARTPOLE, *SMALL, "--deep", "--fail-on", "info")[0] == 4


def test_verify_deep_json_and_exit_code_by_severity(run, tmp_path):
    rng = np.random.default_rng(0)
    n = 600
    pos = np.cumsum(rng.normal(0, 0.05, (n, 2)), axis=0)
    pos[400:] += 8.0  # a teleport inside the second episode
    source = tmp_path / "teleport.hdf5"
    with h5py.File(source, "w") as f:
        f["observations"] = np.concatenate([pos, rng.normal(0, 1, (n, 3))], axis=1).astype(np.float32)
        f["actions"] = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
        f["rewards"] = rng.normal(0, 1, n).astype(np.float32)
        f["terminals"] = np.zeros(n, bool)
        f["timeouts"] = (np.arange(n) % 300) == 299
    dataset_id = "d4rl/doctor-cli-v0"
    catalogue.register_dataset(dataset_id, loader="d4rl", resources=[{"url": source.as_uri(), "name": "doctor/t.hdf5"}])
    try:
        code, out, err = run("verify", dataset_id, "--deep")
        assert code == 1 and "is not in the cache" in err
        assert run("download", dataset_id)[0] == 0
        code, out, _ = run("verify", dataset_id, "--deep", "--json")
        data = json.loads(out)
        assert code == 3 and data["exit_code"] == 3 and data["checksums"]["problems"] == []
        (report,) = data["doctor"]
        assert report["kind"] == "build" and report["worst"] == "warning"
        assert [(f["class"], f["examples"][0]) for f in report["findings"]] == [
            ("teleport", {"episode": 1, "step": 100})
        ]
        assert run("verify", dataset_id, "--deep", "--fail-on", "error")[0] == 0
        # the raw file, before any build, straight from its path
        code, out, _ = run("verify", str(source), "--deep")
        assert code == 3 and "teleport" in out and "(hdf5)" in out

        from datasets_hub.cache.verify import verify

        result = verify(dataset_id, deep=True)
        assert result.ok and [f.name for f in result.doctor[0].findings] == ["teleport"]
        assert verify(dataset_id).doctor == []
        # the build removed, the raw file stays: the doctor reads it through the catalogue's resources
        assert run("rm", dataset_id)[0] == 0
        code, out, _ = run("verify", dataset_id, "--deep")
        assert code == 3 and "(raw files, not built) (hdf5)" in out and "teleport" in out
    finally:
        catalogue.unregister_dataset(dataset_id)


def test_verify_deep_with_a_small_row_budget_says_it_sampled(run):
    build_small(run)
    code, out, _ = run("verify", CARTPOLE, *SMALL, "--deep", "--max-rows", "50", "--json")
    assert code == 0
    (report,) = json.loads(out)["doctor"]
    assert report["sampled"] and 50 <= report["rows_read"] < report["rows"] == 300
