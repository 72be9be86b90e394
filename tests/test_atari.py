"""The Atari DQN Replay loader on checkpoints written the way Dopamine / batch_rl write them.

``DopamineBuffer`` below re-enacts ``OutOfGraphReplayBuffer.add`` (3 zero transitions before each
episode, circular writes, ``invalid_range`` around the cursor) and batch_rl's logging (a
checkpoint each time ``add_count % capacity == capacity - 1``; the final one with ``add_count``
set to the cursor), saving gzipped ``.npy`` files under the upstream names. Every real frame is
distinct: bytes ``[0, 0]``/``[0, 1]`` encode a global frame number ``g >= 1`` (never all zeros,
unlike padding), so any output row tells which transition it came from. Expected rows are
computed from the simulator's own records by a plain loop, independent of the loader's code.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

import datasets_hub
from datasets_hub.errors import InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, LoaderContext
from datasets_hub.loaders.atari import UPSTREAM, AtariLoader
from datasets_hub.loaders.atari_replay import NpyStream, checkpoint_file
from datasets_hub.testing import check_loader

SHAPE = (6, 5)  # tiny frames: the loader reads the shape from the .npy header
CAP = 40
STACK = 4


def frame_of(g: int, episode: int) -> np.ndarray:
    f = np.full(SHAPE, episode % 200 + 1, dtype=np.uint8)
    f[0, 0], f[0, 1] = g // 250 + 1, g % 250 + 1
    return f


def frame_id(frame: np.ndarray) -> int:
    return (int(frame[0, 0]) - 1) * 250 + int(frame[0, 1]) - 1


class DopamineBuffer:
    """A re-enactment of Dopamine's circular buffer + batch_rl's logging (see the module docstring)."""

    def __init__(self, cap: int = CAP) -> None:
        self.cap = cap
        self.obs = np.zeros((cap, *SHAPE), np.uint8)
        self.action = np.zeros(cap, np.int32)
        self.reward = np.zeros(cap, np.float32)
        self.terminal = np.zeros(cap, np.uint8)
        self.meta: list = [None] * cap  # per slot: (g, episode, t) of a real transition, None for padding
        self.add_count = 0
        self.invalid = np.zeros(STACK)  # float64, as Dopamine initialises it
        self.logs: list[dict] = []

    def _add(self, o, a, r, t, meta) -> None:
        c = self.add_count % self.cap
        self.obs[c], self.action[c], self.reward[c], self.terminal[c], self.meta[c] = o, a, r, t, meta
        self.add_count += 1
        cursor = self.add_count % self.cap
        self.invalid = np.array([(cursor - 1 + i) % self.cap for i in range(STACK + 1)])
        if self.add_count % self.cap == self.cap - 1:
            self.log()

    def add(self, o, a, r, t, meta) -> None:
        if self.add_count == 0 or self.terminal[(self.add_count - 1) % self.cap] == 1:
            for _ in range(STACK - 1):
                self._add(np.zeros(SHAPE, np.uint8), 0, 0.0, 0, None)
        self._add(o, a, r, t, meta)

    def log(self, add_count: int | None = None) -> None:
        self.logs.append(
            {
                "observation": self.obs.copy(),
                "action": self.action.copy(),
                "reward": self.reward.copy(),
                "terminal": self.terminal.copy(),
                "meta": list(self.meta),
                "add_count": np.array(self.add_count if add_count is None else add_count),
                "invalid_range": self.invalid.copy(),
            }
        )

    def log_final(self) -> None:
        self.log(add_count=self.add_count % self.cap)


def play(buf: DopamineBuffer, lengths, ends) -> dict[int, tuple]:
    """Add episodes; return g -> (episode, t, action, reward, terminal, next g or None)."""
    truth: dict[int, tuple] = {}
    g = 1
    for e, (length, end) in enumerate(zip(lengths, ends, strict=True)):
        for t in range(length):
            last = t == length - 1
            term = int(last and end == "terminal")
            action, reward = (g * 7) % 6, float(g % 5) - 1.0  # action 0 and reward 0 happen in real frames too
            nxt = None if (last and term) else g + 1
            truth[g] = (e, t, action, reward, bool(term), nxt)
            buf.add(frame_of(g, e), action, reward, term, (g, e, t))
            g += 1
    return truth


def save_checkpoint(folder: Path, k: int, log: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for key in ("observation", "action", "reward", "terminal", "add_count", "invalid_range"):
        with gzip.open(folder / checkpoint_file(key, k), "wb") as fh:
            np.save(fh, log[key], allow_pickle=False)


def dopamine_valid(log: dict, index: int, cap: int = CAP, horizon: int = 1) -> bool:
    """Dopamine's ``OutOfGraphReplayBuffer.is_valid_transition`` on a logged buffer, rule by rule."""
    add_count = int(log["add_count"])
    # not full (also batch_rl's final log, whose add_count is the cursor)
    if add_count < cap and (index >= add_count - horizon or index < STACK - 1):
        return False
    if index in {int(i) % cap for i in log["invalid_range"]}:
        return False
    return not any(log["terminal"][(index - k) % cap] for k in range(1, STACK))  # terminal inside the stack


