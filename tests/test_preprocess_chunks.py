"""preprocess(by="episode"), the row-wise probe and the fingerprint of chunking settings (issue 13)."""

from __future__ import annotations

import itertools

import pytest
import torch

import datasets_hub as dh
from datasets_hub import LazyTensorStorage, TensorDictReplayBuffer
from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.buffers.returns import ReturnToGo
from datasets_hub.build.pipeline import build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import InvalidParameter, PreprocessError
from datasets_hub.loader import DatasetSpec
from datasets_hub.preprocess.chunks import episode_chunks
from datasets_hub.testing import FakeLoader

LENGTHS = [40, 25, 35, 50, 30, 20]


def fake_rb(lengths=LENGTHS):
    path = build(DatasetSpec(id="fake/chunks", loader="fake", params={"lengths": list(lengths)}), FakeLoader(), {}, [])
    return TensorDictReplayBuffer(storage=DatasetStorage(path))


def loop_rtg(reward, episode, gamma):
    """Plain Python: discounted reward-to-go per episode, from the last row backwards."""
    out = [0.0] * len(reward)
    g, prev = 0.0, None
    for t in reversed(range(len(reward))):
        if episode[t] != prev:
            g = 0.0
        g = float(reward[t]) + gamma * g
        out[t] = g
        prev = episode[t]
    return torch.tensor(out)


def my_rtg(td, gamma=0.9):
    """A user's per-episode function that does not declare `by` (the issue's case)."""
    reward = td["next", "reward"].reshape(-1).double()
    episode = td["episode"]
    out = torch.zeros_like(reward)
    g = 0.0
    for t in reversed(range(reward.numel())):
        if t == reward.numel() - 1 or episode[t] != episode[t + 1]:
            g = 0.0
        g = float(reward[t]) + gamma * g
        out[t] = g
    td.set("rtg", out.float()[:, None])
    return td


def chunk_mean(td):
    """Normalises by the mean of whatever chunk it gets: neither row- nor episode-wise."""
    td.set("centred", td["next", "reward"] - td["next", "reward"].mean())
    return td


def scale(td):
    td.set("scaled", td["next", "reward"] * 3)
    return td


def test_episode_chunks_cut_only_at_episode_starts():
    index = EpisodeIndex.from_lengths([40, 25, 35, 50, 30, 20])
    chunks = episode_chunks(index, 200, 60)
    assert chunks[0][0] == 0 and chunks[-1][1] == 200
    assert all(b == c for (_, b), (c, _) in itertools.pairwise(chunks))
    starts = set(index.start.tolist()) | {200}
    assert all(b in starts for _, b in chunks)
    assert (0, 40) in chunks  # 40 + 25 > 60: cut after the first episode
    assert episode_chunks(index, 200, 10)[:2] == [(0, 40), (40, 65)]  # longer episodes are chunks of their own


def test_by_episode_matches_a_loop_whatever_the_chunk_size(isolated_cache):
    rb = fake_rb()
    data = rb[:]
    expected = loop_rtg(data["next", "reward"].reshape(-1), data["episode"].tolist(), 0.9)
    for chunk_size in (7, 33, 1000):
        out = rb.preprocess(ReturnToGo(0.9), num_workers=0, chunk_size=chunk_size)
        torch.testing.assert_close(out[:]["return_to_go"][:, 0], expected)
        out = rb.preprocess(my_rtg, by="episode", num_workers=0, chunk_size=chunk_size)
        torch.testing.assert_close(out[:]["rtg"][:, 0], expected)


def test_a_per_episode_fn_in_row_mode_is_refused(isolated_cache):
    rb = fake_rb()
    with pytest.raises(PreprocessError, match=r"not row-wise.*by='episode'"):
        rb.preprocess(my_rtg, num_workers=0, chunk_size=33)
    with pytest.raises(PreprocessError, match="not row-wise"):
        rb.preprocess(chunk_mean, num_workers=0)
    with pytest.raises(InvalidParameter, match="whole episodes"):
        rb.preprocess(ReturnToGo(0.9), by="row")
    with pytest.raises(InvalidParameter, match="by must be"):
        rb.preprocess(scale, by="episodes")
    assert not (isolated_cache / "preprocessed").exists() or not list(
        (isolated_cache / "preprocessed").glob("*/*/manifest.json")
    )


def test_a_fn_mixing_episodes_is_refused_by_episode(isolated_cache):
    with pytest.raises(PreprocessError, match="not episode-wise"):
        fake_rb().preprocess(chunk_mean, by="episode", num_workers=0)


def test_by_and_explicit_chunk_size_are_in_the_fingerprint(isolated_cache):
    rb = fake_rb()
    paths = {
        rb.preprocess(scale, num_workers=0).storage.path,
        rb.preprocess(scale, by="episode", num_workers=0).storage.path,
        rb.preprocess(scale, num_workers=0, chunk_size=50).storage.path,
        rb.preprocess(scale, num_workers=0, chunk_size=len(rb)).storage.path,
    }
    assert len(paths) == 4
    assert rb.preprocess(scale, num_workers=0, chunk_size=50).storage.path in paths  # same settings: reused
    manifest = rb.preprocess(scale, by="episode", num_workers=0).storage.manifest
    assert manifest["transform"]["by"] == "episode"


def test_in_memory_buffer_by_episode_from_episode_ids():
    td = FakeLoader().episodes(DatasetSpec(id="fake/x", loader="fake", params={"lengths": [4, 6, 3]}), {}, None)
    data = next(iter(td))
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
    rb.extend(data)
    out = rb.preprocess(ReturnToGo(0.5), num_workers=0, chunk_size=5)
    expected = loop_rtg(data["next", "reward"].reshape(-1), data["episode"].tolist(), 0.5)
    torch.testing.assert_close(out[:]["return_to_go"][:, 0], expected)


def test_issue_example_cartpole_return_to_go(isolated_cache):
    """The issue's report: a discounted return-to-go over gym/cartpole-random-v0 (20,000 rows) with
    2,500-row chunks crossing episodes was wrong on 119 rows and reused from the cache."""
    pytest.importorskip("gymnasium")
    rb = dh.load("gym/cartpole-random-v0")
    data = rb[:]
    expected = loop_rtg(data["next", "reward"].reshape(-1), data["episode"].tolist(), 0.99)
    with pytest.raises(PreprocessError, match="by='episode'"):
        rb.preprocess(my_rtg, num_workers=0, chunk_size=2500)  # refused instead of 119 wrong rows
    index = rb.storage.episode_index()
    crossing = [a for a in range(2500, len(rb), 2500) if a not in set(index.start.tolist())]
    assert crossing  # the fixed-size chunks would cut episodes
    out = dh.load("gym/cartpole-random-v0", preprocess=ReturnToGo(0.99))
    torch.testing.assert_close(out[:]["return_to_go"][:, 0], expected.float(), rtol=1e-5, atol=1e-4)
    again = dh.load("gym/cartpole-random-v0", preprocess=my_rtg, preprocess_by="episode")
    torch.testing.assert_close(
        again[:]["rtg"][:, 0], loop_rtg(data["next", "reward"].reshape(-1), data["episode"].tolist(), 0.9).float()
    )
