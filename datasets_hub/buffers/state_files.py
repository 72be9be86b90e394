"""``dumps``/``loads`` of a writer's or sampler's state: one file in a directory, as TorchRL's parts do.

``dump_state(part, path)`` writes ``part.state_dict()`` with ``torch.save`` to ``<path>/<kind>_state.pt``
atomically (a reader never sees half a file); ``load_state(part, path)`` reads it back with
``weights_only=True`` (no code runs on load) into ``part.load_state_dict``. ``kind`` is ``"writer"`` or
``"sampler"``, so one directory can hold both, next to a storage's own dump.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from datasets_hub.files import write_bytes_atomic

_META = "__datasets_hub_part__"


def dump_state(part: Any, kind: str, path: str | Path) -> None:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save({_META: type(part).__name__, "state": part.state_dict()}, buffer)
    write_bytes_atomic(path / f"{kind}_state.pt", buffer.getvalue())


def load_state(part: Any, kind: str, path: str | Path) -> None:
    file = Path(path) / f"{kind}_state.pt"
    if not file.exists():
        raise FileNotFoundError(
            f"{path} holds no dumped {kind} ({file.name} is missing): pass a path {kind}.dumps() wrote"
        )
    saved = torch.load(file, weights_only=True)
    if saved.get(_META) != type(part).__name__:
        raise ValueError(
            f"{file} holds the state of a {saved.get(_META)}, not of a {type(part).__name__}: load it into a "
            f"{saved.get(_META)}"
        )
    part.load_state_dict(saved["state"])