def logical_order(log: dict, cap: int = CAP) -> list[int]:
    add_count = int(log["add_count"])
    return [(add_count % cap + j) % cap for j in range(cap)] if add_count >= cap else list(range(add_count))


def expected(log: dict, truth: dict[int, tuple], cap: int = CAP) -> list[tuple]:
    """Per-row truth of one checkpoint by a plain loop: (g, episode key, terminated, truncated, next g),
    one row per index Dopamine can sample, in logical (oldest-first) order."""
    order = logical_order(log, cap)
    rows = []
    for pos, slot in enumerate(order):
        if not dopamine_valid(log, slot, cap):
            continue
        meta = log["meta"][slot]
        assert meta is not None, "Dopamine samples only real transitions"
        g, e, t = meta
        following = log["meta"][order[pos + 1]] if pos + 1 < len(order) else None
        follows_in_episode = following is not None and following[1] == e and following[2] == t + 1
        keeps_going = follows_in_episode and dopamine_valid(log, order[pos + 1], cap)
        term = truth[g][4]
        nxt = following[0] if follows_in_episode and not term else None
        rows.append([g, e, term, not term and not keeps_going, nxt])
    return rows


def dopamine_stack(log: dict, index: int, cap: int = CAP) -> np.ndarray:
    """``get_observation_stack(index)``: frames index-3..index (mod capacity), oldest first."""
    return log["observation"][[(index - STACK + 1 + j) % cap for j in range(STACK)]]


def convert(folder: Path, checkpoints, chunk_rows=7, game="Pong", run="1"):
    spec = DatasetSpec(id=f"atari/{game}/{run}", loader="atari", params={"checkpoints": list(checkpoints)})
    loader = AtariLoader()
    files = {r.name: folder / r.name for r in loader.resources(spec)}
    ctx = LoaderContext(chunk_rows=chunk_rows)
    chunks = list(loader.episodes(spec, files, ctx))
    return chunks, ctx.notes, spec, files


def check_chunks(chunks, logs_and_ks, truth, chunk_rows):
    td = torch.cat(chunks)
    if "history" in td.keys():  # history frames: real frames of the episode, right before its first row
        hist = td["history"]
        for i in torch.nonzero(hist).reshape(-1).tolist():
            j = i + 1
            while hist[j]:
                j += 1
            assert td["episode"][j] == td["episode"][i]
            g_first, g_hist = frame_id(td["observation"][j].numpy()), frame_id(td["observation"][i].numpy())
            assert 1 <= g_first - g_hist <= STACK - 1 and truth[g_hist][0] == truth[g_first][0]
        td = td[~hist].exclude("history")
    rows = []
    for k, log in logs_and_ks:
        rows += [(k, *r) for r in expected(log, truth)]
    assert td.batch_size[0] == len(rows)
    obs, nxt = td["observation"].numpy(), td["next", "observation"].numpy()
    episodes = td["episode"].tolist()
    for i, (k, g, e, term, trunc, next_g) in enumerate(rows):
        assert frame_id(obs[i]) == g and np.array_equal(obs[i], frame_of(g, e)), i
        assert td["action"][i].item() == truth[g][2] and td["next", "reward"][i, 0].item() == truth[g][3]
        assert td["next", "terminated"][i, 0].item() == term, i
        assert td["next", "truncated"][i, 0].item() == trunc, i
        assert td["info", "checkpoint"][i].item() == k
        if next_g is None:
            assert not nxt[i].any() and td["info", "next_observation_unknown"][i].item(), i
        else:
            assert np.array_equal(nxt[i], frame_of(next_g, e)), i  # never a frame of another episode
            assert not td["info", "next_observation_unknown"][i].item()
        # a new TED episode starts exactly where the truth says one ends (or the checkpoint changes)
        if i:
            prev = rows[i - 1]
            boundary = prev[3] or prev[4] or prev[0] != k
            assert (episodes[i] != episodes[i - 1]) == boundary, i
    assert td["action"].dtype == torch.int32 and td["next", "reward"].dtype == torch.float32
    assert td["observation"].dtype == torch.uint8 and td["observation"].shape[1:] == SHAPE
    for chunk in chunks:  # whole episodes, within the row budget unless one episode is longer
        ep = chunk["episode"][~chunk["history"]] if "history" in chunk.keys() else chunk["episode"]
        assert (td["episode"] == ep[0]).sum() == (ep == ep[0]).sum()
        assert (td["episode"] == ep[-1]).sum() == (ep == ep[-1]).sum()
        assert ep.numel() <= chunk_rows or ep[0] == ep[-1]
    return td, rows


