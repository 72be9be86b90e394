"""PromptGroupSampler: whole groups per batch, the four strategies, caching, state and refusals."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from datasets_hub.buffers.replay_buffers import ReplayBuffer
from datasets_hub.buffers.samplers.prompt_group import PromptGroupSampler
from datasets_hub.buffers.stack_storage import LazyStackStorage
from datasets_hub.buffers.storages import ListStorage
from datasets_hub.buffers.tensor_storages import LazyTensorStorage


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def buffer(sampler, batch_size, storage=None):
    storage = storage if storage is not None else LazyTensorStorage(32)
    return ReplayBuffer(storage=storage, sampler=sampler, batch_size=batch_size, generator=gen())


def items(prompts, rewards=None):
    n = len(prompts)
    data = {"prompt": torch.tensor(prompts), "id": torch.arange(100, 100 + n)}
    if rewards is not None:
        data["next"] = {"reward": torch.tensor(rewards, dtype=torch.float32).unsqueeze(-1)}
    return TensorDict(data, [n])


def test_each_batch_is_whole_groups_of_one_prompt_each():
    rb = buffer(PromptGroupSampler(num_groups=2, group_key="prompt"), batch_size=6)
    rb.extend(items([7, 7, 7, 8, 8, 8, 9, 9, 9, 9]))
    for _ in range(10):
        prompts = rb.sample()["prompt"].reshape(2, 3)
        assert (prompts == prompts[:, :1]).all()  # each group of 3 shares its prompt
        assert prompts[0, 0] != prompts[1, 0]  # two distinct groups


def test_samples_per_group_gives_the_number_of_groups():
    rb = buffer(PromptGroupSampler(samples_per_group=2, group_key="prompt"), batch_size=6)
    rb.extend(items([1, 1, 2, 2, 3, 3]))
    prompts = rb.sample()["prompt"]
    assert sorted(prompts.tolist()) == [1, 1, 2, 2, 3, 3]


def test_string_prompts_in_a_lazy_stack_storage():
    sampler = PromptGroupSampler(num_groups=1, group_key="q")
    rb = buffer(sampler, batch_size=2, storage=LazyStackStorage(16))
    rb.extend(TensorDict({"q": NonTensorStack("a", "b", "a", "b"), "v": torch.arange(4)}, [4]))
    for _ in range(5):
        sample = rb.sample()
        assert len(set(sample["q"])) == 1
        assert sorted(sample["v"].tolist()) in ([0, 2], [1, 3])


def test_recency_takes_the_last_written_even_after_the_buffer_wrapped():
    rb = buffer(
        PromptGroupSampler(samples_per_group=2, group_key="prompt", strategy="recency"), 2, LazyTensorStorage(4)
    )
    rb.extend(items([5, 5, 5, 5]))  # ids 100..103 at rows 0..3
    rb.add(TensorDict({"prompt": torch.tensor(5), "id": torch.tensor(104)}, []))  # overwrites row 0
    assert sorted(rb.sample()["id"].tolist()) == [103, 104]


def test_reward_takes_the_best_and_variance_the_most_spread():
    best = buffer(PromptGroupSampler(samples_per_group=2, group_key="prompt", strategy="reward"), 2)
    best.extend(items([0, 0, 0], rewards=[0.5, 3.5, 2.5]))
    assert sorted(best.sample()["next", "reward"].reshape(-1).tolist()) == [2.5, 3.5]

    spread = buffer(PromptGroupSampler(num_groups=1, group_key="prompt", strategy="variance"), 3)
    spread.extend(items([0, 0, 0, 0, 0], rewards=[4.0, -3.0, 1.0, 0.0, 9.0]))
    # {-3, 0, 9} and {-3, 4, 9} are less spread than {-3, 9, ...}: the best triple keeps both extremes,
    # and among {-3, 4, 9} (var 24.67) and {-3, 0, 9} (var 26) the latter wins
    assert sorted(spread.sample()["next", "reward"].reshape(-1).tolist()) == [-3.0, 0.0, 9.0]


def test_variance_ties_go_to_the_larger_total():
    rb = buffer(PromptGroupSampler(num_groups=1, group_key="prompt", strategy="variance"), 2)
    rb.extend(items([0, 0, 0, 0], rewards=[1.0, 3.0, 5.0, 7.0]))  # {1, 5} and {3, 7} tie with {1, 7}? no: {1, 7}
    assert sorted(rb.sample()["next", "reward"].reshape(-1).tolist()) == [1.0, 7.0]
    tie = buffer(PromptGroupSampler(num_groups=1, group_key="prompt", strategy="variance"), 1)
    tie.extend(items([0, 0, 0], rewards=[2.0, 6.0, 4.0]))  # every single item has variance 0
    assert tie.sample()["next", "reward"].reshape(-1).tolist() == [6.0]


def test_the_group_index_follows_writes_also_from_another_buffer():
    storage = LazyTensorStorage(4)
    reader = buffer(PromptGroupSampler(num_groups=1, group_key="prompt"), 2, storage)
    writer = buffer(PromptGroupSampler(num_groups=1, group_key="prompt"), 2, storage)
    writer.extend(items([1, 1, 2, 2]))
    reader.sample()
    writer.extend(items([3, 3]))  # rows 0, 1: prompt 1 is gone, the length is unchanged
    seen = {p for _ in range(20) for p in reader.sample()["prompt"].tolist()}
    assert seen == {2, 3}


def test_a_cache_hit_reads_nothing(monkeypatch):
    sampler = PromptGroupSampler(num_groups=1, group_key="prompt")
    rb = buffer(sampler, 2)
    rb.extend(items([1, 1, 2, 2]))
    sampler.sample(rb.storage, 2)
    monkeypatch.setattr(rb.storage, "get", lambda index: pytest.fail("the cached group index was not used"))
    sampler.sample(rb.storage, 2)


def test_small_groups_are_completed_with_replacement_and_warned_once():
    sampler = PromptGroupSampler(samples_per_group=3, group_key="prompt")
    rb = buffer(sampler, 3)
    rb.extend(items([4, 4]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = rb.sample()
        rb.sample()
    assert first.shape == (3,)
    assert sorted(set(first["id"].tolist())) == [100, 101]
    assert [str(w.message) for w in caught if "with replacement" in str(w.message)].__len__() == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"num_groups": 1, "samples_per_group": 1},
        {"num_groups": 0},
        {"num_groups": True},
        {"samples_per_group": 2.0},
        {"num_groups": 1, "strategy": "best"},
    ],
)
def test_bad_construction_is_refused(kwargs):
    with pytest.raises((TypeError, ValueError)):
        PromptGroupSampler(**kwargs)


def test_refusals_at_sample_time():
    rb = buffer(PromptGroupSampler(num_groups=3, group_key="prompt"), 4)
    rb.extend(items([1, 2, 3]))
    with pytest.raises(ValueError, match="divisible"):
        rb.sample()

    listed = ReplayBuffer(storage=ListStorage(8), sampler=PromptGroupSampler(num_groups=1, group_key="prompt"))
    listed.extend(items([1, 1]))
    with pytest.raises(TypeError, match="Plain ListStorage is not supported"):
        listed.sample(2)

    two_dim = ReplayBuffer(
        storage=LazyTensorStorage(20, ndim=2), sampler=PromptGroupSampler(num_groups=1, group_key="prompt")
    )
    two_dim.extend(TensorDict({"prompt": torch.zeros(2, 3, dtype=torch.long)}, [2, 3]))
    with pytest.raises(NotImplementedError):
        two_dim.sample(2)

    rewardless = buffer(PromptGroupSampler(num_groups=1, group_key="prompt", strategy="reward", reward_key="r"), 2)
    rewardless.extend(items([1, 1]))
    with pytest.raises(KeyError):
        rewardless.sample()


def test_recency_state_round_trip_and_pickle_drops_the_cache(tmp_path):
    sampler = PromptGroupSampler(samples_per_group=2, group_key="prompt", strategy="recency")
    rb = buffer(sampler, 2, LazyTensorStorage(4))
    rb.extend(items([0, 0, 0, 0]))
    rb.add(TensorDict({"prompt": torch.tensor(0), "id": torch.tensor(104)}, []))
    assert PromptGroupSampler(num_groups=1).state_dict() == {}

    sampler.dumps(tmp_path)
    restored = PromptGroupSampler(samples_per_group=2, group_key="prompt", strategy="recency")
    restored.loads(tmp_path)
    index, _ = restored.sample(rb.storage, 2)
    assert sorted(rb.storage[index]["id"].tolist()) == [103, 104]

    assert sampler._group_index is not None or sampler.sample(rb.storage, 2)
    assert pickle.loads(pickle.dumps(sampler))._group_index is None


def test_same_seed_same_batches():
    def draw():
        rb = buffer(PromptGroupSampler(num_groups=2, group_key="prompt"), 4)
        rb.extend(items([1, 1, 2, 2, 3, 3, 4, 4]))
        return [rb.sample()["id"].tolist() for _ in range(3)]

    assert draw() == draw()
