"""datasets_hub: offline-RL datasets by name, as memory-mapped TorchRL Episode Data replay buffers.

``import datasets_hub`` imports torch and tensordict and nothing heavier: every public name below
is resolved on first use, and no loader plugin, h5py, minari, huggingface_hub or requests is
imported until a dataset needs it.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    # the hub (DESIGN.md §2)
    "load": "hub", "download": "hub", "info": "hub", "list_datasets": "hub",
    "register_dataset": "catalogue", "normalized_score": "scores", "DatasetInfo": "hub",
    # plugin contract
    "Loader": "loader", "Resource": "loader", "DatasetSpec": "loader", "LoaderContext": "loader",
    # replay buffers
    "ReplayBuffer": "replay_buffers", "TensorDictReplayBuffer": "replay_buffers",
    "PrioritizedReplayBuffer": "prioritized_buffers", "TensorDictPrioritizedReplayBuffer": "prioritized_buffers",
    "ReplayBufferEnsemble": "ensemble",
    # storages
    "Storage": "storages", "ListStorage": "storages", "TensorStorage": "tensor_storages",
    "LazyTensorStorage": "tensor_storages", "LazyMemmapStorage": "tensor_storages", "DatasetStorage": "dataset_storage",
    # samplers
    "Sampler": "samplers", "RandomSampler": "samplers", "SamplerWithoutReplacement": "samplers",
    "PrioritizedSampler": "prioritized", "SliceSampler": "slice_samplers",
    "SliceSamplerWithoutReplacement": "slice_samplers", "PrioritizedSliceSampler": "slice_samplers",
    # writers
    "Writer": "writers", "RoundRobinWriter": "writers", "ImmutableDatasetWriter": "writers",
    # transforms
    "Transform": "transforms", "Compose": "transforms", "Rename": "transforms", "Select": "transforms",
    "Exclude": "transforms", "FrameStack": "frame_stack", "FullStackSampler": "frame_stack",
    "EpisodeIndex": "episode_index",
    # interop (DESIGN.md §8)
    "BufferDataset": "torch_data", "SampledBatches": "torch_data", "EpisodeShardSampler": "torch_data",
    "tensordict_collate": "torch_data", "to_torchrl": "torchrl_interop", "RayReplayBuffer": "ray_buffer",
    # errors
    "HubError": "errors", "UnknownDataset": "errors", "UnknownLoader": "errors",
    "MissingDependency": "errors", "ChecksumMismatch": "errors", "DownloadError": "errors",
    "LoaderError": "errors", "CacheError": "errors", "TEDError": "errors", "InvalidParameter": "errors",
    "CorruptFile": "errors", "PreprocessError": "errors", "UncachedPreprocessWarning": "fingerprint",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'datasets_hub' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module_name}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
