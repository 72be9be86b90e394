"""Storage checkpointers: dumps/loads round trips for every checkpointer on 1-D and 2-D storages."""

from __future__ import annotations

import json

import pytest
import torch
from tensordict import TensorDict

from datasets_hub import (
    Flat2TED,
    FlatStorageCheckpointer,
    H5StorageCheckpointer,
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    ListStorageCheckpointer,
    NestedStorageCheckpointer,
    ReplayBuffer,
    StorageEnsemble,
    TED2Flat,
    TensorDictReplayBuffer,
    TensorStorageCheckpointer,
)


def parallel_envs(n_envs: int = 3, steps: int = 30, seed: int = 0, ends: dict | None = None) -> TensorDict:
    """TED data of ``n_envs`` parallel envs ``[n_envs, steps]``: trajectories end mid-batch (reset obs
    after a done), distinct values everywhere."""
    g = torch.Generator().manual_seed(seed)
    ends = ends if ends is not None else {0: [6, 17], 1: [11], 2: [3, 4, 25]}
    obs = torch.zeros(n_envs, steps + 1, 4)
    done = torch.zeros(n_envs, steps, 1, dtype=torch.bool)
    traj = torch.zeros(n_envs, steps, dtype=torch.int64)
    next_obs = torch.zeros(n_envs, steps, 4)
    tid = 100 * seed
    for e in range(n_envs):
        cur = torch.randn(4, generator=g)
        for t in range(steps):
            obs[e, t] = cur
            traj[e, t] = tid
            nxt = torch.randn(4, generator=g)
            next_obs[e, t] = nxt
            if t in ends.get(e, []):
                done[e, t] = True
                tid += 1
                cur = torch.randn(4, generator=g)  # reset: the next root obs is not next_obs
            else:
                cur = nxt
        tid += 1
    return TensorDict(
        {
            "observation": obs[:, :steps],
            "action": torch.randn(n_envs, steps, 2, generator=g),
            "done": torch.zeros(n_envs, steps, 1, dtype=torch.bool),
            ("collector", "traj_ids"): traj,
            "next": {
                "observation": next_obs,
                "reward": torch.randn(n_envs, steps, 1, generator=g),
                "done": done,
                "terminated": done.clone(),
                "truncated": torch.zeros_like(done),
            },
        },
        [n_envs, steps],
    )


CHECKPOINTERS = [
    TensorStorageCheckpointer,
    FlatStorageCheckpointer,
    NestedStorageCheckpointer,
    lambda: H5StorageCheckpointer(h5_kwargs={"compression": "gzip", "compression_opts": 4}),
]


@pytest.mark.parametrize("make_checkpointer", CHECKPOINTERS)
@pytest.mark.parametrize("ndim", [1, 2])
def test_seed_round_trip_for_every_checkpointer(tmp_path, make_checkpointer, ndim):
    # the seeds' test: LazyMemmapStorage(100, ndim=2) filled from 3 parallel envs, dumps, loads
    def make():
        rb = ReplayBuffer(storage=LazyMemmapStorage(100, ndim=ndim), batch_size=8)
        rb.storage.checkpointer = make_checkpointer()
        return rb

    rb = make()
    for seed in range(2):  # the second batch wraps around: the cursor cuts trajectories mid-buffer
        data = parallel_envs(seed=seed)
        rb.extend(data if ndim == 2 else data.reshape(-1))
    d = tmp_path / "ckpt"
    rb.dumps(d)
    rb_test = make()
    rb_test.loads(d)
    assert (rb_test[:] == rb[:]).all()
    assert rb_test[:].batch_size == rb[:].batch_size
    assert len(rb_test) == len(rb)


def test_flat_form_stores_observations_once(tmp_path):
    data = parallel_envs().transpose(0, 1).contiguous()  # [T, n_envs] as the storage holds it
    flat = TED2Flat()(data)
    n, runs = data.numel(), int(flat["shift"].sum())
    assert flat["observation"].shape[0] == n + runs  # T + 1 rows per run, as our builds
    assert ("next", "observation") not in flat.keys(include_nested=True)
    assert runs == 3 + 6  # one per env column plus one per done
    back = Flat2TED()(flat)
    assert (back == data).all()


def test_flat_round_trip_is_exact_when_next_obs_does_not_follow():
    data = parallel_envs(n_envs=1).reshape(-1)
    data["next", "observation"][5] += 1.0  # e.g. a multi-step transform: not the next root obs
    back = Flat2TED()(TED2Flat()(data))
    assert (back == data).all()


