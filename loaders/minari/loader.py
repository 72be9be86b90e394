"""Minari datasets as TED: ``minari/<minari dataset id>``, e.g. ``minari/D4RL/door/human-v2``.

Where the data comes from:

- a dataset already in the local Minari store (``$MINARI_DATASETS_PATH``, default
  ``~/.minari/datasets``, read at call time) is read from there with no network;
- any other is downloaded by ``minari.download_dataset`` from Minari's remote (``MINARI_REMOTE``,
  default Farama's Hugging Face organisation, which honours ``HF_ENDPOINT``) into the local
  store, then read. The download goes to a hidden directory of the store and is moved into place
  only when complete, so an interrupted download never looks like a local dataset. (It swaps
  ``MINARI_DATASETS_PATH`` while minari downloads: do not download from two threads of one process.)
- with ``DATASETS_HUB_OFFLINE=1`` (or ``HF_HUB_OFFLINE=1``) nothing is downloaded: a dataset
  missing from the local store is a :class:`DownloadError` that says how to get it.

Both Minari storage backends (``hdf5`` and ``arrow``) are read through minari's own storage
classes, episode by episode (``get_episodes`` on batches of ids), never the whole dataset. How an
episode maps onto TED (observations T+1 rows -> ``observation`` / ``("next", "observation")``,
``Dict``/``Tuple`` spaces -> nested keys, ``Text`` -> uint8 bytes, infos with T+1 or T rows) is
documented in :mod:`datasets_hub.loaders.minari.convert`. The dataset card gets minari's metadata
(env spec, author, minari_version, total_steps, dataset_size, …) under ``minari``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from datasets_hub import sources
from datasets_hub.errors import DownloadError, HubError, InvalidParameter, LoaderError, UnknownParameter
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext, Resource, frame_layout
from datasets_hub.loaders.formats.text import decode_text
from datasets_hub.loaders.minari.convert import episode_columns, text_keys

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    from tensordict import TensorDict, TensorDictBase

__all__ = ["MinariLoader", "decode_text", "store_root"]

# (namespace/)name-v<version>, the id grammar of minari.dataset.minari_dataset.parse_dataset_id
_MINARI_ID_RE = re.compile(r"^(?:[-_\w][-_\w/]*[-_\w]+/)?[-_\w]+?-v\d+$")
_EPISODES_PER_READ = 64  # ids per get_episodes call: one file open (hdf5) / one Arrow dataset each


def offline() -> bool:
    """True when no connection may be opened (``DATASETS_HUB_OFFLINE`` or ``HF_HUB_OFFLINE``)."""
    return sources.offline()


def store_root() -> Path:
    """The local Minari store, as minari itself resolves it (read at call time)."""
    path = os.environ.get("MINARI_DATASETS_PATH")
    return Path(path).expanduser() if path else Path.home() / ".minari" / "datasets"


def is_local(minari_id: str) -> bool:
    return (store_root() / minari_id / "data" / "metadata.json").is_file()


def _remote_name() -> str:
    return os.environ.get("MINARI_REMOTE", "hf://farama-minari")


class MinariLoader(Loader):
    """Loader plugin for Minari datasets (see the module docstring for sources and mapping)."""

    name = "minari"
    requires = ("minari",)
    install_hint = "pip install 'minari[hdf5,arrow]'"
    format_version = 1

    # -- catalogue ------------------------------------------------------------------------------
    catalogue_env = ("MINARI_DATASETS_PATH", "HOME")  # store_root()

    def catalogue_files(self) -> list[Path]:
        visited: list[Path] = []
        local_datasets(visited=visited)
        return visited

    def catalogue(self) -> dict[str, dict[str, Any]]:
        """Datasets of the local Minari store (no network: the remote's ids come from
        :meth:`remote_catalogue`, fetched on demand by ``datasets-hub list --refresh``)."""
        entries: dict[str, dict[str, Any]] = {}
        for minari_id, metadata in local_datasets().items():
            entry: dict[str, Any] = {
                "loader": self.name,
                "description": metadata.get("description") or f"Minari dataset {minari_id} (local Minari store)",
            }
            entries[f"minari/{minari_id}"] = entry
        return {k: v for k, v in entries.items() if _valid_hub_id(k)}

    def remote_catalogue(self) -> dict[str, dict[str, Any]]:
        """The remote's dataset ids (network; the core calls this on demand, with a timeout)."""
        if offline():
            return {}
        from minari.storage.remotes import get_cloud_storage  # errors propagate: the core reports them

        listed = sorted(set(get_cloud_storage().list_datasets()))
        ids = [i for i in listed if isinstance(i, str) and _MINARI_ID_RE.match(i)]
        entries = {
            f"minari/{minari_id}": {
                "loader": self.name,
                "description": f"Minari dataset {minari_id} ({_remote_name()})",
            }
            for minari_id in ids
        }
        return {k: v for k, v in entries.items() if _valid_hub_id(k)}

    def check_params(self, spec: DatasetSpec) -> None:
        if spec.params:
            try:
                self.reject_unknown_params(spec, ())  # a keyword of TorchRL's dataset classes: its own answer
            except UnknownParameter as exc:
                raise UnknownParameter(
                    f"the minari loader takes no parameters, got {sorted(spec.params)} for {spec.id!r}; "
                    "a Minari dataset is named by its id alone, e.g. 'minari/D4RL/door/human-v2'",
                    exc.names,
                ) from None
        if not _MINARI_ID_RE.match(spec.name):
            raise InvalidParameter(
                f"{spec.id!r} does not name a Minari dataset: ids look like "
                "'minari/<namespace>/<name>-v<version>', e.g. 'minari/mujoco/hopper/expert-v0'"
            )

    #: above the raw limit, exact PNG: Minari's image observations are rendered frames (Atari screens, MuJoCo
    #: pixels), small and sharp-edged, where JPEG's loss would change what an agent sees
    auto_frames = "png"

    def frame_bytes(self, spec: DatasetSpec) -> int | None:
        """Exact, from the dataset's ``metadata.json`` (:func:`image_observation_bytes`): the local store's copy,
        else the remote's (one small file, the one minari reads to list datasets); ``None`` offline for a
        dataset not in the local store (it cannot be built then anyway)."""
        self.check_params(spec)
        minari_id = spec.name
        local = store_root() / minari_id / "data" / "metadata.json"
        if local.is_file():
            with open(local) as fh:
                return image_observation_bytes(json.load(fh))
        if offline():
            return None
        try:
            from minari.storage.remotes import get_cloud_storage

            metadata = get_cloud_storage().get_dataset_metadata(minari_id)
        except Exception as exc:  # any remote failure: the build cannot be named without the metadata
            raise DownloadError(
                f"cannot read the metadata of Minari dataset {minari_id!r} from {_remote_name()} "
                f"({type(exc).__name__}: {exc}); it sizes the frames before the download. Check the id and the "
                "connection, or pass frames='raw' (or 'png', 'jpeg') to choose the storage without it"
            ) from exc
        return image_observation_bytes(metadata)

    def resources(self, spec: DatasetSpec) -> list[Resource]:
        return []  # minari manages its own store and downloads

    # -- conversion -----------------------------------------------------------------------------
    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDictBase]:
        minari_id = spec.name
        dataset = open_dataset(minari_id)
        storage = dataset.storage
        ctx.note("minari", card_metadata(storage.data_path))
        texts = {
            **text_keys(dataset.observation_space, ("observation",)),
            **text_keys(dataset.action_space, ("action",)),
        }
        if texts:
            ctx.note(
                "text_fields",
                {
                    k: {
                        "dtype": "uint8",
                        "width": w,
                        "encoding": "utf-8, zero-padded",
                        "decode": "datasets_hub.loaders.minari.loader.decode_text",
                    }
                    for k, w in texts.items()
                },
            )
        dropped: dict[str, str] = {}
        info_layout: dict[str, str] = {}
        pending: list[dict[tuple[str, ...], np.ndarray]] = []
        rows = 0
        try:
            ctx.expect(int(dataset.total_steps))  # Minari's own count over the episodes read: the bar's total
        except (AttributeError, KeyError, TypeError, ValueError):
            ctx.expect(None)  # an older store without the count: the bar says the total is unknown
        for episode in _read_episodes(storage, [int(i) for i in dataset.episode_indices], minari_id):
            try:
                cols = episode_columns(episode, dataset.observation_space, dataset.action_space, dropped, info_layout)
            except LoaderError as exc:
                raise LoaderError(f"Minari dataset {minari_id!r}, episode {episode.get('id')}: {exc}") from exc
            steps = int(cols[("episode",)].shape[0])
            pending.append(cols)
            rows += steps
            ctx.progress(steps)
            if rows >= ctx.chunk_rows:
                yield _chunk(pending, minari_id)
                pending, rows = [], 0
        if pending:
            yield _chunk(pending, minari_id)
        if info_layout:
            ctx.note("info_keys", dict(sorted(info_layout.items())))
        if dropped:
            ctx.note("info_dropped", dict(sorted(dropped.items())))


