"""The keywords of TorchRL's dataset classes, and what to write here instead (docs/guide/porting.md).

``D4RLExperienceReplay(..., split_trajs=True, from_env=False)`` ported as
``load("d4rl/...", split_trajs=True)`` would reach the loader as dataset parameters and be refused
as "unknown parameter". A loader refusing one of these keywords says what it means here instead
and points at its row of the porting table (:func:`refuse_torchrl_keywords`); a test keeps this
table and the docs page's rows in step.
"""

from __future__ import annotations

from collections.abc import Iterable

from datasets_hub.errors import InvalidParameter

PAGE = "docs/guide/porting.md"

#: keyword -> (the TorchRL classes that take it, what to write here instead)
KEYWORDS: dict[str, tuple[str, str]] = {
    "split_trajs": (
        "dataset classes",
        (
            "samples are flat [B] TED rows; for trajectories use sampler=SliceSampler(slice_len=...) "
            "(contiguous sub-trajectories) or whole episodes with rb.episodes (ep.data() for one)"
        ),
    ),
    "from_env": (
        "D4RLExperienceReplay",
        (
            "not needed: the d4rl loader reads D4RL's HDF5 files itself (no d4rl or gym install); timeouts "
            "become truncated and terminals terminated"
        ),
    ),
    "direct_download": (
        "D4RLExperienceReplay",
        ("always the case: files are fetched from the catalogue's URLs (a mirror: DATASETS_HUB_ENDPOINT_D4RL)"),
    ),
    "use_truncated_as_done": (
        "D4RLExperienceReplay",
        "always the case: done = terminated | truncated (TED); bootstrap with ('next', 'terminated')",
    ),
    "terminate_on_end": (
        "D4RLExperienceReplay",
        (
            "episode ends are upstream's flags: time limits are truncated, true ends terminated, never "
            "invented; the card's notes.episode_ends counts each kind"
        ),
    ),
    "load_from_local_minari": (
        "MinariExperienceReplay",
        "not needed: a dataset already in the local Minari store is read from it, else downloaded into it",
    ),
    "root": (
        "dataset classes",
        (
            "the cache root is the DATASETS_HUB_CACHE environment variable (only lerobot/* ids take root=: a "
            "local LeRobot folder)"
        ),
    ),
    "writer": (
        "dataset classes",
        (
            "loaded datasets are read-only (ImmutableDatasetWriter); for a writable copy build a "
            "TensorDictReplayBuffer(storage=LazyMemmapStorage(len(rb))) and extend it with rb[:]"
        ),
    ),
    "collate_fn": (
        "dataset classes",
        "pass transform= (it runs on every sampled batch), or BufferDataset with a DataLoader collate_fn",
    ),
    "pin_memory": (
        "dataset classes",
        ("device='cuda' keeps the build in GPU memory and samples there; or transform=lambda td: td.pin_memory()"),
    ),
    "shuffle": (
        "OpenXExperienceReplay",
        "sampler=SamplerWithoutReplacement() (epochs) or the default RandomSampler()",
    ),
    "streaming": (
        "OpenXExperienceReplay",
        (
            "a published build samples remotely: load('hf://datasets/<org>/<repo>', resident='lazy'); openx/*"
            " ids are converted once into the cache"
        ),
    ),
    "pad": (
        "OpenXExperienceReplay",
        (
            "SliceSampler(slice_len=..., strict_length=False) keeps short episodes; WindowSampler pads with "
            "<key>_is_pad masks"
        ),
    ),
    "strict_length": (
        "OpenXExperienceReplay, LeRobotExperienceReplay",
        "sampler=SliceSampler(..., strict_length=...)",
    ),
    "strict_len": (
        "AtariDQNExperienceReplay",
        "sampler=SliceSampler(..., strict_length=...)",
    ),
    "num_slices": (
        "OpenX, AtariDQN, LeRobot classes",
        "sampler=SliceSampler(num_slices=...)",
    ),
    "slice_len": (
        "OpenX, AtariDQN, LeRobot classes",
        "sampler=SliceSampler(slice_len=...)",
    ),
    "replacement": (
        "OpenXExperienceReplay, AtariDQNExperienceReplay",
        "sampler=SamplerWithoutReplacement()",
    ),
    "num_procs": (
        "AtariDQNExperienceReplay",
        "not needed: a build is converted once, then opened memory-mapped in milliseconds",
    ),
    "mp_start_method": (
        "AtariDQNExperienceReplay",
        "not needed (nothing is converted in worker processes you start)",
    ),
    "totensor": (
        "VD4RLExperienceReplay",
        ("images stay uint8 as upstream stores them; scale in a transform= (e.g. td['pixels'].float() / 255)"),
    ),
    "image_size": (
        "VD4RLExperienceReplay",
        ("only lerobot/* ids take image_size= (frames resized at build time); elsewhere resize in a transform="),
    ),
    "num_workers": (
        "VD4RLExperienceReplay",
        ("only lerobot/* ids take num_workers= (video decoding); sampling workers: BufferDataset with a DataLoader"),
    ),
    "key_map": (
        "LeRobotExperienceReplay",
        "transform=Rename(in_keys=[...], out_keys=[...]) renames keys in samples",
    ),
    "decode_video": (
        "LeRobotExperienceReplay",
        (
            "not needed: lerobot/* builds decode the video once, at build time, into frames (raw uint8, or "
            "one JPEG/PNG per frame decoded when sampled: frames=)"
        ),
    ),
    "rehydrate": (
        "LeRobotExperienceReplay",
        ("not needed: every sample has ('next', 'observation', ...) (observations are stored once, read twice)"),
    ),
}


def anchor(keyword: str) -> str:
    """The id of ``keyword``'s row in the porting page."""
    return f"kw-{keyword}"


def refuse_torchrl_keywords(dataset_id: str, loader: str, unknown: Iterable[str]) -> None:
    """Raise :class:`InvalidParameter` for the first of ``unknown`` (parameters the loader does not
    take) that is a keyword of TorchRL's dataset classes: what it means here and where the table is."""
    for key in sorted(unknown):
        if key in KEYWORDS:
            classes, instead = KEYWORDS[key]
            raise InvalidParameter(
                f"{dataset_id}: {key!r} is a keyword of TorchRL's {classes}, not a parameter of the {loader} loader. "
                f"Here: {instead} (porting table: {PAGE}#{anchor(key)})"
            )
