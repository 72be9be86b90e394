"""CompressedListStorage: items compressed on write, rebuilt on read (datasets_hub/buffers/compressed_storage.py)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.compressed_storage import CompressedListStorage
from datasets_hub.buffers.replay_buffers import ReplayBuffer, TensorDictReplayBuffer


@pytest.mark.parametrize(
    "tensor",
    [
        torch.tensor(7.5),
        torch.arange(12, dtype=torch.float32).reshape(3, 4) + 0.25,
        torch.arange(6, dtype=torch.int16).reshape(1, 2, 3) - 3,
        torch.tensor([True, False, True]),
        torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
        torch.zeros(0, 5),
    ],
)
def test_a_tensor_comes_back_equal(tensor):
    storage = CompressedListStorage(max_size=4)
    storage.set(0, tensor)
    back = storage.get(0)
    assert back.dtype == tensor.dtype and back.shape == tensor.shape and torch.equal(back, tensor)


def test_slots_hold_compressed_bytes_not_the_tensor():
    storage = CompressedListStorage(max_size=2, compression_level=9)
    frames = torch.zeros(4, 3, 84, 84, dtype=torch.uint8)
    frames[:, :, 10:20, 10:20] = 200
    storage.set(0, frames)
    packed = storage.state_dict()["_storage"][0]["data"]
    assert packed.dtype == torch.uint8 and packed.numel() * 20 < frames.numel()
    assert torch.equal(storage.get(0), frames)


def test_tensordict_items_keep_nested_keys_strings_and_batch_size():
    storage = CompressedListStorage(max_size=3)
    item = TensorDict(
        {"obs": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "next": {"reward": torch.tensor([0.5, -0.5])}, "tag": "run7"},
        batch_size=[2],
    )
    storage.set(0, item)
    back = storage.get(0)
    assert back.batch_size == torch.Size([2])
    assert torch.equal(back["obs"], item["obs"]) and torch.equal(back["next", "reward"], item["next", "reward"])
    assert back["tag"] == "run7"


def test_several_indices_and_other_objects():
    storage = CompressedListStorage(max_size=5)
    storage.set(torch.tensor([0, 1, 2]), [torch.tensor([10, 11]), "plain text", torch.tensor([12.0])])
    first, text, last = storage.get([0, 1, 2])
    assert first.tolist() == [10, 11] and text == "plain text" and last.tolist() == [12.0]
    assert len(storage) == 3 and storage.contains(2) and not storage.contains(3)
    with pytest.raises(IndexError):
        storage.get(4)


def test_in_a_replay_buffer_samples_are_decompressed_and_collated():
    rb = ReplayBuffer(storage=CompressedListStorage(20), batch_size=4, generator=torch.Generator().manual_seed(0))
    data = TensorDict({"obs": torch.arange(30.0).reshape(10, 3), "step": torch.arange(10)}, batch_size=[10])
    rb.extend(data)
    sample = rb.sample()
    assert sample.batch_size == torch.Size([4])
    assert torch.equal(sample["obs"], data["obs"][sample["step"]])


def test_tensordict_buffer_dumps_and_loads(tmp_path):
    rb = TensorDictReplayBuffer(storage=CompressedListStorage(8), batch_size=2)
    rb.extend(TensorDict({"obs": torch.tensor([[1, 2], [3, 4], [5, 6]])}, batch_size=[3]))
    rb.dumps(tmp_path)
    copy = TensorDictReplayBuffer(storage=CompressedListStorage(8), batch_size=2)
    copy.loads(tmp_path)
    assert len(copy) == 3 and torch.equal(copy[:]["obs"], rb[:]["obs"])


def test_state_dict_round_trip():
    storage = CompressedListStorage(max_size=3)
    storage.set(0, torch.tensor([[4.0, 5.0]]))
    other = CompressedListStorage(max_size=3)
    other.load_state_dict(storage.state_dict())
    assert torch.equal(other.get(0), torch.tensor([[4.0, 5.0]]))


def test_a_custom_compressor_pair_is_used():
    calls = []

    def to_uint8(tensor):
        calls.append("compress")
        return tensor.to(torch.uint8)

    def back(compressed, metadata):
        calls.append("decompress")
        return compressed.to(metadata["dtype"]).reshape(metadata["shape"])

    storage = CompressedListStorage(max_size=2, compression_fn=to_uint8, decompression_fn=back)
    storage.set(0, torch.tensor([3.7, 200.2]))
    assert storage.get(0).tolist() == [3.0, 200.0]  # lossy, as the pair makes it
    assert calls == ["compress", "decompress"]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="pair"):
        CompressedListStorage(4, compression_fn=lambda t: t)
    with pytest.raises(ValueError, match="zlib takes"):
        CompressedListStorage(4, compression_level=22)
    with pytest.raises(TypeError, match="compression_level"):
        CompressedListStorage(4, compression_level=2.5)
