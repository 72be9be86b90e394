"""The ``atari`` loader against Dopamine's own replay buffer (dopamine-rl on PyPI, TF module
``dopamine.tf.replay_memory.circular_replay_buffer``), on checkpoints Dopamine itself writes.

batch_rl (which logged the DQN Replay Dataset) is not on PyPI. Its ``OutOfGraphLoggedReplayBuffer``
(``batch_rl/baselines/replay_memory/logged_replay_buffer.py``) is a subclass of Dopamine's buffer
that, after each ``add``, writes the whole buffer when ``add_count % capacity == capacity - 1``,
and whose ``log_final_buffer()`` writes it once more with ``add_count`` replaced by the cursor. Its
files are those of Dopamine's ``save()``. :class:`LoggedBuffer` below reproduces exactly that
behaviour on top of Dopamine's class and uses Dopamine's own ``save()`` to write.

For every checkpoint (the first log, not yet wrapped; wrapped logs; Dopamine ``save()`` calls in the
middle of the buffer, wrapped and not; the final log) a fresh Dopamine buffer ``load()``s the files,
and every index it accepts (``is_valid_transition``) goes through its own
``sample_transition_batch``: state, action, reward, next state and terminal must equal our build's
row for that index with ``FrameStack(4)``; our build must hold no other row.
"""

from __future__ import annotations

import numpy as np
import pytest
from upstream_ref import upstream

import datasets_hub
from datasets_hub.buffers.frame_stack import FrameStack

SHAPE = (7, 6)
CAP = 64
STACK = 4


def _frame(g: int, episode: int) -> np.ndarray:
    frame = np.full(SHAPE, episode % 250 + 1, dtype=np.uint8)
    frame[0, 0], frame[0, 1] = g // 250 + 1, g % 250 + 1  # never all zeros, unlike Dopamine's padding
    return frame


@pytest.fixture(scope="module")
def crb():
    return upstream("dopamine.tf.replay_memory.circular_replay_buffer")


def _logged_buffer_class(crb):
    class LoggedBuffer(crb.OutOfGraphReplayBuffer):
        """batch_rl's logging behaviour (see the module docstring) on Dopamine's own buffer."""

        def __init__(self, log_dir: str, **kwargs) -> None:
            # checkpoint_duration: save() must not delete older logs (batch_rl keeps all 51)
            super().__init__(checkpoint_duration=10**9, **kwargs)
            self._log_dir = log_dir
            self._log_count = 0

        def add(self, observation, action, reward, terminal, *args, **kwargs):
            super().add(observation, action, reward, terminal, *args, **kwargs)
            if self.add_count % self._replay_capacity == self._replay_capacity - 1:
                self._log()

        def _log(self) -> None:
            self.save(self._log_dir, self._log_count)
            self._log_count += 1

        def log_final_buffer(self) -> None:
            real = self.add_count
            self.add_count = np.array(self.cursor())
            self._log()
            self.add_count = real

    return LoggedBuffer


@pytest.fixture(scope="module")
def logs(crb, tmp_path_factory):
    """Checkpoints written by Dopamine (through the batch_rl logging shim), with the suffixes used."""
    root = tmp_path_factory.mktemp("dqn")
    folder = root / "Pong" / "1" / "replay_logs"
    folder.mkdir(parents=True)
    buf = _logged_buffer_class(crb)(
        str(folder), observation_shape=SHAPE, stack_size=STACK, replay_capacity=CAP, batch_size=1
    )
    rng = np.random.default_rng(7)
    mid = {150: 40, 40: 41}  # Dopamine save() calls mid-buffer (add_count -> suffix): wrapped, unwrapped
    g, episode = 1, 0
    while buf._log_count < 6:
        length = int(rng.integers(1, 30))
        for t in range(length):
            last = t == length - 1
            # rewards as Dopamine's runner stores them: clipped to [-1, 1]
            reward = round(float(np.clip(rng.normal(0, 1.5), -1, 1)), 3)
            buf.add(_frame(g, episode), int(rng.integers(0, 6)), np.float32(reward), int(last))
            g += 1
            suffix = mid.pop(int(buf.add_count), None)
            if suffix is not None:
                buf.save(str(folder), suffix)
        episode += 1
    for _ in range(int(rng.integers(5, 20))):  # a last episode still running at the end of training
        buf.add(_frame(g, episode), int(rng.integers(0, 6)), np.float32(0.5), 0)
        g += 1
    buf.log_final_buffer()
    assert not mid, "the run was too short to make the mid-buffer saves"
    return root, sorted([*range(buf._log_count), 40, 41])


