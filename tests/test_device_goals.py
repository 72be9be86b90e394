"""DeviceGoalSampler: the host GoalSampler's goals, distances and rewards, exactly, with no host sync."""

from __future__ import annotations

import pytest
import torch

from datasets_hub import SliceSampler
from datasets_hub.buffers.device import DeviceGoalSampler, DeviceStorage, device_sampler, no_host_sync
from datasets_hub.buffers.samplers.goal import GoalSampler
from datasets_hub.errors import InvalidParameter

from fixtures.device import LENGTHS, N, gen, host_build

SETTINGS = {
    "mixture": {"p_current": 0.2, "p_future": 0.5, "p_random": 0.3},
    "uniform future": {"future": "uniform"},
    "HER final + actor goals + subgoals": {
        "future": "final",
        "actor": {"p_future": 0.5, "p_random": 0.5, "future": "episode"},
        "subgoal_steps": 5,
    },
    "current only, negative reward": {"p_current": 1.0, "p_future": 0.0, "negative_reward": True},
    "geometric gamma 0": {"gamma": 0.0},
    "over slices": {"sampler": SliceSampler(slice_len=8), "p_future": 0.7, "p_random": 0.3},
    "HIQL (value goals, high actor goals and targets, subgoals)": {
        "p_current": 0.2,
        "p_future": 0.5,
        "p_random": 0.3,
        "actor": {"p_future": 0.5, "p_random": 0.5, "future": "uniform"},
        "subgoal_steps": 4,
        "negative_reward": True,
    },
    "her: mixture, uniform, actor goals and subgoals": {
        "convention": "her",
        "p_current": 0.2,
        "p_future": 0.5,
        "p_random": 0.3,
        "future": "uniform",
        "actor": {"p_future": 0.5, "p_random": 0.5, "future": "episode"},
        "subgoal_steps": 5,
    },
    "her: geometric gamma 0": {"convention": "her", "gamma": 0.0},
}


@pytest.fixture
def storages():
    host = host_build()
    return host, host.device_copy("cpu")


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_goals_equal_the_host_sampler_and_never_sync(storages, name):
    host, dev = storages
    h = GoalSampler(**SETTINGS[name])
    d = device_sampler(h, torch.device("cpu"))
    assert isinstance(d, DeviceGoalSampler)
    h.generator, d.generator = gen(4), gen(4)
    d.prepare(dev, 256)
    for _ in range(3):
        hi, hinfo = h.sample(host, 256)
        with no_host_sync():
            di, dinfo = d.sample(dev, 256)
        assert torch.equal(hi, di)
        assert set(hinfo) == set(dinfo)
        for key in hinfo:
            assert torch.equal(hinfo[key], dinfo[key]), key


def test_future_goals_stay_in_their_episode_and_random_goals_are_rows(storages):
    _host, dev = storages
    d = device_sampler(GoalSampler(p_future=0.6, p_random=0.4, future="uniform"), torch.device("cpu"))
    d.generator = gen(1)
    index, info = d.sample(dev, 2000)
    kind, distance = info[("goal", "kind")], info[("goal", "distance")]
    future = kind == 1
    assert (distance[future] >= 0).all() and info[("goal", "in_episode")][future].all()
    # a goal observation is an observation of the dataset: the fake build's values are row * 100 + d
    goal = info[("goal", "observation")]
    assert torch.equal(goal[:, 1] - goal[:, 0], torch.ones(len(goal)))
    data = dev.get(index)
    length = torch.tensor(LENGTHS)[data["episode"]]
    # OGBench's law: goals end at the last stored observation (time L - 1), reached from the last row itself
    assert (data["step"] + distance <= length - 1)[future].all()
    assert ((distance == 0) == (data["step"] == length - 1))[future].all()


def test_a_success_fn_runs_on_device_tensors(storages):
    _host, dev = storages

    def close(state, goal):
        return (state - goal).abs().sum(-1) < 150

    d = device_sampler(GoalSampler(p_current=0.5, p_future=0.5, success_fn=close), torch.device("cpu"))
    d.generator = gen(2)
    _index, info = d.sample(dev, 128)
    distance = info[("goal", "distance")]
    assert info[("goal", "success")][distance == 0].all()


def test_goal_keys_must_be_per_episode_frames():
    flat = DeviceStorage("cpu", N, {("observation",): torch.zeros(N, 3)}, episodes=host_build().episode_index())
    d = device_sampler(GoalSampler(), torch.device("cpu"))
    with pytest.raises(InvalidParameter, match="not an observation stored once per episode"):
        d.sample(flat, 8)
