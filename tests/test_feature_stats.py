"""Feature statistics: equal to numpy over the whole data (exact cases), within the documented bound
(bucketed percentiles), recorded by every build in one pass, shown by ``info``, readable as LeRobot's
``stats.json``, and absent (None) for builds made before they were recorded."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from datasets_hub.buffers.feature_stats import (
    EXACT_DISTINCT,
    RELATIVE_ERROR,
    ZERO_BAND,
    FeatureStats,
    compute_feature_stats,
    lerobot_stats,
    stats_arrays,
)
from datasets_hub.build.format import MANIFEST, write_manifest_checksum
from datasets_hub.build.pipeline import build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader


def feed(columns: dict, cuts: list[int]) -> dict:
    """The statistics of ``columns`` ({key: array [N, ...]}) fed in batches split at ``cuts``."""
    stats = FeatureStats()
    n = len(next(iter(columns.values())))
    edges = [0, *cuts, n]
    for a, b in itertools.pairwise(edges):
        td = TensorDict({k: torch.from_numpy(np.ascontiguousarray(v[a:b])) for k, v in columns.items()}, [b - a])
        stats.update(td)
    return stats.result()


def numpy_stats(x: np.ndarray, axes: tuple[int, ...]) -> dict[str, np.ndarray]:
    x = x.astype(np.float64)
    return {
        "mean": x.mean(axis=axes),
        "std": x.std(axis=axes),
        "min": x.min(axis=axes),
        "max": x.max(axis=axes),
        "q01": np.percentile(x, 1, axis=axes),
        "q99": np.percentile(x, 99, axis=axes),
    }


def assert_equal_to_numpy(entry: dict, expected: dict, shape: tuple[int, ...]) -> None:
    """min, max and percentiles exactly (float rounding aside); mean and std as closely as two
    float64 computations of them agree (merged moments vs numpy's two passes)."""
    got = stats_arrays(entry)
    for name, want in expected.items():
        rtol = 1e-9 if name in ("mean", "std") else 1e-12
        np.testing.assert_allclose(got[name], np.reshape(want, shape), rtol=rtol, atol=1e-12, err_msg=name)


def test_vectors_integers_and_scalars_equal_numpy_in_any_split():
    rng = np.random.default_rng(0)
    n = 3001
    state = (rng.normal(size=(n, 5)) * [1, 10, 100, 1e-3, 1e6] + [0, -5, 1e8, 2, 0]).astype(np.float32)
    action = rng.integers(-7, 9, size=(n, 2)).astype(np.int64)
    reward = rng.normal(size=(n, 1)).astype(np.float64)
    columns = {"observation": state, "action": action, "reward": reward}
    for cuts in ([], [1], [17, 1000, 1001, 2999]):
        result = feed(columns, cuts)
        assert_equal_to_numpy(result["observation"], numpy_stats(state, (0,)), (5,))
        assert_equal_to_numpy(result["action"], numpy_stats(action, (0,)), (2,))
        assert_equal_to_numpy(result["reward"], numpy_stats(reward, (0,)), (1,))
        assert result["observation"]["q_rel_error"] == 0.0 and result["observation"]["count"] == n
        assert result["observation"]["dtype"] == "float32" and result["action"]["shape"] == [2]


def test_images_per_channel_hwc_and_chw_exact():
    rng = np.random.default_rng(1)
    hwc = rng.integers(0, 256, size=(50, 6, 7, 3), dtype=np.uint8)
    hwc[:, :, :, 2] //= 4  # channels differ
    chw = np.ascontiguousarray(hwc.transpose(0, 3, 1, 2))
    result = feed(
        {"pixels": hwc, "camera": chw, "depth": rng.integers(-300, 300, (50, 4, 4, 1)).astype(np.int16)}, [7, 8]
    )
    assert result["pixels"]["shape"] == [1, 1, 3] and result["camera"]["shape"] == [3, 1, 1]
    assert_equal_to_numpy(result["pixels"], numpy_stats(hwc, (0, 1, 2)), (1, 1, 3))
    assert_equal_to_numpy(result["camera"], numpy_stats(chw, (0, 2, 3)), (3, 1, 1))
    depth = result["depth"]
    assert depth["shape"] == [1, 1, 1] and depth["q_rel_error"] == 0.0


def test_long_byte_runs_counted_exactly():
    """Images whose channels hold long runs of odd length, one channel holding every byte value and
    one a single value, and a signed byte key: exact, as numpy."""
    rng = np.random.default_rng(4)
    rows = 3001
    hwc = rng.integers(0, 256, size=(rows, 11, 11, 3), dtype=np.uint8)
    hwc[:, :, :, 1] = 7
    hwc[-1, -1, -1, 2] = 255  # the odd length's last byte, and the channel's max
    hwc[:, :, :, 2] //= 2
    signed = (hwc[..., :1].astype(np.int16) - 128).astype(np.int8)
    result = feed({"pixels": hwc, "signed": signed}, [])
    assert_equal_to_numpy(result["pixels"], numpy_stats(hwc, (0, 1, 2)), (1, 1, 3))
    assert_equal_to_numpy(result["signed"], numpy_stats(signed, (0, 1, 2)), (1, 1, 1))


def test_large_batches_equal_small_ones_and_numpy():
    """A batch of many blocks whose first rows already show too many distinct values (buckets from the
    start, cache-sized blocks) gives exactly the statistics of the same rows fed in small batches
    (exact counts first, buckets after the switch), for float32, float64 and int32 keys and a NaN."""
    rng = np.random.default_rng(5)
    n = 3 * EXACT_DISTINCT + 20000  # several blocks of every key
    state = (rng.normal(size=(n, 3)) * [1.0, 1e3, 1e-2] + [0.0, 5.0, -3.0]).astype(np.float32)
    state[n // 2, 1] = np.nan
    wide = rng.normal(size=(n, 2)) * 10.0 ** rng.integers(-5, 5, (n, 2))
    counter = rng.integers(-(2**31), 2**31 - 1, size=(n, 1)).astype(np.int32)
    columns = {"observation": state, "wide": wide, "counter": counter}
    whole = feed(columns, [])
    pieces = feed(columns, list(range(9000, n, 9000)))  # below the length that settles a key at once
    assert sorted(whole) == sorted(pieces) == ["counter", "observation", "wide"]
    for key in whole:
        exact = {f for f in whole[key] if f not in ("mean", "std")}
        assert {f: whole[key][f] for f in exact} == {f: pieces[key][f] for f in exact}, key
        for name in ("mean", "std"):
            np.testing.assert_allclose(stats_arrays(whole[key])[name], stats_arrays(pieces[key])[name], rtol=1e-12)
        assert whole[key]["q_rel_error"] == RELATIVE_ERROR
    values = state.astype(np.float64)
    got = stats_arrays(whole["observation"])
    assert whole["observation"]["nonfinite"] == 1
    np.testing.assert_array_equal(got["min"], np.nanmin(values, axis=0))
    np.testing.assert_array_equal(got["max"], np.nanmax(values, axis=0))
    np.testing.assert_allclose(got["mean"], np.nanmean(values, axis=0), rtol=1e-9)
    np.testing.assert_allclose(got["std"], np.nanstd(values, axis=0), rtol=1e-9)
    for key, values in (("wide", wide), ("counter", counter)):
        moments = {k: v for k, v in numpy_stats(values, (0,)).items() if not k.startswith("q")}
        assert_equal_to_numpy(whole[key], moments, (values.shape[1],))


def test_stable_moments_on_a_large_offset():
    x = (1e9 + np.arange(100000) % 7).astype(np.float64)[:, None]
    got = stats_arrays(feed({"x": x}, [3, 50000])["x"])
    np.testing.assert_allclose(got["std"], x.std(axis=0), rtol=1e-9)
    np.testing.assert_allclose(got["mean"], x.mean(axis=0), rtol=1e-15)


def test_nonfinite_values_are_left_out_and_counted():
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    x[3, 0], x[5, 0], x[7, 1] = np.nan, np.inf, -np.inf
    result = feed({"x": x}, [4])["x"]
    assert result["nonfinite"] == 3
    for c in range(2):
        col = x[:, c][np.isfinite(x[:, c])].astype(np.float64)
        got = stats_arrays(result)
        assert got["mean"][c] == pytest.approx(col.mean(), rel=1e-12)
        assert got["std"][c] == pytest.approx(col.std(), rel=1e-12)
        assert got["q01"][c] == pytest.approx(np.percentile(col, 1), rel=1e-12)
        assert got["max"][c] == col.max()


def test_many_distinct_values_switch_to_buckets_within_the_bound():
    rng = np.random.default_rng(2)
    n = 2 * EXACT_DISTINCT + 123
    x = np.concatenate([rng.normal(size=(n, 2)) * [1.0, 1e4], np.zeros((50, 2))]).astype(np.float32)
    result = feed({"x": x}, [1000, EXACT_DISTINCT + 5])["x"]
    assert result["q_rel_error"] == RELATIVE_ERROR
    got = stats_arrays(result)
    sorted_x = np.sort(x.astype(np.float64), axis=0)
    for name, q in (("q01", 1.0), ("q99", 99.0)):
        h = (len(x) - 1) * q / 100
        around = np.abs(sorted_x[[int(np.floor(h)), int(np.ceil(h))]]).max(axis=0)
        bound = RELATIVE_ERROR * around + ZERO_BAND
        exact = np.percentile(x.astype(np.float64), q, axis=0)
        assert (np.abs(got[name] - exact) <= bound).all(), (name, got[name], exact)
    # the moments stay exact
    np.testing.assert_allclose(got["mean"], x.astype(np.float64).mean(axis=0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["std"], x.astype(np.float64).std(axis=0), rtol=1e-10)


def test_keys_chosen_from_a_ted_batch():
    n = 6
    td = TensorDict(
        {
            "observation": torch.arange(n * 2, dtype=torch.float32).reshape(n, 2),
            "episode": torch.zeros(n, dtype=torch.int64),
            "step": torch.arange(n),
            "done": torch.zeros(n, 1, dtype=torch.bool),
            "next": {
                "observation": torch.arange(n * 2, dtype=torch.float32).reshape(n, 2) + 2,
                "reward": torch.arange(n, dtype=torch.float32)[:, None],
                "done": torch.zeros(n, 1, dtype=torch.bool),
                "terminated": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        [n],
    )
    stats = FeatureStats()
    stats.update(td)
    assert sorted(stats.result()) == ["next/reward", "observation"]
    with pytest.raises(ValueError, match="per-row shape"):
        stats.update(td.set("observation", torch.zeros(n, 3)))


def test_lerobot_layout():
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, size=(10, 4, 4, 3), dtype=np.uint8)
    state = rng.normal(size=(10, 2)).astype(np.float32)
    result = feed({"image": img, "state": state}, [])
    layout = lerobot_stats({"observation/image": result["image"], "observation/state": result["state"]})
    assert sorted(layout) == ["observation.image", "observation.state"]
    image = np.asarray(layout["observation.image"]["mean"])
    assert image.shape == (3, 1, 1)
    np.testing.assert_allclose(image[:, 0, 0], img.reshape(-1, 3).mean(axis=0) / 255.0, rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(layout["observation.image"]["std"])[:, 0, 0], img.reshape(-1, 3).std(axis=0) / 255.0, rtol=1e-12
    )
    assert layout["observation.state"]["count"] == [10]
    assert set(layout["observation.state"]) == {"mean", "std", "min", "max", "q01", "q99", "count"}
    json.dumps(layout)  # plain JSON


# -------------------------------------------------------------------------------------------- builds
def fake_build(lengths=(30, 5, 17, 40, 8), chunks=3):
    spec = DatasetSpec(id="fake/stats", loader="fake", params={"lengths": list(lengths), "chunks": chunks})
    return build(spec, FakeLoader(), {}, [])


def test_every_build_records_statistics_equal_to_numpy_over_its_rows():
    path = fake_build()
    manifest = json.loads((path / MANIFEST).read_text())
    features = manifest["stats"]["features"]
    assert sorted(features) == ["action", "next/reward", "observation"]
    rows = DatasetStorage(path)[:]
    for key, shape in (("observation", (3,)), ("action", (2,)), ("next/reward", (1,))):
        values = rows.get(tuple(key.split("/"))).numpy()
        assert_equal_to_numpy(features[key], numpy_stats(values, (0,)), shape)
    # computed on demand over the storage (one batch where the build had three chunks): the same numbers,
    # mean and std to float rounding (merged moments depend on the split in their last bits)
    again = compute_feature_stats(DatasetStorage(path))
    assert sorted(again) == sorted(features)
    for key, entry in features.items():
        assert {k: v for k, v in again[key].items() if k not in ("mean", "std")} == {
            k: v for k, v in entry.items() if k not in ("mean", "std")
        }
        for name in ("mean", "std"):
            np.testing.assert_allclose(stats_arrays(again[key])[name], stats_arrays(entry)[name], rtol=1e-12)


def test_old_builds_without_statistics_still_open():
    from datasets_hub.hub import DatasetInfo

    path = fake_build((4, 6), chunks=1)
    manifest = json.loads((path / MANIFEST).read_text())
    del manifest["stats"]["features"]  # as builds made before statistics were recorded
    (path / MANIFEST).write_text(json.dumps(manifest))
    write_manifest_checksum(path)
    storage = DatasetStorage(path)  # opens as before
    assert len(storage) == 10
    card = DatasetInfo(
        id="fake/stats", loader="fake", params={}, resources=[], metadata={}, source="", cached=True, manifest=manifest
    )
    assert card.feature_stats is None and card.lerobot_stats() is None
    assert sorted(compute_feature_stats(storage)) == ["action", "next/reward", "observation"]


def test_float32_values_fall_in_the_buckets_of_their_float64_copies():
    """The float32 bucket index (from a float32's own bits) is the float64 one: the same percentiles."""
    import numpy as np

    from datasets_hub.buffers.feature_stats import ZERO_BAND, _bucket_index

    rng = np.random.default_rng(3)
    values = rng.standard_normal(20001) * 10.0 ** rng.integers(-12, 12, 20001)
    edges = [0.0, -0.0, ZERO_BAND, -ZERO_BAND, ZERO_BAND * 1.001, 3e38, -3e38, 1e-40, -1e-40, 1.0, -1.0]
    values = np.concatenate([values, edges]).astype(np.float32).reshape(2, -1)
    assert np.array_equal(_bucket_index(values), _bucket_index(values.astype(np.float64)))


def test_a_state_saved_and_restored_goes_on_exactly(tmp_path):
    """What a resumed build relies on: statistics restored from ``state()`` (through torch.save and a
    weights-only load) and fed the remaining batches equal those of one uninterrupted pass, in every
    regime (uint8 counts, exact distinct values, buckets after the switch, NaN)."""
    rng = np.random.default_rng(3)

    def batch(i: int) -> TensorDict:
        n = 400
        wide = rng.normal(size=(n, 2)).astype(np.float32) * (i + 1)  # passes EXACT_DISTINCT: buckets
        wide[i, 0] = np.nan
        return TensorDict(
            {
                "observation": torch.from_numpy(wide),
                "few": torch.from_numpy(rng.integers(0, 5, (n, 3)).astype(np.float64)),  # exact counts
                "pixels": torch.from_numpy(rng.integers(0, 256, (n, 4, 4, 3), dtype=np.uint8)),
            },
            batch_size=[n],
        )

    batches = [batch(i) for i in range(60)]
    whole = FeatureStats()
    for b in batches:
        whole.update(b)
    first = FeatureStats()
    for b in batches[:30]:
        first.update(b)
    torch.save(first.state(), tmp_path / "state.pt")
    resumed = FeatureStats.from_state(torch.load(tmp_path / "state.pt", weights_only=True))
    for b in batches[30:]:
        resumed.update(b)
    assert resumed.result() == whole.result()
    assert whole.result()["observation"]["q_rel_error"] > 0  # the bucket regime was reached
    assert FeatureStats.from_state(FeatureStats().state()).result() == {}


def assert_same_in_pieces(x: np.ndarray, cuts: list[int], whole: dict) -> None:
    """``x`` fed in pieces gives ``whole`` (its statistics fed at once): every field equal, mean and std
    to float rounding (merged moments depend on the split in their last bits)."""
    pieces = feed({"x": x}, cuts)["x"]
    assert {k: v for k, v in pieces.items() if k not in ("mean", "std")} == {
        k: v for k, v in whole.items() if k not in ("mean", "std")
    }
    for name in ("mean", "std"):
        np.testing.assert_allclose(stats_arrays(pieces)[name], stats_arrays(whole)[name], rtol=1e-12)


def test_the_first_batch_settles_the_regime_only_on_proof_of_too_many_distinct_values():
    """A first batch is sent to buckets at once only when it proves more than EXACT_DISTINCT distinct
    values per channel (from the low 16 bits, else by a sort): exactly EXACT_DISTINCT distinct values
    with distinct low bits stay exact, one more goes to buckets, and values whose low bits all agree
    (multiples of a power of two) are counted by the sort; the result is the one of small batches."""
    ulp = np.float32(2.0**-23)
    distinct = np.float32(1.0) + np.arange(EXACT_DISTINCT, dtype=np.float32) * ulp  # low 16 bits all differ
    few = np.tile(distinct, 2)[:, None]
    result = feed({"x": few}, [])["x"]
    assert result["q_rel_error"] == 0.0
    assert_equal_to_numpy(result, numpy_stats(few, (0,)), (1,))
    assert_same_in_pieces(few, [1000, 20000], result)

    many = np.tile(np.append(distinct, np.float32(3.0)), 2)[:, None]  # EXACT_DISTINCT + 1 distinct values
    result = feed({"x": many}, [])["x"]
    assert result["q_rel_error"] == RELATIVE_ERROR
    assert_same_in_pieces(many, [1000, 20000], result)

    # low 16 bits all zero: only the sort tells that these EXACT_DISTINCT + 1 values are distinct
    mantissas, exponents = np.meshgrid(1 + np.arange(128) / 128, 2.0 ** np.arange(-64, 65))
    coarse = (mantissas * exponents).astype(np.float32).reshape(-1)[: EXACT_DISTINCT + 1]
    assert ((coarse.view(np.uint32) & 0xFFFF) == 0).all() and np.unique(coarse).size == EXACT_DISTINCT + 1
    coarse = np.tile(coarse, 2)[:, None]
    result = feed({"x": coarse}, [])["x"]
    assert result["q_rel_error"] == RELATIVE_ERROR
    assert_same_in_pieces(coarse, [1000, 20000], result)


def test_constant_and_empty_channels_in_the_bucket_regime():
    """A key in buckets (one channel with many distinct values) keeps its constant channel's percentiles
    exact (the bucket's value is clipped to the exact min and max), its integer channel within the
    bound, and gives null for a channel with no finite value."""
    rng = np.random.default_rng(6)
    n = 3 * EXACT_DISTINCT
    x = np.stack(
        [rng.normal(size=n), np.full(n, -2.5), np.full(n, np.nan), rng.integers(-50, 50, n).astype(np.float64)],
        axis=1,
    )
    result = feed({"x": x}, [])["x"]
    assert result["q_rel_error"] == RELATIVE_ERROR
    assert result["nonfinite"] == n
    for name in ("q01", "q99", "min", "max", "mean"):
        assert result[name][1] == -2.5 and result[name][2] is None
    assert result["std"][1] == 0.0
    for name, q in (("q01", 1.0), ("q99", 99.0)):
        exact = np.percentile(x[:, 3], q)
        assert abs(result[name][3] - exact) <= RELATIVE_ERROR * abs(exact) + ZERO_BAND
    assert_same_in_pieces(x, [7, 5000, 20000], result)


def test_float32_counts_equal_those_of_the_float64_buckets_in_every_band():
    """float32 keys count their values' high 16 bits and fold them into buckets: every statistic but
    mean and std (float rounding) equals that of the same values as float64 (which are bucketed from
    their own bits), for values in the zero band, subnormals, both signs, the float32 extremes, a key
    wider than HIGH_HALF_CHANNELS, and a state saved and restored midway (the counts folded there)."""
    from datasets_hub.buffers.feature_stats import HIGH_HALF_CHANNELS

    rng = np.random.default_rng(7)
    n = 3 * EXACT_DISTINCT
    x = rng.standard_normal((n, 6)) * 10.0 ** rng.integers(-30, 30, (n, 6))
    x[:, 1] = np.abs(x[:, 1])  # positive only
    x[:, 2] = -np.abs(x[:, 2])  # negative only
    edges = [0.0, -0.0, ZERO_BAND / 2, -ZERO_BAND / 2, ZERO_BAND, -ZERO_BAND * 1.5, 1e-42, -1e-42, 3.4e38, -3.4e38]
    x[: len(edges), 3] = edges
    x[:, 4] = rng.standard_normal(n) * 1e-9  # mostly inside the zero band
    x[:, 5] = 5.0 + rng.integers(0, 3, n) * 2.0**-20  # all in one or two buckets
    wide = rng.standard_normal((n, HIGH_HALF_CHANNELS + 1))
    as32 = {"x": x.astype(np.float32), "wide": wide.astype(np.float32)}
    as64 = {k: v.astype(np.float64) for k, v in as32.items()}  # the same values

    def fed(columns: dict, restore_at: int | None) -> dict:
        stats = FeatureStats()
        for a, b in itertools.pairwise([0, 5000, n // 2, n]):
            if a == restore_at:
                stats = FeatureStats.from_state(stats.state())
            stats.update(TensorDict({k: torch.from_numpy(v[a:b]) for k, v in columns.items()}, [b - a]))
        return stats.result()

    reference = fed(as64, None)
    for restore_at in (None, n // 2):
        got = fed(as32, restore_at)
        for key in ("x", "wide"):
            assert got[key]["q_rel_error"] == RELATIVE_ERROR
            for name in ("min", "max", "q01", "q99", "count", "nonfinite", "shape"):
                assert got[key][name] == reference[key][name], (key, name, restore_at)
            for name in ("mean", "std"):
                np.testing.assert_allclose(stats_arrays(got[key])[name], stats_arrays(reference[key])[name], rtol=1e-12)


def test_moments_of_drifting_and_offset_keys_equal_numpy():
    """Moments are summed about a shift (the previous block's mean): a key that drifts far from it
    between blocks (a clock), one on a large offset whose first row is NaN (no shift to start from), and
    a constant one stay within the documented 1e-9 of numpy's two passes, in any split."""
    rng = np.random.default_rng(8)
    n = 300_000  # several blocks
    clock = (np.arange(n) * 1e3 + rng.standard_normal(n))[:, None]
    offset = 1e9 + rng.standard_normal((n, 2))
    offset[0, 0] = np.nan
    constant = np.full((n, 1), 0.1, np.float32)
    for cuts in ([], [1, 7, 150_000]):
        result = feed({"clock": clock, "offset": offset, "constant": constant}, cuts)
        for key, values in (("clock", clock), ("offset", offset), ("constant", constant)):
            as64 = values.astype(np.float64)
            got = stats_arrays(result[key])
            np.testing.assert_allclose(got["mean"], np.nanmean(as64, axis=0), rtol=1e-12)
            np.testing.assert_allclose(got["std"], np.nanstd(as64, axis=0), rtol=1e-9, atol=1e-12)


def test_a_state_written_before_the_shifted_sums_resumes():
    """States written by the code before the moments were sums about a shift lack ``shift`` (they are
    otherwise the same layout): restored, they go on to the statistics of an uninterrupted pass, every
    field equal but mean and std, which agree to float rounding."""
    rng = np.random.default_rng(9)
    n = 4 * EXACT_DISTINCT
    columns = {
        "observation": rng.standard_normal((n, 3)).astype(np.float32),
        "reward": rng.standard_normal((n, 1)),
        "pixels": rng.integers(0, 256, (n, 2, 2, 3), dtype=np.uint8),
    }
    half = {k: torch.from_numpy(v[: n // 2]) for k, v in columns.items()}
    rest = {k: torch.from_numpy(v[n // 2 :]) for k, v in columns.items()}
    first = FeatureStats()
    first.update(TensorDict(half, [n // 2]))
    state = first.state()
    for _, attrs in state["keys"]:
        attrs.pop("shift", None)  # as the earlier code wrote them
    resumed = FeatureStats.from_state(state)
    resumed.update(TensorDict(rest, [n - n // 2]))
    whole = feed(columns, [n // 2])
    got = resumed.result()
    for key in whole:
        assert {k: v for k, v in got[key].items() if k not in ("mean", "std")} == {
            k: v for k, v in whole[key].items() if k not in ("mean", "std")
        }
        for name in ("mean", "std"):
            np.testing.assert_allclose(stats_arrays(got[key])[name], stats_arrays(whole[key])[name], rtol=1e-12)
