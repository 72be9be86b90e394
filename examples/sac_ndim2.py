"""A TorchRL SAC training loop's replay-buffer code, ported to datasets_hub (``make examples``).

TorchRL's SAC scripts collect ``[n_envs, frames]`` batches from parallel environments and store them
in a multi-dimensional buffer. The buffer code below is what such a script writes, with
``torchrl.data`` replaced by ``datasets_hub``:

    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(size, ndim=2), batch_size=256)
    for data in collector:            # data: [n_envs, frames_per_env]
        rb.extend(data)               # written along time (dim_extend=1), one column per env
        batch = rb.sample()           # transitions, with ("index") = (t, env)

plus a ``TensorDictMaxValueWriter`` buffer keeping the best transitions seen (as in TorchRL's
examples), a ``SliceSampler`` over the same storage for sub-trajectories within each
environment's column, and a checkpoint round trip with ``FlatStorageCheckpointer``. The
"collector" replays three streams of the local ``gym`` loader's Pendulum rollouts (no network),
so the script runs anywhere in well under a minute.
"""

from __future__ import annotations

import tempfile
import time

import torch
from torch import nn

import datasets_hub as dh
from datasets_hub import (
    FlatStorageCheckpointer,
    LazyMemmapStorage,
    LazyTensorStorage,
    SliceSampler,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
)

N_ENVS, FRAMES_PER_BATCH, UPDATES_PER_BATCH, GAMMA, TAU = 3, 50, 20, 0.99, 0.005


def fake_collector(steps: int = 3000):
    """Yield ``[N_ENVS, FRAMES_PER_BATCH]`` TED batches, as a TorchRL collector over parallel envs.

    Episodes of the offline dataset are dealt to ``N_ENVS`` streams; ``("collector", "traj_ids")``
    numbers the trajectories, as collectors do.
    """
    data = dh.load("gym/pendulum-random-v0", steps=steps)[:]
    episodes = data["episode"].unique()
    streams = [
        torch.cat([torch.nonzero(data["episode"] == e).reshape(-1) for e in episodes[i::N_ENVS]]) for i in range(N_ENVS)
    ]
    length = min(len(s) for s in streams) // FRAMES_PER_BATCH * FRAMES_PER_BATCH
    td = torch.stack([data[s[:length]] for s in streams])  # [N_ENVS, length]
    td.set(("collector", "traj_ids"), td["episode"])
    td = td.select("observation", "action", "episode", ("collector", "traj_ids"), "next", strict=False)
    for start in range(0, length, FRAMES_PER_BATCH):
        yield td[:, start : start + FRAMES_PER_BATCH].contiguous()


def mlp(n_in: int, n_out: int) -> nn.Module:
    return nn.Sequential(nn.Linear(n_in, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, n_out))


class Actor(nn.Module):
    def __init__(self, n_obs: int, n_act: int) -> None:
        super().__init__()
        self.net = mlp(n_obs, 2 * n_act)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net(obs).chunk(2, -1)
        std = log_std.clamp(-5, 2).exp()
        raw = mean + std * torch.randn_like(mean)
        action = torch.tanh(raw) * 2.0  # Pendulum torques lie in [-2, 2]
        logp = (-0.5 * ((raw - mean) / std) ** 2 - std.log() - 0.9189385).sum(-1)
        logp = logp - torch.log(1 - torch.tanh(raw) ** 2 + 1e-6).sum(-1)
        return action, logp


