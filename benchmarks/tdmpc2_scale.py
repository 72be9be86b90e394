"""TD-MPC2 mt30 at full size: does a slice batch cost the same over 345M rows as over 10^6 (issue 32)?

Run (TorchRL lives in its own venv; ~15 GB of temporary files for the full size, written once)::

    .venv-bench/bin/python benchmarks/tdmpc2_scale.py --tmp /tmp            # 10^6 and 345M rows, deleted after
    .venv-bench/bin/python benchmarks/tdmpc2_scale.py --sizes 1000000 10000000 345000000 --work /tmp/dh_work
    .venv-bench/bin/python benchmarks/tdmpc2_scale.py --sizes 1000000 10000000 --no-torchrl    # a minute

(``--work`` keeps the builds and reuses them on the next run: delete the folder afterwards.)

What it builds. One hub build per size in ``--sizes`` (the first is the reference), each made by the
build pipeline (``datasets_hub.build.pipeline.build``: the TED checks, the writer, the packed records,
the manifest; no shortcut) from a loader that yields what the ``tdmpc2`` loader yields for mt30: episodes
of 500 transitions (mt30's 501 rows per episode, the reset row giving the first observation), the
keys ``observation``, ``action``, ``task`` (int64, 30 tasks), ``episode``, ``next/observation``
(stored once per episode), ``next/reward``, ``next/terminated``, ``next/truncated`` (every episode
ends truncated). The full size is mt30's: 690,000 episodes, 345,000,000 transitions.

What is narrower than mt30. The leaves are small so that the 345M-row build fits a shared disk:
``--obs-width`` float16 observations (default 1; mt30 stores 24 float32) and one float16 action
(mt30: 6 float32). The cost of gathering a batch grows with the bytes of a row, the same at every
size; what this benchmark asks is whether the *bookkeeping* (episode index, slice starts, the
per-row episode ordinal) stays flat as rows and episodes grow ~345x. ``bytes_per_transition``
reports what the real mt30 takes per transition in a build, and what a device-resident copy needs.

Timed in one run, one phase per library (its files read into the page cache, the other's dropped from
it: at 345M rows both working sets together do not fit a 23 GB machine, and every call then waits on the
disk; major page faults per call are reported), the sizes interleaved in a new seeded order every round,
GC paused, 1 torch thread, medians: ``rb.sample()`` of 256 slices of 4 steps (pytorch/rl#2669's batch: 1024 rows) and of 64 slices of
4 steps (batch 256), ``--shapes``, from

- ``ours``: ``dh.TensorDictReplayBuffer`` + ``dh.SliceSampler`` over the memory-mapped build
  (``DatasetStorage``), a full TED batch (13 leaves: the observations of t and t + 1 included);
- ``torchrl``: TorchRL's ``TensorDictReplayBuffer`` + ``SliceSampler(end_key=("next", "truncated"),
  cache_values=True)`` over a ``TensorStorage`` of memory-mapped tensors (what ``LazyMemmapStorage``
  holds once filled): the build's own per-step files (action, reward, flags, task: no copy) plus
  ``observation`` and ``next/observation`` written here per row (TorchRL has no shared-next layout).
  TorchRL's batch has fewer leaves and bytes: the comparison favours it.

Memory options, to see where the cost of a batch over many rows goes: ``--populate`` maps every page
of ours' files into the process before timing (a long run's steady state); ``--in-memory`` samples
from ``DatasetStorage(path, in_memory=True)`` (the build copied into anonymous memory, advised for
transparent huge pages); ``--thp off`` disables transparent huge pages for the whole process
(``prctl(PR_SET_THP_DISABLE)``: every mapping in 4 KiB pages), and ``--thp compare`` (with
``--in-memory``) copies each build twice, with 2 MiB pages and then with 4 KiB pages, all timed
interleaved in one process; ``--random`` advises ``MADV_RANDOM`` on ours' file mappings. The report
says how much of the process was mapped in 2 MiB pages while timed (``/proc/self/smaps_rollup``).

The first call of each (the one that derives or loads the episode boundaries) is reported on its own.
Values of every build are checked on sampled batches (observation = step, next observation =
step + 1, task = episode % 30, slices inside one episode). Prints a table and writes
``benchmarks/results/tdmpc2_scale.json``; the temporary builds are deleted at the end (not with ``--work``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import MemoryMappedTensor, TensorDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command, environment, write_report
from sampling import time_calls

import datasets_hub as dh
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext

try:
    import torchrl
    from torchrl.data import TensorDictReplayBuffer as RLTensorDictReplayBuffer
    from torchrl.data import TensorStorage as RLTensorStorage
    from torchrl.data.replay_buffers import SliceSampler as RLSliceSampler
except ImportError:  # the benchmark still runs, TorchRL columns marked absent
    torchrl = None

STEPS = 500  # transitions per mt30 episode (501 rows upstream)
TASKS = 30
MT30_EPISODES = 690_000
#: mt30 as the tdmpc2 loader stores it: (values, bytes each). TD-MPC2 zero-pads observations and actions to
#: the largest task of the set (``MultitaskWrapper``, float32 boxes): 24 observation values (walker, fish-swim)
#: and 6 actions (walker, cheetah) for mt30's 30 DMControl tasks; reward float32, task int64 (the loader's dtype)
MT30_OBS, MT30_ACTION, MT30_REWARD, MT30_TASK = (24, 4), (6, 4), 4, 8
EPISODES_PER_CHUNK = 2_000  # 10^6 rows per loader chunk


class _MT30Shaped(Loader):
    """mt30's episode structure with narrow leaves, as the ``tdmpc2`` loader hands it to the build."""

    name = "bench-mt30"
    format_version = 1

    def resources(self, spec: DatasetSpec) -> list:
        return []

    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDict]:
        episodes, width = int(spec.params["episodes"]), int(spec.params["obs_width"])
        for first in range(0, episodes, EPISODES_PER_CHUNK):
            yield mt30_chunk(first, min(EPISODES_PER_CHUNK, episodes - first), width)


