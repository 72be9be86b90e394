"""CatFrames and DensifyReward: windows and rewards-to-go over a time dim, cut at done steps."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import datasets_hub as dh
from datasets_hub.buffers.trajectory_transforms import CatFrames, DensifyReward
from datasets_hub.errors import InvalidArgument


def _two_trajectories() -> TensorDict:
    """Six steps: a trajectory of 3 (observations 0, 1, 2; next 1, 2, 100) then one of 3 (10, 11, 12; next 11..13)."""
    obs = torch.tensor([0.0, 1, 2, 10, 11, 12]).unsqueeze(-1)
    nxt = torch.tensor([1.0, 2, 100, 11, 12, 13]).unsqueeze(-1)
    done = torch.tensor([False, False, True, False, False, False]).unsqueeze(-1)
    return TensorDict({"obs": obs, "next": {"obs": nxt, "done": done}}, [6])


def test_same_padding_repeats_each_trajectorys_first_frame():
    out = CatFrames(N=3, dim=-1, in_keys=["obs"])(_two_trajectories())
    assert out["obs"].tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [10, 10, 10], [10, 10, 11], [10, 11, 12]]


def test_next_windows_open_with_the_root_reset_frame():
    # the window the step after t sees: the root observation opens the trajectory, then the next observations
    td = _two_trajectories()
    out = CatFrames(N=3, dim=-1, in_keys=["obs", ("next", "obs")])(td)
    assert out["next", "obs"].tolist() == [[0, 0, 1], [0, 1, 2], [1, 2, 100], [10, 10, 11], [10, 11, 12], [11, 12, 13]]
    assert td["obs"].shape == (6, 1), "the input is not changed"


def test_constant_padding_and_the_mask_of_padded_slots():
    t = CatFrames(N=3, dim=-1, in_keys=["obs", ("next", "obs")], padding="constant", padding_value=-1, mask_key="pad")
    out = t(_two_trajectories())
    assert out["obs"].tolist() == [[-1, -1, 0], [-1, 0, 1], [0, 1, 2], [-1, -1, 10], [-1, 10, 11], [10, 11, 12]]
    assert out["next", "obs"].tolist() == [[-1, 0, 1], [0, 1, 2], [1, 2, 100], [-1, 10, 11], [10, 11, 12], [11, 12, 13]]
    assert out["pad"].tolist() == [[True, True, False], [True, False, False], [False] * 3] * 2


def test_future_windows_repeat_the_last_frame_and_need_no_done():
    td = _two_trajectories()
    out = CatFrames(N=2, dim=-1, in_keys=["obs"], future=True)(td)
    assert out["obs"].tolist() == [[0, 1], [1, 2], [2, 2], [10, 11], [11, 12], [12, 12]]
    del td["next", "done"]
    whole = CatFrames(N=2, dim=-1, in_keys=["obs"], future=True)(td)
    assert whole["obs"][2].tolist() == [2, 10], "without done the row is one trajectory"


def test_frames_concatenate_along_dim_and_rows_are_separate_trajectories():
    # [2 rows, 3 steps] of [1, 2] frames; row 1 has no done: index 0 of every row starts a trajectory
    frames = torch.arange(12.0).reshape(2, 3, 1, 2)
    td = TensorDict({"pixels": frames, "next": {"done": torch.zeros(2, 3, 1, dtype=torch.bool)}}, [2, 3])
    out = CatFrames(N=2, dim=-2)(td)  # default in_keys: ["pixels"]
    assert out["pixels"].shape == (2, 3, 2, 2)
    assert out["pixels"][1, 0].tolist() == [[6, 7], [6, 7]]
    assert out["pixels"][1, 2].tolist() == [[8, 9], [10, 11]]
    wide = CatFrames(N=2, dim=-1)(td)
    assert wide["pixels"][1, 2].tolist() == [[8, 9, 10, 11]]


def test_a_dim_named_time_is_the_time_dim():
    td = _two_trajectories().unsqueeze(0).transpose(0, 1)  # [6, 1]
    td.refine_names("time", None)
    out = CatFrames(N=2, dim=-1, in_keys=["obs"])(td)
    assert out["obs"][:, 0].tolist() == [[0, 0], [0, 1], [1, 2], [10, 10], [10, 11], [11, 12]]


def test_in_a_buffer_on_sampled_slices():
    rb = dh.TensorDictReplayBuffer(
        storage=dh.LazyTensorStorage(10),
        sampler=dh.SliceSampler(slice_len=3, traj_key="episode"),
        batch_size=6,
        transform=CatFrames(N=2, dim=-1, in_keys=["obs"]),
    )
    td = _two_trajectories()
    td["episode"] = torch.tensor([0, 0, 0, 1, 1, 1])
    rb.extend(td)
    for _ in range(4):
        # two flat slices: the sampler marks each slice's end done, so no window crosses into the other slice
        stacked = rb.sample()["obs"].tolist()
        for part in (stacked[:3], stacked[3:]):
            assert part in ([[0, 0], [0, 1], [1, 2]], [[10, 10], [10, 11], [11, 12]])


def test_as_inverse_stacks_on_writes_only():
    t = CatFrames(N=2, dim=-1, in_keys=["obs"], out_keys=["stacked"], as_inverse=True)
    td = _two_trajectories()
    assert "stacked" not in t(td).keys()
    assert t.inv(td)["stacked"][1].tolist() == [0, 1]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"N": 0, "dim": -1}, "N >= 1"),
        ({"N": 2, "dim": 0}, "negative"),
        ({"N": 2, "dim": -1, "padding": "zeros"}, "padding='constant'"),
        ({"N": 2, "dim": -1, "padding": "reflect"}, "one of"),
        ({"N": 2, "dim": -1, "in_keys": ["obs", ("next", "obs")], "future": True}, "future=True"),
    ],
)
def test_refused_arguments(kwargs, match):
    with pytest.raises(InvalidArgument, match=match):
        CatFrames(**kwargs)


def test_refused_data():
    td = _two_trajectories()
    with pytest.raises(InvalidArgument, match="dims beyond the batch shape"):
        CatFrames(N=2, dim=-2, in_keys=["obs"])(td)
    with pytest.raises(KeyError, match="done_key"):
        CatFrames(N=2, dim=-1, in_keys=["obs"], done_key="terminated")(td)
    with pytest.raises(InvalidArgument, match="time dim"):
        CatFrames(N=2, dim=-1, in_keys=["obs"])(td[0])


def test_densify_reward_spreads_the_reward_over_its_trajectory():
    reward = torch.tensor([[0.0, 3, 0, 0, 7], [0, 0, 5, 0, 1]]).unsqueeze(-1)
    done = torch.tensor([[False, True, False, False, True], [False, False, True, False, False]]).unsqueeze(-1)
    td = TensorDict({"next": {"reward": reward, "done": done}}, [2, 5])
    assert DensifyReward()(td)["next", "reward"].squeeze(-1).tolist() == [[3, 3, 7, 7, 7], [5, 5, 5, 1, 1]]
    half = DensifyReward(discount=0.5, reward_key_out="dense")(td)
    assert half["next", "dense"].squeeze(-1).tolist() == [[1.5, 3, 1.75, 3.5, 7], [1.25, 2.5, 5, 0.5, 1]]
    assert half["next", "reward"].squeeze(-1).tolist() == reward.squeeze(-1).tolist()


def test_densify_reward_refuses_mismatched_shapes():
    td = TensorDict({"next": {"reward": torch.zeros(4, 1), "done": torch.zeros(4, dtype=torch.bool)}}, [4])
    with pytest.raises(InvalidArgument, match="must match"):
        DensifyReward()(td)


def test_make_rb_transform_and_sampler_samples_stacked_items_from_single_frames():
    cat = CatFrames(N=3, dim=-1, in_keys=["obs"], out_keys=["stacked"])
    transform, sampler = cat.make_rb_transform_and_sampler(batch_size=4, traj_key="episode")
    rb = dh.TensorDictReplayBuffer(storage=dh.LazyTensorStorage(10), sampler=sampler, transform=transform, batch_size=4)
    td = _two_trajectories()
    td["episode"] = torch.tensor([0, 0, 0, 1, 1, 1])
    td["stacked"] = torch.zeros(6, 3)  # a stack computed before: not stored
    rb.extend(td)
    assert "stacked" not in rb.storage[:].keys()
    sample = rb.sample()
    assert sample.batch_size == (4,)
    for window, nxt in zip(sample["stacked"].tolist(), sample["next", "stacked"].tolist(), strict=True):
        assert window in ([0, 1, 2], [10, 11, 12]), "N real frames of one trajectory, the sample's own last"
        assert nxt == ([1, 2, 100] if window[0] == 0 else [11, 12, 13])
    with pytest.raises(InvalidArgument, match="batch_size"):
        cat.make_rb_transform_and_sampler(batch_size=0)
    with pytest.raises(InvalidArgument, match="distinct out_keys"):
        CatFrames(N=3, dim=-1, in_keys=["obs"]).make_rb_transform_and_sampler(batch_size=4)
