"""RandomSampler and SamplerWithoutReplacement: epochs, growth, state, determinism, buffer iteration."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.samplers import RandomSampler, SamplerWithoutReplacement
from datasets_hub.buffers.storages import Storage


class FakeStorage(Storage):
    """Rows ``0..n-1``; only the length matters to these samplers."""

    def __init__(self, n: int, max_size: int | None = None) -> None:
        super().__init__(max_size or max(n, 1))
        self.n = n

    def __len__(self) -> int:
        return self.n

    def get(self, index):
        return torch.as_tensor(index) * 10


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def epoch(sampler, storage, batch_size):
    batches = []
    while True:
        index, info = sampler.sample(storage, batch_size)
        assert info == {}
        batches.append(index)
        if sampler.ran_out:
            return batches
        assert len(batches) < 10_000, "the epoch never ended"


def test_random_sampler_is_uniform_and_seeded():
    s = RandomSampler()
    s.generator = gen(1)
    index, _ = s.sample(FakeStorage(10), 100_000)
    freq = torch.bincount(index, minlength=10).double() / index.numel()
    # binomial std ~ 0.001: 0.006 is 6 sigma
    assert (freq - 0.1).abs().max() < 0.006
    s.generator = gen(1)
    assert torch.equal(s.sample(FakeStorage(10), 100_000)[0], index)


def test_epoch_visits_every_row_once_and_runs_out():
    s = SamplerWithoutReplacement()
    s.generator = gen()
    storage = FakeStorage(128)
    batches = epoch(s, storage, 32)
    assert len(batches) == 4 and all(b.numel() == 32 for b in batches)
    assert torch.equal(torch.cat(batches).sort().values, torch.arange(128))
    assert not torch.equal(torch.cat(batches), torch.arange(128))  # shuffled
    # the next call starts a new epoch with a new permutation
    nxt = epoch(s, storage, 32)
    assert len(nxt) == 4 and s.ran_out
    assert torch.equal(torch.cat(nxt).sort().values, torch.arange(128))
    assert not torch.equal(torch.cat(nxt), torch.cat(batches))


def test_last_batch_short_or_dropped():
    s = SamplerWithoutReplacement()
    s.generator = gen()
    batches = epoch(s, FakeStorage(130), 32)
    assert [b.numel() for b in batches] == [32, 32, 32, 32, 2]
    s = SamplerWithoutReplacement(drop_last=True)
    s.generator = gen()
    batches = epoch(s, FakeStorage(130), 32)
    assert [b.numel() for b in batches] == [32, 32, 32, 32]
    assert torch.cat(batches).unique().numel() == 128
    with pytest.raises(ValueError, match="drop_last"):
        SamplerWithoutReplacement(drop_last=True).sample(FakeStorage(10), 32)


def test_no_shuffle_is_in_order():
    s = SamplerWithoutReplacement(shuffle=False)
    assert torch.equal(torch.cat(epoch(s, FakeStorage(10), 4)), torch.arange(10))


def test_growth_mid_epoch_adds_new_rows_without_repeats():
    s = SamplerWithoutReplacement()
    s.generator = gen(3)
    storage = FakeStorage(100)
    seen = [s.sample(storage, 32)[0], s.sample(storage, 32)[0]]
    storage.n = 150  # the buffer was extended between calls
    seen += epoch(s, storage, 32)
    rows = torch.cat(seen)
    assert rows.numel() == 150 and torch.equal(rows.sort().values, torch.arange(150))


def test_shrink_starts_a_new_epoch():
    s = SamplerWithoutReplacement()
    s.generator = gen()
    storage = FakeStorage(100)
    s.sample(storage, 32)
    storage.n = 10
    index, _ = s.sample(storage, 32)
    assert torch.equal(index.sort().values, torch.arange(10)) and s.ran_out


def test_state_dict_restores_the_exact_position():
    s = SamplerWithoutReplacement()
    s.generator = gen(5)
    storage = FakeStorage(100)
    s.sample(storage, 16), s.sample(storage, 16)
    state, gstate = s.state_dict(), s.generator.get_state()
    expected = epoch(s, storage, 16) + epoch(s, storage, 16)
    t = SamplerWithoutReplacement()
    t.generator = torch.Generator()
    t.load_state_dict(state)
    t.generator.set_state(gstate)
    got = epoch(t, storage, 16) + epoch(t, storage, 16)
    assert len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


def test_same_seed_same_batches():
    a, b = SamplerWithoutReplacement(), SamplerWithoutReplacement()
    a.generator, b.generator = gen(7), gen(7)
    storage = FakeStorage(50)
    for _ in range(8):
        assert torch.equal(a.sample(storage, 7)[0], b.sample(storage, 7)[0])


def test_empty_storage_is_a_clear_error():
    with pytest.raises(RuntimeError, match="empty"):
        SamplerWithoutReplacement().sample(FakeStorage(0), 4)


# -- through the real buffers ------------------------------------------------------------------------
def _buffers():
    from datasets_hub.buffers import replay_buffers

    return replay_buffers


def test_buffer_iteration_is_finite_without_replacement():
    rbs = _buffers()
    from datasets_hub.buffers.tensor_storages import LazyTensorStorage

    rb = rbs.TensorDictReplayBuffer(
        storage=LazyTensorStorage(1000), sampler=SamplerWithoutReplacement(), batch_size=32, generator=gen()
    )
    rb.extend(TensorDict({"obs": torch.arange(128)}, batch_size=[128]))
    batches = list(rb)
    assert len(batches) == 4  # TorchRL tutorial: 128 items, batch 32, without replacement
    obs = torch.cat([b["obs"] for b in batches])
    assert torch.equal(obs.sort().values, torch.arange(128))
    assert all(torch.equal(b["obs"], b["index"]) for b in batches)
    assert len(list(rb)) == 4  # a second pass is a new epoch


def test_buffer_dumps_loads_keeps_sampler_position(tmp_path):
    rbs = _buffers()
    from datasets_hub.buffers.tensor_storages import LazyTensorStorage

    def make():
        return rbs.ReplayBuffer(storage=LazyTensorStorage(100), sampler=SamplerWithoutReplacement(), generator=gen(2))

    rb = make()
    rb.extend(torch.arange(100))
    rb.sample(30)
    rb.dumps(tmp_path / "rb")
    expected = [rb.sample(30) for _ in range(3)]
    rb2 = make()
    rb2.loads(tmp_path / "rb")
    got = [rb2.sample(30) for _ in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


# -- TorchRL 0.14's names and keywords ------------------------------------------------------------


def test_random_sampler_replacement_false_builds_a_sampler_without_replacement():
    sampler = RandomSampler(replacement=False, drop_last=True, shuffle=False)
    assert type(sampler) is SamplerWithoutReplacement
    assert (sampler.drop_last, sampler.shuffle) == (True, False)
    assert type(RandomSampler(replacement=True)) is RandomSampler
    with pytest.raises(TypeError):
        RandomSampler(drop_last=True)  # only the without-replacement form takes it


def test_sampler_without_replacement_refuses_replacement_true():
    with pytest.raises(ValueError, match="use RandomSampler"):
        SamplerWithoutReplacement(replacement=True)


def test_prioritized_samplers_have_no_without_replacement_form():
    from datasets_hub.buffers.samplers.prioritized import PrioritizedSampler, PrioritizedSliceSampler

    with pytest.raises(TypeError, match="no without-replacement variant"):
        PrioritizedSampler(8, alpha=0.5, beta=0.5, replacement=False)
    with pytest.raises(TypeError, match="no without-replacement variant"):
        PrioritizedSliceSampler(8, alpha=0.5, beta=0.5, slice_len=2, replacement=False)
    assert PrioritizedSampler(8, alpha=0.5, beta=0.5, replacement=True).max_capacity == 8


def test_drop_last_batch_larger_than_the_storage_says_so():
    with pytest.raises(ValueError, match=r"The batch size \(7\) is greater than the storage capacity \(5\)"):
        SamplerWithoutReplacement(drop_last=True).sample(FakeStorage(5), 7)


def test_sample_list_is_the_rows_left_and_the_next_epoch_is_drawn_when_one_ends():
    sampler = SamplerWithoutReplacement(shuffle=False)
    assert sampler._sample_list is None
    sampler.sample(FakeStorage(5), 2)
    assert sampler._sample_list.tolist() == [2, 3, 4]
    sampler.sample(FakeStorage(5), 3)
    assert sampler.ran_out
    assert sampler._sample_list.tolist() == [0, 1, 2, 3, 4]  # the next epoch, already in the state


def test_state_dict_between_epochs_resumes_with_the_original_order_whatever_the_generator():
    storage = FakeStorage(6)
    sampler = SamplerWithoutReplacement()
    sampler.generator = gen(3)
    sampler.sample(storage, 6)  # one whole epoch: the next one is drawn now
    state = sampler.state_dict()
    expected = sampler.sample(storage, 4)[0]

    restored = SamplerWithoutReplacement()
    restored.generator = gen(99)  # another seed: the saved order decides, not the generator
    restored.load_state_dict(state)
    assert restored.sample(storage, 4)[0].tolist() == expected.tolist()


def test_state_dict_uses_torchrl_keys_and_is_decoupled_from_its_source():
    sampler = SamplerWithoutReplacement()
    sampler.generator = gen(1)
    sampler.sample(FakeStorage(10), 4)
    state = sampler.state_dict()
    assert set(state) == {"len_storage", "_sample_list", "drop_last", "shuffle", "_ran_out"}
    restored = SamplerWithoutReplacement()
    restored.load_state_dict(state)
    before = restored._sample_list.clone()
    state["_sample_list"].fill_(-1)
    assert restored._sample_list.tolist() == before.tolist()


def test_state_dict_of_the_earlier_layout_still_loads():
    restored = SamplerWithoutReplacement()
    restored.load_state_dict(
        {"remaining": torch.tensor([4, 2]), "has_epoch": True, "len_seen": 5, "ran_out": False, "drop_last": False}
    )
    assert restored.sample(FakeStorage(5), 2)[0].tolist() == [4, 2]
