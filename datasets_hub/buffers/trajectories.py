"""Trajectory views and queries (TorchRL 0.14's ``Trajectory``, ``traj``, ``iter_trajectories``,
``filter_trajectories``; the engine of ``ReplayBuffer.query``).

- :class:`Trajectory` is a tensorclass with one field, ``data``: the transitions of one trajectory,
  time along its single batch dim. Attributes read the data: ``t.observation`` is the root entry,
  ``t.reward`` falls back to ``("next", "reward")`` when the root has none. Indexing with an int, a
  slice or a tensor gives a :class:`Trajectory`; indexing with a key gives the entry.
- Splitting (``iter_trajectories``) reads, in this order: the ``trajectory_key`` given, else the first
  present of ``("collector", "traj_ids")``, ``"traj_ids"``, ``"episode"`` (a new trajectory wherever
  the id changes), else the union of the end flags ``("next", done|terminated|truncated)`` (then of
  the root ones), with a ``UserWarning``: a trajectory whose last step carries no end flag is merged
  with the next one. The last rows always end a trajectory. Boundaries come from
  :func:`~datasets_hub.buffers.trajectory_bounds.find_start_stop_traj`, as the slice samplers' do.
- The query language: ``traj.<name>`` or ``traj[key]`` is a per-step field. Comparing a field gives
  a per-step comparison that must be reduced with ``.any()`` / ``.all()``; ``.sum()``, ``.mean()``,
  ``.max()``, ``.min()``, ``.first()``, ``.last()``, ``traj.length`` and ``traj.total_reward`` are
  scalars, and comparing a scalar gives a :class:`TrajectoryPredicate` (``&``, ``|``, ``~`` combine
  them). ``predicate.required_keys()`` names the entries it reads (``None`` for a plain callable),
  so a buffer query reads and transforms only what the predicate needs.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from tensordict import NestedKey, TensorClass, TensorDictBase
from tensordict.utils import unravel_key

from datasets_hub.buffers.trajectory_bounds import find_start_stop_traj
from datasets_hub.errors import InvalidParameter, WrongDataType

#: per-step trajectory id entries, looked up in this order when no trajectory_key is given
TRAJECTORY_ID_KEYS: tuple[NestedKey, ...] = (("collector", "traj_ids"), "traj_ids", "episode")
#: end-of-trajectory flags (TED: a trajectory ends where any is set), the "next" ones first
END_FLAG_GROUPS: tuple[tuple[NestedKey, ...], ...] = (
    (("next", "done"), ("next", "terminated"), ("next", "truncated")),
    ("done", "terminated", "truncated"),
)
_REDUCE_FIRST = "reduce it to one boolean per trajectory with .any() or .all()"


class Trajectory(TensorClass["nocast"]):  # type: ignore[type-arg, name-defined]  # tensordict's class factory
    """The transitions of one trajectory (``data``, a TensorDict with one batch dim: time).

    ``length`` is the number of transitions, ``total_reward`` the sum of ``reward``. Attribute and
    :meth:`get` lookups try the root entry, then ``("next", name)``; a name found in neither raises
    ``AttributeError`` naming the keys there are. Being a tensorclass, slicing, ``clone()``, ``to()``
    and ``tensordict.lazy_stack`` (ragged trajectories) keep the type.
    """

    data: TensorDictBase

    def __post_init__(self) -> None:
        data = self.data
        if not self.batch_size and data is not None and data.batch_dims:
            if data.batch_dims != 1:
                raise InvalidParameter(
                    f"Trajectory needs data with a single batch dimension (time), got batch_size="
                    f"{tuple(data.batch_size)}: pass one trajectory, e.g. data[i] of a [n_envs, T] batch"
                )
            self.batch_size = data.batch_size

    @property
    def length(self) -> int:
        """The number of transitions."""
        return int(self.batch_size[0])

    @property
    def total_reward(self) -> torch.Tensor:
        """The sum of ``reward`` (root, else ``("next", "reward")``) over the trajectory."""
        return self.get("reward").sum()

    def get(self, key: NestedKey, default: Any = None) -> Any:  # type: ignore[override]  # a data lookup, not TensorClass.get
        """The entry ``key`` of the data; a plain name also tries ``("next", key)``; else ``default``."""
        value = self.data.get(key, None)
        if value is None and isinstance(key, str):
            value = self.data.get(("next", key), None)
        return default if value is None else value

    def keys(self, *args: Any, **kwargs: Any) -> Any:
        """The keys of the data (same arguments as ``TensorDict.keys``)."""
        return self.data.keys(*args, **kwargs)


# tensordict installs its own __getattr__ / __getitem__ on a tensorclass after the class body runs, so
# the data lookups are chained onto them here
_tensorclass_getattr = Trajectory.__getattr__  # type: ignore[attr-defined]  # installed by tensordict
_tensorclass_getitem = Trajectory.__getitem__


def _entry_as_attribute(self: Trajectory, name: str) -> Any:
    try:
        return _tensorclass_getattr(self, name)
    except AttributeError:
        if name.startswith("_"):
            raise
    value = self.get(name)
    if value is None:
        present = sorted(str(k) for k in self.data.keys(include_nested=True, leaves_only=True))
        raise AttributeError(
            f"Trajectory has no entry {name!r} in its data (neither {name!r} nor ('next', {name!r})); "
            f"its entries are {present}"
        ) from None
    return value


def _entry_or_steps(self: Trajectory, index: Any) -> Any:
    if isinstance(index, str) or (isinstance(index, tuple) and index and all(isinstance(k, str) for k in index)):
        return self.data[index]
    return _tensorclass_getitem(self, index)


def _describe(self: Trajectory) -> str:
    shape = f"length={self.length}" if len(self.batch_size) == 1 else f"batch_size={tuple(self.batch_size)}"
    keys = sorted(map(str, self.data.keys())) if self.data is not None else None
    return f"Trajectory({shape}, keys={keys})"


Trajectory.__getattr__ = _entry_as_attribute  # type: ignore[attr-defined]  # see above
Trajectory.__getitem__ = _entry_or_steps  # type: ignore[method-assign, assignment]  # see above
Trajectory.__repr__ = _describe  # type: ignore[method-assign, assignment]  # see above


# -- the query language -------------------------------------------------------------------------


def _merged_keys(a: frozenset | None, b: frozenset | None) -> frozenset | None:
    return None if a is None or b is None else a | b


class TrajectoryPredicate:
    """A yes/no question about one :class:`Trajectory`: ``predicate(trajectory) -> bool``.

    Built by comparing a scalar of ``traj`` (``traj.reward.sum() > 1``); ``&``, ``|`` and ``~``
    combine predicates. ``required_keys()`` is the set of entries read (``frozenset()`` for
    ``traj.length`` alone).
    """

    def __init__(self, test: Callable[[Trajectory], Any], text: str, keys: frozenset | None) -> None:
        self._test = test
        self._text = text
        self._keys = keys

    def required_keys(self) -> frozenset | None:
        """The entries the predicate reads (``"reward"`` may resolve to ``("next", "reward")``)."""
        return self._keys

    def __call__(self, trajectory: Trajectory) -> bool:
        return bool(self._test(trajectory))

    def __and__(self, other: TrajectoryPredicate) -> TrajectoryPredicate:
        return TrajectoryPredicate(
            lambda t: self(t) and other(t), f"({self._text} & {other._text})", _merged_keys(self._keys, other._keys)
        )

    def __or__(self, other: TrajectoryPredicate) -> TrajectoryPredicate:
        return TrajectoryPredicate(
            lambda t: self(t) or other(t), f"({self._text} | {other._text})", _merged_keys(self._keys, other._keys)
        )

    def __invert__(self) -> TrajectoryPredicate:
        return TrajectoryPredicate(lambda t: not self(t), f"~{self._text}", self._keys)

    def __repr__(self) -> str:
        return f"TrajectoryPredicate({self._text})"


class StepComparison:
    """A comparison made at every step of a trajectory: reduce it with :meth:`any` or :meth:`all`."""

    def __init__(self, compare: Callable[[Trajectory], torch.Tensor], text: str, keys: frozenset) -> None:
        self._compare = compare
        self._text = text
        self._keys = keys

    @property
    def description(self) -> str:
        """The comparison as written, e.g. ``(traj.reward > 2.5)``."""
        return self._text

    def any(self) -> TrajectoryPredicate:
        """True when the comparison holds at one step at least."""
        return TrajectoryPredicate(lambda t: self._compare(t).any(), f"{self._text}.any()", self._keys)

    def all(self) -> TrajectoryPredicate:
        """True when the comparison holds at every step."""
        return TrajectoryPredicate(lambda t: self._compare(t).all(), f"{self._text}.all()", self._keys)

    def required_keys(self) -> frozenset:
        return self._keys

    def __call__(self, trajectory: Trajectory | None = None) -> bool:
        raise TypeError(f"{self._text} holds per step, not per trajectory: {_REDUCE_FIRST}")

    def __repr__(self) -> str:
        return f"StepComparison({self._text})"


class _Comparable:
    """The comparison operators of an expression; ``_result`` is the class a comparison makes."""

    _result: type
    _text: str
    _keys: frozenset

    def _value(self, trajectory: Trajectory) -> Any:
        raise NotImplementedError  # each expression kind says how it is computed

    def _compare(self, op: Callable[[Any, Any], Any], other: Any, sign: str) -> Any:
        return self._result(lambda t: op(self._value(t), other), f"({self._text} {sign} {other!r})", self._keys)

    def __gt__(self, other: Any) -> Any:
        return self._compare(operator.gt, other, ">")

    def __ge__(self, other: Any) -> Any:
        return self._compare(operator.ge, other, ">=")

    def __lt__(self, other: Any) -> Any:
        return self._compare(operator.lt, other, "<")

    def __le__(self, other: Any) -> Any:
        return self._compare(operator.le, other, "<=")

    def __eq__(self, other: Any) -> Any:  # builds a predicate, as torch's == does
        return self._compare(operator.eq, other, "==")

    def __ne__(self, other: Any) -> Any:  # builds a predicate
        return self._compare(operator.ne, other, "!=")

    __hash__ = None  # type: ignore[assignment]  # == builds predicates, so expressions are unhashable


class TrajectoryScalar(_Comparable):
    """One value per trajectory (a reduction, ``traj.length``); comparing it gives a predicate."""

    _result = TrajectoryPredicate

    def __init__(self, compute: Callable[[Trajectory], Any], text: str, keys: frozenset) -> None:
        self._compute = compute
        self._text = text
        self._keys = keys

    def _value(self, trajectory: Trajectory) -> Any:
        return self._compute(trajectory)

    def __repr__(self) -> str:
        return f"TrajectoryScalar({self._text})"


class TrajectoryField(_Comparable):
    """A per-step entry of a trajectory: reduce it to a scalar or compare it step by step."""

    _result = StepComparison

    def __init__(self, key: NestedKey, text: str) -> None:
        self._key = unravel_key(key)
        self._text = text
        self._keys = frozenset({self._key})

    def _value(self, trajectory: Trajectory) -> torch.Tensor:
        value = trajectory.get(self._key)
        if value is None:
            raise KeyError(f"{self._text}: the trajectory has no entry {self._key!r} (nor under 'next')")
        return value

    def _reduced(self, reduce: Callable[[torch.Tensor], Any], name: str) -> TrajectoryScalar:
        return TrajectoryScalar(lambda t: reduce(self._value(t)), f"{self._text}.{name}()", self._keys)

    def sum(self) -> TrajectoryScalar:
        return self._reduced(torch.sum, "sum")

    def mean(self) -> TrajectoryScalar:
        return self._reduced(lambda v: v.float().mean(), "mean")

    def max(self) -> TrajectoryScalar:
        return self._reduced(torch.max, "max")

    def min(self) -> TrajectoryScalar:
        return self._reduced(torch.min, "min")

    def first(self) -> TrajectoryScalar:
        return self._reduced(lambda v: v[0], "first")

    def last(self) -> TrajectoryScalar:
        return self._reduced(lambda v: v[-1], "last")

    def __repr__(self) -> str:
        return f"TrajectoryField({self._text})"


class TrajectoryFields:
    """The class of :data:`traj`: ``traj.name`` and ``traj[key]`` are :class:`TrajectoryField` s."""

    @property
    def length(self) -> TrajectoryScalar:
        return TrajectoryScalar(lambda t: t.length, "traj.length", frozenset())

    @property
    def total_reward(self) -> TrajectoryScalar:
        return TrajectoryScalar(lambda t: t.total_reward, "traj.total_reward", frozenset({"reward"}))

    def __getattr__(self, name: str) -> TrajectoryField:
        if name.startswith("_"):
            raise AttributeError(name)
        return TrajectoryField(name, f"traj.{name}")

    def __getitem__(self, key: NestedKey) -> TrajectoryField:
        return TrajectoryField(key, f"traj[{key!r}]")

    def __repr__(self) -> str:
        return "traj"


#: the entry point of the query language: ``rb.query(traj.reward.sum() > 10)``
traj = TrajectoryFields()


# -- splitting ------------------------------------------------------------------------------------


def _split_signal(data: TensorDictBase, trajectory_key: NestedKey | None) -> dict[str, torch.Tensor]:
    """``{"trajectory": ids}`` or ``{"end": flags}``, shaped as ``data``'s batch (see the module docstring)."""
    shape = data.batch_size
    if trajectory_key is not None:
        ids = data.get(trajectory_key, None)
        if ids is None:
            raise KeyError(f"trajectory_key {trajectory_key!r} is not an entry of the data")
        return {"trajectory": ids.reshape(shape)}
    for key in TRAJECTORY_ID_KEYS:
        ids = data.get(key, None)
        if ids is not None:
            return {"trajectory": ids.reshape(shape)}
    for group in END_FLAG_GROUPS:
        flags = [data.get(k).reshape(shape).bool() for k in group if data.get(k, None) is not None]
        if flags:
            warnings.warn(
                "no trajectory id entry (trajectory_key, ('collector', 'traj_ids'), 'traj_ids' or 'episode'): "
                f"trajectories are split at the end-of-episode flags {group}; a trajectory whose last step has "
                "no end flag is merged with the next one. Store trajectory ids, or pass trajectory_key=",
                UserWarning,
                stacklevel=3,
            )
            end = flags[0]
            for flag in flags[1:]:
                end = end | flag
            return {"end": end}
    raise KeyError(
        f"Cannot split data into trajectories: it has no trajectory id entry ({TRAJECTORY_ID_KEYS}) and no "
        f"end-of-episode flags ({END_FLAG_GROUPS}); pass trajectory_key= naming the per-step trajectory ids"
    )


