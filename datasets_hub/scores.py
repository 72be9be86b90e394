"""D4RL-style normalized scores: ``100 * (returns - ref_min) / (ref_max - ref_min)``.

The reference scores are data: ``ref_min_score`` and ``ref_max_score`` of the dataset's catalogue
entry (``registry.yaml`` carries D4RL's published values; any registered entry may add its own).
By D4RL's convention 0 is a random policy and 100 an expert one.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from datasets_hub.errors import InvalidParameter, did_you_mean


def reference_scores(dataset_id: str) -> tuple[float, float]:
    """``(ref_min_score, ref_max_score)`` of ``dataset_id``; ``InvalidParameter`` names the ids that have them."""
    from datasets_hub.catalogue import all_entries, resolve

    spec = resolve(dataset_id)  # unknown ids raise UnknownDataset with "did you mean"
    low, high = spec.metadata.get("ref_min_score"), spec.metadata.get("ref_max_score")
    if low is None or high is None:
        scored = sorted(
            i
            for i, (entry, _) in all_entries([]).items()
            if entry.get("ref_min_score") is not None and entry.get("ref_max_score") is not None
        )
        if not scored:
            listing = " No catalogue entry has reference scores."
        elif len(scored) <= 12:
            listing = f" Ids with reference scores: {', '.join(scored)}."
        else:
            same_loader = [i for i in scored if i.split("/", 1)[0] == spec.loader]
            examples = ", ".join((same_loader or scored)[:6])
            listing = (
                f" {len(scored)} ids have reference scores (`datasets-hub list` shows them), e.g. {examples}."
            ) + did_you_mean(dataset_id, scored)
        raise InvalidParameter(
            f"{dataset_id!r} has no reference scores (ref_min_score/ref_max_score in its catalogue entry, "
            f"{spec.source}), so its returns cannot be normalized.{listing} To normalize anyway, register "
            "the dataset with ref_min_score=… and ref_max_score=…."
        )
    try:
        low, high = float(low), float(high)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(
            f"{dataset_id!r}: reference scores must be numbers, got ref_min_score={low!r}, "
            f"ref_max_score={high!r} ({spec.source})"
        ) from exc
    if not (math.isfinite(low) and math.isfinite(high)) or high == low:
        raise InvalidParameter(
            f"{dataset_id!r}: reference scores {low} and {high} cannot normalize (they must be finite and "
            f"differ); fix its catalogue entry ({spec.source})"
        )
    return low, high


def normalized_score(dataset_id: str, returns: Any) -> Any:
    """Normalize undiscounted episode ``returns`` of the policy evaluated on ``dataset_id``'s task.

    ``returns`` may be a number (a ``float`` comes back), a list or tuple (a list of floats), a
    NumPy array (a float64 array of the same shape) or a torch tensor (a floating tensor of the same
    shape, dtype and device; integer tensors become float64).
    """
    low, high = reference_scores(dataset_id)
    scale = 100.0 / (high - low)
    if isinstance(returns, (bool, str, bytes)):
        raise InvalidParameter(f"returns must be numbers, got {type(returns).__name__} {returns!r}")
    if isinstance(returns, numbers.Real):
        return (float(returns) - low) * scale
    module = type(returns).__module__
    if module.startswith("torch"):
        import torch

        values = returns if returns.is_floating_point() else returns.to(torch.float64)
        return (values - low) * scale
    import numpy as np

    if isinstance(returns, np.ndarray):
        if returns.dtype.kind not in "iuf":
            raise InvalidParameter(f"returns must be a numeric array, got dtype {returns.dtype}")
        return (returns.astype(np.float64) - low) * scale
    if isinstance(returns, (list, tuple)):
        out = []
        for value in returns:
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise InvalidParameter(f"returns must be numbers, found {type(value).__name__} {value!r} in the list")
            out.append((float(value) - low) * scale)
        return out
    raise InvalidParameter(
        f"returns must be a number, a list of numbers, a NumPy array or a torch tensor, got {type(returns).__name__}"
    )
