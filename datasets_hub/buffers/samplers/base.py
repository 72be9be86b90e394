"""The ``Sampler`` contract every sampler follows, and ``as_index`` (row indices as int64 tensors).

Samplers return indices into a storage; they never read data they do not need (docs/guide/sampling.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from datasets_hub.buffers.state_files import dump_state, load_state
from datasets_hub.buffers.storages import Storage
from datasets_hub.errors import InvalidParameter


def check_generator(generator: Any) -> None:
    """Refuse anything but a ``torch.Generator`` (or ``None``) as the source of randomness, when it is
    given: a numpy ``Generator`` or an int seed would otherwise fail inside torch at the first draw."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator (e.g. torch.Generator().manual_seed(0)) or None, got "
            f"{type(generator).__module__}.{type(generator).__qualname__}"
            + (": pass torch.Generator().manual_seed(seed)" if isinstance(generator, int) else "")
        )


def refuse_without_replacement(cls: type, replacement: bool) -> None:
    """Refuse ``replacement=False`` on a sampler class that only samples with replacement (a ``TypeError``
    naming the class, as TorchRL raises): without the check it would silently sample with replacement."""
    if not replacement:
        raise TypeError(
            f"{cls.__name__} has no without-replacement variant; cannot be instantiated with replacement=False "
            "(SamplerWithoutReplacement and SliceSamplerWithoutReplacement sample each item once per epoch)"
        )


