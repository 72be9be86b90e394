"""Nested TensorDict keys as tuples, and nested dicts built from them: one home for the helpers
every layer uses (the buffer layer, the build format, the storages over builds).

A key is ``"obs"`` or ``("next", "obs")``; :func:`as_key` makes both a tuple. On disk and in
manifests a key is written ``"next/obs"`` (:func:`key_to_str` / :func:`parse_key`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

Key = tuple[str, ...]


def as_key(key: str | Iterable[str]) -> Key:
    """``"obs"`` -> ``("obs",)``; a tuple (or list) of names -> that tuple."""
    return (key,) if isinstance(key, str) else tuple(key)


def key_to_str(key: str | Iterable[str]) -> str:
    """``("next", "obs")`` -> ``"next/obs"`` (a plain string is returned as it is)."""
    return key if isinstance(key, str) else "/".join(key)


def parse_key(name: str) -> Key:
    """``"next/obs"`` -> ``("next", "obs")``: the inverse of :func:`key_to_str`."""
    return tuple(name.split("/"))


def put(tree: dict[str, Any], key: str | Iterable[str], value: Any) -> None:
    """Set ``value`` at ``key`` in the nested dict ``tree``, creating the inner dicts."""
    key = as_key(key)
    for part in key[:-1]:
        tree = tree.setdefault(part, {})
    tree[key[-1]] = value


def nest(
    keys: Iterable[str | Iterable[str]], values: Iterable[Any], into: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The nested dict holding ``values`` at ``keys`` (merged into ``into`` when given)."""
    tree = {} if into is None else into
    # inlined put(): this builds every sampled batch, and a call per key costs as much as a small gather
    for name, value in zip(keys, values, strict=True):
        if type(name) is str:
            tree[name] = value
            continue
        key = name if type(name) is tuple else tuple(name)
        node = tree
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = value
    return tree


class NestPlan:
    """The nested dict of fixed ``keys`` built again and again (one per sampled batch): where each key
    goes is worked out once, so that a build makes each dict in one step, innermost first. The result
    is the dict :func:`nest` makes of the same keys and values, its keys in the same order."""

    def __init__(self, keys: Iterable[str | Iterable[str]]) -> None:
        self.keys: list[Key] = [as_key(k) for k in keys]
        # each dict's entries in nest()'s order: a name and its value's index, or an inner dict's path
        entries: dict[Key, list[tuple[str, int | Key]]] = {(): []}
        for i, key in enumerate(self.keys):
            for depth in range(1, len(key)):
                path = key[:depth]
                if path not in entries:
                    entries[path] = []
                    entries[path[:-1]].append((path[-1], path))
            entries[key[:-1]].append((key[-1], i))
        # a build extends the values with each dict as it is made, innermost first (the root last)
        order = sorted(entries, key=len, reverse=True)
        made = {path: len(self.keys) + n for n, path in enumerate(order)}
        self._dicts: list[tuple[tuple[str, ...], Callable[[list[Any]], Any], bool, bool]] = []
        for path in order:
            names = tuple(name for name, _ in entries[path])
            picks = [made[source] if isinstance(source, tuple) else source for _, source in entries[path]]
            self._dicts.append((names, operator.itemgetter(*picks), len(picks) == 1, path != ()))

    def build(self, values: Sequence[Any], inner: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
        """The nested dict holding ``values``, one per key of ``keys`` and in their order; ``inner``, when
        given, turns each inner dict into what its parent holds (e.g. a TensorDict), innermost first."""
        if len(values) != len(self.keys):
            raise ValueError(f"{len(values)} values for {len(self.keys)} keys")
        made = list(values)
        for names, pick, single, is_inner in self._dicts:
            picked = pick(made)
            tree = dict(zip(names, (picked,) if single else picked, strict=True))
            made.append(inner(tree) if inner is not None and is_inner else tree)
        return made[-1]
