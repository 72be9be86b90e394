"""Consuming buffers and compressed storage: the same code on TorchRL and on datasets_hub.

    python examples/torchrl_consumption.py                      # datasets_hub
    python examples/torchrl_consumption.py --backend torchrl    # TorchRL 0.14 (the benchmark venv has it)

Only the import changes (``make examples``). It uses TorchRL 0.14's ``consume_after_n_samples=``,
``ConsumingSampler`` and ``CompressedListStorage``; both backends print the same lines (draws are random, so
only what does not depend on their order is printed).
"""

from __future__ import annotations

import argparse
import importlib

import torch
from tensordict import TensorDict


def run(rl: object) -> list[str]:
    out = []
    rb = rl.ReplayBuffer(storage=rl.LazyTensorStorage(6), batch_size=4, consume_after_n_samples=1)
    rb.extend(torch.arange(100, 106))
    first = rb.sample()
    out.append(f"after one batch of 4: len(rb)={len(rb)}, len(storage)={len(rb.storage)}")
    rest = rb.sample()
    out.append(f"then a short batch of {len(rest)}; every item once: {sorted(first.tolist() + rest.tolist())}")
    written = rb.extend(torch.arange(200, 203))
    slots = written.tolist()
    out.append(f"new items fill {len(set(slots))} distinct freed slots of the 6: {set(slots) <= set(range(6))}")
    out.append(f"len(rb)={len(rb)}, len(storage)={len(rb.storage)}")

    twice = rl.ReplayBuffer(storage=rl.ListStorage(3), batch_size=3, sampler=rl.ConsumingSampler(max_sample_count=2))
    twice.extend([torch.tensor(i) for i in (7, 8, 9)])
    lens = [len(twice) for _ in twice]  # iteration stops once every item was returned twice
    out.append(f"max_sample_count=2: len after each batch {lens}")

    storage = rl.CompressedListStorage(max_size=10, compression_level=3)
    frames = torch.zeros(2, 3, 84, 84, dtype=torch.uint8)
    frames[:, :, 20:40, 20:40] = 255
    compressed = rl.ReplayBuffer(storage=storage, batch_size=2)
    compressed.extend(TensorDict({"pixels": frames, "step": torch.tensor([0, 1])}, batch_size=[2]))
    sample = compressed.sample()
    out.append(
        f"compressed storage: sample pixels {tuple(sample['pixels'].shape)} {sample['pixels'].dtype}, "
        f"equal to the frames written: {bool((sample['pixels'] == frames[sample['step']]).all())}"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["datasets_hub", "torchrl"], default="datasets_hub")
    args = parser.parse_args()
    rl = importlib.import_module("torchrl.data" if args.backend == "torchrl" else "datasets_hub")
    for line in run(rl):
        print(line)


if __name__ == "__main__":
    main()