def mt30_chunk(first: int, episodes: int, width: int) -> TensorDict:
    """Episodes ``first..first+episodes-1``: observation = [step, episode % 1000 / 8, ...] (float16,
    exact), next observation = the following step, task = episode % 30, reward = step (float32)."""
    n = episodes * STEPS
    ids = torch.arange(first, first + episodes)
    obs = torch.empty(episodes, STEPS + 1, width, dtype=torch.float16)
    obs[..., 0] = torch.arange(STEPS + 1, dtype=torch.float16)
    if width > 1:
        obs[..., 1:] = ((ids % 1000).to(torch.float16) / 8)[:, None, None]
    step = torch.arange(STEPS).repeat(episodes)
    last = (step == STEPS - 1).unsqueeze(-1)
    return TensorDict(
        {
            "observation": obs[:, :-1].reshape(n, width),
            "action": ((step % 64).to(torch.float16) / 64).unsqueeze(-1),
            "task": (ids % TASKS).repeat_interleave(STEPS),
            "episode": ids.repeat_interleave(STEPS),
            "next": {
                "observation": obs[:, 1:].reshape(n, width),
                "reward": step.to(torch.float32).unsqueeze(-1),
                "terminated": torch.zeros(n, 1, dtype=torch.bool),
                "truncated": last,
            },
        },
        batch_size=[n],
    )


def make_build(episodes: int, width: int, cache: Path) -> Path:
    from datasets_hub.build.pipeline import build

    os.environ["DATASETS_HUB_CACHE"] = str(cache)
    spec = DatasetSpec(id="bench/mt30-shaped", loader="bench-mt30", params={"episodes": episodes, "obs_width": width})
    return build(spec, _MT30Shaped(), {}, [])


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def torchrl_storage(build_dir: Path, episodes: int, width: int, scratch: Path) -> Any:
    """TorchRL's storage of the same rows: the build's per-step files mapped as they are, and the
    observations of t and t + 1 written per row (TorchRL stores ``next`` values per row)."""
    manifest = json.loads((build_dir / "manifest.json").read_text())
    n = episodes * STEPS
    leaves: dict[Any, torch.Tensor] = {}
    for name, entry in manifest["schema"].items():
        group, _, key = name.partition("/")
        if group != "steps" or key.startswith("_"):
            continue
        shape = [n, *entry["shape"]]
        leaves[tuple(key.split("/"))] = MemoryMappedTensor.from_filename(
            build_dir / "data" / f"{name}.memmap", dtype=getattr(torch, entry["dtype"]), shape=shape
        )
    scratch.mkdir(parents=True, exist_ok=True)
    complete = scratch / "complete"  # written last: a --work rerun maps the files again
    for key, offset in (("observation", 0), ("next_observation", 1)):
        if complete.exists():
            out = MemoryMappedTensor.from_filename(scratch / f"{key}.memmap", dtype=torch.float16, shape=(n, width))
            leaves[("observation",) if offset == 0 else ("next", "observation")] = out
            continue
        out = MemoryMappedTensor.empty((n, width), dtype=torch.float16, filename=scratch / f"{key}.memmap")
        for first in range(0, episodes, EPISODES_PER_CHUNK):
            e = min(EPISODES_PER_CHUNK, episodes - first)
            td = mt30_chunk(first, e, width)
            out[first * STEPS : (first + e) * STEPS] = td["observation" if offset == 0 else ("next", "observation")]
        leaves[("observation",) if offset == 0 else ("next", "observation")] = out
    complete.touch()
    td = TensorDict({}, batch_size=[n])
    for key, value in leaves.items():
        td.set(key, value)
    return RLTensorStorage(td)


