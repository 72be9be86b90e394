"""Export a build as a Minari dataset folder (HDF5 backend), the one ``minari.load_dataset`` opens.

``export(rb, "<root>/<namespace>/<name>-v0", format="minari")`` writes::

    <root>/<namespace>/<name>-v0/data/main_data.hdf5   one group episode_<i> per episode
    <root>/<namespace>/<name>-v0/data/metadata.json    dataset_id, spaces, counts, minari_version

and ``MINARI_DATASETS_PATH=<root>`` makes ``minari.load_dataset("<namespace>/<name>-v0")`` read
it. The dataset id is the folder's path below ``<root>``: option ``dataset_id`` (default: the
folder's name, which must then look like ``<name>-v<N>``), and the folder must end with it.

**Mapping** (an episode of ``T`` steps):

- ``observations``: ``[T + 1, ...]``, the observation at every time and the final next
  observation (Minari's own convention). One observation key ``observation`` is a ``Box``; several
  keys are a ``Dict`` space whose entries are the keys (a leading ``observation`` level dropped:
  ``observation/a`` -> ``a``; ``pixels`` -> ``pixels``). A key whose next values the build stores
  per step cannot be held (Minari has one observation sequence): refused;
- ``actions``: ``action`` (``[T, ...]``; nested ``action/...`` keys -> a ``Dict``);
- ``rewards``, ``terminations``, ``truncations``: ``next/reward``, ``next/terminated``,
  ``next/truncated`` as ``[T]`` (the build's ``[T, 1]`` flattened);
- ``infos``: ``info/<a>/<b>`` -> ``infos/<a>/<b>``, ``[T, ...]`` (one row per step; Minari's
  recorders add a row for the reset, which a build does not have); any other per-step key
  ``k`` (``task``, ``next/success``) -> ``infos/<k>``;
- spaces: those on the build's card when it was loaded from Minari and they still describe the
  keys (shape and dtype of every entry), else ``Box`` spaces with the dtype's full range (the
  build holds no bounds; ``MultiBinary`` for bool);
- ``jpeg_encoding`` is false: images are stored raw, exactly.

A build without ``action`` or ``next/reward`` is refused (every Minari episode has them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from datasets_hub.buffers.nested_keys import Key
from datasets_hub.errors import InvalidParameter, MissingDependency
from datasets_hub.exporters.episodes import REWARD, TERMINATED, TRUNCATED, BuildEpisodes, Column, group_paths

OPTIONS = ("dataset_id", "author", "algorithm_name", "code_permalink")
#: the Minari dataset format these files follow (minari 0.5 reads 0.4.0 .. 0.5.x)
MINARI_VERSION = "0.5.0"
_ID_RE = re.compile(r"^(?:[-_\w]+/)*[-_\w]+-v\d+$")


@dataclass
class Plan:
    dataset_id: str
    observation_paths: dict[Key, tuple[str, ...]]  #: build key -> path under ``observations``
    action_paths: dict[Key, tuple[str, ...]]
    info_paths: dict[Key, tuple[str, ...]]
    observation_space: dict[str, Any]
    action_space: dict[str, Any]
    extra_metadata: dict[str, Any]


def _box(column: Column) -> dict[str, Any]:
    """A ``Box`` (``MultiBinary`` for bool) in minari's space serialization, over the dtype's range."""
    dtype, shape = column.dtype, list(column.shape)
    if dtype == np.bool_:
        return {"type": "MultiBinary", "n": shape or 1}
    if dtype.kind == "f":
        low, high = -np.inf, np.inf
    else:
        info = np.iinfo(dtype)
        low, high = int(info.min), int(info.max)
    size = int(np.prod(shape, dtype=np.int64))
    if shape:
        low_list: Any = np.full(size, low).reshape(shape).tolist()
        high_list: Any = np.full(size, high).reshape(shape).tolist()
    else:
        low_list, high_list = low, high
    return {"type": "Box", "dtype": str(dtype), "shape": shape, "low": low_list, "high": high_list}


def _space(paths: dict[Key, tuple[str, ...]], columns: dict[Key, Column]) -> dict[str, Any]:
    if list(paths.values()) == [()]:
        return _box(columns[next(iter(paths))])
    root: dict[str, Any] = {"type": "Dict", "subspaces": {}}
    for key, path in paths.items():
        node = root
        for part in path[:-1]:
            node = node["subspaces"].setdefault(part, {"type": "Dict", "subspaces": {}})
        node["subspaces"][path[-1]] = _box(columns[key])
    return root


def _layout(space: Any) -> Any:
    """What a serialized space says about the arrays it holds: ``{path: (shape, dtype)}``; ``None``
    for a space this exporter does not write (Tuple, Text, ...)."""
    if not isinstance(space, dict):
        return None
    kind = space.get("type")
    if kind == "Box":
        return {(): (tuple(space.get("shape") or ()), str(space.get("dtype")))}
    if kind == "Discrete":
        return {(): ((), "int64")}
    if kind == "Dict" and isinstance(space.get("subspaces"), dict):
        out: dict[tuple[str, ...], Any] = {}
        for name, sub in space["subspaces"].items():
            inner = _layout(sub)
            if inner is None:
                return None
            out.update({(name, *p): v for p, v in inner.items()})
        return out
    return None


def _card_space(card: Any, synthesized: dict[str, Any], paths: dict[Key, tuple[str, ...]], columns: dict[Key, Column]):
    """The card's space where it describes exactly these arrays (real bounds, Discrete), else ``synthesized``."""
    expected = {paths[k]: (columns[k].shape, str(columns[k].dtype)) for k in paths}
    return card if _layout(card) == expected else synthesized