def open_dataset(minari_id: str) -> Any:
    """The ``MinariDataset`` for ``minari_id``, downloaded into the local store first if needed."""
    if not is_local(minari_id):
        if offline():
            flag = sources.offline_flag()
            raise DownloadError(
                f"the Minari dataset {minari_id!r} is not in the local Minari store ({store_root()}) and "
                f"{flag}=1 forbids downloading it. Fix: unset {flag}, or download it once while online "
                f"(`minari download {minari_id}`), or point MINARI_DATASETS_PATH at a store that has it."
            )
        download(minari_id)
    import minari

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # minari warns about optional metadata; not ours to print
            return minari.load_dataset(minari_id)
    except Exception as exc:  # upstream raises ValueError/AssertionError/OSError alike
        hint = " Fix: pip install -U 'minari[hdf5,arrow]'." if "does not support" in str(exc) else ""
        raise LoaderError(f"minari could not open {minari_id!r} at {store_root() / minari_id}: {exc}.{hint}") from exc


def download(minari_id: str) -> Path:
    """Download ``minari_id`` with minari into the local store, atomically; return its path."""
    import minari

    root = store_root()
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".datasets_hub-download-", dir=root))
    previous = os.environ.get("MINARI_DATASETS_PATH")
    try:
        os.environ["MINARI_DATASETS_PATH"] = str(tmp)
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")  # e.g. "a newer version exists": minari's advice
                minari.download_dataset(minari_id)
        except Exception as exc:
            endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
            raise DownloadError(
                f"could not download the Minari dataset {minari_id!r} from {_remote_name()} "
                f"(HF_ENDPOINT={endpoint}): {type(exc).__name__}: {exc}. Check the id (`datasets-hub "
                f"list --loader minari`) and the network, or put the dataset in the local Minari store "
                f"({root}) yourself."
            ) from exc
        finally:
            if previous is None:
                os.environ.pop("MINARI_DATASETS_PATH", None)
            else:
                os.environ["MINARI_DATASETS_PATH"] = previous
        source = tmp / minari_id
        if not (source / "data" / "metadata.json").is_file():
            raise DownloadError(
                f"minari reported {minari_id!r} downloaded but {source / 'data' / 'metadata.json'} is "
                "missing; the remote copy is incomplete"
            )
        # namespace metadata first (minari lists namespaces from them), then the dataset itself
        for meta in tmp.rglob("namespace_metadata.json"):
            rel = meta.relative_to(tmp)
            if any(part.startswith(".") for part in rel.parts):
                continue
            target = root / rel
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(meta, target)
        target = root / minari_id
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(source, target)
        except OSError:
            if not is_local(minari_id):  # not a concurrent download that finished first
                raise
        return target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _read_episodes(storage: Any, ids: list[int], minari_id: str) -> Iterator[dict[str, Any]]:
    """Episode dicts from minari's storage, a batch of ids per read; upstream errors become
    ``LoaderError``."""
    for start in range(0, len(ids), _EPISODES_PER_READ):
        batch = ids[start : start + _EPISODES_PER_READ]
        count = 0
        try:
            episodes = iter(storage.get_episodes(batch))
        except Exception as exc:
            raise _read_error(storage, batch, minari_id, exc) from exc
        while True:  # one episode in memory at a time
            try:
                episode = next(episodes)
            except StopIteration:
                break
            except Exception as exc:
                raise _read_error(storage, batch, minari_id, exc) from exc
            count += 1
            yield episode
        if count != len(batch):
            raise LoaderError(
                f"minari returned {count} episodes for the {len(batch)} ids {batch[0]}..{batch[-1]} "
                f"of {minari_id!r}; the dataset's files are incomplete"
            )