def _dopamine_view(crb, folder, k):
    """What Dopamine samples from checkpoint ``k``: {index: (state, action, reward, next_state, terminal)}."""
    buf = crb.OutOfGraphReplayBuffer(observation_shape=SHAPE, stack_size=STACK, replay_capacity=CAP, batch_size=1)
    buf.load(str(folder), k)
    valid = [i for i in range(CAP) if buf.is_valid_transition(i)]
    if not valid:
        return buf, {}
    batch = buf.sample_transition_batch(batch_size=len(valid), indices=valid)
    names = [e.name for e in buf.get_transition_elements(len(valid))]
    arrays = dict(zip(names, batch, strict=True))
    out = {}
    for j, i in enumerate(valid):
        out[i] = (
            np.moveaxis(arrays["state"][j], -1, 0),
            int(arrays["action"][j]),
            float(arrays["reward"][j]),
            np.moveaxis(arrays["next_state"][j], -1, 0),
            bool(arrays["terminal"][j]),
        )
    return buf, out


def test_logs_cover_every_kind_of_checkpoint(crb, logs):
    root, ks = logs
    folder = root / "Pong" / "1" / "replay_logs"
    counts = {}
    for k in ks:
        buf = crb.OutOfGraphReplayBuffer(observation_shape=SHAPE, stack_size=STACK, replay_capacity=CAP, batch_size=1)
        buf.load(str(folder), k)
        counts[k] = int(buf.add_count)
    assert counts[0] == CAP - 1  # first log: not wrapped
    assert all(c >= CAP and c % CAP == CAP - 1 for k, c in counts.items() if 0 < k < ks[-3])  # wrapped logs
    assert counts[40] >= CAP and counts[40] % CAP not in (CAP - 1, 0) and counts[41] < CAP  # mid-buffer saves
    assert counts[ks[-3]] < CAP  # the final log: add_count is the cursor


def test_every_dopamine_sample_equals_ours(crb, logs):
    root, ks = logs
    folder = root / "Pong" / "1" / "replay_logs"
    rb = datasets_hub.load("atari/Pong/1", checkpoints=ks, base_url=root.as_uri())
    ours = FrameStack(4).bind(rb)(rb[:])
    where = {
        (int(k), int(i)): row
        for row, (k, i) in enumerate(
            zip(ours["info", "checkpoint"].tolist(), ours["info", "replay_index"].tolist(), strict=True)
        )
    }
    expected_rows = 0
    history_checked = 0
    for k in ks:
        _, view = _dopamine_view(crb, folder, k)
        expected_rows += len(view)
        for i, (state, action, reward, next_state, terminal) in view.items():
            row = where.get((k, i))
            assert row is not None, f"checkpoint {k}: Dopamine samples index {i}, our build has no such row"
            assert np.array_equal(ours["observation"][row].numpy(), state), (k, i)
            assert int(ours["action"][row]) == action, (k, i)
            assert float(ours["next", "reward"][row, 0]) == reward, (k, i)
            assert bool(ours["next", "terminated"][row, 0]) == terminal, (k, i)
            assert np.array_equal(ours["next", "observation"][row].numpy(), next_state), (k, i)
            if int(ours["step"][row]) < STACK - 1 and state[: STACK - 1 - int(ours["step"][row])].any():
                history_checked += 1
    # no other row: every row of ours is an index Dopamine accepts
    assert len(ours) == expected_rows == len(where)
    assert history_checked > 0  # real frames before an episode's first row were compared