def ours_files(build_dir: Path) -> list[Path]:
    """The files a slice batch of ours reads: observations, packed per-step records, the episode index."""
    data = build_dir / "data"
    return sorted([*(data / "obs").rglob("*.memmap"), *(data / "steps").glob("_packed*.memmap"),
                   *(data / "episodes").rglob("*.memmap")])  # fmt: skip


def torchrl_files(build_dir: Path, scratch: Path) -> list[Path]:
    """The files TorchRL's batch reads: the build's per-step leaves and its own per-row observations."""
    steps = [p for p in (build_dir / "data" / "steps").rglob("*.memmap") if not p.name.startswith("_")]
    return sorted([*steps, *scratch.glob("*.memmap")])


def warm(paths: list[Path]) -> None:
    """Read ``paths`` once, so that the timed calls find their pages in the page cache."""
    for path in paths:
        with open(path, "rb") as fh:
            while fh.readinto(_READ_BUFFER):
                pass


MADV_POPULATE_READ = 22  # Linux >= 5.14: map a range's pages into this process (reading them if needed)


def _advise_mappings(paths: list[Path], advice: int) -> int:
    """``madvise(advice)`` on every mapping of ``paths`` in this process; returns the bytes advised."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    names = {str(p.resolve()) for p in paths}
    done = 0
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip() in names:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if libc.madvise(lo, hi - lo, advice) == 0:
                    done += hi - lo
    return done


def populate(paths: list[Path]) -> int:
    """Map every page of this process's mappings of ``paths`` (``madvise(MADV_POPULATE_READ)``), as a long run's
    calls eventually do: the steady state a training run samples in. Without it, a 9 GB mapping mapped page by
    page on first touch costs a minor fault per new page for thousands of calls. Returns the bytes mapped."""
    return _advise_mappings(paths, MADV_POPULATE_READ)


MADV_RANDOM = 1  # no read-ahead around a fault in this range (the pages read are the ones touched)
PR_SET_THP_DISABLE = 41  # prctl: no transparent huge pages for any mapping of this process (anonymous or file)


def advise_random(paths: list[Path]) -> int:
    """``madvise(MADV_RANDOM)`` on this process's mappings of ``paths``; returns the bytes advised."""
    return _advise_mappings(paths, MADV_RANDOM)


def disable_huge_pages() -> None:
    """No transparent huge pages in this process from now on (``prctl(PR_SET_THP_DISABLE)``): the
    library's ``MADV_HUGEPAGE`` advice then has no effect, and every mapping uses 4 KiB pages."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
        raise SystemExit(f"--thp off: prctl(PR_SET_THP_DISABLE) failed (errno {ctypes.get_errno()})")


def page_sizes() -> dict[str, int]:
    """Bytes of this process's memory by kind of page (``/proc/self/smaps_rollup``): resident, anonymous
    memory in 2 MiB pages, file pages mapped as 2 MiB pages."""
    out = {}
    try:
        with open("/proc/self/smaps_rollup") as fh:
            for line in fh:
                name, _, rest = line.partition(":")
                if name in ("Rss", "AnonHugePages", "FilePmdMapped"):
                    out[name] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def drop(paths: list[Path]) -> None:
    """Ask the kernel to drop the cached pages of ``paths`` (files of this run only): room for the other phase."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


_READ_BUFFER = bytearray(64 << 20)


