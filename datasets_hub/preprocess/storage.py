"""Read-only storage over one preprocessing result (see :mod:`datasets_hub.preprocess.pipeline`).

A result directory holds ``manifest.json`` (format ``datasets_hub.preprocessed``: schema with one
file per leaf, row count, fingerprints), the leaf memmaps and, when the parent had one, the
parent's episode index as ``episodes.pt``.
"""

from __future__ import annotations

import shutil
import weakref
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.nested_keys import Key, nest, parse_key
from datasets_hub.buffers.storages import ReadOnlyStorage
from datasets_hub.buffers.tensor_storages import TensorStorage
from datasets_hub.build.checks import check_preprocessed
from datasets_hub.build.reader import open_leaf
from datasets_hub.cache.layout import mark_used, read_manifest
from datasets_hub.errors import CacheError, ReadOnlyError

FORMAT = "datasets_hub.preprocessed"


def _open_schema(root: Path, manifest: dict[str, Any], mode: str) -> dict[Key, torch.Tensor]:
    rows = int(manifest["counts"]["transitions"])
    return {
        parse_key(name): open_leaf(root / spec["file"], spec["dtype"], spec["shape"], rows, mode=mode)
        for name, spec in manifest["schema"].items()
    }


class PreprocessedStorage(ReadOnlyStorage, TensorStorage):
    """Read-only storage over one preprocessing result (the directory holding its manifest.json).

    Rows are the transform's output, in the parent's row order; ``episode_index()`` is the
    parent's (when it had one). Sent to another process, it reopens the same files.
    """

    read_only_what = "preprocessing result"

    def __init__(self, path: str | Path, *, _cleanup: Path | None = None) -> None:
        self.path = Path(path)
        manifest = read_manifest(self.path)
        if manifest is None or manifest.get("format") != FORMAT:
            raise CacheError(f"{self.path} holds no complete preprocessing result (no manifest.json); preprocess again")
        self.manifest: dict[str, Any] = manifest
        check_preprocessed(self.path, self.manifest)  # paths inside the result, sizes: before any mmap
        leaves = _open_schema(self.path, self.manifest, "c")
        n = int(self.manifest["counts"]["transitions"])
        super().__init__(TensorDict(nest(leaves.keys(), leaves.values()), batch_size=[n]))
        index_file = self.path / "episodes.pt"
        self._index = None
        if index_file.exists():
            saved = torch.load(index_file, weights_only=True)
            self._index = EpisodeIndex(saved["start"], saved["length"])
        if _cleanup is None:
            mark_used(self.path)  # `cache ls` shows the last use
        # an uncached result lives in a temporary directory, removed with the storage that made it
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(_cleanup), True) if _cleanup else None

    def dumps(self, path: str | Path) -> None:
        """Refused: a result is never copied (``ReplayBuffer.dumps`` leaves read-only storages out); it
        stays in the cache under its fingerprint, where ``preprocess`` with the same fn finds it again."""
        raise CacheError(
            f"a preprocessing result is not dumped: it stays in the cache at {self.path}, where preprocess() "
            "with the same fn and parent finds it again (rb.dumps(path) saves the sampler and writer state without it)"
        )

    def loads(self, path: str | Path) -> None:
        """Refused: a preprocessing result is read-only (:class:`~datasets_hub.errors.ReadOnlyError`)."""
        raise ReadOnlyError(self.read_only_what)

    @property
    def fingerprint(self) -> str | None:
        return self.manifest.get("fingerprint")

    def episode_index(self) -> EpisodeIndex | None:
        return self._index

    def state_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "fingerprint": self.fingerprint}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("fingerprint") != self.fingerprint:
            raise ValueError(
                f"this state belongs to result {state_dict.get('fingerprint')!r}, not {self.fingerprint!r}"
            )

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path)}  # the creating process alone removes a temporary result

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["path"])

    def __repr__(self) -> str:
        transform = (self.manifest.get("transform") or {}).get("name")
        return f"PreprocessedStorage({transform!r}, transitions={len(self)}, path={str(self.path)!r})"
