"""One Minari episode -> flat TED columns (the mapping half of the Minari loader).

Everything here is pure numpy on the episode dicts that ``MinariStorage.get_episodes`` returns
(both backends decode to the same structure), so the mapping can be read and tested on its own:

- observations (T+1 rows) -> ``observation`` = rows ``[:-1]`` and ``("next", "observation")`` =
  rows ``[1:]``; the core stores them once per episode. ``Dict`` spaces become nested keys
  (``("observation", "<name>", ...)``), ``Tuple`` spaces nested keys ``"0"``, ``"1"``, … in order.
- actions (T rows) -> ``action`` with the same nesting rules;
- rewards -> ``("next", "reward")`` ``[T, 1]`` (upstream dtype), terminations / truncations ->
  ``("next", "terminated")`` / ``("next", "truncated")`` bool ``[T, 1]``, the Minari episode id
  -> ``episode`` (int64);
- ``Text`` spaces (e.g. MiniGrid's ``mission``) -> uint8 ``[W]`` per row: the UTF-8 bytes
  zero-padded to ``W = max_length * (longest UTF-8 character of the charset)``; read them back
  with :func:`~datasets_hub.loaders.formats.text.decode_text`. The core stores tensors only, and a fixed width known from the space
  keeps every chunk's schema equal;
- infos, key by key (nested dicts become nested keys): a leaf with T+1 rows (Minari's
  ``DataCollector`` records the reset info and then one info per step) is observation-like:
  ``("info", k)`` = rows ``[:-1]`` (the info that came with the observation at t) and
  ``("next", "info", k)`` = rows ``[1:]`` (the info returned by ``step(action[t])``); a leaf with T
  rows is kept per step as ``("info", k)`` at row t, unshifted (Minari does not say whether such
  an info belongs to t or t+1); leaves with another length or holding strings/objects are dropped
  and listed in the dataset card.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from datasets_hub.errors import LoaderError
from datasets_hub.loaders.formats.text import encode_text

Key = tuple[str, ...]


def text_width(space: Any) -> int:
    """Bytes per row used to store a ``gymnasium.spaces.Text`` value."""
    chars = getattr(space, "characters", "") or ""
    widest = max((len(c.encode("utf-8")) for c in chars), default=4)
    return int(space.max_length) * widest


def space_columns(space: Any, values: Any, key: Key, n: int) -> Iterator[tuple[Key, np.ndarray]]:
    """Walk ``values`` along ``space`` and yield ``(key, array with n rows)`` leaves."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        if not isinstance(values, Mapping):
            raise LoaderError(f"{'/'.join(key)!r}: the space is a Dict but the data is {type(values).__name__}")
        for name, sub in space.spaces.items():
            if name not in values:
                raise LoaderError(f"{'/'.join(key)!r}: the Dict space has {name!r} but the episode data does not")
            yield from space_columns(sub, values[name], (*key, str(name)), n)
    elif isinstance(space, spaces.Tuple):
        if len(values) != len(space.spaces):
            raise LoaderError(
                f"{'/'.join(key)!r}: the Tuple space has {len(space.spaces)} parts, the data {len(values)}"
            )
        for i, (sub, part) in enumerate(zip(space.spaces, values, strict=True)):
            yield from space_columns(sub, part, (*key, str(i)), n)
    elif isinstance(space, spaces.Text):
        yield key, _rows(encode_text(values, text_width(space), key), key, n)
    else:
        array = np.asarray(values)
        if array.dtype == object:
            raise LoaderError(f"{'/'.join(key)!r} holds Python objects under a {type(space).__name__} space")
        yield key, _rows(array, key, n)


def text_keys(space: Any, key: Key) -> dict[str, int]:
    """``{"a/b": width}`` for every Text leaf of ``space`` under ``key`` (for the card)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return {k: w for name, sub in space.spaces.items() for k, w in text_keys(sub, (*key, str(name))).items()}
    if isinstance(space, spaces.Tuple):
        return {k: w for i, sub in enumerate(space.spaces) for k, w in text_keys(sub, (*key, str(i))).items()}
    if isinstance(space, spaces.Text):
        return {"/".join(key): text_width(space)}
    return {}


def _rows(array: np.ndarray, key: Key, n: int) -> np.ndarray:
    if array.ndim == 0 or array.shape[0] != n:
        raise LoaderError(
            f"{'/'.join(key)!r} has {0 if array.ndim == 0 else array.shape[0]} rows where {n} were "
            "expected; the Minari episode is malformed (or longer than one Arrow record batch)"
        )
    return np.ascontiguousarray(array)


def _info_leaves(infos: Any, key: Key) -> Iterator[tuple[Key, Any]]:
    if isinstance(infos, Mapping):
        for name, value in infos.items():
            yield from _info_leaves(value, (*key, str(name)))
    elif isinstance(infos, tuple):
        for i, value in enumerate(infos):
            yield from _info_leaves(value, (*key, str(i)))
    else:
        yield key, infos


def episode_columns(
    episode: Mapping[str, Any],
    observation_space: Any,
    action_space: Any,
    dropped: dict[str, str],
    info_layout: dict[str, str],
) -> dict[Key, np.ndarray]:
    """The TED columns of one episode dict (``id``, ``observations``, ``actions``, ``rewards``,
    ``terminations``, ``truncations``, ``infos``). ``dropped`` and ``info_layout`` collect, per
    info key, why it was dropped / how it was mapped."""
    rewards = np.asarray(episode["rewards"])
    steps = int(rewards.shape[0])
    if steps == 0:
        raise LoaderError(f"Minari episode {episode.get('id')} has no steps")
    cols: dict[Key, np.ndarray] = {}
    for key, obs in space_columns(observation_space, episode["observations"], ("observation",), steps + 1):
        cols[key] = obs[:-1]
        cols[("next", *key)] = obs[1:]
    for key, action in space_columns(action_space, episode["actions"], ("action",), steps):
        cols[key] = action
    cols[("next", "reward")] = _rows(rewards, ("rewards",), steps).reshape(steps, 1)
    for name, flag in (("terminations", "terminated"), ("truncations", "truncated")):
        cols[("next", flag)] = _rows(np.asarray(episode[name]), (name,), steps).astype(bool).reshape(steps, 1)
    cols[("episode",)] = np.full(steps, int(episode["id"]), dtype=np.int64)
    for key, value in _info_leaves(episode.get("infos") or {}, ("info",)):
        name = "/".join(key)
        if name in dropped:  # dropped once, dropped everywhere: every chunk keeps one schema
            continue
        array = np.asarray(value) if not isinstance(value, np.ndarray) else value
        if array.dtype == object or array.dtype.kind in "SUO":
            dropped[name] = "holds strings or Python objects (only numeric infos are kept)"
            continue
        rows = array.shape[0] if array.ndim else -1
        if rows == steps + 1:
            cols[key] = np.ascontiguousarray(array[:-1])
            cols[("next", *key)] = np.ascontiguousarray(array[1:])
            info_layout[name] = "T+1 rows: info at t, next/info at t+1"
        elif rows == steps:
            cols[key] = np.ascontiguousarray(array)
            info_layout[name] = "T rows: kept per step at t"
        else:
            dropped[name] = f"has {rows if rows >= 0 else 'no'} rows in an episode of {steps} steps (neither T nor T+1)"
    return cols
