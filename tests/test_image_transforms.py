"""ToTensorImage, Resize, GrayScale: TorchRL's keys and semantics, on images whose pixels differ."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import datasets_hub as dh
from datasets_hub.buffers.image_transforms import GrayScale, Resize, ToTensorImage
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.tensor_storages import LazyTensorStorage


def hwc_frames(n: int = 3, h: int = 4, w: int = 6) -> torch.Tensor:
    """uint8 [n, h, w, 3]: every value distinct within a frame (frame i, row y, col x, channel c)."""
    i, y, x, c = torch.meshgrid(torch.arange(n), torch.arange(h), torch.arange(w), torch.arange(3), indexing="ij")
    return (i * 80 + y * 18 + x * 3 + c).to(torch.uint8)


def test_to_tensor_image_moves_channels_first_and_scales_integers():
    frames = hwc_frames()
    out = ToTensorImage()(TensorDict(pixels=frames, batch_size=[3]))["pixels"]
    assert out.shape == (3, 3, 4, 6) and out.dtype == torch.float32
    # frame 1, channel 2, row 3, col 5 is the uint8 value 80 + 54 + 15 + 2 = 151
    assert out[1, 2, 3, 5].item() == pytest.approx(151 / 255)
    floats = ToTensorImage(in_keys=["obs"], out_keys=["obs_chw"])(TensorDict(obs=frames.float(), batch_size=[3]))
    assert floats["obs_chw"][1, 2, 3, 5].item() == 151.0  # floating input is not rescaled
    assert floats["obs"].shape == (3, 4, 6, 3)  # the source key is kept
    assert (
        ToTensorImage(dtype=torch.float64)(TensorDict(pixels=frames, batch_size=[3]))["pixels"].dtype == torch.float64
    )


def test_to_tensor_image_unsqueeze_and_shape_tolerant():
    one = ToTensorImage(unsqueeze=True)(TensorDict(pixels=hwc_frames(1)[0], batch_size=[]))["pixels"]
    assert one.shape == (1, 3, 4, 6)
    chw = torch.zeros(2, 5, 4, 6, dtype=torch.uint8)  # last dim 6: already channels first
    assert ToTensorImage(shape_tolerant=True)(TensorDict(pixels=chw, batch_size=[2]))["pixels"].shape == (2, 5, 4, 6)


def test_resize_gives_dims_w_h_like_torchrl_and_keeps_integer_dtype():
    img = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).reshape(2, 3, 4, 4)
    out = Resize(2, 3, interpolation="nearest")(TensorDict(pixels=img, batch_size=[2]))["pixels"]
    assert out.shape == (2, 3, 2, 3)  # Resize(w, h): dim -2 gets w, dim -1 gets h
    assert torch.equal(out, img[:, :, [0, 2]][:, :, :, [0, 1, 2]])  # nearest: source pixel floor(i * in / out)
    flat = torch.full((1, 3, 4, 4), 7.0)
    assert torch.allclose(Resize(2)(TensorDict(pixels=flat, batch_size=[1]))["pixels"], torch.full((1, 3, 2, 2), 7.0))
    smooth = Resize(2)(TensorDict(pixels=img, batch_size=[2]))["pixels"]
    assert smooth[0, 0, 0, 0] < smooth[0, 0, 0, 1] < smooth[0, 0, 1, 1]  # the ramp keeps its order
    u8 = Resize((2, 2))(TensorDict(pixels=img.to(torch.uint8), batch_size=[2]))["pixels"]
    assert u8.dtype == torch.uint8
    assert torch.equal(u8, smooth.round().to(torch.uint8))  # rounded, not truncated
    same = Resize(4)(TensorDict(pixels=img, batch_size=[2]))["pixels"]
    assert same is img  # already the size asked for


def test_resize_keeps_leading_dims_and_refuses_bad_arguments():
    img = torch.rand(2, 5, 3, 8, 8)  # [B, T, C, H, W] slice batches
    assert Resize(4)(TensorDict(pixels=img, batch_size=[2, 5]))["pixels"].shape == (2, 5, 3, 4, 4)
    with pytest.raises(ValueError, match="interpolation must be one of"):
        Resize(4, interpolation="lanczos")
    with pytest.raises(RuntimeError, match="positive int"):
        Resize(0)
    with pytest.raises(ValueError, match="at least 3 dims"):
        Resize(4)(TensorDict(pixels=torch.rand(8, 8), batch_size=[]))


def test_grayscale_uses_luma_weights_and_truncates_integers():
    chw = ToTensorImage(from_int=False, dtype=torch.uint8)(TensorDict(pixels=hwc_frames(), batch_size=[3]))
    gray = GrayScale()(chw)["pixels"]
    assert gray.shape == (3, 1, 4, 6) and gray.dtype == torch.uint8
    r, g, b = (int(hwc_frames()[2, 1, 3, c]) for c in range(3))  # 160 + 18 + 9 + c
    assert gray[2, 0, 1, 3].item() == int(0.2989 * r + 0.587 * g + 0.114 * b)
    one = torch.rand(2, 1, 4, 4)
    assert GrayScale()(TensorDict(pixels=one, batch_size=[2]))["pixels"] is one
    with pytest.raises(ValueError, match="ToTensorImage\\(\\) first"):
        GrayScale()(TensorDict(pixels=torch.rand(2, 4, 4, 3), batch_size=[2]))


def test_the_tutorial_pipeline_in_a_buffer_stores_uint8_and_samples_float_chw():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10),
        batch_size=3,
        transform=dh.Compose(ToTensorImage(), GrayScale(), Resize(2, 3)),
    )
    rb.extend(TensorDict(pixels=hwc_frames(), batch_size=[3]))
    assert rb.storage[:3]["pixels"].dtype == torch.uint8  # stored as written
    sample = rb.sample()
    assert sample["pixels"].shape == (3, 1, 2, 3) and sample["pixels"].dtype == torch.float32
    assert dh.ToTensorImage is ToTensorImage and dh.Resize is Resize and dh.GrayScale is GrayScale
