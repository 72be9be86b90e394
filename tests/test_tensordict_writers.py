"""TensorDictRoundRobinWriter and TensorDictMaxValueWriter (TorchRL's TensorDict writers)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedSampler,
    SamplerWithoutReplacement,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)


def test_seed_example_max_value_writer_runs_as_written():
    # torchrl.data's documented example, torchrl.data replaced by datasets_hub
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(1),
        sampler=SamplerWithoutReplacement(),
        batch_size=1,
        writer=TensorDictMaxValueWriter(rank_key="key"),
    )
    td = TensorDict({"key": torch.tensor(range(10)), "obs": torch.tensor(range(10))}, batch_size=10)
    rb.extend(td)
    assert rb.sample().get("obs").item() == 9
    td = TensorDict({"key": torch.tensor(range(10, 20)), "obs": torch.tensor(range(10, 20))}, batch_size=10)
    rb.extend(td)
    assert rb.sample().get("obs").item() == 19
    td = TensorDict({"key": torch.tensor(range(10)), "obs": torch.tensor(range(10))}, batch_size=10)
    rb.extend(td)
    assert rb.sample().get("obs").item() == 19


def _brute_force_top(values: list[float], cap: int) -> list[float]:
    """Reference: the one-at-a-time heap rule (replace the minimum only if strictly greater)."""
    kept: list[float] = []
    for v in values:
        if len(kept) < cap:
            kept.append(v)
        elif v > min(kept):
            kept.remove(min(kept))
            kept.append(v)
    return sorted(kept)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_max_value_writer_keeps_the_best_items_like_the_one_at_a_time_rule(seed):
    g = torch.Generator().manual_seed(seed)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(16), writer=TensorDictMaxValueWriter(rank_key="r"))
    offered: list[float] = []
    for _ in range(12):
        k = int(torch.randint(1, 9, (1,), generator=g))
        r = torch.randint(0, 30, (k,), generator=g).float()  # many ties
        offered += r.tolist()
        out = rb.extend(TensorDict({"r": r, "obs": r * 10}, [k]))
        assert out.shape == (k,)
        assert ((out == -1) | ((out >= 0) & (out < 16))).all()
    stored = rb[:]
    assert sorted(stored["r"].tolist()) == _brute_force_top(offered, 16)
    assert (stored["obs"] == stored["r"] * 10).all()  # rows stay whole


def test_max_value_writer_reduction_and_rank_key_default():
    w = TensorDictMaxValueWriter(reduction="max")
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(2), writer=w)
    reward = torch.tensor([[1.0, 5.0], [2.0, 3.0], [4.0, 0.0]])
    rb.extend(TensorDict({("next", "reward"): reward, "i": torch.arange(3)}, [3]))
    assert sorted(rb[:]["i"].tolist()) == [0, 2]  # max ranks 5 and 4
    with pytest.raises(ValueError, match="reduction"):
        TensorDictMaxValueWriter(reduction="prod")
    with pytest.raises(KeyError, match="rank_key"):
        rb.extend(TensorDict({"i": torch.arange(2)}, [2]))


def test_max_value_writer_state_survives_dumps_and_loads(tmp_path):
    def make():
        return TensorDictReplayBuffer(
            storage=LazyMemmapStorage(4), writer=TensorDictMaxValueWriter(rank_key="r"), batch_size=2
        )

    rb = make()
    rb.extend(TensorDict({"r": torch.tensor([5.0, 1.0, 7.0, 3.0])}, [4]))
    rb.dumps(tmp_path / "rb")
    rb2 = make()
    rb2.loads(tmp_path / "rb")
    out = rb2.extend(TensorDict({"r": torch.tensor([2.0, 4.0])}, [2]))  # 2 beats 1, 4 beats 3
    assert sorted(rb2[:]["r"].tolist()) == [3.0, 4.0, 5.0, 7.0]
    assert (out >= 0).sum() == 1  # 2.0 loses to the restored 3.0 once 1.0 is evicted by 4.0
    fresh = make()  # without the restored ranks the writer would keep everything new
    assert fresh.writer.state_dict()["ranks"] == []


def test_dropped_items_are_not_given_to_a_prioritized_sampler():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(3), sampler=PrioritizedSampler(3, 1.0, 1.0), writer=TensorDictMaxValueWriter("r")
    )
    rb.extend(TensorDict({"r": torch.tensor([5.0, 6.0, 7.0])}, [3]))
    out = rb.extend(TensorDict({"r": torch.tensor([1.0, 8.0])}, [2]))
    assert out[0] == -1 and out[1] >= 0
    assert rb.add(TensorDict({"r": torch.tensor(0.0)}, [])) == -1
    assert sorted(rb[:]["r"].tolist()) == [6.0, 7.0, 8.0]
    assert sorted(rb.sample(30)["r"].unique().tolist()) == [6.0, 7.0, 8.0]


def test_max_value_writer_refuses_2d_storages_and_nan():
    with pytest.raises(NotImplementedError, match="ndim=1"):
        TensorDictReplayBuffer(storage=LazyTensorStorage(10, ndim=2), writer=TensorDictMaxValueWriter("r"))
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), writer=TensorDictMaxValueWriter("r"))
    with pytest.raises(ValueError, match="NaN"):
        rb.extend(TensorDict({"r": torch.tensor([float("nan")])}, [1]))


def test_round_robin_writer_stores_the_index():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4), writer=TensorDictRoundRobinWriter())
    data = TensorDict({"obs": torch.arange(3.0)}, [3])
    rb.extend(data)
    assert data["index"].tolist() == [0, 1, 2]  # the buffer sets it in the caller's TensorDict, as TorchRL
    rb.extend(TensorDict({"obs": torch.arange(3.0, 6.0)}, [3]))
    stored = rb.storage[:]
    assert stored["index"].tolist() == [0, 1, 2, 3]
    assert stored["obs"].tolist() == [4.0, 5.0, 2.0, 3.0]
    rb.add(TensorDict({"obs": torch.tensor(9.0)}, []))
    assert rb.storage[:]["index"].tolist() == [0, 1, 2, 3]


def test_max_value_writer_loads_ranks_before_it_has_a_storage(tmp_path):
    from datasets_hub import LazyTensorStorage, TensorDictReplayBuffer

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4), writer=TensorDictMaxValueWriter(rank_key="r"))
    rb.extend(TensorDict({"r": torch.tensor([0.3, 0.1, 0.4]), "x": torch.arange(3)}, [3]))
    rb.writer.dumps(tmp_path)
    fresh = TensorDictMaxValueWriter(rank_key="r")
    fresh.loads(tmp_path)
    assert fresh._current_top_values == rb.writer._current_top_values
    assert [row for _, row in fresh._current_top_values] == [1, 0, 2]  # lowest rank first
    with pytest.raises(ValueError, match="ranks 3 items; this storage holds 2"):
        fresh.register_storage(LazyTensorStorage(2))
