"""LeRobot's ``delta_timestamps`` on a hub build: the same windows, as frame offsets.

A LeRobot training config says, per feature, which times around the sampled frame a policy sees,
in seconds, e.g. Diffusion Policy on Push-T::

    {"observation.image": [-0.1, 0.0], "observation.state": [-0.1, 0.0],
     "action": [-0.1, 0.0, 0.1, ..., 1.4]}

``LeRobotDataset`` turns each time into a frame offset ``round(dt * fps)`` after checking that it
is a multiple of ``1 / fps`` within ``tolerance_s``; positions outside the sampled frame's episode
repeat the episode's first or last frame and are flagged in ``<feature>_is_pad``.
:func:`delta_timestamps_sampler` makes the :class:`~datasets_hub.buffers.samplers.window.WindowSampler`
that does exactly that on a ``lerobot`` build (feature names mapped to TED keys as the loader maps
them: ``"observation.images.top"`` -> ``("observation", "images", "top")``, ``"next.reward"`` ->
``("next", "reward")``), so the config carries over unchanged::

    from datasets_hub.loaders.lerobot.windows import delta_timestamps_sampler
    rb = dh.load("lerobot/lerobot/pusht", batch_size=32,
                 sampler=delta_timestamps_sampler(config.delta_timestamps, fps=10))
    batch = rb.sample()   # batch["action"]: [32, 16, 2], batch["action_is_pad"]: [32, 16]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from datasets_hub.errors import InvalidParameter
from datasets_hub.loaders.lerobot.data import key_of
from datasets_hub.loaders.lerobot.meta import TOLERANCE_S


def ted_key(name: str) -> tuple[str, ...]:
    """The TED key a LeRobot feature name becomes in a ``lerobot`` build."""
    if name == "next.reward":
        return ("next", "reward")
    return key_of(name)


def delta_indices(
    delta_timestamps: Mapping[str, Sequence[float]], fps: float, tolerance_s: float = TOLERANCE_S
) -> dict[tuple[str, ...], list[int]]:
    """``{TED key: frame offsets}`` for LeRobot's ``delta_timestamps`` at ``fps`` frames per second.

    A time that is not a multiple of ``1 / fps`` within ``tolerance_s`` is refused (LeRobot's
    ``check_delta_timestamps`` rule) naming the feature and the time.
    """
    if not isinstance(delta_timestamps, Mapping) or not delta_timestamps:
        raise InvalidParameter(f"delta_timestamps must map feature names to lists of seconds, got {delta_timestamps!r}")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
        raise InvalidParameter(f"fps must be a positive number (the dataset's frame rate), got {fps!r}")
    out: dict[tuple[str, ...], list[int]] = {}
    for name, deltas in delta_timestamps.items():
        if not isinstance(name, str) or isinstance(deltas, (str, bytes)) or not isinstance(deltas, Sequence):
            raise InvalidParameter(f"delta_timestamps[{name!r}] must be a list of seconds, got {deltas!r}")
        offsets = []
        for dt in deltas:
            if isinstance(dt, bool) or not isinstance(dt, (int, float)):
                raise InvalidParameter(f"delta_timestamps[{name!r}] holds {dt!r}, not a number of seconds")
            frames = round(dt * fps)
            if abs(frames / fps - dt) > tolerance_s:
                raise InvalidParameter(
                    f"delta_timestamps[{name!r}] holds {dt} s, which is not a multiple of 1/fps = {1 / fps:.6g} s "
                    f"within tolerance_s={tolerance_s} (LeRobot refuses it too); the nearest frames are "
                    f"{frames / fps:.6g} s and {(frames + (1 if frames / fps < dt else -1)) / fps:.6g} s"
                )
            offsets.append(int(frames))
        if not offsets:
            raise InvalidParameter(f"delta_timestamps[{name!r}] is empty")
        out[ted_key(name)] = offsets
    return out


def delta_timestamps_sampler(
    delta_timestamps: Mapping[str, Sequence[float]], fps: Any, *, tolerance_s: float = TOLERANCE_S, **kwargs: Any
):
    """A ``WindowSampler`` giving LeRobot's ``delta_timestamps`` windows (see the module docstring).

    ``fps``: the dataset's frame rate, or a ``lerobot/...`` dataset id (the rate is read from its
    ``meta/info.json``). ``kwargs`` go to ``WindowSampler`` (e.g. ``pad=False``,
    ``sampler=``). The sample's keys are TED keys, and each mask ``<key>_is_pad`` sits beside
    its key.
    """
    from datasets_hub.buffers.samplers.window import WindowSampler

    if isinstance(fps, str):
        fps = _fps_of(fps)
    return WindowSampler(delta_indices(delta_timestamps, fps, tolerance_s), **kwargs)


def _fps_of(dataset_id: str) -> float:
    """The frame rate in the repo's ``meta/info.json`` (read once per process; offline, from the
    Hugging Face cache)."""
    from datasets_hub.catalogue import resolve
    from datasets_hub.loaders.lerobot.loader import _metadata

    info, _ = _metadata(resolve(dataset_id))
    return float(info["fps"])