LENGTHS = [5, 9, 1, 14, 3, 22, 7, 2, 11, 6, 30, 4, 8, 13, 2, 9, 17, 5, 3, 18]  # the final log: cursor 9
ENDS = ["terminal"] * 19 + ["running"]


@pytest.fixture
def replay(tmp_path):
    buf = DopamineBuffer()
    truth = play(buf, LENGTHS, ENDS)
    buf.log_final()
    folder = tmp_path / "mirror" / "atari-replay-datasets" / "dqn" / "Pong" / "1" / "replay_logs"
    for k, log in enumerate(buf.logs):
        save_checkpoint(folder, k, log)
    return buf, truth, folder


def test_simulated_logs_look_like_batch_rl(replay):
    buf, _, folder = replay
    assert len(buf.logs) >= 5
    assert int(buf.logs[0]["add_count"]) == CAP - 1  # the first log: not yet wrapped
    assert all(int(log["add_count"]) >= CAP for log in buf.logs[1:-1])  # wrapped
    assert int(buf.logs[-1]["add_count"]) < CAP  # the final log
    with NpyStream(folder / checkpoint_file("observation", 1)) as s:
        assert s.shape == (CAP, *SHAPE) and s.dtype == np.uint8
        first = s.read(3)
        s.skip(30)
        rest = s.read(CAP - 33)
    assert np.array_equal(np.concatenate([first, rest]), np.delete(buf.logs[1]["observation"], range(3, 33), axis=0))


@pytest.mark.parametrize("chunk_rows", [1, 7, 1000])
def test_every_row_of_every_checkpoint(replay, chunk_rows):
    buf, truth, folder = replay
    ks = list(range(len(buf.logs)))
    chunks, notes, _, _ = convert(folder.parents[2], ks, chunk_rows=chunk_rows)
    td, rows = check_chunks(chunks, [(k, buf.logs[k]) for k in ks], truth, chunk_rows)
    # invalid rows never appear: no output row sits at a slot of its checkpoint's invalid_range
    for i, (k, *_rest) in enumerate(rows):
        slot = td["info", "replay_index"][i].item()
        assert slot not in {int(x) % CAP for x in buf.logs[k]["invalid_range"]}
        assert buf.logs[k]["meta"][slot][0] == rows[i][1]
    totals = notes["totals"]
    assert totals["transitions"] == len(rows) and totals["padding_rows_not_zero"] == 0
    assert totals["episodes"] == len(set(td["episode"].tolist()))
    assert totals["terminated"] == int(td["next", "terminated"].sum())
    assert totals["next_observation_unknown_rows"] == int(td["info", "next_observation_unknown"].sum())
    assert "clipped to [-1, 1]" in notes["reward"]  # Dopamine's runner clipped before storing (the card says so)
    per0 = notes["per_checkpoint"]["0"]
    assert per0["add_count"] == CAP - 1 and per0["padding_rows"] > 0 and per0["invalid_rows"] == STACK


