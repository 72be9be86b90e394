"""TorchRL interop: ``rb.to_torchrl()`` over the same build, sampled by TorchRL's own samplers.

torchrl is not installed in the main venv (it would downgrade tensordict); run this file with
``.venv-bench/bin/python -m pytest tests/test_torchrl.py`` (``make test-torchrl``).
"""

from __future__ import annotations

import importlib.util
import pickle

import pytest
import torch

from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.build.pipeline import build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import MissingDependency
from datasets_hub.interop.torchrl import to_torchrl
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader, fake_episodes

HAS_TORCHRL = importlib.util.find_spec("torchrl") is not None
needs_torchrl = pytest.mark.skipif(
    not HAS_TORCHRL, reason="torchrl not installed: run with .venv-bench (make test-torchrl)"
)

LENGTHS = [7, 3, 12, 5, 9, 1, 4, 15, 6, 8, 2, 11]


@pytest.fixture
def rb():
    class ChunkLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            yield fake_episodes(LENGTHS[:6])
            # episode 8 ends without a done flag (end of upstream data): slices must still stop there
            yield fake_episodes(
                LENGTHS[6:],
                first_episode=6,
                first_row=sum(LENGTHS[:6]) + 6,
                ends=["terminated", "truncated", "none", "terminated", "truncated", "terminated"],
            )

    path = build(DatasetSpec(id="fake/torchrl", loader="fake", params={}), ChunkLoader(), {}, [])
    return TensorDictReplayBuffer(storage=DatasetStorage(path), batch_size=12)


def _files(root):
    return sorted(p for p in root.rglob("*") if p.is_file())


def _check_slices(sample, slice_len):
    """Each run of ``slice_len`` rows is a contiguous piece of one episode whose next observations
    are the following observations; TorchRL marks each slice end as truncated."""
    n = sample.batch_size[0]
    k = n // slice_len
    episode = sample["episode"].reshape(k, slice_len)
    step = sample["step"].reshape(k, slice_len)
    index = sample["index"].reshape(k, slice_len)
    obs = sample["observation"].reshape(k, slice_len, -1)
    nxt = sample["next", "observation"].reshape(k, slice_len, -1)
    assert (episode == episode[:, :1]).all(), "a slice crosses an episode boundary"
    assert (step[:, 1:] - step[:, :-1] == 1).all() and (index[:, 1:] - index[:, :-1] == 1).all()
    torch.testing.assert_close(nxt[:, :-1], obs[:, 1:], rtol=0, atol=0)  # next obs = the following obs
    torch.testing.assert_close(nxt, obs + 100, rtol=0, atol=0)  # also at the slice end (fake data layout)
    lengths = torch.tensor(LENGTHS)
    assert (step[:, -1] < lengths[episode[:, 0]]).all(), "a slice runs past its episode"
    truncated = sample["next", "truncated"].reshape(k, slice_len)
    assert truncated[:, -1].all()
    return episode[:, 0]


@needs_torchrl
def test_to_torchrl_reads_the_same_build_without_copying(rb, isolated_cache):
    from torchrl.data import TensorDictReplayBuffer as RLBuffer

    before = _files(isolated_cache)
    trb = rb.to_torchrl()
    assert isinstance(trb, RLBuffer)
    assert trb.storage.build is rb.storage  # the very memmaps our buffer reads
    assert _files(isolated_cache) == before  # nothing written
    assert len(trb) == len(rb) == sum(LENGTHS)
    index = torch.tensor([0, 6, 7, 9, 55, len(rb) - 1])
    got, want = trb[index], rb.storage.get(index)
    for key in want.keys(True, True):
        torch.testing.assert_close(got.get(key), want.get(key), rtol=0, atol=0)
    sample = trb.sample()
    assert sample.batch_size == torch.Size([12])
    torch.testing.assert_close(sample["next", "observation"], sample["observation"] + 100)
    with pytest.raises(RuntimeError, match="read-only"):
        trb.extend(rb.storage.get(torch.arange(3)))


