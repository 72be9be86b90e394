"""Multi-dimensional storages (ndim=2), dim_extend, and slices within each environment's column."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictReplayBuffer,
    TensorStorage,
)
from datasets_hub.buffers import multidim


def collector_batch(n_envs: int = 3, steps: int = 20, first_traj: int = 0, ends_at: dict | None = None) -> TensorDict:
    """A collector-like batch ``[n_envs, steps]`` with distinct values; traj ids change where ``ends_at`` says."""
    obs = torch.arange(n_envs * steps, dtype=torch.float32).reshape(n_envs, steps) + 1000 * first_traj
    traj = torch.zeros(n_envs, steps, dtype=torch.int64)
    done = torch.zeros(n_envs, steps, 1, dtype=torch.bool)
    next_id = first_traj
    for e in range(n_envs):
        traj[e] = next_id
        next_id += 1
        for t in sorted((ends_at or {}).get(e, [])):
            done[e, t] = True
            traj[e, t + 1 :] = next_id
            next_id += 1
    return TensorDict(
        {"obs": obs, ("collector", "traj_ids"): traj, ("next", "done"): done, ("next", "obs"): obs + 0.5},
        [n_envs, steps],
    )


def test_seed_example_runs_as_written():
    # the seeds' example, torchrl.data replaced by datasets_hub
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100, ndim=2),
        sampler=SliceSampler(num_slices=8, traj_key=("collector", "traj_ids"), truncated_key=None, strict_length=False),
        batch_size=64,
    )
    data = collector_batch()
    index = rb.extend(data)
    assert index.shape == (60, 2)
    assert len(rb) == 60  # time steps of every environment
    assert rb.dim_extend == 1
    assert rb[:].batch_size == (3, 20)  # as TorchRL: the layout extend() took
    assert (rb[:]["obs"] == data["obs"]).all()
    assert rb.storage[:].batch_size == (20, 3)  # the storage holds [T, n_envs]
    sample = rb.sample()
    assert sample.batch_size == (64,)
    obs = sample["obs"].reshape(8, 8)
    env = (obs // 20).long()
    assert (env == env[:, :1]).all()  # every slice lies in one environment's column
    assert (obs[:, 1:] - obs[:, :-1] == 1).all()  # consecutive time steps


def test_capacity_counts_items_rounded_up_to_whole_rows_as_torchrl():
    storage = LazyTensorStorage(100, ndim=2)
    rb = ReplayBuffer(storage=storage, batch_size=4)
    rb.extend(collector_batch())
    assert storage.shape == (34, 3)
    assert storage.max_size == 102
    assert storage.len_along_dim0() == 20


def test_wraparound_keeps_newest_rows_and_slices_never_cross_the_cursor():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(30, ndim=2),
        sampler=SliceSampler(slice_len=4, traj_key=("collector", "traj_ids")),
        batch_size=40,
    )
    rb.extend(collector_batch(steps=8, first_traj=0))  # rows 0..7
    rb.extend(collector_batch(steps=6, first_traj=10))  # rows 8,9 then 0..3 (wrap)
    assert len(rb) == 30
    stored = rb.storage[:]["obs"]  # [10, 3]
    assert (stored[:4, 0] == torch.tensor([10002.0, 10003, 10004, 10005])).all()
    assert (stored[4:8, 0] == torch.tensor([4.0, 5, 6, 7])).all()
    torch.manual_seed(0)
    for _ in range(20):
        obs = rb.sample()["obs"].reshape(10, 4)
        assert (obs[:, 1:] - obs[:, :-1] == 1).all()  # never glued across the cursor or trajectories


def test_slice_sampler_cuts_at_done_and_at_trajectory_ends_mid_buffer():
    data = collector_batch(steps=20, ends_at={0: [4], 2: [9, 14]})
    rb = ReplayBuffer(storage=LazyMemmapStorage(60, ndim=2), sampler=SliceSampler(slice_len=5), batch_size=50)
    rb.extend(data)
    sampler = rb.sampler
    sampler.sample(rb.storage, 50)
    lengths = sorted(sampler.episodes(rb.storage).length.tolist())
    assert lengths == [5, 5, 5, 10, 15, 20]
    for _ in range(10):
        s = rb.sample()
        ids = s["collector", "traj_ids"].reshape(10, 5)
        assert (ids == ids[:, :1]).all()


def test_dim_extend_zero_takes_time_major_data():
    rb = ReplayBuffer(storage=LazyTensorStorage(60, ndim=2), dim_extend=0, batch_size=5)
    data = collector_batch().transpose(0, 1)  # [T, n_envs]
    rb.extend(data)
    assert rb[:].batch_size == (20, 3)
    assert (rb[:]["obs"] == data["obs"]).all()
    assert (rb[2]["obs"] == data["obs"][2]).all()


def test_dim_extend_needs_a_multidimensional_storage():
    with pytest.raises(ValueError, match="ndim > 1"):
        ReplayBuffer(storage=LazyTensorStorage(10), dim_extend=1)
    with pytest.raises(ValueError, match="dim_extend"):
        ReplayBuffer(storage=LazyTensorStorage(10), dim_extend=-1)


def test_uniform_and_epoch_samplers_see_every_item_once():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(60, ndim=2), sampler=SamplerWithoutReplacement(), batch_size=12
    )
    data = collector_batch()
    rb.extend(data)
    seen = torch.cat([b["obs"] for b in rb])
    assert sorted(seen.tolist()) == sorted(data["obs"].reshape(-1).tolist())
    s = TensorDictReplayBuffer(storage=LazyTensorStorage(60, ndim=2), batch_size=7, sampler=RandomSampler())
    s.extend(data)
    out = s.sample()
    t, e = out["index"].unbind(-1)
    assert (out["obs"] == data["obs"][e, t]).all()


def test_prioritized_sampler_on_a_2d_storage():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(60, ndim=2), sampler=PrioritizedSampler(60, 1.0, 1.0))
    data = collector_batch()
    rb.extend(data)
    s = rb.sample(16)
    s["td_error"] = torch.full((16,), 1e-6)
    rb.update_tensordict_priority(s)
    # make (t=3, env=2) overwhelmingly likely
    rb.update_priority(torch.tensor([[3, 2]]), torch.tensor([1e9]))
    again = rb.sample(32)
    assert (again["index"] == torch.tensor([3, 2])).all(1).float().mean() > 0.9
    assert (again["obs"][(again["index"] == torch.tensor([3, 2])).all(1)] == data["obs"][2, 3]).all()


def test_dumps_loads_round_trip_on_2d_storage(tmp_path):
    rb = ReplayBuffer(storage=LazyMemmapStorage(100, ndim=2), batch_size=4)
    rb.extend(collector_batch(ends_at={1: [7]}))
    rb.extend(collector_batch(steps=20, first_traj=50))  # wraps
    rb.dumps(tmp_path / "rb")
    rb_test = ReplayBuffer(storage=LazyMemmapStorage(100, ndim=2), batch_size=4)
    rb_test.loads(tmp_path / "rb")
    assert (rb_test[:] == rb[:]).all()
    assert len(rb_test) == len(rb)
    assert rb_test.writer.cursor == rb.writer.cursor


def test_state_dict_round_trip_and_ndim_mismatch():
    rb = ReplayBuffer(storage=LazyTensorStorage(60, ndim=2))
    rb.extend(collector_batch())
    other = ReplayBuffer(storage=LazyTensorStorage(60, ndim=2))
    other.load_state_dict(rb.state_dict())
    assert (other[:] == rb[:]).all()
    flat = ReplayBuffer(storage=LazyTensorStorage(60))
    with pytest.raises(ValueError, match="ndim=2"):
        flat.load_state_dict(rb.state_dict())


def test_tensor_storage_wraps_2d_data_and_setitem_writes_through_the_layout():
    data = collector_batch().transpose(0, 1).contiguous()  # [T, n_envs]
    storage = TensorStorage(data, ndim=2)
    assert len(storage) == 60 and storage.shape == (20, 3)
    rb = ReplayBuffer(storage=storage)
    assert rb[:].batch_size == (3, 20)
    new = rb[1].clone()
    new["obs"] += 0.25
    rb[1] = new
    assert (rb[1]["obs"] == new["obs"]).all()


@pytest.mark.parametrize("storage_type", [LazyTensorStorage, LazyMemmapStorage])
def test_setitem_with_a_tuple_indexes_the_layout_extend_took_and_broadcasts(storage_type):
    rb = ReplayBuffer(storage=storage_type(60, ndim=2))
    rb.extend(collector_batch())  # [n_envs=3, T=20]: rb[e, t] is environment e, step t
    before = rb[:]["obs"].clone()
    one = {"obs": [-1.0], ("collector", "traj_ids"): [7], ("next", "done"): [[True]], ("next", "obs"): [-1.5]}
    rb[0, 3:4] = TensorDict({k: torch.tensor(v) for k, v in one.items()}, [1])
    assert rb[0, 3]["obs"] == -1.0 and rb[0, 3]["collector", "traj_ids"] == 7
    assert (rb[1:, 3]["obs"] == before[1:, 3]).all()  # the other environments keep step 3
    row = TensorDict(
        {
            "obs": torch.arange(10.0) + 500,
            ("collector", "traj_ids"): torch.arange(10),
            ("next", "done"): torch.zeros(10, 1, dtype=torch.bool),
            ("next", "obs"): torch.arange(10.0) + 600,
        },
        [10],
    )
    rb[:, 10:20] = row  # batch [10] broadcast over the 3 environments
    assert (rb[:, 10:20]["obs"] == (torch.arange(10.0) + 500).expand(3, 10)).all()
    assert (rb[:, :10]["obs"][1:] == before[1:, :10]).all()
    assert len(rb) == 60
    with pytest.raises(ValueError, match="cannot broadcast"):
        rb[:, 0:2] = row  # 10 steps given for 2


@pytest.mark.parametrize("storage_type", [LazyTensorStorage, LazyMemmapStorage])
def test_pytree_data_in_a_2d_storage_reads_back_in_the_layout_extend_took(storage_type, tmp_path):
    obs = torch.arange(24.0).view(2, 6, 2)  # [n_envs, T, 2]
    act = torch.arange(12).view(2, 6) + 50
    rb = ReplayBuffer(storage=storage_type(12, ndim=2), batch_size=4)
    rb.extend({"obs": obs, "act": (act, -act)})
    assert len(rb) == 12 and rb.storage.shape == (6, 2)
    everything = rb[:]
    assert (everything["obs"] == obs).all() and (everything["act"][1] == -act).all()
    assert (rb[1]["act"][0] == act[1]).all()  # environment 1, every step
    rb[0, 2:3] = {"obs": torch.full((1, 2), -7.0), "act": (torch.tensor([-8]), torch.tensor([-9]))}
    assert rb[0]["act"][0].tolist() == [50, 51, -8, 53, 54, 55] and (rb[1]["obs"] == obs[1]).all()
    sample = rb.sample()
    assert sample["act"][0].shape == (4,) and ((sample["act"][0] >= 50) | (sample["act"][0] == -8)).all()
    rb.dumps(tmp_path)
    restored = ReplayBuffer(storage=storage_type(12, ndim=2))
    restored.loads(tmp_path)
    assert restored[0]["act"][1].tolist() == [-50, -51, -9, -53, -54, -55]


def test_prioritized_slice_sampler_refuses_2d_storages():
    from datasets_hub import PrioritizedSliceSampler

    rb = ReplayBuffer(storage=LazyTensorStorage(60, ndim=2), sampler=PrioritizedSliceSampler(60, 1.0, 1.0, slice_len=4))
    rb.extend(collector_batch())
    with pytest.raises(NotImplementedError, match="SliceSampler"):
        rb.sample(8)


def test_slice_sampler_without_replacement_on_2d_storage_visits_disjoint_slices():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(60, ndim=2),
        sampler=SliceSamplerWithoutReplacement(slice_len=5, traj_key=("collector", "traj_ids")),
        batch_size=15,
    )
    rb.extend(collector_batch())
    seen = torch.cat([b["obs"] for b in rb])
    assert seen.numel() == 60 and seen.unique().numel() == 60


def test_index_helpers_round_trip():
    items = torch.arange(24)
    t, e = multidim.unravel(items, (8, 3))
    assert (multidim.ravel((t, e), (8, 3)) == items).all()
    assert (multidim.ravel(torch.stack([t, e], -1), (8, 3)) == items).all()
    order = multidim.column_order(8, 3)
    assert order[:8].tolist() == [0, 3, 6, 9, 12, 15, 18, 21]
    with pytest.raises(IndexError):
        multidim.ravel((torch.tensor([8]), torch.tensor([0])), (8, 3))
