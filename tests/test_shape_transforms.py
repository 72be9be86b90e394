"""UnsqueezeTransform / SqueezeTransform: negative dims, the inverse on writes, refusals."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import datasets_hub as dh
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.shape_transforms import SqueezeTransform, UnsqueezeTransform
from datasets_hub.buffers.tensor_storages import LazyTensorStorage


def test_unsqueeze_on_samples_squeeze_on_writes_in_a_buffer():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(8),
        transform=UnsqueezeTransform(-1, in_keys=["reward"], in_keys_inv=["reward"]),
    )
    rb.extend(TensorDict(reward=torch.arange(5.0)[:, None], batch_size=[5]))
    assert rb.storage[:5]["reward"].shape == (5,)  # written [5, 1], stored [5]
    assert torch.equal(rb[:5]["reward"], torch.arange(5.0)[:, None])


def test_squeeze_is_the_mirror_image():
    td = TensorDict(a=torch.arange(6).reshape(3, 2, 1), batch_size=[3])
    out = SqueezeTransform(-1, in_keys=["a"], out_keys=["b"])(td)
    assert out["b"].shape == (3, 2) and torch.equal(out["b"][2], torch.tensor([4, 5]))
    back = SqueezeTransform(-1, in_keys_inv=["a"], out_keys_inv=["b"]).inv(out)
    assert back["a"].shape == (3, 2, 1)


def test_dims_and_shapes_are_checked():
    with pytest.raises(RuntimeError, match="allow_positive_dim=True"):
        UnsqueezeTransform(1, in_keys=["a"])
    assert UnsqueezeTransform(1, allow_positive_dim=True, in_keys=["a"])(
        TensorDict(a=torch.zeros(3, 2), batch_size=[3])
    )["a"].shape == (3, 1, 2)
    with pytest.raises(ValueError, match="removes a dim of size 1"):
        SqueezeTransform(-1, in_keys=["a"])(TensorDict(a=torch.zeros(3, 2), batch_size=[3]))
    assert dh.UnsqueezeTransform is UnsqueezeTransform and dh.SqueezeTransform is SqueezeTransform