def major_faults() -> int:
    """Page faults of this process that had to read the disk so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt


def one_call_s(fn: Callable[[], Any]) -> float:
    """Seconds of the fastest of three calls."""
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def check_batch(batch: Any, slices: int, slice_len: int, label: str) -> None:
    """The sampled rows are what the loader wrote, and every slice stays inside one episode."""
    step = batch["observation"][:, 0].to(torch.int64)
    nxt = batch["next", "observation"][:, 0].to(torch.int64)
    episode = batch["episode"].reshape(slices, slice_len)
    ok = (
        bool((nxt == step + 1).all())
        and bool((batch["next", "reward"][:, 0].to(torch.int64) == step).all())
        and bool((batch["task"] == batch["episode"] % TASKS).all())
        and bool((episode == episode[:, :1]).all())
        and bool((step.reshape(slices, slice_len).diff(dim=1) == 1).all())
    )
    if not ok:
        raise RuntimeError(f"{label}: a sampled batch does not hold the rows the loader wrote")


def bytes_per_transition(steps: int = STEPS) -> dict[str, float]:
    """Bytes per transition of the real mt30, as a build stores it and as a device-resident copy needs it.

    A build keeps observations once per episode (``T + 1`` rows for ``T`` transitions), the per-step
    leaves in their own files and again in one packed record per row with a 4-byte episode ordinal
    (:mod:`datasets_hub.build.packed_steps`), and an episode index of four int64 columns. A device copy
    (``datasets_hub.build.device``) holds the observation rows, the per-step leaves and the episode index
    (the packed records are a host-side gather aid)."""
    obs = MT30_OBS[0] * MT30_OBS[1] * (steps + 1) / steps
    step_leaves = MT30_ACTION[0] * MT30_ACTION[1] + MT30_REWARD + MT30_TASK + 2  # + 2 bool flags
    index = 4 * 8 / steps
    packed = step_leaves + 4
    return {
        "obs": obs,
        "per_step": step_leaves,
        "packed_record": packed,
        "episode_index": index,
        "build": obs + step_leaves + packed + index,
        "device": obs + step_leaves + index,
    }


def open_cases(
    build_dir: Path,
    rows: int,
    pages: str | None,
    shapes: list[tuple[int, int]],
    fns: dict[str, Callable[[], Any]],
    built: dict[str, Any],
    args: argparse.Namespace,
    rl_dir: Path | None,
) -> list[dict[str, Any]]:
    """Open ours (and TorchRL's storage in ``rl_dir`` when given) over ``build_dir``, check a few batches,
    and add one sampling function per shape to ``fns``; returns the cases. ``pages`` (``"2M"`` or
    ``"4K"`` with ``--thp compare``) labels the in-memory copy and suffixes the names."""
    episodes = rows // STEPS
    suffix = f"_{pages}" if pages else ""
    t0 = time.perf_counter()
    storage = DatasetStorage(build_dir, in_memory=args.in_memory)
    if args.in_memory:
        built[f"in_memory_copy{suffix}_s"] = time.perf_counter() - t0
        drop(ours_files(build_dir))  # the copy is what is sampled: the files' cached pages may go
    rl_storage = None
    if rl_dir is not None:
        t0 = time.perf_counter()
        rl_storage = torchrl_storage(build_dir, episodes, args.obs_width, rl_dir)
        built["torchrl_storage_s"] = time.perf_counter() - t0
    cases = []
    for slices, slice_len in shapes:
        batch = slices * slice_len
        case: dict[str, Any] = {"rows": rows, "episodes": episodes, "slices": slices, "slice_len": slice_len}
        if pages:
            case["pages"] = pages
        name = case_name(case)
        rb = dh.TensorDictReplayBuffer(
            storage=storage,
            sampler=dh.SliceSampler(num_slices=slices),
            batch_size=batch,
            generator=torch.Generator().manual_seed(0),
        )
        t0 = time.perf_counter()
        first = rb.sample()
        case["ours_first_call_s"] = time.perf_counter() - t0
        for got in (first, rb.sample(), rb.sample()):
            check_batch(got, slices, slice_len, f"ours, {rows:,} rows")
        fns[f"ours_{name}"] = rb.sample
        if rl_storage is not None:
            sampler = RLSliceSampler(num_slices=slices, end_key=("next", "truncated"), cache_values=True)
            rl = RLTensorDictReplayBuffer(storage=rl_storage, sampler=sampler, batch_size=batch)
            t0 = time.perf_counter()
            got = rl.sample()
            case["torchrl_first_call_s"] = time.perf_counter() - t0
            if got.numel() != batch:
                raise RuntimeError(f"torchrl, {rows:,} rows: {got.numel()} rows for a batch of {batch}")
            fns[f"torchrl_{name}"] = rl.sample
        print(f"  {slices}x{slice_len}{' ' + pages if pages else ''}: first calls ours "
              f"{case['ours_first_call_s']:.2f}s, TorchRL {case.get('torchrl_first_call_s', float('nan')):.2f}s",
              flush=True)  # fmt: skip
        cases.append(case)
    return cases


def case_name(case: dict[str, Any]) -> str:
    """``rows_SLICESxSTEPS`` (plus ``_2M``/``_4K`` with ``--thp compare``): the key of a case's timings."""
    pages = f"_{case['pages']}" if "pages" in case else ""
    return f"{case['rows']}_{case['slices']}x{case['slice_len']}{pages}"


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    if args.thp == "compare" and not args.in_memory:
        raise SystemExit("--thp compare needs --in-memory (two anonymous copies of each build, 2 MiB and 4 KiB pages)")
    if args.thp == "off":
        disable_huge_pages()
    # --thp compare: every size copied twice, first with huge pages, then (THP disabled for the process,
    # which leaves the pages already mapped as they are) with 4 KiB pages; all timed interleaved
    passes: list[str | None] = ["2M", "4K"] if args.thp == "compare" else [None]
    build_dirs: dict[int, Path] = {}
    # --work keeps the builds (a rerun reuses them: the pipeline returns a complete build as it is)
    tmp = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="dh_tdmpc2_scale_", dir=args.tmp))
    files: dict[str, list[Path]] = {"ours": [], "torchrl": []}
    have_rl = torchrl is not None and not args.no_torchrl
    shapes = [parse_shape(s) for s in args.shapes]
    builds: list[dict[str, Any]] = []
    cases: list[dict[str, Any]] = []
    fns: dict[str, Callable[[], Any]] = {}
    try:
        for pages, rows in [(pages, rows) for pages in passes for rows in args.sizes]:
            if pages == "4K" and rows == args.sizes[0]:
                disable_huge_pages()
            if rows in build_dirs:
                again = next(b for b in builds if b["rows"] == rows)
                cases += open_cases(build_dirs[rows], rows, pages, shapes, fns, again, args, None)
                continue
            if rows % STEPS:
                raise SystemExit(f"--sizes: {rows} is not a multiple of {STEPS} (whole mt30 episodes)")
            episodes = rows // STEPS
            t0 = time.perf_counter()
            build_dir = make_build(episodes, args.obs_width, tmp / f"cache_{rows}")
            built: dict[str, Any] = {"rows": rows, "episodes": episodes, "build_s": time.perf_counter() - t0}
            built["build_bytes"] = du(build_dir)
            print(f"built {rows:,} rows ({episodes:,} episodes) in {built['build_s']:.0f}s: "
                  f"{built['build_bytes'] / 1e9:.2f} GB", flush=True)  # fmt: skip
            build_dirs[rows] = build_dir
            builds.append(built)
            files["ours"] += ours_files(build_dir)
            rl_dir = tmp / f"torchrl_{rows}" if have_rl else None
            cases += open_cases(build_dir, rows, pages, shapes, fns, built, args, rl_dir)
            if rl_dir is not None:
                files["torchrl"] += torchrl_files(build_dir, rl_dir)
        # one phase per library: its files warmed, the other's dropped from the page cache, so that a
        # phase's working set fits this machine's RAM (both together do not, at 345M rows: every call
        # then waits on the disk); the sizes of one library interleaved within its phase
        timed: dict[str, dict[str, float]] = {}
        for lib in ("ours", "torchrl"):
            mine = {k: v for k, v in fns.items() if k.startswith(lib + "_")}
            if not mine:
                continue
            drop(files["torchrl" if lib == "ours" else "ours"])
            in_ram = lib == "ours" and args.in_memory  # then ours reads no file while sampling
            if args.random and lib == "ours" and not in_ram:
                print(f"ours: MADV_RANDOM on {advise_random(files[lib]) / 1e9:.2f} GB of mappings", flush=True)
            if not in_ram:
                t0 = time.perf_counter()
                warm(files[lib])
                print(f"{lib}: warmed {sum(p.stat().st_size for p in files[lib]) / 1e9:.2f} GB in "
                      f"{time.perf_counter() - t0:.0f}s", flush=True)  # fmt: skip
            if args.populate and not in_ram:
                t0 = time.perf_counter()
                mapped = populate(files[lib])
                print(f"{lib}: mapped {mapped / 1e9:.2f} GB into this process in {time.perf_counter() - t0:.1f}s",
                      flush=True)  # fmt: skip
            # a call that costs more than --slow-ms is timed on its own, with as many calls as fit
            # --slow-budget-s seconds (at least 5): 300 interleaved calls of a second each would not fit
            slow = {name: fn for name, fn in mine.items() if one_call_s(fn) > args.slow_ms / 1e3}
            faults = major_faults()
            calls = (args.repeats + args.warmup) * (len(mine) - len(slow))
            timed.update(time_calls({k: v for k, v in mine.items() if k not in slow}, args.repeats, args.warmup))
            for name, fn in slow.items():
                repeats = max(5, min(args.repeats, int(args.slow_budget_s / one_call_s(fn))))
                timed[name] = time_calls({name: fn}, repeats, 1)[name]
                calls += repeats + 4
            timed[lib] = {"major_faults_per_call": (major_faults() - faults) / max(1, calls), **page_sizes()}
            print(f"{lib}: {timed[lib]['major_faults_per_call']:.2f} major page faults per call; after timing, "
                  f"resident {timed[lib].get('Rss', 0) / 1e9:.2f} GB, anonymous 2 MiB pages "
                  f"{timed[lib].get('AnonHugePages', 0) / 1e9:.2f} GB, file pages mapped 2 MiB "
                  f"{timed[lib].get('FilePmdMapped', 0) / 1e9:.2f} GB", flush=True)  # fmt: skip
        for case in cases:
            name = case_name(case)
            for lib in ("ours", "torchrl"):
                t = timed.get(f"{lib}_{name}")
                if t:
                    case[f"{lib}_us"] = t["median_s"] * 1e6
                    case[f"{lib}_p10_us"], case[f"{lib}_p90_us"] = t["p10_s"] * 1e6, t["p90_s"] * 1e6
                    case[f"{lib}_repeats"] = t["repeats"]
            shape = (case["slices"], case["slice_len"], case.get("pages"))
            ref = next(c for c in cases if (c["slices"], c["slice_len"], c.get("pages")) == shape)
            case["ours_over_reference"] = case["ours_us"] / ref["ours_us"]
            if "torchrl_us" in case:
                case["torchrl_over_reference"] = case["torchrl_us"] / ref["torchrl_us"]
                case["torchrl_over_ours"] = case["torchrl_us"] / case["ours_us"]
    finally:
        fns.clear()
        gc.collect()
        if not args.work:
            shutil.rmtree(tmp, ignore_errors=True)
    biggest = [c for c in cases if c["rows"] == args.sizes[-1]]
    return {
        "benchmark": "tdmpc2_scale",
        "obs_width": args.obs_width,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "builds": builds,
        "in_memory": args.in_memory,
        "thp": args.thp,
        "thp_mode": thp_mode(),
        "populate": args.populate,
        "random": args.random,
        "major_faults_per_call": {
            lib: timed[lib]["major_faults_per_call"] for lib in ("ours", "torchrl") if lib in timed
        },
        "page_sizes": {
            lib: {k: v for k, v in timed[lib].items() if k != "major_faults_per_call"}
            for lib in ("ours", "torchrl")
            if lib in timed
        },
        "cases": cases,
        "target_ratio": 1.3,
        "met": all(c["ours_over_reference"] <= 1.3 for c in biggest),
        "mt30_bytes_per_transition": bytes_per_transition(),
        "env": environment(torchrl=getattr(torchrl, "__version__", None) if have_rl else None),
        "command": command(),
    }


