"""Dopamine replay-log checkpoints (the DQN Replay Dataset's files), read without holding them in memory.

One checkpoint ``k`` of a Dopamine ``OutOfGraphReplayBuffer`` (as logged by batch_rl's
``OutOfGraphLoggedReplayBuffer``) is six gzipped ``.npy`` files (numpy save format, no pickle):

==================================  ============================================================
file                                content
==================================  ============================================================
``$store$_observation_ckpt.<k>.gz`` ``[capacity, 84, 84]`` uint8, ``observation[i]`` = the frame
                                    stored at buffer index ``i``
``$store$_action_ckpt.<k>.gz``      ``[capacity]`` int32, the action taken from that frame
``$store$_reward_ckpt.<k>.gz``      ``[capacity]`` float32, the reward it earned
``$store$_terminal_ckpt.<k>.gz``    ``[capacity]`` uint8, 1 when that transition ended the episode
``add_count_ckpt.<k>.gz``           0-d int64, number of ``_add`` calls (padding included)
``invalid_range_ckpt.<k>.gz``       ``[stack_size + update_horizon]`` indices around the write
                                    cursor that Dopamine never samples
==================================  ============================================================

How Dopamine writes the buffer (facts this module relies on): the buffer is circular; the next write
goes to ``cursor = add_count % capacity``, so when ``add_count >= capacity`` the oldest row is at
``cursor`` and the order is ``cursor..capacity-1, 0..cursor-1``; otherwise rows ``0..add_count-1``
in order (batch_rl's final checkpoint is written that way, with ``add_count`` set to the cursor).
Before the first frame of every episode (after a terminal row, and when the buffer is empty)
Dopamine adds ``stack_size - 1`` zero transitions (zero frame, action 0, reward 0, terminal 0), so
that a stacked state at an episode start reads zeros for the frames before it. The stacked state of
index ``i`` is frames ``i-stack_size+1..i``; its next state is the stack at ``i+1``.

:class:`NpyStream` reads one such file as a stream: the ``.npy`` header is parsed from the gzip
stream and rows are decompressed in order into caller-sized blocks (a 7 GB observation file never
sits in memory). :func:`plan_checkpoint` turns the small arrays into the episode plan, and
:class:`LogicalFrames` delivers frames in the buffer's logical (oldest-first) order.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from datasets_hub.errors import CorruptFile, LoaderError

STORE_PREFIX = "$store$_"
STORE_KEYS = ("observation", "action", "reward", "terminal")
FILE_KEYS = (*STORE_KEYS, "add_count", "invalid_range")
STACK_SIZE = 4  # the DQN Replay Dataset's stack size: 3 zero transitions precede every episode
_SKIP_BYTES = 4 << 20  # scratch block used to decompress and discard rows


def checkpoint_file(key: str, checkpoint: int) -> str:
    """The upstream file name of ``key`` (one of :data:`FILE_KEYS`) in checkpoint ``checkpoint``."""
    prefix = STORE_PREFIX if key in STORE_KEYS else ""
    return f"{prefix}{key}_ckpt.{checkpoint}.gz"


def _native(dtype: np.dtype) -> np.dtype:
    return dtype if dtype.isnative else dtype.newbyteorder("=")


class NpyStream:
    """A ``.npy`` array inside a gzip file, read front to back (see the module docstring).

    ``shape``/``dtype`` come from the header; ``read(n)`` returns the next ``n`` rows (native byte
    order), ``skip(n)`` decompresses and drops them. Damaged or non-``.npy`` files raise
    :class:`LoaderError` naming the file and the fix.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._fh = gzip.open(self.path, "rb")  # noqa: SIM115 - the reader owns the handle until close()
        try:
            self.shape, self.dtype = self._header()
        except BaseException:
            self._fh.close()
            raise
        self.rows = int(self.shape[0]) if self.shape else 1  # a 0-d array is one row
        self.row_shape = tuple(int(s) for s in self.shape[1:])
        self.row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize
        self.pos = 0

    def _header(self) -> tuple[tuple[int, ...], np.dtype]:
        fmt = np.lib.format
        try:
            version = fmt.read_magic(self._fh)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(self._fh)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = fmt.read_array_header_2_0(self._fh)
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except (OSError, EOFError, ValueError, zlib.error) as exc:
            raise CorruptFile(
                f"{self.path.name} is not a gzipped .npy array ({exc}); Dopamine replay logs are "
                f"np.save() output inside gzip: delete {self.path} and download it again",
                path=self.path,
            ) from exc
        if dtype.hasobject:
            raise LoaderError(f"{self.path.name} holds Python objects (pickled); only plain numeric arrays are read")
        if fortran and len(shape) > 1:
            raise LoaderError(f"{self.path.name} is stored in Fortran order, which Dopamine never writes")
        return tuple(shape), dtype

    def _fill(self, view: memoryview) -> None:
        got = 0
        try:
            while got < len(view):
                n = self._fh.readinto(view[got:])
                if not n:
                    break
                got += n
        except (OSError, EOFError, zlib.error) as exc:
            raise CorruptFile(
                f"{self.path.name} is damaged ({exc}); delete {self.path} and download it again", path=self.path
            ) from exc
        if got < len(view):
            raise CorruptFile(
                f"{self.path.name} ends early: its header announces {self.rows} rows but the stream "
                f"stopped in row {self.pos + got // max(self.row_bytes, 1)}; delete {self.path} and download it again",
                path=self.path,
            )

    def read(self, n: int) -> np.ndarray:
        """The next ``n`` rows as a fresh array ``[n, *row_shape]``."""
        n = int(n)
        if n < 0 or self.pos + n > self.rows:
            raise LoaderError(f"{self.path.name}: asked for rows {self.pos}..{self.pos + n} of {self.rows}")
        out = np.empty((n, *self.row_shape), dtype=self.dtype)
        if n:
            self._fill(out.reshape(-1).view(np.uint8).data)
        self.pos += n
        return out if self.dtype.isnative else out.astype(_native(self.dtype))

    def skip(self, n: int) -> None:
        """Decompress and drop the next ``n`` rows."""
        n = int(n)
        if n < 0 or self.pos + n > self.rows:
            raise LoaderError(f"{self.path.name}: cannot skip to row {self.pos + n} of {self.rows}")
        left = n * self.row_bytes
        scratch = memoryview(bytearray(min(left, _SKIP_BYTES)))
        while left > 0:
            step = min(left, len(scratch))
            self._fill(scratch[:step])
            left -= step
        self.pos += n

    def read_all(self) -> np.ndarray:
        """The whole array with its own shape (for the small files)."""
        data = self.read(self.rows - self.pos)
        return data.reshape(self.shape)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> NpyStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_small(path: Path | str) -> np.ndarray:
    """A whole (small) gzipped ``.npy`` array."""
    with NpyStream(path) as stream:
        return stream.read_all()


