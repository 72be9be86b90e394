"""QueryModule and HashToInt (datasets_hub/buffers/maps/query_module.py)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub import HashToInt, QueryModule, SipHash


def test_hash_to_int_numbers_in_first_seen_order():
    numbers = HashToInt()
    assert numbers(torch.tensor([70, 30, 70]), extend=True).tolist() == [0, 1, 0]
    assert numbers(torch.tensor([30, 99])).tolist() == [1, 2]  # unknown: the next free number
    assert len(numbers) == 2
    copy = HashToInt()
    copy.load_state_dict(numbers.state_dict())
    assert copy(torch.tensor([30, 70])).tolist() == [1, 0]


def test_query_module_writes_an_index_per_combination():
    query = QueryModule(in_keys=["a", ("b", "c")], index_key=("out", ("idx",)), hash_module=SipHash())
    assert query.in_keys == ["a", ("b", "c")] and query.index_key == ("out", "idx")
    assert isinstance(query.aggregator, SipHash) and len(query.hash_module) == 2
    td = TensorDict(
        {"a": torch.tensor([[1.0], [1.0], [2.0], [1.0]]), "b": {"c": torch.tensor([[5.0], [5.0], [5.0], [6.0]])}},
        batch_size=[4],
    )
    same = query(td)
    assert same is td and same["out", "idx"].tolist() == [0, 0, 1, 2] and "_hash" in same.keys()
    copied = query(td.exclude("out", "_hash"), clone=True, extend=False, write_hash=False)
    assert copied["out", "idx"].tolist() == [0, 0, 1, 2] and "_hash" not in copied.keys()


def test_query_module_refusals():
    with pytest.raises(ValueError, match="at least one in_key"):
        QueryModule(in_keys=[])
    with pytest.raises(ValueError, match="one hash module per in_key"):
        QueryModule(in_keys=["a", "b"], hash_module=[SipHash()])
    with pytest.warns(UserWarning, match="it is not used"):
        QueryModule(in_keys=["a"], aggregator=SipHash())