def _spans(signal: dict[str, torch.Tensor]) -> list[tuple[int, int, tuple[int, ...]]]:
    """``(first, last, column)`` of every trajectory of a time-first signal, column by column, oldest first."""
    start, stop, _ = find_start_stop_traj(**signal, at_capacity=False)
    spans = [(int(a[0]), int(b[0]), tuple(int(c) for c in a[1:])) for a, b in zip(start, stop, strict=True)]
    return sorted(spans, key=lambda s: (s[2], s[0]))


def _check_data(data: Any, who: str) -> TensorDictBase:
    if not isinstance(data, TensorDictBase):
        raise WrongDataType(
            f"{who} needs a TensorDictBase of transitions (tensordict-backed data), got {type(data).__name__}"
        )
    return data


def iter_trajectories(data: TensorDictBase, trajectory_key: NestedKey | None = None) -> Iterator[Trajectory]:
    """The trajectories of ``data`` (transitions along one batch dim, each trajectory's steps contiguous
    and in order), as :class:`Trajectory` views, in order. How trajectories are told apart: see the
    module docstring. Raises ``TypeError`` for data that is not a TensorDict, ``KeyError`` when
    nothing tells trajectories apart."""
    data = _check_data(data, "iter_trajectories")
    if data.batch_dims != 1:
        raise InvalidParameter(
            f"iter_trajectories needs transitions along a single batch dimension, got batch_size="
            f"{tuple(data.batch_size)}: flatten them first (data.reshape(-1)) or split each row"
        )
    if data.batch_size[0] == 0:
        return
    for first, last, _ in _spans(_split_signal(data, trajectory_key)):
        yield Trajectory(data[first : last + 1])