def main() -> None:
    t0 = time.perf_counter()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # small networks: one thread is fastest, and CI machines are shared
    # -- the buffer code of a TorchRL SAC script (torchrl.data -> datasets_hub) --------------------------
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(6000, ndim=2), batch_size=256)
    slices = TensorDictReplayBuffer(
        storage=rb.storage,  # same storage, sampled as sub-trajectories inside each env's column
        sampler=SliceSampler(num_slices=8, traj_key=("collector", "traj_ids"), truncated_key=None, strict_length=False),
        batch_size=64,
    )
    best = TensorDictReplayBuffer(
        storage=LazyTensorStorage(500), writer=TensorDictMaxValueWriter(rank_key=("next", "reward")), batch_size=32
    )
    actor, q1, q2 = Actor(3, 1), mlp(4, 1), mlp(4, 1)
    q1_target, q2_target = mlp(4, 1), mlp(4, 1)
    q1_target.load_state_dict(q1.state_dict())
    q2_target.load_state_dict(q2.state_dict())
    opt_actor = torch.optim.Adam(actor.parameters(), 3e-4)
    opt_q = torch.optim.Adam([*q1.parameters(), *q2.parameters()], 3e-4)
    alpha = 0.2

    updates, q_losses = 0, []
    for data in fake_collector():
        rb.extend(data)  # [N_ENVS, frames]: written along time, one column per env
        best.extend(data.reshape(-1))
        for _ in range(UPDATES_PER_BATCH):
            batch = rb.sample()
            obs, act = batch["observation"], batch["action"]
            nxt, rew = batch["next", "observation"], batch["next", "reward"]
            done = batch["next", "terminated"].float()
            with torch.no_grad():
                next_act, next_logp = actor(nxt)
                q_next = torch.min(q1_target(torch.cat([nxt, next_act], -1)), q2_target(torch.cat([nxt, next_act], -1)))
                target = rew + GAMMA * (1 - done) * (q_next - alpha * next_logp.unsqueeze(-1))
            sa = torch.cat([obs, act], -1)
            q_loss = ((q1(sa) - target) ** 2).mean() + ((q2(sa) - target) ** 2).mean()
            opt_q.zero_grad()
            q_loss.backward()
            opt_q.step()
            new_act, logp = actor(obs)
            sa_new = torch.cat([obs, new_act], -1)
            actor_loss = (alpha * logp.unsqueeze(-1) - torch.min(q1(sa_new), q2(sa_new))).mean()
            opt_actor.zero_grad()
            actor_loss.backward()
            opt_actor.step()
            with torch.no_grad():
                for net, tgt in ((q1, q1_target), (q2, q2_target)):
                    for p, tp in zip(net.parameters(), tgt.parameters(), strict=True):
                        tp.lerp_(p, TAU)
            q_losses.append(float(q_loss.detach()))
            updates += 1

    assert all(torch.isfinite(torch.tensor(q_losses)))
    t, env = batch["index"].unbind(-1)
    assert (batch["observation"] == rb.storage[:]["observation"][t, env]).all()
    sub = slices.sample()
    ids = sub["collector", "traj_ids"]
    # a slice never crosses a trajectory: ids only change where a new slice starts
    print(
        f"buffer      {len(rb)} transitions in a {list(rb.storage.shape)} storage (T x n_envs), rb[:] is {list(rb[:].batch_size)}"
    )
    print(f"updates     {updates} SAC updates, q loss {sum(q_losses[:20]) / 20:.2f} -> {sum(q_losses[-20:]) / 20:.2f}")
    print(f"slices      {sub.batch_size[0]} steps in 8 slices, trajectories per sample: {ids.unique().numel()}")
    top = best[:]["next", "reward"]
    print(
        f"best        kept the {len(best)} best rewards of {best.write_count} written: min {top.min():.3f}, max {top.max():.3f}"
    )

    with tempfile.TemporaryDirectory() as d:
        rb.storage.checkpointer = FlatStorageCheckpointer()
        rb.dumps(d)
        restored = TensorDictReplayBuffer(
            storage=LazyMemmapStorage(6000, ndim=2), checkpointer=FlatStorageCheckpointer(), batch_size=256
        )
        restored.loads(d)
        assert (restored[:] == rb[:]).all()
        print("checkpoint  FlatStorageCheckpointer round trip: rb_test[:] == rb[:]")
    print(f"done in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
