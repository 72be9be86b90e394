"""Nested TensorDict keys as tuples, and nested dicts built from them: one home for the helpers
every layer uses (the buffer layer, the build format, the storages over builds).

A key is ``"obs"`` or ``("next", "obs")``; :func:`as_key` makes both a tuple. On disk and in
manifests a key is written ``"next/obs"`` (:func:`key_to_str` / :func:`parse_key`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
    goes is worked out once, so that a build is one assignment per key and per inner dict. The result
    is the dict :func:`nest` makes of the same keys and values, its keys in the same order."""

    def __init__(self, keys: Iterable[str | Iterable[str]]) -> None:
        self.keys: list[Key] = [as_key(k) for k in keys]
        slots: dict[Key, int] = {(): 0}  # each inner dict's place in a build's list of dicts
        # in key order: (dict, name, inner dict's slot) for an inner dict met first here, (dict, name, 0) for a value
        self._steps: list[tuple[int, str, int]] = []
        for key in self.keys:
            for depth in range(1, len(key)):
                path = key[:depth]
                if path not in slots:
                    slots[path] = len(slots)
                    self._steps.append((slots[path[:-1]], path[-1], slots[path]))
            self._steps.append((slots[key[:-1]], key[-1], 0))
        self._dicts = len(slots)

    def build(self, values: Sequence[Any]) -> dict[str, Any]:
        """The nested dict holding ``values``, one per key of ``keys`` and in their order."""
        if len(values) != len(self.keys):
            raise ValueError(f"{len(values)} values for {len(self.keys)} keys")
        trees: list[dict[str, Any]] = [{} for _ in range(self._dicts)]
        it = iter(values)
        for tree, name, inner in self._steps:
            trees[tree][name] = trees[inner] if inner else next(it)
        return trees[0]
