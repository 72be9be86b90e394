"""Build benchmark: our D4RL loader vs TorchRL 0.14's ``D4RLExperienceReplay`` on the same local file.

Run (TorchRL must not be installed in the project venv, so this uses the bench venv)::

    .venv-bench/bin/python benchmarks/build.py              # 1M-transition file + a ~2 GB build
    .venv-bench/bin/python benchmarks/build.py --big-gb 0   # skip the ~2 GB build

It writes a D4RL-layout HDF5 file (``--rows`` transitions, observation 17 float32, action 6
float32, ``next_observations``, ``infos/qpos`` and ``infos/qvel`` 9 float64 each, as upstream
stores them, episodes of 1000 steps ending by timeout), then, each in a fresh subprocess:

- builds it with ``datasets_hub.download`` (the catalogue entry points at a ``file://`` URL, so the
  hub copies, checksums and converts it as it would a download), and with TorchRL's
  ``D4RLExperienceReplay(direct_download=True)`` whose URL table is pointed at the same file
  (``urllib`` copies ``file://`` URLs the way it downloads ``http://`` ones); each library builds
  ``--build-repeats`` times from nothing, interleaved, and the median build is reported; build time
  excludes imports, peak RSS is the child's ``ru_maxrss``;
- measures bytes on disk of each converted dataset (our raw copy is reported separately);
- measures the whole-process time from interpreter start to the first sample of the cached
  dataset (imports included; median of ``--repeats`` interleaved rounds) against ``python -c "import torch, tensordict"``;
- builds a ~``--big-gb`` GB file with our loader only and reports its peak RSS.

Prints a table and writes ``benchmarks/results/build.json``. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "build.json"
OBS, ACT, QPOS, EPISODE = 17, 6, 9, 1000
BYTES_PER_ROW = 2 * OBS * 4 + ACT * 4 + 4 + 1 + 1 + 2 * QPOS * 8
TORCHRL_NAME = "halfcheetah-medium-v2"  # any id TorchRL knows; its URL is redirected to our file


def make_file(path: Path, rows: int, block: int = 200_000) -> None:
    """A D4RL-layout file written block by block (the generator never holds it whole)."""
    import h5py

    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        ds = {
            "observations": f.create_dataset("observations", (rows, OBS), np.float32),
            "next_observations": f.create_dataset("next_observations", (rows, OBS), np.float32),
            "actions": f.create_dataset("actions", (rows, ACT), np.float32),
            "rewards": f.create_dataset("rewards", (rows,), np.float32),
            "terminals": f.create_dataset("terminals", (rows,), bool),
            "timeouts": f.create_dataset("timeouts", (rows,), bool),
            "infos/qpos": f.create_dataset("infos/qpos", (rows, QPOS), np.float64),
            "infos/qvel": f.create_dataset("infos/qvel", (rows, QPOS), np.float64),
        }
        for start in range(0, rows, block):
            stop = min(rows, start + block)
            t = np.arange(start, stop + 1)
            states = (t[:, None] + rng.standard_normal((len(t), OBS)) * 1e-3).astype(np.float32)
            step = t[:-1] % EPISODE
            ds["observations"][start:stop] = states[:-1]
            # inside an episode the next observation is the next row; at a timeout it is a state
            # the file never shows as an observation (the episode was cut)
            nxt = states[1:].copy()
            nxt[step == EPISODE - 1] += 0.5
            ds["next_observations"][start:stop] = nxt
            ds["actions"][start:stop] = rng.uniform(-1, 1, (stop - start, ACT)).astype(np.float32)
            ds["rewards"][start:stop] = rng.standard_normal(stop - start).astype(np.float32)
            ds["terminals"][start:stop] = False
            ds["timeouts"][start:stop] = step == EPISODE - 1
            ds["infos/qpos"][start:stop] = rng.standard_normal((stop - start, QPOS))
            ds["infos/qvel"][start:stop] = rng.standard_normal((stop - start, QPOS))
        # no scalar ``metadata/*``: TorchRL 0.14's PersistentTensorDict.from_h5 fails on 0-d datasets
        # (IndexError in _set_max_batch_size), and its comparison would not run


def tree_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_size
    return total


def child(code: str, env: dict[str, str]) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line last."""
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child failed:\n{code}\n--- stderr ---\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def time_to_first_sample(codes: dict[str, str], env: dict[str, str], repeats: int) -> dict[str, float]:
    """Median seconds from spawning the interpreter to the moment the child has its first sample,
    per name; the children run interleaved (one of each per round), so machine noise hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in codes}
    for _ in range(repeats):
        for name, code in codes.items():
            spawned = time.time()
            out = child(code, env)
            times[name].append(out["t"] - spawned)
    return {name: statistics.median(values) for name, values in times.items()}


def median_builds(jobs: dict[str, tuple[str, list[Path]]], env: dict[str, str], repeats: int) -> dict[str, dict]:
    """Each job (code, directories to clear first) built ``repeats`` times, interleaved; the run with
    the median build time per job (its peak RSS and output come along)."""
    runs: dict[str, list[dict]] = {name: [] for name in jobs}
    for _ in range(repeats):
        for name, (code, clear) in jobs.items():
            for path in clear:
                shutil.rmtree(path, ignore_errors=True)
            runs[name].append(child(code, env))
    return {
        name: sorted(out, key=lambda r: r["seconds"])[len(out) // 2] | {"all_seconds": [r["seconds"] for r in out]}
        for name, out in runs.items()
    }


OURS_BUILD = """
import json, resource, time
import torch, tensordict, datasets_hub
t0 = time.perf_counter()
path = datasets_hub.download({id!r})
seconds = time.perf_counter() - t0
print(json.dumps({{"seconds": seconds, "path": str(path),
                   "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""
TORCHRL_BUILD = """
import json, resource, time
from torchrl.data.datasets import d4rl as trl_d4rl
from torchrl.data.datasets import D4RLExperienceReplay
trl_d4rl.D4RL_DATASETS[{name!r}] = {url!r}
t0 = time.perf_counter()
rb = D4RLExperienceReplay({name!r}, batch_size=256, root={root!r}, direct_download=True)
seconds = time.perf_counter() - t0
print(json.dumps({{"seconds": seconds, "len": len(rb),
                   "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""
OURS_FIRST = """
import datasets_hub
rb = datasets_hub.load({id!r}, batch_size=256)
batch = rb.sample()
import json, time
print(json.dumps({{"t": time.time(), "n": batch.batch_size[0]}}))
"""
TORCHRL_FIRST = """
from torchrl.data.datasets import D4RLExperienceReplay
rb = D4RLExperienceReplay({name!r}, batch_size=256, root={root!r}, direct_download=True)
batch = rb.sample()
import json, time
print(json.dumps({{"t": time.time(), "n": batch.batch_size[0]}}))
"""
BASELINE = """
import torch, tensordict
import json, time
print(json.dumps({"t": time.time()}))
"""


def registry(work: Path, entries: dict[str, Path]) -> Path:
    path = work / "registry.yaml"
    lines = []
    for dataset_id, file in sorted(entries.items()):
        lines += [
            f"{dataset_id}:",
            "  loader: d4rl",
            "  resources:",
            f"    - url: file://{file}",
            "  license: CC0",
            "  description: synthetic D4RL-layout benchmark file",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def run(work: Path, rows: int, big_gb: float, repeats: int, build_repeats: int) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    src = work / "bench.hdf5"
    t0 = time.perf_counter()
    make_file(src, rows)
    print(
        f"generated {src} ({src.stat().st_size / 1e6:.0f} MB, {rows} rows) in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    big_rows = int(big_gb * 1e9 / BYTES_PER_ROW)
    entries = {"d4rl/bench-v0": src}
    if big_rows:
        big = work / "bench-big.hdf5"
        make_file(big, big_rows)
        entries["d4rl/bench-big-v0"] = big
        print(f"generated {big} ({big.stat().st_size / 1e9:.2f} GB, {big_rows} rows)", flush=True)
    env = dict(
        os.environ,
        DATASETS_HUB_CACHE=str(work / "cache"),
        DATASETS_HUB_REGISTRY=str(registry(work, entries)),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("DATASETS_HUB_OFFLINE", None)
    for stale in (work / "cache", work / "torchrl"):
        shutil.rmtree(stale, ignore_errors=True)

    trl_root = work / "torchrl"
    # every build starts from nothing: ours copies the file:// source into its raw cache, as TorchRL does
    built = median_builds(
        {
            "ours": (OURS_BUILD.format(id="d4rl/bench-v0"), [work / "cache"]),
            "torchrl": (TORCHRL_BUILD.format(name=TORCHRL_NAME, url=f"file://{src}", root=str(trl_root)), [trl_root]),
        },
        env,
        build_repeats,
    )
    ours, theirs = built["ours"], built["torchrl"]
    ours_bytes = tree_bytes(Path(ours["path"]))
    raw_bytes = src.stat().st_size
    theirs_bytes = tree_bytes(trl_root / TORCHRL_NAME)

    offline = dict(env, DATASETS_HUB_OFFLINE="1")
    first = time_to_first_sample(
        {
            "baseline": BASELINE,
            "ours": OURS_FIRST.format(id="d4rl/bench-v0"),
            "torchrl": TORCHRL_FIRST.format(name=TORCHRL_NAME, root=str(trl_root)),
        },
        offline,
        repeats,
    )
    baseline, ours_first, theirs_first = first["baseline"], first["ours"], first["torchrl"]

    big_build = child(OURS_BUILD.format(id="d4rl/bench-big-v0"), env) if big_rows else None

    rows_out = [
        {
            "metric": "build time (s)",
            "ours": ours["seconds"],
            "torchrl": theirs["seconds"],
            "ratio": ours["seconds"] / theirs["seconds"],
            "target": "<= 1.0x",
            "ok": ours["seconds"] <= theirs["seconds"],
        },
        {
            "metric": "bytes on disk (MB)",
            "ours": ours_bytes / 1e6,
            "torchrl": theirs_bytes / 1e6,
            "ratio": ours_bytes / theirs_bytes,
            "target": "<= 0.55x",
            "ok": ours_bytes <= 0.55 * theirs_bytes,
        },
        {
            "metric": "raw copy kept (MB)",
            "ours": raw_bytes / 1e6,
            "torchrl": 0.0,
            "ratio": None,
            "target": "-",
            "ok": None,
        },
        {
            "metric": "build peak RSS (MB)",
            "ours": ours["peak_rss"] / 1e6,
            "torchrl": theirs["peak_rss"] / 1e6,
            "ratio": ours["peak_rss"] / theirs["peak_rss"],
            "target": "-",
            "ok": None,
        },
        {
            "metric": "start -> first sample (s)",
            "ours": ours_first,
            "torchrl": theirs_first,
            "ratio": ours_first / theirs_first,
            "target": "-",
            "ok": None,
        },
        {
            "metric": "  beyond import torch, tensordict (s)",
            "ours": ours_first - baseline,
            "torchrl": theirs_first - baseline,
            "ratio": None,
            "target": "<= 0.2 s",
            "ok": ours_first - baseline <= 0.2,
        },
    ]
    if big_build is not None:
        rows_out.append(
            {
                "metric": f"peak RSS, {big_gb:g} GB build (MB)",
                "ours": big_build["peak_rss"] / 1e6,
                "torchrl": None,
                "ratio": None,
                "target": "<= 1000 MB",
                "ok": big_build["peak_rss"] <= 1e9,
            }
        )
        rows_out.append(
            {
                "metric": f"build time, {big_gb:g} GB file (s)",
                "ours": big_build["seconds"],
                "torchrl": None,
                "ratio": None,
                "target": "-",
                "ok": None,
            }
        )
    return {
        "rows": rows,
        "baseline_import_torch_tensordict_s": baseline,
        "table": rows_out,
        "build_seconds": {"ours": ours["all_seconds"], "torchrl": theirs["all_seconds"]},
        "python": sys.executable,
        "big_rows": big_rows,
    }


def minari_rows(work: Path) -> list[dict] | str:
    sys.path.insert(0, str(HERE))
    try:
        import minari_compare  # written by the Minari loader's author; optional
    except ImportError:
        return "skipped (benchmarks/minari_compare.py is not present)"
    try:
        return list(minari_compare.run(work / "minari"))
    except Exception as exc:  # noqa: BLE001 - reported in the table, so the D4RL figures are not lost
        return f"failed: {type(exc).__name__}: {exc}"


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def print_table(rows: list[dict]) -> None:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    cells = [[fmt(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--big-gb", type=float, default=2.0, help="size of the RSS-only build; 0 skips it")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the first-sample timing")
    parser.add_argument("--build-repeats", type=int, default=3, help="builds per library (median reported)")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary directory, removed after")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    args = parser.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="datasets_hub_bench_"))
    try:
        result = run(work, args.rows, args.big_gb, args.repeats, args.build_repeats)
        print(
            f"\nD4RL build, {args.rows} transitions (python: {sys.executable}); "
            f"`import torch, tensordict` baseline {result['baseline_import_torch_tensordict_s']:.3f} s"
        )
        print_table(result["table"])
        minari = minari_rows(work)
        result["minari"] = minari
        print("\nMinari comparison:", end=" ")
        if isinstance(minari, str):
            print(minari)
        else:
            print()
            print_table(minari)
        result["command"] = " ".join([Path(sys.executable).name, *sys.argv])
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"\nwrote {RESULTS}")
    finally:
        if args.workdir is None and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
