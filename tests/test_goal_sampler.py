"""GoalSampler: goals checked value by value, their laws exactly on small cases and statistically with fixed
seeds, and OGBench's configs against a numpy re-derivation of ``GCDataset``/``HGCDataset`` (upstream's own
classes run in tests/upstream/test_upstream_ogbench_goals.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers import RandomSampler
from datasets_hub.buffers.samplers.goal import CURRENT, FUTURE, RANDOM, GoalMix, GoalSampler
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.testing import FakeLoader, fake_episodes

from fixtures import ogbench_goal_laws as og

LENGTHS = [12, 3, 1, 9, 40]
STARTS = np.cumsum([0, *LENGTHS[:-1]])


def chi2_critical(df, z=3.090):
    """Upper p = 0.001 point of chi-square(df) (Wilson-Hilferty; within 1% for df >= 3, exact enough
    below). A fixed seed keeps each test deterministic."""
    exact = {1: 10.83, 2: 13.82}
    if df in exact:
        return exact[df]
    h = 2 / (9 * df)
    return df * (1 - h + z * math.sqrt(h)) ** 3


def chi2_ok(counts, probs):
    counts, probs = np.asarray(counts, float), np.asarray(probs, float)
    keep = probs > 0
    assert counts[~keep].sum() == 0, "mass where the law has none"
    expected = counts.sum() * probs[keep]
    stat = float(((counts[keep] - expected) ** 2 / expected).sum())
    df = int(keep.sum()) - 1
    return stat < chi2_critical(df), stat, df


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def online(sampler, lengths=LENGTHS, seed=5):
    chunk = fake_episodes(lengths)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), sampler=sampler, generator=gen(seed))
    rb.extend(chunk.clone())
    return rb, chunk


def built(sampler, lengths=LENGTHS):
    from datasets_hub.build.pipeline import build
    from datasets_hub.build.storage import DatasetStorage
    from datasets_hub.loader import DatasetSpec

    chunk = fake_episodes(lengths)

    class ChunkLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            yield chunk.clone()

    path = build(DatasetSpec(id="fake/goals", loader="fake", params={}), ChunkLoader(), {}, [])
    return TensorDictReplayBuffer(storage=DatasetStorage(path), sampler=sampler, generator=gen(5)), chunk


def state_at(chunk, episode, time, lengths=LENGTHS):
    """Plain lookup: the observation at ``time`` of ``episode`` (time L is the final next observation)."""
    first = int(np.cumsum([0, *lengths])[episode])
    if time < lengths[episode]:
        return chunk["observation"][first + time]
    return chunk["next", "observation"][first + lengths[episode] - 1]


def episode_of(row, lengths=LENGTHS):
    return int(np.searchsorted(np.cumsum([0, *lengths[:-1]]), row, side="right") - 1)


# varied lengths, and episodes of one length laid end to end (located as row // length)
@pytest.mark.parametrize("convention", ["ogbench", "her"])
@pytest.mark.parametrize("lengths", [LENGTHS, [7] * 6], ids=["varied", "equal"])
@pytest.mark.parametrize("make", [online, built])
def test_goals_are_the_states_they_claim(make, lengths, convention):
    s = GoalSampler(
        0.2,
        0.5,
        0.3,
        future="geometric",
        gamma=0.9,
        actor={"p_future": 0.6, "p_random": 0.4, "future": "uniform"},
        subgoal_steps=4,
        convention=convention,
    )
    rb, chunk = make(s, lengths=lengths)
    starts = np.cumsum([0, *lengths[:-1]])
    for _ in range(4):
        batch = rb.sample(256)
        for i, row in enumerate(batch["index"].tolist()):
            e = episode_of(row, lengths)
            t = row - int(starts[e])
            end = lengths[e] - 1 if convention == "ogbench" else lengths[e]  # the last goal time
            for name in ("goal", "actor_goal"):
                kind = int(batch[name, "kind"][i])
                d = int(batch[name, "distance"][i])
                if kind != RANDOM:
                    assert batch[name, "in_episode"][i]
                    assert 0 <= t + d <= end, "a goal left its episode"
                    # a future goal is the current state only at the last goal time (OGBench's rule)
                    assert (d == 0) == (kind == CURRENT or t == end)
                    assert torch.equal(batch[name, "observation"][i], state_at(chunk, e, t + d, lengths))
                elif batch[name, "in_episode"][i]:
                    assert torch.equal(batch[name, "observation"][i], state_at(chunk, e, t + d, lengths))
                else:  # a random state: some row's observation (never a final state)
                    assert d == -1
                    assert (chunk["observation"] == batch[name, "observation"][i]).all(-1).any()
            sub = min(t + 4, end)
            assert int(batch["subgoal", "distance"][i]) == sub - t
            assert torch.equal(batch["subgoal", "observation"][i], state_at(chunk, e, sub, lengths))
            # HGCDataset's high_actor_targets: toward an actor goal of the own trajectory, else as the subgoal
            d = int(batch["actor_goal", "distance"][i])
            target = sub if int(batch["actor_goal", "kind"][i]) == RANDOM else min(t + 4, t + d)
            assert int(batch["actor_target", "distance"][i]) == target - t
            assert torch.equal(batch["actor_target", "observation"][i], state_at(chunk, e, target, lengths))
        success = batch["goal", "distance"] == 0
        assert torch.equal(batch["goal", "success"].reshape(-1), success)
        assert torch.equal(batch["goal", "reward"].reshape(-1), success.float())


def test_kind_probabilities_match_the_settings():
    rb, _ = online(GoalSampler(0.2, 0.5, 0.3))
    kinds = rb.sample(30_000)["goal", "kind"]
    ok, stat, df = chi2_ok(torch.bincount(kinds, minlength=3).numpy(), [0.2, 0.5, 0.3])
    assert ok, (stat, df)


@pytest.mark.parametrize("convention", ["ogbench", "her"])
@pytest.mark.parametrize("gamma", [0.7, 0.95])
def test_geometric_offsets_follow_the_clipped_law(gamma, convention):
    """Anchors fixed at step t of the 40-step episode: offsets follow min(Geom(1 - gamma), E - t), with E
    the last goal time (L - 1 with OGBench's convention, L with HER's)."""
    t, e = 25, 4
    row = int(STARTS[e]) + t
    inner = _Fixed(row)
    # seed 6, not the file's 5: the first 40,000 float64 uniforms of torch's seed 5 give chi2 = 42.7 here
    # (p ~ 1e-4) at gamma 0.95 whatever the sampler; seeds 0-9 otherwise give 6 to 24 (critical 36.3)
    sampler = GoalSampler(0.0, 1.0, 0.0, future="geometric", gamma=gamma, sampler=inner, convention=convention)
    rb, _ = online(sampler, seed=6)
    d = rb.sample(40_000)["goal", "distance"].numpy()
    left = LENGTHS[e] - t - (convention == "ogbench")
    assert d.min() >= 1 and d.max() <= left
    probs = [(1 - gamma) * gamma ** (k - 1) for k in range(1, left)] + [gamma ** (left - 1)]
    ok, stat, df = chi2_ok(np.bincount(d, minlength=left + 1)[1:], probs)
    assert ok, (stat, df)


def test_uniform_final_and_episode_laws():
    t, e = 30, 4
    row = int(STARTS[e]) + t
    left = LENGTHS[e] - t
    # OGBench's rounded law over offsets 1 .. L - 1 - t: the two ends at half weight
    rb, _ = online(GoalSampler(future="uniform", sampler=_Fixed(row)))
    d = rb.sample(20_000)["goal", "distance"].numpy()
    m = left - 1
    probs = [0.5 / (m - 1)] + [1 / (m - 1)] * (m - 2) + [0.5 / (m - 1)]
    ok, stat, df = chi2_ok(np.bincount(d, minlength=m + 1)[1:], probs)
    assert ok, (stat, df)
    # HER's: discrete uniform over 1 .. L - t
    rb, _ = online(GoalSampler(future="uniform", sampler=_Fixed(row), convention="her"))
    d = rb.sample(20_000)["goal", "distance"].numpy()
    ok, stat, df = chi2_ok(np.bincount(d, minlength=left + 1)[1:], [1 / left] * left)
    assert ok, (stat, df)
    rb, _ = online(GoalSampler.her("final", sampler=_Fixed(row)))
    assert (rb.sample(500)["goal", "distance"] == left).all()
    rb, _ = online(GoalSampler.her("episode", sampler=_Fixed(row)))
    d = rb.sample(20_000)["goal", "distance"].numpy() + t  # goal time 0..L
    ok, stat, df = chi2_ok(np.bincount(d, minlength=LENGTHS[e] + 1), [1 / (LENGTHS[e] + 1)] * (LENGTHS[e] + 1))
    assert ok, (stat, df)


def test_random_goals_are_uniform_over_rows():
    rb, chunk = online(GoalSampler.her("random"))
    obs = rb.sample(50_000)["goal", "observation"][:, 0]
    rows = torch.searchsorted(chunk["observation"][:, 0].contiguous(), obs.contiguous())
    n = len(chunk)
    ok, stat, df = chi2_ok(torch.bincount(rows, minlength=n).numpy(), [1 / n] * n)
    assert ok, (stat, df)


def test_future_goals_stay_in_their_episode_under_a_ks_test_of_uniform_offsets():
    """All anchors: (d - 1) / (L - t) for HER's uniform future goals is uniform on [0, 1) (KS distance check)."""
    rb, _ = online(GoalSampler(future="uniform", convention="her"))
    batch = rb.sample(20_000)
    rows = batch["index"].numpy()
    e = np.searchsorted(STARTS, rows, side="right") - 1
    t = rows - STARTS[e]
    left = np.asarray(LENGTHS)[e] - t
    d = batch["goal", "distance"].numpy()
    assert ((d >= 1) & (d <= left)).all()
    # randomised PIT: (d - 1 + V) / left with V ~ U[0, 1) is exactly U[0, 1)
    v = np.random.default_rng(0).random(d.size)
    u = np.sort((d - 1 + v) / left)
    ks = np.max(np.abs(u - (np.arange(1, u.size + 1) / u.size)))
    assert ks < 1.95 / math.sqrt(u.size)  # p = 0.001