def test_wrapped_checkpoint_starts_at_the_cursor(tmp_path):
    """A buffer logged with its cursor mid-array: two physical segments, read in logical order."""
    buf = DopamineBuffer()
    truth = play(buf, LENGTHS[:9], ["terminal"] * 8 + ["running"])
    buf.logs.clear()
    buf.log()
    log = buf.logs[0]
    cursor = int(log["add_count"]) % CAP
    assert int(log["add_count"]) > CAP and 5 < cursor < CAP - 10
    save_checkpoint(tmp_path / "Pong" / "1" / "replay_logs", 0, log)
    chunks, notes, _, _ = convert(tmp_path, [0])
    td, rows = check_chunks(chunks, [(0, log)], truth, 7)
    gs = [r[1] for r in rows]
    assert gs == sorted(gs)  # logical order is the order of play (oldest first)
    slots = td["info", "replay_index"].tolist()
    assert slots[0] >= cursor + STACK and slots[-1] < cursor - 1  # oldest after the cursor, newest before
    assert slots.index(min(slots)) > 0  # the read wrapped around the end of the array
    assert notes["per_checkpoint"]["0"]["invalid_rows"] == STACK + 1  # cursor-1 .. cursor+3
    assert notes["per_checkpoint"]["0"]["truncated_at_invalid_range"] == 1
    assert rows[-1][5] is not None  # the last kept row takes the newest (invalid) row's frame


def test_end_to_end_over_http_with_endpoint(replay, monkeypatch):
    from http_server import serve_files

    buf, truth, folder = replay
    root = folder.parents[4]
    served = {str(p.relative_to(root)): p.read_bytes() for p in folder.iterdir()}
    with serve_files(served) as server:
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_ATARI", server.base_url)
        rb = datasets_hub.load("atari/Pong/1", checkpoints=[0, 1], batch_size=16)
        some = "atari-replay-datasets/dqn/Pong/1/replay_logs/" + checkpoint_file("observation", 1)
        assert server.count(some) == 1 and server.count(some.replace(".1.gz", ".2.gz")) == 0
        again = datasets_hub.load("atari/Pong/1", checkpoints=[0, 1])  # cached: no new request
        assert server.count(some) == 1 and len(again) == len(rb)
    data = rb[:]
    _td, rows = check_chunks(
        [data.exclude("step", "done", "terminated", "truncated", ("next", "done"))],
        [(0, buf.logs[0]), (1, buf.logs[1])],
        truth,
        10**9,
    )
    card = datasets_hub.info("atari/Pong/1", checkpoints=[0, 1])
    n, e = card.counts["transitions"], card.counts["episodes"]
    assert card.schema["obs/observation"]["rows"] == n + e  # frames stored once: T+1 rows per episode
    assert card.manifest["layout"]["next_stored_per_step"] == []
    assert card.notes["totals"]["transitions"] == n and card.metadata["license"] == "CC BY 4.0"
    # samples agree with the truth row their frame names
    gen = torch.Generator().manual_seed(0)
    rb2 = datasets_hub.load("atari/Pong/1", checkpoints=[0, 1], batch_size=64, generator=gen)
    by_g = {r[1]: r for r in rows}
    batch = rb2.sample()
    for i in range(64):
        g = frame_id(batch["observation"][i].numpy())
        _, _, e, term, trunc, next_g = by_g[g]
        assert batch["next", "terminated"][i].item() == term and batch["next", "truncated"][i].item() == trunc
        if next_g is not None:
            assert frame_id(batch["next", "observation"][i].numpy()) == next_g
    # another subset is another build
    other = datasets_hub.info("atari/Pong/1", checkpoints=[1])
    assert not other.cached


def test_check_loader_contract(replay):
    _buf, _, folder = replay
    _, _, spec, files = convert(folder.parents[2], [0, 1, 2])
    summary = check_loader(AtariLoader, spec, files)
    assert summary["counts"]["transitions"] > 0 and summary["layout"]["obs"] == ["observation"]


