"""CUDA graphs for device sampling: ``to_device(rb, "cuda", cuda_graphs=True)``.

On a GPU a ``sample()`` of the device path is some 30 small kernels, so its cost is the host's
launch overhead (10-20 us per kernel on a virtualised host), not the GPU's work. With
``cuda_graphs=True`` the first call of each batch size records the whole draw and gather once in a
CUDA graph; later calls replay it (one launch) and copy the outputs out of the graph's memory with
one copy per dtype, so every batch is a set of fresh tensors the caller owns.

Contract:

- The same values as without graphs: the sampler's generator is registered with the graph, which
  advances it as the eager calls would, so a seeded buffer draws the same batches either way
  (checked on CUDA in ``tests/test_device_cuda.py``).
- Only samplers whose draw has no host-side state between calls are captured: uniform
  (``DeviceRandomSampler``), slices with replacement (``DeviceSliceSampler``) and goals over those
  (``DeviceGoalSampler``). Others (epochs without replacement, priorities) are refused with the
  reason. A graph is recorded again when the buffer's storage, sampler or generator object changes.
- Transforms run after the replay, on the fresh tensors, as they do without graphs.
- A graph per batch size holds its own memory (about the size of one batch, twice); at most
  :data:`MAX_GRAPHS` are kept, the least recently used is dropped.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase

from datasets_hub.buffers.device.goals import DeviceGoalSampler
from datasets_hub.buffers.device.samplers import DeviceRandomSampler
from datasets_hub.buffers.device.slices import DeviceSliceSampler
from datasets_hub.buffers.device.storage import DeviceStorage, device_tensordict
from datasets_hub.buffers.replay_buffers import ReplayBuffer, TensorDictReplayBuffer
from datasets_hub.errors import InvalidParameter

#: graphs kept per buffer (one per batch size); the least recently used one is dropped first
MAX_GRAPHS = 4
#: eager calls on a side stream before a capture: they build the sampler's device tables
WARMUP_CALLS = 2


def graphable(sampler: Any) -> str | None:
    """``None`` when ``sampler``'s draw can be recorded in a CUDA graph, else why not."""
    inner = sampler.sampler if isinstance(sampler, DeviceGoalSampler) else sampler
    if isinstance(sampler, DeviceGoalSampler) and inner is None:
        return None  # goals over uniform anchors drawn by the goal sampler itself
    if type(inner) in (DeviceRandomSampler, DeviceSliceSampler):
        return None
    return (
        f"{type(inner).__name__} keeps host-side state between draws (epochs, priorities), which a "
        "recorded graph would not see change; cuda_graphs=True supports uniform sampling, slices with "
        "replacement and goal sampling over them"
    )


@dataclass
class _Piece:
    place: str  # "data" or "info"
    key: Any
    shape: torch.Size


@dataclass
class _Captured:
    graph: Any  # torch.cuda.CUDAGraph
    arenas: list[torch.Tensor]  # the graph's outputs, one flat tensor per dtype
    pieces: list[list[_Piece]]  # per arena, the leaves laid end to end
    splits: list[list[int]]
    data_tree: Any  # the nesting of the data leaves: a TensorDict's structure, or None for a tensor
    batch_size: torch.Size
    aliases: dict[str, Any]  # info keys whose tensor is a data leaf: info key -> data key
    constants: dict[str, Any]  # info values that are no tensors of the batch (kept as they are)
    owners: tuple[Any, Any, Any]  # storage, sampler, generator the graph reads


def _leaves(
    data: Any, info: dict[str, Any]
) -> tuple[list[tuple[str, Any, torch.Tensor]], dict[str, Any], dict[str, Any]]:
    """The batch's tensors in a fixed order, each once; the info keys whose tensor is a data leaf
    (info key -> data key); and the info values that are no tensors."""
    out: list[tuple[str, Any, torch.Tensor]] = []
    data_key_of: dict[int, Any] = {}
    if isinstance(data, TensorDictBase):
        for key, value in data.items(include_nested=True, leaves_only=True):
            if not isinstance(value, torch.Tensor):
                raise InvalidParameter(f"cuda_graphs=True needs tensor leaves; {key!r} is a {type(value).__name__}")
            data_key_of[id(value)] = key
            out.append(("data", key, value))
    elif isinstance(data, torch.Tensor):
        data_key_of[id(data)] = None
        out.append(("data", None, data))
    else:
        raise InvalidParameter(
            f"cuda_graphs=True needs batches that are TensorDicts or tensors, got {type(data).__name__}"
        )
    aliases: dict[str, Any] = {}
    constants: dict[str, Any] = {}
    for key, value in info.items():
        if not isinstance(value, torch.Tensor):
            constants[key] = value
        elif id(value) in data_key_of:
            aliases[key] = data_key_of[id(value)]
        else:
            out.append(("info", key, value))
    return out, aliases, constants


def _nest(tree: dict[str, Any], key: Any, value: torch.Tensor) -> None:
    *parents, last = (key,) if isinstance(key, str) else tuple(key)
    for name in parents:
        tree = tree.setdefault(name, {})
    tree[last] = value


