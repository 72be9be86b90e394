"""The ogbench loader against upstream's own reader, ``ogbench.utils.load_dataset`` (regular and compact forms).

``ogbench`` is installed with ``--no-deps`` (its package ``__init__`` imports the MuJoCo environments, which
need mujoco and dm_control). The reader module ``ogbench/utils.py`` is loaded from the installed package with
that ``__init__`` not executed: :func:`upstream_reader` registers an empty ``ogbench`` package pointing at the
installed directory, so ``ogbench.utils`` and ``ogbench.relabel_utils`` are upstream's files, byte for byte.

Single-task rewards (``task=``) are checked against upstream's whole path, ``ogbench.make_env_and_datasets`` on
a ``-singletask`` name, with the real environments (mujoco, dm_control and gymnasium are in
``requirements.txt``; the envs are state-based, nothing is rendered).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared fixture writer

from upstream_ref import upstream, upstream_required

from datasets_hub.loader import DatasetSpec, LoaderContext
from datasets_hub.loaders.ogbench.loader import OGBenchLoader, environment_card

from fixtures.ogbench_files import write_ogbench, write_task_file


def upstream_reader():
    """``ogbench.utils`` from the installed package, without running ``ogbench/__init__.py``."""
    spec = importlib.util.find_spec("ogbench")
    if spec is None or not spec.submodule_search_locations:
        if upstream_required():
            pytest.fail("ogbench is not installed in .venv-upstream (tests/upstream/requirements-nodeps.txt)")
        pytest.skip("ogbench is not installed (run `make test-upstream`)")
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "ogbench" or k.startswith("ogbench.")}
    package = types.ModuleType("ogbench")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["ogbench"] = package
    try:
        return importlib.import_module("ogbench.utils")
    finally:
        for k in [k for k in sys.modules if k == "ogbench" or k.startswith("ogbench.")]:
            sys.modules.pop(k)
        sys.modules.update(saved)


def ours(path: Path, dataset: str) -> dict[str, np.ndarray]:
    spec = DatasetSpec(id=f"ogbench/{dataset}", loader="ogbench")
    chunks = list(OGBenchLoader().episodes(spec, {f"{dataset}.npz": path}, LoaderContext(chunk_rows=5)))
    td = torch.cat(chunks)
    out = {
        "observations": td["observation"].numpy(),
        "next_observations": td["next", "observation"].numpy(),
        "actions": td["action"].numpy(),
        "truncated": td["next", "truncated"].numpy().reshape(-1),
        "episode": td["episode"].numpy(),
    }
    for key in ("qpos", "qvel", "button_states"):
        if ("info", key) in td.keys(include_nested=True):
            out[key] = td["info", key].numpy()
    return out


CASES = {
    "regular": ("cube-single-play-v0", {"lengths": [6, 3, 9, 2]}, np.float32, np.float32),
    "single-row trajectory mid-file": ("scene-play-v0", {"lengths": [4, 0, 5]}, np.float32, np.float32),
    "visual": ("visual-cube-single-play-v0", {"lengths": [3, 5], "visual": True, "info": False}, np.uint8, np.float32),
    "powderworld": (
        "powderworld-easy-play-v0",
        {"lengths": [4, 4], "visual": True, "discrete": True, "info": False},
        np.uint8,
        np.int32,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_regular_form_matches_upstream(tmp_path, case):
    utils = upstream_reader()
    dataset, kwargs, ob_dtype, action_dtype = CASES[case]
    write_ogbench(tmp_path / f"{dataset}.npz", **kwargs)
    theirs = utils.load_dataset(
        str(tmp_path / f"{dataset}.npz"), ob_dtype=ob_dtype, action_dtype=action_dtype, add_info=True
    )
    mine = ours(tmp_path / f"{dataset}.npz", dataset)
    np.testing.assert_array_equal(mine["observations"], theirs["observations"])
    np.testing.assert_array_equal(mine["next_observations"], theirs["next_observations"])
    np.testing.assert_array_equal(mine["actions"], theirs["actions"])
    # upstream's regular `terminals` mark each trajectory's last transition: our truncated flags
    np.testing.assert_array_equal(mine["truncated"], theirs["terminals"] > 0)
    for key in ("qpos", "qvel", "button_states"):
        if key in theirs:
            np.testing.assert_array_equal(mine[key], theirs[key])
    assert mine["observations"].dtype == theirs["observations"].dtype


@pytest.mark.parametrize("case", sorted(CASES))
def test_compact_form_matches_upstream(tmp_path, case):
    utils = upstream_reader()
    dataset, kwargs, ob_dtype, action_dtype = CASES[case]
    write_ogbench(tmp_path / f"{dataset}.npz", **kwargs)
    theirs = utils.load_dataset(
        str(tmp_path / f"{dataset}.npz"), ob_dtype=ob_dtype, action_dtype=action_dtype, compact_dataset=True
    )
    mine = ours(tmp_path / f"{dataset}.npz", dataset)
    valid = np.flatnonzero(theirs["valids"] > 0)  # rows with a next observation: our transitions, in order
    np.testing.assert_array_equal(mine["observations"], theirs["observations"][valid])
    np.testing.assert_array_equal(mine["next_observations"], theirs["observations"][valid + 1])
    np.testing.assert_array_equal(mine["actions"], theirs["actions"][valid])
    # compact `terminals` mark each trajectory's last transition (and its final row)
    np.testing.assert_array_equal(mine["truncated"], theirs["terminals"][valid] > 0)
    # every compact row that is not valid is a final observation: the last next observation of an episode
    final = np.flatnonzero(theirs["valids"] == 0)
    ends = np.flatnonzero(mine["truncated"])
    single_row = [r for r in final if r == 0 or theirs["valids"][r - 1] == 0]  # trajectories without transitions
    kept = [r for r in final if r not in single_row]
    np.testing.assert_array_equal(mine["next_observations"][ends], theirs["observations"][kept])


# One single-task name per environment kind (upstream's names: <dataset>-singletask[-taskN]-v0).
TASK_CASES = [
    "pointmaze-medium-navigate-singletask-task3-v0",
    "antmaze-large-navigate-singletask-v0",
    "humanoidmaze-giant-stitch-singletask-task5-v0",
    "antmaze-teleport-explore-singletask-task2-v0",
    "antsoccer-arena-navigate-singletask-v0",
    "antsoccer-medium-stitch-singletask-task1-v0",
    "cube-single-play-singletask-task1-v0",
    "cube-double-play-singletask-v0",
    "cube-triple-noisy-singletask-task5-v0",
    "cube-quadruple-play-singletask-task3-v0",
    "scene-play-singletask-v0",
    "scene-noisy-singletask-task4-v0",
    "puzzle-3x3-play-singletask-v0",
    "puzzle-4x4-play-singletask-task2-v0",
    "puzzle-4x5-noisy-singletask-task5-v0",
    "puzzle-4x6-play-singletask-v0",
]


@pytest.mark.parametrize("name", TASK_CASES)
def test_single_task_rewards_match_make_env_and_datasets(tmp_path, name):
    ogbench = upstream("ogbench")  # the real package: its environments need mujoco and dm_control
    entry = OGBenchLoader().entry_for(f"ogbench/{name}")
    assert entry is not None, name
    dataset = entry["params"]["dataset"]
    path = tmp_path / f"{dataset}.npz"
    write_task_file(path, dataset, [7, 0, 12, 30, 5], seed=len(name))
    write_task_file(tmp_path / f"{dataset}-val.npz", dataset, [3, 4], seed=1)
    env, theirs, _ = ogbench.make_env_and_datasets(name, dataset_path=str(path), add_info=True)
    # the card's environment is the one upstream makes for this name; a name without -taskN is upstream's
    # default task, and shares its build (same params) with the -taskN name, so the card names the numbered env
    task = entry["params"]["task"]
    expected = env.spec.id.replace("-singletask-v0", f"-singletask-task{task}-v0")
    assert environment_card(dataset, task)["env_id"] == expected
    spec = DatasetSpec(id=f"ogbench/{name}", loader="ogbench", params=entry["params"])
    td = torch.cat(list(OGBenchLoader().episodes(spec, {f"{dataset}.npz": path}, LoaderContext(chunk_rows=9))))
    reward = td["next", "reward"].numpy().reshape(-1)
    success = td["info", "success"].numpy().reshape(-1)
    np.testing.assert_array_equal(td["info", "qpos"].numpy(), theirs["qpos"])  # the same transitions, in order
    np.testing.assert_array_equal(reward, theirs["rewards"])
    assert reward.dtype == theirs["rewards"].dtype == np.float32
    np.testing.assert_array_equal(1.0 - success, theirs["masks"])
    np.testing.assert_array_equal(td["next", "truncated"].numpy().reshape(-1), theirs["terminals"] > 0)
    assert 0 < success.sum() < success.size, "the fixture must hold successes and failures"
    # the next state's flag is the following state's own flag within each episode
    inner = ~td["next", "truncated"].numpy().reshape(-1)
    np.testing.assert_array_equal(td["next", "info", "success"].numpy().reshape(-1)[inner], success[1:][inner[:-1]])