def plan(episodes: BuildEpisodes, out: Path, options: dict[str, Any]) -> Plan:
    """Check the build, the folder and the options (see the module docstring); nothing is written."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InvalidParameter(f"format='minari' has no option {unknown[0]!r}; its options are {', '.join(OPTIONS)}")
    try:
        import h5py  # noqa: F401 - imported to check it is installed, before anything is written
    except ImportError as exc:
        raise MissingDependency("exporting to Minari needs h5py: pip install h5py") from exc
    dataset_id = options.get("dataset_id", out.name)
    if not isinstance(dataset_id, str) or not _ID_RE.match(dataset_id):
        raise InvalidParameter(
            f"the Minari dataset id {dataset_id!r} must look like '<namespace>/<name>-v<N>' (or '<name>-v<N>'); "
            "name the folder so (e.g. .../pendulum-random-v0) or pass options={'dataset_id': ...}"
        )
    if not out.absolute().as_posix().endswith("/" + dataset_id):
        raise InvalidParameter(
            f"minari.load_dataset({dataset_id!r}) reads <MINARI_DATASETS_PATH>/{dataset_id}; export to a folder "
            f"ending with {dataset_id!r}, not {out}"
        )
    actions = episodes.require_one_observation_per_step_with_action_and_reward(
        "Minari holds one observation sequence per episode", "every Minari episode has actions and rewards"
    )
    steps = set(episodes.step_keys)
    columns = {k: episodes.column(k) for k in (*episodes.observation_keys, *episodes.step_keys)}
    for key in (REWARD, TERMINATED, TRUNCATED):
        if columns[key].shape not in ((), (1,)):
            raise InvalidParameter(f"{'/'.join(key)} has shape {list(columns[key].shape)}; Minari stores one per step")
    observation_paths = group_paths(list(episodes.observation_keys), "observation", "Minari Dict space")
    action_paths = group_paths(actions, "action", "Minari Dict space")
    info_keys = sorted(k for k in steps if k[0] != "action" and k not in (REWARD, TERMINATED, TRUNCATED))
    info_paths = {k: k[1:] if k[0] == "info" and len(k) > 1 else k for k in info_keys}
    if len(set(info_paths.values())) != len(info_paths):
        raise InvalidParameter(f"two keys of {sorted('/'.join(k) for k in info_keys)} would be the same Minari info")
    card = (episodes.build.manifest.get("notes") or {}).get("minari") or {}
    metadata: dict[str, Any] = {n: options[n] for n in ("author", "algorithm_name", "code_permalink") if n in options}
    return Plan(
        dataset_id=dataset_id,
        observation_paths=observation_paths,
        action_paths=action_paths,
        info_paths=info_paths,
        observation_space=_card_space(
            card.get("observation_space"), _space(observation_paths, columns), observation_paths, columns
        ),
        action_space=_card_space(card.get("action_space"), _space(action_paths, columns), action_paths, columns),
        extra_metadata=metadata,
    )


def write(plan: Plan, episodes: BuildEpisodes, staging: Path, progress: Any) -> None:
    """Write ``data/main_data.hdf5`` episode by episode, then ``data/metadata.json``."""
    import h5py

    data = staging / "data"
    data.mkdir()
    with h5py.File(data / "main_data.hdf5", "w", track_order=True) as file:
        for episode in episodes:
            n = episode.length
            group = file.create_group(f"episode_{episode.position}")
            group.attrs["id"] = episode.position
            group.attrs["total_steps"] = n
            for key, path in plan.observation_paths.items():
                group.create_dataset("/".join(("observations", *path)), data=episode.observations[key])
            for key, path in plan.action_paths.items():
                group.create_dataset("/".join(("actions", *path)), data=episode.steps[key])
            group.create_dataset("rewards", data=episode.steps[REWARD].reshape(n))
            group.create_dataset("terminations", data=episode.steps[TERMINATED].reshape(n).astype(bool))
            group.create_dataset("truncations", data=episode.steps[TRUNCATED].reshape(n).astype(bool))
            for key, path in plan.info_paths.items():
                group.create_dataset("/".join(("infos", *path)), data=episode.steps[key])
            progress.update(n)
    metadata = {
        "dataset_id": plan.dataset_id,
        "data_format": "hdf5",
        "jpeg_encoding": False,
        "minari_version": MINARI_VERSION,
        "total_episodes": len(episodes),
        "total_steps": episodes.transitions,
        "observation_space": json.dumps(plan.observation_space),
        "action_space": json.dumps(plan.action_space),
        "env_spec": None,
        "dataset_size": round((data / "main_data.hdf5").stat().st_size / 1e6, 1),
        "requirements": [],
        **plan.extra_metadata,
    }
    if "author" in metadata and isinstance(metadata["author"], str):
        metadata["author"] = [metadata["author"]]
    (data / "metadata.json").write_text(json.dumps(metadata))
