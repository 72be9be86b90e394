"""Mixtures of datasets whose schemas differ (docs/guide/mixtures.md): :class:`Mixture`.

This module holds one concept: the mixture, one batch made of several datasets' batches mapped to one schema.

Each member keeps its own build, sampler and generator; the mixture maps every member's batch to one
schema at sample time and concatenates them. Contract of ``Mixture.sample(n)``:

- Shares: member ``i`` gets ``c_i`` items of the ``n``. ``exact=True`` (default): ``c_i`` is
  ``round(p_i * n)`` by largest remainders, so every batch holds its proportions (up to one item);
  ``exact=False``: ``(c_0, ..., c_k)`` is multinomial(``n``, ``p``) drawn with the mixture's
  generator, so each item picks its dataset independently and the proportions hold in expectation.
  Members whose sampler draws whole slices (``SliceSampler(slice_len=L)``) are shared in slices: ``n``
  must then be a multiple of ``L``, and every member must use the same ``L``.
- Weights ``p``: explicit (``weights=[...]``, normalised), ``"uniform"``, or ``"size"``: proportional
  to ``len(member) ** (1 / temperature)`` (``temperature=1``: the natural, size-proportional mixture of
  Open X-Embodiment; larger temperatures move towards uniform).
- Key maps: ``key_maps[i]`` selects and renames member ``i``'s keys (``{source: target}``; a list of
  keys selects without renaming; ``None`` keeps every key). A key may name a sub-tree (``"goal"``: every
  leaf under it, renamed with it). A window mask ``<source>_is_pad`` follows its key. Keys of the result must be the same in every member, with the same dtype.
- Projections: ``project[i]`` (a callable, or ``None``) maps member ``i``'s batch (a TensorDict) to
  another of the same batch size, before its key map: the way to a common schema where zero-padding
  is not the right one (a 7-dof action from a 6-dof arm plus a gripper; an image resized). Its output
  must keep one schema: a leaf whose dtype or per-item shape changes after the first batch, a
  projection that raises or returns something else are errors naming the dataset (and the key).
  Projected members are sampled, then copied into the batch.
- Padding: a key whose per-item shape differs between members only in its last dimension, with at
  most two dimensions per item (a state ``[D]``, a window of them ``[T, D]``) and a numeric dtype, is
  zero-padded to the widest; ``<key>_dim_is_pad`` (bool ``[batch, D_max]``, True on padded entries)
  is added for it in every member. Anything else that differs (dtype, image size, number of dims) is
  refused at construction, naming the dataset and the key.
- Normalisation: ``normalize={target key: mode}`` with ``mode`` ``"mean_std"`` (``(x - mean) / std``),
  ``"min_max"`` (to ``[-1, 1]``) or ``"q01_q99"`` (to ``[-1, 1]`` between the 1st and 99th percentiles,
  then clipped to ``[-1, 1]``): each member with its own statistics of the source key (see
  :mod:`datasets_hub.buffers.feature_stats`), before padding (padded entries stay 0). The result is
  float32 (float64 stays float64). ``stats[i]`` gives member ``i``'s statistics; a member without them
  gets them computed once from its storage at construction (one read of its data).
- Every batch holds ``("dataset", "index")`` (int64 ``[batch]``: which member each item comes from;
  ``mixture.names[index]`` is its id) and, with ``ids=True``, ``("dataset", "id")`` (the id of each
  item as a string; this costs about a millisecond per batch).
- The result is the members' batches concatenated in member order (each member's items contiguous,
  so slices stay whole), with the same batch dimensions as theirs.

- Drawn ahead: when every member is a direct member of a read-only storage with a plain
  ``RandomSampler`` or ``SliceSampler`` and shares are exact, a call draws ``batches_ahead(n)``
  batches at once (``read_ahead=k`` batches; ``None``: batches of at most ``READ_AHEAD_BATCH_BYTES``,
  up to ``READ_AHEAD_ROWS`` rows and ``READ_AHEAD_BYTES`` together; 1: none ahead), each member in one draw and one read
  (``ReplayBuffer.draw_many_rows``: the values of successive draws), and the next calls with the same
  ``n`` return them. The batches are those of drawing one per call; a call with another ``n`` drops
  them. Every batch is written whole (values, padding, masks, index) in memory no other batch shares.

Construction draws one small probe batch from every member to learn its schema (it advances that
member's generator).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch
from tensordict import NonTensorStack, TensorDict, TensorDictBase, is_non_tensor

from datasets_hub.buffers.feature_stats import compute_feature_stats, stats_arrays
from datasets_hub.buffers.nested_keys import Key, NestPlan, as_key, key_to_str, nest
from datasets_hub.buffers.row_blocks import BatchMemory, batch_tensordict, batch_tensors, fill_rows
from datasets_hub.buffers.samplers.random import RandomSampler
from datasets_hub.buffers.samplers.slice import SliceSampler
from datasets_hub.buffers.tensor_leaves import REAL_NUMPY_DTYPES
from datasets_hub.errors import InvalidParameter, did_you_mean

NORMALIZE_MODES = ("mean_std", "min_max", "q01_q99")
_EPS = 1e-8
#: batches drawn ahead (``read_ahead=None``) fill about this many rows and at most this many bytes;
#: only batches of at most READ_AHEAD_BATCH_BYTES are: each item drawn ahead costs one more copy, which
#: outweighs the per-call work saved on larger batches (measured: docs/results/mixtures.md)
READ_AHEAD_ROWS = 16384
READ_AHEAD_BYTES = 32 << 20
READ_AHEAD_BATCH_BYTES = 1 << 20


def mixture_weights(
    sizes: Sequence[int],
    weights: Sequence[float] | str | None = "size",
    temperature: float = 1.0,
    names: Sequence[str] | None = None,
) -> np.ndarray:
    """The normalised sampling probabilities of members of ``sizes`` (see the module docstring);
    errors name the member (``names[i]``, else its position)."""
    n = len(sizes)
    names = [str(i) for i in range(n)] if names is None else [repr(str(x)) for x in names]
    if isinstance(weights, str) or weights is None:
        if weights in (None, "uniform"):
            return np.full(n, 1.0 / n)
        if weights != "size":
            raise InvalidParameter(f"weights must be a list of numbers, 'uniform' or 'size', got {weights!r}")
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
            raise InvalidParameter(f"temperature must be a positive number, got {temperature!r}")
        if any(s <= 0 for s in sizes):
            empty = ", ".join(names[i] for i, s in enumerate(sizes) if s <= 0)
            raise InvalidParameter(f"weights='size' needs non-empty datasets; dataset {empty} holds no items")
        raw = np.asarray(sizes, dtype=np.float64) ** (1.0 / temperature)
    else:
        raw = np.asarray(list(weights), dtype=np.float64).reshape(-1)
        if raw.size != n:
            raise InvalidParameter(f"weights has {raw.size} values for {n} datasets: give one per dataset")
        bad = [i for i, w in enumerate(raw) if not math.isfinite(w) or w < 0]
        if bad:
            raise InvalidParameter(
                f"weights must be finite and non-negative; dataset {names[bad[0]]} has weight {float(raw[bad[0]])}"
            )
        if temperature != 1.0:
            raise InvalidParameter("temperature applies to weights='size'; explicit weights are used as given")
    if not raw.sum() > 0:
        raise InvalidParameter(f"weights must not all be zero, got {raw.tolist()}")
    return raw / raw.sum()


def largest_remainder(p: np.ndarray, total: int) -> list[int]:
    """``round(p_i * total)`` summing to ``total``: floors, then one more for the largest remainders
    (ties to the lower index)."""
    exact = p * total
    counts = np.floor(exact).astype(np.int64)
    rest = total - int(counts.sum())
    order = sorted(range(len(p)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[:rest]:
        counts[i] += 1
    return [int(c) for c in counts]


def _unit(buffer: Any) -> int:
    """Items a member draws at once: its slice length for slice samplers, else 1."""
    sampler = getattr(buffer, "sampler", None)
    slice_len = getattr(sampler, "slice_len", None)
    if hasattr(sampler, "check_batch_size") and getattr(sampler, "num_slices", None) is not None:
        raise InvalidParameter(
            "a mixture shares batches in whole slices: give slice samplers slice_len=..., not num_slices=..."
        )
    return int(slice_len) if isinstance(slice_len, int) and slice_len > 0 else 1


def _spec(value: Any, batch_dims: int) -> tuple[str, Any, tuple[int, ...]]:
    if is_non_tensor(value) or not isinstance(value, torch.Tensor):
        return ("text", None, ())
    return ("tensor", value.dtype, tuple(value.shape[batch_dims:]))


class _Member:
    """One member's sample-time plan: which leaf goes to which key, and its normalisation."""

    def __init__(self, name: str, buffer: Any, key_map: Any, project: Any = None) -> None:
        self.name = name
        self.buffer = buffer
        self.project = project  # the user's callable: this member's batch -> a batch of the common schema
        self.unit = _unit(buffer)
        self.key_map = key_map
        self.plan: list[tuple[Key, Key]] = []  # (leaf of a sample, key in the mixture), from the probe
        self.norm: dict[Key, tuple[str, dict[str, np.ndarray]]] = {}
        self.norm_tensors: dict[tuple[Key, Any], tuple[torch.Tensor, ...]] = {}
        self.width: dict[Key, int] = {}  # padded keys: this member's last dimension
        self.arrays_only = False  # every leaf a CPU tensor numpy holds: the batch can be allocated once
        self.direct = False  # its rows are gathered straight into the batch (storage.gather_into)
        self.source_spec: dict[Key, tuple[np.dtype, tuple[int, ...]]] = {}  # source leaf: dtype, per-item shape
        self.norm_np: dict[Key, tuple[np.ndarray, np.ndarray, bool]] = {}  # target: shift, scale, clip
        self.routes: list[tuple] = []  # plan_routes
        self.pad_rows: dict[Key, np.ndarray] = {}  # padded keys: this member's row of the pad mask
        self._pool: dict[Key, np.ndarray] = {}  # write_ahead's gather, reused (never part of a batch)

    def projected(self, td: TensorDictBase) -> TensorDictBase:
        """The batch through the user's projection, if any (its errors and wrong results name the dataset)."""
        if self.project is None:
            return td
        try:
            out = self.project(td)
        except Exception as exc:
            raise InvalidParameter(f"dataset {self.name!r}: its projection failed on a batch: {exc!r}") from exc
        if not isinstance(out, TensorDictBase) or tuple(out.batch_size) != tuple(td.batch_size):
            what = list(out.batch_size) if isinstance(out, TensorDictBase) else type(out).__name__
            raise InvalidParameter(
                f"dataset {self.name!r}: a projection returns a TensorDict of the batch's size "
                f"{list(td.batch_size)}, got {what}"
            )
        return out

    def check_projected(self, leaves: dict[Key, Any]) -> None:
        """A projected batch holds what the probe held (dtype, per-item shape), naming the key that does not."""
        for source, (dtype, shape) in self.source_spec.items():
            value = leaves.get(source)
            got = (value.numpy().dtype, tuple(value.shape[1:])) if isinstance(value, torch.Tensor) else None
            if got is not None and got != (dtype, shape):
                raise InvalidParameter(
                    f"dataset {self.name!r}: its projection gave {key_to_str(source)!r} as {got[0]} {list(got[1])} "
                    f"per item, but {dtype} {list(shape)} on the first batch: a projection must give one schema"
                )

    def learn(self, probe: TensorDictBase) -> dict[Key, Any]:
        """Plan the key map on a probe batch (errors name the missing keys); the probe's mapped leaves."""
        leaves = sample_leaves(self.projected(probe))
        if self.key_map is None:
            self.plan = [(k, k) for k in leaves]
            self.plan_direct(leaves)
            return leaves
        plan = []
        for source, target in self.key_map.items():
            if source in leaves:
                plan.append((source, target))
            else:  # a sub-tree: every leaf under it, renamed with it
                under = [k for k in leaves if k[: len(source)] == source]
                if not under:
                    known = sorted(key_to_str(k) for k in leaves)
                    raise InvalidParameter(
                        f"dataset {self.name!r}: the key map names {key_to_str(source)!r}, which its samples do "
                        f"not hold.{did_you_mean(key_to_str(source), known)} Its keys: {known}"
                    )
                plan += [(k, (*target, *k[len(source) :])) for k in under]
            mask = (*source[:-1], source[-1] + "_is_pad")
            if mask in leaves and mask not in self.key_map:
                plan.append((mask, (*target[:-1], target[-1] + "_is_pad")))
        self.plan = plan
        self.plan_direct(leaves)
        return {target: leaves[source] for source, target in plan}

    def mapped(self, td: TensorDictBase) -> dict[Key, Any]:
        """The leaves of a batch under their keys in the mixture, normalised."""
        leaves = sample_leaves(self.projected(td))
        if self.project is not None:
            self.check_projected(leaves)
        try:
            out = {target: leaves[source] for source, target in self.plan}
        except KeyError as exc:
            raise InvalidParameter(
                f"dataset {self.name!r} returned a batch without {key_to_str(exc.args[0])!r}, which its first "
                "batch held: a mixture needs members whose batches keep their keys"
            ) from None
        for key, (mode, arrays) in self.norm.items():
            out[key] = _normalize(self, key, out[key], mode, arrays)
        return out

    def plan_direct(self, probe_leaves: dict[Key, Any]) -> None:
        """Use the direct path when the buffer hands out its draw (``draw_rows``), its storage gathers
        into given arrays (``gather_into``) and every leaf is a CPU tensor numpy holds."""
        values = [probe_leaves[source] for source, _ in self.plan]
        storage = getattr(self.buffer, "storage", None)
        self.arrays_only = all(not is_non_tensor(v) for v in values) and _numpy_able(values)
        self.direct = (
            self.arrays_only
            and self.project is None
            and callable(getattr(self.buffer, "draw_rows", None))
            and callable(getattr(storage, "gather_into", None))
        )
        self.source_spec = {
            source: (probe_leaves[source].numpy().dtype, tuple(probe_leaves[source].shape[1:]))
            for source, _ in self.plan
            if isinstance(probe_leaves[source], torch.Tensor) and _numpy_able([probe_leaves[source]])
        }

    def plan_routes(self, dtypes: dict[Key, np.dtype], widths: dict[Key, int]) -> None:
        """Where each source leaf goes in a batch whose keys have ``dtypes`` and padded ``widths``:
        ``(source, target, own width or None, norm or None, gathered aside first)``, worked out once."""
        routes = []
        for source, target in self.plan:
            dtype, shape = self.source_spec.get(source, (None, ()))
            narrow = shape[-1] if target in widths and shape and shape[-1] != widths[target] else None
            norm = self.norm_np.get(target)
            # normalised into a padded key or to another dtype: gathered aside, normalised there (contiguous
            # passes: the same ufuncs on a strided slice of the batch run several times slower), copied in
            aside = norm is not None and (narrow is not None or dtype != dtypes[target])
            routes.append((source, target, narrow, norm, aside))
        self.routes = routes

    def reads_ahead(self) -> bool:
        """Whether the items of later batches may be drawn now (``write_ahead``): a direct member whose
        plain uniform or slice sampler draws i.i.d. rows of a read-only storage, so nothing between two
        calls (writes, priorities, an epoch's end) could change what a later draw gives."""
        sampler = getattr(self.buffer, "sampler", None)
        return (
            self.direct
            and bool(getattr(self.buffer.storage, "read_only", False))
            and type(sampler) in (RandomSampler, SliceSampler)
            and callable(getattr(self.buffer, "draw_many_rows", None))
        )

    def write_ahead(self, arrays: dict[Key, np.ndarray], k: int, batch: int, row: int, count: int) -> None:
        """This member's ``count`` items of each of ``k`` batches of ``batch`` items laid one after the
        other in ``arrays``: one draw of ``k * count`` items (``draw_many_rows``: the values of ``k``
        successive draws), one read, then batch ``j``'s items normalised and written into rows
        ``j * batch + row`` to ``j * batch + row + count`` (entries past this member's width zeroed)."""
        n = k * count
        index, info, rows = self.buffer.draw_many_rows(k, count)
        if rows is None:  # drawn without the promise of valid rows: the storage's own gather checks them
            extras = {key: v for key, v in info.items() if isinstance(v, torch.Tensor) and v.shape[:1] == (n,)}
            leaves = sample_leaves(self.buffer.storage.gather(index, extras))
            got = {source: leaves[source].numpy() for source, *_ in self.routes}
        else:
            if next(iter(self._pool.values()), np.empty(0)).shape[:1] != (n,):
                self._pool = {src: np.empty((n, *shape), dtype) for src, (dtype, shape) in self.source_spec.items()}
            got = self._pool
            extras = {key: v for key, v in info.items() if isinstance(v, torch.Tensor) and as_key(key) in got}
            self.buffer.storage.gather_into(rows, got, extras)
        for source, target, narrow, norm, _ in self.routes:
            value = got[source].reshape(k, count, *got[source].shape[1:])
            dst = arrays[target].reshape(k, batch, *arrays[target].shape[1:])[:, row : row + count]
            if norm is not None:  # each member with its own statistics
                shift, scale, clip = norm
                value = np.subtract(value, shift, dtype=dst.dtype)
                np.divide(value, scale, out=value)
                if clip:
                    np.clip(value, -1.0, 1.0, out=value)
            if narrow is not None:
                dst.fill(0)  # whole rows at once: cheaper than the strided tail alone
            fill_rows(dst, value)

    def write(self, arrays: dict[Key, np.ndarray], row: int, count: int) -> None:
        """Draw ``count`` items and write them, normalised, into rows ``row:row + count`` of ``arrays``
        (the batch, every key allocated once): gathered straight into it on the direct path, else
        sampled and copied. Entries past this member's width of a padded key are zeroed."""
        end = row + count
        draw = self.buffer.draw_rows(count) if self.direct else None
        if draw is None or draw[2] is None:
            if draw is None:
                leaves = self.mapped(self.buffer.sample(count))
            else:  # drawn, but the rows were not promised: the storage's own gather of the index
                index, info, _ = draw
                extras = {k: v for k, v in info.items() if isinstance(v, torch.Tensor) and v.shape[:1] == (count,)}
                leaves = self.mapped(self.buffer.storage.gather(index, extras))
            for _, target, narrow, _, _ in self.routes:
                dst = arrays[target][row:end]
                if narrow is not None:
                    dst.fill(0)
                value = leaves[target]
                if not isinstance(value, torch.Tensor) or not _numpy_able([value]):
                    raise InvalidParameter(
                        f"dataset {self.name!r} gave {key_to_str(target)!r} as {type(value).__name__} on "
                        f"{getattr(value, 'device', 'no device')}, but CPU tensors on its first batch"
                    )
                try:
                    fill_rows(dst, value.numpy())
                except ValueError:
                    raise InvalidParameter(
                        f"dataset {self.name!r} gave {key_to_str(target)!r} of shape {list(value.shape)} for "
                        f"{count} items of per-item shape {list(dst.shape[1:])} (its first batch's): a member must "
                        "return the items asked for, with one schema"
                    ) from None
            return
        _, info, rows = draw
        views, later = {}, []
        for source, target, narrow, norm, aside in self.routes:
            dst = arrays[target][row:end]
            if narrow is not None:
                dst.fill(0)  # whole rows at once, then the values over their leading entries
                dst = dst[..., :narrow]
            if aside:
                dtype, shape = self.source_spec[source]
                views[source] = np.empty((count, *shape), dtype=dtype)
                later.append((views[source], dst, norm))
            else:
                views[source] = dst
                if norm is not None:
                    later.append((dst, dst, norm))
        extras = {k: v for k, v in info.items() if isinstance(v, torch.Tensor) and as_key(k) in views}
        self.buffer.storage.gather_into(rows, views, extras)
        for value, dst, (shift, scale, clip) in later:  # each member with its own statistics
            x = value if value is dst else np.subtract(value, shift, dtype=dst.dtype)
            if value is dst:
                np.subtract(x, shift, out=x)
            np.divide(x, scale, out=x)
            if clip:
                np.clip(x, -1.0, 1.0, out=x)
            if x is not dst:
                fill_rows(dst, x)