def test_success_fn_negative_reward_and_multiple_keys():
    def close(state, goal):
        return (state - goal).abs().max(-1).values < 150  # within one row of each other

    rb, _chunk = online(
        GoalSampler(0.5, 0.5, 0.0, future="geometric", gamma=0.5, success_fn=close, negative_reward=True)
    )
    batch = rb.sample(512)
    want = (batch["observation"] - batch["goal", "observation"]).abs().max(-1).values < 150
    assert torch.equal(batch["goal", "success"].reshape(-1), want)
    assert torch.equal(batch["goal", "reward"].reshape(-1), want.float() - 1)
    assert want.any() and not want.all()

    seen = {}

    def both(state, goal):
        seen["keys"] = sorted(goal)
        return torch.zeros(len(goal["observation"]), dtype=torch.bool)

    chunk2 = fake_episodes(LENGTHS)
    chunk2["pos"] = chunk2["observation"][:, :2].clone()
    chunk2["next", "pos"] = chunk2["next", "observation"][:, :2].clone()
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(1000),
        generator=gen(1),
        sampler=GoalSampler(goal_keys=["observation", "pos"], success_fn=both, success_on="next"),
    )
    rb.extend(chunk2)
    batch = rb.sample(64)
    assert seen["keys"] == ["observation", "pos"]
    assert torch.equal(batch["goal", "pos"], batch["goal", "observation"][:, :2])


