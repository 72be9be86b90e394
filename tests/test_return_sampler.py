"""NStepReturnSampler: every n-step return, bootstrap state and mask compared with a plain Python loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers import RandomSampler
from datasets_hub.buffers.samplers.n_step import NStepReturnSampler
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.testing import fake_episodes

# episodes shorter than n, of length 1, terminated (even ordinals) and truncated (odd ordinals)
LENGTHS = [7, 2, 1, 12, 3, 9]


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def plain_rtg(reward, episode, gamma):
    out = np.zeros(len(reward))
    for i in reversed(range(len(reward))):
        same = i + 1 < len(reward) and episode[i + 1] == episode[i]
        out[i] = reward[i] + (gamma * out[i + 1] if same else 0.0)
    return out


def buffer(gamma, sampler, dtype=torch.float64, lengths=LENGTHS):
    chunk = fake_episodes(lengths)
    chunk["next", "reward"] = chunk["next", "reward"] * 0.5 + 1.0  # distinct, non-zero rewards
    rtg = plain_rtg(chunk["next", "reward"].reshape(-1).double().numpy(), chunk["episode"].numpy(), gamma)
    chunk["return_to_go"] = torch.from_numpy(rtg).to(dtype).reshape(-1, 1)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), sampler=sampler, generator=gen(4))
    rb.extend(chunk)
    return rb, chunk


def plain_n_step(chunk, row, n, gamma):
    """Loop over the rewards: (G, m, discount, mask, bootstrap row)."""
    episode = chunk["episode"]
    reward = chunk["next", "reward"].reshape(-1).double()
    g, m = 0.0, 0
    while True:
        r = row + m
        g += gamma**m * float(reward[r])
        m += 1
        end_of_episode = r + 1 >= len(episode) or episode[r + 1] != episode[row]
        if m == n or end_of_episode:
            break
    boot = row + m - 1
    mask = not (end_of_episode and bool(chunk["next", "terminated"][boot]))
    return g, m, gamma**m, mask, boot


# varied lengths, and episodes of one length laid end to end (located as row // length)
@pytest.mark.parametrize("lengths", [LENGTHS, [4] * 5], ids=["varied", "equal"])
@pytest.mark.parametrize("gamma", [0.9, 1.0])
@pytest.mark.parametrize("n", [1, 3, 10])
def test_n_step_matches_a_plain_loop(gamma, n, lengths):
    rb, chunk = buffer(gamma, NStepReturnSampler(gamma, n), lengths=lengths)
    batch = rb.sample(300)
    for i, row in enumerate(batch["index"].tolist()):
        g, m, disc, mask, boot = plain_n_step(chunk, row, n, gamma)
        assert batch["n_step", "return"][i, 0].item() == pytest.approx(g, rel=1e-12, abs=1e-9)
        assert int(batch["n_step", "steps"][i]) == m
        assert batch["n_step", "discount"][i, 0].item() == pytest.approx(disc, rel=1e-12)
        assert bool(batch["n_step", "mask"][i, 0]) == mask, (row, n)
        assert torch.equal(batch["n_step", "observation"][i], chunk["next", "observation"][boot])
        assert batch["n_step", "mc_return"][i, 0].item() == pytest.approx(float(chunk["return_to_go"][row]))
    # the Monte-Carlo return is the n = infinity case
    rb, chunk = buffer(gamma, NStepReturnSampler(gamma, 10_000))
    batch = rb.sample(100)
    assert torch.allclose(batch["n_step", "return"], batch["n_step", "mc_return"], rtol=1e-12, atol=1e-9)


def test_n_drawn_per_row_from_a_range():
    rb, chunk = buffer(0.95, NStepReturnSampler(0.95, (2, 5)))
    batch = rb.sample(2000)
    seen = set()
    for i, row in enumerate(batch["index"].tolist()):
        m = int(batch["n_step", "steps"][i])
        left = next(
            k for k in range(1, 100) if row + k >= len(chunk) or chunk["episode"][row + k] != chunk["episode"][row]
        )
        # m = min(n, steps left); when m < left, it is n itself
        if m < left:
            seen.add(m)
            g, _, _, _, _ = plain_n_step(chunk, row, m, 0.95)
            assert batch["n_step", "return"][i, 0].item() == pytest.approx(g, rel=1e-12)
        assert 1 <= m <= 5
    assert seen == {2, 3, 4, 5}


def test_terminated_vs_truncated_ends():
    """Last row of each episode: mask False exactly for the terminated ones (even ordinals)."""
    rb, _chunk = buffer(0.9, NStepReturnSampler(0.9, 3))
    batch = rb.sample(3000)
    ends = np.cumsum(LENGTHS) - 1
    idx = batch["index"].numpy()
    for e, end in enumerate(ends):
        hit = idx == end
        assert hit.any()
        assert (batch["n_step", "mask"].reshape(-1).numpy()[hit] == (e % 2 == 1)).all()
        assert (batch["n_step", "steps"].numpy()[hit] == 1).all()


def test_inner_sampler_float32_column_and_errors():
    inner = RandomSampler()
    rb, chunk = buffer(0.99, NStepReturnSampler(0.99, 4, sampler=inner), dtype=torch.float32)
    assert inner.generator is not None
    batch = rb.sample(64)
    for i, row in enumerate(batch["index"].tolist()):
        g, *_ = plain_n_step(chunk, row, 4, 0.99)
        assert batch["n_step", "return"][i, 0].item() == pytest.approx(g, rel=1e-5)
    with pytest.raises(ValueError, match="gamma"):
        NStepReturnSampler(1.5)
    with pytest.raises(ValueError, match="n must be"):
        NStepReturnSampler(0.9, 0)
    with pytest.raises(ValueError, match="low <= high"):
        NStepReturnSampler(0.9, (3, 2))
    rb, _ = buffer(0.9, NStepReturnSampler(0.9, 2, rtg_key="rtg_0.9"))
    with pytest.raises(KeyError, match="ReturnToGo"):
        rb.sample(4)


def test_on_a_build_with_a_cached_return_to_go_column():
    """The intended path: a hub build, rb.preprocess(ReturnToGo(gamma)) once, n-step at sample time."""
    import datasets_hub as dh
    from datasets_hub.build.pipeline import build
    from datasets_hub.loader import DatasetSpec
    from datasets_hub.testing import FakeLoader

    chunk = fake_episodes(LENGTHS)
    chunk["next", "reward"] = chunk["next", "reward"] * 0.5 + 1.0

    class ChunkLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            yield chunk.clone()

    storage = dh.DatasetStorage(build(DatasetSpec(id="fake/returns", loader="fake", params={}), ChunkLoader(), {}, []))
    rb = dh.TensorDictReplayBuffer(storage=storage)
    pre = rb.preprocess(dh.ReturnToGo(0.9, dtype=torch.float64), num_workers=1)
    sampled = dh.TensorDictReplayBuffer(storage=pre.storage, sampler=NStepReturnSampler(0.9, 3), generator=gen(8))
    batch = sampled.sample(200)
    for i, row in enumerate(batch["index"].tolist()):
        g, m, _, mask, boot = plain_n_step(chunk, row, 3, 0.9)
        assert batch["n_step", "return"][i, 0].item() == pytest.approx(g, rel=1e-12)
        assert int(batch["n_step", "steps"][i]) == m and bool(batch["n_step", "mask"][i, 0]) == mask
        assert torch.equal(batch["n_step", "observation"][i], chunk["next", "observation"][boot])
