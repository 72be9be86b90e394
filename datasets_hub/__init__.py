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
    # the hub (docs/reference/hub.md)
    "load": "hub",
    "download": "hub",
    "info": "hub",
    "list_datasets": "hub",
    "mixture": "hub",
    "offline_online": "hub",
    "register_dataset": "catalogue",
    "export": "remote.publish",
    "push": "remote.publish",
    "normalized_score": "scores",
    "diagnose": "doctor.diagnosis",
    "DoctorReport": "doctor.findings",
    "DatasetInfo": "dataset_info",
    # plugin contract
    "Loader": "loader",
    "Resource": "loader",
    "DatasetSpec": "loader",
    "LoaderContext": "loader",
    # replay buffers
    "ReplayBuffer": "buffers.replay_buffers",
    "TensorDictReplayBuffer": "buffers.replay_buffers",
    "PrioritizedReplayBuffer": "buffers.replay_buffers",
    "TensorDictPrioritizedReplayBuffer": "buffers.replay_buffers",
    "ReplayBufferEnsemble": "buffers.ensemble",
    "HERReplayBuffer": "buffers.her",
    "TensorMap": "buffers.maps.tensordict_map",
    "TensorDictMap": "buffers.maps.tensordict_map",
    "QueryModule": "buffers.maps.query_module",
    "HashToInt": "buffers.maps.query_module",
    "SipHash": "buffers.maps.hashing",
    "RandomProjectionHash": "buffers.maps.hashing",
    "BinaryToDecimal": "buffers.maps.hashing",
    "Tree": "buffers.maps.forest",
    "MCTSForest": "buffers.maps.forest",
    "HindsightStrategy": "buffers.her",
    "Trajectory": "buffers.trajectories",
    "traj": "buffers.trajectories",
    "iter_trajectories": "buffers.trajectories",
    "filter_trajectories": "buffers.trajectories",
    "StorageEnsemble": "buffers.ensemble_parts",
    "SamplerEnsemble": "buffers.ensemble_parts",
    "WriterEnsemble": "buffers.ensemble_parts",
    "Mixture": "buffers.mixture",
    "OfflineOnlineBuffer": "buffers.offline_online",
    "compute_feature_stats": "buffers.feature_stats",
    "ConditionalUpdateResult": "buffers.generations",
    # storages
    "Storage": "buffers.storages",
    "ListStorage": "buffers.storages",
    "TensorStorage": "buffers.tensor_storages",
    "LazyTensorStorage": "buffers.tensor_storages",
    "LazyMemmapStorage": "buffers.memmap_storage",
    "DatasetStorage": "build.storage",
    "LazyStackStorage": "buffers.stack_storage",
    "StorageCheckpointerBase": "buffers.checkpointers",
    "TensorStorageCheckpointer": "buffers.checkpointers",
    "FlatStorageCheckpointer": "buffers.checkpointers",
    "NestedStorageCheckpointer": "buffers.checkpointers",
    "H5StorageCheckpointer": "buffers.checkpointers",
    "ListStorageCheckpointer": "buffers.checkpointers",
    "StorageEnsembleCheckpointer": "buffers.checkpointers",
    "TED2Flat": "buffers.ted_flat",
    "Flat2TED": "buffers.ted_flat",
    # samplers
    "Sampler": "buffers.samplers.base",
    "RandomSampler": "buffers.samplers.random",
    "SamplerWithoutReplacement": "buffers.samplers.random",
    "PrioritizedSampler": "buffers.samplers.prioritized",
    "SliceSampler": "buffers.samplers.slice",
    "SliceSamplerWithoutReplacement": "buffers.samplers.slice",
    "PrioritizedSliceSampler": "buffers.samplers.prioritized",
    "WindowSampler": "buffers.samplers.window",
    "GoalSampler": "buffers.samplers.goal",
    "NStepReturnSampler": "buffers.samplers.n_step",
    "PromptGroupSampler": "buffers.samplers.prompt_group",
    "StalenessAwareSampler": "buffers.samplers.staleness",
    "SampleUnit": "buffers.samplers.sample_units",
    "Transition": "buffers.samplers.sample_units",
    "Sequence": "buffers.samplers.sample_units",
    # writers
    "Writer": "buffers.writers",
    "RoundRobinWriter": "buffers.writers",
    "ImmutableDatasetWriter": "buffers.writers",
    "TensorDictRoundRobinWriter": "buffers.tensordict_writers",
    "TensorDictMaxValueWriter": "buffers.tensordict_writers",
    # transforms
    "Transform": "buffers.transforms",
    "Compose": "buffers.transforms",
    "Rename": "buffers.transforms",
    "Select": "buffers.transforms",
    "Exclude": "buffers.transforms",
    "DoubleToFloat": "buffers.transforms",
    "MultiStep": "buffers.multi_step",
    "ToTensorImage": "buffers.image_transforms",
    "Resize": "buffers.image_transforms",
    "GrayScale": "buffers.image_transforms",
    "UnsqueezeTransform": "buffers.shape_transforms",
    "SqueezeTransform": "buffers.shape_transforms",
    "FrameStack": "buffers.frame_stack",
    "FullStackSampler": "buffers.samplers.frame_stack",
    "EpisodeIndex": "buffers.episode_index",
    "find_start_stop_traj": "buffers.trajectory_bounds",
    "ReturnToGo": "buffers.returns",
    # interop (docs/guide/interop.md)
    "BufferDataset": "interop.torch_data",
    "SampledBatches": "interop.torch_data",
    "EpisodeShardSampler": "interop.torch_data",
    "tensordict_collate": "buffers.pytorch_datasets",
    "ReplayBufferDataset": "buffers.pytorch_datasets",
    "StorageDataset": "buffers.pytorch_datasets",
    "to_torchrl": "interop.torchrl",
    "RayReplayBuffer": "interop.ray",
    "RemoteTensorDictReplayBuffer": "interop.torch_rpc",
    # errors
    "HubError": "errors",
    "UnknownDataset": "errors",
    "UnknownLoader": "errors",
    "MissingDependency": "errors",
    "ChecksumMismatch": "errors",
    "DownloadError": "errors",
    "UploadError": "errors",
    "LoaderError": "errors",
    "CacheError": "errors",
    "TEDError": "errors",
    "InvalidParameter": "errors",
    "InvalidArgument": "errors",
    "UnknownParameter": "errors",
    "WrongDataType": "errors",
    "StorageExists": "errors",
    "CorruptFile": "errors",
    "CatalogueError": "errors",
    "PluginError": "errors",
    "ReadOnlyError": "errors",
    "NotShareable": "errors",
    "PreprocessError": "errors",
    "UncachedPreprocessWarning": "fingerprint",
}

__all__ = [*sorted(_EXPORTS), "__version__"]  # noqa: PLE0604 - the lazy-export table lists the names


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'datasets_hub' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module_name}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