def _numpy_able(pieces: list[Any]) -> bool:
    return all(
        isinstance(p, torch.Tensor) and p.device.type == "cpu" and p.dtype in REAL_NUMPY_DTYPES and not p.requires_grad
        for p in pieces
    )


def concat_rows(pieces: list[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(pieces)``, in numpy for CPU tensors: one thread, never torch's intra-op pool (whose
    threads spin when the cores are busy: a 4096-row batch took milliseconds per leaf that way)."""
    if _numpy_able(pieces):
        return torch.from_numpy(np.concatenate([p.numpy() for p in pieces]))
    return torch.cat(pieces)


def copy_rows(value: torch.Tensor) -> torch.Tensor:
    """``value.clone()``, in numpy for CPU tensors (see :func:`concat_rows`)."""
    return torch.from_numpy(value.numpy().copy()) if _numpy_able([value]) else value.clone()


def pad_rows(pieces: list[torch.Tensor], widths: list[int], width: int) -> torch.Tensor:
    """The pieces stacked along rows in one zero block whose last dimension is ``width``, each piece
    in its corner (``widths[i]`` = its last dimension)."""
    first = pieces[0]
    rows = sum(p.shape[0] for p in pieces)
    if _numpy_able(pieces):
        out = np.zeros((rows, *first.shape[1:-1], width), dtype=first.numpy().dtype)
        row = 0
        for piece, have in zip(pieces, widths, strict=True):
            out[row : row + piece.shape[0], ..., :have] = piece.numpy()
            row += piece.shape[0]
        return torch.from_numpy(out)
    value = first.new_zeros((rows, *first.shape[1:-1], width))
    row = 0
    for piece, have in zip(pieces, widths, strict=True):
        value.narrow(0, row, piece.shape[0]).narrow(-1, 0, have).copy_(piece)
        row += piece.shape[0]
    return value


def sample_leaves(td: TensorDictBase) -> dict[Key, Any]:
    """The leaves of a sample by key, its ``index`` entries left out (one walk of the tree: cheaper
    than ``keys(include_nested=True)`` and a lookup per leaf)."""
    out: dict[Key, Any] = {}
    stack: list[tuple[Key, Any]] = [((), td)]
    while stack:
        prefix, node = stack.pop()
        for name, value in node.items():
            key = (*prefix, name)
            if key == ("index",):
                continue
            if isinstance(value, TensorDictBase) and not is_non_tensor(value):
                stack.append((key, value))
            else:
                out[key] = value
    return out


def _key_map(value: Any, name: str) -> dict[Key, Key] | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        pairs = [(as_key(k), as_key(v)) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        pairs = [(as_key(k), as_key(k)) for k in value]
    else:
        raise InvalidParameter(
            f"dataset {name!r}: a key map is a dict {{source: target}}, a list of keys, or None; got {value!r}"
        )
    targets = [t for _, t in pairs]
    if len(set(targets)) != len(targets):
        twice = sorted({key_to_str(t) for t in targets if targets.count(t) > 1})
        raise InvalidParameter(f"dataset {name!r}: the key map sends two keys to {twice}")
    return dict(pairs)


class Mixture:
    """Sample one batch from several replay buffers whose keys and shapes differ (module docstring)."""

    def __init__(
        self,
        buffers: Sequence[Any],
        *,
        names: Sequence[str] | None = None,
        weights: Sequence[float] | str | None = "size",
        temperature: float = 1.0,
        exact: bool = True,
        key_maps: Sequence[Any] | None = None,
        project: Sequence[Any] | None = None,
        normalize: Mapping[Any, str] | None = None,
        stats: Sequence[Mapping[str, Any] | None] | None = None,
        ids: bool = False,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
        read_ahead: int | None = None,
    ) -> None:
        buffers = list(buffers)
        if not buffers:
            raise InvalidParameter("a mixture needs at least one dataset")
        for i, rb in enumerate(buffers):
            if not hasattr(rb, "sample"):
                raise InvalidParameter(f"dataset {i} is a {type(rb).__name__}, not a replay buffer or an id")
        names = [f"dataset{i}" for i in range(len(buffers))] if names is None else [str(n) for n in names]
        if len(names) != len(buffers):
            raise InvalidParameter(f"{len(names)} names for {len(buffers)} datasets")
        self.names = tuple(names)
        if key_maps is not None and len(key_maps) != len(buffers):
            raise InvalidParameter(f"key_maps has {len(key_maps)} entries for {len(buffers)} datasets (None keeps all)")
        maps = (
            [None] * len(buffers)
            if key_maps is None
            else [_key_map(m, n) for m, n in zip(key_maps, names, strict=True)]
        )
        if project is not None:
            project = list(project)
            if len(project) != len(buffers):
                raise InvalidParameter(f"project has {len(project)} entries for {len(buffers)} datasets (None: as is)")
            for name, fn in zip(names, project, strict=True):
                if fn is not None and not callable(fn):
                    raise InvalidParameter(f"dataset {name!r}: a projection is a callable batch -> batch, got {fn!r}")
        projections = project if project is not None else [None] * len(buffers)
        self._members = [_Member(n, rb, m, fn) for n, rb, m, fn in zip(names, buffers, maps, projections, strict=True)]
        units = {m.unit for m in self._members}
        if len(units) > 1:
            detail = ", ".join(f"{m.name!r}: {m.unit}" for m in self._members)
            raise InvalidParameter(f"members draw slices of different lengths ({detail}); give them one slice_len")
        self.unit = units.pop()
        self.p = mixture_weights([len(rb) for rb in buffers], weights, temperature, names)
        self.exact = bool(exact)
        self.ids = bool(ids)
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise InvalidParameter(f"batch_size must be a positive int or None, got {batch_size!r}")
        self.batch_size = batch_size
        self.generator = generator
        if read_ahead is not None and (
            not isinstance(read_ahead, int) or isinstance(read_ahead, bool) or read_ahead < 1
        ):
            raise InvalidParameter(
                f"read_ahead must be None (automatic) or a number of batches >= 1 (1: none ahead), got {read_ahead!r}"
            )
        self.read_ahead = read_ahead
        # batches drawn ahead, of _ahead_size items each: each batch's leaves in the order of the memory's layout
        self._ahead: deque[tuple[torch.Tensor, ...]] = deque()
        self._ahead_size = 0
        self._pad: dict[Key, int] = {}  # padded keys: their width in the mixture
        self._shares: dict[int, list[int]] = {}  # exact shares by number of slots
        self._fixed: dict[tuple, dict[Key, torch.Tensor]] = {}  # (counts, device) -> dataset index, masks
        self._fixed_arrays: dict[tuple, dict[Key, np.ndarray]] = {}  # (batch size, counts) -> the same as arrays
        self._schema = self._learn_schema()
        self._normalized = {as_key(k) for k in (normalize or {})}
        # every leaf of every member a CPU array: each batch is allocated once and filled member by member
        self._block = all(m.arrays_only for m in self._members)
        self._plan_normalize(normalize or {}, stats)
        # (key, per-item shape, dtype) of every array of a batch, allocated once per batch
        layout = [(key, spec[2], self._layout_dtype(key)) for key, spec in self._schema.items() if spec[0] == "tensor"]
        fixed: list[tuple[Key, tuple[int, ...], np.dtype]] = [(("dataset", "index"), (), np.dtype(np.int64))]
        # and the pad masks: (padded key, its mask's key, width)
        self._masks = [(key, (*key[:-1], key[-1] + "_dim_is_pad"), width) for key, width in self._pad.items()]
        fixed += [(mask_key, (width,), np.dtype(np.bool_)) for _, mask_key, width in self._masks]
        self._memory = BatchMemory(layout + fixed)
        # a batch's keys, as its arrays are laid out (then its ids): each batch's dicts made in one step each
        keys = [key for key, _, _ in self._memory.layout]
        self._index_at = keys.index(("dataset", "index"))
        self._tree = NestPlan([*keys, ("dataset", "id")] if self.ids else keys)
        for m in self._members:
            m.plan_routes({key: dtype for key, _, dtype in layout}, self._pad)
            m.pad_rows = {key: np.arange(width) >= m.width[key] for key, width in self._pad.items()}
        # every member's later batches may be drawn now, and every batch holds the same shares
        self._can_read_ahead = self._block and self.exact and all(m.reads_ahead() for m in self._members)

    # -- construction ----------------------------------------------------------------------------------
    def _learn_schema(self) -> dict[Key, tuple[str, Any, tuple[int, ...]]]:
        """Probe each member, check that their mapped keys fit together, and plan the padding."""
        specs = []
        for m in self._members:
            probe = m.buffer.sample(m.unit)
            if not isinstance(probe, TensorDictBase):
                raise InvalidParameter(f"dataset {m.name!r} samples {type(probe).__name__}, not TensorDicts")
            if probe.batch_dims != 1:
                raise InvalidParameter(
                    f"dataset {m.name!r} samples batches of shape {list(probe.batch_size)}; a mixture joins "
                    "batches of one dimension (rows, slices laid flat, windows of shape [B])"
                )
            specs.append({k: _spec(v, probe.batch_dims) for k, v in m.learn(probe).items()})
        every = set().union(*specs)
        schema = {}
        for key in sorted(every):
            lacking = [m.name for m, s in zip(self._members, specs, strict=True) if key not in s]
            if lacking:
                holding = [m.name for m, s in zip(self._members, specs, strict=True) if key in s]
                raise InvalidParameter(
                    f"key {key_to_str(key)!r} is in {holding} but not in {lacking}: map it to a common key in "
                    "each dataset (key_maps=[{source: target}, ...]) or leave it out of the key maps"
                )
            kinds = [s[key] for s in specs]
            schema[key] = kinds[0]
            if all(k == kinds[0] for k in kinds):
                continue
            self._plan_pad(key, kinds)
            schema[key] = (kinds[0][0], kinds[0][1], (*kinds[0][2][:-1], max(k[2][-1] for k in kinds)))
        return schema

    def _plan_pad(self, key: Key, kinds: list[tuple[str, Any, tuple[int, ...]]]) -> None:
        base = kinds[0]
        for m, kind in zip(self._members, kinds, strict=True):
            if kind[0] != base[0] or kind[1] != base[1]:
                raise InvalidParameter(
                    f"key {key_to_str(key)!r}: dataset {m.name!r} gives {kind[1]} but {self._members[0].name!r} "
                    f"gives {base[1]}; a mixture does not cast: convert it in a per-dataset transform"
                )
            if kind == base:
                continue
            shape, first = kind[2], base[2]
            if not shape or len(shape) != len(first) or shape[:-1] != first[:-1] or len(shape) > 2:
                what = "image size" if len(shape) >= 3 or len(first) >= 3 else "shape"
                raise InvalidParameter(
                    f"key {key_to_str(key)!r}: dataset {m.name!r} has per-item {what} {list(shape)} but "
                    f"{self._members[0].name!r} has {list(first)}; only the last dimension of a vector (or a "
                    "window of vectors) is padded. Resize or project it in a per-dataset transform"
                )
            if kind[1] == torch.bool:
                raise InvalidParameter(f"key {key_to_str(key)!r}: bool keys of different widths cannot be padded")
        self._pad[key] = max(k[2][-1] for k in kinds)
        for m, kind in zip(self._members, kinds, strict=True):
            m.width[key] = kind[2][-1]

    def _plan_normalize(self, normalize: Mapping[Any, str], stats: Sequence[Any] | None) -> None:
        if stats is not None and len(stats) != len(self._members):
            raise InvalidParameter(f"stats has {len(stats)} entries for {len(self._members)} datasets")
        for key, mode in normalize.items():
            target = as_key(key)
            if mode not in NORMALIZE_MODES:
                raise InvalidParameter(
                    f"normalize[{key_to_str(target)!r}] must be one of {NORMALIZE_MODES}, got {mode!r}"
                )
            if target not in self._schema:
                known = sorted(key_to_str(k) for k in self._schema)
                raise InvalidParameter(
                    f"normalize names {key_to_str(target)!r}, which the mixture's batches do not hold."
                    f"{did_you_mean(key_to_str(target), known)}"
                )
            if self._schema[target][0] != "tensor":
                raise InvalidParameter(f"normalize names {key_to_str(target)!r}, which holds text, not numbers")
        if not normalize:
            return
        for i, m in enumerate(self._members):
            features = None if stats is None else stats[i]
            if features is None:  # an old build or a plain buffer: one read of its data, now
                features = compute_feature_stats(m.buffer.storage)
            inverse = {t: s for s, t in m.key_map.items()} if m.key_map is not None else {}
            for key, mode in normalize.items():
                target = as_key(key)
                source = inverse.get(target, target)
                entry = features.get(key_to_str(source))
                if entry is None and source[0] == "next":  # next/<key> has the statistics of <key>
                    entry = features.get(key_to_str(source[1:]))
                if entry is None:
                    raise InvalidParameter(
                        f"dataset {m.name!r} has no statistics for {key_to_str(source)!r} (normalising "
                        f"{key_to_str(target)!r}); it has them for {sorted(features)}"
                    )
                m.norm[target] = (mode, stats_arrays(entry))
                m.norm_np[target] = _shift_scale(mode, m.norm[target][1], self._layout_dtype(target))

    def _layout_dtype(self, key: Key) -> np.dtype:
        """The numpy dtype of ``key`` in a batch: its members' dtype, float32 (float64 stays) when normalised."""
        dtype = torch.empty((), dtype=self._schema[key][1]).numpy().dtype
        if key in self._normalized:
            return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)
        return dtype

    # -- sampling -------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._members)

    def __getitem__(self, i: int) -> Any:
        return self._members[i].buffer

    def counts(self, batch_size: int) -> list[int]:
        """Items each member gives to a batch of ``batch_size`` (a multinomial draw when not exact)."""
        if batch_size % self.unit:
            raise InvalidParameter(
                f"batch_size={batch_size} is not a multiple of the members' slice length {self.unit}: use "
                f"{max(1, batch_size // self.unit) * self.unit}"
            )
        slots = batch_size // self.unit
        if self.exact:
            shares = self._shares.get(slots)
            if shares is None:
                shares = self._shares[slots] = largest_remainder(self.p, slots)
        else:
            picks = torch.multinomial(torch.as_tensor(self.p), slots, replacement=True, generator=self.generator)
            shares = torch.bincount(picks, minlength=len(self._members)).tolist()
        return [s * self.unit for s in shares]

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """One batch of ``batch_size`` items drawn from the members (module docstring)."""
        if batch_size is None:
            batch_size = self.batch_size
            if batch_size is None:
                raise InvalidParameter("sample() needs a batch size: sample(256) or Mixture(..., batch_size=256)")
        counts = self.counts(batch_size)
        if self._block:
            out = self._batch(self._next_values(batch_size, counts), batch_size)
        else:
            parts = []
            for i, count in enumerate(counts):
                if count:
                    m = self._members[i]
                    td = m.buffer.sample(count)
                    parts.append((m, m.mapped(td), td.batch_size))
            out = self._concatenate(parts, tuple(counts))
        if return_info:
            return out, {"dataset": out.get(("dataset", "index"))}
        return out

    def batches_ahead(self, batch_size: int) -> int:
        """How many batches of ``batch_size`` one draw makes (``read_ahead``; 1: none drawn ahead)."""
        if not self._can_read_ahead:
            return 1
        if self.read_ahead is not None:
            return self.read_ahead
        batch_bytes = batch_size * self._memory.row_bytes
        if batch_bytes > READ_AHEAD_BATCH_BYTES:
            return 1
        return max(1, min(READ_AHEAD_ROWS // batch_size, READ_AHEAD_BYTES // max(1, batch_bytes)))

    def _next_values(self, batch_size: int, counts: list[int]) -> tuple[torch.Tensor, ...]:
        """The leaves of the next batch (tensors over its arrays, in the memory's layout order): one drawn
        ahead, or ``batches_ahead`` new ones allocated once (``BatchMemory``: a block shared by them,
        reused once none of them is referenced) and filled member by member (``_Member.write``,
        ``_Member.write_ahead``)."""
        if self._ahead and self._ahead_size == batch_size:
            return self._ahead.popleft()
        self._ahead.clear()  # another batch size: the batches drawn for the last one are dropped
        k = self.batches_ahead(batch_size)
        arrays = self._memory.arrays(k * batch_size)
        row = 0
        for m, count in zip(self._members, counts, strict=True):
            if count:
                if k == 1:
                    m.write(arrays, row, count)
                else:
                    m.write_ahead(arrays, k, batch_size, row, count)
                row += count
        self._write_fixed(arrays, k, batch_size, counts)
        if k == 1:
            return tuple(torch.from_numpy(a) for a in arrays.values())
        self._ahead_size = batch_size
        self._ahead.extend(batch_tensors(arrays.values(), k, batch_size))
        return self._ahead.popleft()

    def _write_fixed(self, arrays: dict[Key, np.ndarray], k: int, batch_size: int, counts: list[int]) -> None:
        """The dataset index and the pad masks of ``k`` batches of these ``counts``: one batch's rows
        (``_fixed_rows``) copied into each of the k, one copy per key."""
        for key, rows in self._fixed_rows(batch_size, counts).items():
            np.copyto(arrays[key].reshape(k, *rows.shape), rows)

    def _fixed_rows(self, batch_size: int, counts: list[int]) -> dict[Key, np.ndarray]:
        """One batch's dataset index and pad masks for these ``counts`` (each member's rows filled with
        its index and its row of each mask), made once per batch size with exact shares (private: only
        ever copied from)."""
        cache_key = (batch_size, tuple(counts))
        fixed = self._fixed_arrays.get(cache_key)
        if fixed is None:
            fixed = {("dataset", "index"): np.empty(batch_size, dtype=np.int64)}
            for _, mask_key, width in self._masks:
                fixed[mask_key] = np.empty((batch_size, width), dtype=np.bool_)
            row = 0
            for i, (m, count) in enumerate(zip(self._members, counts, strict=True)):
                fixed[("dataset", "index")][row : row + count] = i
                for key, mask_key, _ in self._masks:
                    fixed[mask_key][row : row + count] = m.pad_rows[key]
                row += count
            if self.exact and len(self._fixed_arrays) < 64:  # exact shares: one entry per batch size
                self._fixed_arrays[cache_key] = fixed
        return fixed

    def _batch(self, values: tuple[torch.Tensor, ...], batch_size: int) -> TensorDict:
        leaves: Sequence[Any] = values
        if self.ids:
            index = values[self._index_at]
            leaves = [*values, NonTensorStack.from_list([self.names[i] for i in index.reshape(-1).tolist()])]
        return batch_tensordict(self._tree, leaves, batch_size)  # the leaves were written to the batch's schema

    def _concatenate(self, parts: list[tuple[_Member, dict[Key, Any], torch.Size]], counts: tuple) -> TensorDict:
        batch = torch.Size([sum(size[0] for _, _, size in parts), *parts[0][2][1:]])
        keys, values = [], []
        for key in parts[0][1]:
            pieces = [leaves[key] for _, leaves, _ in parts]
            width = self._pad.get(key)
            if width is not None:  # one zero block, each member's values copied into its corner
                value = pad_rows(pieces, [m.width[key] for m, _, _ in parts], width)
            elif isinstance(pieces[0], torch.Tensor):
                value = pieces[0] if len(pieces) == 1 else concat_rows(pieces)
            else:
                value = NonTensorStack.from_list([x for p in pieces for x in p.tolist()])
            keys.append(key)
            values.append(value)
        device = next((v.device for v in values if isinstance(v, torch.Tensor)), torch.device("cpu"))
        for key, value in self._fixed_keys(parts, counts, batch, device).items():
            keys.append(key)
            values.append(copy_rows(value))  # cached: the batch gets its own copy
        if self.ids:
            index = values[keys.index(("dataset", "index"))]
            keys.append(("dataset", "id"))
            values.append(NonTensorStack.from_list([self.names[i] for i in index.reshape(-1).tolist()]))
        return TensorDict._new_unsafe(source=cast(Any, nest(keys, values)), batch_size=batch, nested=True)

    def _fixed_keys(self, parts: list, counts: tuple, batch: torch.Size, device: Any) -> dict[Key, torch.Tensor]:
        """The dataset index and the pad masks of a batch of these ``counts``: the same for every batch
        with them (always, with exact shares), so made once and cached."""
        cache_key = (counts, tuple(batch), device)
        fixed = self._fixed.get(cache_key)
        if fixed is None:
            members = {id(m): i for i, m in enumerate(self._members)}
            sizes = [(members[id(m)], size) for m, _, size in parts]
            fixed = {
                ("dataset", "index"): torch.cat(
                    [torch.full(tuple(size), i, dtype=torch.int64, device=device) for i, size in sizes]
                )
            }
            for key, mask_key, width in self._masks:  # each member's own row of the mask (_Member.pad_rows)
                rows = [torch.from_numpy(m.pad_rows[key]).to(device).expand(size[0], width) for m, _, size in parts]
                fixed[mask_key] = torch.cat(rows)
            if len(self._fixed) < 256:  # exact shares repeat one entry; multinomial ones vary
                self._fixed[cache_key] = fixed
        return fixed

    def __repr__(self) -> str:
        shares = ", ".join(f"{n}: {p:.3f}" for n, p in zip(self.names, self.p, strict=True))
        return f"Mixture({shares}; exact={self.exact})"


def _normalize(m: _Member, key: Key, value: torch.Tensor, mode: str, arrays: dict[str, np.ndarray]) -> torch.Tensor:
    dtype = torch.float64 if value.dtype == torch.float64 else torch.float32
    cached = m.norm_tensors.get((key, value.device))
    if cached is None:
        shift, scale, _ = _shift_scale(mode, arrays, np.dtype(np.float64))
        cached = tuple(torch.as_tensor(a, dtype=dtype, device=value.device) for a in (shift, scale))
        m.norm_tensors[(key, value.device)] = cached
    if _numpy_able([value]):  # in numpy: one thread, never torch's intra-op pool (see concat_rows)
        x = value.numpy().astype(np.float64 if dtype == torch.float64 else np.float32)
        np.subtract(x, cached[0].numpy(), out=x)
        np.divide(x, cached[1].numpy(), out=x)
        if mode == "q01_q99":
            np.clip(x, -1.0, 1.0, out=x)
        return torch.from_numpy(x)
    out = (value.to(dtype) - cached[0]) / cached[1]
    return out.clamp_(-1.0, 1.0) if mode == "q01_q99" else out


def _shift_scale(mode: str, arrays: dict[str, np.ndarray], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(shift, scale, clip)`` of a normalisation: ``(x - shift) / scale``, clipped to [-1, 1] if ``clip``."""
    if mode == "mean_std":
        shift, scale = arrays["mean"], np.maximum(arrays["std"], _EPS)
    else:
        lo, hi = (arrays["min"], arrays["max"]) if mode == "min_max" else (arrays["q01"], arrays["q99"])
        shift, scale = (lo + hi) / 2, np.maximum(hi - lo, _EPS) / 2
    return np.asarray(shift, dtype=dtype), np.asarray(scale, dtype=dtype), mode == "q01_q99"
