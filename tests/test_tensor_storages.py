"""TensorStorage / LazyTensorStorage: TorchRL's constructor keywords and documented behaviours."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict, tensorclass

from datasets_hub import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer, TensorStorage


def test_lazy_tensor_storage_keywords_are_honoured_or_refused():
    LazyTensorStorage(4, device="cpu", ndim=1, compilable=False, consolidated=False, shared_init=False)
    with pytest.raises(NotImplementedError, match="consolidate"):
        LazyTensorStorage(4, consolidated=True)
    with pytest.raises(NotImplementedError, match="LazyMemmapStorage"):
        LazyTensorStorage(4, shared_init=True)
    with pytest.raises(ValueError, match="shared_init"):
        LazyTensorStorage(4, cleanup_memmap=False)
    with pytest.raises(ValueError, match="ndim"):
        LazyTensorStorage(4, ndim=0)
    with pytest.raises(TypeError):
        LazyTensorStorage(4, not_a_keyword=True)


def test_compilable_storage_cannot_be_shared():
    storage = LazyTensorStorage(4, compilable=True)
    assert storage.compilable
    with pytest.raises(RuntimeError, match="compilable=True"):
        storage.share()
    with pytest.raises(ValueError, match="compilable=True"):
        ReplayBuffer(storage=LazyTensorStorage(4), compilable=True, shared=True)


def test_compilable_sample_has_no_graph_break():
    for cls in (ReplayBuffer, TensorDictReplayBuffer):
        rb = cls(storage=LazyTensorStorage(100, compilable=True), batch_size=8, compilable=True)
        rb.extend(TensorDict({"a": torch.arange(50.0), "b": torch.ones(50, 3)}, [50]))

        def draw(rb=rb):
            return rb.sample()

        explained = torch._dynamo.explain(draw)()
        assert explained.graph_break_count == 0, explained.break_reasons
        out = torch.compile(draw, fullgraph=True, backend="eager")()
        assert out.batch_size == (8,) and (out["b"] == 1).all()
        assert set(out["a"].tolist()) <= set(range(50))


def test_compiled_sample_is_not_recompiled_as_the_buffer_grows():
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    rb = ReplayBuffer(storage=LazyTensorStorage(200, compilable=True), batch_size=16, compilable=True)
    counter = CompileCounter()
    draw = torch.compile(rb.sample, backend=counter, fullgraph=True)
    for step in range(5):
        rb.extend(TensorDict({"a": torch.arange(10.0) + 10 * step}, [10]))  # 10, 20, ... 50 items
        out = draw()
        assert out["a"].max() < 10 * (step + 1)  # only the items written so far
    assert counter.frame_count == 1  # one compile, not one per length
    rb.empty()
    with pytest.raises(RuntimeError, match="empty storage"):
        rb.sample()


def test_tensor_storage_over_an_empty_tensordict():
    storage = TensorStorage(TensorDict({}, [10]))
    assert len(storage) == 10 and storage.max_size == 10
    rb = ReplayBuffer(storage=storage, batch_size=4)
    sample = rb.sample()
    assert isinstance(sample, TensorDict) and sample.batch_size == (4,) and not list(sample.keys())
    assert rb[2:5].batch_size == (3,)


def test_local_tensorclass_survives_state_dict():
    @tensorclass
    class Step:  # defined inside a function: no importable name
        obs: torch.Tensor
        reward: torch.Tensor

    rb = ReplayBuffer(storage=LazyTensorStorage(8))
    rb.extend(Step(obs=torch.arange(5.0), reward=torch.ones(5), batch_size=[5]))
    other = ReplayBuffer(storage=LazyTensorStorage(8))
    other.load_state_dict(rb.state_dict())
    got = other[:]
    assert type(got) is Step
    assert (got.obs == torch.arange(5.0)).all()


def test_a_tensor_storage_over_an_entryless_tensordict_takes_the_first_keys():
    rb = ReplayBuffer(storage=TensorStorage(TensorDict(batch_size=[4])))
    rb.extend(TensorDict({"a": torch.tensor([5, 6]), "n": TensorDict({"b": torch.ones(2, 3)}, [2, 3])}, [2]))
    assert rb[:]["a"].tolist() == [5, 6, 0, 0]  # every wrapped row is an item, as TorchRL counts them
    assert rb[:]["n", "b"].shape == (4, 3)


def test_storage_private_names_of_torchrl_are_views_of_the_allocation():
    storage = LazyTensorStorage(5)
    assert storage._storage is None
    storage._init(TensorDict({"a": torch.ones(2)}, []))
    assert storage._storage.shape == (5,) and storage._storage["a"].shape == (5, 2)
    storage.set(torch.arange(2), TensorDict({"a": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}, [2]))
    assert storage._storage["a"][1].tolist() == [3.0, 4.0]


def test_gather_into_writes_the_rows_of_each_leaf_into_given_arrays():
    """TensorStorage.gather_into: each leaf's rows in a caller's arrays (wider rows keep their tail),
    extras replace their keys; a kind numpy cannot gather leaf by leaf goes through gather."""
    import numpy as np

    storage = LazyTensorStorage(10)
    data = TensorDict(
        {"obs": torch.arange(30.0).reshape(10, 3), "next": {"reward": torch.arange(10.0)[:, None] / 4}}, [10]
    )
    storage.set(torch.arange(10), data)
    rows = np.array([7, 2, 2, 9])
    out = {("obs",): np.full((4, 5), -1.0, np.float32), ("next", "reward"): np.zeros((4, 1), np.float32)}
    storage.gather_into(rows, out)
    assert np.array_equal(out[("obs",)][:, :3], data["obs"][rows].numpy()) and (out[("obs",)][:, 3:] == -1).all()
    assert np.array_equal(out[("next", "reward")], data["next", "reward"][rows].numpy())
    storage.gather_into(rows, out, {("next", "reward"): torch.ones(4, 1)})
    assert (out[("next", "reward")] == 1).all()


def test_numpy_columns_are_read_only_views_of_the_storage_until_its_memory_moves():
    """TensorStorage.numpy_columns: None before the first write and for a compilable storage; then each
    key's whole allocation, read-only, seeing later writes; the same dict until the memory moves (a copy
    of the storage has its own)."""
    import pickle

    import numpy as np

    storage = LazyTensorStorage(6)
    assert storage.numpy_columns() is None
    data = TensorDict(
        {"obs": torch.arange(12.0).reshape(6, 2), "next": {"done": torch.zeros(6, 1, dtype=torch.bool)}}, [6]
    )
    storage.set(torch.arange(3), data[:3])
    columns = storage.numpy_columns()
    assert columns is not None and set(columns) == {("obs",), ("next", "done")}
    assert columns[("obs",)].shape == (6, 2) and np.array_equal(columns[("obs",)][:3], data["obs"][:3].numpy())
    with pytest.raises(ValueError, match="read-only"):
        columns[("obs",)][0] = 7
    storage.set(torch.arange(3, 6), data[3:])
    assert storage.numpy_columns() is columns and np.array_equal(columns[("obs",)], data["obs"].numpy())
    copy = pickle.loads(pickle.dumps(storage))
    copy.set(torch.tensor([0]), data[5:6])
    assert copy.numpy_columns()[("obs",)][0].tolist() == [10.0, 11.0] and columns[("obs",)][0].tolist() == [0.0, 1.0]
    compilable = LazyTensorStorage(6, compilable=True)
    compilable.set(torch.arange(3), data[:3])
    assert compilable.numpy_columns() is None


def test_underscore_storage_is_the_whole_allocated_data_as_written():
    storage = LazyTensorStorage(5)
    assert storage._storage is None  # nothing allocated yet
    storage.set(torch.arange(3), TensorDict({"a": torch.tensor([7, 8, 9])}, [3]))
    whole = storage._storage
    assert whole.batch_size == (5,)  # every slot of the capacity, written or not
    assert whole["a"][:3].tolist() == [7, 8, 9]
    assert whole[torch.tensor([2, 0])]["a"].tolist() == [9, 7]

    tensors = LazyTensorStorage(4)
    tensors.set(torch.arange(2), torch.tensor([[1.5], [2.5]]))
    assert tensors._storage.shape == (4, 1) and tensors._storage[1].item() == 2.5

    grid = LazyTensorStorage(6, ndim=2)
    grid.set(torch.arange(2), TensorDict({"a": torch.arange(6).reshape(2, 3)}, [2, 3]))
    assert grid._storage.batch_size == grid.shape


@pytest.mark.parametrize("storage_type", ["LazyTensorStorage", "LazyMemmapStorage"])
def test_lazy_stack_of_parts_that_differ_in_shape_is_stored_part_by_part(storage_type, tmp_path):
    from tensordict import LazyStackedTensorDict

    import datasets_hub as dh

    wide = TensorDict(a=torch.arange(40.0).view(5, 4, 2), batch_size=[5])
    narrow = TensorDict(a=-torch.arange(30.0).view(5, 3, 2), b=torch.arange(5) + 100, batch_size=[5])
    data = LazyStackedTensorDict(wide, narrow, stack_dim=1)  # items [2]: part 0 a [4, 2], part 1 a [3, 2] and b
    rb = TensorDictReplayBuffer(storage=getattr(dh, storage_type)(6), batch_size=3)
    rb.extend(data)
    item = rb[2]
    assert isinstance(item, LazyStackedTensorDict) and item.batch_size == (2,)
    assert (item[0]["a"] == wide[2]["a"]).all() and (item[1]["a"] == narrow[2]["a"]).all() and item[1]["b"] == 102
    sample = rb.sample()
    assert sample.batch_size == (3, 2) and (sample[:, 1]["b"] == sample["index"][:, 0] + 100).all()
    rb.dumps(tmp_path)
    restored = TensorDictReplayBuffer(storage=getattr(dh, storage_type)(6))
    restored.loads(tmp_path)
    assert (restored[:][:, 1]["a"] == narrow["a"]).all()
    other = TensorDict(a=torch.zeros(5, 2, 2), b=torch.zeros(5, dtype=torch.int64), batch_size=[5])
    mismatched = LazyStackedTensorDict(wide.exclude("index"), other, stack_dim=1)
    with pytest.raises(ValueError, match=r"\('1', 'a'\)"):  # another shape than the first write's
        ReplayBuffer(storage=rb.storage).extend(mismatched)
    with pytest.raises(ValueError, match="LazyStackStorage"):  # items that differ in shape themselves
        LazyTensorStorage(6).set(torch.arange(2), LazyStackedTensorDict(wide[0], narrow[0], stack_dim=0))
