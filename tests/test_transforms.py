"""Transforms: Compose order and inverses, Rename/Select/Exclude on nested keys, plain callables."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.buffers.transforms import Compose, DoubleToFloat, Exclude, Rename, Select, Transform, as_transform


def sample(n: int = 4) -> TensorDict:
    r = torch.arange(n)
    return TensorDict(
        {"obs": r.float(), "action": r * 2, "index": r, "next": {"obs": r.float() + 100, "reward": r.float() * 3}}, [n]
    )


class AddOne(Transform):
    def forward(self, data):
        return data + 1

    def inverse(self, data):
        return data - 1


def test_transform_base_is_identity_both_ways():
    t = Transform()
    x = torch.arange(3)
    assert t(x) is x and t.inv(x) is x


def test_compose_runs_in_order_and_inverts_in_reverse():
    c = Compose(AddOne(), lambda x: x * 10)
    assert c(torch.tensor([1])).item() == 20  # (1 + 1) * 10
    assert c.inv(torch.tensor([5])).item() == 4  # the callable has no inverse; AddOne's runs
    c.insert(0, lambda x: x * 2)
    assert c(torch.tensor([1])).item() == 30  # ((1 * 2) + 1) * 10
    assert len(c) == 3 and isinstance(c[1], AddOne)
    assert Compose([AddOne(), AddOne()])(torch.tensor([0])).item() == 2


def test_plain_callables_and_inverted_wrapping():
    t = as_transform(lambda x: x * 3)
    assert t(torch.tensor([2])).item() == 6 and t.inv(torch.tensor([2])).item() == 2
    inv = as_transform(lambda x: x * 3, invert=True)
    assert inv(torch.tensor([2])).item() == 2 and inv.inv(torch.tensor([2])).item() == 6
    with pytest.raises(TypeError, match="callable"):
        as_transform(3)


def test_rename_nested_keys_and_back():
    td = sample()
    out = Rename(["obs", ("next", "obs")], ["observation", ("next", "observation")])(td)
    assert set(out.keys(True, True)) >= {"observation", ("next", "observation")}
    assert "obs" not in out.keys() and ("next", "obs") not in out.keys(True)
    assert "obs" in td.keys()  # the caller's TensorDict is untouched
    assert (out["next", "observation"] == td["next", "obs"]).all()
    back = Rename(["obs"], ["observation"]).inv(out)
    assert "obs" in back.keys() and "observation" not in back.keys()
    assert Rename("obs", "o")(td)["o"].tolist() == [0, 1, 2, 3]


def test_rename_unknown_key_suggests_the_closest():
    with pytest.raises(KeyError, match="Did you mean 'obs'"):
        Rename(["obz"], ["x"])(sample())


def test_select_keeps_keys_and_bookkeeping():
    out = Select("obs", ("next", "reward"))(sample())
    assert set(out.keys(True, True)) == {"obs", ("next", "reward"), "index"}
    with pytest.raises(KeyError, match=r"actoin.*Did you mean 'action'"):
        Select("actoin")(sample())


def test_exclude_drops_nested_keys():
    out = Exclude(("next", "reward"), "action")(sample())
    assert set(out.keys(True, True)) == {"obs", "index", ("next", "obs")}
    assert set(Exclude("not_there")(sample()).keys()) == set(sample().keys())


def test_transforms_need_tensordicts():
    with pytest.raises(TypeError, match="TensorDict"):
        Select("a")(torch.zeros(3))


def test_aligning_two_buffers_with_different_keys():
    a = TensorDictReplayBuffer(storage=LazyTensorStorage(10), transform=Select("obs", ("next", "obs")))
    b = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10),
        transform=Compose(Rename(["observation", ("next", "observation")], ["obs", ("next", "obs")]), Exclude("extra")),
    )
    a.extend(sample())
    b.extend(
        TensorDict({"observation": torch.zeros(4), "extra": torch.ones(4), "next": {"observation": torch.ones(4)}}, [4])
    )
    sa, sb = a.sample(3), b.sample(3)
    assert set(sa.keys(True, True)) == set(sb.keys(True, True)) == {"obs", ("next", "obs"), "index"}
    torch.stack([sa, sb])  # now stackable, as an ensemble needs


def test_double_to_float_casts_float64_leaves_only():
    td = TensorDict(
        {
            "observation": torch.arange(6, dtype=torch.float64).reshape(3, 2) + 0.25,
            "next": {"observation": torch.arange(6, dtype=torch.float64).reshape(3, 2) + 1.25},
            "action": torch.arange(3, dtype=torch.float32),
            "step": torch.arange(3),
        },
        batch_size=[3],
    )
    out = DoubleToFloat()(td)
    assert out["observation"].dtype == out["next", "observation"].dtype == torch.float32
    assert out["step"].dtype == torch.int64 and out["action"].dtype == torch.float32
    assert (out["next", "observation"] == td["next", "observation"].float()).all()
    assert td["observation"].dtype == torch.float64  # the caller's sample is not modified
    only = DoubleToFloat(in_keys=["observation"])(td)
    assert only["observation"].dtype == torch.float32 and only["next", "observation"].dtype == torch.float64
    assert DoubleToFloat(in_keys=["observation"]).inv(only)["observation"].dtype == torch.float64
    with pytest.raises(KeyError, match="'obs' is not in the sample"):
        DoubleToFloat(in_keys=["obs"])(td)
    with pytest.raises(TypeError, match=r"'step' is torch\.int64"):
        DoubleToFloat(in_keys=["step"])(td)


def test_double_to_float_on_a_loaded_dataset(tmp_path):
    """A D4RL file with float64 observations: the build keeps float64, the transform gives float32."""
    import h5py
    import numpy as np

    import datasets_hub as dh

    path, t = tmp_path / "f64.hdf5", np.arange(20)
    with h5py.File(path, "w") as f:
        f["observations"] = t[:, None] + 0.5 * np.arange(3)[None]  # float64
        f["actions"] = (-t[:, None]).astype(np.float32)
        f["rewards"] = t.astype(np.float64)
        f["terminals"] = (t % 10) == 9
        f["timeouts"] = np.zeros(20, dtype=bool)
    dh.register_dataset("d4rl/f64-v0", resources=[{"url": path.as_uri()}])
    try:
        assert dh.load("d4rl/f64-v0", batch_size=4).sample()["observation"].dtype == torch.float64
        batch = dh.load("d4rl/f64-v0", batch_size=4, transform=dh.DoubleToFloat()).sample()
        assert batch["observation"].dtype == batch["next", "observation"].dtype == torch.float32
        assert all(v.dtype != torch.float64 for v in batch.values(include_nested=True, leaves_only=True))
    finally:
        dh.catalogue.unregister_dataset("d4rl/f64-v0")


class Doubled(Transform):
    """A per-key transform written as TorchRL users write one: keys to __init__, the op per tensor."""

    def __init__(self, **keys):
        super().__init__(**keys)

    def _apply_transform(self, value):
        return value * 2

    def _inv_apply_transform(self, value):
        return value // 2


def test_keyed_transform_reads_in_keys_and_writes_out_keys():
    td = sample()
    out = Doubled(in_keys=["action", ("next", "reward")], out_keys=["action2", ("next", "reward2")])(td)
    assert torch.equal(out["action2"], torch.arange(4) * 4)
    assert torch.equal(out["next", "reward2"], torch.arange(4).float() * 6)
    assert torch.equal(out["action"], torch.arange(4) * 2)  # the source key is kept
    with pytest.raises(KeyError, match=r"'actoin' is not in the sample.*Did you mean 'action'"):
        Doubled(in_keys=["actoin"])(sample())
    with pytest.raises(ValueError, match="as many out_keys as in_keys"):
        Doubled(in_keys=["a", "b"], out_keys=["c"])


def test_keyed_inverse_reads_out_keys_inv_writes_in_keys_inv_on_a_copy():
    td = sample()
    t = Doubled(in_keys_inv=["half"], out_keys_inv=["action"])
    out = t.inv(td)
    assert torch.equal(out["half"], torch.arange(4))  # action (0, 2, 4, 6) halved
    assert "half" not in td.keys()  # the caller's TensorDict is untouched
    assert t(td) is td  # no in_keys: the forward side is the identity


def test_keyed_transform_without_the_op_says_what_to_override():
    with pytest.raises(NotImplementedError, match="override it, or override forward"):
        Transform(in_keys=["obs"])(sample())


def test_keyed_transform_in_a_buffer_runs_on_samples_and_inverts_on_writes():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10), batch_size=4, transform=Doubled(in_keys=["action"], in_keys_inv=["action"])
    )
    rb.extend(sample())  # actions 0, 2, 4, 6 are stored halved
    assert torch.equal(rb.storage[:4]["action"], torch.tensor([0, 1, 2, 3]))
    assert torch.equal(rb[:4]["action"], torch.tensor([0, 2, 4, 6]))
