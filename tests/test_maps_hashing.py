"""Hash modules of the storage maps (datasets_hub/buffers/maps/hashing.py)."""

from __future__ import annotations

import pytest
import torch

from datasets_hub import BinaryToDecimal, RandomProjectionHash, SipHash


def test_binary_to_decimal_reads_groups_and_sums_them():
    to_int = BinaryToDecimal(num_bits=3, device="cpu", dtype=torch.int64)
    assert to_int(torch.tensor([[1, 0, 1, 0, 1, 1], [0, 0, 1, 1, 1, 1]])).tolist() == [5 + 3, 1 + 7]
    binarize = BinaryToDecimal(num_bits=2, device="cpu", dtype=torch.int64, convert_to_binary=True)
    assert binarize(torch.tensor([[-2.0, 0.5, 9.0, 0.0]])).tolist() == [1 + 2]
    with pytest.raises(ValueError, match="multiple of 3"):
        to_int(torch.zeros(1, 4))


def test_sip_hash_equal_rows_equal_values():
    rows = torch.tensor([[1.5, 2.0], [1.5, 2.0], [2.0, 1.5]])
    hashed = SipHash()(rows)
    assert hashed.dtype == torch.int64 and hashed[0] == hashed[1] and hashed[1] != hashed[2]
    raw = SipHash(as_tensor=False)(rows)
    assert raw[0] == raw[1] == rows[0].numpy().tobytes()
    assert SipHash()(rows.bfloat16())[0] == SipHash()(rows.bfloat16())[1]


def test_random_projection_hash_separates_distinct_rows():
    torch.manual_seed(3)
    projection = RandomProjectionHash(n_components=6)
    x = torch.randn(500, 40)
    hashed = projection(x)
    assert projection.n_components == 6 and hashed.shape == (500,)
    assert hashed.unique().numel() == 500
    assert torch.equal(projection(x.clone()), hashed)  # the projection is drawn once
    with pytest.raises(ValueError, match="fitted on rows of 40"):
        projection(torch.randn(2, 41))
    assert RandomProjectionHash().n_components == 16