@dataclass
class CheckpointPlan:
    """Which rows of one checkpoint become which TED episodes (all positions are logical rows,
    oldest first; ``phys[j]`` is the buffer index of logical row ``j``).

    ``valid[j]`` is Dopamine's ``is_valid_transition`` for that row: the rows its sampler can draw,
    and the only rows that become transitions. Episode ``e`` is logical rows ``[starts[e], stops[e])``
    (a run of valid rows, cut after a terminal); ``history[e]`` rows before ``starts[e]`` are real
    frames of the same episode that Dopamine's stacked state at ``starts[e]`` holds (kept as history
    frames, never as transitions); ``terminated[e]`` when its last row is a terminal;
    ``next_row[e]`` is the logical row whose frame is its final next observation, or -1 when the
    file does not hold one (Dopamine never stores the frame after a terminal).
    """

    capacity: int
    add_count: int
    phys: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    terminal: np.ndarray
    padding: np.ndarray  # bool per logical row: Dopamine's zero transitions before an episode
    invalid: np.ndarray  # bool per logical row: in invalid_range
    valid: np.ndarray  # bool per logical row: Dopamine may sample it
    starts: np.ndarray
    stops: np.ndarray
    history: np.ndarray
    terminated: np.ndarray
    next_row: np.ndarray
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return int(self.phys.size)

    def segments(self) -> list[tuple[int, int]]:
        """Physical ``[start, stop)`` ranges in logical order (two when the buffer wrapped)."""
        if self.rows == 0:
            return []
        first = int(self.phys[0])
        if first == 0:
            return [(0, self.rows)]
        return [(first, self.capacity), (0, self.rows - (self.capacity - first))]


