"""One behaviour-cloning policy trained on two datasets whose state and action sizes differ (11/3, 17/6)."""

import sys

import torch

import datasets_hub as dh

DATASETS = ["d4rl/hopper-medium-v2", "d4rl/walker2d-medium-v2"]


def main(datasets: list[str], steps: int = 2000) -> float:
    mix = dh.mixture(
        datasets,  # each dataset in proportion to its size, and in every batch
        batch_size=256,
        key_maps=[["observation", "action"]] * len(datasets),
        normalize={"observation": "mean_std", "action": "min_max"},  # each with its own statistics
        generator=torch.Generator().manual_seed(0),
    )
    batch = mix.sample()  # observation and action zero-padded to the widest, with *_dim_is_pad masks
    obs, act = batch["observation"].shape[-1], batch["action"].shape[-1]
    policy = torch.nn.Sequential(torch.nn.Linear(obs + len(datasets), 256), torch.nn.ReLU(), torch.nn.Linear(256, act))
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4)
    for step in range(steps):
        batch = mix.sample()
        which = torch.nn.functional.one_hot(batch["dataset", "index"], len(datasets)).float()
        real = ~batch["action_dim_is_pad"]  # padded action entries take no part in the loss
        error = policy(torch.cat([batch["observation"], which], -1)) - batch["action"]
        loss = (error.square() * real).sum() / real.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 500 == 0 or step == steps - 1:
            print(f"step {step:>5}  loss {loss.item():.4f}  batch {mix.counts(256)}")
    return loss.item()


if __name__ == "__main__":
    main(sys.argv[1:] or DATASETS)
