"""Move a replay buffer's data and sampler onto a device: ``to_device(rb, "cuda")``."""

from __future__ import annotations

from typing import Any

import torch

from datasets_hub.buffers.device.convert import device_sampler
from datasets_hub.buffers.device.memory import as_device, same_device
from datasets_hub.buffers.device.storage import DeviceStorage
from datasets_hub.buffers.replay_buffers import ReplayBuffer, TensorDictReplayBuffer
from datasets_hub.buffers.storages import Storage
from datasets_hub.buffers.writers import ImmutableDatasetWriter
from datasets_hub.errors import InvalidParameter


def device_storage(storage: Storage, device: torch.device, sampler: Any = None) -> DeviceStorage:
    """``storage``'s rows on ``device``. A storage that knows a leaner copy of itself offers
    ``device_copy(device)`` (hub builds: observations once per episode); any other TensorDict
    storage is copied leaf by leaf, with the episodes ``sampler`` finds in it (a slice sampler's
    ``traj_key``/``end_key`` and write cursor) when it has no build-time index."""
    if isinstance(storage, DeviceStorage):
        if not same_device(storage.device, device):
            raise InvalidParameter(f"the storage is already on {storage.device}, not on {device}")
        return storage
    copier = getattr(storage, "device_copy", None)
    if callable(copier):
        return copier(device)
    episodes = storage.episode_index()
    finder = getattr(sampler, "episodes", None)
    if episodes is None and callable(finder):
        try:
            episodes = finder(storage)
        except (KeyError, RuntimeError):
            episodes = None  # no episode keys: fine for transition samplers, slice samplers refuse
    return DeviceStorage.from_storage(storage, device, episodes=episodes)


def device_generator(device: torch.device, generator: torch.Generator | None, host: Any = None) -> torch.Generator:
    """A generator on ``device``: ``generator`` when it is on it (else a clear error), or one seeded
    from ``host`` (the host sampler's generator) or from torch's global generator."""
    if generator is not None:
        if not same_device(generator.device, device):
            raise InvalidParameter(
                f"generator is on {generator.device} but sampling runs on {device}: pass "
                f"generator=torch.Generator(device={str(device)!r}).manual_seed(seed)"
            )
        return generator
    seed = int(torch.randint(0, 2**62, (), generator=host if isinstance(host, torch.Generator) else None))
    return torch.Generator(device=device).manual_seed(seed)


def to_device(
    rb: ReplayBuffer,
    device: str | torch.device,
    *,
    generator: torch.Generator | None = None,
    transform: Any = None,
    cuda_graphs: bool = False,
) -> ReplayBuffer:
    """A read-only buffer of the same kind (``TensorDictReplayBuffer`` or ``ReplayBuffer``) whose data
    (a :class:`DeviceStorage`) and sampler (its device twin) live on ``device``; ``sample()`` then
    never synchronises with the host. ``generator`` must be on ``device`` (default: one seeded
    from the buffer's). ``transform`` runs on samples (the buffer's own transforms are not carried:
    some are bound to its storage). Batch size and prefetch are kept.

    ``cuda_graphs=True`` (CUDA only) records each batch size's draw in a CUDA graph and replays it:
    the same batches, a fraction of the host time per call; see :mod:`.graphs` for the samplers it
    supports and its contract."""
    dev = as_device(device)
    if not isinstance(cuda_graphs, bool):
        raise InvalidParameter(f"cuda_graphs must be True or False, got {cuda_graphs!r}")
    if cuda_graphs and dev.type != "cuda":
        raise InvalidParameter(f"cuda_graphs=True records CUDA graphs: it needs device='cuda', not {str(dev)!r}")
    if type(rb) not in (ReplayBuffer, TensorDictReplayBuffer):
        raise InvalidParameter(
            f"to_device takes a ReplayBuffer or TensorDictReplayBuffer, not {type(rb).__name__}: build a "
            "TensorDictReplayBuffer(sampler=PrioritizedSampler(...)) for priorities, or use load(..., device=...)"
        )
    host_sampler = rb.sampler
    sampler = device_sampler(host_sampler, dev)
    storage = device_storage(rb.storage, dev, host_sampler)
    gen = device_generator(dev, generator, getattr(host_sampler, "generator", None))
    kwargs: dict[str, Any] = {}
    if isinstance(rb, TensorDictReplayBuffer):
        kwargs["priority_key"] = rb.priority_key
    cls: type[ReplayBuffer] = type(rb)
    if cuda_graphs:
        from datasets_hub.buffers.device.graphs import GraphedReplayBuffer, GraphedTensorDictReplayBuffer, graphable

        reason = graphable(sampler)
        if reason is not None:
            raise InvalidParameter(reason)
        cls = GraphedTensorDictReplayBuffer if isinstance(rb, TensorDictReplayBuffer) else GraphedReplayBuffer
    out = cls(
        storage=storage,
        sampler=sampler,
        writer=ImmutableDatasetWriter(),
        batch_size=rb.batch_size,
        transform=transform,
        prefetch=rb.prefetch,
        generator=gen,
        **kwargs,
    )
    if rb.batch_size is not None:
        sampler.prepare(storage, rb.batch_size)
    return out