def plan_checkpoint(
    add_count: int,
    invalid_range: np.ndarray,
    action: np.ndarray,
    reward: np.ndarray,
    terminal: np.ndarray,
    capacity: int,
    first_frames_zero: np.ndarray | None = None,
    stack_size: int = STACK_SIZE,
) -> CheckpointPlan:
    """The episode plan of one checkpoint (the rules are in :mod:`datasets_hub.loaders.atari.loader`'s docstring).

    Validity follows Dopamine's ``OutOfGraphReplayBuffer.is_valid_transition``: when
    ``add_count < capacity`` (never wrapped, or batch_rl's final checkpoint, whose ``add_count`` is
    the cursor) rows below ``stack_size - 1`` and from ``cursor - update_horizon`` on are never
    sampled; rows in ``invalid_range`` never are; nor rows whose stack holds a terminal before its
    last frame. ``update_horizon`` is ``len(invalid_range) - stack_size`` (Dopamine's invalid range
    has ``stack_size + update_horizon`` entries). ``first_frames_zero[i]`` tells whether the frame at
    buffer index ``i`` (``i < stack_size - 1``) is all zeros; it is only consulted when the buffer
    has not wrapped, to tell the padding Dopamine writes into an empty buffer from real frames.
    """
    cap = int(capacity)
    add_count = int(add_count)
    if add_count < 0:
        raise LoaderError(f"add_count is {add_count}; a replay buffer never has a negative add count")
    bad = np.asarray(invalid_range).reshape(-1)
    horizon = bad.size - stack_size
    if horizon < 1:
        raise LoaderError(
            f"invalid_range has {bad.size} entries; Dopamine writes stack_size + update_horizon = "
            f"{stack_size} + n (n >= 1) of them"
        )
    wrapped = add_count >= cap
    m = cap if wrapped else add_count
    start = add_count % cap if wrapped else 0
    phys = (start + np.arange(m, dtype=np.int64)) % cap
    act, rew = action[phys], reward[phys]
    term = terminal[phys] != 0
    bad = np.unique(np.round(bad).astype(np.int64) % cap) if bad.size else bad.astype(np.int64)
    invalid = np.isin(phys, bad)
    zero_step = (act == 0) & (rew == 0) & ~term
    pad_len = stack_size - 1
    padding = np.zeros(m, dtype=bool)
    for k in range(1, pad_len + 1):  # the rows right after a terminal are Dopamine's zero padding
        padding[k:] |= term[:-k] if k < m else False
    padding &= ~term
    if not wrapped and first_frames_zero is not None:  # an empty buffer starts with padding too
        for i in range(min(pad_len, m, len(first_frames_zero))):
            if not (zero_step[i] and first_frames_zero[i]):
                break
            padding[i] = True
    # Dopamine's is_valid_transition, row by row in logical order
    terminal_before = np.zeros(m, dtype=bool)  # a terminal among the stack's earlier frames
    for k in range(1, pad_len + 1):
        terminal_before[k:] |= term[:-k] if k < m else False
    unsampled = np.zeros(m, dtype=bool)  # rows the not-full rules exclude
    if not wrapped:
        unsampled[:pad_len] = True
        unsampled[max(0, add_count - horizon) :] = True
    else:  # the stacks of the first logical rows reach back across the cursor (always in invalid_range)
        terminal_before[:pad_len] = True
    valid = ~invalid & ~unsampled & ~terminal_before
    prev_valid = np.concatenate([[False], valid[:-1]])
    prev_term = np.concatenate([[False], term[:-1]])
    next_valid = np.concatenate([valid[1:], [False]])
    starts = np.flatnonzero(valid & (~prev_valid | prev_term))
    stops = np.flatnonzero(valid & (~next_valid | term)) + 1
    # history: the real frames (not padding, not before row 0) right before a start, up to pad_len
    terminated = term[stops - 1] if stops.size else np.zeros(0, dtype=bool)
    follows = stops < m
    nxt = np.where(follows, stops, 0)
    next_row = np.where(~terminated & follows & ~padding[nxt], stops, -1).astype(np.int64)
    history = np.zeros(starts.size, dtype=np.int64)
    # never reach back into the previous episode's rows or its final next frame (frames are read forward)
    floor = np.concatenate([[0], np.maximum(stops[:-1], next_row[:-1] + 1)]).astype(np.int64)
    for k in range(1, pad_len + 1):
        row = starts - k
        ok = (row >= floor) & (history == k - 1)
        ok[ok] = ~padding[row[ok]] & ~term[row[ok]]
        history += ok
    counts = {
        "capacity": cap,
        "add_count": add_count,
        "rows": m,
        "invalid_rows": int(invalid.sum()),
        "padding_rows": int((padding & ~invalid).sum()),
        "never_sampled_rows": int((~valid & ~invalid & ~padding).sum()),
        "history_rows": int(history.sum()),
        "transitions": int(valid.sum()),
        "episodes": int(starts.size),
        "terminated": int(terminated.sum()),
        "truncated_at_invalid_range": int((~terminated & follows & ~valid[nxt]).sum()),
        "truncated_at_end_of_checkpoint": int((~terminated & ~follows).sum()),
    }
    return CheckpointPlan(
        cap,
        add_count,
        phys,
        act,
        rew,
        term,
        padding,
        invalid,
        valid,
        starts,
        stops,
        history,
        terminated,
        next_row,
        counts,
    )


