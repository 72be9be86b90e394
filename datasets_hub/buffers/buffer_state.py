"""Saving and restoring a replay buffer: ``state_dict`` / ``load_state_dict`` and ``dumps`` / ``loads``.

:class:`BufferState` is a part of :class:`~datasets_hub.buffers.replay_buffers.ReplayBuffer`. The
directory ``dumps`` writes (``buffer.json``, format ``datasets_hub.replay_buffer``, version 1):
``storage/`` (the storage's own dump, with its checkpointer; absent for read-only builds, which are
never copied), ``sampler.pt``, ``generator.pt`` (when the sampler has a generator) and ``writer.json``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.storages import Storage
from datasets_hub.buffers.writers import Writer
from datasets_hub.files import write_json_atomic

_FORMAT = "datasets_hub.replay_buffer"


class BufferState:
    """The state of a replay buffer in memory and on disk (a mixin: the buffer holds the state)."""

    _storage: Storage
    _sampler: Sampler
    _writer: Writer
    _lock: threading.RLock
    _batch_size: int | None

    if TYPE_CHECKING:

        def __len__(self) -> int: ...
        def _drain(self) -> None: ...
        @property
        def write_count(self) -> int: ...

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "_storage": self._storage.state_dict(),
                "_sampler": self._sampler.state_dict(),
                "_writer": self._writer.state_dict(),
                "_batch_size": self._batch_size,
            }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._drain()
        with self._lock:
            self._storage.load_state_dict(state_dict["_storage"])
            self._sampler.load_state_dict(state_dict["_sampler"])
            self._writer.load_state_dict(state_dict["_writer"])

    def dumps(self, path: str | Path) -> None:
        """Save storage, sampler, writer (and generator) state under the directory ``path``.

        Tensor storages are written as a tensordict memmap tree, metadata as JSON, sampler state with
        ``torch.save`` (loaded back with ``weights_only=True``). Read-only dataset storages are not
        copied: only the sampler and writer state are saved. With ``prefetch``, the saved sampler
        state is the one after the batches already in flight.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if not getattr(self._storage, "read_only", False):  # read-only builds are not copied
                self._storage.dumps(path / "storage")  # with the storage's checkpointer
            torch.save(self._sampler.state_dict(), path / "sampler.pt")
            gen = self._sampler.generator
            if gen is not None:
                torch.save({"state": gen.get_state()}, path / "generator.pt")
            write_json_atomic(path / "writer.json", self._writer.state_dict())
            write_json_atomic(
                path / "buffer.json",
                {
                    "format": _FORMAT,
                    "version": 1,
                    "storage": type(self._storage).__name__,
                    "sampler": type(self._sampler).__name__,
                    "writer": type(self._writer).__name__,
                    "batch_size": self._batch_size,
                    "len": len(self),
                    "write_count": self.write_count,
                },
            )

    def loads(self, path: str | Path) -> None:
        """Restore what :meth:`dumps` saved into this buffer (built with the same component kinds)."""
        path = Path(path)
        meta_path = path / "buffer.json"
        if not meta_path.exists():
            raise FileNotFoundError(
                f"{path} holds no dumped replay buffer (no buffer.json): pass a path written by dumps()"
            )
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != _FORMAT:
            raise ValueError(f"{meta_path} is not a datasets_hub replay-buffer dump")
        for part, obj in (("sampler", self._sampler), ("writer", self._writer)):
            if meta[part] != type(obj).__name__:
                raise ValueError(
                    f"{path} was dumped with a {meta[part]} but this buffer has a {type(obj).__name__}: "
                    f"build the buffer with a {meta[part]} to load it"
                )
        self._drain()
        with self._lock:
            if (path / "storage").exists() and not getattr(self._storage, "read_only", False):
                self._storage.loads(path / "storage")
            self._sampler.load_state_dict(torch.load(path / "sampler.pt", weights_only=True))
            gen = self._sampler.generator
            if gen is not None and (path / "generator.pt").exists():
                gen.set_state(torch.load(path / "generator.pt", weights_only=True)["state"])
            self._writer.load_state_dict(json.loads((path / "writer.json").read_text()))

    dump = dumps  # TorchRL's aliases
    load = loads