class Sampler:
    """Base contract of every sampler.

    - ``sample(storage, batch_size) -> (index, info)``: ``index`` is a 1-D int64 tensor of storage
      rows; ``info`` is a dict whose tensor entries of leading size ``len(index)`` are written into
      TensorDict samples by the buffer (e.g. ``"_weight"``, ``("next", "truncated")``).
    - ``generator`` (a ``torch.Generator`` or ``None``) is the only source of randomness: the same
      seed gives the same batches, in every process.
    - ``add(index)`` / ``extend(index)`` are called by the buffer after its writer wrote rows.
    - ``ran_out`` is True when an epoch-style sampler has nothing left for the current epoch.
    - ``sample_at(storage, index, generator)``: the ``(index, info)`` a sample holds where the draw lands
      on the rows ``index`` (the item at anchor ``i`` of a map-style view, ``ReplayBuffer.sample_at``);
      a sampler whose sample is not one item per drawn row refuses it by name (the default).
    - ``requires_shared_state`` (TorchRL's name) is True for a sampler whose draws depend on state that
      changes as it samples or as the trainer updates it (an epoch's remaining rows, priorities): copies in
      DataLoader worker processes would each keep their own, so ``rb.as_dataset()`` refuses such a sampler
      when workers are used. Stateless draws (uniform rows, slices, windows, goals) leave it False.
    """

    generator: torch.Generator | None = None
    requires_shared_state: bool = False

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        raise NotImplementedError

    def sample_rows(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any], np.ndarray | None]:
        """``sample(storage, batch_size)`` and, where the sampler can promise it, ``index`` as a 1-D numpy
        int64 array (same values) whose every value lies in ``[0, len(storage))``, with an ``info`` that
        holds only tensors of one row per item; ``None`` (the default) promises nothing. With the promise
        a buffer lets the storage skip its own conversion and range check (``Storage.gather_valid``)."""
        index, info = self.sample(storage, batch_size)
        return index, info, None

    def sample_many_rows(
        self, storage: Storage, k: int, batch_size: int
    ) -> tuple[torch.Tensor, dict[str, Any], np.ndarray | None]:
        """``k`` successive ``sample_rows(storage, batch_size)`` draws as one draw of ``k * batch_size``
        items, in draw order: the same values and the same generator state after it as ``k`` calls
        (``ReplayBuffer.sample_many``). Per-item info entries are concatenated, other entries become a
        list of the ``k`` values; the rows are promised only when every draw promised them. A draw
        shorter than ``batch_size`` (the end of an epoch) is a ``ValueError``. Samplers whose per-row
        work can run once over all ``k`` draws (``AnchorSampler``) override this."""
        return concat_draws([self.sample_rows(storage, batch_size) for _ in range(k)], batch_size)

    def sample_at(
        self, storage: Storage, index: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The sample's ``(index, info)`` where this sampler's draw lands on the rows ``index``, any further
        per-row draws made with ``generator``. This default refuses: only samplers that say what their item
        at a given row is (uniform rows, windows, goals, n-step returns) have one."""
        raise InvalidParameter(
            f"{type(self).__name__} has no item at a given row (its sample is not one item per drawn row, or it "
            "draws only some rows): a map-style view cannot index its samples. Iterate sampled batches instead "
            "(rb.as_iterable_dataset(), SampledBatches), or view the stored rows as they are with "
            "rb.as_map_dataset(view='rows')"
        )

    def add(self, index: int) -> None:
        return None

    def extend(self, index: torch.Tensor) -> None:
        return None

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        raise RuntimeError(
            f"{type(self).__name__} has no priorities; use PrioritizedSampler or PrioritizedSliceSampler"
        )

    _ran_out = False  # epoch-style samplers set it; the others never run out

    @property
    def ran_out(self) -> bool:
        return self._ran_out

    @ran_out.setter
    def ran_out(self, value: bool) -> None:
        # buffers reset the flag before iterating
        self._ran_out = bool(value)

    def empty(self) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None

    def dumps(self, path: str | Path) -> None:
        """Write :meth:`state_dict` to ``<path>/sampler_state.pt`` (the directory is created)."""
        dump_state(self, "sampler", path)

    def loads(self, path: str | Path) -> None:
        """Restore what :meth:`dumps` wrote (refused from another kind of sampler)."""
        load_state(self, "sampler", path)


def concat_draws(
    draws: list[tuple[torch.Tensor, dict[Any, Any], np.ndarray | None]], batch_size: int
) -> tuple[torch.Tensor, dict[Any, Any], np.ndarray | None]:
    """``(index, info, rows)`` draws of ``batch_size`` items each as one (``Sampler.sample_many_rows``)."""
    for index, _, _ in draws:
        check_full_batch(index.shape[0], batch_size)
    index = torch.cat([d[0] for d in draws])
    rows = None
    if all(d[2] is not None for d in draws):
        rows = np.concatenate([d[2] for d in draws])
    return index, concat_info([d[1] for d in draws], batch_size), rows


def check_full_batch(size: int, batch_size: int) -> None:
    """Refuse a draw of ``size`` items where ``sample_many`` stacks batches of ``batch_size``."""
    if size != batch_size:
        raise ValueError(
            f"sample_many: the sampler returned a batch of {size} items, shorter than batch_size={batch_size} "
            "(the end of an epoch); stack sample() calls yourself, or use drop_last=True"
        )


def concat_info(infos: list[dict[Any, Any]], batch_size: int) -> dict[Any, Any]:
    """The info dicts of several draws of ``batch_size`` items as one: per-item tensors (leading size
    ``batch_size``) concatenated, any other entry a list of the draws' values."""
    out: dict[Any, Any] = {}
    for key in infos[0]:
        values = [info[key] for info in infos]
        per_item = all(isinstance(v, torch.Tensor) and v.ndim and v.shape[0] == batch_size for v in values)
        out[key] = torch.cat(values) if per_item else values
    return out


def as_index(index: Any) -> torch.Tensor:
    """``index`` as an int64 tensor; floats (``1.5``, a float tensor) are a ``TypeError``, never truncated."""
    if not isinstance(index, torch.Tensor):
        array = np.asarray(index)
        if array.dtype == object or array.dtype.kind not in "iu":
            raise TypeError(
                f"row indices must be integers, got {array.dtype} ({index!r:.60}); pass the 'index' a sample returned"
            )
        index = torch.from_numpy(np.ascontiguousarray(array))
    if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
        raise TypeError(f"row indices must be integers, got a {index.dtype} tensor; pass the 'index' a sample returned")
    return index.to(torch.int64)


class WrapsSampler(Sampler):
    """Base of samplers that may wrap an inner ``sampler`` for their anchor rows (``None``: they draw
    their own): the buffer's ``generator`` reaches the inner sampler too, so one seed fixes every draw,
    and ``ran_out`` is the inner sampler's (never, without one). Subclasses set ``self.sampler`` and
    ``self._generator`` in ``__init__``."""

    sampler: Sampler | None
    _generator: torch.Generator | None

    @property
    def generator(self) -> torch.Generator | None:
        return self._generator

    @generator.setter
    def generator(self, value: torch.Generator | None) -> None:
        self._generator = value
        if self.sampler is not None:
            self.sampler.generator = value

    @property
    def ran_out(self) -> bool:
        return self.sampler.ran_out if self.sampler is not None else False

    @ran_out.setter
    def ran_out(self, value: bool) -> None:
        if self.sampler is not None:
            self.sampler.ran_out = value

    @property
    def requires_shared_state(self) -> bool:  # type: ignore[override]  # the inner sampler's, not a constant
        return self.sampler.requires_shared_state if self.sampler is not None else False
