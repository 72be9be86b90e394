"""Load-by-name: the functions a training script calls (docs/reference/hub.md).

This module holds one concept: the hub's public functions (load, download, info, mixture, offline_online).

``load`` finds the build for (id, params) in the cache — opening it costs milliseconds and no
network — or downloads the upstream files, converts them once, and publishes the build atomically.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from datasets_hub.build.identity import chosen_build_path
from datasets_hub.build.pipeline import build, build_path
from datasets_hub.cache.layout import dir_size, raw_file_path, read_manifest
from datasets_hub.catalogue import list_ids, resolve
from datasets_hub.dataset_info import DatasetInfo
from datasets_hub.env import connections_refused
from datasets_hub.errors import DownloadError, HubError, InvalidParameter, UnknownParameter
from datasets_hub.loader import DatasetSpec, Loader, Resource
from datasets_hub.plugins import check_requirements, get_loader
from datasets_hub.redact import redact_url


def raw_path(loader: Loader, resource: Resource) -> Path:
    """Where ``resource`` of ``loader`` lives in the raw cache (keyed by the source's identity)."""
    from datasets_hub.downloads.fetch import source_key

    return raw_file_path(loader.name, resource.name, source_key(resource))


def fetch_sources(spec: DatasetSpec, loader: Loader) -> tuple[dict[str, Path], list[dict[str, Any]]]:
    """Download (or find, verified) every resource of ``spec``: ``({name: path}, provenance records)``."""
    files: dict[str, Path] = {}
    sources: list[dict[str, Any]] = []
    for resource in loader.resources(spec):
        from datasets_hub.downloads.fetch import (  # requests & co. load only when something is fetched
            fetch,
            recorded_sha256,
            source_key,
        )

        if resource.in_place:  # the user's file, read where it is (datasets_hub/downloads/in_place.py)
            from datasets_hub.downloads.in_place import identified, local_path

            local = identified(resource)
            files[local.name] = local_path(local)
            sources.append(
                {
                    "name": local.name,
                    "url": redact_url(local.urls[0]),
                    "key": source_key(local),
                    "sha256": local.sha256,
                    "bytes": files[local.name].stat().st_size,
                    "in_place": True,
                }
            )
            continue
        dest = raw_path(loader, resource)
        fetch(resource, dest, loader=loader.name)
        files[resource.name] = dest
        sources.append(
            {
                "name": resource.name,
                "url": redact_url(resource.urls[0]),
                "key": source_key(resource),
                "sha256": resource.sha256 or recorded_sha256(dest),
                "bytes": dest.stat().st_size,
            }
        )
    return files, sources


def _frame_codec(spec: Any, loader: Any, frames: str | None, frame_quality: int | None) -> Any:
    """The frame codec of a build (``frames=None``: by the loader's estimate of the decoded frame bytes)."""
    from datasets_hub.build.frames import resolve_frames

    estimate = loader.frame_bytes(spec) if frames in (None, "auto") else None
    return resolve_frames(frames, frame_quality, estimate, where=f"load({spec.id!r})", above_limit=loader.auto_frames)


def _ensure_build(
    dataset_id: str,
    *,
    force: bool,
    allow_download: bool,
    params: dict[str, Any],
    frames: str | None = None,
    frame_quality: int | None = None,
) -> Path:
    spec = resolve(dataset_id, **params)
    loader = get_loader(spec.loader)
    loader.check_params(spec)
    if spec.resources:  # an entry's own files are fetched, or refused by name: never silently replaced
        loader.check_catalogue_resources(spec, loader.resources(spec))
    codec = _frame_codec(spec, loader, frames, frame_quality)
    path = chosen_build_path(spec, loader, codec, frames, frame_quality)
    if not force and read_manifest(path) is not None:
        return path
    if path != build_path(spec, loader, codec):  # force=True on the raw build the default choice found: rebuild it
        codec = _frame_codec(spec, loader, "raw", None)
    if not allow_download:
        raise DownloadError(
            f"{dataset_id!r} is not in the cache ({path.parent}) and download=False; call "
            f"datasets_hub.download({dataset_id!r}) or load with download=True"
        )
    check_requirements(loader)
    files, sources = fetch_sources(spec, loader)
    return build(spec, loader, files, sources, force=force, frames=codec)


def download(
    dataset_id: str, *, force: bool = False, frames: str | None = None, frame_quality: int | None = None, **params: Any
) -> Path:
    """Fetch and convert ``dataset_id`` into the cache; return the build directory.

    ``force=True`` rebuilds even when a build exists (raw files are re-verified, not re-fetched).
    ``frames``/``frame_quality``: how camera frames are stored, as for :func:`load`.
    """
    from datasets_hub.dataset_info import recorded_sample_keys

    path = _ensure_build(
        dataset_id, force=force, allow_download=True, params=params, frames=frames, frame_quality=frame_quality
    )
    manifest = read_manifest(path)
    if manifest is not None and recorded_sample_keys(path, manifest) is None:
        _recorded_sample_keys(path, manifest)  # one row read now: `datasets-hub info` of it then needs no torch
    return path


def _open_storage(
    dataset_id: str,
    *,
    download: bool,
    resident: str,
    remote: dict[str, Any],
    params: dict[str, Any],
    in_memory: bool = False,
    frames: str | None = None,
    frame_quality: int | None = None,
    decode_device: Any = None,
) -> Any:
    """The read-only storage ``load`` wraps: a local build of a catalogue id, or a published build by URL."""
    if isinstance(dataset_id, str) and "://" in dataset_id:  # a published build's URL, never a catalogue id
        if in_memory:
            raise InvalidParameter(
                "in_memory=True applies to builds loaded by id; a published build loaded by URL is read through "
                "its local chunk cache (resident='full' fetches all of it)"
            )
        if decode_device is not None:
            raise InvalidParameter(
                "decode_device= applies to builds loaded by id; a published build's frames are decoded on the host"
            )
        if frames is not None or frame_quality is not None:
            raise InvalidParameter(
                "a published build is loaded as it was built: its frames are stored as its manifest says "
                "(frames= and frame_quality= choose how a local build stores them)"
            )
        if params:
            raise InvalidParameter(
                f"a published build is loaded as it was built; loader params {sorted(params)} cannot change it "
                "(build with them locally and export that build instead)"
            )
        from datasets_hub.remote.open_url import open_remote

        return open_remote(dataset_id, resident=resident, **remote)
    if resident != "full" or any(v is not None for k, v in remote.items() if k != "pool_refresh_s"):
        raise InvalidParameter(
            "resident=, max_bytes= and pool_episodes= apply to published builds loaded by URL "
            "(hf://, https://, s3://, file://), not to catalogue ids"
        )
    from datasets_hub.build.storage import DatasetStorage

    return DatasetStorage(
        _ensure_build(
            dataset_id,
            force=False,
            allow_download=download,
            params=params,
            frames=frames,
            frame_quality=frame_quality,
        ),
        in_memory=in_memory,
        decode_device=decode_device,
    )


# Checks of load()'s own arguments, made before anything is opened or built.
#
# load(id, **params) passes unknown keywords to the loader as dataset parameters, where a typo of one of
# load's keywords (batchsize=256) or a sampler setting (slice_len=32) would either be rejected as an unknown
# *loader* parameter or, by a loader that accepts anything, select a new build. So a keyword that is not one
# of the catalogue entry's own parameters and looks like one of load's is refused with the right spelling.

# sampler settings people pass to load() directly, and what to write instead
_SAMPLER_SETTINGS = {
    "slice_len": "sampler=SliceSampler(slice_len={v})",
    "slice_length": "sampler=SliceSampler(slice_len={v})",
    "seq_len": "sampler=SliceSampler(slice_len={v})",
    "sequence_length": "sampler=SliceSampler(slice_len={v})",
    "num_slices": "sampler=SliceSampler(num_slices={v})",
    "strict_length": "sampler=SliceSampler(..., strict_length={v})",
    "shuffle": "sampler=SamplerWithoutReplacement() (epochs without repeats) or the default RandomSampler()",
    "seed": "generator=torch.Generator().manual_seed({v})",
    "replacement": "sampler=SamplerWithoutReplacement()",
}


def load_keywords() -> tuple[str, ...]:
    """``load()``'s own keywords, read from its signature (one definition: a new keyword is known here at once)."""
    return tuple(
        name for name, p in inspect.signature(load).parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
    )


def check_params_are_not_load_keywords(dataset_id: str, params: dict[str, Any], known: Iterable[str]) -> None:
    """Refuse a parameter that is not one of the dataset's but looks like a ``load`` keyword.

    ``known``: the catalogue entry's parameters. A sampler setting (``slice_len``) is refused whatever
    the loader says (a loader that accepts anything would otherwise select a new build with it). A
    near-miss of a ``load`` keyword (``batchsize``) is refused only when the loader does not accept it
    either: ``episodes=`` is a LeRobot parameter, not a typo of ``pool_episodes=``.
    """
    known = set(known)
    for key, value in params.items():
        if key in known:
            continue
        if key in _SAMPLER_SETTINGS:
            raise InvalidParameter(
                f"load({dataset_id!r}, {key}={value!r}): {key!r} is a sampler setting, not a parameter of the dataset. "
                f"Write {_SAMPLER_SETTINGS[key].format(v=value)!s} (from datasets_hub import SliceSampler, ...)"
            )
        from datasets_hub.torchrl_porting import KEYWORDS as TORCHRL_KEYWORDS

        close = difflib.get_close_matches(key, load_keywords(), n=1, cutoff=0.75)
        # pin_memory is TorchRL's keyword, not a typo of in_memory: the loader refers to the porting table
        if close and key not in TORCHRL_KEYWORDS and not _loader_accepts(dataset_id, key):
            raise InvalidParameter(
                f"load({dataset_id!r}, {key}={value!r}): unknown keyword {key!r}; did you mean {close[0]}={value!r}? "
                "(keywords that are not load()'s own go to the loader as dataset parameters)"
            )


def _loader_accepts(dataset_id: str, key: str) -> bool:
    """Whether the loader of ``dataset_id`` takes a parameter named ``key``: its ``check_params`` does not
    raise :class:`UnknownParameter` naming it (a refused *value* is not a refusal of the name)."""
    spec = resolve(dataset_id)
    loader = get_loader(spec.loader)
    probe = DatasetSpec(id=spec.id, loader=spec.loader, params={**spec.params, key: None}, resources=spec.resources)
    try:
        loader.check_params(probe)
    except UnknownParameter as exc:
        return key not in exc.names
    except (HubError, TypeError, ValueError):  # the name is known; None is just not a value for it
        return True
    return True


def check_sampler(sampler: Any, batch_size: int | None) -> None:
    """A sampler instance (not a class), and a batch size it can split (``check_batch_size`` hook)."""
    if sampler is None:
        return
    if isinstance(sampler, type):
        raise InvalidParameter(
            f"sampler={sampler.__name__} is a class; pass an instance, e.g. sampler={sampler.__name__}()"
            + (" or sampler=SliceSampler(slice_len=32)" if "Slice" in sampler.__name__ else "")
        )
    if not callable(getattr(sampler, "sample", None)):
        raise InvalidParameter(f"sampler must be a datasets_hub sampler instance, got {type(sampler).__name__}")
    check = getattr(sampler, "check_batch_size", None)
    if batch_size is not None and callable(check):
        try:
            check(batch_size)
        except ValueError as exc:
            raise InvalidParameter(
                f"load(batch_size={batch_size}, sampler={type(sampler).__name__}(...)): {exc}"
            ) from None


def load(
    dataset_id: str,
    *,
    batch_size: int | None = None,
    sampler: Any = None,
    transform: Any = None,
    prefetch: int = 0,
    download: bool = True,
    generator: torch.Generator | None = None,
    preprocess: Any = None,
    preprocess_by: str | None = None,
    resident: str = "full",
    max_bytes: int | None = None,
    pool_episodes: int | None = None,
    pool_refresh_s: float | None = 1.0,
    device: str | torch.device | None = None,
    cuda_graphs: bool = False,
    in_memory: bool = False,
    frames: str | None = None,
    frame_quality: int | None = None,
    decode_device: str | torch.device | None = None,
    **params: Any,
):
    """A read-only ``TensorDictReplayBuffer`` over the cached build of ``dataset_id``.

    ``params`` override the catalogue's parameters (and so select a different build). The buffer
    samples uniformly unless ``sampler`` is given; ``generator`` makes sampling reproducible (with
    ``prefetch``, only ``generator`` does: without it the prefetch thread draws from torch's global
    random state, shared with the caller's own draws, as in TorchRL).
    ``preprocess`` (a function or a list of functions, applied in order) maps the stored transitions
    once, cached by fingerprint (see :mod:`datasets_hub.preprocess.pipeline`); ``transform`` then runs on samples.
    ``preprocess_by="episode"`` hands those functions whole episodes (default: what each function
    declares in its ``by`` attribute, else ``"row"``).

    ``dataset_id`` may also be the URL of a published build (``hf://datasets/<org>/<repo>[@rev]``,
    ``https://…``, ``s3://…``, ``file:///…``, see :mod:`datasets_hub.remote.open_url`): ``resident="full"``
    fetches all of it in the background, ``resident="lazy"`` only what batches touch (``max_bytes``
    bounds it); sampling is uniform over the whole dataset either way. ``resident="pool"`` keeps
    ``pool_episodes`` whole episodes resident, samples only from them and replaces one every
    ``pool_refresh_s`` seconds: biased within a window of time, see :mod:`datasets_hub.remote.pool`
    (its default sampler draws uniform rows of the pool; samplers that draw rows over the whole
    dataset are refused). Pool draws are seeded from ``generator`` when it is given.

    ``device="cuda"`` (or ``"cuda:1"``, ``"cpu"``) copies the build into that device's memory and
    samples there with the device twin of ``sampler`` (see :mod:`datasets_hub.buffers.device`):
    ``sample()`` never synchronises with the host. ``generator`` must then be on that device. A copy
    that does not fit, or a sampler without a device twin, is refused with the reason.
    ``cuda_graphs=True`` (with ``device="cuda"``) replays each batch size's draw as a recorded CUDA
    graph: the same batches for a fraction of the host time per call (uniform, slices with
    replacement and goal samplers; see :mod:`datasets_hub.buffers.device.graphs`).

    ``in_memory=True`` copies the local build into anonymous memory (transparent huge pages where
    the OS offers them) instead of sampling from its memory-mapped files: the same values under the
    same seed, fewer cycles per batch. It refuses with ``InvalidParameter`` naming the size needed
    and the memory available when the copy would not fit (see ``docs/guide/sampling.md``).

    ``frames`` chooses how camera frames (uint8 image keys) are stored (see ``docs/guide/compressed-frames.md``):
    ``"raw"`` (decoded once, fastest to sample), ``"jpeg"`` (each frame on its own, ``frame_quality``
    1..100, default 75), ``"h264"`` (each frame one intra h264 picture, a third of JPEG's bytes, 3x its
    decode time; ``frame_quality`` is x264's quantiser, 1..51, default 28) or ``"png"`` (exact); ``None`` stores them raw while the loader's estimate of their
    decoded size stays at or below ``datasets_hub.build.frames.RAW_LIMIT_BYTES`` (16 GiB), and above it as the
    loader's ``auto_frames`` (JPEG for camera footage, PNG for Atari, OGBench and Minari frames). The codec
    enters the build's fingerprint; compressed frames are decoded at sample time, only those sampled, in
    host threads, or with ``decode_device="cuda"`` by nvJPEG (torchvision, JPEG only) into that device's
    memory: the sampled frames then arrive on the device, the other leaves on the host.
    """
    steps = [] if preprocess is None else list(preprocess) if isinstance(preprocess, (list, tuple)) else [preprocess]
    if not all(callable(fn) for fn in steps):
        raise InvalidParameter(f"preprocess= takes a function or a list of functions, got {preprocess!r}")
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1):
        raise InvalidParameter(f"batch_size must be a positive integer or None, got {batch_size!r}")
    if not isinstance(prefetch, int) or prefetch < 0:
        raise InvalidParameter(f"prefetch must be a non-negative integer, got {prefetch!r}")
    check_sampler(sampler, batch_size)
    from datasets_hub.buffers.samplers.base import check_generator

    check_generator(generator)  # before any download or build, not at the first sample()
    if device is not None:  # before any download or build: no CUDA is an error now, not after an hour
        from datasets_hub.buffers.device.memory import as_device

        device = as_device(device)
    if params and not (isinstance(dataset_id, str) and "://" in dataset_id):
        check_params_are_not_load_keywords(dataset_id, params, resolve(dataset_id).params)
    remote = {"max_bytes": max_bytes, "pool_episodes": pool_episodes, "pool_refresh_s": pool_refresh_s}
    if resident == "pool":
        from datasets_hub.remote.pool import PoolSampler, check_pool_sampler

        if device is not None:
            raise InvalidParameter(
                "device= copies the whole build into device memory, but resident='pool' keeps only "
                "pool_episodes episodes: load the URL with resident='full' (or 'lazy') to use device="
            )
        check_pool_sampler(sampler)
        sampler = sampler if sampler is not None else PoolSampler()
        remote["pool_seed"] = generator.initial_seed() if generator is not None else None
    if not isinstance(in_memory, bool):
        raise InvalidParameter(f"in_memory must be True or False, got {in_memory!r}")
    if cuda_graphs and device is None:
        raise InvalidParameter("cuda_graphs=True replays draws on a CUDA device: pass device='cuda' with it")
    if decode_device is not None and device is not None:
        raise InvalidParameter(
            "device= copies the whole build into device memory, decoded; decode_device= decodes the sampled frames "
            "of a compressed build there: pass one of them"
        )
    if in_memory and device is not None:
        raise InvalidParameter(
            "in_memory=True and device= both copy the build: device= already holds it in that device's memory; "
            "pass one of them"
        )
    storage = _open_storage(
        dataset_id,
        download=download,
        resident=resident,
        remote=remote,
        params=params,
        in_memory=in_memory,
        frames=frames,
        frame_quality=frame_quality,
        decode_device=decode_device,
    )
    from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
    from datasets_hub.buffers.samplers.random import RandomSampler
    from datasets_hub.buffers.writers import ImmutableDatasetWriter

    rb = TensorDictReplayBuffer(
        storage=storage,
        sampler=sampler if sampler is not None else RandomSampler(),
        writer=ImmutableDatasetWriter(),
        batch_size=batch_size,
        transform=None if steps else transform,
        prefetch=prefetch,
        generator=generator,
    )
    if steps:
        from datasets_hub.preprocess.pipeline import preprocess_chain

        rb = preprocess_chain(rb, steps, transform=transform, by=preprocess_by)
    if device is not None:
        from datasets_hub.buffers.device import to_device

        return to_device(rb, device, generator=generator, transform=transform, cuda_graphs=cuda_graphs)
    return rb


