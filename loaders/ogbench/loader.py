"""OGBench datasets as TorchRL Episode Data (``ogbench/<dataset>``, e.g. ``ogbench/antmaze-large-navigate-v0``).

OGBench (Park et al., ICLR 2025) publishes each dataset as one NumPy ``.npz`` per split
(``<name>.npz``, ``<name>-val.npz``) and its 100M-transition sets as directories of 100 shards
(``<set>-100m-v0/<name>-v0-000.npz`` .. ``-099.npz``, each with a ``-NNN-val.npz``). The semantics
below are those of upstream's own reader, ``ogbench.utils.load_dataset``:

=====================================  ==================================================================
upstream (file rows)                   TED
=====================================  ==================================================================
trajectories concatenated; each        one episode per trajectory: a trajectory of ``L + 1`` rows
stores ``L + 1`` observations          ``s_0 .. s_L`` gives ``L`` transitions; ``s_L`` (the extra final
(its final one as an extra row)        row) is the last transition's ``("next", "observation")``
``terminals`` (1 on each final row)    trajectory ends: ``("next", "truncated")`` on the last transition.
                                       They end fixed-length collection runs, not the task (OGBench's
                                       agents derive bootstrap masks from goal success), so never
                                       ``terminated``
``observations`` (float32; uint8      ``observation`` / ``("next", "observation")``, stored dtype kept
images in ``visual-*`` and
powderworld)
``actions`` (int for powderworld)     ``action`` (stored dtype kept); the action on a final row has no
                                       next state (upstream drops it too)
``qpos``, ``qvel``, ``button_states``  ``("info", k)`` at t and ``("next", "info", k)`` at t+1 (per-state,
and any other per-row array            stored once per episode like observations)
rewards                                none upstream: ``("next", "reward")`` is NaN (the card says so);
                                       goal-conditioned rewards come from ``GoalSampler``. With
                                       ``task=N``: OGBench's single-task reward of task N (below)
=====================================  ==================================================================

Single-task rewards (``task=1..5``, or the ids ``ogbench/<dataset>-singletask[-taskN]-v0[-val]``,
upstream's names; without ``-taskN`` the environment's default task): ``("next", "reward")`` is
the reward ``ogbench.relabel_utils.relabel_dataset`` gives the transition (computed from the state at
time t, as upstream does), and ``("info", "success")`` / ``("next", "info", "success")`` (bool
``[N, 1]``) say whether the state at t / t+1 solves the task: upstream's bootstrap ``masks`` are
``1 - ("info", "success")``. Episode ends stay truncated (upstream's ``terminals`` are unchanged).
The rule and its task tables are in :mod:`.tasks`; powderworld has no single-task variant
and is refused.

A trajectory of a single row has no transition and is skipped (counted in the card). A file whose
last row is not a terminal row is refused (truncated or not an OGBench file). Files are streamed
member by member and row block by row block (:mod:`datasets_hub.loaders.formats.npz_stream`): peak memory is a few chunks, also
for 12 GB image sets, and the 100M sets are converted shard by shard into one build.

Parameters: ``dataset`` (upstream name; default: the id's name), ``split`` (``"train"`` or
``"val"``), ``shards`` (100M sets: a list of shard numbers 0..99, default all; part of the
fingerprint like every parameter), ``mirror`` (a base URL, ``hf://datasets/<org>/<repo>`` or
``file://`` directory holding the same file layout as upstream, tried before the upstream host),
``url`` (one file's URL, replacing everything else). ``DATASETS_HUB_ENDPOINT_OGBENCH`` points the
upstream URLs at a mirror host (the upstream host was down for weeks in 2026). After upstream, every
single-file dataset falls back to the Hugging Face copy :data:`HF_MIRROR` (same file names). Catalogue
entries pin ``sha256``/``size`` of a file where a public record gives the exact bytes
(docs/datasets/ogbench.md lists them and their sources); other sizes are ``approx_size`` notes, never checked.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from datasets_hub.errors import InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext, Resource
from datasets_hub.loaders.formats.npz_stream import NpzFile
from datasets_hub.loaders.ogbench.sizes import image_bytes
from datasets_hub.loaders.ogbench.tasks import SINGLETASK, check_task, default_task, relabel

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    from tensordict import TensorDict, TensorDictBase

BASE_URL = "https://rail.eecs.berkeley.edu/datasets/ogbench"
# The copy the OGBench maintainers pointed to during the 2026 outage (seohongpark/ogbench#49): upstream's
# file names at the repository root. Tried after upstream; it holds no 100M set.
HF_MIRROR = "hf://datasets/zhouzypaul/ogbench_datasets"
NUM_SHARDS = 100
PARAMS = ("dataset", "mirror", "shards", "split", "task", "url")
STATE_KEYS = ("qpos", "qvel", "button_states")
_CHUNK_BYTES = 128 * 2**20  # raw bytes per block read from the file (whole trajectories, at least one)

# The 85 datasets of OGBench 1.2 (state and visual-*), and its 100M sets (directory -> shard stem).
_MAZES = {
    "pointmaze": ("medium", "large", "giant", "teleport"),
    "antmaze": ("medium", "large", "giant", "teleport"),
    "humanoidmaze": ("medium", "large", "giant"),
}
_VISUAL = ("antmaze", "humanoidmaze", "cube", "scene", "puzzle")


def dataset_names() -> list[str]:
    """Every ``*-v0`` dataset of OGBench 1.2 (without ``-val``), sorted."""
    names = []
    for family, mazes in _MAZES.items():
        for maze in mazes:
            names += [f"{family}-{maze}-navigate-v0", f"{family}-{maze}-stitch-v0"]
    names += [f"antmaze-{maze}-explore-v0" for maze in ("medium", "large", "teleport")]
    names += [f"antsoccer-{arena}-{kind}-v0" for arena in ("arena", "medium") for kind in ("navigate", "stitch")]
    names += [f"cube-{n}-{kind}-v0" for n in ("single", "double", "triple", "quadruple") for kind in ("play", "noisy")]
    names += [f"scene-{kind}-v0" for kind in ("play", "noisy")]
    names += [f"puzzle-{n}-{kind}-v0" for n in ("3x3", "4x4", "4x5", "4x6") for kind in ("play", "noisy")]
    names += [f"powderworld-{level}-play-v0" for level in ("easy", "medium", "hard")]
    names += [f"visual-{n}" for n in list(names) if n.split("-", 1)[0] in _VISUAL]
    return sorted(names)


HUNDRED_M = {
    f"{stem[:-3]}-100m-v0": stem
    for stem in (
        "humanoidmaze-giant-navigate-v0",
        "cube-double-play-v0",
        "cube-triple-play-v0",
        "cube-quadruple-play-v0",
        "cube-quadruple-noisy-v0",
        "cube-octuple-play-v0",
        "scene-play-v0",
        "puzzle-3x3-play-v0",
        "puzzle-4x4-play-v0",
        "puzzle-4x5-play-v0",
        "puzzle-4x6-play-v0",
    )
}


def _files(name: str, split: str, shards: list[int] | None) -> list[str]:
    """Upstream file paths (relative to ``BASE_URL``) of one dataset and split."""
    suffix = "-val" if split == "val" else ""
    if name in HUNDRED_M:
        stem = HUNDRED_M[name]
        return [f"{name}/{stem}-{i:03d}{suffix}.npz" for i in (shards if shards is not None else range(NUM_SHARDS))]
    return [f"{name}{suffix}.npz"]


class OGBenchLoader(Loader):
    """Loader for OGBench ``.npz`` datasets (see the module docstring for the exact semantics)."""

    name = "ogbench"
    requires = ()
    install_hint = ""
    format_version = 1
    #: above the raw limit, exact PNG: 64x64 renders (and Powderworld's 32x32 grid of materials) are small
    #: enough that JPEG's 8x8 blocks and halved colour resolution would change what an agent sees
    auto_frames = "png"

    def frame_bytes(self, spec: DatasetSpec) -> int | None:
        """From upstream's generation settings (:mod:`.sizes`): exact for upstream's files (a trajectory of
        one row, which has no transition, only lowers it); 0 for a state set; ``None`` for a name they do
        not cover."""
        return image_bytes(self._name(spec), spec.params.get("split", "train"))

    # -- parameters and files ------------------------------------------------------------------------
    def _name(self, spec: DatasetSpec) -> str:
        return str(spec.params.get("dataset") or spec.name)

    def entry_for(self, dataset_id: str) -> dict[str, Any] | None:
        """Upstream's single-task names: ``ogbench/<dataset>-singletask[-taskN]-v0`` (``-val``:
        the validation split) resolve to ``dataset=<dataset>, task=N`` (the default task when no
        ``N``)."""
        name = dataset_id.split("/", 1)[-1]
        split = "train"
        if name.endswith("-val"):
            name, split = name[: -len("-val")], "val"
        match = SINGLETASK.match(name)
        if match is None:
            return None
        dataset = match["dataset"] + "-v0"
        if dataset not in dataset_names() and dataset not in HUNDRED_M:
            return None
        try:
            task = int(match["task"]) if match["task"] else default_task(dataset)
            check_task(dataset, task)
        except InvalidParameter:
            return None
        params: dict[str, Any] = {"dataset": dataset, "task": task}
        if split == "val":
            params["split"] = "val"
        return {
            "params": params,
            "description": f"OGBench {dataset}, single-task rewards of task {task} ({split} split)",
        }

    def check_params(self, spec: DatasetSpec) -> None:
        self.reject_unknown_params(spec, PARAMS)
        if spec.params.get("task") is not None:
            check_task(self._name(spec), spec.params["task"])
        split = spec.params.get("split", "train")
        if split not in ("train", "val"):
            raise InvalidParameter(f"{spec.id}: split must be 'train' or 'val', got {split!r}")
        shards = spec.params.get("shards")
        if shards is not None:
            if self._name(spec) not in HUNDRED_M:
                raise InvalidParameter(
                    f"{spec.id}: shards= applies to the 100M sets ({', '.join(sorted(HUNDRED_M))}) "
                    "only; this dataset is one file"
                )
            if (
                not isinstance(shards, list)
                or not shards
                or len(set(shards)) != len(shards)
                or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < NUM_SHARDS for i in shards)
            ):
                raise InvalidParameter(
                    f"{spec.id}: shards must be a non-empty list of distinct shard numbers in "
                    f"0..{NUM_SHARDS - 1} (e.g. shards=[0, 1]), got {shards!r}"
                )
        for key in ("mirror", "url"):
            value = spec.params.get(key)
            if value is not None and (not isinstance(value, str) or "://" not in value):
                raise InvalidParameter(
                    f"{spec.id}: {key} must be a URL (https://…, hf://datasets/<org>/<repo>, file:///…), got {value!r}"
                )

    def resources(self, spec: DatasetSpec) -> list[Resource]:
        """Per file: the ``mirror`` copy (when given), upstream, then the Hugging Face mirror
        :data:`HF_MIRROR` (single files only). The catalogue entry's ``resources`` apply by file name
        (:meth:`~datasets_hub.loader.Loader.apply_catalogue_resources`): upstream's URL pins
        ``sha256``/``size`` (the same bytes on every mirror), a URL of the entry's own (``file:///…``)
        replaces the file's URLs; ``url=`` replaces everything and pins nothing."""
        self.check_params(spec)
        if spec.params.get("url") is not None:
            return [Resource.from_dict({"urls": [spec.params["url"]]})]
        name = self._name(spec)
        shards = spec.params.get("shards")
        mirror = spec.params.get("mirror")
        derived = []
        for path in _files(name, spec.params.get("split", "train"), sorted(shards) if shards else None):
            urls = [f"{mirror.rstrip('/')}/{path}"] if mirror else []
            urls.append(f"{BASE_URL}/{path}")
            if name not in HUNDRED_M:  # the 100M sets are not on the Hugging Face mirror
                urls.append(f"{HF_MIRROR}/{path}")
            derived.append(Resource(name=path, urls=tuple(urls)))
        return self.apply_catalogue_resources(spec, derived)

    def check_catalogue_resources(self, spec: DatasetSpec, fetched: list[Resource]) -> None:
        if spec.params.get("url") is None:  # url= replaces the entry's files on purpose
            super().check_catalogue_resources(spec, fetched)

    def is_upstream_url(self, url: str) -> bool:
        return url.startswith((f"{BASE_URL}/", f"{HF_MIRROR}/"))

    # -- conversion ------------------------------------------------------------------------------------
    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDictBase]:
        self.check_params(spec)
        order = [r.name for r in self.resources(spec)]
        missing = [n for n in order if n not in files]
        if missing:
            raise LoaderError(f"{spec.id}: files {missing} were not fetched (got {sorted(files)})")
        state: dict[str, Any] = {
            "episode": 0,
            "transitions": 0,
            "skipped_single_row": 0,
            "files": [],
            "extra_keys": set(),
            "empty_keys": set(),
            "task": spec.params.get("task"),
            "dataset": self._name(spec),
        }
        for name in order:
            yield from _convert_file(spec, Path(files[name]), name, ctx, state)
        environment = environment_card(self._name(spec), spec.params.get("task"))
        if environment and "url" not in spec.params:  # a url= file is the user's: its environment is unknown
            ctx.note("environment", environment)
        ctx.note("episodes", state["episode"])
        ctx.note("transitions", state["transitions"])
        ctx.note("files", state["files"])
        ctx.note("single_row_trajectories_skipped", state["skipped_single_row"])
        if state["task"] is None:
            ctx.note(
                "rewards",
                "none upstream: ('next', 'reward') is NaN. Goal-conditioned rewards come from "
                "datasets_hub.GoalSampler (success = goal reached)",
            )
        else:
            ctx.note(
                "rewards",
                f"single-task rewards of task {state['task']}, as ogbench.relabel_utils.relabel_dataset "
                "computes them from the state at time t (qpos / button_states); ('info', 'success') says "
                "whether a state solves the task (upstream's masks = 1 - success)",
            )
        ctx.note(
            "terminals",
            "trajectory ends of the fixed-length collection runs: ('next', 'truncated'); no row is terminated",
        )
        ctx.note("per_state_info", sorted(state["extra_keys"]))
        if state["empty_keys"]:
            ctx.note("empty_arrays_skipped", sorted(state["empty_keys"]))