def test_same_seed_same_goals_and_argument_errors():
    a, _ = online(GoalSampler(0.3, 0.4, 0.3), seed=11)
    b, _ = online(GoalSampler(0.3, 0.4, 0.3), seed=11)
    assert (a.sample(128) == b.sample(128)).all()
    with pytest.raises(ValueError, match="sum to 1"):
        GoalSampler(0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="future must be"):
        GoalSampler(future="past")
    with pytest.raises(ValueError, match="gamma"):
        GoalSampler(future="geometric", gamma=1.0)
    with pytest.raises(ValueError, match="HER strategy"):
        GoalSampler.her("nearest")
    with pytest.raises(ValueError, match="subgoal_steps"):
        GoalSampler(subgoal_steps=0)
    with pytest.raises(ValueError, match="convention must be one of"):
        GoalSampler(convention="hindsight")
    rb, _ = online(GoalSampler(goal_keys=["missing"]))
    with pytest.raises(KeyError, match="goal_keys"):
        rb.sample(8)


class _Fixed(RandomSampler):
    """Always the same anchor row (isolates the offset law from the anchor law)."""

    def __init__(self, row):
        self.row = row

    def sample(self, storage, batch_size):
        return torch.full((batch_size,), self.row, dtype=torch.int64), {}


# -- OGBench's laws ----------------------------------------------------------------------------------


def exact_law(mix, t, length, convention, grid=1 << 12):
    """The probability of every future offset for an anchor at step ``t`` of an episode of ``length``
    transitions, exactly: the law is a step function of its uniform, whose steps fall on multiples of
    2**-12 in these cases, so the midpoints of a 2**12 grid weigh each step by its exact length."""
    u = (np.arange(grid) + 0.5) / grid
    left = np.full(grid, length - t - (convention == "ogbench"), dtype=np.int64)
    d = mix.offsets(u if mix.draws_offset else None, left, np.full(grid, t, dtype=np.int64), convention)
    return np.bincount(d, minlength=length + 1) / grid


