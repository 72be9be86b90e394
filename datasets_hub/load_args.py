"""Checks of ``load()``'s own arguments, made before anything is opened or built.

``load(id, **params)`` passes unknown keywords to the loader as dataset parameters, where a typo of
one of ``load``'s keywords (``batchsize=256``) or a sampler setting (``slice_len=32``) would either be
rejected as an unknown *loader* parameter or, by a loader that accepts anything, select a new
build. So a keyword that is not one of the catalogue entry's own parameters and looks like one of
``load``'s is refused with the right spelling. A sampler must be an instance, and the batch size
must suit it (slice samplers need a multiple of the slice length or number of slices).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from datasets_hub.errors import InvalidParameter

LOAD_KEYWORDS = (
    "batch_size",
    "sampler",
    "transform",
    "prefetch",
    "download",
    "generator",
    "preprocess",
    "preprocess_by",
    "resident",
    "max_bytes",
    "device",
    "cuda_graphs",
    "in_memory",
)
# sampler settings people pass to load() directly, and what to write instead
_SAMPLER_SETTINGS = {
    "slice_len": "sampler=SliceSampler(slice_len={v})",
    "slice_length": "sampler=SliceSampler(slice_len={v})",
    "seq_len": "sampler=SliceSampler(slice_len={v})",
    "sequence_length": "sampler=SliceSampler(slice_len={v})",
    "num_slices": "sampler=SliceSampler(num_slices={v})",
    "strict_length": "sampler=SliceSampler(..., strict_length={v})",
    "shuffle": "sampler=SamplerWithoutReplacement() (epochs without repeats) or the default RandomSampler()",
    "seed": "generator=torch.Generator().manual_seed({v})",
    "replacement": "sampler=SamplerWithoutReplacement()",
}


def check_params_are_not_load_keywords(dataset_id: str, params: dict[str, Any], known: Iterable[str]) -> None:
    """Refuse a parameter that is not one of the dataset's (``known``) but looks like a ``load`` keyword."""
    known = set(known)
    for key, value in params.items():
        if key in known:
            continue
        if key in _SAMPLER_SETTINGS:
            raise InvalidParameter(
                f"load({dataset_id!r}, {key}={value!r}): {key!r} is a sampler setting, not a parameter of the dataset. "
                f"Write {_SAMPLER_SETTINGS[key].format(v=value)!s} (from datasets_hub import SliceSampler, ...)"
            )
        from datasets_hub.torchrl_porting import KEYWORDS as TORCHRL_KEYWORDS

        close = difflib.get_close_matches(key, LOAD_KEYWORDS, n=1, cutoff=0.75)
        if close and key not in TORCHRL_KEYWORDS:  # pin_memory is TorchRL's, not a typo of in_memory: the loader says
            raise InvalidParameter(
                f"load({dataset_id!r}, {key}={value!r}): unknown keyword {key!r}; did you mean {close[0]}={value!r}? "
                "(keywords that are not load()'s own go to the loader as dataset parameters)"
            )


def check_sampler(sampler: Any, batch_size: int | None) -> None:
    """A sampler instance (not a class), and a batch size it can split (``check_batch_size`` hook)."""
    if sampler is None:
        return
    if isinstance(sampler, type):
        raise InvalidParameter(
            f"sampler={sampler.__name__} is a class; pass an instance, e.g. sampler={sampler.__name__}()"
            + (" or sampler=SliceSampler(slice_len=32)" if "Slice" in sampler.__name__ else "")
        )
    if not callable(getattr(sampler, "sample", None)):
        raise InvalidParameter(f"sampler must be a datasets_hub sampler instance, got {type(sampler).__name__}")
    check = getattr(sampler, "check_batch_size", None)
    if batch_size is not None and callable(check):
        try:
            check(batch_size)
        except ValueError as exc:
            raise InvalidParameter(
                f"load(batch_size={batch_size}, sampler={type(sampler).__name__}(...)): {exc}"
            ) from None
