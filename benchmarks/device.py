"""Device sampling benchmark: slices from a build held in device memory, sampled with no host sync (issue 18).

    .venv/bin/python benchmarks/device.py                      # CUDA rows (10^8 rows) when a GPU is present, CPU rows always
    .venv/bin/python benchmarks/device.py --rows 20000000       # a smaller device build
    .venv/bin/python benchmarks/device.py --cpu-rows 1000000    # the size of the CPU rows
    .venv/bin/python benchmarks/device.py --rows 345690000 --episode-len 500 --obs 24 --act 6 --cases 256x4 64x4
                                                                # mt30's shape (issue 32)

The build is made synthetically in device memory in the lean layout of a hub build (observations
stored once per episode with T+1 rows, per-step action/reward/flags, episodes of 1000 steps,
halfcheetah sizes by default: 17-float observations, 6-float actions; ``--episode-len``, ``--obs`` and
``--act`` change them), so the 10^8-row case needs no 10 GB file on disk; it is the same ``DeviceStorage`` that ``load(..., device=...)`` makes from a build.
Each case times ``calls`` back-to-back ``rb.sample()`` calls and reports samples (transitions) per
second, with the device synchronised once at the end, and the host time per call (what a training
loop waits for). On CUDA a second pass runs under ``torch.cuda.set_sync_debug_mode("error")``; on
every device one call runs under :func:`datasets_hub.buffers.device.no_host_sync`. Without CUDA the
device rows are skipped with the reason, printed and in the JSON. Results: ``benchmarks/results/device.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command, environment, write_report

from datasets_hub import TensorDictReplayBuffer
from datasets_hub.buffers.device import DeviceSliceSampler, DeviceStorage, no_host_sync
from datasets_hub.buffers.device.graphs import GraphedTensorDictReplayBuffer
from datasets_hub.buffers.device.memory import check_fits
from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.writers import ImmutableDatasetWriter

EPISODE_LEN = 1000
OBS, ACT = 17, 6
CASES = [("slices 8x32 b256", 8, 256), ("slices 128x32 b4096", 128, 4096)]


def synthetic_bytes(rows: int, episode_len: int = EPISODE_LEN, obs_width: int = OBS, act_width: int = ACT) -> int:
    """Device bytes of :func:`synthetic_build`'s ``rows`` transitions: float32 observations stored once per
    episode with ``T + 1`` rows, float32 actions and rewards, two flag bytes a step, and the episode index."""
    episodes = max(1, rows // episode_len)
    return (rows + episodes) * obs_width * 4 + rows * (act_width * 4 + 4 + 2) + episodes * 24


def synthetic_build(
    rows: int, device: torch.device, episode_len: int = EPISODE_LEN, obs_width: int = OBS, act_width: int = ACT
) -> DeviceStorage:
    """A lean-TED build of ``rows`` transitions (episodes of ``episode_len`` steps, ``obs_width``-float
    observations, ``act_width``-float actions) made directly in ``device`` memory."""
    episodes = max(1, rows // episode_len)
    rows = episodes * episode_len
    frame_rows = rows + episodes
    needed = synthetic_bytes(rows, episode_len, obs_width, act_width)
    check_fits(needed, device, f"a synthetic build of {rows:,} rows")
    gen = torch.Generator(device=device).manual_seed(0)
    obs = torch.empty(frame_rows, obs_width, device=device)
    step = 1 << 24
    for lo in range(0, frame_rows, step):  # in pieces: randn's temporaries stay small
        obs[lo : lo + step].normal_(generator=gen)
    action = torch.empty(rows, act_width, device=device).uniform_(-1, 1, generator=gen)
    reward = torch.empty(rows, 1, device=device).normal_(generator=gen)
    last = (torch.arange(rows, device=device) % episode_len == episode_len - 1).unsqueeze(1)
    index = EpisodeIndex.from_lengths([episode_len] * episodes)
    return DeviceStorage(
        device,
        rows,
        {
            ("action",): action,
            ("next", "reward"): reward,
            ("next", "terminated"): torch.zeros(rows, 1, dtype=torch.bool, device=device),
            ("next", "truncated"): last,
        },
        frames={("observation",): obs},
        next_frames=frozenset({("observation",)}),
        episodes=index,
        episode_ids=torch.arange(episodes),
        derive_ted=True,
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def parse_case(text: str) -> tuple[str, int, int]:
    """``"256x4"`` (slices x steps) as ``(label, num_slices, batch)``."""
    try:
        slices, steps = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--cases takes SLICESxSTEPS such as 256x4, got {text!r}") from None
    return f"slices {slices}x{steps} b{slices * steps}", slices, slices * steps


def run_case(
    storage: DeviceStorage, num_slices: int, batch: int, calls: int, repeats: int, graphs: bool = False
) -> dict[str, Any]:
    device = storage.device
    sampler = DeviceSliceSampler(num_slices=num_slices)
    rb = (GraphedTensorDictReplayBuffer if graphs else TensorDictReplayBuffer)(
        storage=storage,
        sampler=sampler,
        writer=ImmutableDatasetWriter(),
        batch_size=batch,
        generator=torch.Generator(device=device).manual_seed(1),
    )
    sampler.prepare(storage, batch)
    for _ in range(10):
        rb.sample()
    _sync(device)
    if not graphs:  # the op-level checker sees a replay as no ops; CUDA's own check below covers it
        with no_host_sync():
            rb.sample()
    cuda_checked = None
    if device.type == "cuda":
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(10):
                rb.sample()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        _sync(device)
        cuda_checked = True
    rates, host_us = [], []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            rb.sample()
        t1 = time.perf_counter()
        _sync(device)
        t2 = time.perf_counter()
        rates.append(calls * batch / (t2 - t0))
        host_us.append((t1 - t0) / calls * 1e6)
    return {
        "samples_per_s": statistics.median(rates),
        "us_per_batch": batch / statistics.median(rates) * 1e6,
        "host_us_per_call": statistics.median(host_us),
        "no_host_sync_checked": not graphs,
        "cuda_graphs": graphs,
        "cuda_sync_debug_mode_error_passed": cuda_checked,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10**8, help="rows of the CUDA build")
    parser.add_argument("--cpu-rows", type=int, default=10**6, help="rows of the CPU build")
    parser.add_argument("--calls", type=int, default=200, help="sample() calls per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings per case (median reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1, as benchmarks/sampling.py)")
    parser.add_argument("--episode-len", type=int, default=EPISODE_LEN, help="steps per episode")
    parser.add_argument("--obs", type=int, default=OBS, help="float32 observation values per step")
    parser.add_argument("--act", type=int, default=ACT, help="float32 action values per step")
    parser.add_argument("--cases", nargs="+", default=None, help="SLICESxSTEPS per case (default: 8x32 128x32)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "device.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cases = [parse_case(c) for c in args.cases] if args.cases else CASES
    report: dict[str, Any] = {"command": command(), "environment": environment(), "devices": {}}
    targets: list[tuple[str, int]] = [("cpu", args.cpu_rows)]
    if torch.cuda.is_available():
        targets.insert(0, ("cuda", args.rows))
        report["environment"]["gpu"] = torch.cuda.get_device_name(0)
    else:
        reason = f"no CUDA device (torch {torch.__version__}, torch.cuda.is_available() is False)"
        print(f"device rows skipped: {reason}")
        report["devices"]["cuda"] = {"skipped": reason}
    print(f"{'device':<6} {'rows':>12} {'case':<34} {'samples/s':>14} {'us/batch':>10} {'host us/call':>13}")
    for name, rows in targets:
        device = torch.device(name, 0) if name == "cuda" else torch.device(name)
        t0 = time.perf_counter()
        storage = synthetic_build(rows, device, args.episode_len, args.obs, args.act)
        _sync(device)
        entry: dict[str, Any] = {"rows": len(storage), "build_s": time.perf_counter() - t0, "cases": {}}
        entry["bytes_per_transition"] = round(
            synthetic_bytes(len(storage), args.episode_len, args.obs, args.act) / len(storage), 1
        )
        for case, num_slices, batch in cases:
            for graphs in (False, True) if device.type == "cuda" else (False,):
                result = run_case(storage, num_slices, batch, args.calls, args.repeats, graphs=graphs)
                label = case + (", cuda_graphs" if graphs else "")
                entry["cases"][label] = result
                print(
                    f"{name:<6} {len(storage):>12,} {label:<34} {result['samples_per_s']:>14,.0f} "
                    f"{result['us_per_batch']:>10.1f} {result['host_us_per_call']:>13.1f}"
                )
        report["devices"][name] = entry
        del storage
        if device.type == "cuda":
            torch.cuda.empty_cache()
    write_report(report, args.out)


if __name__ == "__main__":
    main()