class LogicalFrames:
    """Frames of one observation file in logical order, read forward only.

    ``read(a, b)`` returns the frames of logical rows ``[a, b)``; calls must not go back
    (``a`` >= the previous ``b``). Rows in between are decompressed and dropped; a physical
    segment no call reaches is never opened (batch_rl's logged checkpoints start with a
    one-row wrapped segment that lies in the invalid range).
    """

    def __init__(self, path: Path | str, segments: list[tuple[int, int]], expect_rows: int) -> None:
        self.path = Path(path)
        self.segments = segments
        self.pos = 0  # next logical row the stream stands at
        self._stream: NpyStream | None = None
        self._segment = -1
        self._offsets = np.cumsum([0] + [b - a for a, b in segments])
        with NpyStream(self.path) as probe:
            self.row_shape, self.dtype, rows = probe.row_shape, probe.dtype, probe.rows
        if rows != expect_rows:
            raise LoaderError(
                f"{self.path.name} has {rows} rows but the other arrays of its checkpoint have {expect_rows}"
            )

    def _goto(self, logical: int) -> None:
        seg = int(np.searchsorted(self._offsets, logical, side="right")) - 1
        if seg != self._segment:
            if self._stream is not None:
                self._stream.close()
            self._stream = NpyStream(self.path)
            self._segment = seg
            self._stream.skip(self.segments[seg][0])
            self.pos = int(self._offsets[seg])
        assert self._stream is not None
        self._stream.skip(logical - self.pos)
        self.pos = logical

    def read(self, a: int, b: int) -> np.ndarray:
        if a < self.pos:
            raise LoaderError(f"{self.path.name}: frames are read forward only (asked for row {a} after {self.pos})")
        parts = []
        while a < b:
            self._goto(a)
            seg_end = int(self._offsets[self._segment + 1])
            stop = min(b, seg_end)
            assert self._stream is not None
            parts.append(self._stream.read(stop - a))
            self.pos = a = stop
        if not parts:
            return np.empty((0, *self.row_shape), dtype=_native(self.dtype))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