def _read_error(storage: Any, batch: list[int], minari_id: str, exc: Exception) -> LoaderError:
    return LoaderError(
        f"minari could not read episodes {batch[0]}..{batch[-1]} of {minari_id!r} "
        f"({type(storage).__name__} at {storage.data_path}): {type(exc).__name__}: {exc}"
    )


def _chunk(pending: list[dict[tuple[str, ...], np.ndarray]], minari_id: str) -> TensorDict:
    import torch
    from tensordict import TensorDict

    keys = list(pending[0])
    for cols in pending[1:]:
        if set(cols) != set(keys):
            diff = sorted("/".join(k) for k in set(cols) ^ set(keys))
            raise LoaderError(
                f"Minari dataset {minari_id!r}: episode {int(cols[('episode',)][0])} has different keys "
                f"from episode {int(pending[0][('episode',)][0])} ({diff}); its infos change layout"
            )
    n = sum(int(cols[("episode",)].shape[0]) for cols in pending)
    out = TensorDict({}, batch_size=[n])
    for key in keys:
        values = pending[0][key] if len(pending) == 1 else np.concatenate([cols[key] for cols in pending])
        try:
            out.set(key, torch.from_numpy(np.ascontiguousarray(values)))
        except TypeError as exc:
            raise LoaderError(
                f"Minari dataset {minari_id!r}: {'/'.join(key)!r} has dtype {values.dtype}, which torch cannot hold"
            ) from exc
    return out


