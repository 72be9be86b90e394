"""The device twin of a host sampler, with the same settings (and priorities), or a clear refusal."""

from __future__ import annotations

from typing import Any

import torch

from datasets_hub.buffers.device.goals import DeviceGoalMix, DeviceGoalSampler
from datasets_hub.buffers.device.memory import same_device
from datasets_hub.buffers.device.samplers import (
    DevicePrioritizedSampler,
    DeviceRandomSampler,
    DeviceSampler,
    DeviceSamplerWithoutReplacement,
)
from datasets_hub.buffers.device.slices import (
    DevicePrioritizedSliceSampler,
    DeviceSliceSampler,
    DeviceSliceSamplerWithoutReplacement,
)
from datasets_hub.buffers.samplers.goal import GoalMix, GoalSampler
from datasets_hub.buffers.samplers.prioritized import PrioritizedSampler, PrioritizedSliceSampler
from datasets_hub.buffers.samplers.random import RandomSampler, SamplerWithoutReplacement
from datasets_hub.buffers.samplers.slice import SliceSampler, SliceSamplerWithoutReplacement
from datasets_hub.errors import InvalidParameter

#: host samplers with a device twin (others are refused)
SUPPORTED = (
    "RandomSampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "GoalSampler",
)


def _slice_kwargs(sampler: SliceSampler) -> dict[str, Any]:
    return {
        "num_slices": sampler.num_slices,
        "slice_len": sampler.slice_len,
        "traj_key": sampler.traj_key,
        "end_key": sampler.end_key,
        "strict_length": sampler.strict_length,
        "truncated_key": sampler.truncated_key,
    }


def device_sampler(sampler: Any, device: torch.device) -> DeviceSampler:
    """The device twin of ``sampler`` on ``device`` (a device sampler is returned as it is).

    Priorities set so far move with a prioritized sampler; an epoch in progress does not (the device
    sampler starts a new one). A sampler without a twin raises :class:`InvalidParameter`: there is
    no silent fallback to a host path that would synchronise.
    """
    if isinstance(sampler, DeviceSampler):
        own = getattr(sampler, "device", None)
        if own is not None and not same_device(torch.device(own), device):
            raise InvalidParameter(f"{type(sampler).__name__} keeps its trees on {own}, not on {device}")
        return sampler
    kind = type(sampler)
    if kind is RandomSampler:
        return DeviceRandomSampler()
    if kind is SamplerWithoutReplacement:
        return DeviceSamplerWithoutReplacement(drop_last=sampler.drop_last, shuffle=sampler.shuffle)
    if kind is SliceSampler:
        return DeviceSliceSampler(**_slice_kwargs(sampler), cache_values=sampler.cache_values)
    if kind is SliceSamplerWithoutReplacement:
        return DeviceSliceSamplerWithoutReplacement(
            **_slice_kwargs(sampler), drop_last=sampler.drop_last, shuffle=sampler.shuffle
        )
    if kind is PrioritizedSampler:
        twin = DevicePrioritizedSampler(
            sampler.max_capacity,
            sampler.alpha,
            sampler.beta,
            sampler.eps,
            sampler.dtype,
            sampler.reduction,
            sampler.max_priority_within_buffer,
            device=device,
        )
        twin.load_state_dict(sampler.state_dict())
        return twin
    if kind is PrioritizedSliceSampler:
        settings = sampler.settings()
        slice_twin = DevicePrioritizedSliceSampler(
            **settings, **_slice_kwargs(sampler), cache_values=sampler.cache_values, device=device
        )
        slice_twin.load_state_dict(sampler.state_dict())
        return slice_twin
    if kind is GoalSampler:
        return _goal_twin(sampler, device)
    raise InvalidParameter(
        f"{kind.__name__} has no device twin: device sampling supports {', '.join(SUPPORTED)}. "
        "Sample on the host (drop device=), or use one of those samplers"
    )


def _mix(mix: GoalMix) -> DeviceGoalMix:
    return DeviceGoalMix(mix.p_current, mix.p_future, mix.p_random, mix.future, mix.gamma)


def _goal_twin(sampler: GoalSampler, device: torch.device) -> DeviceGoalSampler:
    inner = sampler.sampler
    return DeviceGoalSampler(
        _mix(sampler.value),
        actor=_mix(sampler.actor) if sampler.actor is not None else None,
        subgoal_steps=sampler.subgoal_steps,
        goal_keys=list(sampler.goal_keys),
        success_fn=sampler.success_fn,
        success_on=sampler.success_on,
        negative_reward=sampler.negative_reward,
        convention=sampler.convention,
        sampler=device_sampler(inner, device) if inner is not None else None,
    )
