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

import numpy as np
import pytest
import torch

import datasets_hub
from datasets_hub.errors import InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec
from datasets_hub.loaders.atari.loader import UPSTREAM, AtariLoader
from datasets_hub.loaders.atari.replay import NpyStream, checkpoint_file
from datasets_hub.testing import check_loader

from fixtures.atari import (
    CAP,
    ENDS,
    LENGTHS,
    SHAPE,
    STACK,
    DopamineBuffer,
    check_chunks,
    check_dopamine_environment,
    convert,
    dopamine_stack,
    dopamine_valid,
    frame_id,
    frame_of,
    play,
    save_checkpoint,
)


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
    from fixtures.http_server import serve_files

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
    check_dopamine_environment(card, "Pong")
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
    from datasets_hub.buffers.frame_stack import FrameStack
    from datasets_hub.buffers.samplers.frame_stack import FullStackSampler

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


def test_a_user_entrys_copy_of_a_checkpoint_file_replaces_its_url():
    """An entry resource named like a file the loader derives is fetched from the entry's URL (issue 27)."""
    from datasets_hub.loader import DatasetSpec, Resource
    from datasets_hub.loaders.atari import AtariLoader

    name = "Pong/1/replay_logs/$store$_action_ckpt.0.gz"
    mine = Resource(name=name, urls=("file:///srv/mine/action.gz",))
    spec = DatasetSpec(id="atari/Pong/1", loader="atari", params={"checkpoints": [0]}, resources=[mine])
    fetched = {r.name: r for r in AtariLoader().resources(spec)}
    assert fetched[name].urls == ("file:///srv/mine/action.gz",)
    assert all(r.urls[0].startswith("https://") for n, r in fetched.items() if n != name)


def _pong_at_84x84(tmp_path, monkeypatch) -> dict:
    """Two checkpoints of the fixture's run at the real frame size (the codecs need 8 pixels a side), written
    where a ``file://`` base URL finds them: the load params of ``atari/Pong/1``."""
    import fixtures.atari as fixture

    monkeypatch.setattr(fixture, "SHAPE", (84, 84))
    buf = DopamineBuffer()
    play(buf, LENGTHS, ENDS)
    buf.log_final()
    for k in (0, 1):
        save_checkpoint(tmp_path / "dqn" / "Pong" / "1" / "replay_logs", k, buf.logs[k])
    return {"checkpoints": [0, 1], "base_url": (tmp_path / "dqn").as_uri()}


def test_frames_auto_stores_exact_png_above_the_raw_limit(tmp_path, monkeypatch):
    """frames=None: raw while the estimate (an upper bound) stays under the limit, PNG above, exactly the same frames."""
    from datasets_hub.build import frames as fr

    params = _pong_at_84x84(tmp_path, monkeypatch)
    spec = DatasetSpec(id="atari/Pong/1", loader="atari", params=params)
    estimate = AtariLoader().frame_bytes(spec)
    assert estimate == 2 * CAP * 84 * 84  # a local copy: the slots its .npy headers declare
    upstream = DatasetSpec(id="atari/Pong/1", loader="atari", params={"checkpoints": [0, 1]})
    assert AtariLoader().frame_bytes(upstream) == 2 * 1_000_000 * 84 * 84  # not on this machine: upstream's facts
    monkeypatch.setattr(fr, "RAW_LIMIT_BYTES", estimate - 1)
    png = datasets_hub.load("atari/Pong/1", **params)
    assert png.storage.manifest["frames"] == {"codec": "png", "quality": None}
    card = datasets_hub.info("atari/Pong/1", **params)
    stored = card.frames["observation"]
    assert stored["codec"] == "png" and stored["psnr_db"] is None and stored["bytes"] < stored["decoded_bytes"]
    assert stored["decoded_bytes"] == stored["rows"] * 84 * 84 and stored["rows"] > card.counts["transitions"]
    assert estimate >= stored["decoded_bytes"]  # the bound holds
    monkeypatch.setattr(fr, "RAW_LIMIT_BYTES", estimate)
    raw = datasets_hub.load("atari/Pong/1", **params)
    assert raw.storage.manifest["frames"] == {"codec": "raw", "quality": None}
    a, b = png[:], raw[:]
    for key in ("observation", ("next", "observation")):
        assert torch.equal(a[key], b[key])  # PNG is exact
    assert {frame_id(f) for f in a["observation"].numpy()} == {frame_id(f) for f in b["observation"].numpy()}


def test_the_default_choice_uses_an_exact_raw_build_already_in_the_cache(tmp_path, monkeypatch):
    """frames=None that the estimate turns to PNG loads an existing raw build (same frames, exactly) instead of
    building again; an explicit choice is its own build, and once the PNG build exists the default takes it.
    ``info`` and the CLI's recorded build name follow the same rule."""
    from datasets_hub.build import frames as fr
    from datasets_hub.cache.catalogue_builds import catalogue_build_record

    params = _pong_at_84x84(tmp_path, monkeypatch)
    estimate = AtariLoader().frame_bytes(DatasetSpec(id="atari/Pong/1", loader="atari", params=params))
    raw = datasets_hub.load("atari/Pong/1", frames="raw", **params)
    raw_build = raw.storage.path
    monkeypatch.setattr(fr, "RAW_LIMIT_BYTES", estimate - 1)  # the default now asks for PNG
    again = datasets_hub.load("atari/Pong/1", **params)
    assert again.storage.path == raw_build and again.storage.manifest["frames"]["codec"] == "raw"
    assert [p for p in raw_build.parent.iterdir() if p.is_dir()] == [raw_build]  # nothing built
    card = datasets_hub.info("atari/Pong/1", **params)
    assert card.cached and card.build_path == raw_build and card.frames == {}  # {}: raw frames
    assert catalogue_build_record("atari/Pong/1", params)[0] == raw_build.name
    png = datasets_hub.load("atari/Pong/1", frames="png", **params)
    assert png.storage.path != raw_build and png.storage.manifest["frames"]["codec"] == "png"
    assert datasets_hub.load("atari/Pong/1", **params).storage.path == png.storage.path
    assert catalogue_build_record("atari/Pong/1", params)[0] == png.storage.path.name
    assert torch.equal(png[:]["observation"], raw[:]["observation"])


def test_frames_that_are_no_images_count_nothing(replay):
    """The fixture's 6x5 frames are below the codecs' 8 pixels a side: nothing to compress, so the default
    stays raw however many checkpoints are asked for."""
    buf, _, folder = replay
    params = {"checkpoints": list(range(len(buf.logs))), "base_url": folder.parents[2].as_uri()}
    assert AtariLoader().frame_bytes(DatasetSpec(id="atari/Pong/1", loader="atari", params=params)) == 0
