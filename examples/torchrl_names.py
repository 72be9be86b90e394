"""The same replay-buffer code run on TorchRL and on datasets_hub: only the import changes (``make examples``).

    python examples/torchrl_names.py                      # datasets_hub
    python examples/torchrl_names.py --backend torchrl    # TorchRL 0.14 (the benchmark venv has it)

It uses the TorchRL 0.14 names this round of parity added: generation stamps and ``update_if_present``,
``set_sampler``, save/load hooks and ``save``, writer and sampler ``dumps``/``loads``, ``MultiStep``,
``find_start_stop_traj``, and errors caught as TorchRL raises them. Both backends print the same lines.
"""

from __future__ import annotations

import argparse
import importlib
import tempfile
from pathlib import Path

import torch
from tensordict import TensorDict


def run(rl: object) -> list[str]:
    out = []
    steps = torch.arange(12)
    data = TensorDict(
        {
            "obs": steps.float()[:, None],
            "next": {"obs": steps.float()[:, None] + 1, "reward": torch.ones(12, 1), "done": (steps % 4 == 3)[:, None]},
        },
        [12],
    )
    rb = rl.TensorDictReplayBuffer(
        storage=rl.LazyTensorStorage(8), writer=rl.RoundRobinWriter(track_generations=True), batch_size=4
    )
    rb.set_sampler(rl.SamplerWithoutReplacement(shuffle=False))
    rb.extend(data[:8])
    sample = rb.sample()
    out.append(f"sampled rows {sample['index'].tolist()}, stamps {sample['index_generation'].tolist()}")
    rb.extend(data[8:10])  # overwrites rows 0 and 1: handles to them go stale
    result = rb.update_if_present(
        index=sample["index"], generation=sample["index_generation"], patch={"obs": torch.zeros(4, 1)}
    )
    out.append(f"updated {result.updated.tolist()}")

    with tempfile.TemporaryDirectory() as tmp:
        rb.writer.dumps(Path(tmp) / "writer")
        writer = rl.RoundRobinWriter(track_generations=True)
        writer.loads(Path(tmp) / "writer")
        out.append(f"writer write_count after loads: {writer._write_count}")
        rb.save(Path(tmp) / "rb")
        restored = rl.TensorDictReplayBuffer(
            storage=rl.LazyTensorStorage(8),
            writer=rl.RoundRobinWriter(track_generations=True),
            sampler=rl.SamplerWithoutReplacement(shuffle=False),
        )
        restored.load(Path(tmp) / "rb")
        out.append(f"restored obs {restored[:]['obs'].squeeze(-1).tolist()}")

    multi = rl.MultiStep(gamma=0.5, n_steps=2)(data.clone())
    out.append(f"2-step rewards {multi['next', 'reward'].squeeze(-1).tolist()}")
    start, stop, lengths = rl.find_start_stop_traj(end=data["next", "done"].squeeze(-1), at_capacity=False)
    out.append(f"trajectories {start.squeeze(-1).tolist()} to {stop.squeeze(-1).tolist()}, lengths {lengths.tolist()}")

    writer = rl.TensorDictMaxValueWriter(rank_key="reward")
    writer.register_storage(rl.LazyTensorStorage(4))
    try:
        writer.extend(torch.zeros(3))
    except RuntimeError:  # TorchRL's type; ours is also a TypeError
        out.append("a tensor given to TensorDictMaxValueWriter: RuntimeError")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["datasets_hub", "torchrl"], default="datasets_hub")
    args = parser.parse_args()
    if args.backend == "torchrl":
        rl = importlib.import_module("torchrl.data")
    else:
        rl = importlib.import_module("datasets_hub")
    for line in run(rl):
        print(line)


if __name__ == "__main__":
    main()
