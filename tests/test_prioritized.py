"""PrioritizedSampler: vectorised sum/min trees, sampling frequencies, weights, state, buffers."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.samplers.prioritized import PrioritizedSampler, min_tree, sum_tree
from datasets_hub.buffers.storages import Storage


class FakeStorage(Storage):
    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.n = n

    def __len__(self) -> int:
        return self.n


def make(n=10, alpha=0.7, beta=0.5, seed=0, **kw):
    s = PrioritizedSampler(n, alpha=alpha, beta=beta, **kw)
    s.generator = torch.Generator().manual_seed(seed)
    s.extend(torch.arange(n))
    return s


def test_trees_match_brute_force_after_random_updates():
    g = torch.Generator().manual_seed(0)
    cap = 1000
    st, mt = sum_tree(cap), min_tree(cap)
    values = torch.zeros(cap, dtype=torch.float64)
    for _ in range(20):
        idx = torch.randperm(cap, generator=g)[:97]
        val = torch.rand(97, generator=g, dtype=torch.float64) + 0.01
        st.set_(idx, val)
        mt.set_(idx, val)
        values[idx] = val
    assert st.root == pytest.approx(float(values.sum()), rel=1e-12)
    set_rows = values > 0
    assert mt.root == pytest.approx(float(values[set_rows].min()))
    # the prefix search agrees with cumsum + searchsorted
    mass = torch.rand(5000, generator=g, dtype=torch.float64) * st.root
    expected = torch.searchsorted(torch.cumsum(values, 0), mass, right=True)
    found = st.find_prefix(mass)
    assert (found == expected).float().mean() > 0.999  # rounding at exact boundaries only
    assert (values[found] > 0).all()  # never a zero leaf
    rebuilt = sum_tree(cap)
    rebuilt.fill_(values)
    assert torch.allclose(rebuilt.tree, st.tree)


def test_frequencies_follow_priorities():
    n, alpha = 10, 0.7
    s = make(n, alpha=alpha, seed=1)
    p = torch.arange(1.0, n + 1)
    s.update_priority(torch.arange(n), p)
    index, _ = s.sample(FakeStorage(n), 200_000)
    freq = torch.bincount(index, minlength=n).double() / index.numel()
    expected = (p.double() + 1e-8) ** alpha
    expected /= expected.sum()
    # binomial std <= 0.0011 at 200k draws: 0.005 is > 4 sigma
    assert (freq - expected).abs().max() < 0.005


def test_weights_are_schaul_importance_weights():
    n, beta = 10, 0.4
    s = make(n, alpha=1.0, beta=beta)
    p = torch.arange(1.0, n + 1)
    s.update_priority(torch.arange(n), p)
    index, info = s.sample(FakeStorage(n), 1000)
    prob = (p.double() + 1e-8) / (p.double() + 1e-8).sum()
    w = (prob * n) ** -beta
    expected = (w / w.max())[index].float()
    assert info["_weight"].dtype == torch.float32
    assert torch.allclose(info["_weight"], expected, rtol=1e-5)
    assert info["_weight"].max() <= 1.0


def test_new_items_get_the_max_priority_seen():
    s = PrioritizedSampler(8, alpha=1.0, beta=0.5)
    s.extend(torch.arange(4))
    assert torch.allclose(s.priorities(torch.arange(4)), torch.ones(4), atol=1e-6)
    s.update_priority(torch.tensor([0, 1]), torch.tensor([5.0, 0.5]))
    s.update_priority(torch.tensor([0]), torch.tensor([0.1]))  # the max seen stays 5
    s.extend(torch.tensor([4, 5]))
    assert torch.allclose(s.priorities(torch.tensor([4, 5])), torch.full((2,), 5.0), atol=1e-5)
    w = PrioritizedSampler(8, alpha=1.0, beta=0.5, max_priority_within_buffer=True)
    w.extend(torch.arange(4))
    w.update_priority(torch.arange(4), torch.tensor([5.0, 0.5, 0.5, 0.5]))
    w.update_priority(torch.tensor([0]), torch.tensor([2.0]))  # within the buffer the max is now 2
    w.extend(torch.tensor([4]))
    assert float(w.priorities(torch.tensor([4]))) == pytest.approx(2.0, rel=1e-5)


def test_priorities_shift_samples():
    s = make(100, alpha=1.0, seed=2)
    s.update_priority(torch.tensor([7]), torch.tensor([1000.0]))
    index, _ = s.sample(FakeStorage(100), 1000)
    assert (index == 7).float().mean() > 0.85  # 1000 / (1000 + 99) = 0.91


def test_duplicates_and_extra_dims_are_reduced():
    s = PrioritizedSampler(4, alpha=1.0, beta=0.5, eps=1e-8)
    s.extend(torch.arange(4))
    s.update_priority(torch.tensor([1, 1, 2]), torch.tensor([3.0, 9.0, 4.0]))
    assert torch.allclose(s.priorities(torch.tensor([1, 2])), torch.tensor([9.0, 4.0]))
    s.update_priority(torch.tensor([0, 3]), torch.tensor([[1.0, 6.0], [2.0, 0.5]]))  # per-step priorities
    assert torch.allclose(s.priorities(torch.tensor([0, 3])), torch.tensor([6.0, 2.0]))
    m = PrioritizedSampler(4, alpha=1.0, beta=0.5, reduction="median")
    m.extend(torch.arange(4))
    m.update_priority(torch.tensor([2, 2, 2]), torch.tensor([5.0, 1.0, 3.0]))
    assert float(m.priorities(torch.tensor([2]))) == pytest.approx(3.0)


def test_bad_input_is_a_clear_error():
    s = make(4)
    with pytest.raises(ValueError, match="finite"):
        s.update_priority(torch.tensor([0]), torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match=">= 0"):
        s.update_priority(torch.tensor([0]), torch.tensor([-1.0]))
    with pytest.raises(IndexError, match="max_capacity"):
        s.update_priority(torch.tensor([4]), torch.tensor([1.0]))
    with pytest.raises(RuntimeError, match="extend"):
        PrioritizedSampler(4, 0.5, 0.5).sample(FakeStorage(4), 2)
    with pytest.raises(ValueError, match="reduction"):
        PrioritizedSampler(4, 0.5, 0.5, reduction="sum")


def test_state_dict_round_trip():
    s = make(50, seed=3)
    s.update_priority(torch.arange(50), torch.rand(50, generator=torch.Generator().manual_seed(0)) * 10)
    t = PrioritizedSampler(50, alpha=0.1, beta=0.1)
    t.load_state_dict(s.state_dict())
    t.generator = torch.Generator().manual_seed(9)
    s.generator = torch.Generator().manual_seed(9)
    a, ia = s.sample(FakeStorage(50), 64)
    b, ib = t.sample(FakeStorage(50), 64)
    assert torch.equal(a, b) and torch.equal(ia["_weight"], ib["_weight"])
    s.extend(torch.tensor([3]))
    t.extend(torch.tensor([3]))
    assert torch.equal(s.priorities(torch.tensor([3])), t.priorities(torch.tensor([3])))


def test_large_updates_are_vectorised():
    # one million leaves, updates of 100k items: fast because no per-item Python loop runs
    s = PrioritizedSampler(1_000_000, alpha=0.6, beta=0.4)
    s.extend(torch.arange(1_000_000))
    idx = torch.randint(1_000_000, (100_000,), generator=torch.Generator().manual_seed(0))
    s.update_priority(idx, torch.rand(100_000, generator=torch.Generator().manual_seed(1)))
    index, info = s.sample(FakeStorage(1_000_000), 4096)
    assert index.max() < 1_000_000 and info["_weight"].shape == (4096,)


# -- through the real buffers ------------------------------------------------------------------------
def test_tensordict_prioritized_buffer_end_to_end():
    from datasets_hub.buffers import replay_buffers as rbs
    from datasets_hub.buffers.tensor_storages import LazyTensorStorage

    rb = rbs.TensorDictReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=PrioritizedSampler(100, alpha=1.0, beta=0.5),
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(TensorDict({"obs": torch.arange(100)}, batch_size=[100]))
    sample = rb.sample(64)
    assert "_weight" in sample.keys() and torch.equal(sample["obs"], sample["index"])
    sample["td_error"] = torch.where(sample["index"] == sample["index"][0], 1e4, 1e-3)
    rb.update_tensordict_priority(sample)
    again = rb.sample(1000)
    assert (again["index"] == sample["index"][0]).float().mean() > 0.9
