"""TensorDictMap (datasets_hub/buffers/maps/tensordict_map.py)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub import LazyTensorStorage, ListStorage, QueryModule, TensorDictMap, TensorMap


def keys_and_values():
    keys = TensorDict({"x": torch.tensor([[3.0], [4.0], [5.0]]), "noise": torch.tensor([7, 8, 9])}, batch_size=[3])
    values = TensorDict({"v": torch.tensor([30, 40, 50])}, batch_size=[3])
    return keys, values


@pytest.mark.parametrize("storage", [LazyTensorStorage(10), ListStorage(10)], ids=["tensor", "list"])
def test_values_come_back_by_key_contents(storage):
    tdmap = TensorDictMap(query_module=QueryModule(in_keys=["x"], index_key="i"), storage=storage)
    assert isinstance(tdmap, TensorMap) and not hasattr(tdmap, "out_keys")
    keys, values = keys_and_values()
    tdmap[keys] = values
    assert hasattr(tdmap, "out_keys") == isinstance(storage, LazyTensorStorage)
    asked = TensorDict({"x": torch.tensor([[5.0], [3.0]]), "other": torch.zeros(2)}, batch_size=[2])
    assert tdmap[asked]["v"].tolist() == [50, 30]
    assert tdmap[asked[0]]["v"].item() == 50  # a TensorDict without batch dim is one row
    probe = TensorDict({"x": torch.tensor([[4.0], [6.0]])}, batch_size=[2])
    assert tdmap.contains(probe).tolist() == [True, False] and len(tdmap) == 3
    with pytest.raises(KeyError, match="never written"):
        tdmap[probe]


def test_out_keys_write_fn_and_repeated_keys():
    def keep_sum(new, old=None):
        return new if old is None else new.apply(lambda a, b: a + b, old)

    tdmap = TensorDictMap.from_tensordict_pair(*keys_and_values(), in_keys=["x"], out_keys=["v"], write_fn=keep_sum)
    keys, values = keys_and_values()
    values["dropped"] = torch.zeros(3)
    tdmap[keys] = values
    assert tdmap.out_keys == ["v"] and "_index" in keys.keys()  # the query module writes into the keys
    tdmap[keys[:1]] = values[:1]
    assert tdmap[keys]["v"].tolist() == [60, 40, 50] and "dropped" not in tdmap[keys].keys()
    same = TensorDict({"x": torch.tensor([[8.0], [8.0]])}, batch_size=[2])
    tdmap[same] = TensorDict({"v": torch.tensor([1, 2])}, batch_size=[2])
    assert tdmap[same[:1]]["v"].tolist() == [1 + 2]  # written in order, through write_fn
    with pytest.raises(NotImplementedError, match="consolidated"):
        TensorDictMap.from_tensordict_pair(*keys_and_values(), in_keys=["x"], consolidated=True)