@needs_torchrl
@pytest.mark.parametrize("make", ["traj_key", "auto", "end_key", "cache_values"])
def test_torchrls_own_slice_sampler_samples_valid_slices(rb, monkeypatch, make):
    from torchrl.data import SliceSampler

    kwargs = {
        "traj_key": {"traj_key": "episode"},
        "auto": {},
        "end_key": {"end_key": ("next", "done")},
        "cache_values": {"traj_key": "episode", "cache_values": True},
    }[make]
    trb = to_torchrl(rb, sampler=SliceSampler(slice_len=4, **kwargs), batch_size=16)
    full_reads = []
    real_get = trb.storage.build.get

    def spy(index):
        if isinstance(index, slice):
            full_reads.append(index)
        return real_get(index)

    monkeypatch.setattr(trb.storage.build, "get", spy)
    torch.manual_seed(0)
    seen = set()
    for _ in range(40):
        seen.update(_check_slices(trb.sample(), 4).tolist())
    assert seen == {e for e, n in enumerate(LENGTHS) if n >= 4}  # every long-enough episode, no short one
    assert not full_reads  # boundaries came from the episode index, not from reading the whole build


@needs_torchrl
def test_a_torchrl_buffer_pickles_by_reference(rb):
    from torchrl.data import SliceSampler

    trb = to_torchrl(rb, sampler=SliceSampler(num_slices=2), batch_size=8)
    blob = pickle.dumps(trb.storage)
    assert len(blob) < 5_000
    copy = pickle.loads(blob)
    torch.testing.assert_close(copy[torch.arange(4)]["observation"], rb.storage.get(torch.arange(4))["observation"])
    clone = pickle.loads(pickle.dumps(trb))
    _check_slices(clone.sample(), 4)


@needs_torchrl
def test_only_dataset_builds_convert(rb):
    online = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    online.extend(rb.storage.get(torch.arange(5)))
    with pytest.raises(TypeError, match="read-only dataset builds"):
        to_torchrl(online)
    assert len(to_torchrl(rb.storage.path)) == len(rb)  # a build directory works too


@pytest.mark.skipif(HAS_TORCHRL, reason="checks the message shown when torchrl is missing")
def test_missing_torchrl_names_the_install_line(rb):
    with pytest.raises(MissingDependency, match="pip install torchrl"):
        rb.to_torchrl()


@needs_torchrl
@pytest.mark.parametrize("batch, steps, n", [((), 10, 3), ((2,), 12, 4), ((2, 3), 7, 1), ((3,), 9, 9)])
def test_multi_step_equals_torchrls_value_by_value(batch, steps, n):
    from tensordict import TensorDict
    from torchrl.data.postprocs import MultiStep as TorchRLMultiStep

    from datasets_hub.buffers.multi_step import MultiStep

    gen = torch.Generator().manual_seed(sum(batch) + steps + n)
    done = torch.rand(*batch, steps, 1, generator=gen) < 0.2
    td = TensorDict(
        {
            "obs": torch.randn(*batch, steps, 2, generator=gen),
            "next": {
                "obs": torch.randn(*batch, steps, 2, generator=gen),
                "reward": torch.randn(*batch, steps, 1, generator=gen),
                "done": done,
                "terminated": done.clone(),
                "step": torch.arange(steps).expand(*batch, steps) + 1,
            },
            "collector": {"mask": torch.rand(*batch, steps, generator=gen) < 0.8},
        },
        [*batch, steps],
    )
    theirs, ours = TorchRLMultiStep(0.9, n)(td.clone()), MultiStep(0.9, n)(td.clone())
    assert set(theirs.keys(True, True)) == set(ours.keys(True, True))
    for key in theirs.keys(True, True):
        assert ours[key].shape == theirs[key].shape and ours[key].dtype == theirs[key].dtype, key
        assert torch.allclose(ours[key].double(), theirs[key].double(), atol=1e-6), key


