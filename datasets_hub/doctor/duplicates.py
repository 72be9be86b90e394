"""Duplicate episodes: two episodes with the same length and the same actions and observations, byte
for byte (a file listed twice, a shard written twice, an episode saved by two collectors)."""

from __future__ import annotations

import hashlib

import numpy as np

from datasets_hub.doctor.findings import Finding, Severity, defect
from datasets_hub.doctor.steps import StepTable

FAMILY = "duplicates"

DUPLICATE = defect(
    "duplicate-episode",
    FAMILY,
    Severity.WARNING,
    "an episode repeats an earlier one exactly (same length, actions and observations)",
    "the repeated episodes are sampled two or more times as often as the others, and a train/val split "
    "by episode puts copies on both sides",
)


def check(table: StepTable) -> list[Finding]:
    """Hashes each run of rows (episodes of at least 2 steps) over its action and observation columns."""
    columns = [np.asarray(v) for v in table.observations.values()]
    if table.action is not None:
        columns.append(np.asarray(table.action))
    if not columns:
        return []
    columns = [np.ascontiguousarray(c.reshape(len(table), -1)) for c in columns]
    starts, lengths = table.runs()
    seen: dict[bytes, int] = {}
    copies: list[tuple[int, int]] = []  # (episode, episode it repeats)
    for start, length in zip(starts.tolist(), lengths.tolist(), strict=True):
        if length < 2:
            continue
        digest = hashlib.blake2b(length.to_bytes(8, "little"), digest_size=16)
        for column in columns:
            digest.update(column[start : start + length].tobytes())
        key = digest.digest()
        episode = int(table.episode[start])
        if key in seen and seen[key] != episode:
            copies.append((episode, seen[key]))
        else:
            seen.setdefault(key, episode)
    if not copies:
        return []
    pairs = ", ".join(f"{e} = {o}" for e, o in copies[:3])
    return [
        Finding(
            DUPLICATE,
            count=len(copies),
            unit="episodes",
            detail=f"{len(copies)} episode(s) repeat an earlier one ({pairs}{', ...' if len(copies) > 3 else ''})",
            examples=[(e, None) for e, _ in copies],
        )
    ]
