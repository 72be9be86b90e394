"""The build ``load(id, **params)`` uses, named without importing torch (or, once recorded, the loader).

``datasets-hub list`` marks an id "cached" when the build of the catalogue's params is in the cache, and
``info``/``verify``/``rm`` (with or without ``--param``) look for the build of their params; its folder name is a
fingerprint of the loader's resources and ``format_version``, which only the loader can compute. It is
computed once per id, params, frame choice, loader code version
(:func:`datasets_hub.plugin_facts.code_stamp`), hub version and mirror setting, and recorded in
``<cache>/catalogue/plugins/<loader>-builds.json``. Computing it imports the id's loader module alone,
which imports no torch (loader modules import torch inside the functions that convert). Naming a build opens
no connection: where the loader's frame estimate would need the network (a Minari dataset not in the local
store), the name is that of a build without the estimate, and it is not recorded.
"""

from __future__ import annotations

import json
import os
from typing import Any

from datasets_hub import env


def _resource_env() -> dict[str, str]:
    """The variables that can change a loader's resources (mirrors), hence a build fingerprint."""
    return {k: v for k, v in os.environ.items() if k.startswith("DATASETS_HUB_ENDPOINT") or k == "HF_ENDPOINT"}


_MAX_RECORDED_BUILDS = 2000


def catalogue_build_name(dataset_id: str) -> str:
    """The fingerprint (build folder name) ``load(dataset_id)`` uses with the catalogue's params."""
    return catalogue_build_record(dataset_id)[0]


def catalogue_build_record(
    dataset_id: str,
    params: dict[str, Any] | None = None,
    *,
    frames: str | None = None,
    frame_quality: int | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """``(build folder name, resources)`` of ``dataset_id`` with ``params`` over the catalogue's: what
    ``load(dataset_id, frames=frames, frame_quality=frame_quality, **params)`` builds and what it fetches
    (the loader's ``resources(spec)`` as dicts).

    Computing them needs the loader (its resources, ``check_params`` and ``format_version``): they are
    computed once per id, params, frame choice, loader code, hub version and mirror setting, and recorded
    beside the plugin's facts. Params the loader refuses raise its error (and nothing is recorded).
    """
    from datasets_hub import __version__
    from datasets_hub.build.format import STORAGE_FORMAT_VERSION
    from datasets_hub.cache.layout import fingerprint
    from datasets_hub.catalogue import resolve
    from datasets_hub.files import write_json_atomic
    from datasets_hub.plugin_facts import code_stamp, record_folder
    from datasets_hub.redact import redact_value

    spec = resolve(dataset_id, **(params or {}))
    identity: dict[str, Any] = {
        "stamp": code_stamp(spec.loader),
        "hub": [__version__, STORAGE_FORMAT_VERSION],
        "id": spec.id,
        "params": spec.params,
        "metadata": spec.metadata,
        "resources": [r.to_dict() for r in spec.resources],
        "env": _resource_env(),
    }
    if frames is not None or frame_quality is not None:  # the default choice keeps the keys recorded before
        identity["frames"] = [frames, frame_quality]
    key = fingerprint(identity, length=32)
    path = record_folder() / f"{spec.loader}-builds.json"
    try:
        with open(path) as fh:
            recorded = json.load(fh)
    except (OSError, ValueError):
        recorded = {}
    if not isinstance(recorded, dict):
        recorded = {}
    entry = recorded.get(key)
    if isinstance(entry, dict) and isinstance(entry.get("build"), str) and isinstance(entry.get("resources"), list):
        return _present_build(dataset_id, entry), entry["resources"]
    from datasets_hub.build.frames import resolve_frames
    from datasets_hub.build.identity import build_path
    from datasets_hub.plugins import get_loader

    loader = get_loader(spec.loader)
    loader.check_params(spec)
    resources = loader.resources(spec)
    if spec.resources:  # as load() does: an entry's own files are fetched, or refused by name
        loader.check_catalogue_resources(spec, resources)
    # the frame codec load() picks: by default by the loader's estimate of the decoded frame bytes, from
    # local facts only (naming a build never downloads); an estimate that needed the network is not recorded
    with env.connections_refused() as refusals:
        estimate = loader.frame_bytes(spec) if frames in (None, "auto") else None
    codec = resolve_frames(frames, frame_quality, estimate, where=f"load({spec.id!r})", above_limit=loader.auto_frames)
    # stored redacted (no password or signature at rest): source_key() redacts the same way, so the raw file
    # paths derived from these records are the ones load() uses
    entry = {"build": build_path(spec, loader, codec).name, "resources": [redact_value(r.to_dict()) for r in resources]}
    if frames in (None, "auto") and frame_quality is None and codec.compressed:
        entry["exact_alternative"] = build_path(spec, loader, None).name  # see chosen_build_path
    if refusals:
        return _present_build(dataset_id, entry), entry["resources"]
    if len(recorded) >= _MAX_RECORDED_BUILDS:
        recorded = {}
    recorded[key] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, recorded, indent=None, sort_keys=False)
    except OSError:
        pass
    return _present_build(dataset_id, entry), entry["resources"]


def _present_build(dataset_id: str, entry: dict[str, Any]) -> str:
    """The recorded build's name, or its exact raw alternative when only that one is in the cache
    (:func:`datasets_hub.build.identity.present_build`), looked at on each call (the cache changes)."""
    from datasets_hub.build.identity import present_build
    from datasets_hub.cache.layout import dataset_dir

    alternative = entry.get("exact_alternative")
    return present_build(
        dataset_dir(dataset_id), str(entry["build"]), alternative if isinstance(alternative, str) else None
    )


def recorded_info(
    dataset_id: str,
    params: dict[str, Any] | None = None,
    *,
    frames: str | None = None,
    frame_quality: int | None = None,
) -> Any:
    """``datasets_hub.info(dataset_id, frames=, frame_quality=, **params)`` from recorded facts, without
    importing torch (nor the loader, once :func:`catalogue_build_record` has recorded its build); ``None``
    when a built card's sample keys are not recorded yet (then ``info`` itself answers, and records them
    for next time). A test checks it equals ``info``'s card."""
    from datasets_hub.cache.layout import dataset_dir, dir_size, raw_file_path, read_manifest
    from datasets_hub.catalogue import resolve
    from datasets_hub.dataset_info import DatasetInfo, recorded_sample_keys
    from datasets_hub.downloads.fetch import source_key
    from datasets_hub.loader import Resource

    spec = resolve(dataset_id, **(params or {}))
    name, resources = catalogue_build_record(dataset_id, params, frames=frames, frame_quality=frame_quality)
    path = dataset_dir(spec.id) / name
    manifest = read_manifest(path)
    sample_keys: dict[str, Any] = {}
    if manifest is not None:
        keys = recorded_sample_keys(path, manifest)
        if keys is None:
            return None
        sample_keys = keys
    raw = 0
    for entry in resources:
        resource = Resource.from_dict(entry)
        candidate = raw_file_path(spec.loader, resource.name, source_key(resource))
        if candidate.exists():
            raw += candidate.stat().st_size
    return DatasetInfo.from_build(
        spec,
        resources,
        path,
        manifest,
        raw_bytes=raw,
        built_bytes=dir_size(path) if manifest is not None else 0,
        sample_keys=sample_keys,
    )