def environment_card(dataset: str, task: int | None = None) -> dict[str, Any]:
    """The card's ``environment`` of an OGBench dataset: the gymnasium id ``import ogbench`` registers for
    it, named as upstream's ``make_env_and_datasets`` names it (the dataset name without its collection
    kind: ``antmaze-large-navigate-v0`` -> ``antmaze-large-v0``; with ``task``, the single-task
    environment ``antmaze-large-singletask-task2-v0``). Empty for a name OGBench does not publish."""
    if dataset not in dataset_names() and dataset not in HUNDRED_M:
        return {}
    parts = HUNDRED_M.get(dataset, dataset).split("-")  # a 100M set is one of its smaller set's environment
    env_parts = parts[:-2] + ([f"singletask-task{task}"] if task is not None else []) + parts[-1:]
    return {
        "env_id": "-".join(env_parts),
        "registry": "gymnasium",
        "registered_by": "ogbench",
        "from": "the dataset name, as ogbench.make_env_and_datasets derives the environment from it",
    }


def _convert_file(spec: DatasetSpec, path: Path, name: str, ctx: LoaderContext, state: dict) -> Iterator[TensorDict]:
    what = f"{spec.id} ({name})"
    with NpzFile(path, what) as npz:
        for key in ("observations", "actions", "terminals"):
            if key not in npz.keys:
                raise LoaderError(f"{what}: no {key!r} array, so it is not an OGBench file (arrays: {npz.keys})")
        n = npz.header("observations")[0][0] if npz.header("observations")[0] else 0
        if n == 0:
            raise LoaderError(f"{what}: 'observations' has no rows")
        terminal = npz.read("terminals")
        if terminal.size != n:
            raise LoaderError(f"{what}: 'terminals' has shape {terminal.shape}, expected ({n},)")
        terminal = terminal.reshape(n)
        terminal = terminal > 0
        if not terminal[-1]:
            raise LoaderError(
                f"{what}: the last row is not a terminal row, so the last trajectory is cut "
                "(truncated file?); delete the file and download again"
            )
        per_row = ["observations", "actions"]
        extra = []
        for key in npz.keys:
            if key in ("observations", "actions", "terminals"):
                continue
            shape, dtype = npz.header(key)
            if shape[:1] == (n,) and dtype.kind in "biuf":
                if int(np.prod(shape[1:], dtype=np.int64)) == 0:
                    state["empty_keys"].add(key)  # (N, 0): no value to keep (e.g. no buttons in a cube scene)
                else:
                    extra.append(key)
        per_row += extra
        state["extra_keys"].update(extra)
        if state["task"] is not None and "qpos" not in extra and "button_states" not in extra:
            raise LoaderError(
                f"{what}: task= rewards are computed from the stored 'qpos' / 'button_states' arrays, "
                f"and this file has none (arrays: {npz.keys})"
            )
        for key in per_row:
            if npz.header(key)[0][:1] != (n,):
                raise LoaderError(f"{what}: {key!r} has {npz.header(key)[0]} rows but 'observations' has {n}")
        streams = {key: npz.rows(key) for key in per_row}
        try:
            row_bytes = sum(s.row_bytes for s in streams.values())
            budget = max(1, min(ctx.chunk_rows, _CHUNK_BYTES // max(row_bytes, 1)))
            ends = np.flatnonzero(terminal) + 1  # one past each trajectory's final row
            first = 0
            while first < n:
                # whole trajectories: as many as fit the row budget, at least one
                j = int(np.searchsorted(ends, first + budget, side="right")) - 1
                last = int(ends[j]) if j >= 0 else 0
                if last <= first:
                    last = int(ends[np.searchsorted(ends, first, side="right")])
                block = {key: s.read(last - first) for key, s in streams.items()}
                chunk = _ted(block, terminal[first:last], extra, state)
                ctx.progress(last - first)
                first = last
                if chunk is not None:
                    yield chunk
        finally:
            for s in streams.values():
                s.close()
        state["files"].append({"file": name, "rows": int(n), "trajectories": int(terminal.sum())})


def _ted(block: dict[str, np.ndarray], terminal: np.ndarray, extra: list[str], state: dict) -> TensorDict | None:
    """Raw rows of whole trajectories -> TED transitions (module docstring)."""
    import torch
    from tensordict import TensorDict

    idx = np.flatnonzero(~terminal)  # rows that have a next row in their trajectory
    trajectory = np.cumsum(terminal) - terminal  # ordinal of each row's trajectory in the block
    lengths = np.bincount(trajectory[idx], minlength=int(terminal.sum()))
    state["skipped_single_row"] += int((lengths == 0).sum())
    if idx.size == 0:
        return None
    _, local = np.unique(trajectory[idx], return_inverse=True)
    episode = torch.from_numpy(local.astype(np.int64) + state["episode"])
    state["episode"] += int(local.max()) + 1
    state["transitions"] += int(idx.size)
    m = idx.size
    truncated = torch.from_numpy(terminal[idx + 1].reshape(m, 1).copy())
    td = TensorDict(
        {
            "observation": torch.from_numpy(block["observations"][idx]),
            "action": torch.from_numpy(block["actions"][idx]),
            "episode": episode,
            "next": {
                "observation": torch.from_numpy(block["observations"][idx + 1]),
                "reward": torch.full((m, 1), float("nan"), dtype=torch.float32),
                "terminated": torch.zeros(m, 1, dtype=torch.bool),
                "truncated": truncated,
            },
        },
        batch_size=[m],
    )
    for key in extra:
        td.set(("info", key), torch.from_numpy(block[key][idx]))
        td.set(("next", "info", key), torch.from_numpy(block[key][idx + 1]))
    if state["task"] is not None:
        try:
            reward, success = relabel(state["dataset"], state["task"], block.get("qpos"), block.get("button_states"))
        except ValueError as exc:
            raise LoaderError(f"{state['dataset']}: {exc}") from exc
        td.set(("next", "reward"), torch.from_numpy(reward[idx].reshape(m, 1)))
        td.set(("info", "success"), torch.from_numpy(success[idx].reshape(m, 1)))
        td.set(("next", "info", "success"), torch.from_numpy(success[idx + 1].reshape(m, 1)))
    return td