def thp_mode() -> str | None:
    """The kernel's transparent huge page mode (``always``, ``madvise`` or ``never``), None where unknown."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return text[text.index("[") + 1 : text.index("]")] if "[" in text else None


def parse_shape(text: str) -> tuple[int, int]:
    """``"256x4"`` -> (256 slices, 4 steps)."""
    slices, _, slice_len = text.partition("x")
    if not (slices.isdigit() and slice_len.isdigit()):
        raise SystemExit(f"--shapes: {text!r} is not <slices>x<steps>, e.g. 256x4")
    return int(slices), int(slice_len)


def table(report: dict[str, Any]) -> str:
    lines = [
        "Slices, median us per call, interleaved; ratios against the first size of the same shape.",
        "",
        (
            "| rows | episodes | slices | ours us | ours / first size | TorchRL us | TorchRL / first size "
            "| TorchRL / ours | first call ours s | first call TorchRL s |"
        ),
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def f(case: dict[str, Any], key: str, fmt: str) -> str:
        return format(case[key], fmt) if key in case else "-"

    for c in report["cases"]:
        lines.append(
            f"| {c['rows']:,}{' (' + c['pages'] + ' pages)' if 'pages' in c else ''} | {c['episodes']:,} "
            f"| {c['slices']}x{c['slice_len']} | {c['ours_us']:.0f} | "
            f"{c['ours_over_reference']:.2f}x | {f(c, 'torchrl_us', '.0f')} | {f(c, 'torchrl_over_reference', '.2f')} "
            f"| {f(c, 'torchrl_over_ours', '.1f')} | {c['ours_first_call_s']:.2f} | {f(c, 'torchrl_first_call_s', '.2f')} |"
        )
    b = report["mt30_bytes_per_transition"]
    sizes = ", ".join(
        f"{x['rows']:,} rows: {x['build_bytes'] / 1e9:.2f} GB in {x['build_s']:.0f}s" for x in report["builds"]
    )
    mode = "in_memory=True" if report["in_memory"] else "memory-mapped files"
    mode += ", populated" if report["populate"] else ""
    mode += ", MADV_RANDOM" if report["random"] else ""
    pages = report["page_sizes"].get("ours", {})
    lines.append(
        f"\nours: {mode}; transparent huge pages: {report['thp_mode']} (this process: {report['thp']}); "
        f"while timed: {pages.get('AnonHugePages', 0) / 1e9:.2f} GB anonymous and "
        f"{pages.get('FilePmdMapped', 0) / 1e9:.2f} GB of files in 2 MiB pages, {pages.get('Rss', 0) / 1e9:.2f} GB resident"
        f"\nbuilds: {sizes}"
        f"\nbiggest / first size (ours), every shape <= {report['target_ratio']}x: {'met' if report['met'] else 'MISSED'}"
        f"\nreal mt30 per transition: build {b['build']:.0f} B, device-resident {b['device']:.0f} B "
        f"(x 345M = {b['device'] * 345e6 / 2**30:.0f} GiB)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, MT30_EPISODES * STEPS],
                   help="transitions of each build, the first being the reference (multiples of 500)")  # fmt: skip
    p.add_argument("--obs-width", type=int, default=1, help="float16 observation values per row (mt30: 24 float32)")
    p.add_argument("--shapes", nargs="+", default=["256x4", "64x4"],
                   help="slice shapes <slices>x<steps> (pytorch/rl#2669: 256 slices of 4 steps)")  # fmt: skip
    p.add_argument("--repeats", type=int, default=300)
    p.add_argument("--warmup", type=int, default=200, help="untimed calls first (they fault the mappings in)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--slow-ms", type=float, default=20.0, help="calls slower than this are timed on their own")
    p.add_argument("--slow-budget-s", type=float, default=30.0, help="seconds of calls for each slow variant")
    p.add_argument("--no-torchrl", action="store_true", help="skip TorchRL even if installed")
    p.add_argument(
        "--populate",
        action="store_true",
        help="map every page of each library's files into the process before timing (a long run's steady state)",
    )
    p.add_argument(
        "--in-memory",
        action="store_true",
        help="sample ours from DatasetStorage(path, in_memory=True): the build copied into anonymous memory",
    )
    p.add_argument(
        "--thp",
        choices=["default", "off", "compare"],
        default="default",
        help="off: no transparent huge pages in this process (prctl PR_SET_THP_DISABLE), to measure what they do; "
        "compare (with --in-memory): each build copied twice, with huge pages and then without, timed interleaved",
    )
    p.add_argument(
        "--random",
        action="store_true",
        help="madvise(MADV_RANDOM) on ours' file mappings before they are warmed (not with --in-memory)",
    )
    p.add_argument(
        "--work",
        default=None,
        help="keep the builds here and reuse them on the next run (default: a temp dir, deleted)",
    )
    p.add_argument("--tmp", default=None, help="directory for the temporary builds (default: system temp)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tdmpc2_scale.json"))
    args = p.parse_args(argv)
    report = run(args)
    print()
    print(table(report))
    write_report(report, args.out)


if __name__ == "__main__":
    main()