def test_h5_checkpointer_compresses_and_accepts_a_file_path(tmp_path):
    h5py = pytest.importorskip("h5py")
    rb = ReplayBuffer(
        storage=LazyTensorStorage(200), checkpointer=H5StorageCheckpointer(h5_kwargs={"compression": "gzip"})
    )
    rb.extend(parallel_envs().reshape(-1))
    rb.storage.dumps(tmp_path / "one.h5")
    with h5py.File(tmp_path / "one.h5", "r") as f:
        assert f["observation"].compression == "gzip"
    other = ReplayBuffer(storage=LazyTensorStorage(200), checkpointer=H5StorageCheckpointer)
    other.storage.loads(tmp_path / "one.h5")
    assert (other[:] == rb[:]).all()


def test_nested_checkpointer_gives_one_component_per_trajectory(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(90), checkpointer=NestedStorageCheckpointer())
    rb.extend(parallel_envs().reshape(-1))
    rb.storage.dumps(tmp_path / "n")
    nested = rb.storage.checkpointer.trajectories(tmp_path / "n", "action")
    assert nested.is_nested and nested.size(0) == 3 + 6  # env after env (obs jump there), and at 6 dones


def test_loading_with_another_checkpointer_is_refused(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(90))
    rb.extend(parallel_envs().reshape(-1))
    rb.dumps(tmp_path / "a")
    assert json.loads((tmp_path / "a" / "storage" / "storage.json").read_text())["checkpointer"] == (
        "TensorStorageCheckpointer"
    )
    other = ReplayBuffer(storage=LazyTensorStorage(90), checkpointer=FlatStorageCheckpointer())
    with pytest.raises(ValueError, match="TensorStorageCheckpointer"):
        other.loads(tmp_path / "a")
    wrong = ReplayBuffer(storage=ListStorage(10), checkpointer=TensorStorageCheckpointer())
    with pytest.raises(TypeError, match="tensor storages"):
        wrong.dumps(tmp_path / "b")


def test_flat_checkpointer_refuses_non_ted_data(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=FlatStorageCheckpointer())
    rb.extend(torch.arange(10.0))
    with pytest.raises(TypeError, match="TensorStorageCheckpointer"):
        rb.dumps(tmp_path / "x")


def test_list_and_ensemble_checkpointers(tmp_path):
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.extend([{"a": torch.tensor(1.0)}, {"a": torch.tensor(2.0)}])
    assert isinstance(rb.storage.checkpointer, ListStorageCheckpointer)
    rb.dumps(tmp_path / "l")
    other = ReplayBuffer(storage=ListStorage(10))
    other.loads(tmp_path / "l")
    assert [x["a"].item() for x in other.storage.get(slice(None))] == [1.0, 2.0]
    a, b = LazyTensorStorage(5), LazyTensorStorage(5)
    ReplayBuffer(storage=a).extend(torch.arange(5.0))
    ReplayBuffer(storage=b).extend(torch.arange(5.0) * 2)
    ens = StorageEnsemble(a, b)
    ens.dumps(tmp_path / "e")
    c, d = LazyTensorStorage(5), LazyTensorStorage(5)
    StorageEnsemble(c, d).loads(tmp_path / "e")
    assert (d[:] == torch.arange(5.0) * 2).all() and (c[:] == torch.arange(5.0)).all()


def test_lazy_stack_storage_samples_a_lazy_stack_of_different_shapes(tmp_path):
    rb = TensorDictReplayBuffer(storage=LazyStackStorage(), batch_size=3)
    for t in (2, 5, 3):
        rb.add(TensorDict({"obs": torch.full((t, 2), float(t))}, []))
    sample = rb.sample()
    assert type(sample).__name__ == "LazyStackedTensorDict" and sample.batch_size == (3,)
    for item in sample.unbind(0):
        assert item["obs"].shape[1] == 2 and (item["obs"] == item["obs"].shape[0]).all()
    assert rb[1]["obs"].shape == (5, 2)
    rb.dumps(tmp_path / "s")
    other = TensorDictReplayBuffer(storage=LazyStackStorage(), batch_size=3)
    other.loads(tmp_path / "s")
    assert [x["obs"].shape[0] for x in other[:].unbind(0)] == [2, 5, 3]
    with pytest.raises(TypeError, match="TensorDicts"):
        LazyStackStorage().set(0, torch.zeros(3))