class SampleGraphs:
    """The recorded draws of one buffer, one CUDA graph per batch size (see the module docstring)."""

    def __init__(self, device: torch.device) -> None:
        if device.type != "cuda":
            raise InvalidParameter(f"cuda_graphs=True needs a CUDA device, got {device}")
        self.device = device
        self._graphs: OrderedDict[int, _Captured] = OrderedDict()

    def clear(self) -> None:
        self._graphs.clear()

    def sample(self, buffer: Any, batch_size: int, draw: Any) -> tuple[Any, dict[str, Any], bool]:
        """One batch: ``draw(batch_size)`` (the buffer's eager draw, returning ``(data, info, ran_out)``)
        recorded on the first call of a batch size, replayed afterwards."""
        owners = (buffer.storage, buffer.sampler, buffer.sampler.generator)
        captured = self._graphs.get(batch_size)
        if captured is None or any(a is not b for a, b in zip(captured.owners, owners, strict=True)):
            captured = self._capture(batch_size, draw, owners)
            self._graphs[batch_size] = captured
            while len(self._graphs) > MAX_GRAPHS:
                self._graphs.popitem(last=False)
        self._graphs.move_to_end(batch_size)
        captured.graph.replay()
        return self._fresh(captured)

    def _capture(self, batch_size: int, draw: Any, owners: tuple[Any, Any, Any]) -> _Captured:
        generator = owners[2]
        if not isinstance(generator, torch.Generator) or generator.device.type != "cuda":
            raise InvalidParameter("cuda_graphs=True needs the sampler's generator on the CUDA device")
        state = generator.get_state()  # the warm-up and the capture draw nothing the user sees
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                draw(batch_size)
        torch.cuda.current_stream(self.device).wait_stream(side)
        generator.set_state(state)
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(generator)
        with torch.cuda.graph(graph):
            data, info, _ = draw(batch_size)
            leaves, aliases, constants = _leaves(data, info)
            by_dtype: dict[torch.dtype, list[tuple[str, Any, torch.Tensor]]] = {}
            for leaf in leaves:
                by_dtype.setdefault(leaf[2].dtype, []).append(leaf)
            arenas = [torch.cat([t.reshape(-1) for _, _, t in group]) for group in by_dtype.values()]
        generator.set_state(state)
        pieces = [[_Piece(place, key, t.shape) for place, key, t in group] for group in by_dtype.values()]
        splits = [[t.numel() for _, _, t in group] for group in by_dtype.values()]
        tree = data if isinstance(data, TensorDictBase) else None
        size = data.batch_size if isinstance(data, TensorDictBase) else torch.Size(data.shape[:1])
        return _Captured(graph, arenas, pieces, splits, tree, size, aliases, constants, owners)

    def _fresh(self, c: _Captured) -> tuple[Any, dict[str, Any], bool]:
        """The replayed outputs copied into memory the caller owns: one copy per dtype, then views."""
        tree: dict[str, Any] = {}
        by_key: dict[Any, torch.Tensor] = {}
        info: dict[str, Any] = dict(c.constants)
        for arena, pieces, splits in zip(c.arenas, c.pieces, c.splits, strict=True):
            for piece, part in zip(pieces, arena.clone().split(splits), strict=True):
                value = part.view(piece.shape)
                if piece.place == "info":
                    info[piece.key] = value
                else:
                    by_key[piece.key] = value
                    if piece.key is not None:
                        _nest(tree, piece.key, value)
        for info_key, data_key in c.aliases.items():
            info[info_key] = by_key[data_key]
        data = by_key[None] if c.data_tree is None else device_tensordict(tree, c.batch_size, self.device)
        return data, info, False


def _storage_device(storage: Any) -> torch.device:
    if not isinstance(storage, DeviceStorage):
        raise InvalidParameter(
            f"cuda_graphs=True samples a DeviceStorage (use to_device), not {type(storage).__name__}"
        )
    return storage.device


class GraphedDraws:
    """Mixin for a device replay buffer: its ``_sample_now`` (every draw: ``sample``, iteration,
    prefetch) replays recorded CUDA graphs. Put it before the buffer class in the bases."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        buffer: Any = self
        reason = graphable(buffer.sampler)
        if reason is not None:
            raise InvalidParameter(reason)
        self._graphs = SampleGraphs(_storage_device(buffer.storage))

    def _sample_now(self, batch_size: int) -> tuple[Any, dict[str, Any], bool]:
        eager = super()._sample_now  # type: ignore[misc]  # the buffer class's own draw, next in the MRO
        return self._graphs.sample(self, batch_size, eager)


class GraphedReplayBuffer(GraphedDraws, ReplayBuffer):
    """A device ``ReplayBuffer`` whose draws are replayed CUDA graphs (see :mod:`.graphs`)."""


class GraphedTensorDictReplayBuffer(GraphedDraws, TensorDictReplayBuffer):
    """A device ``TensorDictReplayBuffer`` whose draws are replayed CUDA graphs (see :mod:`.graphs`)."""
