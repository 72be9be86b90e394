"""Nested TensorDict keys as tuples, and nested dicts built from them: one home for the helpers
every layer uses (the buffer layer, the build format, the storages over builds).

A key is ``"obs"`` or ``("next", "obs")``; :func:`as_key` makes both a tuple. On disk and in
manifests a key is written ``"next/obs"`` (:func:`key_to_str` / :func:`parse_key`).
"""

from __future__ import annotations

from collections.abc import Iterable
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