def _refuse_step_comparison(predicate: Any) -> None:
    if isinstance(predicate, StepComparison):
        raise TypeError(f"{predicate.description} holds per step, not per trajectory: {_REDUCE_FIRST}")


def filter_trajectories(
    data: TensorDictBase,
    predicate: Callable[[Trajectory], bool] | None = None,
    *,
    trajectory_key: NestedKey | None = None,
) -> list[Trajectory]:
    """The trajectories of ``data`` (:func:`iter_trajectories`) for which ``predicate`` holds (all of
    them without one). ``predicate``: a :class:`TrajectoryPredicate` built from :data:`traj`, or any
    callable taking a :class:`Trajectory` and returning a bool."""
    _refuse_step_comparison(predicate)
    return [t for t in iter_trajectories(data, trajectory_key) if predicate is None or predicate(t)]


# -- buffer queries -----------------------------------------------------------------------------


def _key_tuple(key: NestedKey) -> tuple[Any, ...]:
    key = unravel_key(key)
    return key if isinstance(key, tuple) else (key,)


def _touches(written: NestedKey, read: NestedKey) -> bool:
    """Whether writing ``written`` may change ``read`` (one is a prefix of the other)."""
    a, b = _key_tuple(written), _key_tuple(read)
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _transforms_for(transforms: Sequence[Any], keys: set) -> tuple[list[Any], set | None]:
    """The transforms that can change ``keys``, and the stored entries they need (``None``: all of them).

    Walked from the last transform back: one whose ``out_keys`` touch a needed key is kept and its
    ``in_keys`` become needed too; one that declares no ``out_keys`` may change anything, so it and
    every transform before it are kept, and every entry is read."""
    kept: list[Any] = []
    needed = set(keys)
    for position in range(len(transforms) - 1, -1, -1):
        transform = transforms[position]
        out_keys = list(getattr(transform, "out_keys", None) or [])
        if not out_keys:
            return list(transforms[: position + 1]) + kept, None
        if any(_touches(w, r) for w in out_keys for r in needed):
            kept.insert(0, transform)
            needed.update(unravel_key(k) for k in (getattr(transform, "in_keys", None) or []))
    return kept, needed


