"""The RL Unplugged Atari loader on shards written here in upstream's format.

A shard is a GZIP-compressed TFRecord file of ``tf.train.Example`` episodes with the features of
TFDS's ``rl_unplugged/atari_utils.py`` (``observations`` as 84x84 grey PNGs, ``actions``,
``unclipped_rewards``, ``clipped_rewards``, ``discounts``, ``episode_idx``, ``checkpoint_idx``,
``episode_return``, ``clipped_episode_return``). Every frame encodes its (episode, step) in two
pixels, so each output row tells where it came from; expected rows come from a plain loop.
``tests/upstream/test_upstream_rlu_atari.py`` reads the same shards with TFDS's own code.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import datasets_hub
from datasets_hub.errors import InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec
from datasets_hub.loaders.rlu_atari.loader import UPSTREAM, RLUAtariLoader, shard_file
from datasets_hub.testing import check_loader

from fixtures.atari import check_dopamine_environment
from fixtures.rlu_atari import (
    check_rows,
    convert,
    decoded,
    expected,
    write_shards,
)


# per shard: episodes as (length L in steps, terminal, checkpoint_idx)
@pytest.mark.parametrize("chunk_rows", [1, 7, 1000])
def test_every_transition_of_every_episode(tmp_path, chunk_rows):
    chunks, notes, _, _ = convert(write_shards(tmp_path), chunk_rows)
    check_rows(torch.cat(chunks), expected())
    for chunk in chunks:  # whole episodes, within the budget unless one episode is longer
        assert chunk.batch_size[0] <= chunk_rows or chunk["episode"][0] == chunk["episode"][-1]
    counts = notes["counts"]
    assert counts["records"] == 6 and counts["skipped_one_step"] == 1 and counts["episodes"] == 5
    assert counts["terminated"] == 3 and counts["truncated"] == 2
    assert notes["checkpoints_present"] == [0, 1, 2, 3]


def test_load_over_http_with_endpoint_frames_stored_once_and_frame_stacks(tmp_path, monkeypatch):
    from datasets_hub.buffers.frame_stack import FrameStack
    from datasets_hub.buffers.samplers.frame_stack import FullStackSampler

    from fixtures.http_server import serve_files

    folder = write_shards(tmp_path / "rl_unplugged" / "atari_episodes_ordered")
    served = {str(p.relative_to(tmp_path)): p.read_bytes() for p in folder.rglob("run_*")}
    with serve_files(served) as server:
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_RLU_ATARI", server.base_url)
        rb = datasets_hub.load("rlu_atari/Pong/1", shards=[0, 1], batch_size=8)
        name = "rl_unplugged/atari_episodes_ordered/Pong/run_1-00001-of-00050"
        assert server.count(name) == 1 and server.count(name.replace("00001-of", "00002-of")) == 0
        again = datasets_hub.load("rlu_atari/Pong/1", shards=[0, 1])  # cached: no request
        assert server.count(name) == 1 and len(again) == len(rb)
    data = rb[:]
    check_rows(data, expected())
    card = datasets_hub.info("rlu_atari/Pong/1", shards=[0, 1])
    check_dopamine_environment(card, "Pong")  # the same Dopamine runs as DQN Replay
    n, e = card.counts["transitions"], card.counts["episodes"]
    assert card.schema["obs/observation"]["rows"] == n + e  # frames stored once: T+1 rows per episode
    assert card.manifest["layout"]["next_stored_per_step"] == []
    # FrameStack(4): frames t-3..t of the row's own episode, zeros before its first frame
    stacked = FrameStack(4).bind(rb)(data)
    assert stacked["observation"].shape[1:] == (4, 84, 84, 1)
    for i, r in enumerate(expected()):
        e, t = r["obs"]
        for j in range(4):
            want = decoded(e, t - 3 + j) if t - 3 + j >= 0 else np.zeros((84, 84, 1), np.uint8)
            assert np.array_equal(stacked["observation"][i, j].numpy(), want), (i, j)
        assert np.array_equal(stacked["next", "observation"][i, -1].numpy(), decoded(e, t + 1))
    rows, _ = FullStackSampler(4, generator=torch.Generator().manual_seed(0)).sample(rb.storage, 500)
    assert set(data["step"][rows].tolist()) <= {3, 4, 5, 6, 7, 8, 9, 10} and (data["step"][rows] >= 3).all()


def test_shards_and_checkpoint_range_select_subsets_and_builds(tmp_path):
    folder = write_shards(tmp_path)
    chunks, notes, _, _ = convert(folder, checkpoint_range=[1, 2])
    check_rows(torch.cat(chunks), expected(keep=(1, 2)))
    assert notes["counts"]["skipped_checkpoint_range"] == 3
    base = folder.as_uri()
    full = datasets_hub.load("rlu_atari/Pong/1", shards=[0, 1], base_url=base)
    part = datasets_hub.load("rlu_atari/Pong/1", shards=[0, 1], base_url=base, checkpoint_range=[1, 2])
    one = datasets_hub.load("rlu_atari/Pong/1", shards=[1], base_url=base)
    assert len(full) == len(expected()) and len(part) == len(expected(keep=(1, 2)))
    assert len(one) == len(expected(shards=(1,)))
    fps = {b.storage.manifest["fingerprint"] for b in (full, part, one)}
    assert len(fps) == 3  # every selection is a build of its own
    with pytest.raises(LoaderError, match="no episode with a transition"):
        convert(folder, checkpoint_range=[7, 9])


def test_resources_name_upstream_shards():
    loader = RLUAtariLoader()
    res = loader.resources(DatasetSpec(id="rlu_atari/Pong/1", loader="rlu_atari"))
    assert len(res) == 50 and res[0].name == "atari_episodes_ordered/Pong/run_1-00000-of-00050"
    assert res[49].urls[0] == f"{UPSTREAM}/Pong/run_1-00049-of-00050"
    assert UPSTREAM == "https://storage.googleapis.com/rl_unplugged/atari_episodes_ordered"
    short = loader.resources(DatasetSpec(id="rlu_atari/Carnival/3", loader="rlu_atari", params={"shards": [48]}))
    assert [r.urls[0] for r in short] == [f"{UPSTREAM}/Carnival/run_3-00048-of-00049"]
    gs = loader.resources(
        DatasetSpec(id="rlu_atari/mine", loader="rlu_atari",
                    params={"game": "Breakout", "run": 2, "shards": [1], "base_url": "gs://bucket/rlu"})
    )  # fmt: skip
    assert gs[0].urls[0] == "https://storage.googleapis.com/bucket/rlu/Breakout/run_2-00001-of-00050"


@pytest.mark.parametrize(
    "params, match",
    [
        ({"shard": [0]}, "Did you mean 'shards'"),
        ({"shards": [50]}, "shard 50 does not exist"),
        ({"shards": [1, 1]}, "twice"),
        ({"checkpoint_range": [3, 1]}, "checkpoint_range must be"),
        ({"checkpoint_range": 4}, "checkpoint_range must be"),
        ({"run": 6}, "run must be 1..5"),
        ({"game": "Pongg"}, "Did you mean 'Pong'"),
        ({"base_url": "/no/scheme"}, "base_url must be a URL"),
    ],
)
def test_bad_parameters_teach(params, match):
    with pytest.raises(InvalidParameter, match=match):
        RLUAtariLoader().check_params(DatasetSpec(id="rlu_atari/Pong/1", loader="rlu_atari", params=params))


def test_damaged_shards_raise_loader_errors(tmp_path):
    folder = write_shards(tmp_path)
    target = folder / shard_file("Pong", 1, 1, 50)
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])  # a truncated download
    with pytest.raises(LoaderError, match="download it again"):
        convert(folder)
    target.write_bytes(b"not gzip at all")
    with pytest.raises(LoaderError, match="download it again"):
        convert(folder)


def test_catalogue_and_the_removed_atari_source(capsys):
    from datasets_hub.cli import main

    ids = datasets_hub.list_datasets(loader="rlu_atari")
    assert len(ids) == 230 and "rlu_atari/Pong/1" in ids and len({i.split("/")[1] for i in ids}) == 46
    assert "RL Unplugged" in datasets_hub.info("rlu_atari/Pong/3").metadata["citation"]
    status = datasets_hub.info("atari/Pong/1").metadata["status"]
    assert status.startswith("source removed upstream: mirror needed") and "rlu_atari/" in status
    assert main(["list", "--loader", "atari", "--search", "Pong"]) == 0
    out = capsys.readouterr().out
    assert "[source removed upstream: mirror needed" in out


def test_check_loader_contract(tmp_path):
    _, _, spec, files = convert(write_shards(tmp_path))
    summary = check_loader(RLUAtariLoader, spec, files)
    assert summary["counts"]["transitions"] == len(expected()) and summary["layout"]["obs"] == ["observation"]


def test_frames_auto_stores_exact_png_above_the_raw_limit(tmp_path, monkeypatch):
    """frames=None: raw under the limit, PNG (exact, upstream's own codec) above; the estimate is documented
    as an estimate (a run's 50M steps over its shards), and the card says what was stored."""
    from datasets_hub.build import frames as fr

    base = write_shards(tmp_path).as_uri()
    spec = DatasetSpec(id="rlu_atari/Pong/1", loader="rlu_atari", params={"shards": [0, 1], "base_url": base})
    estimate = RLUAtariLoader().frame_bytes(spec)
    assert estimate == 2 * 1_000_000 * 84 * 84
    monkeypatch.setattr(fr, "RAW_LIMIT_BYTES", estimate - 1)
    png = datasets_hub.load("rlu_atari/Pong/1", shards=[0, 1], base_url=base)
    assert png.storage.manifest["frames"] == {"codec": "png", "quality": None}
    stored = datasets_hub.info("rlu_atari/Pong/1", shards=[0, 1], base_url=base).frames["observation"]
    rows = len(expected()) + 5  # T + 1 frames for each of the 5 episodes with a transition
    assert stored["codec"] == "png" and stored["rows"] == rows and stored["decoded_bytes"] == rows * 84 * 84
    assert stored["psnr_db"] is None  # exact
    check_rows(png[:], expected())  # every frame decodes to its source PNG's pixels
    monkeypatch.setattr(fr, "RAW_LIMIT_BYTES", estimate)
    raw = datasets_hub.load("rlu_atari/Pong/1", shards=[0, 1], base_url=base)
    assert raw.storage.manifest["frames"] == {"codec": "raw", "quality": None}
    assert torch.equal(png[:]["next", "observation"], raw[:]["next", "observation"])
    short = DatasetSpec(id="rlu_atari/Carnival/1", loader="rlu_atari", params={"shards": [0]})
    assert RLUAtariLoader().frame_bytes(short) == 50_000_000 // 49 * 84 * 84  # 49 shards share the run's steps
