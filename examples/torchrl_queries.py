"""Trajectory queries, hindsight relabelling and storage maps: the same code on TorchRL and on datasets_hub.

    python examples/torchrl_queries.py                      # datasets_hub
    python examples/torchrl_queries.py --backend torchrl    # TorchRL 0.14 (the benchmark venv has it)

Only the import changes (``make examples``). It uses TorchRL 0.14's ``rb.query`` with ``traj`` predicates,
``filter_trajectories``, ``HERReplayBuffer``, ``TensorDictMap`` with a ``QueryModule`` and ``MCTSForest``;
both backends print the same lines.
"""

from __future__ import annotations

import argparse
import importlib

import torch
from tensordict import TensorDict


def episodes(lengths: list[int]) -> TensorDict:
    """Episodes back to back; step ``s`` has reward ``episode + 1`` and achieves the goal ``[s, s]``."""
    ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    step = torch.arange(len(ids), dtype=torch.float32)
    done = torch.zeros(len(ids), 1, dtype=torch.bool)
    done[torch.tensor(lengths).cumsum(0) - 1] = True
    return TensorDict(
        {
            "observation": step[:, None],
            "achieved_goal": step[:, None].expand(-1, 2).clone(),
            "desired_goal": torch.full((len(ids), 2), -1.0),
            "collector": {"traj_ids": ids},
            "next": {"reward": (ids + 1.0)[:, None], "done": done},
        },
        batch_size=[len(ids)],
    )


def run(rl: object) -> list[str]:
    out = []
    rb = rl.TensorDictReplayBuffer(storage=rl.LazyTensorStorage(10), batch_size=4)
    rb.extend(episodes([3, 2, 4]))
    rb.extend(episodes([3]))  # wraps round: overwrites the first two rows
    out.append(f"trajectory lengths, oldest first: {[t.length for t in rb.query()]}")
    kept = rb.query((rl.traj.reward.sum() > 5) & (rl.traj.length >= 3))
    out.append(f"reward sum > 5 and length >= 3: {[t.observation.squeeze(-1).tolist() for t in kept]}")
    short = rl.filter_trajectories(episodes([3, 2, 4]), rl.traj.length < 3)
    out.append(f"filter_trajectories length < 3: {[t.reward.squeeze(-1).tolist() for t in short]}")

    her = rl.HERReplayBuffer(
        reward_fn=lambda td: (td["achieved_goal"] == td["desired_goal"]).all(-1, keepdim=True).float(),
        storage=rl.LazyTensorStorage(20),
        batch_size=9,
        her_ratio=1.0,
        strategy="final",
        sampler=rl.SamplerWithoutReplacement(shuffle=False),  # rows 0..8 in order: the same draw on both
    )
    her.extend(episodes([3, 2, 4]))
    batch = her.sample()
    out.append(f"HER final goals: {batch['desired_goal'][:, 0].tolist()}")
    out.append(f"HER rewards: {batch['next', 'reward'][:, 0].tolist()}")

    tdmap = rl.TensorDictMap(
        query_module=rl.QueryModule(in_keys=["x", "y"], index_key="row"), storage=rl.LazyTensorStorage(8)
    )
    keys = TensorDict({"x": torch.tensor([[1.0], [2.0], [1.0]]), "y": torch.tensor([[5.0], [5.0], [6.0]])}, [3])
    tdmap[keys] = TensorDict({"value": torch.tensor([10, 20, 30])}, [3])
    probe = TensorDict({"x": torch.tensor([[1.0], [1.0]]), "y": torch.tensor([[6.0], [7.0]])}, [2])
    out.append(f"map contains {tdmap.contains(probe).tolist()}, value {tdmap[probe[:1]]['value'].tolist()}")

    forest = rl.MCTSForest()
    for path, actions in (([0, 1, 2], [1, 1]), ([1, 3], [2]), ([0, 4], [3])):
        obs, act = torch.tensor(path), torch.tensor(actions)
        forest.extend(
            TensorDict({"observation": obs[:-1], "action": act, "next": {"observation": obs[1:]}}, [len(act)])
        )
    out.append("forest:\n" + forest.to_string(TensorDict(observation=torch.tensor(0))))
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
