"""Mixture: datasets with different state/action sizes padded with masks, weights and their realised
proportions (chi-square), key maps, per-dataset normalisation, slice/window/goal/n-step members, the
hub-level constructor over ids, and clear errors for bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import datasets_hub as dh
from datasets_hub import catalogue
from datasets_hub.buffers.mixture import Mixture, largest_remainder, mixture_weights
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers import RandomSampler
from datasets_hub.buffers.samplers.goal import GoalSampler
from datasets_hub.buffers.samplers.n_step import NStepReturnSampler
from datasets_hub.buffers.samplers.slice import SliceSampler
from datasets_hub.buffers.samplers.window import WindowSampler
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.buffers.writers import ImmutableDatasetWriter
from datasets_hub.build.pipeline import build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import InvalidParameter
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader, fake_episodes

from fixtures.device import chi_square_ok

#: (obs_dim, act_dim, lengths, first_row): three datasets whose sizes and values differ
SETS = {"a": (3, 2, [20, 7, 13], 0), "b": (5, 6, [30, 40, 10, 25], 100_000), "c": (4, 1, [9, 11], 200_000)}
CHI2_Z_P01 = 2.326  # one-sided normal quantile at p = 0.01 (Wilson-Hilferty)


class DimsLoader(FakeLoader):
    def episodes(self, spec, files, ctx):
        p = spec.params
        yield fake_episodes(p["lengths"], obs_dim=p["obs_dim"], act_dim=p["act_dim"], first_row=p["first_row"])


def storage(name):
    obs_dim, act_dim, lengths, first_row = SETS[name]
    params = {"obs_dim": obs_dim, "act_dim": act_dim, "lengths": lengths, "first_row": first_row}
    return DatasetStorage(build(DatasetSpec(id=f"fake/{name}", loader="fake", params=params), DimsLoader(), {}, []))


def buffer(name, sampler=None, seed=0):
    return TensorDictReplayBuffer(
        storage=storage(name),
        sampler=sampler or RandomSampler(),
        writer=ImmutableDatasetWriter(),
        generator=torch.Generator().manual_seed(seed),
    )


def stats_of(rb):
    return rb.storage.manifest["stats"]["features"]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_padding_masks_and_dataset_index():
    rbs = [buffer(n, seed=i) for i, n in enumerate("abc")]
    mix = Mixture(rbs, names=list("abc"), weights=[1, 2, 1], ids=True)
    out = mix.sample(40)
    assert out.batch_size == (40,)
    assert out["observation"].shape == (40, 5) and out["action"].shape == (40, 6)
    assert out["next", "observation"].shape == (40, 5)
    index = out["dataset", "index"]
    assert index.tolist() == [0] * 10 + [1] * 20 + [2] * 10  # exact shares, members in order
    assert out["dataset", "id"].tolist() == ["a"] * 10 + ["b"] * 20 + ["c"] * 10
    for i, name in enumerate("abc"):
        obs_dim, act_dim, _, first_row = SETS[name]
        rows = index == i
        obs, act = out["observation"][rows], out["action"][rows]
        assert (out["observation_dim_is_pad"][rows] == (torch.arange(5) >= obs_dim)).all()
        assert (out["action_dim_is_pad"][rows] == (torch.arange(6) >= act_dim)).all()
        assert (obs[:, obs_dim:] == 0).all() and (act[:, act_dim:] == 0).all()
        # the unpadded part is a real row of that dataset: obs[d] = row * 100 + d, rows from first_row on
        row = obs[:, 0] / 100
        assert (row >= first_row).all() and (row < first_row + 1000).all()
        assert torch.equal(obs[:, :obs_dim], row[:, None] * 100 + torch.arange(obs_dim))
    assert "next/reward_dim_is_pad" not in [k if isinstance(k, str) else "/".join(k) for k in out.keys(True, True)]


def test_weights_explicit_uniform_size_and_temperature():
    sizes = [40, 105, 20]
    np.testing.assert_allclose(mixture_weights(sizes, [1, 3, 0]), [0.25, 0.75, 0.0])
    np.testing.assert_allclose(mixture_weights(sizes, "uniform"), [1 / 3] * 3)
    np.testing.assert_allclose(mixture_weights(sizes, "size"), np.array(sizes) / 165)
    hot = np.sqrt(sizes) / np.sqrt(sizes).sum()
    np.testing.assert_allclose(mixture_weights(sizes, "size", temperature=2.0), hot)
    assert largest_remainder(np.array([0.5, 0.25, 0.25]), 7) == [3, 2, 2]  # remainders .5 < .75 = .75
    assert sum(largest_remainder(np.array([1 / 3] * 3), 100)) == 100


@pytest.mark.parametrize(
    "weights, match",
    [
        ([1, -1, 1], "dataset 1 has weight -1.0"),
        ([1, float("nan"), 1], "dataset 1 has weight nan"),
        ([0, 0, 0], "must not all be zero"),
        ([1, 1], "2 values for 3 datasets"),
        ("natural", "'uniform' or 'size'"),
    ],
)
def test_bad_weights_are_refused(weights, match):
    with pytest.raises(InvalidParameter, match=match):
        mixture_weights([1, 2, 3], weights)
    with pytest.raises(InvalidParameter, match=match.replace("dataset 1", "dataset 'b'")):
        Mixture([buffer(n) for n in "abc"], names=list("abc"), weights=weights)


def test_realised_proportions_pass_chi_square_over_a_million_draws():
    rbs = [buffer(n, seed=i) for i, n in enumerate("abc")]
    mix = Mixture(rbs, weights="size", temperature=2.0, exact=False, generator=gen(7))
    p = torch.as_tensor(mix.p)
    counts = torch.zeros(3, dtype=torch.int64)
    for _ in range(100):
        counts += torch.bincount(mix.sample(10_000)["dataset", "index"], minlength=3)
    assert int(counts.sum()) == 1_000_000
    stat, crit = chi_square_ok(counts, p, z=CHI2_Z_P01)
    assert stat < crit, (counts.tolist(), p.tolist(), stat, crit)
    # it is a test that can fail: the same counts against other weights are far off
    stat, crit = chi_square_ok(counts, torch.tensor([1 / 3] * 3, dtype=torch.float64), z=CHI2_Z_P01)
    assert stat > crit
    # exact shares: every batch holds them
    exact = Mixture(rbs, weights="size", temperature=2.0)
    assert torch.bincount(exact.sample(1000)["dataset", "index"], minlength=3).tolist() == largest_remainder(
        exact.p, 1000
    )


def test_key_maps_select_and_rename_and_name_missing_keys():
    rbs = [buffer("a"), buffer("c")]
    maps = [{"observation": "state", "action": "action"}, {("observation",): "state", "action": "action"}]
    out = Mixture(rbs, key_maps=maps).sample(16)
    assert sorted(out.keys()) == ["action", "action_dim_is_pad", "dataset", "state", "state_dim_is_pad"]
    assert out["state"].shape == (16, 4) and out["action"].shape == (16, 2)
    with pytest.raises(InvalidParameter, match=r"dataset 'dataset1'.*'actoin'.*Did you mean 'action'"):
        Mixture(rbs, key_maps=[["action"], ["actoin"]])
    with pytest.raises(InvalidParameter, match=r"'observation' is in \['dataset0'\] but not in \['dataset1'\]"):
        Mixture(rbs, key_maps=[["action", "observation"], ["action"]])


def test_schemas_that_cannot_be_padded_are_refused_naming_dataset_and_key():
    int_actions = TensorDictReplayBuffer(storage=LazyTensorStorage(50), generator=gen())
    chunk = fake_episodes([10, 10], obs_dim=3, act_dim=2)
    int_actions.extend(chunk.set("action", chunk["action"].to(torch.int64)))
    with pytest.raises(InvalidParameter, match=r"key 'action': dataset 'online' gives torch.int64 but 'a' gives"):
        Mixture([buffer("a"), int_actions], names=["a", "online"], key_maps=[["action"], ["action"]])
    images = []
    for size in (8, 6):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), generator=gen())
        rb.extend(fake_episodes([20]).set("pixels", torch.zeros(20, size, size, 3, dtype=torch.uint8)))
        images.append(rb)
    with pytest.raises(InvalidParameter, match=r"key 'pixels': dataset 'small' has per-item image size \[6, 6, 3\]"):
        Mixture(images, names=["big", "small"])


def test_per_dataset_normalisation_with_each_datasets_own_statistics():
    rbs = [buffer("a"), buffer("b", seed=1)]
    stats = [stats_of(rb) for rb in rbs]
    mix = Mixture(
        rbs,
        weights="uniform",
        normalize={"observation": "mean_std", "action": "min_max", ("next", "reward"): "q01_q99"},
        stats=stats,
    )
    out = mix.sample(64)
    for i, rb in enumerate(rbs):
        rows = out["dataset", "index"] == i
        every = rb.storage[:]
        obs_dim = SETS["ab"[i]][0]
        raw = every["observation"].double().numpy()
        want_mean, want_std = raw.mean(axis=0), raw.std(axis=0)
        got = out["observation"][rows][:, :obs_dim].double().numpy()
        # each normalised row maps back to a real row of its own dataset
        back = got * want_std + want_mean
        assert np.isin(np.round(back[:, 0]), raw[:, 0]).all()
        assert (out["observation"][rows][:, obs_dim:] == 0).all()  # padding stays 0 after normalising
        act = out["action"][rows]
        assert act.dtype == torch.float32 and float(act.abs().max()) <= 1.0 + 1e-6
        assert float(out["next", "reward"][rows].abs().max()) <= 1.0

    # a member without recorded statistics gets them computed from its storage: the same batches
    def fresh(given):
        members = [buffer("a"), buffer("b", seed=1)]
        spec = {"observation": "mean_std"}
        return Mixture(members, normalize=spec, stats=[stats_of(m) for m in members] if given else None).sample(16)

    assert torch.equal(fresh(True)["observation"], fresh(False)["observation"])
    with pytest.raises(InvalidParameter, match=r"normalize names 'obs'.*Did you mean .*'observation'"):
        Mixture(rbs, normalize={"obs": "mean_std"})
    with pytest.raises(InvalidParameter, match="must be one of"):
        Mixture(rbs, normalize={"observation": "zscore"})


def test_slice_members_share_whole_slices():
    rbs = [buffer(n, sampler=SliceSampler(slice_len=4), seed=i) for i, n in enumerate("abc")]
    mix = Mixture(rbs, weights=[1, 1, 2])
    out = mix.sample(32)
    assert out["dataset", "index"].tolist() == [0] * 8 + [1] * 8 + [2] * 16
    episodes = out["episode"].view(8, 4)
    assert (episodes == episodes[:, :1]).all()  # every slice inside one episode of one dataset
    with pytest.raises(InvalidParameter, match="multiple of the members' slice length 4"):
        mix.sample(30)
    with pytest.raises(InvalidParameter, match="different lengths"):
        Mixture([buffer("a", sampler=SliceSampler(slice_len=4)), buffer("b", sampler=SliceSampler(slice_len=8))])


def test_window_goal_and_n_step_members():
    windows = [buffer(n, sampler=WindowSampler({"action": range(4), "observation": [-1, 0]})) for n in "ab"]
    out = Mixture(windows, weights="uniform").sample(10)
    assert out["action"].shape == (10, 4, 6) and out["observation"].shape == (10, 2, 5)
    assert out["action_is_pad"].shape == (10, 4) and out["action_dim_is_pad"].shape == (10, 6)
    # a key map carries a renamed key's window mask along
    mapped = Mixture(windows, key_maps=[{"action": "act"}] * 2).sample(4)
    assert sorted(mapped.keys()) == ["act", "act_dim_is_pad", "act_is_pad", "dataset"]

    goals = [buffer(n, sampler=GoalSampler(p_future=1.0), seed=i) for i, n in enumerate("ac")]
    maps = [{"observation": "observation", ("goal", "observation"): "goal", "action": "action"}] * 2
    out = Mixture(goals, key_maps=maps).sample(12)
    assert out["goal"].shape == (12, 4) and out["goal_dim_is_pad"][:6].tolist() == [[False] * 3 + [True]] * 6
    # a sub-tree maps whole
    out = Mixture(goals, key_maps=[["observation", "goal"]] * 2).sample(12)
    assert out["goal", "observation"].shape == (12, 4) and out["goal", "reward"].shape[0] == 12

    online = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100), sampler=NStepReturnSampler(0.9, n=3), generator=gen()
    )
    chunk = fake_episodes([15, 20], obs_dim=7, act_dim=2)
    chunk["return_to_go"] = torch.zeros(35, 1)
    online.extend(chunk)
    offline = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100), sampler=NStepReturnSampler(0.9, n=3), generator=gen(1)
    )
    chunk = fake_episodes([25], obs_dim=3, act_dim=2)
    chunk["return_to_go"] = torch.ones(25, 1)
    offline.extend(chunk)
    out = Mixture([online, offline], weights="uniform").sample(8)
    assert out["observation"].shape == (8, 7) and "observation_dim_is_pad" in out.keys()


def test_text_keys_are_kept_per_item():
    def with_task(name):
        def transform(td):
            td.set_non_tensor("task", name)
            return td

        return transform

    rbs = []
    for i, name in enumerate(["pick", "place"]):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(50), transform=with_task(name), generator=gen(i))
        rb.extend(fake_episodes([10, 10], obs_dim=3 + i))
        rbs.append(rb)
    out = Mixture(rbs, key_maps=[["observation", "task"]] * 2, weights="uniform").sample(6)
    assert out.get("task").tolist() == ["pick"] * 3 + ["place"] * 3 and out["observation"].shape == (6, 4)


# ------------------------------------------------------------------------------------------ hub level
@pytest.fixture
def gym_ids():
    ids = {"gym/mix-pendulum": "Pendulum-v1", "gym/mix-mountaincar": "MountainCarContinuous-v0"}
    for dataset_id, env in ids.items():
        catalogue.register_dataset(dataset_id, loader="gym", params={"env": env, "steps": 200, "seed": 1})
    yield list(ids)
    for dataset_id in ids:
        catalogue.unregister_dataset(dataset_id)


def test_hub_mixture_by_id_with_build_statistics(gym_ids):
    def make():
        return dh.mixture(gym_ids, batch_size=64, generator=gen(3), normalize={"observation": "mean_std"}, ids=True)

    mix = make()
    assert mix.names == tuple(gym_ids)
    a, b = mix.sample(), make().sample()
    assert torch.equal(a["observation"], b["observation"])  # same seed, same batches
    assert a["observation"].shape == (64, 3)  # MountainCar's 2 values padded to Pendulum's 3
    assert a["observation_dim_is_pad"][a["dataset", "index"] == 1].all(dim=0).tolist() == [False, False, True]
    raw = dh.load(gym_ids[0]).storage[:]["observation"].double()
    rows = a["dataset", "index"] == 0
    back = a["observation"][rows].double() * raw.std(dim=0, unbiased=False) + raw.mean(dim=0)
    assert torch.isclose(back[:, None, :], raw[None].to(back.dtype), atol=1e-4).all(-1).any(-1).all()
    assert set(a["dataset", "id"].tolist()) == set(gym_ids)
    assert math.isclose(float(mix.p.sum()), 1.0)


def write_d4rl(path, n, obs_dim, act_dim, offset):
    """A D4RL-layout HDF5 file with distinct values per row."""
    import h5py

    t = np.arange(n)
    with h5py.File(path, "w") as f:
        f["observations"] = (offset + t[:, None] + 0.01 * np.arange(obs_dim)).astype(np.float32)
        f["actions"] = np.sin(t[:, None] + np.arange(act_dim)).astype(np.float32)
        f["rewards"] = t.astype(np.float32)
        f["terminals"] = (t % 25) == 24
        f["timeouts"] = np.zeros(n, dtype=bool)
    return path


def test_the_example_trains_on_two_datasets_with_different_action_sizes(tmp_path):
    import importlib.util

    ids = {"d4rl/mix-small-v0": (4, 2), "d4rl/mix-wide-v0": (7, 5)}
    for i, (dataset_id, (obs_dim, act_dim)) in enumerate(ids.items()):
        source = write_d4rl(tmp_path / f"{i}.hdf5", 200 + 100 * i, obs_dim, act_dim, 1000 * i)
        catalogue.register_dataset(dataset_id, loader="d4rl", resources=[{"url": source.as_uri(), "name": f"{i}.h5"}])
    try:
        path = Path(__file__).resolve().parents[1] / "examples" / "mixture_two_datasets.py"
        assert len(path.read_text().splitlines()) <= 40
        spec = importlib.util.spec_from_file_location("mixture_example", path)
        example = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(example)
        first, last = example.main(list(ids), steps=1), example.main(list(ids), steps=100)
        assert math.isfinite(last) and last < first
    finally:
        for dataset_id in ids:
            catalogue.unregister_dataset(dataset_id)


# -- projections, direct and sampled paths, remote, LeRobot, device members -----------------------------------
def _same_batches(x, y):
    assert set(x.keys(True, True)) == set(y.keys(True, True))
    for key in x.keys(True, True):
        assert torch.equal(x[key], y[key]), key


def test_the_direct_gather_gives_the_batches_of_sampling_each_member():
    """Members gathered straight into the batch (gather_into) give what sampling them and copying gives."""
    for make in (RandomSampler, lambda: SliceSampler(slice_len=4)):
        # batches of changing sizes: none drawn ahead (a new size drops what was drawn ahead for the last)
        direct = Mixture([buffer(n, make(), seed=i) for i, n in enumerate("abc")], weights="uniform", read_ahead=1)
        # an identity projection makes a member go through its own sample()
        sampled = Mixture(
            [buffer(n, make(), seed=i) for i, n in enumerate("abc")], weights="uniform", project=[lambda td: td] * 3
        )
        for batch in (12, 36, 48):
            _same_batches(direct.sample(batch), sampled.sample(batch))
    # a batch kept by the caller is never overwritten by the next one (the memory is reused only when free)
    first = direct.sample(12)
    kept = first["observation"].clone()
    direct.sample(12)
    assert torch.equal(first["observation"], kept)


@pytest.mark.parametrize("make", [RandomSampler, lambda: SliceSampler(slice_len=4)], ids=["rows", "slices"])
def test_batches_drawn_ahead_are_those_of_successive_calls(make):
    """A member of a read-only build with a uniform or slice sampler draws several batches at once: the
    batches are exactly those of drawing one at a time (and of each member sampled and copied in)."""
    norm = {"observation": "mean_std", "action": "min_max"}

    def mix(**kw):
        rbs = [buffer(n, make(), seed=i) for i, n in enumerate("abc")]
        return Mixture(rbs, weights=[1, 2, 1], normalize=norm, stats=[stats_of(rb) for rb in rbs], **kw)

    ahead, one_by_one = mix(), mix(read_ahead=1)
    sampled = mix(project=[lambda td: td] * 3)  # each member's own sample(), copied in
    assert ahead.batches_ahead(16) > 1 and one_by_one.batches_ahead(16) == 1 and sampled.batches_ahead(16) == 1
    assert mix(read_ahead=3).batches_ahead(16) == 3
    for _ in range(ahead.batches_ahead(16) + 3):  # past the end of the first draw ahead
        batch = ahead.sample(16)
        _same_batches(batch, one_by_one.sample(16))
        _same_batches(batch, sampled.sample(16))


def test_a_batch_never_changes_and_padding_and_masks_are_rewritten_for_every_batch():
    """Batches drawn ahead share one block of memory: a kept batch is never overwritten, and a batch the
    caller modified then dropped leaves nothing behind in later ones (padding zero, masks and index right)."""
    rbs = [buffer(n, seed=i) for i, n in enumerate("abc")]
    mix = Mixture(rbs, weights=[1, 2, 1])
    k = mix.batches_ahead(8)
    assert k > 1
    kept = mix.sample(8)
    copy = kept.clone()
    for _ in range(3 * k):  # several draws ahead, the memory of dropped ones reused
        batch = mix.sample(8)
        for key in ("observation", "action", "observation_dim_is_pad", ("dataset", "index")):
            batch[key].fill_(7)  # the caller writes into a batch, then drops it
        del batch
        _same_batches(kept, copy)
    for _ in range(3 * k):
        batch = mix.sample(8)
        assert batch["dataset", "index"].tolist() == [0] * 2 + [1] * 4 + [2] * 2
        for i, name in enumerate("abc"):
            obs_dim, act_dim = SETS[name][:2]
            rows = batch["dataset", "index"] == i
            assert (batch["observation"][rows][:, obs_dim:] == 0).all()
            assert (batch["action"][rows][:, act_dim:] == 0).all()
            assert (batch["observation_dim_is_pad"][rows] == (torch.arange(5) >= obs_dim)).all()
            assert (batch["observation"][rows][:, :obs_dim] != 7).all()


@pytest.mark.parametrize("normalize", [{}, {"observation": "mean_std", "action": "q01_q99"}], ids=["raw", "normalised"])
def test_batches_of_varying_shares_get_their_own_rows_padding_and_masks_in_reused_memory(normalize):
    """Shares drawn per batch (exact=False) change every member's rows from batch to batch, one batch per
    call: each batch's pad entries are zero and each item's mask is its dataset's, whatever the memory
    reused from a dropped batch held, and the values are those of each member sampled and copied in."""

    def mix(**kw):
        rbs = [buffer(n, seed=i) for i, n in enumerate("abc")]
        stats = [stats_of(rb) for rb in rbs]
        return Mixture(rbs, weights=[1, 2, 1], exact=False, generator=gen(3), normalize=normalize, stats=stats, **kw)

    direct, sampled = mix(), mix(project=[lambda td: td] * 3)
    seen = set()
    for size in (40, 40, 7, 40, 64, 40):
        batch = direct.sample(size)
        _same_batches(batch, sampled.sample(size))
        index = batch["dataset", "index"]
        counts = torch.bincount(index, minlength=3).tolist()
        seen.add(tuple(counts))
        assert index.tolist() == [i for i, c in enumerate(counts) for _ in range(c)]  # members in order
        for i, name in enumerate("abc"):
            obs_dim, act_dim = SETS[name][:2]
            rows = index == i
            for key, mask_key, dim, width in (
                ("observation", "observation_dim_is_pad", obs_dim, 5),
                (("next", "observation"), ("next", "observation_dim_is_pad"), obs_dim, 5),
                ("action", "action_dim_is_pad", act_dim, 6),
            ):
                assert (batch[key][rows][:, dim:] == 0).all()
                assert (batch[mask_key][rows] == (torch.arange(width) >= dim)).all()
        for key in batch.keys(True, True):  # the caller fills the batch with garbage, then drops it
            batch[key].fill_(1)
        del batch
    assert len(seen) > 2  # the shares did change between batches


@pytest.mark.parametrize("read_ahead", [0, -1, 1.5, True])
def test_bad_read_ahead_is_refused(read_ahead):
    with pytest.raises(InvalidParameter, match="read_ahead must be"):
        Mixture([buffer("a")], read_ahead=read_ahead)


def test_members_that_can_change_between_calls_are_not_drawn_ahead():
    from datasets_hub.buffers.samplers import SamplerWithoutReplacement

    epochs = buffer("a", SamplerWithoutReplacement())  # what it draws depends on the rows left this epoch
    assert Mixture([epochs, buffer("c")], weights="uniform").batches_ahead(8) == 1
    assert Mixture([buffer("a"), buffer("c")], weights="uniform", exact=False).batches_ahead(8) == 1
    assert Mixture([buffer("a"), buffer("c")], weights="uniform").batches_ahead(8) > 1


def test_a_projection_maps_a_dataset_to_the_common_schema_instead_of_padding():
    def widen(td):  # dataset a's 2 action values -> 6: the 2, then four copies of their mean
        action = td["action"]
        td["action"] = torch.cat([action, action.mean(-1, keepdim=True).expand(-1, 4)], -1)
        return td

    rbs = [buffer("a"), buffer("b", seed=1)]
    out = Mixture(rbs, weights="uniform", project=[widen, None]).sample(10)
    assert out["action"].shape == (10, 6) and "action_dim_is_pad" not in out.keys()
    head = out["action"][:5]
    assert torch.allclose(head[:, 2:], head[:, :2].mean(-1, keepdim=True).expand(-1, 4))
    assert "observation_dim_is_pad" in out.keys()  # keys it leaves alone are still padded
    # by id, through the hub
    mix = dh.mixture([buffer("a"), buffer("b", seed=1)], project=[widen, None], weights="uniform")
    assert mix.sample(4)["action"].shape == (4, 6)


def test_bad_projections_are_refused_naming_the_dataset_and_key():
    rbs = [buffer("a"), buffer("b", seed=1)]
    with pytest.raises(InvalidParameter, match="project has 1 entries for 2 datasets"):
        Mixture(rbs, project=[None])
    with pytest.raises(InvalidParameter, match="dataset 'dataset0': a projection is a callable"):
        Mixture(rbs, project=["action", None])
    with pytest.raises(InvalidParameter, match=r"dataset 'dataset1': its projection failed.*KeyError"):
        Mixture(rbs, project=[None, lambda td: td["nope"]])
    with pytest.raises(InvalidParameter, match="dataset 'dataset0': a projection returns a TensorDict"):
        Mixture(rbs, project=[lambda td: td["action"], None])
    calls = []

    def drifting(td):  # a wider action from its second batch on
        calls.append(1)
        if len(calls) > 1:
            td["action"] = torch.zeros(td.shape[0], 3)
        return td

    mix = Mixture(rbs, project=[drifting, None], weights="uniform")
    with pytest.raises(InvalidParameter, match=r"dataset 'dataset0': its projection gave 'action' as float32 \[3\]"):
        mix.sample(4)


def test_mixture_over_remote_lazy_and_pool_builds(tmp_path):
    """Remote members (their reads go through their own gather) give what the local build gives."""
    pytest.importorskip("zarr")
    from fixtures.http_server import serve_files
    from fixtures.remote import PARAMS, local_build, publish, serve_folder

    local = local_build()
    published = publish(local, tmp_path / "published", chunk_bytes=1024)
    keys = ["observation", "episode", "step", ("next", "reward")]  # cartpole's action is an int64 index

    def members(first):
        return [first, buffer("c", seed=5)]

    maps = [keys, keys]
    with serve_files() as server:
        url = serve_folder(server, published)
        lazy = dh.load(url, resident="lazy", generator=gen(3))
        ref = dh.load("gym/cartpole-random-v0", generator=gen(3), **PARAMS)
        a = Mixture(members(lazy), key_maps=maps, weights="uniform")
        b = Mixture(members(ref), key_maps=maps, weights="uniform")
        for _ in range(3):
            _same_batches(a.sample(32), b.sample(32))

        pool = dh.load(url, resident="pool", pool_episodes=4, pool_refresh_s=None, generator=gen(4))
        out = Mixture(members(pool), key_maps=maps, weights="uniform").sample(40)
        ours = out[:20]
        every = local[:]
        start = {int(e): i for i, e in enumerate(every["episode"].tolist()) if i == 0 or every["episode"][i - 1] != e}
        rows = torch.tensor([start[int(e)] + int(t) for e, t in zip(ours["episode"], ours["step"], strict=True)])
        width = every["observation"].shape[-1]
        assert torch.equal(ours["observation"][:, :width], every["observation"][rows])
        assert torch.equal(ours["next", "reward"], every["next", "reward"][rows])
        assert len(set(ours["episode"].tolist())) <= 4  # from the pool's episodes only


def test_mixture_on_the_cpu_device_path_equals_the_host_build():
    from fixtures.device import gen as device_gen

    small = {"steps": 600, "seed": 1}
    keys = ["observation", ("next", "reward"), ("next", "observation")]  # cartpole's action is an int64 index
    on_device = dh.load(
        "gym/cartpole-random-v0", sampler=SliceSampler(slice_len=4), device="cpu", generator=device_gen(1), **small
    )
    host = dh.load("gym/cartpole-random-v0", sampler=SliceSampler(slice_len=4), generator=device_gen(1), **small)
    a = Mixture([on_device, buffer("b", SliceSampler(slice_len=4))], key_maps=[keys, keys], weights="uniform")
    b = Mixture([host, buffer("b", SliceSampler(slice_len=4))], key_maps=[keys, keys], weights="uniform")
    for _ in range(3):
        _same_batches(a.sample(16), b.sample(16))


def test_lerobot_windows_of_datasets_at_different_frame_rates(tmp_path, monkeypatch):
    """The same delta_timestamps (seconds) over a 10 fps and a 20 fps dataset: each member's window
    offsets follow its own rate (1 vs 2 frames per 0.1 s); states of 3 and 5 values are padded."""
    pytest.importorskip("pyarrow")
    from datasets_hub.loaders.lerobot import loader as lr
    from datasets_hub.loaders.lerobot.loader import decode_text
    from datasets_hub.loaders.lerobot.windows import delta_timestamps_sampler

    from fixtures import lerobot_writer as lw
    from fixtures.http_server import point_huggingface_hub_at, serve_files

    specs = {
        "acme/slow": lw.Spec(lengths=(6, 9), tasks=("push", "lift"), cameras=(), fps=10, state_dim=3, action_dim=2),
        "acme/fast": lw.Spec(lengths=(12, 7), tasks=("stack", "open"), cameras=(), fps=20, state_dim=5, action_dim=2),
    }
    delta = {"observation.state": [-0.1, 0.0], "action": [0.0, 0.1, 0.2]}
    summaries = {}
    with serve_files() as server:
        for repo, spec in specs.items():
            root = tmp_path / repo.replace("/", "_")
            summaries[repo] = lw.write_dataset(root, spec)
            for path, data in lw.files_of(root).items():
                server.add_hf_file(repo, path, data)
        point_huggingface_hub_at(server, monkeypatch, tmp_path / "hf-cache")
        monkeypatch.setattr(lr, "_metas", {})
        ids = [f"lerobot/{repo}" for repo in specs]
        samplers = [delta_timestamps_sampler(delta, fps=i) for i in ids]
        mix = dh.mixture(ids, sampler=samplers, weights="uniform", num_workers=1, generator=gen(2))
        out = mix.sample(40)
    assert out["observation", "state"].shape == (40, 2, 5) and out["action"].shape == (40, 3, 2)
    assert out["observation", "state_dim_is_pad"][:20].tolist() == [[False] * 3 + [True] * 2] * 20
    for b in range(40):
        repo = list(specs)[int(out["dataset", "index"][b])]
        spec, starts = specs[repo], summaries[repo]["starts"]
        e, i = int(out["episode"][b]), int(out["info", "index"][b])
        t, frames = i - starts[e], spec.fps // 10  # frames per 0.1 s
        for key, offsets in ((("observation", "state"), [-1, 0]), (("action",), [0, 1, 2])):
            pos = [t + o * frames for o in offsets]
            clipped = [min(max(p, 0), spec.lengths[e] - 1) for p in pos]
            want = np.stack([lw.state_of(e, p, spec.state_dim) for p in clipped])
            if key == ("action",):
                want = -want[:, : spec.action_dim]
            got = out[key][b].numpy()[:, : want.shape[-1]]
            np.testing.assert_array_equal(got, want)
            mask = out[(*key[:-1], key[-1] + "_is_pad")][b].tolist()
            assert mask == [not 0 <= p < spec.lengths[e] for p in pos]
    tasks = decode_text(out["task"])  # byte rows, zero-padded to the longer dataset's width
    assert set(tasks[:20]) <= {"push", "lift"} and set(tasks[20:]) <= {"stack", "open"}


def test_a_member_returning_fewer_items_than_asked_is_refused_naming_it():
    from datasets_hub.buffers.samplers import SamplerWithoutReplacement

    mix = Mixture([buffer("a"), buffer("c", SamplerWithoutReplacement())], weights="uniform", names=["a", "c"])
    mix.sample(30)  # 15 of c's 20 rows (its epoch), after the probe's 1
    with pytest.raises(InvalidParameter, match=r"dataset 'c' gave '.*' of shape \[4"):
        mix.sample(30)  # the epoch's last 4 rows, for 15 asked
