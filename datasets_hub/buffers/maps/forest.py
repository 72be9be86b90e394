"""``Tree`` and ``MCTSForest``: rollouts stored once, read back as search trees (TorchRL's classes of those names).

:class:`MCTSForest` keeps two :class:`~datasets_hub.buffers.maps.tensordict_map.TensorDictMap` s:

- ``data_map``: ``(observation, action)`` -> the step taken (the rollout's row: observation, action,
  ``next`` entries), in a ``LazyTensorStorage``: a step seen again is stored once.
- ``node_map``: ``observation`` -> the ``data_map`` rows of every step taken from it (``"_index"``, in
  the order first seen, with their hashes ``"_hash"``) and how often it was written (``"count"``).

``get_tree(root)`` reads them as a :class:`Tree`. A vertex stands where rollouts branch or end: starting
at a step, it takes the following steps while the observation reached has exactly one step out of it
(``compact=True``; with ``compact=False`` every step is a vertex), and keeps them as its ``rollout``
(``[L]``, time last); its ``node_data`` is the observation reached, its children (``subtree``, a lazy
stack of Trees) the steps out of it. The root is ``root``'s observation; when a single step leaves it,
the root takes the steps itself. Vertices are numbered (``node_id``) breadth first, children in the
order their first steps were first stored; ``hash`` is the ``data_map`` hash of a vertex's first step
(``None`` for the root). A vertex reached along two paths (rollouts that meet again) is one vertex with
two parents. ``max_depth`` stops expanding below that depth (children are listed, not expanded).

A :class:`Tree` is a tensorclass: ``tree.subtree[i]`` is a Tree, ``tree.parent`` rebuilds the parent
from a weak reference (``None`` once it is gone; a lazy stack for a vertex with several parents).
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Literal, cast

import torch
from tensordict import NestedKey, TensorClass, TensorDict, TensorDictBase, lazy_stack
from tensordict.utils import unravel_key

from datasets_hub.buffers.maps.tensordict_map import TensorDictMap
from datasets_hub.buffers.storages import ListStorage
from datasets_hub.errors import InvalidParameter

_DEFAULT_DONE_KEYS = ["done", "terminated", "truncated"]
_KEY_TYPES = ("hash", "id", "path")


class Tree(TensorClass["nocast"]):  # type: ignore[type-arg, name-defined]  # tensordict's class factory
    """One vertex of a search tree and, through ``subtree``, everything below it (see the module docstring).

    Fields: ``count`` and ``wins`` (visit statistics, zero when built), ``index`` (the ``data_map`` rows of
    the steps out of this vertex), ``hash``, ``node_id``, ``rollout``, ``node_data``, ``subtree``, ``specs``
    (free for the user's environment specs) and ``_parent`` (weak references, set when ``subtree`` is).
    """

    count: Any = None
    wins: Any = None
    index: Any = None
    hash: Any = None
    node_id: Any = None
    rollout: Any = None
    node_data: Any = None
    subtree: Any = None
    _parent: Any = None
    specs: Any = None

    @classmethod
    def make_node(
        cls,
        data: TensorDictBase,
        *,
        device: Any = None,
        batch_size: Any = None,
        specs: Any = None,
    ) -> Tree:
        """A vertex for ``data``: its observation (``data`` without ``action`` and ``next``); when ``data``
        holds a step (``next``), that step as the rollout and one child at the observation it reached."""
        rollout = subtree = None
        if "next" in data.keys():
            rollout = data if data.batch_dims else data.unsqueeze(0)
            subtree = lazy_stack([cls.make_node(rollout["next"][..., -1])])
        return cls(
            count=torch.zeros(()),
            wins=torch.zeros(()),
            node_data=data.exclude("action", "next"),
            rollout=rollout,
            subtree=subtree,
            specs=specs,
            device=data.device if device is None else device,
            batch_size=batch_size,
        )

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "subtree" and value is not None:
            value.adopt(weakref.ref(self._tensordict))  # type: ignore[attr-defined]  # the tensorclass's data
        super().__setattr__(name, value)

    def adopt(self, parent: weakref.ref) -> None:
        """Record ``parent`` (a weak reference to a vertex's data) as a parent of this vertex (of each
        vertex, for a stack of them); called when a vertex's ``subtree`` is set."""
        if self.batch_dims:
            for child in self.unbind(0):
                child.adopt(parent)
            return
        known = self._parent
        if known is None:
            self._parent = parent
        elif isinstance(known, list):
            known.append(parent)
        else:
            self._parent = [known, parent]

    @property
    def parent(self) -> Tree | None:
        """The parent vertex, rebuilt on the same tensors (``None`` for a root, or once the parent is gone);
        a lazy stack of Trees when this vertex (or stack of vertices) has several distinct parents."""
        alive: list[TensorDictBase] = []
        pending = [self._parent]
        while pending:
            ref = pending.pop(0)
            if isinstance(ref, list):
                pending[:0] = list(ref)
            elif ref is not None:
                data = ref()
                if data is not None and all(data is not seen for seen in alive):
                    alive.append(data)
        if not alive:
            return None
        if len(alive) == 1:
            return self._from_tensordict(alive[0])
        return lazy_stack([self._from_tensordict(data) for data in alive])

    # -- what a vertex holds -------------------------------------------------------------------

    @property
    def num_children(self) -> int:
        return len(self.subtree) if self.subtree is not None else 0

    @property
    def visits(self) -> Any:
        """``count``, under its MCTS name."""
        return self.count

    @visits.setter
    def visits(self, count: Any) -> None:
        self.count = count

    @property
    def is_terminal(self) -> Any:
        """The ``("next", "done")`` flag of the last step of the rollout (False without a rollout)."""
        if self.rollout is None:
            return False
        return self.rollout[..., -1]["next", "done"].squeeze(-1)

    @property
    def selected_actions(self) -> Any:
        """The first action of each child (``None`` without children)."""
        return None if self.subtree is None else self.subtree.rollout[..., 0]["action"]

    @property
    def prev_action(self) -> Any:
        """The last action of the rollout, the one that reached ``node_data`` (``None`` without a rollout)."""
        return None if self.rollout is None else self.rollout[..., -1]["action"]

    @property
    def branching_action(self) -> Any:
        """The first action of the rollout, the one that chose this branch (``None`` without a rollout)."""
        return None if self.rollout is None else self.rollout[..., 0]["action"]

    @property
    def node_observation(self) -> Any:
        return self.node_data["observation"]

    @property
    def node_observations(self) -> TensorDictBase:
        return self.node_data.select("observation")

    def fully_expanded(self, env: Any) -> bool:
        """Whether every action ``env`` allows here (``env.cardinality(node_data)``) has a child."""
        return env.cardinality(self.node_data) == self.num_children

    # -- walking the tree (breadth first) ----------------------------------------------------------

    def _walk(self) -> Iterator[tuple[Tree, tuple[int, ...]]]:
        queue: deque[tuple[Tree, tuple[int, ...]]] = deque([(self, ())])
        while queue:
            tree, path = queue.popleft()
            yield tree, path
            for i in range(tree.num_children):
                queue.append((tree.subtree[i], (*path, i)))

    def vertices(self, *, key_type: Literal["id", "hash", "path"] = "hash") -> dict[Any, Tree]:
        """Every vertex, keyed by ``hash``, ``id`` (``node_id``) or ``path`` (child positions from here).

        With ``"hash"`` and ``"id"`` a vertex reached along several paths is listed once; with ``"path"``,
        once per path."""
        if key_type not in _KEY_TYPES:
            raise InvalidParameter(f"key_type must be one of {_KEY_TYPES}, got {key_type!r}")
        seen: set[Any] = set()
        result: dict[Any, Tree] = {}
        for tree, path in self._walk():
            if key_type != "path":
                if tree.hash in seen:
                    continue
                seen.add(tree.hash)
            key = {"hash": tree.hash, "id": tree.node_id, "path": path}[key_type]
            result[key] = tree
        return result

    def num_vertices(self, *, count_repeat: bool = False) -> int:
        """The number of vertices; ``count_repeat=True`` counts a vertex once per path reaching it."""
        if count_repeat:
            return len(self.vertices(key_type="path"))
        return len({v.node_id for v in self.vertices(key_type="hash").values()})

    def edges(self) -> list[tuple[int, int]]:
        """``(parent node_id, child node_id)`` of every edge, breadth first."""
        return [(tree.node_id, tree.subtree[i].node_id) for tree, _ in self._walk() for i in range(tree.num_children)]

    def valid_paths(self) -> Iterator[tuple[int, ...]]:
        """The path to every leaf, breadth first."""
        return (path for tree, path in self._walk() if not tree.num_children)

    def max_length(self) -> int:
        """The length of the longest path to a leaf (0 for a lone vertex)."""
        return max((len(path) for path in self.valid_paths()), default=0)

    def get_vertex_by_id(self, id: int) -> Tree:
        for tree, _ in self._walk():
            if tree.node_id == id:
                return tree
        raise InvalidParameter(f"no vertex with node_id {id} in this tree")

    def get_vertex_by_hash(self, hash: int) -> Tree:
        for tree, _ in self._walk():
            if tree.hash == hash:
                return tree
        raise InvalidParameter(f"no vertex with hash {hash} in this tree")

    def __contains__(self, other: Tree) -> bool:
        """Whether a vertex of this tree has ``other``'s hash."""
        return any(tree.hash == other.hash for tree, _ in self._walk())

    def rollout_from_path(self, path: tuple[int, ...]) -> TensorDictBase | None:
        """The rollouts of the vertices from here along ``path``, joined in time (``None`` if none has one)."""
        tree = self
        rollouts = [] if tree.rollout is None else [tree.rollout]
        for i in path:
            tree = tree.subtree[i]
            if tree.rollout is not None:
                rollouts.append(tree.rollout)
        return cast(TensorDictBase, torch.cat(rollouts, dim=-1)) if rollouts else None

    def to_string(self, node_format_fn: Callable[[Tree], Any] = lambda tree: tree.node_data.to_dict()) -> str:
        """One line per vertex with a rollout, depth first: ``<indent><path> <node_format_fn(vertex)>``,
        indented one space per level below the first."""
        lines = []
        stack: list[tuple[Tree, tuple[int, ...]]] = [(self, ())]
        while stack:
            tree, path = stack.pop()
            for i in reversed(range(tree.num_children)):
                stack.append((tree.subtree[i], (*path, i)))
            if tree.rollout is not None:
                lines.append(f"{' ' * (len(path) - 1)}{path} {node_format_fn(tree)}")
        return "\n".join(lines)


def _key_list(value: Any, name: str) -> list[NestedKey] | None:
    if value is None:
        return None
    if isinstance(value, (str, tuple)):
        return [unravel_key(value)]
    if not isinstance(value, list):
        raise InvalidParameter(f"{name} must be a key or a list of keys, got {value!r}")
    return [unravel_key(k) for k in value]


class MCTSForest:
    """Rollouts stored once, read back as :class:`Tree` s (contract: :mod:`datasets_hub.buffers.maps.forest`).

    ``data_map`` / ``node_map``: maps to use (built at the first ``extend`` when not given, with
    ``max_size`` rows, default 1000). Keys default to ``["observation"]``, ``["action"]``, ``["reward"]``
    and ``["done", "terminated", "truncated"]``; ``excluded_keys`` are not stored. ``consolidated=True``
    is refused (one tensor per entry).
    """

    def __init__(
        self,
        *,
        data_map: TensorDictMap | None = None,
        node_map: TensorDictMap | None = None,
        max_size: int | None = None,
        done_keys: list[NestedKey] | None = None,
        reward_keys: list[NestedKey] | None = None,
        observation_keys: list[NestedKey] | None = None,
        action_keys: list[NestedKey] | None = None,
        excluded_keys: list[NestedKey] | None = None,
        consolidated: bool | None = None,
    ) -> None:
        if consolidated:
            raise NotImplementedError("consolidated=True: datasets_hub storages keep one tensor per entry")
        sizes = {name: m.max_size for name, m in (("data_map", data_map), ("node_map", node_map)) if m is not None}
        if max_size is not None:
            sizes["max_size"] = max_size
        if len(set(sizes.values())) > 1:
            raise InvalidParameter(f"conflicting sizes: {sizes}; give maps of one size (or leave max_size out)")
        self.max_size = next(iter(sizes.values()), None)
        self.data_map = data_map
        self.node_map = node_map
        self.done_keys = _key_list(done_keys, "done_keys") or list(_DEFAULT_DONE_KEYS)
        self.reward_keys = _key_list(reward_keys, "reward_keys") or ["reward"]
        self.observation_keys = _key_list(observation_keys, "observation_keys") or ["observation"]
        self.action_keys = _key_list(action_keys, "action_keys") or ["action"]
        self.excluded_keys = _key_list(excluded_keys, "excluded_keys")
        self._keys_given = {
            "done_keys": done_keys is not None,
            "reward_keys": reward_keys is not None,
            "observation_keys": observation_keys is not None,
            "action_keys": action_keys is not None,
        }

    def get_keys_from_env(self, env: Any) -> None:
        """Take the done, reward, action and observation keys of ``env`` where none were given."""
        for name, given in self._keys_given.items():
            if not given:
                setattr(self, name, _key_list(list(getattr(env, name)), name))
                self._keys_given[name] = True

    # -- writing ------------------------------------------------------------------------------

    def _build_maps(self, keys: TensorDictBase, steps: TensorDictBase) -> None:
        size = 1000 if self.max_size is None else self.max_size
        if self.data_map is None:
            self.data_map = TensorDictMap.from_tensordict_pair(
                keys, steps, in_keys=[*self.observation_keys, *self.action_keys], max_size=size
            )
        if self.node_map is None:
            self.node_map = TensorDictMap.from_tensordict_pair(
                keys,
                steps,
                in_keys=list(self.observation_keys),
                max_size=size,
                storage_constructor=lambda: ListStorage(size),
                collate_fn=lazy_stack,
            )
        if self.max_size is None:
            self.max_size = self.data_map.max_size

    def extend(self, rollout: TensorDictBase, *, return_node: bool = False) -> Tree | None:
        """Store the steps of ``rollout`` (``[T]``, TED layout) and note them under the observations they
        leave from; returns ``get_tree(rollout)`` with ``return_node=True``."""
        steps = rollout.copy()
        if self.excluded_keys:
            steps = steps.exclude(*self.excluded_keys)
            if "next" in steps.keys():
                steps.set("next", steps.get("next").exclude(*self.excluded_keys))
        keys = rollout.exclude("next").copy()
        self._build_maps(keys, steps)
        data_map, node_map = self.data_map, self.node_map
        if data_map is None or node_map is None:  # _build_maps made both
            raise RuntimeError("MCTSForest maps were not built")
        data_map[keys] = steps  # writes the data rows ("_index") and hashes ("_hash") into keys
        rows = keys.get(data_map.index_key).tolist()
        hashes = keys.get(data_map.query_module.hash_key).tolist()
        observations = keys.select(*self.observation_keys)
        for t, (row, step_hash) in enumerate(zip(rows, hashes, strict=True)):
            at = observations[t : t + 1].copy()
            if bool(node_map.contains(at)[0]):
                known = node_map[at][0]
                listed = known.get("_index").tolist()
                count = int(known.get("count")) + 1
                if row not in listed:
                    listed.append(row)
                    known_hashes = [*known.get("_hash").tolist(), step_hash]
                else:
                    known_hashes = known.get("_hash").tolist()
            else:
                listed, known_hashes, count = [row], [step_hash], 1
            entry = TensorDict(
                {
                    "_index": torch.tensor(listed, dtype=torch.int64),
                    "_hash": torch.tensor(known_hashes, dtype=torch.int64),
                    "count": torch.tensor(count, dtype=torch.int32),
                },
                batch_size=[],
            )
            node_map[at] = entry.unsqueeze(0)
        return self.get_tree(rollout) if return_node else None

    def add(self, step: TensorDictBase, *, return_node: bool = False) -> Tree | None:
        """``extend`` with one step (no batch dim)."""
        return self.extend(step.unsqueeze(0), return_node=return_node)

    def get_child(self, root: TensorDictBase) -> TensorDictBase:
        """The stored step(s) taken from ``root``'s observation with ``root``'s action."""
        if self.data_map is None:
            raise KeyError("the forest is empty: extend() it with a rollout first")
        return self.data_map[root]

    def __len__(self) -> int:
        return 0 if self.data_map is None else len(self.data_map)

    # -- reading trees ------------------------------------------------------------------------

    def _steps_out_of(self, observation: TensorDictBase) -> tuple[list[int], list[int]] | None:
        """``(data rows, hashes)`` of the steps stored out of ``observation`` (no batch dim), or None."""
        node_map = self.node_map
        if node_map is None:
            return None
        key = observation.select(*self.observation_keys).unsqueeze(0)
        if not bool(node_map.contains(key)[0]):
            return None
        entry = node_map[key][0]
        return entry.get("_index").tolist(), entry.get("_hash").tolist()

    def _vertex(
        self, observation: TensorDictBase, first_row: int | None, compact: bool
    ) -> tuple[Tree, tuple[list[int], list[int]] | None]:
        """The vertex that starts with the step at ``first_row`` (``None``: at ``observation`` itself),
        and the steps out of where it ends (``None`` at a leaf)."""
        out = self._steps_out_of(observation)
        steps: list[TensorDictBase] = []
        row = first_row
        if row is None:
            if out is None:
                raise KeyError(f"no stored rollout leaves from {observation.select(*self.observation_keys)}")
            if len(out[0]) == 1:
                row = out[0][0]
        if self.data_map is None:
            raise KeyError("the forest is empty: extend() it with a rollout first")
        storage = self.data_map.storage
        while row is not None:
            step = storage.get(row)
            steps.append(step)
            observation = step.get("next").select(*self.observation_keys)
            out = self._steps_out_of(observation)
            row = out[0][0] if compact and out is not None and len(out[0]) == 1 else None
        tree = Tree(
            count=torch.zeros((), dtype=torch.int32),
            wins=torch.zeros(()),
            index=None if out is None else torch.tensor(out[0]),
            node_data=observation.select(*self.observation_keys),
            rollout=lazy_stack(steps).contiguous() if steps else None,
        )
        return tree, out

    def get_tree(self, root: TensorDictBase, *, max_depth: int | None = None, compact: bool = True) -> Tree:
        """The tree of every stored rollout through ``root``'s observation (see the module docstring)."""
        tree, out = self._vertex(root, None, compact)
        tree.node_id = 0
        numbered = 1
        made: dict[int, Tree] = {}  # first-step hash -> vertex: rollouts that meet again share it
        queue: deque[tuple[Tree, tuple[list[int], list[int]], int]] = deque()
        if out is not None:
            queue.append((tree, out, 0))
        while queue:
            parent, (rows, hashes), depth = queue.popleft()
            children = []
            for row, step_hash in zip(rows, hashes, strict=True):
                child = made.get(step_hash)
                if child is None:
                    child, child_out = self._vertex(parent.node_data, row, compact)
                    child.node_id, child.hash = numbered, step_hash
                    numbered += 1
                    made[step_hash] = child
                    if child_out is not None and (max_depth is None or depth < max_depth):
                        queue.append((child, child_out, depth + 1))
                children.append(child)
            parent.subtree = lazy_stack(children)
        return tree

    @classmethod
    def valid_paths(cls, tree: Tree) -> Iterator[tuple[int, ...]]:
        yield from tree.valid_paths()

    def to_string(
        self, td_root: TensorDictBase, node_format_fn: Callable[[Tree], Any] = lambda tree: tree.node_data.to_dict()
    ) -> str:
        """``get_tree(td_root).to_string(node_format_fn)``."""
        return self.get_tree(td_root).to_string(node_format_fn)
