"""Minari build benchmark: our Minari loader against TorchRL 0.14's ``MinariExperienceReplay``.

``run(workdir)`` writes a ~100k-step Minari dataset (Pendulum-v1, random actions, 500 episodes of
200 steps, hdf5 backend, the layout ``minari.DataCollector`` writes) into a local Minari store
under ``workdir``, then builds it in two fresh processes:

- ours: ``datasets_hub.download("minari/<id>")`` with the project's interpreter (``.venv``);
- TorchRL: ``MinariExperienceReplay(id, load_from_local_minari=True, root=…)`` with the
  interpreter of ``.venv-bench`` (TorchRL must not be installed next to our tensordict).

Each row reports the import time, the build time (the build call alone, imports excluded), the
whole process time (interpreter start, imports, build, value check), the bytes the build puts on disk and whether every value (observation,
next observation, action, reward, terminated, truncated, episode) equals what
``minari.load_dataset(id).iterate_episodes()`` returns (``all_zero`` flags a build whose every value
is zero: TorchRL 0.14.1 fills an in-memory TensorDict, then replaces it with ``memmap_like``, an
empty memmap of the same layout). No network is used.

Standalone: ``python benchmarks/minari_compare.py [workdir]`` prints the rows as JSON lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATASET_ID = "bench/pendulum-random-v0"
EPISODES, STEPS = 500, 200

# the value check both children run: minari's own episodes, concatenated in order
_MINARI_REFERENCE = r"""
import numpy as np, minari, warnings
def reference(dataset_id):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eps = list(minari.load_dataset(dataset_id).iterate_episodes())
    cat = lambda xs: np.concatenate(xs)
    return {
        "observation": cat([e.observations[:-1] for e in eps]),
        "next_observation": cat([e.observations[1:] for e in eps]),
        "action": cat([e.actions for e in eps]),
        "reward": cat([np.asarray(e.rewards).reshape(-1, 1) for e in eps]),
        "terminated": cat([np.asarray(e.terminations).reshape(-1, 1) for e in eps]),
        "truncated": cat([np.asarray(e.truncations).reshape(-1, 1) for e in eps]),
        "episode": cat([np.full(len(e), e.id) for e in eps]),
    }
def same(td, ref):
    pairs = {"observation": td["observation"], "next_observation": td["next", "observation"],
             "action": td["action"], "reward": td["next", "reward"], "terminated": td["next", "terminated"],
             "truncated": td["next", "truncated"], "episode": td["episode"]}
    bad = [k for k, v in pairs.items()
           if v.shape[0] != ref[k].shape[0] or not np.array_equal(v.numpy().reshape(ref[k].shape), ref[k])
           or (k not in ("episode", "terminated", "truncated") and v.numpy().dtype != ref[k].dtype)]
    return bad
def all_zero(td):
    return not any(bool(td.get(k).any()) for k in td.keys(True, True))
"""

_OURS = (
    _MINARI_REFERENCE
    + r"""
import sys, time, json
t0 = time.perf_counter()
import datasets_hub as dh
from datasets_hub import hub
from datasets_hub.build import pipeline as build  # the imports a build needs, timed apart from the build
from datasets_hub.cache.layout import dir_size
t1 = time.perf_counter()
path = dh.download("minari/" + sys.argv[1])
build_s = time.perf_counter() - t1
rb = dh.load("minari/" + sys.argv[1])
bad = same(rb[:], reference(sys.argv[1]))
print(json.dumps({"import_s": t1 - t0, "build_s": build_s, "bytes": dir_size(path), "transitions": len(rb),
                  "mismatched": bad, "all_zero": all_zero(rb[:])}))
"""
)

_TORCHRL = (
    _MINARI_REFERENCE
    + r"""
import sys, time, json, os
t0 = time.perf_counter()
from torchrl.data.datasets.minari_data import MinariExperienceReplay
t1 = time.perf_counter()
rb = MinariExperienceReplay(sys.argv[1], batch_size=256, root=sys.argv[2], load_from_local_minari=True)
build_s = time.perf_counter() - t1
path = os.path.join(sys.argv[2], sys.argv[1])
size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
bad = same(rb[:], reference(sys.argv[1]))
print(json.dumps({"import_s": t1 - t0, "build_s": build_s, "bytes": size, "transitions": len(rb),
                  "mismatched": bad, "all_zero": all_zero(rb[:])}))
