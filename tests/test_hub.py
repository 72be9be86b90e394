"""Load-by-name end to end on the local gym loader (no network)."""

from __future__ import annotations

import pytest
import torch

import datasets_hub as dh
from datasets_hub import SliceSampler
from datasets_hub.errors import DownloadError, InvalidParameter

ID = "gym/cartpole-random-v0"
SMALL = {"steps": 600, "seed": 1}


def test_load_returns_a_read_only_ted_buffer():
    rb = dh.load(ID, batch_size=32, **SMALL)
    assert len(rb) == 600
    batch = rb.sample()
    assert batch.batch_size == torch.Size([32])
    for key in [
        "observation",
        "action",
        "episode",
        "step",
        "done",
        ("next", "observation"),
        ("next", "reward"),
        ("next", "terminated"),
        ("next", "truncated"),
        ("next", "done"),
        "index",
    ]:
        assert key in batch.keys(include_nested=True), key
    assert batch["next", "reward"].shape == (32, 1) and batch["next", "done"].dtype == torch.bool
    with pytest.raises(RuntimeError, match="read-only"):
        rb.extend(batch)


def test_samples_are_the_rows_they_claim_to_be():
    rb = dh.load(ID, batch_size=64, generator=torch.Generator().manual_seed(0), **SMALL)
    everything = rb[:]
    batch = rb.sample()
    index = batch["index"]
    torch.testing.assert_close(batch["observation"], everything["observation"][index])
    torch.testing.assert_close(batch["next", "observation"], everything["next", "observation"][index])
    inside = ~everything["next", "done"][:-1, 0]  # within an episode, next obs is the following row's obs
    torch.testing.assert_close(everything["next", "observation"][:-1][inside], everything["observation"][1:][inside])


def test_same_seed_same_batches():
    def batches(seed):
        rb = dh.load(
            ID, batch_size=16, sampler=SliceSampler(slice_len=4), generator=torch.Generator().manual_seed(seed), **SMALL
        )
        return [rb.sample()["index"] for _ in range(3)]

    a, b, c = batches(5), batches(5), batches(6)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))


def test_slices_use_the_build_time_episode_index(monkeypatch):
    rb = dh.load(ID, batch_size=64, sampler=SliceSampler(slice_len=8), **SMALL)
    storage = rb._storage if hasattr(rb, "_storage") else rb.storage

    original = storage.read_key

    def no_episode_column(key):
        if key in ("episode", ("episode",)):
            raise AssertionError("slice sampling derived episodes from the 'episode' column, not the build's index")
        return original(key)

    monkeypatch.setattr(storage, "read_key", no_episode_column)
    batch = rb.sample().reshape(8, 8)
    assert (batch["episode"] == batch["episode"][:, :1]).all()
    assert ((batch["step"][:, 1:] - batch["step"][:, :-1]) == 1).all()
    assert batch["next", "truncated"][:, -1].all()


def test_download_false_on_a_missing_build_says_how_to_fix():
    with pytest.raises(DownloadError, match="download=False"):
        dh.load(ID, download=False, **SMALL)


def test_offline_mode_still_builds_local_datasets(monkeypatch):
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")
    assert len(dh.load(ID, **SMALL)) == 600


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_batch_sizes_are_rejected(bad):
    with pytest.raises(InvalidParameter, match="batch_size"):
        dh.load(ID, batch_size=bad, **SMALL)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"steps": -5}, "positive integer"),
        ({"stepz": 10}, "unknown parameter.*gym loader.*Did you mean .steps."),
        ({"policy": "smart"}, "'random'"),
    ],
)
def test_bad_loader_params_are_rejected(params, message):
    with pytest.raises(InvalidParameter, match=message):
        dh.load(ID, **params)


def test_heuristic_policy_and_truncation_flags():
    rb = dh.load("gym/pendulum-random-v0", policy="heuristic", steps=450)
    data = rb[:]
    # Pendulum never terminates; its 200-step time limit truncates, and the step budget cuts the last episode
    assert not data["next", "terminated"].any()
    ends = torch.nonzero(data["next", "truncated"][:, 0]).flatten().tolist()
    assert ends == [199, 399, 449]
    assert dh.info("gym/pendulum-random-v0", policy="heuristic", steps=450).notes["budget_truncated_episodes"] == 1


def test_a_buffer_over_a_build_pickles_by_reference():
    import pickle

    from datasets_hub.errors import CacheError

    rb = dh.load(ID, batch_size=16, **SMALL)
    blob = pickle.dumps(rb)
    assert len(blob) < 4096  # the path and fingerprint, not the 600 transitions
    again = pickle.loads(blob)
    rows = torch.arange(0, len(rb), 5)
    assert (again[rows] == rb[rows]).all()
    # a build replaced under the same path is refused, never read as if it were the same data
    manifest = rb.storage.path / "manifest.json"
    text = manifest.read_text()
    manifest.write_text(text.replace(rb.storage.manifest["fingerprint"], "0" * 16))
    from datasets_hub.build.format import write_manifest_checksum

    write_manifest_checksum(rb.storage.path)  # a real rebuild publishes a consistent checksum
    with pytest.raises(CacheError, match="rebuilt or replaced"):
        pickle.loads(blob)


