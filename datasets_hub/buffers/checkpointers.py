"""Storage checkpointers: how ``dumps``/``loads`` write a storage (TorchRL's checkpointer family).

``storage.checkpointer = FlatStorageCheckpointer()`` (or ``ReplayBuffer(checkpointer=...)``) picks
the on-disk form; every storage has a default (``TensorStorageCheckpointer`` for tensor storages,
``ListStorageCheckpointer`` for list storages, ``StorageEnsembleCheckpointer`` for ensembles).
A checkpointer's ``dumps(storage, path)`` writes ``path/storage.json`` (what was saved and by which
checkpointer, no pickle) plus the data; ``loads(storage, path)`` refuses a dump written by another
checkpointer, naming it. Save hooks run on the data before it is written, load hooks after it is
read (``register_save_hook``/``register_load_hook``), as in TorchRL.

Forms: ``TensorStorageCheckpointer`` a tensordict memmap tree of the storage's TensorDict;
``FlatStorageCheckpointer`` the same after :class:`~datasets_hub.buffers.ted_flat.TED2Flat`
(observations stored once); ``NestedStorageCheckpointer`` the flat form with one jagged nested
tensor per trajectory (``torch.nested``, values + offsets on disk); ``H5StorageCheckpointer`` the
flat form in one HDF5 file through h5py (``h5_kwargs`` such as ``compression="gzip"`` go to
``create_dataset``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from datasets_hub.buffers.ted_flat import Flat2TED, TED2Flat
from datasets_hub.files import write_json_atomic

#: the "format" of every storage dump (storage.json), whatever the checkpointer
STORAGE_FORMAT = "datasets_hub.storage"
_FORMAT = STORAGE_FORMAT
_LIST_CLASSES = ("ListStorage", "LazyStackStorage")


class StorageCheckpointerBase:
    """Base: ``dumps(storage, path)``, ``loads(storage, path)``, save and load hooks."""

    def __init__(self) -> None:
        self._save_hooks: list[Any] = []
        self._load_hooks: list[Any] = []

    def register_save_hook(self, hook: Any) -> None:
        self._save_hooks.append(hook)

    def register_load_hook(self, hook: Any) -> None:
        self._load_hooks.append(hook)

    def _save_form(self, data: Any, path: Path) -> Any:
        for hook in self._save_hooks:
            data = hook(data, path=path)
        return data

    def _load_form(self, data: Any, path: Path) -> Any:
        for hook in self._load_hooks:
            data = hook(data, path=path)
        return data

    def dumps(self, storage: Any, path: str | Path) -> None:
        raise NotImplementedError

    def loads(self, storage: Any, path: str | Path) -> None:
        raise NotImplementedError

    def _read_meta(self, path: Path, storage: Any) -> dict[str, Any]:
        meta_path = path / "storage.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{path} holds no dumped storage (no storage.json): pass a path written by dumps()")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != _FORMAT:
            raise ValueError(f"{meta_path} is not a datasets_hub storage dump")
        default = "ListStorageCheckpointer" if meta.get("class") in _LIST_CLASSES else "TensorStorageCheckpointer"
        written_by = meta.get("checkpointer") or default  # dumps from before checkpointers existed
        if written_by != type(self).__name__:
            raise ValueError(
                f"{path} holds a {meta.get('class')} dump written by a {written_by}; this {type(storage).__name__}'s "
                f"checkpointer is a {type(self).__name__}: load it into a storage of the same kind, with "
                f"storage.checkpointer = {written_by}()"
            )
        return meta

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class TensorStorageCheckpointer(StorageCheckpointerBase):
    """The default of tensor storages: the stored TensorDict as a memmap tree (plus the schema)."""

    def _check_storage(self, storage: Any) -> None:
        if not hasattr(storage, "checkpoint_state"):
            raise TypeError(
                f"{type(self).__name__} writes tensor storages (TensorStorage, LazyTensorStorage, "
                f"LazyMemmapStorage), not a {type(storage).__name__}"
            )

    def dumps(self, storage: Any, path: str | Path) -> None:
        self._check_storage(storage)
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        info, td = storage.checkpoint_state()
        if td is not None:
            self._write_data(self._save_form(td, path), path)
        write_json_atomic(path / "storage.json", {**info, "checkpointer": type(self).__name__})

    def loads(self, storage: Any, path: str | Path) -> None:
        self._check_storage(storage)
        path = Path(path)
        info = self._read_meta(path, storage)
        td = self._load_form(self._read_data(path), path) if info["kind"] else None
        storage.restore_checkpoint(info, td)

    def _write_data(self, data: TensorDictBase, path: Path) -> None:
        data.memmap(prefix=path / "data", existsok=True)

    def _read_data(self, path: Path) -> TensorDictBase:
        return TensorDict.load_memmap(path / "data", allow_pickle=False)


class FlatStorageCheckpointer(TensorStorageCheckpointer):
    """Observations stored once (``TED2Flat`` on save, ``Flat2TED`` on load); the round trip is exact.

    Needs TED data: a TensorDict storage whose batch is its storage dims (``ndim`` 1 or 2).
    """

    def __init__(self, done_keys: Any = None, reward_keys: Any = None, **kwargs: Any) -> None:
        super().__init__()
        if done_keys is not None:
            kwargs["done_keys"] = done_keys
        if reward_keys is not None:
            kwargs["reward_keys"] = reward_keys
        self._save_hooks = [TED2Flat(**kwargs)]
        self._load_hooks = [Flat2TED(**{k: v for k, v in kwargs.items() if k != "done_key"})]

    def _check_storage(self, storage: Any) -> None:
        super()._check_storage(storage)
        info, _ = storage.checkpoint_state(with_data=False)
        if info["kind"] not in (None, "td") or len(info.get("row_batch", ())):
            raise TypeError(
                f"{type(self).__name__} writes TED TensorDicts whose batch is the storage dims; this storage holds "
                f"{info['kind']} data with extra batch dims {info.get('row_batch')}: use TensorStorageCheckpointer"
            )


class NestedStorageCheckpointer(FlatStorageCheckpointer):
    """The flat form with one nested tensor per trajectory: every per-step leaf is saved as the values
    and offsets of a jagged ``torch.nested`` tensor whose components are the trajectories (runs)."""

    def _write_data(self, data: TensorDictBase, path: Path) -> None:
        run_start = data.get(self._save_hooks[0].shift_key)
        offsets = torch.cat([torch.nonzero(run_start).reshape(-1), torch.tensor([run_start.shape[0]])])
        data = data.clone(recurse=False)
        data.set(("_nested", "offsets"), offsets)  # the per-step leaves are the jagged values
        data.memmap(prefix=path / "data", existsok=True)

    def _read_data(self, path: Path) -> TensorDictBase:
        td = TensorDict.load_memmap(path / "data", allow_pickle=False)
        offsets = td.get(("_nested", "offsets"))
        td = td.exclude("_nested")
        n = int(offsets[-1])
        for key, value in td.items(include_nested=True, leaves_only=True):
            if value.ndim and value.shape[0] == n and n:
                parts = torch.nested.nested_tensor_from_jagged(cast(torch.Tensor, value).reshape(n, -1), offsets)
                td.set(key, parts.values().reshape(value.shape))  # one trajectory per component
        return td

    def trajectories(self, path: str | Path, key: Any) -> torch.Tensor:
        """One jagged nested tensor of ``key``: component ``i`` is trajectory ``i`` of the dump."""
        td = TensorDict.load_memmap(Path(path) / "data", allow_pickle=False)
        offsets = td.get(("_nested", "offsets"))
        value = td.get(key)
        return torch.nested.nested_tensor_from_jagged(torch.as_tensor(value), offsets)


class H5StorageCheckpointer(FlatStorageCheckpointer):
    """The flat form in one HDF5 file (h5py): ``<path>/<checkpoint_file>``, or ``path`` itself when it
    ends with ``.h5``. ``h5_kwargs`` go to ``h5py.File.create_dataset`` (e.g. ``{"compression": "gzip",
    "compression_opts": 4}``); other keywords go to ``TED2Flat``."""

    def __init__(
        self,
        *,
        checkpoint_file: str = "checkpoint.h5",
        done_keys: Any = None,
        reward_keys: Any = None,
        h5_kwargs: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(done_keys=done_keys, reward_keys=reward_keys, **kwargs)
        self.checkpoint_file = checkpoint_file
        self.kwargs = {} if h5_kwargs is None else dict(h5_kwargs)

    def _files(self, path: str | Path) -> tuple[Path, Path]:
        path = Path(path)
        if path.suffix == ".h5":
            return path.with_suffix(""), path
        return path, path / self.checkpoint_file

    def dumps(self, storage: Any, path: str | Path) -> None:
        folder, _ = self._files(path)
        self._h5 = self._files(path)[1]
        super().dumps(storage, folder)

    def loads(self, storage: Any, path: str | Path) -> None:
        folder, _ = self._files(path)
        self._h5 = self._files(path)[1]
        super().loads(storage, folder)

    def _write_data(self, data: TensorDictBase, path: Path) -> None:
        try:
            import h5py
        except ImportError as exc:
            raise ImportError("H5StorageCheckpointer needs h5py: pip install h5py") from exc
        tmp = self._h5.with_name(self._h5.name + ".tmp")
        self._h5.parent.mkdir(parents=True, exist_ok=True)
        with h5py.File(tmp, "w") as f:
            for key, value in data.items(include_nested=True, leaves_only=True):
                name = "/".join((key,) if isinstance(key, str) else key)
                arr = cast(torch.Tensor, value).numpy()
                opts = self.kwargs if arr.ndim else {}
                f.create_dataset(name, data=arr, **opts)
        tmp.replace(self._h5)

    def _read_data(self, path: Path) -> TensorDictBase:
        import h5py

        out: dict = {}
        with h5py.File(self._h5, "r") as f:

            def visit(name: str, obj: Any) -> None:
                if isinstance(obj, h5py.Dataset):
                    d = out
                    parts = name.split("/")
                    for p in parts[:-1]:
                        d = d.setdefault(p, {})
                    d[parts[-1]] = torch.from_numpy(obj[()] if obj.shape else obj[()].reshape(()))

            f.visititems(visit)
        return TensorDict(out, batch_size=[])


class ListStorageCheckpointer(StorageCheckpointerBase):
    """The default of list storages: the items with ``torch.save`` (loaded with ``weights_only=True``)."""

    def dumps(self, storage: Any, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        torch.save(storage.state_dict(), path / "items.pt")
        write_json_atomic(
            path / "storage.json",
            {
                "format": _FORMAT,
                "version": 1,
                "class": type(storage).__name__,
                "len": len(storage),
                "max_size": storage.max_size,
                "checkpointer": type(self).__name__,
            },
        )

    def loads(self, storage: Any, path: str | Path) -> None:
        path = Path(path)
        meta = self._read_meta(path, storage)
        if meta.get("class") != type(storage).__name__:
            raise ValueError(
                f"{path} holds a {meta.get('class')} dump; it cannot be loaded into a {type(storage).__name__}"
            )
        storage.load_state_dict(torch.load(path / "items.pt", weights_only=True))


class StorageEnsembleCheckpointer(StorageCheckpointerBase):
    """The default of storage ensembles: member ``i`` with its own checkpointer under ``<path>/<i>``."""

    def dumps(self, storage: Any, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for i, member in enumerate(storage.storages):
            member.dumps(path / str(i))
        write_json_atomic(
            path / "storage.json",
            {
                "format": _FORMAT,
                "version": 1,
                "class": "StorageEnsemble",
                "members": len(storage.storages),
                "checkpointer": type(self).__name__,
            },
        )

    def loads(self, storage: Any, path: str | Path) -> None:
        path = Path(path)
        meta = self._read_meta(path, storage)
        if meta["members"] != len(storage.storages):
            raise ValueError(f"{path} holds {meta['members']} storages; this ensemble has {len(storage.storages)}")
        for i, member in enumerate(storage.storages):
            member.loads(path / str(i))


def as_checkpointer(value: Any) -> StorageCheckpointerBase:
    """A checkpointer instance from an instance or a zero-argument constructor (TorchRL accepts both)."""
    if (isinstance(value, type) and issubclass(value, StorageCheckpointerBase)) or (
        not isinstance(value, StorageCheckpointerBase) and callable(value)
    ):
        value = value()
    if not isinstance(value, StorageCheckpointerBase):
        raise TypeError(f"a checkpointer must be a StorageCheckpointerBase, got {type(value).__name__}")
    return value
