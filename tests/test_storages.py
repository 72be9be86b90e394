"""Storages: lazy allocation, data kinds, schema errors, one read per leaf, versions, dumps/loads."""

from __future__ import annotations

import pickle

import pytest
import torch
from tensordict import TensorDict, tensorclass

from datasets_hub.buffers import tensor_storages
from datasets_hub.buffers.memmap_storage import LazyMemmapStorage
from datasets_hub.buffers.storages import ListStorage, Storage
from datasets_hub.buffers.tensor_storages import LazyTensorStorage, TensorStorage


@tensorclass
class Transition:
    obs: torch.Tensor
    reward: torch.Tensor


def ted(n: int, start: int = 0) -> TensorDict:
    """TED-like rows whose every value identifies its row (row r has observation == r*10 + column)."""
    rows = torch.arange(start, start + n)
    return TensorDict(
        {
            "observation": rows[:, None] * 10.0 + torch.arange(3.0),
            "action": rows[:, None].float().expand(n, 2).clone(),
            "episode": rows // 4,
            "next": {
                "observation": (rows[:, None] + 1) * 10.0 + torch.arange(3.0),
                "reward": rows[:, None].float(),
                "done": (rows % 4 == 3)[:, None],
            },
        },
        [n],
    )


LAZY = [
    pytest.param(lambda tmp: LazyTensorStorage(20), id="LazyTensorStorage"),
    pytest.param(lambda tmp: LazyMemmapStorage(20, scratch_dir=tmp / "mm"), id="LazyMemmapStorage"),
]


def test_storages_implement_the_contract():
    for cls in (ListStorage, TensorStorage, LazyTensorStorage, LazyMemmapStorage):
        assert issubclass(cls, Storage)


def test_list_storage_holds_any_object():
    s = ListStorage(3)
    s.set(torch.arange(3), ["a", {"b": 1}, None])
    assert len(s) == 3 and s[0] == "a" and s[1] == {"b": 1} and s[2] is None
    assert s.get(torch.tensor([2, 0])) == [None, "a"]
    assert s[-1] is None and s[0:2] == ["a", {"b": 1}]
    with pytest.raises(IndexError, match="leave a gap"):
        ListStorage(5).set(2, "x")
    with pytest.raises(IndexError, match="capacity"):
        s.set(3, "x")