def info(dataset_id: str, *, frames: str | None = None, frame_quality: int | None = None, **params: Any) -> DatasetInfo:
    """The card of ``dataset_id``: catalogue facts, plus counts, schema and statistics once built
    (``frames``/``frame_quality`` select the build as for :func:`load`). It opens no connection: where sizing
    the frames would need one (a Minari dataset not in the local store), it describes the build made without
    that estimate."""
    spec = resolve(dataset_id, **params)
    loader = get_loader(spec.loader)
    loader.check_params(spec)
    if spec.resources:
        loader.check_catalogue_resources(spec, loader.resources(spec))
    with connections_refused():  # a card comes from local facts: no download to size the frames
        codec = _frame_codec(spec, loader, frames, frame_quality)
    path = chosen_build_path(spec, loader, codec, frames, frame_quality)
    manifest = read_manifest(path)
    raw = 0
    for resource in loader.resources(spec):
        candidate = raw_path(loader, resource)
        if candidate.exists():
            raw += candidate.stat().st_size
    return DatasetInfo.from_build(
        spec,
        [r.to_dict() for r in loader.resources(spec)],
        path,
        manifest,
        raw_bytes=raw,
        built_bytes=dir_size(path) if manifest is not None else 0,
        sample_keys=_recorded_sample_keys(path, manifest) if manifest is not None else {},
    )


