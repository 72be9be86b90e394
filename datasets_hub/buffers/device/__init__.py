"""Sampling on an accelerator: storages, samplers and index math that live on one ``torch.device``.

``load(..., device="cuda")`` (or :func:`to_device` on a buffer) copies the data into device memory
(:class:`DeviceStorage`, refusing when it does not fit) and swaps the sampler for its device twin
(:func:`device_sampler`). Everything ``sample()`` does then runs on that device with no host
synchronisation: no ``.item()``, no data-dependent shapes, no CPU<->device copies. The same code
runs with ``device="cpu"``; :func:`no_host_sync` checks the guarantee on any device.
Design and limits: docs/guide/sampling.md ("Sampling on the accelerator").
"""

from __future__ import annotations

from datasets_hub.buffers.device.buffer import to_device
from datasets_hub.buffers.device.convert import device_sampler
from datasets_hub.buffers.device.goals import DeviceGoalSampler
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
from datasets_hub.buffers.device.storage import DeviceStorage
from datasets_hub.buffers.device.sync_check import HostSyncError, no_host_sync

__all__ = [
    "DeviceGoalSampler",
    "DevicePrioritizedSampler",
    "DevicePrioritizedSliceSampler",
    "DeviceRandomSampler",
    "DeviceSampler",
    "DeviceSamplerWithoutReplacement",
    "DeviceSliceSampler",
    "DeviceSliceSamplerWithoutReplacement",
    "DeviceStorage",
    "HostSyncError",
    "device_sampler",
    "no_host_sync",
    "to_device",
]