def test_card_shows_the_keys_of_a_sample_not_the_storage_layout():
    dh.download(ID, **SMALL)
    card = dh.info(ID, **SMALL)
    batch = dh.load(ID, batch_size=4, **SMALL).sample()
    keys = {"/".join(k) if isinstance(k, tuple) else k for k in batch.keys(True, True)} - {"index"}
    assert set(card.sample_keys) == keys
    for name, spec in card.sample_keys.items():
        value = batch.get(tuple(name.split("/")))
        assert spec == {"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape[1:])}, name
    assert "obs/observation" not in card.sample_keys  # a storage path, not a sample key


def test_a_gym_card_records_its_environment():
    """The gym loader made the environment: its card records the spec and spaces, so it can be made again."""
    import gymnasium

    dh.download(ID, **SMALL)
    card = dh.info(ID, **SMALL)
    reference = gymnasium.make(card.params["env"])
    assert card.spaces["observation_space"]["type"] == type(reference.observation_space).__name__
    assert card.spaces["observation_space"]["shape"] == list(reference.observation_space.shape)
    assert card.spaces["action_space"]["type"] == type(reference.action_space).__name__
    env = card.recover_environment()
    assert env.spec.id == reference.spec.id and env.spec.max_episode_steps == reference.spec.max_episode_steps
    assert env.observation_space == reference.observation_space and env.action_space == reference.action_space
    assert "20k" not in card.description  # a card with other params never states the catalogue's counts
    unbuilt = dh.info(ID, steps=7)
    with pytest.raises(InvalidParameter, match="no environment spec"):
        unbuilt.recover_environment()


def test_a_card_with_an_environment_id_and_settings_makes_it_again():
    """A card that records a gymnasium id, its make keywords and its wrappers (as the Atari loaders do)."""
    import gymnasium

    from datasets_hub.dataset_info import DatasetInfo
    from datasets_hub.errors import MissingDependency

    environment = {
        "env_id": "CartPole-v1",
        "registry": "gymnasium",
        "registered_by": "gymnasium",
        "make_kwargs": {"max_episode_steps": 7},
        "wrappers": [{"entry_point": "gymnasium.wrappers:ClipReward", "kwargs": {"min_reward": 0, "max_reward": 0.5}}],
    }
    card = DatasetInfo("x/y", "x", {}, [], {}, "test", True, manifest={"notes": {"environment": environment}})
    assert card.environment == environment and card.spaces == {}
    env = card.recover_environment()
    assert isinstance(env, gymnasium.wrappers.ClipReward) and env.spec.max_episode_steps == 7
    env.reset(seed=0)
    assert env.step(0)[1] == 0.5  # CartPole's reward 1.0, clipped by the recorded wrapper
    missing = {**environment, "registered_by": "no_such_env_package"}
    card = DatasetInfo("x/y", "x", {}, [], {}, "test", True, manifest={"notes": {"environment": missing}})
    with pytest.raises(MissingDependency, match="pip install no-such-env-package"):
        card.recover_environment()


def test_the_card_repr_is_short_and_multi_line():
    dh.download(ID, **SMALL)
    text = repr(dh.info(ID, **SMALL))
    assert text.startswith(f"DatasetInfo({ID!r}") and len(text.splitlines()) >= 4
    assert len(text) < 800 and max(len(line) for line in text.splitlines()) <= 120
    assert "transitions=600" in text


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"batchsize": 256}, r"did you mean batch_size=256"),
        ({"slice_len": 32}, r"sampler=SliceSampler\(slice_len=32\)"),
        ({"num_slices": 4}, r"sampler=SliceSampler\(num_slices=4\)"),
        ({"prefech": 2}, r"did you mean prefetch=2"),
        ({"pool_episode": 4}, r"did you mean pool_episodes=4"),
        ({"cuda_graph": True}, r"did you mean cuda_graphs=True"),
        ({"sampler": SliceSampler}, r"is a class; pass an instance"),
        ({"sampler": SliceSampler(slice_len=32), "batch_size": 100}, r"not divisible by slice_len=32"),
        ({"sampler": SliceSampler(num_slices=3), "batch_size": 100}, r"not divisible by num_slices=3"),
    ],
)
def test_load_argument_mistakes_are_refused_before_building(kwargs, match, isolated_cache):
    with pytest.raises(InvalidParameter, match=match):
        dh.load(ID, **SMALL, **kwargs)
    assert not (isolated_cache / "datasets").exists() or not list((isolated_cache / "datasets").rglob("manifest.json"))


def test_load_keywords_are_read_from_the_signature():
    """The did-you-mean list is load()'s signature itself: a keyword added to load() is known at once."""
    import inspect

    from datasets_hub.hub import load_keywords

    signature = inspect.signature(dh.load).parameters
    expected = {name for name, p in signature.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert set(load_keywords()) == expected
    assert {"pool_episodes", "pool_refresh_s", "resident", "in_memory"} <= expected


def test_dataset_params_close_to_load_keywords_still_work():
    rb = dh.load(ID, batch_size=64, sampler=SliceSampler(slice_len=32), steps=300, seed=3)
    assert rb.sample().shape == (64,)