@pytest.mark.parametrize("make", LAZY)
def test_lazy_allocation_from_first_batch_and_gather(make, tmp_path):
    s = make(tmp_path)
    assert not s.initialized and len(s) == 0
    s.set(torch.arange(8), ted(8))
    assert s.initialized and len(s) == 8 and s.max_size == 20
    out = s.get(torch.tensor([5, 2, 5]))
    assert out.batch_size == (3,)
    assert out["observation"][:, 0].tolist() == [50.0, 20.0, 50.0]
    assert out["next", "reward"].flatten().tolist() == [5.0, 2.0, 5.0]
    assert out["next", "done"].dtype == torch.bool and out["episode"].dtype == torch.int64
    one = s[3]
    assert one.batch_size == () and one["observation"][0] == 30.0
    assert s[:]["episode"].tolist() == (torch.arange(8) // 4).tolist()  # slices cover valid rows only
    assert s.read_key(("next", "done")).flatten().tolist() == [False, False, False, True] * 2
    with pytest.raises(KeyError):
        s.read_key("nope")


@pytest.mark.parametrize("make", LAZY)
def test_single_item_write_and_wrapping_cursor(make, tmp_path):
    s = make(tmp_path)
    s.set(0, ted(1)[0])
    s.set(torch.tensor([19, 1]), ted(2, start=100))
    assert len(s) == 20  # len is one past the highest row written
    assert s[19]["observation"][0] == 1000.0 and s[1]["observation"][0] == 1010.0


@pytest.mark.parametrize("make", LAZY)
def test_schema_mismatch_errors_name_key_and_shapes(make, tmp_path):
    s = make(tmp_path)
    s.set(torch.arange(4), ted(4))
    bad_shape = ted(2)
    bad_shape["observation"] = torch.zeros(2, 5)
    with pytest.raises(ValueError, match=r"'observation'.*\(5,\).*\(3,\)"):
        s.set(torch.arange(2), bad_shape)
    bad_dtype = ted(2)
    bad_dtype["next", "reward"] = bad_dtype["next", "reward"].double()
    with pytest.raises(ValueError, match=r"\('next', 'reward'\).*float64.*float32"):
        s.set(torch.arange(2), bad_dtype)
    with pytest.raises(ValueError, match=r"missing 'action'"):
        s.set(torch.arange(2), ted(2).exclude("action"))
    extra = ted(2)
    extra["info", "x"] = torch.zeros(2)
    with pytest.raises(ValueError, match=r"unexpected \('info', 'x'\)"):
        s.set(torch.arange(2), extra)
    with pytest.raises(TypeError, match="td data"):
        s.set(torch.arange(2), torch.zeros(2, 3))
    assert len(s) == 4  # failed writes change nothing


@pytest.mark.parametrize("make", LAZY)
def test_tensorclass_round_trip(make, tmp_path):
    s = make(tmp_path)
    s.set(torch.arange(5), Transition(obs=torch.arange(5.0)[:, None], reward=torch.arange(5.0) * 2, batch_size=[5]))
    out = s.get(torch.tensor([4, 1]))
    assert isinstance(out, Transition)
    assert out.obs.flatten().tolist() == [4.0, 1.0] and out.reward.tolist() == [8.0, 2.0]


@pytest.mark.parametrize("make", LAZY)
def test_pytree_dict_tuple_and_list_of_items(make, tmp_path):
    s = make(tmp_path)
    s.set(torch.arange(3), {"obs": torch.arange(3.0), "pair": (torch.arange(3) * 2, {"c": torch.arange(3) * 3})})
    out = s.get(torch.tensor([2, 0]))
    assert out["obs"].tolist() == [2.0, 0.0]
    assert out["pair"][0].tolist() == [4, 0] and out["pair"][1]["c"].tolist() == [6, 0]
    assert s.read_key("obs").tolist() == [0.0, 1.0, 2.0]
    # a list at the root is several items
    s.set(
        torch.tensor([3, 4]),
        [
            {"obs": torch.tensor(3.0), "pair": (torch.tensor(6), {"c": torch.tensor(9)})},
            {"obs": torch.tensor(4.0), "pair": (torch.tensor(8), {"c": torch.tensor(12)})},
        ],
    )
    assert s.get(torch.tensor([4]))["pair"][1]["c"].tolist() == [12]
    with pytest.raises(ValueError, match="missing 'obs'"):
        s.set(
            torch.tensor([5]),
            {
                "other": torch.zeros(1),
                "pair": (torch.zeros(1, dtype=torch.int64), {"c": torch.zeros(1, dtype=torch.int64)}),
            },
        )


def test_plain_tensor_storage_and_tensor_storage_wrapping():
    s = LazyTensorStorage(10)
    s.set(torch.arange(4), torch.arange(8.0).view(4, 2))
    assert s.get(torch.tensor([3, 0])).tolist() == [[6.0, 7.0], [0.0, 1.0]]
    wrapped = TensorStorage(TensorDict({"x": torch.arange(6)}, [6]))
    assert len(wrapped) == 6 == wrapped.max_size  # existing data: every row is valid
    assert wrapped.get(torch.tensor([5, 1]))["x"].tolist() == [5, 1]
    with pytest.raises(ValueError, match="max_size=4"):
        TensorStorage(torch.zeros(6), max_size=4)


@pytest.mark.parametrize("make", LAZY)
def test_get_reads_each_leaf_once(make, tmp_path, monkeypatch):
    s = make(tmp_path)
    s.set(torch.arange(10), ted(10))
    calls = []
    real = tensor_storages.gather_rows
    monkeypatch.setattr(tensor_storages, "gather_rows", lambda t, *a: calls.append(t.data_ptr()) or real(t, *a))
    s.get(torch.tensor([1, 2, 3, 9]))
    assert len(calls) == 6 == len(set(calls))  # 6 leaves, one gather each


@pytest.mark.parametrize("make", LAZY)
def test_write_version_grows_on_every_write_and_empty(make, tmp_path):
    s = make(tmp_path)
    v0 = s.write_version
    s.set(torch.arange(2), ted(2))
    s.set(2, ted(1)[0])
    s.empty()
    assert s.write_version == v0 + 3 and len(s) == 0
    lst = ListStorage(4)
    lst.set(0, 1)
    lst.empty()
    assert lst.write_version == 2


def test_memmap_files_live_in_scratch_dir_and_existsok(tmp_path):
    s = LazyMemmapStorage(50, scratch_dir=tmp_path / "mm")
    s.set(torch.arange(5), ted(5))
    files = {p.name for p in (tmp_path / "mm").rglob("*.memmap")}
    assert {"observation.memmap", "reward.memmap", "done.memmap"} <= files
    for caught in (FileExistsError, RuntimeError):  # TorchRL raises RuntimeError: ported code catches it
        with pytest.raises(caught, match="existsok=True"):
            LazyMemmapStorage(50, scratch_dir=tmp_path / "mm").set(torch.arange(5), ted(5))
    again = LazyMemmapStorage(50, scratch_dir=tmp_path / "mm", existsok=True)
    again.set(torch.arange(2), ted(2, start=7))
    assert again[1]["observation"][0] == 80.0


def test_memmap_storage_pickles_as_a_reference_to_its_files(tmp_path):
    s = LazyMemmapStorage(10, scratch_dir=tmp_path / "mm")
    s.set(torch.arange(3), ted(3))
    clone = pickle.loads(pickle.dumps(s))
    assert clone[2]["observation"][0] == 20.0
    clone.set(torch.tensor([1]), ted(1, start=9))  # same files: the write shows in the original
    assert s[1]["observation"][0] == 90.0


def test_default_scratch_dir_is_removed_with_the_storage():
    s = LazyMemmapStorage(10)
    s.set(torch.arange(2), ted(2))
    d = s.scratch_dir
    assert d.exists()
    del s
    import gc

    gc.collect()
    assert not d.exists()


@pytest.mark.parametrize("kind", ["list", "tensor", "lazy", "memmap"])
def test_storage_dumps_loads_round_trip(kind, tmp_path):
    def make():
        return {
            "list": lambda: ListStorage(20),
            "tensor": lambda: TensorStorage(ted(20)),
            "lazy": lambda: LazyTensorStorage(20),
            "memmap": lambda: LazyMemmapStorage(20, scratch_dir=tmp_path / f"mm{len(list(tmp_path.iterdir()))}"),
        }[kind]()

    s = make()
    s.set(torch.arange(7), ted(7, start=3))
    s.dumps(tmp_path / "dump")
    t = make()
    t.loads(tmp_path / "dump")
    assert len(t) == len(s)
    idx = torch.tensor([6, 0, 3])
    a, b = s.get(idx), t.get(idx)
    if kind == "list":
        a, b = torch.stack(a), torch.stack(b)
    assert (a == b).all()
    assert t.write_version > 0
    # the dump is a copy: writing the reloaded storage leaves the dump intact
    t.set(torch.tensor([0]), ted(1, start=99))
    u = make()
    u.loads(tmp_path / "dump")
    first = u.get(torch.tensor([0]))
    first = torch.stack(first) if kind == "list" else first
    assert first["observation"][0, 0] == 30.0


def test_loads_refuses_another_storage_kind(tmp_path):
    s = LazyTensorStorage(5)
    s.set(torch.arange(2), ted(2))
    s.dumps(tmp_path / "d")
    with pytest.raises(ValueError, match="LazyTensorStorage"):
        ListStorage(5).loads(tmp_path / "d")


def test_list_storage_dumps_refuses_unsaveable_objects(tmp_path):
    s = ListStorage(5)
    s.set(0, object())
    with pytest.raises(TypeError, match="LazyMemmapStorage"):
        s.dumps(tmp_path / "d")


def test_state_dict_round_trip():
    s = LazyTensorStorage(10)
    s.set(torch.arange(4), ted(4))
    t = LazyTensorStorage(10)
    t.load_state_dict(s.state_dict())
    assert len(t) == 4 and (t[:]["next", "observation"] == s[:]["next", "observation"]).all()


def test_cpu_device_is_accepted_and_others_are_refused():
    LazyMemmapStorage(4, device="cpu")
    LazyTensorStorage(4, device=torch.device("cpu"))
    with pytest.raises(NotImplementedError, match=r"\.to\(device\)"):
        LazyTensorStorage(4, device="meta")


def test_list_storage_load_state_dict_copies_the_items():
    source = ListStorage(4)
    source.set([0, 1], [torch.arange(3), TensorDict(a=torch.arange(2) + 10, batch_size=[2])])
    state = source.state_dict()
    restored = ListStorage(4)
    restored.load_state_dict(state)
    source.get(0).fill_(-1)  # the source's live items change ...
    source.get(1)["a"].fill_(-1)
    assert restored.get(0).tolist() == [0, 1, 2]  # ... the restored storage does not
    assert restored.get(1)["a"].tolist() == [10, 11]
