"""``LazyMemmapStorage``: a tensor storage whose leaves are memory-mapped files (TorchRL's class).

Files are allocated from the first write under ``scratch_dir``; other processes that receive the
storage (pickled, e.g. by ``torch.multiprocessing``) reopen the same files.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from datasets_hub.buffers.disk_space import full_disk_error, memmap_filenames, reserve_files
from datasets_hub.buffers.nested_keys import nest
from datasets_hub.buffers.tensor_leaves import decode_meta, leaves_of
from datasets_hub.buffers.tensor_storages import TensorStorage
from datasets_hub.errors import InvalidArgument, StorageExists
from datasets_hub.files import write_json_atomic


class LazyMemmapStorage(TensorStorage):
    """Memory-mapped files allocated from the first write under ``scratch_dir``.

    TorchRL's keywords: ``ndim``, ``existsok``, ``compilable``; ``shared_init=True`` shares the
    storage from the start (the first process to write allocates the files, the others adopt
    them); ``auto_cleanup`` (default: True for a temporary ``scratch_dir``, False for one you
    named) removes the files when the storage is collected or the process exits.

    ``scratch_dir=None`` uses a fresh temporary directory removed when this storage object is
    garbage-collected in the process that created it. The files hold ``max_size`` rows, their disk
    blocks reserved at allocation (a full disk is a ``CacheError`` then, never a SIGBUS later).
    ``existsok=False`` refuses to overwrite a scratch dir already holding a storage.
    Sent to another process, the storage reopens the same files; after ``share()`` its length and
    version live in shared memory, so writes in a child are visible in the parent.
    """

    _mm_td: Any = None  # the memory-mapped TensorDict of the files (keeps the mappings alive)

    def __init__(
        self,
        max_size: int,
        scratch_dir: str | Path | None = None,
        ndim: int = 1,
        existsok: bool = False,
        *,
        device: Any = "cpu",
        compilable: bool = False,
        shared_init: bool = False,
        auto_cleanup: bool | None = None,
    ) -> None:
        super().__init__(None, max_size, ndim=ndim, device=device, compilable=compilable)
        self._existsok = existsok
        temp = scratch_dir is None
        directory = tempfile.mkdtemp(prefix="datasets_hub_memmap_") if scratch_dir is None else scratch_dir
        self.scratch_dir_is_temp = temp
        self.auto_cleanup = temp if auto_cleanup is None else bool(auto_cleanup)
        self.cleaned_up = False
        # auto_cleanup: the creating process removes the files when the storage is collected or at exit
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(directory), True) if self.auto_cleanup else None
        self.scratch_dir = Path(directory)
        # the rows are files every process maps: the length and version are seen by forked children too
        if not compilable:
            self._fork_share_counters()
        if shared_init:  # the first process to write allocates the files, the others adopt them
            self.share()

    @property
    def _data_dir(self) -> Path:
        return self.scratch_dir / "data"

    def _alloc_leaves(self, keys, shapes, row_batch) -> list[torch.Tensor]:
        if self.cleaned_up:  # the buffer's writer and sampler still count the removed items: refuse
            raise InvalidArgument(
                "this LazyMemmapStorage was removed by cleanup(): build a new storage (and buffer) to write again"
            )
        data_dir = self._data_dir
        if (self.scratch_dir / "storage.json").exists() and not self._existsok:
            raise StorageExists(
                f"{self.scratch_dir} already holds a memmap storage; pass existsok=True to overwrite it, "
                "or choose another scratch_dir"
            )
        src = nest(keys, [torch.empty((), dtype=dtype).expand(self.max_size, *shape) for shape, dtype in shapes])
        template = TensorDict(src, batch_size=[self.max_size, *row_batch])
        data_dir.mkdir(parents=True, exist_ok=True)
        what = f"LazyMemmapStorage(max_size={self.max_size})"
        try:
            td = template.memmap_like(prefix=data_dir, existsok=True)
        except (OSError, RuntimeError) as exc:
            error = full_disk_error(exc, what, data_dir)
            if error is None:
                raise
            shutil.rmtree(data_dir, ignore_errors=True)
            raise error from exc
        try:  # real blocks now: a full disk is a CacheError here, never a SIGBUS at some later write
            reserve_files(memmap_filenames(td), what)
        except BaseException:
            del td
            shutil.rmtree(data_dir, ignore_errors=True)
            raise
        self._mm_td = td  # keeps the mappings alive
        return leaves_of(td, keys)

    def _alloc_new_leaves(self, keys: list, shapes: list) -> list[torch.Tensor]:
        """New files beside the existing ones (keys a ``write_all`` adds), named as the first allocation
        names them, with the tensordict metadata rewritten to list every leaf; their blocks are reserved
        at once, as for the first allocation."""
        old = leaves_of(self._mm_td, self._keys)  # already at their place: memmap_like leaves them as they are
        fresh = [torch.empty((), dtype=dtype).expand(self.max_size, *shape) for shape, dtype in shapes]
        template = TensorDict(nest(self._keys + list(keys), old + fresh), batch_size=[self.max_size, *self._row_batch])
        self._mm_td = template.memmap_like(prefix=self._data_dir, existsok=True)
        reserve_files([self._mm_td.get(key).filename for key in keys], f"LazyMemmapStorage(max_size={self.max_size})")
        return leaves_of(self._mm_td, list(keys))

    def _attach(self, kind, keys, leaves, meta, row_batch) -> None:
        super()._attach(kind, keys, leaves, meta, row_batch)
        info = self._meta_json()
        info.pop("len"), info.pop("write_version")
        write_json_atomic(self.scratch_dir / "storage.json", info)

    # TorchRL's attribute names (read by code written against it): the public ones above
    @property
    def _auto_cleanup(self) -> bool:
        return self.auto_cleanup

    @property
    def _scratch_dir_is_temp(self) -> bool:
        return self.scratch_dir_is_temp

    @property
    def _cleaned_up(self) -> bool:
        return self.cleaned_up

    @property
    def _storage(self) -> Any:
        """The memory-mapped allocation (leaves carry their ``filename``) for one-dimensional TensorDict
        data; as :attr:`TensorStorage._storage` otherwise."""
        if self.initialized and self._kind == "td" and self.ndim == 1:
            return self._mm_td
        return super()._storage

    def cleanup(self) -> bool:
        """Remove this storage's directory and files now (TorchRL's ``cleanup``), whatever ``auto_cleanup``.

        The storage forgets its items and its allocation, and refuses later writes (the buffer's writer
        and sampler would still count the removed items): build a new one to write again. Returns
        True when files were removed, False when there were none (never written, or the directory is
        already gone); calling it again is harmless. Other processes mapping the files keep their
        mappings until they drop them."""
        had_files = self.initialized and self.scratch_dir.exists()
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._mm_td = None
        self._kind, self._keys, self._schema, self._plain, self._td, self._meta = None, [], [], [], None, None
        self._np, self._row_batch = [], ()
        self._set_len(0)
        self._bump_version()
        if had_files or (self.scratch_dir_is_temp and self.scratch_dir.exists()):
            shutil.rmtree(self.scratch_dir, ignore_errors=True)
        self.cleaned_up = True
        return had_files

    @property
    def rows_visible_to_children(self) -> bool:
        """Always True: the rows are files that every process maps."""
        return True

    def _maybe_attach_shared(self) -> None:
        # another process (a shared buffer's, or a forked child, which moved our length) allocated the files
        meta_path = self.scratch_dir / "storage.json"
        if (self._shared or len(self) > 0) and meta_path.exists():
            self._reopen(json.loads(meta_path.read_text()))

    def _reopen(self, info: dict[str, Any]) -> None:
        td = TensorDict.load_memmap(self._data_dir, allow_pickle=False)
        self._mm_td = td
        keys = [tuple(k) for k in info["keys"]]
        TensorStorage._attach(
            self,
            info["kind"],
            keys,
            leaves_of(td, keys),
            decode_meta(info["kind"], info["meta"]),
            tuple(info["row_batch"]),
        )

    def share(self) -> None:
        """Put the length and version in torch shared memory: processes the storage is sent to count with it
        (the rows are files, visible to every process already)."""
        self._share_counters()
        self._shared = True

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()  # a process being spawned gets the counters shared (see TensorStorage)
        for k in (
            "_plain",
            "_np",
            "_mm_td",
            "_td",
            "_finalizer",
            "_meta",
            "_paths",
            "_flat",
            "_kind",
            "_keys",
            "_schema",
            "_row_batch",
        ):
            state.pop(k, None)
        state["_was_initialized"] = self.initialized
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        was = state.pop("_was_initialized")
        self.__dict__.update(state)
        self._refresh_counters()
        self._finalizer = None  # only the creating process removes the scratch dir
        self._kind, self._keys, self._schema, self._plain, self._td, self._meta = None, [], [], [], None, None
        self._np = []
        self._row_batch = ()
        if was or self._shared:
            meta_path = self.scratch_dir / "storage.json"
            if meta_path.exists():
                self._reopen(json.loads(meta_path.read_text()))