def test_resources_name_six_upstream_files_per_checkpoint():
    spec = DatasetSpec(id="atari/Pong/1", loader="atari", params={"checkpoints": [0, 50]})
    res = AtariLoader().resources(spec)
    assert len(res) == 12
    assert res[0].urls[0] == f"{UPSTREAM}/Pong/1/replay_logs/%24store%24_observation_ckpt.0.gz"
    assert res[0].name == "Pong/1/replay_logs/$store$_observation_ckpt.0.gz"
    assert {r.name.rsplit("/", 1)[1] for r in res[6:]} == {
        "$store$_observation_ckpt.50.gz",
        "$store$_action_ckpt.50.gz",
        "$store$_reward_ckpt.50.gz",
        "$store$_terminal_ckpt.50.gz",
        "add_count_ckpt.50.gz",
        "invalid_range_ckpt.50.gz",
    }
    default = AtariLoader().resources(DatasetSpec(id="atari/Pong/1", loader="atari"))
    assert len(default) == 51 * 6
    local = AtariLoader().resources(
        DatasetSpec(
            id="atari/mine",
            loader="atari",
            params={"game": "Breakout", "run": 3, "checkpoints": 7, "base_url": "file:///data/dqn/"},
        )
    )
    assert local[0].urls[0] == "file:///data/dqn/Breakout/3/replay_logs/%24store%24_observation_ckpt.7.gz"


@pytest.mark.parametrize(
    "params, match",
    [
        ({"checkpoint": [0]}, "Did you mean 'checkpoints'"),
        ({"checkpoints": [51]}, "checkpoint 51 does not exist"),
        ({"checkpoints": []}, "non-empty list"),
        ({"checkpoints": [1, 1]}, "twice"),
        ({"checkpoints": ["0"]}, "list of ints"),
        ({"run": 6}, "run must be 1..5"),
        ({"base_url": "/no/scheme"}, "base_url must be a URL"),
    ],
)
def test_bad_parameters_teach(params, match):
    with pytest.raises(InvalidParameter, match=match):
        AtariLoader().check_params(DatasetSpec(id="atari/Pong/1", loader="atari", params=params))


def test_catalogue_has_60_games_times_5_runs():
    ids = datasets_hub.list_datasets(loader="atari")
    assert len(ids) == 300 and "atari/Pong/1" in ids and "atari/Zaxxon/5" in ids
    assert len({i.split("/")[1] for i in ids}) == 60
    card = datasets_hub.info("atari/Breakout/2")
    assert "Agarwal" in card.metadata["citation"] and not card.cached
    assert card.resources[0]["urls"][0].startswith(UPSTREAM + "/Breakout/2/replay_logs/")


def test_damaged_files_raise_loader_errors(replay, tmp_path):
    _, _, folder = replay
    target = folder / checkpoint_file("observation", 0)
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])  # a truncated download
    with pytest.raises(LoaderError, match="download it again"):
        convert(folder.parents[2], [0])
    target.write_bytes(b"not gzip at all")
    with pytest.raises(LoaderError, match=r"not a gzipped \.npy"):
        convert(folder.parents[2], [0])


def test_terminal_at_last_row_and_padding_frames_nonzero_are_noted(tmp_path):
    """Hand-made, unwrapped buffer: start padding, a terminal, its padding (one with a non-zero frame)."""
    cap = 12
    obs = np.zeros((cap, *SHAPE), np.uint8)
    real = {3: 1, 4: 2, 5: 3, 9: 4, 10: 5}  # slot -> g
    for slot, g in real.items():
        obs[slot] = frame_of(g, 0 if g <= 3 else 1)
    obs[7] = 9  # padding slot with a non-zero frame: noted, still dropped
    terminal = np.zeros(cap, np.uint8)
    terminal[5] = 1
    log = {
        "observation": obs,
        "action": np.arange(cap, dtype=np.int32),
        "reward": np.zeros(cap, np.float32),
        "terminal": terminal,
        "add_count": np.array(11),
        "invalid_range": np.array([10.0, 11.0, 0.0, 1.0, 2.0]),
    }
    log["action"][[0, 1, 2, 6, 7, 8]] = 0
    folder = tmp_path / "Pong" / "1" / "replay_logs"
    save_checkpoint(folder, 0, log)
    chunks, notes, _, _ = convert(tmp_path, [0], chunk_rows=100)
    td = torch.cat(chunks)
    assert [frame_id(f) for f in td["observation"].numpy()] == [1, 2, 3, 4]
    assert td["episode"].tolist() == [0, 0, 0, 1]
    assert td["next", "terminated"][:, 0].tolist() == [False, False, True, False]
    assert td["next", "truncated"][:, 0].tolist() == [False, False, False, True]
    assert frame_id(td["next", "observation"][3].numpy()) == 5  # the invalid row's frame, same episode
    per = notes["per_checkpoint"]["0"]
    assert per["padding_rows"] == 3 and per["padding_rows_not_zero"] == 1 and per["invalid_rows"] == 4
    assert per["truncated_at_invalid_range"] == 1 and per["terminated"] == 1


