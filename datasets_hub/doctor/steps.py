"""The one view every step check reads: the rows of a source as flat numpy columns.

A build, a LeRobot root, a D4RL-style HDF5 file or an npz file is turned into a :class:`StepTable`
by its source module; the check modules never see the format. Rows are in the source's own order
(the structure checks look at that order: an episode whose rows are not contiguous is a finding, and
every other check groups rows into runs of equal ``episode``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from datasets_hub.doctor.findings import Finding


@dataclass(frozen=True)
class ActionSpace:
    """A declared action space: a box (``low``/``high``, broadcast against each action row) or a
    discrete set ``start .. start + n - 1``; ``source`` names where it was declared."""

    source: str
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    n: int | None = None
    start: int = 0

    @classmethod
    def from_gymnasium_json(cls, space: dict, source: str) -> ActionSpace | None:
        """A space as Minari (and gymnasium's serialisation) records it: ``{"type": "Box", "low": ...,
        "high": ..., "shape": ...}`` or ``{"type": "Discrete", "n": ..., "start": ...}``; None for any
        other type (a dict or tuple space has no single bound to check)."""
        kind = str(space.get("type", ""))
        if kind == "Box" and "low" in space and "high" in space:
            shape = tuple(int(d) for d in space.get("shape") or ())
            low = np.broadcast_to(np.asarray(space["low"], dtype=np.float64), shape or np.shape(space["low"]))
            high = np.broadcast_to(np.asarray(space["high"], dtype=np.float64), shape or np.shape(space["high"]))
            return cls(source=source, low=np.array(low), high=np.array(high))
        if kind == "Discrete" and "n" in space:
            return cls(source=source, n=int(space["n"]), start=int(space.get("start", 0)))
        return None

    def describe(self) -> str:
        if self.n is not None:
            return f"Discrete({self.n}, start={self.start})"
        return f"Box(low={_short(self.low)}, high={_short(self.high)})"


def _short(values: np.ndarray | None) -> str:
    flat = np.asarray(values if values is not None else []).reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return f"{flat[0]:g}"
    return "[" + ", ".join(f"{v:g}" for v in flat[:4]) + (", ..." if flat.size > 4 else "") + "]"


@dataclass
class StepTable:
    """Per-row columns (``n`` rows) of whole episodes.

    - ``episode``: the episode id of each row (int64); ``step``: t within the episode as the source
      numbers it (``frame_index``), or as counted from the row order when the source has none;
    - ``observations``: low-dimensional observation columns ``[n, ...]`` at t, and
      ``next_observations`` the same keys at t+1 where the source stores them (a build does, also for
      an episode's last step); without them the checks use row t+1 of the same episode;
    - ``action``, ``reward`` (``[n]``), ``terminated``/``truncated`` (bool ``[n]``), ``timestamp`` (seconds)
      and ``fps``: None where the source has none;
    - ``columns``: every numeric column by name for the numeric-health checks (the above included, under
      the source's names); ``frames``: a sample of image frames by key (``[k, H, W, C]``) for the same;
    - ``action_space``: the space the source declares, if any.
    """

    episode: np.ndarray
    step: np.ndarray
    observations: dict[str, np.ndarray] = field(default_factory=dict)
    next_observations: dict[str, np.ndarray] = field(default_factory=dict)
    action: np.ndarray | None = None
    reward: np.ndarray | None = None
    terminated: np.ndarray | None = None
    truncated: np.ndarray | None = None
    timestamp: np.ndarray | None = None
    fps: float | None = None
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    frames: dict[str, np.ndarray] = field(default_factory=dict)
    action_space: ActionSpace | None = None

    def __len__(self) -> int:
        return int(self.episode.shape[0])

    def runs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, lengths)`` of the runs of equal ``episode`` values, in row order (an episode
        split in two runs counts twice: the structure checks report that)."""
        n = len(self)
        if n == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        cut = np.flatnonzero(self.episode[1:] != self.episode[:-1]) + 1
        starts = np.concatenate([[0], cut]).astype(np.int64)
        lengths = np.diff(np.concatenate([starts, [n]])).astype(np.int64)
        return starts, lengths

    def last_of_run(self) -> np.ndarray:
        """Bool ``[n]``: the row is the last of its run (its episode's last step)."""
        last = np.zeros(len(self), dtype=bool)
        starts, lengths = self.runs()
        if starts.size:
            last[starts + lengths - 1] = True
        return last

    def successor(self, key: str, *, stored: bool) -> tuple[np.ndarray, np.ndarray]:
        """``(values, valid)``: the observation ``key`` at t+1 for every row, and which rows have one.

        With ``stored``, the next value the source stores where it has one (what the transition led
        to); otherwise, and without one, row t+1 of the same run (what the next step starts from: the
        two differ where a source hides a reset, as D4RL antmaze does)."""
        if stored and key in self.next_observations:
            values = self.next_observations[key]
            if np.issubdtype(values.dtype, np.floating):  # NaN: the source does not know that next value
                return values, np.isfinite(values.reshape(len(self), -1)).all(axis=1)
            return values, np.ones(len(self), dtype=bool)
        obs = self.observations[key]
        nxt = np.empty_like(obs)
        nxt[:-1], nxt[-1:] = obs[1:], obs[-1:]
        valid = ~self.last_of_run()
        return nxt, valid


@dataclass
class SourceRead:
    """What a source reader hands the doctor: the step ``table`` (None when the source has no rows to
    check, e.g. a TFRecord file of another layout), the source's size (``rows``, ``episodes``), whether
    the table holds only a ``sampled`` part, whether ``table.step`` is the source's own counter
    (``has_step_column``), the ``findings`` the reader made itself (metadata, file headers), the check
    ``families`` those came from, and ``notes`` on what could not be checked."""

    kind: str
    table: StepTable | None
    rows: int
    episodes: int
    sampled: bool = False
    has_step_column: bool = False
    findings: list[Finding] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
