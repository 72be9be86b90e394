"""The demo `make demo` runs: load the embedded default dataset by name and sample sub-trajectories.

The first run rolls out Pendulum-v1 locally (no network), converts it to a memory-mapped TED build
in the cache and samples from it; a second run finds the build in the cache and opens it in
milliseconds.
"""

from __future__ import annotations

import time

t_start = time.perf_counter()
import torch  # noqa: E402 - the clock starts before the imports it times

import datasets_hub as dh  # noqa: E402 - the clock starts before the imports it times
from datasets_hub import SliceSampler  # noqa: E402 - the clock starts before the imports it times

DATASET = "gym/pendulum-random-v0"


def main() -> None:
    t_imports = time.perf_counter() - t_start
    card = dh.info(DATASET)
    was_cached = card.cached
    t0 = time.perf_counter()
    rb = dh.load(
        DATASET, batch_size=256, sampler=SliceSampler(slice_len=32), generator=torch.Generator().manual_seed(0)
    )
    t_load = time.perf_counter() - t0
    card = dh.info(DATASET)

    print(f"dataset     {DATASET}: {card.description}")
    print(f"cache       {card.build_path}")
    print(
        f"            {'reused the cached build' if was_cached else 'built it now (a second run reuses it)'}"
        f" in {t_load * 1000:.0f} ms (imports took {t_imports:.1f} s)"
    )
    counts, stats = card.counts, card.stats
    print(
        f"size        {counts['transitions']:,} transitions in {counts['episodes']} episodes "
        f"({counts['episodes_terminated']} terminated, {counts['episodes_truncated']} truncated), "
        f"{card.built_bytes / 1e6:.1f} MB on disk"
    )
    ret = stats["episode_return"]
    print(f"returns     mean {ret['mean']:.1f}, min {ret['min']:.1f}, max {ret['max']:.1f}")

    t0 = time.perf_counter()
    batch = rb.sample()
    t_sample = time.perf_counter() - t0
    print(f"\nsampled 8 slices x 32 steps = {batch.batch_size[0]} transitions in {t_sample * 1000:.1f} ms:")
    names = {("/".join(k) if isinstance(k, tuple) else k): k for k in batch.keys(include_nested=True, leaves_only=True)}
    for name in sorted(names):
        value = batch.get(names[name])
        print(f"  {name:<20} {tuple(value.shape)!s:<12} {str(value.dtype).replace('torch.', '')}")
    slices = batch.reshape(-1, 32)
    print(
        "\nfirst step of each slice (episode, step):",
        [(int(e), int(s)) for e, s in zip(slices["episode"][:, 0], slices["step"][:, 0], strict=True)],
    )
    print("each slice stays inside one episode:", bool((slices["episode"] == slices["episode"][:, :1]).all()))
    print(
        "observation[0..2] of slice 0:", [[round(v, 3) for v in row] for row in slices["observation"][0, :3].tolist()]
    )
    print("reward[0..2] of slice 0:    ", [round(r, 3) for r in slices["next", "reward"][0, :3, 0].tolist()])

    benchmark_batches = 200
    t0 = time.perf_counter()
    for _ in range(benchmark_batches):
        rb.sample()
    per_batch = (time.perf_counter() - t0) / benchmark_batches
    print(f"\n{benchmark_batches} more slice batches: {per_batch * 1e6:.0f} us per batch of 256")


if __name__ == "__main__":
    main()