def test_a_local_copy_through_an_extra_catalogue_file(replay, tmp_path, monkeypatch):
    """The README's recipe: a DATASETS_HUB_REGISTRY entry naming a gsutil copy on disk (file://)."""
    buf, truth, folder = replay
    extra = tmp_path / "mine.yaml"
    extra.write_text(
        "atari/Pong/1-local: {loader: atari, params: {game: Pong, run: 1, checkpoints: [1], "
        f'base_url: "{folder.parents[2].as_uri()}"}}}}\n'
    )
    monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(extra))
    rb = datasets_hub.load("atari/Pong/1-local")
    check_chunks(
        [rb[:].exclude("step", "done", "terminated", "truncated", ("next", "done"))], [(1, buf.logs[1])], truth, 10**9
    )


def test_final_checkpoint_never_samples_below_stack_size(replay):
    """batch_rl's log_final_buffer sets add_count to the cursor, so Dopamine treats the buffer as not
    full and never samples indices 0..stack_size-2, although they hold real frames of the episode
    that ran across the wrap. They must not become transitions (they were a 3-row episode before)."""
    buf, _truth, folder = replay
    final = len(buf.logs) - 1
    log = buf.logs[final]
    assert int(log["add_count"]) < CAP and all(log["meta"][i] is not None for i in range(STACK - 1))
    chunks, notes, _, _ = convert(folder.parents[2], [final], chunk_rows=1000)
    td = torch.cat(chunks)
    slots = td["info", "replay_index"][~td["history"]].tolist()
    assert min(slots) >= STACK - 1
    assert sorted(slots) == [i for i in range(CAP) if dopamine_valid(log, i)]
    assert td["info", "replay_index"][td["history"]].tolist() == [0, 1, 2]  # history of index 3's stack
    assert notes["per_checkpoint"][str(final)]["never_sampled_rows"] >= STACK - 1


def test_frame_stacks_equal_dopamine_states(replay):
    """Every index Dopamine can sample, in every checkpoint (first, wrapped, final), gives the same
    stacked state, action, reward, terminal and next state through FrameStack(4); no other row exists.
    The wrapped checkpoints' oldest episodes start after the cursor with real frames before them:
    their stacks must hold those frames, not zeros."""
    from datasets_hub.buffers.frame_stack import FrameStack, FullStackSampler

    buf, _truth, folder = replay
    ks = list(range(len(buf.logs)))
    rb = datasets_hub.load("atari/Pong/1", checkpoints=ks, base_url=folder.parents[2].as_uri())
    data = FrameStack(4).bind(rb)(rb[:])
    seen = set()
    history_used = 0
    for i in range(len(data)):
        k, slot = int(data["info", "checkpoint"][i]), int(data["info", "replay_index"][i])
        log = buf.logs[k]
        assert dopamine_valid(log, slot), (k, slot)
        seen.add((k, slot))
        assert np.array_equal(data["observation"][i].numpy(), dopamine_stack(log, slot)), (k, slot)
        assert data["action"][i].item() == log["action"][slot]
        assert data["next", "reward"][i, 0].item() == log["reward"][slot]
        assert data["next", "terminated"][i, 0].item() == bool(log["terminal"][slot])
        assert np.array_equal(data["next", "observation"][i].numpy(), dopamine_stack(log, (slot + 1) % CAP))
        step = int(data["step"][i])
        if step < STACK - 1 and dopamine_stack(log, slot)[: STACK - 1 - step].any():
            history_used += 1
    assert seen == {(k, i) for k in ks for i in range(CAP) if dopamine_valid(buf.logs[k], i)}
    assert history_used >= 3  # the fixture does exercise real frames before an episode's first row
    # FullStackSampler counts history frames towards a full stack: those rows are drawn, unpadded
    sampler = FullStackSampler(4, generator=torch.Generator().manual_seed(0))
    rows, _ = sampler.sample(rb.storage, 4000)
    steps = rb[rows]["step"]
    assert (steps < STACK - 1).any()
    stacked = FrameStack(4).bind(rb)(rb[rows])["observation"]
    assert (stacked.reshape(len(rows), STACK, -1) != 0).any(-1).all()  # no zero (padded) frame
