"""A ReplayBufferEnsemble over an Open X-Embodiment build and a RoboSet build.

Both builds come from upstream-format fixtures served on 127.0.0.1 (the RLDS release of
tests/test_openx.py through ``DATASETS_HUB_ENDPOINT_OPENX``, the robohive files of
tests/test_roboset.py through the Hugging Face endpoint). Their keys differ (OpenX: a dict action
and ``observation/image`` 8x8 HWC; RoboSet: a flat action and ``info/visual_dict/<camera>`` 4x5 HWC), so
each buffer gets a transform: ``Select`` the shared meaning, ``Rename`` to common keys, and a resize
to 6x6 CHW uint8 (nearest neighbour, so every output pixel is an input pixel a test can name).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_openx import DATASET, write_release
from test_roboset import CAM, hub  # noqa: F401  (hub is a fixture)
from test_roboset import ID as ROBOSET_ID

import datasets_hub
from datasets_hub import Compose, Rename, ReplayBufferEnsemble, Select

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
def builds(hub, tmp_path, monkeypatch):  # noqa: F811 - `hub` is the fixture imported above
    """(openx buffer, roboset buffer), both seeded, sharing one 127.0.0.1 server."""
    for path, file in write_release(tmp_path / "mirror").items():
        hub.add(path, file.read_bytes())
    monkeypatch.setenv("DATASETS_HUB_ENDPOINT_OPENX", hub.base_url)
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