def _recorded_sample_keys(path: Path, manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The build's sample keys, kept for cards made without torch (``datasets-hub info``)."""
    from datasets_hub.dataset_info import record_sample_keys

    keys = _sample_keys(path)
    record_sample_keys(path, manifest, keys)
    return keys


def _sample_keys(path: Path) -> dict[str, dict[str, Any]]:
    """Keys, dtypes and per-row shapes of one transition as ``load`` returns it (one row is read)."""
    from datasets_hub.build.storage import DatasetStorage

    storage = DatasetStorage(path, record_use=False)  # a look for the card, not a use
    if not len(storage):
        return {}
    row = storage.get(torch.zeros(1, dtype=torch.int64))
    out = {}
    for key in sorted(row.keys(include_nested=True, leaves_only=True), key=lambda k: (k,) if isinstance(k, str) else k):
        value = row.get(key)
        name = key if isinstance(key, str) else "/".join(key)
        out[name] = {"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape[1:])}
    return out


def list_datasets(loader: str | None = None, search: str | None = None) -> list[str]:
    """Known dataset ids, sorted; ``loader`` keeps one loader's, ``search`` filters by substring."""
    return list_ids(loader=loader, search=search)


def _build_stats(rb: Any) -> dict[str, Any] | None:
    """The feature statistics a buffer's build recorded, if it is over a build that did."""
    manifest = getattr(getattr(rb, "storage", None), "manifest", None)
    features = (manifest or {}).get("stats", {}).get("features") if isinstance(manifest, dict) else None
    return features if isinstance(features, dict) else None


def _build_id(rb: Any) -> str | None:
    manifest = getattr(getattr(rb, "storage", None), "manifest", None)
    return manifest.get("id") if isinstance(manifest, dict) else None


def mixture(
    datasets: Any,
    *,
    weights: Any = "size",
    temperature: float = 1.0,
    exact: bool = True,
    key_maps: Any = None,
    project: Any = None,
    normalize: Any = None,
    ids: bool = False,
    batch_size: int | None = None,
    sampler: Any = None,
    generator: torch.Generator | None = None,
    **load_kwargs: Any,
):
    """A :class:`~datasets_hub.buffers.mixture.Mixture` over ``datasets`` (ids, buffers, or both).

    Each id is loaded with ``load(id, sampler=..., **load_kwargs)``: ``sampler`` is one sampler (each
    dataset gets its own copy) or a list with one per dataset (e.g. windows whose offsets follow each
    dataset's frame rate); with ``generator``, each dataset gets a generator seeded from it, so the
    same seed gives the same batches. Buffers are used as they are. Statistics for ``normalize`` come
    from each build's manifest; a build made before they were recorded (or a buffer over other data)
    gets them computed once from its data. ``weights``, ``temperature``, ``exact``, ``key_maps``, ``project``,
    ``normalize``, ``ids`` and ``batch_size``: see the ``Mixture`` contract (docs/guide/mixtures.md).
    """
    import copy

    from datasets_hub.buffers.mixture import Mixture

    datasets = list(datasets)
    if isinstance(sampler, (list, tuple)):
        if len(sampler) != len(datasets):
            raise InvalidParameter(f"sampler has {len(sampler)} entries for {len(datasets)} datasets")
        samplers = list(sampler)
    else:
        samplers = [copy.deepcopy(sampler) for _ in datasets]
    seeds = torch.randint(2**62, (len(datasets),), generator=generator).tolist() if generator is not None else None
    buffers, names = [], []
    for i, source in enumerate(datasets):
        if isinstance(source, str):
            member_gen = None if seeds is None else torch.Generator().manual_seed(int(seeds[i]))
            buffers.append(load(source, sampler=samplers[i], generator=member_gen, **load_kwargs))
            names.append(source)
        else:
            if samplers[i] is not None and isinstance(sampler, (list, tuple)):
                raise InvalidParameter(f"dataset {i} is a buffer: it keeps its own sampler (give None for it)")
            buffers.append(source)
            names.append(_build_id(source) or f"dataset{i}")
    return Mixture(
        buffers,
        names=names,
        weights=weights,
        temperature=temperature,
        exact=exact,
        key_maps=key_maps,
        project=project,
        normalize=normalize,
        stats=[_build_stats(rb) for rb in buffers],
        ids=ids,
        batch_size=batch_size,
        generator=generator,
    )


def offline_online(
    dataset: Any,
    *,
    capacity: int,
    ratio: Any = 0.5,
    scratch_dir: str | Path | None = None,
    online_sampler: Any = None,
    batch_size: int | None = None,
    generator: torch.Generator | None = None,
    **load_kwargs: Any,
):
    """An :class:`~datasets_hub.buffers.offline_online.OfflineOnlineBuffer`: the build of ``dataset`` (an
    id, loaded with ``load(id, **load_kwargs)``, or a buffer) as its read-only offline part, and a
    writable memory-mapped online part of ``capacity`` items under ``scratch_dir``; ``ratio`` (a number
    or a function of the step) is the offline share of each batch. Seeding opens the build: nothing is
    copied, whatever its size."""
    from datasets_hub.buffers.offline_online import OfflineOnlineBuffer

    offline = load(dataset, generator=generator, **load_kwargs) if isinstance(dataset, str) else dataset
    return OfflineOnlineBuffer(
        offline,
        capacity=capacity,
        ratio=ratio,
        scratch_dir=scratch_dir,
        online_sampler=online_sampler,
        batch_size=batch_size,
        generator=None if generator is None else torch.Generator().manual_seed(generator.initial_seed() + 1),
    )
