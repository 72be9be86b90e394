"""FrameStack and FullStackSampler on an Atari build made from Dopamine-style checkpoints.

The build comes from the replay-log re-enactment in ``test_atari.py`` (every real frame names its
global frame number ``g`` and its episode), loaded through ``file://`` so no server is needed.
Expected stacks are computed from the simulator's records and from Dopamine's own rule (the
stacked state of buffer slot ``i`` is the frames of slots ``i-3..i``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import datasets_hub
from datasets_hub.buffers.frame_stack import FrameStack
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers.frame_stack import FullStackSampler
from datasets_hub.buffers.tensor_storages import LazyTensorStorage

from fixtures.atari import CAP, ENDS, LENGTHS, SHAPE, DopamineBuffer, frame_id, play, save_checkpoint

N = 4


@pytest.fixture
def build(tmp_path):
    buf = DopamineBuffer()
    truth = play(buf, LENGTHS, ENDS)
    buf.log_final()
    dqn = tmp_path / "dqn"
    for k, log in enumerate(buf.logs):
        save_checkpoint(dqn / "Pong" / "1" / "replay_logs", k, log)
    params = {"checkpoints": [0, 1, 2], "base_url": (dqn.as_uri())}
    rb = datasets_hub.load("atari/Pong/1", batch_size=32, **params)
    return buf, truth, rb, params


def episode_frames(rb):
    """episode id -> its T+1 frames in order (observations, then the final next observation)."""
    data = rb[:]
    out = {}
    for e in data["episode"].unique().tolist():
        rows = data[data["episode"] == e]
        out[e] = torch.cat([rows["observation"], rows["next", "observation"][-1:]])
    return out


def expected_stack(frames: torch.Tensor, t: int, n: int, padding: str) -> torch.Tensor:
    picked = []
    for u in range(t - n + 1, t + 1):
        if u >= 0:
            picked.append(frames[u])
        else:
            picked.append(torch.zeros_like(frames[0]) if padding == "zeros" else frames[0])
    return torch.stack(picked)


@pytest.mark.parametrize("padding", ["zeros", "first"])
def test_stacks_match_the_episode_frames(build, padding):
    _, _, rb, _ = build
    frames = episode_frames(rb)
    fs = FrameStack(N, padding=padding).bind(rb)
    gen = torch.Generator().manual_seed(3)
    rb.set_rng(gen)
    seen_starts = 0
    for _ in range(8):
        batch = fs(rb.sample())
        assert batch["observation"].shape == (32, N, *SHAPE) and batch["observation"].dtype == torch.uint8
        assert batch["next", "observation"].shape == (32, N, *SHAPE)
        for i in range(32):
            e, t = batch["episode"][i].item(), batch["step"][i].item()
            seen_starts += t < N - 1
            assert torch.equal(batch["observation"][i], expected_stack(frames[e], t, N, padding))
            assert torch.equal(batch["next", "observation"][i], expected_stack(frames[e], t + 1, N, padding))
    assert seen_starts > 0  # the draws did reach episode starts, where padding happens


def test_episode_starts_never_see_another_episode(build):
    _buf, truth, rb, _ = build
    data = rb[:]
    starts = torch.nonzero(data["step"] == 0).reshape(-1)
    rows = torch.cat([starts, starts + 1, starts + 2]).clamp_max(len(rb) - 1)
    fs = FrameStack(N)
    rb2 = datasets_hub.load("atari/Pong/1", checkpoints=[0, 1, 2], base_url=build[3]["base_url"], transform=fs)
    batch = rb2[rows]  # the buffer bound the transform to itself: no explicit bind() needed
    for i in range(rows.numel()):
        e = batch["episode"][i].item()
        t = batch["step"][i].item()
        stack = batch["observation"][i]
        assert not stack[: N - 1 - t].any()  # zeros before the episode's first frame
        for frame in stack[N - 1 - t :]:
            g = frame_id(frame.numpy())
            assert g in truth and truth[g][0] == truth[frame_id(stack[-1].numpy())][0]  # same true episode
        assert frame_id(stack[-1].numpy()) == frame_id(data["observation"][rows[i]].numpy())
        assert batch["episode"][i].item() == e


def test_a_buffer_binds_the_frame_stacks_it_is_given(build):
    _, _, rb, params = build
    rows = torch.arange(0, len(rb), 7)
    want = FrameStack(N).bind(rb)(rb[rows])
    via_load = datasets_hub.load("atari/Pong/1", transform=FrameStack(N), **params)
    via_append = datasets_hub.load("atari/Pong/1", **params)
    via_append.append_transform(FrameStack(N))
    for got in (via_load[rows], via_append[rows]):
        assert got["observation"].shape == (rows.numel(), N, *SHAPE)
        assert torch.equal(got["observation"], want["observation"])
        assert torch.equal(got["next", "observation"], want["next", "observation"])


def test_stacks_agree_with_dopamine_on_the_buffer(build):
    """The state Dopamine would build at the same buffer slot (frames i-3..i, zero padding)."""
    buf, _truth, rb, _ = build
    fs = FrameStack(N).bind(rb)
    batch = fs(rb[torch.arange(len(rb))])
    checked = 0
    for i in range(len(rb)):
        k = batch["info", "checkpoint"][i].item()
        log = buf.logs[k]
        slot = batch["info", "replay_index"][i].item()
        t = batch["step"][i].item()
        for back in range(N):
            ours = batch["observation"][i, N - 1 - back].numpy()
            theirs = log["observation"][(slot - back) % CAP]
            if back <= t or log["meta"][(slot - back) % CAP] is None:
                assert np.array_equal(ours, theirs), (i, back)
                checked += 1
            # else: the frame sat in a row this build dropped (invalid range at the checkpoint start)
    assert checked > 3 * len(rb)


def test_generic_storage_path_matches_the_build_path(build):
    _, _, rb, _ = build
    data = rb[:]
    online = TensorDictReplayBuffer(storage=LazyTensorStorage(len(rb)))
    online.extend(data.exclude("index") if "index" in data.keys() else data)
    fs_online = FrameStack(N).bind(online)
    gen = torch.Generator().manual_seed(0)
    online.set_rng(gen)
    sample = online.sample(64)
    assert "index" in sample.keys()
    got = fs_online(sample)
    want = FrameStack(N).bind(rb)(rb[sample["index"]])
    assert torch.equal(got["observation"], want["observation"])
    assert torch.equal(got["next", "observation"], want["next", "observation"])


def test_any_batch_shape_and_other_keys_untouched(build):
    _, _, rb, _ = build
    fs = FrameStack(2).bind(rb)
    sample = rb.sample(12)
    out = fs(sample.reshape(3, 4))
    assert out.batch_size == (3, 4) and out["observation"].shape == (3, 4, 2, *SHAPE)
    assert torch.equal(out["action"], sample["action"].reshape(3, 4))
    assert sample["observation"].shape == (12, *SHAPE)  # the caller's sample is not modified
    assert torch.equal(out["observation"][..., -1, :, :].reshape(12, *SHAPE), sample["observation"])


def test_unbound_and_bad_arguments_teach(build):
    _, _, rb, _ = build
    with pytest.raises(RuntimeError, match=r"bind\(rb\)"):
        FrameStack(4)(rb.sample(2))
    with pytest.raises(ValueError, match="positive number"):
        FrameStack(0)
    with pytest.raises(ValueError, match="padding"):
        FrameStack(4, padding="edge")
    with pytest.raises(KeyError, match="frame key"):
        FrameStack(4, keys=["action"]).bind(rb)
    assert "bound=True" in repr(FrameStack(4, storage=rb))


def test_full_stack_sampler_draws_only_full_stacks_uniformly(build):
    _, _, rb, _ = build
    index = rb.storage.episode_index()
    valid = int((index.length - (N - 1)).clamp_min(0).sum())
    sampler = FullStackSampler(N, generator=torch.Generator().manual_seed(1))
    draws = 300 * valid
    rows, _ = sampler.sample(rb.storage, draws)
    steps = rb[rows]["step"]
    assert bool((steps >= N - 1).all())  # never a row that would need padding
    counts = torch.bincount(rows, minlength=len(rb)).float()
    hit = counts[counts > 0]
    assert hit.numel() == valid  # every valid row is reachable
    # uniform: each count ~ Binomial(draws, 1/valid), mean 300, sd ~17: all within 300 +- 6 sd
    assert float(hit.min()) > 300 - 6 * 17.3 and float(hit.max()) < 300 + 6 * 17.3
    rb2 = datasets_hub.load("atari/Pong/1", sampler=FullStackSampler(N), batch_size=16, **build[3])
    fs = FrameStack(N).bind(rb2)
    batch = fs(rb2.sample())
    assert bool(batch["observation"][:, 0].reshape(16, -1).any(1).all())  # no zero padding needed