"""
)


def make_dataset(store: Path, dataset_id: str = DATASET_ID, episodes: int = EPISODES, seed: int = 0) -> float:
    """Write the benchmark dataset into the Minari store ``store`` (no-op if present); return seconds."""
    import warnings

    import gymnasium as gym
    import minari
    import numpy as np
    from minari.data_collector.episode_buffer import EpisodeBuffer

    if (store / dataset_id / "data" / "metadata.json").is_file():
        return 0.0
    start = time.perf_counter()
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(store)
    try:
        env = gym.make("Pendulum-v1")  # 200-step TimeLimit: every episode ends truncated
        env.action_space.seed(seed)
        buffers = []
        for e in range(episodes):
            obs, _ = env.reset(seed=seed + e)
            observations, actions, rewards, terminations, truncations = [obs], [], [], [], []
            while True:
                action = env.action_space.sample()
                obs, reward, terminated, truncated, _ = env.step(action)
                observations.append(obs)
                actions.append(action)
                rewards.append(reward)
                terminations.append(terminated)
                truncations.append(truncated)
                if terminated or truncated:
                    break
            buffers.append(
                EpisodeBuffer(
                    id=e,
                    seed=seed + e,
                    observations=np.stack(observations),
                    actions=np.stack(actions),
                    rewards=rewards,
                    terminations=terminations,
                    truncations=truncations,
                    infos={},
                )
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            minari.create_dataset_from_buffers(
                dataset_id,
                buffers,
                env=env,
                data_format="hdf5",
                algorithm_name="random",
                author="datasets_hub benchmark",
                description="Pendulum-v1, uniform random actions",
            )
    finally:
        if previous is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = previous
    return time.perf_counter() - start


def _interpreter(name: str) -> Path | None:
    path = REPO / name / "bin" / "python"
    return path if path.exists() else None


def _child(python: Path, code: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    start = time.perf_counter()
    proc = subprocess.run([str(python), "-c", code, *args], env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {
            "error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}",
            "process_s": wall,
        }
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = wall
    return result


def run(workdir: Path) -> list[dict[str, Any]]:
    """Build the benchmark dataset with both implementations; one row per implementation."""
    workdir = Path(workdir)
    store = workdir / "minari-store"
    store.mkdir(parents=True, exist_ok=True)
    generate_s = make_dataset(store)
    source_bytes = sum(p.stat().st_size for p in (store / DATASET_ID).rglob("*") if p.is_file())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(MINARI_DATASETS_PATH=str(store), DATASETS_HUB_OFFLINE="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    common = {
        "benchmark": "minari-build",
        "dataset": f"{DATASET_ID} ({EPISODES * STEPS} transitions, hdf5)",
        "source_bytes": source_bytes,
        "generate_s": round(generate_s, 2),
    }
    rows = []
    ours = _interpreter(".venv") or Path(sys.executable)
    hub_cache = workdir / "hub-cache"
    if hub_cache.exists():
        import shutil

        shutil.rmtree(hub_cache)
    result = _child(ours, _OURS, [DATASET_ID], {**env, "DATASETS_HUB_CACHE": str(hub_cache)})
    rows.append({**common, "impl": "datasets_hub", **_tidy(result)})
    bench = _interpreter(".venv-bench")
    if bench is None:
        rows.append({**common, "impl": "torchrl MinariExperienceReplay", "error": "no .venv-bench (see README)"})
    else:
        root = workdir / "torchrl-root"
        if root.exists():
            import shutil

            shutil.rmtree(root)
        result = _child(bench, _TORCHRL, [DATASET_ID, str(root)], env)
        rows.append({**common, "impl": "torchrl MinariExperienceReplay", **_tidy(result)})
    ok = [r for r in rows if "bytes" in r]
    if len(ok) == 2:
        rows[0]["bytes_vs_torchrl"] = round(ok[0]["bytes"] / ok[1]["bytes"], 3)
        rows[0]["build_vs_torchrl"] = round(ok[0]["build_s"] / ok[1]["build_s"], 3)
    return rows


def _tidy(result: dict[str, Any]) -> dict[str, Any]:
    out = dict(result)
    for key in ("import_s", "build_s", "process_s"):
        if key in out:
            out[key] = round(out[key], 3)
    if "mismatched" in out:
        out["values_match"] = not out["mismatched"]
        if not out["mismatched"]:
            del out["mismatched"]
    if not out.get("all_zero"):
        out.pop("all_zero", None)
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="minari-bench-"))
    for row in run(target):
        print(json.dumps(row))