def image_observation_bytes(metadata: Mapping[str, Any]) -> int | None:
    """Decoded bytes of the image observations (uint8 ``Box`` leaves of image shape, at any depth of a
    ``Dict``/``Tuple`` space) of a dataset with minari's ``metadata``: ``total_steps + total_episodes``
    rows (T + 1 observations per episode, stored once). ``None`` when the metadata lacks the counts or
    the space (an older store)."""
    space, steps, episodes = (metadata.get(k) for k in ("observation_space", "total_steps", "total_episodes"))
    if not isinstance(steps, int) or not isinstance(episodes, int):
        return None
    rows = steps + episodes
    try:
        space = json.loads(space) if isinstance(space, str) else space
    except ValueError:
        return None
    if not isinstance(space, dict):
        return None

    def pixels(node: Any) -> int:
        if not isinstance(node, dict):
            return 0
        children = node.get("subspaces")
        if isinstance(children, dict):
            return sum(pixels(child) for child in children.values())
        if isinstance(children, list):
            return sum(pixels(child) for child in children)
        shape = node.get("shape")
        if node.get("type") == "Box" and node.get("dtype") == "uint8" and isinstance(shape, list):
            return int(np.prod(shape)) if frame_layout(shape) else 0
        return 0

    return rows * pixels(space)


def card_metadata(data_path: Path) -> dict[str, Any]:
    """minari's ``metadata.json`` as plain JSON for the dataset card (spaces and env specs parsed)."""
    with open(Path(data_path) / "metadata.json") as fh:
        metadata = json.load(fh)
    for key in ("env_spec", "eval_env_spec", "observation_space", "action_space"):
        value = metadata.get(key)
        if isinstance(value, str):
            try:
                metadata[key] = json.loads(value)
            except ValueError:
                pass
    return metadata


def local_datasets(max_depth: int = 6, *, visited: list[Path] | None = None) -> dict[str, dict[str, Any]]:
    """``{minari id: metadata}`` for every dataset of the local store (hidden dirs skipped); every
    folder and metadata file looked at is appended to ``visited``."""
    root = store_root()
    found: dict[str, dict[str, Any]] = {}
    seen = visited if visited is not None else []

    def walk(path: Path, depth: int) -> None:
        seen.append(path)
        meta = path / "data" / "metadata.json"
        seen.append(meta)
        if meta.is_file():
            try:
                with open(meta) as fh:
                    metadata = json.load(fh)
            except (OSError, ValueError):
                return
            minari_id = path.relative_to(root).as_posix()
            if metadata.get("dataset_id") == minari_id:
                found[minari_id] = metadata
            return
        if depth >= max_depth:
            return
        try:
            children = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            return
        for child in children:
            walk(child, depth + 1)

    if root.is_dir():
        walk(root, 0)
    else:
        seen.append(root)  # its creation changes the listing
    return found


def _valid_hub_id(dataset_id: str) -> bool:
    from datasets_hub.catalogue import validate_id

    try:
        validate_id(dataset_id)
    except HubError:
        return False
    return True