def test_the_issues_four_transition_example_exactly():
    """One trajectory of 4 transitions, p_future=1, geometric gamma=0.5 (issue 27): OGBench's future offsets
    from t=0 are 1, 2, 3 with 0.5, 0.25, 0.25 (never the next state of the last transition, offset 4), and
    from t=3 the goal is the current state; HER's convention keeps the old law, 0.5/0.25/0.125/0.125."""
    mix = GoalMix(p_future=1.0, future="geometric", gamma=0.5)
    np.testing.assert_array_equal(exact_law(mix, 0, 4, "ogbench"), [0, 0.5, 0.25, 0.25, 0])
    np.testing.assert_array_equal(exact_law(mix, 3, 4, "ogbench"), [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(exact_law(mix, 0, 4, "her"), [0, 0.5, 0.25, 0.125, 0.125])
    np.testing.assert_array_equal(exact_law(mix, 3, 4, "her"), [0, 1, 0, 0, 0])
    # uniform: round of a continuous uniform between t + 1 and L - 1: the end offsets at half weight
    uniform = GoalMix(p_future=1.0, future="uniform")
    np.testing.assert_array_equal(exact_law(uniform, 0, 4, "ogbench"), [0, 0.25, 0.5, 0.25, 0])
    np.testing.assert_array_equal(exact_law(uniform, 2, 4, "ogbench"), [0, 1, 0, 0, 0])
    np.testing.assert_array_equal(exact_law(uniform, 3, 4, "ogbench"), [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(exact_law(uniform, 0, 4, "her"), [0, 0.25, 0.25, 0.25, 0.25])

    # the same through a buffer: from t=3 every goal is the current state, a success (reward 0 with
    # gc_negative); from t=0 the offsets follow 0.5/0.25/0.25
    def sample(t, n):
        sampler = GoalSampler(future="geometric", gamma=0.5, negative_reward=True, sampler=_Fixed(t))
        rb, _ = online(sampler, lengths=[4], seed=3)
        return rb.sample(n)

    last = sample(3, 1000)
    assert (last["goal", "distance"] == 0).all() and (last["goal", "kind"] == FUTURE).all()
    assert last["goal", "success"].all() and (last["goal", "reward"] == 0).all()
    assert torch.equal(last["goal", "observation"], last["observation"])
    d = sample(0, 40_000)["goal", "distance"].numpy()
    ok, stat, df = chi2_ok(np.bincount(d, minlength=5)[1:], [0.5, 0.25, 0.25, 0])
    assert ok, (stat, df)


@pytest.mark.parametrize("name", sorted(og.CONFIGS))
def test_ogbench_configs_follow_gcdataset_laws(name):
    """Every goal OGBench's GCDataset/HGCDataset gives under each shipped config (value goals with their
    reward, actor goals, low and high actor goals, high actor targets), as pairs (anchor, goal state),
    against a numpy re-derivation of upstream's laws: two-sample chi-square, fixed seeds, 300k samples."""
    config = og.CONFIGS[name]
    n = 300_000
    rb, _ = online(og.our_sampler(config), lengths=og.LENGTHS, seed=7)
    ours = og.our_cells(rb.sample(n), config)
    theirs = og.upstream_cells(og.reference_batch(og.LENGTHS, config, n, np.random.default_rng(7)), config)
    for field in og.fields(config):
        ok, stat, df, one_sided = og.same_law(ours[field], theirs[field])
        assert ok, (field, stat, df, one_sided)


def test_the_old_law_differs_from_gcdatasets():
    """The comparison can fail: HER's convention (the law before issue 27) is told apart from GCDataset's."""
    config = og.CONFIGS["CRL"]
    n = 300_000
    sampler = og.our_sampler(config)
    her = GoalSampler(future="geometric", gamma=0.99, actor={"future": "uniform"}, convention="her")
    for candidate, differs in ((sampler, False), (her, True)):
        rb, _ = online(candidate, lengths=og.LENGTHS, seed=7)
        ours = og.our_cells(rb.sample(n), config)
        theirs = og.upstream_cells(og.reference_batch(og.LENGTHS, config, n, np.random.default_rng(7)), config)
        assert (not og.same_law(ours["value_goals"], theirs["value_goals"])[0]) == differs
        assert (not og.same_law(ours["actor_goals"], theirs["actor_goals"])[0]) == differs
