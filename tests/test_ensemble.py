"""ReplayBufferEnsemble: shapes, ids, weights, seeds, per-buffer transforms, clear key errors, and an
ensemble over two real builds whose keys differ (Open X-Embodiment and RoboSet)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import datasets_hub
from datasets_hub import Compose, Select
from datasets_hub.buffers.ensemble import ReplayBufferEnsemble
from datasets_hub.buffers.memmap_storage import LazyMemmapStorage
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers import RandomSampler, SamplerWithoutReplacement
from datasets_hub.buffers.samplers.slice import SliceSampler
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.buffers.transforms import Rename

from fixtures.device import host_build
from fixtures.openx import DATASET, write_release
from fixtures.roboset import CAM
from fixtures.roboset import ID as ROBOSET_ID


def buffer(offset, n=100, seed=0, transform=None, key="obs", storage=None, sampler=None):
    rb = TensorDictReplayBuffer(
        storage=storage or LazyTensorStorage(n),
        transform=transform,
        sampler=sampler,
        generator=torch.Generator().manual_seed(seed),
    )
    rb.extend(TensorDict({key: torch.arange(offset, offset + n), "episode": torch.arange(n) // 10}, batch_size=[n]))
    return rb


def test_sample_shape_ids_and_indices(tmp_path):
    e = ReplayBufferEnsemble(
        buffer(0), buffer(1000, storage=LazyMemmapStorage(100, scratch_dir=tmp_path / "m")), sample_from_all=True
    )
    out = e.sample(10)
    assert out.shape == (2, 5)
    assert torch.equal(out["index", "buffer_ids"], torch.tensor([[0] * 5, [1] * 5]))
    local = out["index", "index"]
    assert torch.equal(out["obs"], local + torch.tensor([[0], [1000]]))  # the index points at the row
    assert len(e) == 2 and e[1] is e._buffers[1]
    assert int(e[1, 3]["obs"]) == 1003


def test_weights_choose_buffers_with_the_ensemble_generator():
    def make(seed):
        return ReplayBufferEnsemble(
            buffer(0, seed=1),
            buffer(1000, seed=2),
            p=[0.9, 0.1],
            num_buffer_sampled=4,
            generator=torch.Generator().manual_seed(seed),
        )

    e = make(0)
    ids = torch.stack([e.sample(8)["index", "buffer_ids"][:, 0] for _ in range(2000)])
    frac = (ids == 1).double().mean()
    assert abs(float(frac) - 0.1) < 0.02  # 8000 draws: std 0.0034
    a, b = make(5), make(5)
    for _ in range(5):
        assert (a.sample(8) == b.sample(8)).all()


def test_transforms_align_keys_before_stacking():
    rb0 = buffer(0, key="obs")
    rb1 = buffer(1000, key="pixels", transform=Rename(["pixels"], ["obs"]))
    e = ReplayBufferEnsemble(rb0, rb1, sample_from_all=True, transform=lambda td: td.set("twice", td["obs"] * 2))
    out = e.sample(6)
    assert out.shape == (2, 3) and (out["obs"][1] >= 1000).all()
    assert torch.equal(out["twice"], out["obs"] * 2)


def test_differing_keys_are_a_clear_error():
    e = ReplayBufferEnsemble(buffer(0, key="obs"), buffer(0, key="pixels"), sample_from_all=True)
    with pytest.raises(ValueError, match=r"only in buffer 0: \['obs'\].*only in buffer 1: \['pixels'\].*Rename"):
        e.sample(4)


def test_argument_errors():
    with pytest.raises(ValueError, match="sample_from_all"):
        ReplayBufferEnsemble(buffer(0), buffer(0), p=[0.5, 0.5], sample_from_all=True)
    with pytest.raises(ValueError, match="one weight per buffer"):
        ReplayBufferEnsemble(buffer(0), buffer(0), p=[1.0])
    with pytest.raises(ValueError, match="divisible"):
        ReplayBufferEnsemble(buffer(0), buffer(0)).sample(5)


def test_slice_buffers_in_an_ensemble():
    rb0 = buffer(0, sampler=SliceSampler(slice_len=5))
    rb1 = buffer(1000, sampler=SliceSampler(slice_len=5))
    out = ReplayBufferEnsemble(rb0, rb1, sample_from_all=True).sample(20)
    assert out.shape == (2, 10)
    slices = out["obs"].reshape(2, 2, 5)
    assert (torch.diff(slices, dim=-1) == 1).all()
    assert out["next", "truncated"].reshape(2, 2, 5)[..., -1].all()


def test_iteration_stops_when_a_buffer_runs_out():
    e = ReplayBufferEnsemble(
        buffer(0, n=20, sampler=SamplerWithoutReplacement()),
        buffer(1000, n=20, sampler=SamplerWithoutReplacement()),
        sample_from_all=True,
        batch_size=10,
    )
    assert len(list(e)) == 4


# -- over real builds: an Open X-Embodiment build and a RoboSet build ----------------------------------
# Both builds come from upstream-format fixtures served on 127.0.0.1 (the RLDS release through
# DATASETS_HUB_ENDPOINT_OPENX, the robohive files through the Hugging Face endpoint). Their keys differ
# (OpenX: a dict action and observation/image 8x8 HWC; RoboSet: a flat action and
# info/visual_dict/<camera> 4x5 HWC), so each buffer gets a transform: Select the shared meaning, Rename
# to common keys, and a resize to 6x6 CHW uint8 (nearest neighbour, so every output pixel is an input
# pixel a test can name).
SIZE = 6
COMMON = ("pixels", "act", ("next", "reward"), ("next", "done"), "episode")


def resize(td):
    """HWC uint8 ``pixels`` -> CHW uint8 SIZE x SIZE (nearest); reward as float32."""
    pixels = td["pixels"]
    chw = pixels.permute(0, 3, 1, 2).float()
    out = torch.nn.functional.interpolate(chw, size=(SIZE, SIZE), mode="nearest")
    td = td.clone(False)
    td.set("pixels", out.round().to(torch.uint8))
    td.set(("next", "reward"), td["next", "reward"].to(torch.float32))
    return td


def nearest(image_hwc: np.ndarray) -> np.ndarray:
    """The expected resize, by index arithmetic: output (i, j) takes input (floor(i*H/S), floor(j*W/S))."""
    h, w = image_hwc.shape[:2]
    rows = (np.arange(SIZE) * h) // SIZE
    cols = (np.arange(SIZE) * w) // SIZE
    return image_hwc[rows][:, cols].transpose(2, 0, 1)


OPENX_ALIGN = Compose(
    Select(("observation", "image"), ("action", "world_vector"), ("next", "reward"), ("next", "done"), "episode"),
    Rename([("observation", "image"), ("action", "world_vector")], ["pixels", "act"]),
    resize,
)
ROBOSET_ALIGN = Compose(
    Select(("info", "visual_dict", CAM), "action", ("next", "reward"), ("next", "done"), "episode"),
    Rename([("info", "visual_dict", CAM), "action"], ["pixels", "act"]),
    resize,
)
SOURCE = [(("observation", "image"), ("action", "world_vector")), (("info", "visual_dict", CAM), "action")]


@pytest.fixture
def builds(roboset_hub, tmp_path, monkeypatch):
    """(openx buffer, roboset buffer), both seeded, sharing one 127.0.0.1 server."""
    for path, file in write_release(tmp_path / "mirror").items():
        roboset_hub.add(path, file.read_bytes())
    monkeypatch.setenv("DATASETS_HUB_ENDPOINT_OPENX", roboset_hub.base_url)
    openx = datasets_hub.load(f"openx/{DATASET}", shards=[0, 1], generator=torch.Generator().manual_seed(0))
    roboset = datasets_hub.load(ROBOSET_ID, generator=torch.Generator().manual_seed(1))
    return openx, roboset


def test_unaligned_buffers_refuse_to_stack(builds):
    with pytest.raises(ValueError, match="keys differ"):
        ReplayBufferEnsemble(*builds, sample_from_all=True).sample(8)


def test_aligned_ensemble_samples_rows_of_both_builds(builds):
    openx, roboset = builds
    openx.append_transform(OPENX_ALIGN)
    roboset.append_transform(ROBOSET_ALIGN)
    ensemble = ReplayBufferEnsemble(openx, roboset, sample_from_all=True)
    batch = ensemble.sample(16)
    assert batch.batch_size == torch.Size([2, 8])
    assert batch["pixels"].dtype == torch.uint8 and batch["pixels"].shape == (2, 8, 3, SIZE, SIZE)
    assert batch["act"].shape == (2, 8, 3) and batch["next", "reward"].dtype == torch.float32
    assert torch.equal(batch["index", "buffer_ids"], torch.tensor([[0] * 8, [1] * 8]))
    # every item is the row its index names, in its own build, after the transform
    for b, (rb, (image_key, action_key)) in enumerate(zip(builds, SOURCE, strict=True)):
        storage = rb.storage[:]  # the untransformed rows
        for i, row in enumerate(batch["index", "index"][b].tolist()):
            src = storage[row]
            np.testing.assert_array_equal(batch["pixels"][b, i].numpy(), nearest(src[image_key].numpy()))
            assert torch.equal(batch["act"][b, i], src[action_key])
            assert torch.equal(batch["next", "reward"][b, i], src["next", "reward"].to(torch.float32))
            assert torch.equal(batch["next", "done"][b, i], src["next", "done"])
            assert batch["episode"][b, i].item() == src["episode"].item()
    # the two builds really are different data: OpenX's 8x8 JPEG frames vs RoboSet's 4x5 camera
    assert storage[0][SOURCE[1][0]].shape == (4, 5, 3)


def test_weighted_choice_follows_p_and_the_seed(builds):
    openx, roboset = builds
    openx.append_transform(OPENX_ALIGN)
    roboset.append_transform(ROBOSET_ALIGN)
    ensemble = ReplayBufferEnsemble(
        openx, roboset, p=[0.25, 0.75], num_buffer_sampled=4, generator=torch.Generator().manual_seed(3)
    )
    picks = torch.cat([ensemble.sample(8)["index", "buffer_ids"][:, 0] for _ in range(150)])
    # 600 draws, P(roboset) = 0.75: mean 450, sd 10.6; 5 sd = 53
    assert abs(int((picks == 1).sum()) - 450) <= 53
    again = ReplayBufferEnsemble(
        openx, roboset, p=[0.25, 0.75], num_buffer_sampled=4, generator=torch.Generator().manual_seed(3)
    )
    first = torch.cat([again.sample(8)["index", "buffer_ids"][:, 0] for _ in range(150)])
    assert torch.equal(first, picks)  # same seed, same buffer choices


def _mix_buffers():
    from tensordict import TensorDict

    from datasets_hub import LazyTensorStorage, ReplayBufferEnsemble, TensorDictReplayBuffer

    out = []
    for b, n in enumerate((1000, 50)):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(n), generator=torch.Generator().manual_seed(b))
        rb.extend(TensorDict({"x": torch.arange(n) + 10_000 * b}, batch_size=[n]))
        out.append(rb)
    return ReplayBufferEnsemble, out


def test_row_mixing_documented_semantics_whole_rows_from_one_buffer():
    Ensemble, buffers = _mix_buffers()
    ens = Ensemble(*buffers, p=[0.8, 0.2], generator=torch.Generator().manual_seed(0))
    only_first = 0
    for _ in range(2000):
        ids = ens.sample(64)["index", "buffer_ids"]
        assert ids.shape == (2, 32) and bool((ids == ids[:, :1]).all())  # one buffer per row
        only_first += int(bool((ids == 0).all()))
    assert abs(only_first / 2000 - 0.64) < 0.04  # 0.8 ** 2: the mixture holds only over many batches


def test_batch_mixing_gives_every_batch_its_share():
    Ensemble, buffers = _mix_buffers()
    ens = Ensemble(*buffers, p=[0.75, 0.25], mix="batch", generator=torch.Generator().manual_seed(0))
    assert ens.shares(64) == [48, 16] and ens.shares(10) == [8, 2] and sum(ens.shares(7)) == 7
    for _ in range(50):
        batch = ens.sample(64)
        ids = batch["index", "buffer_ids"]
        assert batch.shape == (64,) and int((ids == 1).sum()) == 16
        assert bool(((batch["x"] >= 10_000) == (ids == 1)).all())  # rows come from the buffer they claim
        assert torch.equal(batch["x"] - 10_000 * ids, batch["index", "index"])
    with pytest.raises(ValueError, match="do not apply"):
        Ensemble(*buffers, mix="batch", num_buffer_sampled=1)
    with pytest.raises(ValueError, match="mix must be"):
        Ensemble(*buffers, mix="rows")


# -- buffers over one read-only build: one storage read per batch, the values of their own samples ---------
def _twins(storage, samplers, seeds):
    return [
        TensorDictReplayBuffer(storage=storage, sampler=make(), generator=torch.Generator().manual_seed(seed))
        for make, seed in zip(samplers, seeds, strict=True)
    ]


def _slices():
    return SliceSampler(slice_len=4)


@pytest.mark.parametrize(
    "samplers, joint",
    [
        ((RandomSampler, RandomSampler), True),
        ((_slices, _slices), True),  # the slice flags of both draws go into the one read
        ((RandomSampler, _slices), False),  # infos differ: each buffer reads its own rows
    ],
)
@pytest.mark.parametrize("choice", [{"sample_from_all": True}, {"p": [0.3, 0.7], "num_buffer_sampled": 3}])
def test_buffers_sharing_a_build_give_the_rows_of_their_own_samples(samplers, joint, choice):
    storage = host_build()
    reads = []
    gather = storage.gather

    def counted(index, extras=None):
        reads.append(index.numel())
        return gather(index, extras)

    storage.gather = counted  # type: ignore[method-assign]  # count the storage reads of each batch
    ens = ReplayBufferEnsemble(*_twins(storage, samplers, (1, 2)), generator=torch.Generator().manual_seed(3), **choice)
    ref = _twins(host_build(), samplers, (1, 2))  # the same buffers alone, same seeds
    k = 2 if "sample_from_all" in choice else 3
    for _ in range(20):
        reads.clear()
        out, info = ens.sample(8 * k, return_info=True)
        ids = out["index", "buffer_ids"][:, 0].tolist()
        assert out.shape == (k, 8) and torch.equal(info["index"], out["index", "index"])
        expected, seen = [], {}
        for b in sorted(set(ids)):
            seen[b] = ref[b].sample(8 * ids.count(b))
        for b in ids:
            j = sum(1 for x in expected if x[0] == b)
            expected.append((b, seen[b][j * 8 : (j + 1) * 8]))
        for pos, (_, rows) in enumerate(expected):
            got, want = out[pos].exclude("index"), rows.exclude("index")
            assert set(got.keys(True, True)) == set(want.keys(True, True))
            for key in want.keys(True, True):
                assert torch.equal(got[key], want[key]), key
            assert torch.equal(out["index", "index"][pos], rows["index"])
        if joint or len(set(ids)) == 1:
            assert reads == [8 * k]  # one read of every row, whichever buffers drew them
        else:
            assert len(reads) == 2
