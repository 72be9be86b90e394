"""The build ``load(id)`` uses with the catalogue's params, named without importing its loader.

``datasets-hub list`` marks an id "cached" when the build of the catalogue's params is in the cache;
its folder name is a fingerprint of the loader's resources and ``format_version``, which only the
loader can compute. It is computed once per catalogue entry, loader code version
(:func:`datasets_hub.plugin_facts.code_stamp`), hub version and mirror setting, and recorded in
``<cache>/catalogue/plugins/<loader>-builds.json``.
"""

from __future__ import annotations

import json
import os


def _resource_env() -> dict[str, str]:
    """The variables that can change a loader's resources (mirrors), hence a build fingerprint."""
    return {k: v for k, v in os.environ.items() if k.startswith("DATASETS_HUB_ENDPOINT") or k == "HF_ENDPOINT"}


_MAX_RECORDED_BUILDS = 2000


def catalogue_build_name(dataset_id: str) -> str:
    """The fingerprint (build folder name) ``load(dataset_id)`` uses with the catalogue's params.

    Computing it needs the loader (its resources and ``format_version``): it is computed once per
    catalogue entry, loader code and mirror setting, and recorded beside the plugin's facts.
    """
    from datasets_hub import __version__
    from datasets_hub.build.format import STORAGE_FORMAT_VERSION
    from datasets_hub.cache.layout import fingerprint
    from datasets_hub.catalogue import resolve
    from datasets_hub.files import write_json_atomic
    from datasets_hub.plugin_facts import code_stamp, record_folder

    spec = resolve(dataset_id)
    key = fingerprint(
        {
            "stamp": code_stamp(spec.loader),
            "hub": [__version__, STORAGE_FORMAT_VERSION],
            "id": spec.id,
            "params": spec.params,
            "metadata": spec.metadata,
            "resources": [r.to_dict() for r in spec.resources],
            "env": _resource_env(),
        },
        length=32,
    )
    path = record_folder() / f"{spec.loader}-builds.json"
    try:
        with open(path) as fh:
            recorded = json.load(fh)
    except (OSError, ValueError):
        recorded = {}
    if not isinstance(recorded, dict):
        recorded = {}
    name = recorded.get(key)
    if isinstance(name, str):
        return name
    from datasets_hub.cache.maintenance import catalogue_build

    name = catalogue_build(dataset_id)[2].name
    if len(recorded) >= _MAX_RECORDED_BUILDS:
        recorded = {}
    recorded[key] = name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, recorded, indent=None, sort_keys=False)
    except OSError:
        pass
    return name