def _transformed(data: TensorDictBase, transforms: Sequence[Any]) -> TensorDictBase:
    if not transforms:
        return data
    data = data.copy()  # shallow: a transform that sets entries never reaches the storage's tensors
    for transform in transforms:
        data = transform(data)
    return data


def query_trajectories(
    data: Any,
    predicate: Callable[[Trajectory], bool] | None = None,
    *,
    transforms: Sequence[Any] = (),
    trajectory_key: NestedKey | None = None,
) -> list[Trajectory]:
    """The engine of ``ReplayBuffer.query``: the trajectories of the raw buffer contents ``data``
    (time first, oldest first; further batch dims are separate columns, e.g. one per environment,
    listed one after the other) for which ``predicate`` holds, each with ``transforms`` applied as a
    sample would have them.

    A predicate that names its keys (``required_keys()``) is evaluated on those entries only, after
    only the transforms that can change them; each matching trajectory is then read whole and
    transformed. A plain callable (or no predicate) sees every entry, transformed once for all.
    """
    if not isinstance(data, TensorDictBase):
        raise WrongDataType(
            f"ReplayBuffer.query works on tensordict-backed storages (TensorDict items), this one holds "
            f"{type(data).__name__}"
        )
    _refuse_step_comparison(predicate)
    if data.batch_dims == 0 or data.batch_size[0] == 0:
        return []
    transforms = list(transforms)
    required = getattr(predicate, "required_keys", None)
    required = required() if callable(required) else None
    needed: set | None = None
    if predicate is not None and required is not None:
        wanted = set()
        for key in required:
            wanted.add(unravel_key(key))
            if isinstance(key, str):
                wanted.add(("next", key))
        partial, needed = _transforms_for(transforms, wanted)
    if needed is None:
        source = _transformed(data, transforms)
        evaluated_on_all = True
    else:
        signal_keys = [k for k in (trajectory_key, *TRAJECTORY_ID_KEYS) if k is not None]
        source = _transformed(data.select(*needed, *signal_keys, strict=False), partial)
        evaluated_on_all = False
    spans = _spans(_split_signal(data, trajectory_key))
    found = []
    for first, last, column in spans:
        steps = (slice(first, last + 1), *column)
        candidate = Trajectory(source[steps])
        if predicate is not None and not predicate(candidate):
            continue
        found.append(candidate if evaluated_on_all else Trajectory(_transformed(data[steps], transforms)))
    return found
