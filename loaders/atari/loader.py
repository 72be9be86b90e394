"""The DQN Replay Dataset as TorchRL Episode Data (``atari/<Game>/<run>``, e.g. ``atari/Pong/1``).

Source: the replay logs of batch_rl's DQN agents (Agarwal et al. 2020), 60 Atari 2600 games x 5
runs, each run 51 checkpoints (``k = 0..50``) of a 1M-transition Dopamine replay buffer, at
``https://storage.googleapis.com/atari-replay-datasets/dqn/<Game>/<run>/replay_logs/``
(file layout: :mod:`datasets_hub.loaders.atari.replay`). ``DATASETS_HUB_ENDPOINT_ATARI`` points the download
at a mirror; the ``base_url`` parameter replaces the whole base (e.g. ``file:///data/dqn`` for a
``gsutil`` copy on disk).

Parameters: ``checkpoints`` (an int or a list of ints in 0..50; default all 51; they are converted
in increasing order), ``base_url``, and ``game``/``run`` (default: taken from the id, so a custom
id such as ``atari/my-pong`` can name its source).

Mapping, per checkpoint (rows in the buffer's logical order, oldest first, see
:mod:`datasets_hub.loaders.atari.replay`). Checked against Dopamine's ``circular_replay_buffer.py`` (dopamine-rl
4.1.2 on PyPI; the same rules as the 2019 code batch_rl used) and batch_rl's
``logged_replay_buffer.py``: a row is a transition exactly when Dopamine's sampler can draw it
(``is_valid_transition``).

====================================  =========================================================
upstream                              TED
====================================  =========================================================
``observation[i]`` (uint8 ``[84,84]``) ``observation[t]``; ``("next", "observation")[t]`` is the
                                      frame of the following row of the same episode. Stored once
                                      per episode (T+1 rows) by the core.
``action[i]`` (int32)                 ``action[t]`` (int32, shape ``[N]``)
``reward[i]`` (float32)               ``("next", "reward")[t]``, ``[N, 1]``. Already clipped to
                                      [-1, 1]: Dopamine's runner clips every reward before the
                                      agent stores it, so the raw game scores are not in the data
``terminal[i] == 1``                  ``("next", "terminated")[t]``; ends the episode
a row Dopamine never samples          not a transition: the rows of ``invalid_range`` (around the
                                      write cursor), and, when ``add_count < capacity`` (the first
                                      checkpoint, and batch_rl's final one, whose ``add_count`` is
                                      set to the cursor), rows ``0..stack_size-2`` and from
                                      ``cursor - 1`` on. The episode before such rows ends there,
                                      ``("next", "truncated")``
real frames right before an           kept as **history frames** of the episode (not rows, never
episode's first row                   sampled): the frames Dopamine's stacked state at that row
                                      holds (the oldest episode of a wrapped checkpoint, whose
                                      start was overwritten; the rows 0..2 of a final checkpoint).
                                      ``FrameStack(4)`` uses them instead of zeros
end of the checkpoint                 the episode ends, ``("next", "truncated")``; episodes are
                                      never joined across checkpoints
Dopamine's zero padding               the ``stack_size - 1 = 3`` zero transitions Dopamine writes
                                      before each episode's first frame are dropped (they are not
                                      transitions); :class:`datasets_hub.buffers.frame_stack.FrameStack`
                                      rebuilds the zero-padded stacks at sample time
buffer index, checkpoint              ``("info", "replay_index")``, ``("info", "checkpoint")``
====================================  =========================================================

So every stacked state, action, reward, terminal and next state Dopamine's sampler can produce
from a checkpoint is a row of the build with ``FrameStack(4)`` applied, and no other row exists
(``tests/upstream/test_dopamine.py`` checks this against Dopamine's own buffer).

**Next observations.** A next frame never comes from another episode. Dopamine never stores the
frame reached by a terminal transition (the next row is padding), so the last row of a terminated
episode has ``("next", "observation")`` = zeros and ``("info", "next_observation_unknown")`` True;
Q-learning masks it with ``terminated`` anyway (Dopamine's own next state there holds that zero
padding frame too). An episode cut by rows Dopamine never samples takes the frame of the row that
followed it (stored right after, in the same episode).

**Caveats kept as upstream wrote them.** Dopamine of 2019 also wrote ``terminal = 1`` when an
episode hit the 27,000-step limit (108k frames), so those ends are ``terminated`` too. The first
episode of a checkpoint usually began in the previous one: its ``step`` starts at 0 here (its
earlier frames, up to 3, are history frames). The card (``notes``) counts, per checkpoint and in
total, rows, dropped invalid, padding and never-sampled rows, history frames, episodes and how
each ended, and padding rows whose frame was not zero (expected 0).

**Memory.** The action/reward/terminal arrays of a checkpoint (~9 MB) are read whole; frames are
decompressed from the gzip stream in order, a chunk of whole episodes at a time (about
:data:`CHUNK_BYTES` of frames, or ``ctx.chunk_rows`` transitions, whichever is fewer; one long
episode stays whole), so peak memory is a few chunks, not a 7 GB checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit
from urllib.request import url2pathname

import numpy as np

from datasets_hub.errors import InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext, Resource, frame_layout
from datasets_hub.loaders.atari.replay import (
    FILE_KEYS,
    STACK_SIZE,
    CheckpointPlan,
    LogicalFrames,
    NpyStream,
    checkpoint_file,
    plan_checkpoint,
    read_small,
)
from datasets_hub.loaders.formats.dopamine_atari import environment_card

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    from tensordict import TensorDictBase

UPSTREAM = "https://storage.googleapis.com/atari-replay-datasets/dqn"
NUM_CHECKPOINTS = 51
#: frame slots of every checkpoint file (batch_rl's ``replay_capacity``: ``[1_000_000, 84, 84]`` uint8 each)
REPLAY_CAPACITY = 1_000_000
FRAME_PIXELS = 84 * 84
PARAMS = ("base_url", "checkpoints", "game", "run")
CHUNK_BYTES = 32 << 20  # frames per chunk; the writer holds a few chunks (obs, next, merged)
UNKNOWN_KEY = ("info", "next_observation_unknown")
_COUNT_KEYS = (
    "rows",
    "invalid_rows",
    "padding_rows",
    "padding_rows_not_zero",
    "never_sampled_rows",
    "history_rows",
    "transitions",
    "episodes",
    "terminated",
    "truncated_at_invalid_range",
    "truncated_at_end_of_checkpoint",
    "next_observation_unknown_rows",
)


class AtariLoader(Loader):
    """Loader for the DQN Replay Dataset (see the module docstring for the exact semantics)."""

    name = "atari"
    requires = ("numpy",)
    install_hint = "pip install numpy"
    format_version = 2  # 2: Dopamine's validity rules, history frames
    #: above the raw limit, exact PNG: 84x84 grey frames where a ball or a bullet is one or two pixels, which
    #: JPEG's 8x8 blocks smear; an agent's input should not depend on the storage
    auto_frames = "png"

    def frame_bytes(self, spec: DatasetSpec) -> int:
        """An upper bound: every checkpoint's frame slots (the ``[capacity, H, W]`` of its observation file),
        counted only when the frames are images (:func:`~datasets_hub.loader.frame_layout`). Every stored frame is
        one of the slots, or the zero frame after a terminal row, which takes the place of the padding slots
        Dopamine writes before the next episode. The shape comes from the file's ``.npy`` header where the
        file is on this machine (a ``file://`` copy: one small read), else from upstream's facts:
        :data:`REPLAY_CAPACITY` frames of 84x84 (7.06 GB a checkpoint, 360 GB for all 51)."""
        game, run = self.source(spec)
        resources = {r.name: r for r in self.resources(spec)}
        total = 0
        for k in self.checkpoints(spec):
            urls = resources[f"{game}/{run}/replay_logs/{checkpoint_file('observation', k)}"].urls
            local = next((Path(url2pathname(urlsplit(u).path)) for u in urls if u.startswith("file://")), None)
            if local is None or not local.is_file():
                total += REPLAY_CAPACITY * FRAME_PIXELS
                continue
            with NpyStream(local) as frames:
                if frames.dtype == np.uint8 and frame_layout(frames.row_shape):
                    total += frames.rows * frames.row_bytes
        return total

    # -- parameters -------------------------------------------------------------------------
    def check_params(self, spec: DatasetSpec) -> None:
        self.reject_unknown_params(spec, PARAMS)
        self.checkpoints(spec)
        self.source(spec)
        base = spec.params.get("base_url")
        if base is not None and (not isinstance(base, str) or "://" not in base):
            raise InvalidParameter(
                f"{spec.id}: base_url must be a URL such as 'https://host/dqn' or 'file:///data/dqn' "
                f"(the folder holding <Game>/<run>/replay_logs/), got {base!r}"
            )

    @staticmethod
    def checkpoints(spec: DatasetSpec) -> list[int]:
        """The checkpoints to convert, sorted (default: all 51)."""
        value = spec.params.get("checkpoints")
        if value is None:
            return list(range(NUM_CHECKPOINTS))
        items = [value] if isinstance(value, int) and not isinstance(value, bool) else value
        if (
            not isinstance(items, list)
            or not items
            or not all(isinstance(k, int) and not isinstance(k, bool) for k in items)
        ):
            raise InvalidParameter(
                f"{spec.id}: checkpoints must be an int or a non-empty list of ints in 0..{NUM_CHECKPOINTS - 1}, "
                f"e.g. checkpoints=[0, 1], got {value!r}"
            )
        bad = [k for k in items if not 0 <= k < NUM_CHECKPOINTS]
        if bad:
            raise InvalidParameter(
                f"{spec.id}: checkpoint {bad[0]} does not exist; each run has checkpoints 0..{NUM_CHECKPOINTS - 1}"
            )
        if len(set(items)) != len(items):
            raise InvalidParameter(f"{spec.id}: checkpoints lists a checkpoint twice: {items}")
        return sorted(items)

    @staticmethod
    def source(spec: DatasetSpec) -> tuple[str, str]:
        """(game, run) of ``spec``: the ``game``/``run`` params, else the id ``atari/<Game>/<run>``."""
        parts = spec.name.split("/")
        game = spec.params.get("game", parts[0] if len(parts) == 2 else None)
        run = spec.params.get("run", parts[1] if len(parts) == 2 else None)
        if not isinstance(game, str) or not game or "/" in game:
            raise InvalidParameter(
                f"{spec.id}: cannot tell the game: use an id 'atari/<Game>/<run>' (e.g. 'atari/Pong/1') "
                f"or pass game='Pong', run=1"
            )
        if isinstance(run, bool) or str(run) not in {str(r) for r in range(1, 6)}:
            raise InvalidParameter(f"{spec.id}: run must be 1..5 (five DQN runs per game), got {run!r}")
        return game, str(run)

    # -- what to fetch ------------------------------------------------------------------------
    def resources(self, spec: DatasetSpec) -> list[Resource]:
        self.check_params(spec)
        game, run = self.source(spec)
        base = str(spec.params.get("base_url") or UPSTREAM).rstrip("/")
        out = []
        for k in self.checkpoints(spec):
            for key in FILE_KEYS:
                fname = checkpoint_file(key, k)
                out.append(
                    Resource(
                        name=f"{game}/{run}/replay_logs/{fname}",
                        urls=(f"{base}/{quote(game)}/{quote(run)}/replay_logs/{quote(fname)}",),
                    )
                )
        return self.apply_catalogue_resources(spec, out)  # an entry's copy of a file replaces its URL

    # -- conversion ---------------------------------------------------------------------------
    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDictBase]:
        self.check_params(spec)
        game, run = self.source(spec)
        totals = dict.fromkeys(_COUNT_KEYS, 0)
        per_checkpoint: dict[str, dict[str, int]] = {}
        episode_id = 0
        frame_shape: tuple[int, ...] | None = None
        for k in self.checkpoints(spec):
            paths = {}
            for key in FILE_KEYS:
                name = f"{game}/{run}/replay_logs/{checkpoint_file(key, k)}"
                if name not in files:
                    raise LoaderError(f"{spec.id}: checkpoint {k} has no file {name!r} among the fetched files")
                paths[key] = Path(files[name])
            conv = _Checkpoint(spec, k, paths, ctx, episode_id)
            if frame_shape is not None and conv.frames.row_shape != frame_shape:
                raise LoaderError(
                    f"{spec.id}: checkpoint {k} has frames of shape {conv.frames.row_shape}, "
                    f"the earlier ones {frame_shape}"
                )
            frame_shape = conv.frames.row_shape
            try:
                yield from conv.run()
            finally:
                conv.frames.close()
            episode_id = conv.episode_id
            per_checkpoint[str(k)] = conv.counts
            for key in _COUNT_KEYS:
                totals[key] += conv.counts.get(key, 0)
        ctx.note("game", game)
        ctx.note("environment", environment_card(game))
        ctx.note("run", int(run))
        ctx.note("checkpoints", self.checkpoints(spec))
        ctx.note("frame_shape", list(frame_shape or ()))
        ctx.note("stack_size", STACK_SIZE)
        ctx.note("totals", totals)
        ctx.note("per_checkpoint", per_checkpoint)
        ctx.note("next_observation_unknown_rows", totals["next_observation_unknown_rows"])
        ctx.note(
            "next_observation_unknown",
            "('next', 'observation') is zeros and ('info', 'next_observation_unknown') is True on the last "
            "row of episodes that ended with a terminal (Dopamine never stores that frame) or at the end "
            "of a checkpoint",
        )
        ctx.note("reward", "clipped to [-1, 1] by Dopamine's runner before it was stored (not the game score)")
        ctx.note(
            "history_frames",
            f"{totals['history_rows']} real frames before episodes' first rows, kept for FrameStack (never sampled)",
        )
        ctx.note(
            "terminal",
            "Dopamine writes terminal=1 at game over and at the 27,000-step limit alike: "
            "both are ('next', 'terminated')",
        )


class _Checkpoint:
    """One checkpoint: plan from the small arrays, then frames streamed chunk by chunk."""

    def __init__(
        self, spec: DatasetSpec, k: int, paths: dict[str, Path], ctx: LoaderContext, first_episode: int
    ) -> None:
        self.spec, self.k, self.ctx = spec, k, ctx
        small = {key: read_small(paths[key]) for key in ("action", "reward", "terminal", "add_count", "invalid_range")}
        action, reward, terminal = small["action"], small["reward"], small["terminal"]
        with NpyStream(paths["observation"]) as obs:
            capacity, frame_bytes = obs.rows, max(obs.row_bytes, 1)
            first = obs.read(min(STACK_SIZE - 1, obs.rows))
        for key, arr in (("action", action), ("reward", reward), ("terminal", terminal)):
            if arr.ndim != 1 or arr.shape[0] != capacity:
                raise LoaderError(
                    f"{spec.id}: checkpoint {k}: {key} has shape {list(arr.shape)}, expected "
                    f"[{capacity}] like its observations"
                )
        if small["add_count"].size != 1:
            raise LoaderError(f"{spec.id}: checkpoint {k}: add_count holds {small['add_count'].size} values, not one")
        first_zero = (first.reshape(len(first), -1) == 0).all(axis=1) if len(first) else np.zeros(0, bool)
        self.plan: CheckpointPlan = plan_checkpoint(
            int(small["add_count"].reshape(-1)[0]),
            small["invalid_range"],
            action,
            reward,
            terminal,
            capacity,
            first_zero,
        )
        self.frames = LogicalFrames(paths["observation"], self.plan.segments(), capacity)
        self.budget = max(1, min(ctx.chunk_rows, CHUNK_BYTES // frame_bytes))
        self.episode_id = first_episode
        self.counts = dict(self.plan.counts)
        self.counts.update(padding_rows_not_zero=0, next_observation_unknown_rows=0)
        first = self.plan.starts - self.plan.history
        self._read_to = int(first[0]) if first.size else 0

    def run(self) -> Iterator[TensorDictBase]:
        plan = self.plan
        lengths = plan.stops - plan.starts
        e, n_ep = 0, plan.starts.size
        while e < n_ep:
            f, rows = e, 0  # whole episodes up to the budget; at least one
            while f < n_ep and (f == e or rows + lengths[f] <= self.budget):
                rows += int(lengths[f])
                f += 1
            yield self._chunk(e, f)
            self.ctx.progress(rows)
            e = f

    def _chunk(self, e: int, f: int) -> TensorDictBase:
        import torch
        from tensordict import TensorDict

        plan = self.plan
        starts, stops, next_row = plan.starts[e:f], plan.stops[e:f], plan.next_row[e:f]
        history = plan.history[e:f]
        lo = self._read_to
        hi = int(max(stops.max(), next_row.max() + 1))
        frames = self.frames.read(lo, hi)  # every row in between is read: padding gets checked
        self._read_to = hi
        pad = np.flatnonzero(plan.padding[lo:hi] & ~plan.invalid[lo:hi])
        if pad.size:
            self.counts["padding_rows_not_zero"] += int((frames[pad].reshape(pad.size, -1) != 0).any(axis=1).sum())
        lengths = stops - starts + history  # history frames lead their episode's rows, flagged
        n = int(lengths.sum())
        rows = np.concatenate(
            [np.arange(a - h, b) for a, b, h in zip(starts, stops, history, strict=True)]
        )  # logical rows
        is_history = np.concatenate([np.arange(length) < h for length, h in zip(lengths, history, strict=True)])
        last = np.cumsum(lengths) - 1
        obs = frames[rows - lo]
        nxt_rows = rows + 1
        unknown = np.zeros(n, dtype=bool)
        unknown[last] = next_row < 0
        nxt_rows[last] = np.where(next_row < 0, lo, next_row)  # placeholder row, zeroed below
        nxt = frames[nxt_rows - lo]
        nxt[unknown] = 0
        self.counts["next_observation_unknown_rows"] += int(unknown.sum())
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        terminated[last] = plan.terminated[e:f]
        truncated[last] = ~plan.terminated[e:f]
        episode = np.repeat(np.arange(self.episode_id, self.episode_id + (f - e), dtype=np.int64), lengths)
        self.episode_id += f - e
        out = TensorDict({}, batch_size=[n])
        for key, value in (
            ("observation", obs),
            ("action", plan.action[rows]),
            ("episode", episode),
            (("next", "observation"), nxt),
            (("next", "reward"), plan.reward[rows].reshape(n, 1)),
            (("next", "terminated"), terminated.reshape(n, 1)),
            (("next", "truncated"), truncated.reshape(n, 1)),
            (UNKNOWN_KEY, unknown),
            (("info", "replay_index"), plan.phys[rows]),
            (("info", "checkpoint"), np.full(n, self.k, dtype=np.int64)),
            ("history", is_history),
        ):
            out.set(key, torch.from_numpy(np.ascontiguousarray(value)))
        return out
