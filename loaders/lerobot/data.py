"""The frames of one LeRobot episode from its parquet data file (the tabular half of the
``lerobot`` loader).

A v3.0 data file holds several episodes; each file is read once, while episodes that live in it
remain to be built, and an episode's rows are the contiguous run whose ``episode_index`` is the
episode's. Its rows must agree with the episode metadata: as many rows as ``length``, the global
``index`` running from ``dataset_from_index`` to ``dataset_to_index - 1`` (v3.0), and
``frame_index`` counting 0..length-1. A disagreement is an error naming the episode and the file.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from datasets_hub.errors import CorruptFile, LoaderError
from datasets_hub.loaders.lerobot import meta as lm


def key_of(name: str) -> tuple[str, ...]:
    """TED key of a LeRobot feature name (see the table in :mod:`.loader`)."""
    if name == "action":
        return ("action",)
    if name == "observation" or name.startswith("observation."):
        return ("observation", *[p for p in name.split(".")[1:] if p])
    return ("info", name)


def keys_of(names: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """TED keys of a dataset's features: :func:`key_of`, except where a feature's key would nest
    under another feature's leaf (LeRobot's DROID port has ``observation.state`` and
    ``observation.state.joint_position``): the nested one keeps the rest of its name, dots
    included, in one component (``("observation", "state.joint_position")``)."""
    keys = {name: key_of(name) for name in names}
    leaves = set(keys.values())
    out = {}
    for name, key in keys.items():
        cut = next((n for n in range(1, len(key)) if key[:n] in leaves), None)
        out[name] = key if cut is None else (*key[: cut - 1], ".".join(key[cut - 1 :]))
    return out


def text_column(table: Any, name: str, rows: int) -> list[str]:
    """A string feature's column (``"dtype": "string"`` in info.json) as ``rows`` Python strings."""
    import pyarrow as pa

    if name not in table.column_names:
        raise LoaderError(f"column {name!r} is missing from the data file (it has {table.column_names})")
    array = _flatten(table.column(name).combine_chunks())
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        raise LoaderError(f"column {name!r} holds {array.type}, but info.json declares a string feature")
    values = array.to_pylist()
    if len(values) != rows:
        raise LoaderError(f"column {name!r} has {len(values)} values for {rows} rows")
    return ["" if v is None else v for v in values]


def _flatten(array: Any) -> Any:
    import pyarrow as pa

    while pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or pa.types.is_fixed_size_list(array.type):
        array = array.flatten()
    return array


def column(table: Any, name: str, rows: int, shape: Sequence[int] | None = None) -> np.ndarray:
    """Column ``name`` of a pyarrow table as a numpy array with ``rows`` rows: ``[rows]`` for
    scalars, ``[rows, *shape]`` for list features (``shape`` from info.json; ``[1]`` scalars stay
    ``[rows, 1]`` when their feature says so)."""
    if name not in table.column_names:
        raise LoaderError(f"column {name!r} is missing from the data file (it has {table.column_names})")
    array = _flatten(table.column(name).combine_chunks())
    values = array.to_numpy(zero_copy_only=False)
    if values.dtype == object:
        raise LoaderError(f"column {name!r} holds {array.type}, not numbers")
    if values.size % rows:
        raise LoaderError(f"column {name!r} has {values.size} values for {rows} rows")
    per_row = values.size // rows
    if shape is not None and int(np.prod(shape)) == per_row:
        values = values.reshape(rows, *[int(s) for s in shape])
    else:
        values = values.reshape(rows) if per_row == 1 else values.reshape(rows, per_row)
    # arrow hands out read-only views; the chunk owns its arrays
    return np.array(values, copy=True, order="C")