@needs_torchrl
def test_find_start_stop_traj_equals_torchrls_on_random_storages():
    from torchrl.data import find_start_stop_traj as torchrl_find

    from datasets_hub.buffers.trajectory_bounds import find_start_stop_traj

    gen = torch.Generator().manual_seed(0)
    for steps in (1, 2, 5, 17):
        for shape in ((steps,), (steps, 3), (steps, 2, 2)):
            for at_capacity in (True, False):
                for cursor in (None, 0, steps - 1, steps // 2):
                    inputs = {
                        "end": torch.rand(shape, generator=gen) < 0.3,
                        "trajectory": torch.randint(0, 3, shape, generator=gen),
                    }
                    for kind, rows in inputs.items():
                        theirs = torchrl_find(**{kind: rows}, at_capacity=at_capacity, cursor=cursor)
                        ours = find_start_stop_traj(**{kind: rows}, at_capacity=at_capacity, cursor=cursor)
                        for a, b in zip(theirs, ours, strict=True):
                            assert torch.equal(a, b), (shape, at_capacity, cursor, kind)


@needs_torchrl
@pytest.mark.parametrize("future", [False, True])
def test_cat_frames_equals_torchrls_value_by_value(future):
    import itertools

    from tensordict import TensorDict
    from torchrl.envs.transforms import CatFrames as TorchRLCatFrames

    from datasets_hub.buffers.trajectory_transforms import CatFrames

    gen = torch.Generator().manual_seed(int(future))
    for _ in range(5):
        obs, nxt = torch.randn(2, 7, 2, 3, generator=gen), torch.randn(2, 7, 2, 3, generator=gen)
        done = torch.rand(2, 7, 1, generator=gen) < 0.3
        key_sets = [["obs"], [("next", "obs")]] + ([] if future else [["obs", ("next", "obs")]])
        for n, dim, padding, keys in itertools.product([2, 3, 9], [-1, -2], ["same", "constant"], key_sets):
            if len(keys) == 2 and dim != -2:
                continue  # TorchRL's ("next", key) fix-up raises unless dim is the first frame dim (here -2)
            kwargs = {"N": n, "dim": dim, "in_keys": keys, "padding": padding, "padding_value": -5.0}
            kwargs.update(future=future, mask_key="pad")
            made = [
                TensorDict({"obs": obs.clone(), "next": {"obs": nxt.clone(), "done": done.clone()}}, [2, 7])
                for _ in range(2)
            ]
            ours, theirs = CatFrames(**kwargs)(made[0]), TorchRLCatFrames(**kwargs)(made[1])
            for key in [*keys, "pad"]:
                assert torch.equal(ours[key], theirs[key]), (kwargs, key)


@needs_torchrl
def test_densify_reward_and_multi_step_transform_equal_torchrls():
    from tensordict import TensorDict
    from torchrl.data import DensifyReward as TorchRLDensify
    from torchrl.data import LazyTensorStorage as TorchRLStorage
    from torchrl.data import ReplayBuffer as TorchRLBuffer
    from torchrl.envs.transforms import MultiStepTransform as TorchRLMultiStepTransform

    from datasets_hub.buffers.multi_step import MultiStepTransform
    from datasets_hub.buffers.replay_buffers import ReplayBuffer
    from datasets_hub.buffers.trajectory_transforms import DensifyReward

    gen = torch.Generator().manual_seed(3)
    chunks = []
    for length in (1, 3, 4, 2, 5):
        done = torch.rand(2, length, 1, generator=gen) < 0.3
        obs = torch.randn(2, length, 1, generator=gen)
        chunks.append(
            TensorDict(
                {
                    "obs": obs,
                    "next": {"obs": obs + 1, "reward": torch.randn(2, length, 1, generator=gen), "done": done},
                },
                [2, length],
            )
        )
    for discount in (1.0, 0.9):
        ours, theirs = (
            DensifyReward(discount=discount)(chunks[4].clone()),
            TorchRLDensify(discount=discount)(chunks[4].clone()),
        )
        assert torch.allclose(ours["next", "reward"], theirs["next", "reward"], atol=1e-5)
    for n in (1, 2, 3):
        ours_rb = ReplayBuffer(storage=LazyTensorStorage(100, ndim=2), transform=MultiStepTransform(n, 0.9))
        theirs_rb = TorchRLBuffer(storage=TorchRLStorage(100, ndim=2), transform=TorchRLMultiStepTransform(n, 0.9))
        for chunk in chunks:
            ours_rb.extend(chunk.clone())
            theirs_rb.extend(chunk.clone())
        ours_data, theirs_data = ours_rb[:], theirs_rb[:]
        assert ours_data.batch_size == theirs_data.batch_size
        for key in [("next", "reward"), ("next", "obs"), "steps_to_next_obs", "gamma", "nonterminal"]:
            assert torch.allclose(ours_data[key].double(), theirs_data[key].double(), atol=1e-6), (n, key)
