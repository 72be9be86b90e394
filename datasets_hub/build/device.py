"""A hub build copied into one device's memory, in its lean layout (docs/guide/sampling.md).

The build is read through :func:`datasets_hub.build.reader.open_build` (the one reader of the
format): observation-like keys keep their per-episode ``T + 1`` rows (one copy serves ``t`` and
``t + 1``), per-step columns their ``N`` rows, and the episode index comes along. The copy is
refused, before anything is allocated, when it needs more than the device can spare.
"""

from __future__ import annotations

from pathlib import Path

import torch

from datasets_hub.buffers.device.storage import DeviceStorage
from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.build.reader import open_build
from datasets_hub.errors import InvalidParameter


def build_on_device(path: str | Path, device: str | torch.device) -> DeviceStorage:
    """The build at ``path`` as a :class:`DeviceStorage` on ``device`` (samples equal ``DatasetStorage``'s)."""
    build = open_build(path)
    if build.history:
        raise InvalidParameter(
            f"the build at {path} keeps history frames (frames before episode starts, for frame stacking), "
            "which device sampling does not serve: sample it on the host (drop device=)"
        )
    frames = {key: column for key, column in build.obs.items() if isinstance(column, torch.Tensor)}
    if len(frames) != len(build.obs):
        compressed = "/".join(next(key for key in build.obs if key not in frames))
        raise InvalidParameter(
            f"device= copies the whole build, decoded, into device memory, but {build.manifest.get('id', path)!r} "
            f"stores {compressed!r} as compressed frames (a build too large to hold decoded). Sample on the host and "
            "decode the sampled frames on the device: load(..., decode_device='cuda'); or build it with frames='raw'"
        )
    episodes = EpisodeIndex(build.episodes["start"], build.episodes["length"])
    return DeviceStorage(
        device,
        build.transitions,
        build.steps,
        frames=frames,
        next_frames=build.shared_next,
        episodes=episodes,
        episode_ids=build.episodes["id"],
        derive_ted=True,
        what=f"the device copy of {build.manifest.get('id', path)}",
        copy=True,
    )