class EpisodeReader:
    """Rows of the selected episodes, each data file read once (see the module docstring)."""

    def __init__(self, where: str, meta: lm.Meta, local: Mapping[str, Path], episodes: list[lm.Episode]) -> None:
        self.where, self.meta, self.local = where, meta, local
        self.uses = Counter(e.data_path for e in episodes)
        self._tables: dict[str, tuple[Any, np.ndarray]] = {}

    def _table(self, path: str) -> tuple[Any, np.ndarray]:
        import pyarrow.parquet as pq

        if path not in self._tables:
            if path not in self.local:
                raise LoaderError(f"{self.where}: {path} was not fetched")
            try:
                table = pq.read_table(str(self.local[path]))
            except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
                raise CorruptFile(
                    f"{self.where}: cannot read the parquet file {path}: {exc}", path=self.local[path]
                ) from exc
            if "episode_index" not in table.column_names:
                raise LoaderError(f"{self.where}: {path} has no episode_index column")
            self._tables[path] = (table, column(table, "episode_index", table.num_rows))
        return self._tables[path]

    def rows(self, episode: lm.Episode) -> Any:
        """The pyarrow table of ``episode``'s rows, checked against its metadata."""
        path = episode.data_path
        table, index = self._table(path)
        self.uses[path] -= 1
        if self.uses[path] <= 0:
            self._tables.pop(path, None)  # the last episode of this file: let it go
        found = np.flatnonzero(index == episode.index)
        where = f"{self.where}: episode {episode.index} ({path})"
        if found.size != episode.length:
            raise LoaderError(
                f"{where}: the data file has {found.size} rows with episode_index {episode.index} but "
                f"the episode metadata says length {episode.length}; the dataset disagrees with itself"
            )
        if found.size == 0:
            raise LoaderError(f"{where}: the episode has no rows")
        if found[-1] - found[0] + 1 != found.size:
            raise LoaderError(f"{where}: the episode's rows are not contiguous in the data file")
        rows = table.slice(int(found[0]), int(found.size))
        n = episode.length
        if "frame_index" in rows.column_names and not np.array_equal(column(rows, "frame_index", n), np.arange(n)):
            raise LoaderError(f"{where}: frame_index does not count 0..{n - 1}")
        if episode.from_index is not None and "index" in rows.column_names:
            idx = column(rows, "index", n)
            expected = np.arange(episode.from_index, episode.from_index + n)
            if episode.to_index != episode.from_index + n or not np.array_equal(idx, expected):
                raise LoaderError(
                    f"{where}: the rows' index runs {int(idx[0])}..{int(idx[-1])} but meta/episodes says "
                    f"dataset_from_index={episode.from_index}, dataset_to_index={episode.to_index}"
                )
        if "timestamp" not in rows.column_names and self.meta.video_keys:
            raise LoaderError(f"{where}: no timestamp column; frames cannot be matched to rows")
        return rows

    def images(
        self,
        rows: Any,
        name: str,
        episode: int,
        image_size: tuple[int, int] | None,
        shape: tuple[int, ...],
        channels_first: bool,
    ) -> np.ndarray:
        """An image feature stored in the parquet (PNG/JPEG bytes) as uint8 frames ``[T, *shape]``."""
        from PIL import Image

        from datasets_hub.loaders.lerobot.video import image_to_rgb

        out = np.empty((rows.num_rows, *shape), dtype=np.uint8)
        for t, cell in enumerate(rows.column(name).to_pylist()):
            data = cell.get("bytes") if isinstance(cell, dict) else cell
            if not data:
                raise LoaderError(
                    f"{self.where}: episode {episode}, image {name!r} row {t} has no image bytes "
                    "(images stored as paths outside the parquet are not supported)"
                )
            try:
                with Image.open(io.BytesIO(data)) as img:
                    array = np.asarray(img.convert("RGB"))
            except Exception as exc:  # PIL raises many types for bad bytes
                raise LoaderError(
                    f"{self.where}: episode {episode}, image {name!r} row {t} cannot be decoded ({exc})"
                ) from exc
            pixels = image_to_rgb(array, image_size, channels_first)
            if pixels.shape != shape:
                raise LoaderError(
                    f"{self.where}: episode {episode}, image {name!r} row {t} is {pixels.shape}, "
                    f"not the {shape} its feature declares"
                )
            out[t] = pixels
        return out
