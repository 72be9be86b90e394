"""The ogbench loader: OGBench-format files (regular, visual, discrete, multi-shard) converted and
compared value by value with a plain loop over the same arrays; the hub path served from 127.0.0.1."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
import torch

from datasets_hub.errors import ChecksumMismatch, CorruptFile, InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, LoaderContext
from datasets_hub.loaders.ogbench.loader import (
    BASE_URL,
    HF_MIRROR,
    HUNDRED_M,
    NUM_SHARDS,
    OGBenchLoader,
    dataset_names,
    environment_card,
)

from fixtures.ogbench_files import expected_transitions, write_ogbench

LENGTHS = [6, 0, 3, 9, 1]  # a single-row trajectory (0 transitions) mid-file, terminals mid-file and at the end


def convert(files, dataset_id="ogbench/cube-single-play-v0", chunk_rows=7, **params):
    spec = DatasetSpec(id=dataset_id, loader="ogbench", params=params)
    ctx = LoaderContext(chunk_rows=chunk_rows)
    chunks = list(OGBenchLoader().episodes(spec, files, ctx))
    return torch.cat(chunks), chunks, ctx.notes


def check(td, want):
    np.testing.assert_array_equal(td["observation"].numpy(), want["observation"])
    np.testing.assert_array_equal(td["next", "observation"].numpy(), want["next_observation"])
    np.testing.assert_array_equal(td["action"].numpy(), want["action"])
    np.testing.assert_array_equal(td["episode"].numpy(), want["episode"])
    np.testing.assert_array_equal(td["next", "truncated"].numpy().reshape(-1), want["truncated"])
    assert not td["next", "terminated"].any()
    assert torch.isnan(td["next", "reward"]).all() and td["next", "reward"].shape == (len(td), 1)
    for key in ("qpos", "qvel", "button_states"):
        if key in want:
            np.testing.assert_array_equal(td["info", key].numpy(), want[key])
            np.testing.assert_array_equal(td["next", "info", key].numpy(), want["next_" + key])


@pytest.mark.parametrize("compressed", [True, False])
@pytest.mark.parametrize("chunk_rows", [1, 7, 10_000])
def test_regular_file_row_by_row(tmp_path, compressed, chunk_rows):
    arrays = write_ogbench(tmp_path / "x.npz", LENGTHS, compressed=compressed)
    td, chunks, notes = convert({"cube-single-play-v0.npz": tmp_path / "x.npz"}, chunk_rows=chunk_rows)
    check(td, expected_transitions([arrays]))
    assert td["observation"].dtype == torch.float32 and td["info", "qpos"].dtype == torch.float64
    assert td["info", "button_states"].dtype == torch.int64
    assert notes["episodes"] == 4 and notes["transitions"] == sum(LENGTHS)
    assert notes["single_row_trajectories_skipped"] == 1
    assert notes["per_state_info"] == ["button_states", "qpos", "qvel"]
    if chunk_rows == 1:
        assert len(chunks) == 4  # one whole trajectory per chunk when a trajectory exceeds the budget


def test_visual_and_discrete_keep_upstream_dtypes(tmp_path):
    arrays = write_ogbench(tmp_path / "v.npz", [4, 5], visual=True, info=False)
    td, _, _ = convert({"visual-cube-single-play-v0.npz": tmp_path / "v.npz"}, "ogbench/visual-cube-single-play-v0")
    assert td["observation"].dtype == torch.uint8 and td["observation"].shape == (9, 4, 4, 3)
    check(td, expected_transitions([arrays]))
    arrays = write_ogbench(tmp_path / "p.npz", [3, 3], visual=True, discrete=True, info=False)
    td, _, _ = convert({"powderworld-easy-play-v0.npz": tmp_path / "p.npz"}, "ogbench/powderworld-easy-play-v0")
    assert td["action"].dtype == torch.int32
    check(td, expected_transitions([arrays]))


def test_val_split_param_and_val_ids_name_the_val_file():
    loader = OGBenchLoader()
    train = loader.resources(DatasetSpec(id="ogbench/antmaze-large-navigate-v0", loader="ogbench"))
    val = loader.resources(
        DatasetSpec(id="ogbench/antmaze-large-navigate-v0", loader="ogbench", params={"split": "val"})
    )
    val_id = loader.resources(
        DatasetSpec(
            id="ogbench/antmaze-large-navigate-v0-val",
            loader="ogbench",
            params={"dataset": "antmaze-large-navigate-v0", "split": "val"},
        )
    )
    file = "antmaze-large-navigate-v0.npz"
    assert [r.urls for r in train] == [(f"{BASE_URL}/{file}", f"{HF_MIRROR}/{file}")]
    file = "antmaze-large-navigate-v0-val.npz"
    assert [r.urls for r in val] == [r.urls for r in val_id] == [(f"{BASE_URL}/{file}", f"{HF_MIRROR}/{file}")]


def test_hundred_million_sets_stream_shard_by_shard(tmp_path):
    name = "cube-double-play-100m-v0"
    loader = OGBenchLoader()
    every = loader.resources(DatasetSpec(id=f"ogbench/{name}", loader="ogbench"))
    assert len(every) == NUM_SHARDS
    assert every[7].name == f"{name}/cube-double-play-v0-007.npz"
    assert every[7].urls == (f"{BASE_URL}/{name}/cube-double-play-v0-007.npz",)
    spec_params = {"shards": [2, 0]}
    picked = loader.resources(DatasetSpec(id=f"ogbench/{name}", loader="ogbench", params=spec_params))
    assert [r.name for r in picked] == [f"{name}/cube-double-play-v0-000.npz", f"{name}/cube-double-play-v0-002.npz"]
    files, arrays = {}, []
    row = 0
    for resource, lengths in zip(picked, ([5, 4], [3, 0, 7]), strict=True):
        path = tmp_path / resource.name
        arrays.append(write_ogbench(path, lengths, first_row=row))
        row += sum(length + 1 for length in lengths)
        files[resource.name] = path
    td, _, notes = convert(files, f"ogbench/{name}", chunk_rows=4, **spec_params)
    check(td, expected_transitions(arrays))
    assert [f["file"] for f in notes["files"]] == [r.name for r in picked]
    val = loader.resources(DatasetSpec(id=f"ogbench/{name}", loader="ogbench", params={"shards": [3], "split": "val"}))
    assert val[0].name == f"{name}/cube-double-play-v0-003-val.npz"


def test_bad_files_are_named_errors(tmp_path):
    arrays = write_ogbench(tmp_path / "x.npz", [3, 2], compressed=False)
    cut = dict(arrays, terminals=arrays["terminals"].copy())
    cut["terminals"][-1] = 0.0
    np.savez(tmp_path / "cut.npz", **cut)
    with pytest.raises(LoaderError, match="last row is not a terminal"):
        convert({"cube-single-play-v0.npz": tmp_path / "cut.npz"})
    np.savez(tmp_path / "no_actions.npz", observations=arrays["observations"], terminals=arrays["terminals"])
    with pytest.raises(LoaderError, match="'actions'"):
        convert({"cube-single-play-v0.npz": tmp_path / "no_actions.npz"})
    (tmp_path / "junk.npz").write_bytes(b"not a zip at all")
    with pytest.raises(CorruptFile):
        convert({"cube-single-play-v0.npz": tmp_path / "junk.npz"})
    data = (tmp_path / "x.npz").read_bytes()
    (tmp_path / "short.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises((CorruptFile, zipfile.BadZipFile)):
        convert({"cube-single-play-v0.npz": tmp_path / "short.npz"})


def test_params_are_checked():
    loader = OGBenchLoader()
    for params, match in (
        ({"split": "test"}, "split"),
        ({"shards": [0]}, "100M"),
        ({"bogus": 1}, "unknown parameter"),
        ({"mirror": "somewhere"}, "mirror"),
    ):
        with pytest.raises(InvalidParameter, match=match):
            loader.resources(DatasetSpec(id="ogbench/scene-play-v0", loader="ogbench", params=params))
    for shards in ([], [100], [1, 1], "all"):
        with pytest.raises(InvalidParameter, match="shards"):
            loader.resources(DatasetSpec(id="ogbench/scene-play-100m-v0", loader="ogbench", params={"shards": shards}))


def test_catalogue_lists_every_dataset_of_ogbench_1_2():
    import datasets_hub as dh

    names = dataset_names()
    assert len(names) == 85 and len([n for n in names if n.startswith("visual-")]) == 35
    ids = set(dh.list_datasets(loader="ogbench"))
    assert {f"ogbench/{n}" for n in names} <= ids
    assert {f"ogbench/{n}-val" for n in names} <= ids
    assert {f"ogbench/{n}" for n in HUNDRED_M} <= ids
    assert len(ids) == 85 * 2 + len(HUNDRED_M)


def _documented_pins() -> dict[str, tuple[int, str | None]]:
    """The table of docs/datasets/ogbench.md ("Sizes and checksums"): file -> (bytes, sha256 or None)."""
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[1] / "docs" / "datasets" / "ogbench.md"
    row = re.compile(r"^\| `([a-z0-9x-]+\.npz)` \| ([\d,]+) \| (?:`([0-9a-f]{64})`|[^|`]*) \|")
    return {m[1]: (int(m[2].replace(",", "")), m[3]) for m in map(row.match, page.read_text().splitlines()) if m}


def test_catalogue_pins_are_upstream_files_and_approximate_sizes_are_notes():
    """A pinned entry names exactly the file its id reads, at upstream's URL, with a positive byte
    count (and a sha256 where one is pinned); the loader carries the pin on every URL it tries (the
    mirrors hold the same bytes). Every pin is in the docs' table with the same figures, and the docs
    pin nothing the catalogue lacks. ``approx_size`` is text ("about X"), never a resource size."""
    import re

    from datasets_hub.catalogue import all_entries, resolve

    loader, pins, approx = OGBenchLoader(), {}, 0
    for dataset_id, (entry, _) in all_entries(["ogbench"]).items():
        if not dataset_id.startswith("ogbench/"):
            continue
        resources = entry.get("resources") or []
        if entry.get("approx_size") is not None:
            approx += 1
            assert re.fullmatch(r"about \d+(\.\d+)? [MG]B", entry["approx_size"]) and not resources, dataset_id
        if not resources:
            continue
        (res,) = loader.resources(resolve(dataset_id))
        (pin,) = resources
        assert pin["name"] == res.name and pin["url"] == f"{BASE_URL}/{res.name}", dataset_id
        assert isinstance(pin["size"], int) and pin["size"] > 0 and res.size == pin["size"]
        assert res.sha256 == pin.get("sha256") and (res.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", res.sha256))
        assert res.urls == (f"{BASE_URL}/{res.name}", f"{HF_MIRROR}/{res.name}")
        assert res.name not in pins, res.name  # one id per file
        pins[res.name] = (res.size, res.sha256)
    assert pins == _documented_pins()
    assert len(pins) == 67 and sum(sha is not None for _, sha in pins.values()) == 23 and approx == 1
    for name, (size, _) in pins.items():  # a validation split is a tenth of its training file, give or take
        if name.endswith("-val.npz") and name.replace("-val.npz", ".npz") in pins:
            assert 0.09 < size / pins[name.replace("-val.npz", ".npz")][0] < 0.11, name
    spec = resolve("ogbench/cube-double-play-v0", mirror="https://copy.example.org/og")
    (res,) = loader.resources(spec)
    assert res.urls[0] == "https://copy.example.org/og/cube-double-play-v0.npz" and res.size == 297435656
    (res,) = loader.resources(resolve("ogbench/cube-double-play-v0", url="https://x.example.org/mine.npz"))
    assert res.sha256 is None and res.size is None  # a file of the user's own: nothing pinned
    (res,) = loader.resources(resolve("ogbench/cube-triple-play-v0", split="val"))
    assert res.name == "cube-triple-play-v0-val.npz" and res.size is None  # pins go by file name only
    hundred = loader.resources(resolve("ogbench/scene-play-100m-v0", shards=[0]))
    assert hundred[0].urls == (f"{BASE_URL}/scene-play-100m-v0/scene-play-v0-000.npz",)  # not on the HF copy


def test_check_loader_contract(tmp_path):
    from datasets_hub.testing import check_loader

    write_ogbench(tmp_path / "scene-play-v0.npz", [4, 2, 5])
    spec = DatasetSpec(id="ogbench/scene-play-v0", loader="ogbench")
    assert check_loader(OGBenchLoader, spec, {"scene-play-v0.npz": tmp_path / "scene-play-v0.npz"})


# -- through the hub: served from 127.0.0.1, downloaded, built, loaded --------------------------------
def test_load_through_endpoint_mirror_and_sample(tmp_path, monkeypatch):
    import datasets_hub as dh

    from fixtures.http_server import serve_files

    arrays = write_ogbench(tmp_path / "f.npz", [8, 5, 11])
    want = expected_transitions([arrays])
    upstream_path = "datasets/ogbench/antmaze-teleport-navigate-v0.npz"  # BASE_URL's path + the file
    with serve_files({upstream_path: (tmp_path / "f.npz").read_bytes()}) as server:
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_OGBENCH", server.base_url)
        rb = dh.load("ogbench/antmaze-teleport-navigate-v0", batch_size=16)
        assert server.count(upstream_path) == 1
    data = rb[:]
    check(data, want)
    card = dh.info("ogbench/antmaze-teleport-navigate-v0")
    assert card.cached and card.notes["episodes"] == 3
    sampler = dh.GoalSampler(0.2, 0.5, 0.3, future="geometric", gamma=0.9)
    rb = dh.load("ogbench/antmaze-teleport-navigate-v0", batch_size=64, sampler=sampler)
    batch = rb.sample()
    assert batch["goal", "observation"].shape == (64, 5)


def test_hugging_face_mirror(tmp_path, monkeypatch):
    import datasets_hub as dh

    from fixtures.http_server import point_huggingface_hub_at, serve_files

    arrays = write_ogbench(tmp_path / "f.npz", [4, 6])
    with serve_files() as server:
        server.add_hf_file("mirror-org/ogbench", "scene-noisy-v0-val.npz", (tmp_path / "f.npz").read_bytes())
        point_huggingface_hub_at(server, monkeypatch, tmp_path / "hf-cache")
        rb = dh.load("ogbench/scene-noisy-v0-val", mirror="hf://datasets/mirror-org/ogbench")
        check(rb[:], expected_transitions([arrays]))


def test_upstream_down_falls_back_to_the_hugging_face_copy(tmp_path, monkeypatch):
    """Upstream answers 404 (its host rewritten to 127.0.0.1): the catalogue id is fetched from the
    Hugging Face copy (zhouzypaul/ogbench_datasets, upstream's names at its root), with no param."""
    import datasets_hub as dh

    from fixtures.http_server import point_huggingface_hub_at, serve_files

    arrays = write_ogbench(tmp_path / "f.npz", [5, 3])
    with serve_files() as server:
        server.add_hf_file(
            HF_MIRROR.split("datasets/", 1)[1], "cube-triple-play-v0-val.npz", (tmp_path / "f.npz").read_bytes()
        )
        point_huggingface_hub_at(server, monkeypatch, tmp_path / "hf-cache")
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_OGBENCH", server.base_url)
        rb = dh.load("ogbench/cube-triple-play-v0-val")
        assert server.count("datasets/ogbench/cube-triple-play-v0-val.npz") >= 1  # upstream was tried first
    check(rb[:], expected_transitions([arrays]))
    assert dh.info("ogbench/cube-triple-play-v0-val").metadata["approx_size"] == "about 101 MB"


def test_pinned_checksum_is_checked_on_every_mirror(tmp_path, monkeypatch):
    """A pin (sha256 + size) is checked whichever copy serves the file: the right bytes load through
    the Hugging Face fallback, other bytes are refused on both copies."""
    import datasets_hub as dh
    from datasets_hub import catalogue
    from datasets_hub.files import sha256_file

    from fixtures.http_server import point_huggingface_hub_at, serve_files

    arrays = write_ogbench(tmp_path / "good.npz", [4, 4])
    good = (tmp_path / "good.npz").read_bytes()
    pin = {"name": "scene-play-v0.npz", "url": f"{BASE_URL}/scene-play-v0.npz", "size": len(good)}
    catalogue.register_dataset("ogbench/pinned-copy", params={"dataset": "scene-play-v0"},
                               resources=[dict(pin, sha256=sha256_file(tmp_path / "good.npz"))])  # fmt: skip
    catalogue.register_dataset("ogbench/pinned-other", params={"dataset": "scene-play-v0"},
                               resources=[dict(pin, sha256="0" * 64)])  # fmt: skip
    try:
        with serve_files() as server:
            server.add_hf_file(HF_MIRROR.split("datasets/", 1)[1], "scene-play-v0.npz", good)
            point_huggingface_hub_at(server, monkeypatch, tmp_path / "hf-cache")
            monkeypatch.setenv("DATASETS_HUB_ENDPOINT_OGBENCH", server.base_url)
            check(dh.load("ogbench/pinned-copy")[:], expected_transitions([arrays]))
            server.add("datasets/ogbench/scene-play-v0.npz", good, corrupt=True)  # upstream back, but damaged
            with pytest.raises(ChecksumMismatch, match="every mirror failed"):
                dh.download("ogbench/pinned-other")
    finally:
        catalogue.unregister_dataset("ogbench/pinned-copy")
        catalogue.unregister_dataset("ogbench/pinned-other")


def test_shards_param_is_part_of_the_fingerprint(tmp_path, monkeypatch):
    import datasets_hub as dh

    from fixtures.http_server import serve_files

    name, stem = "scene-play-100m-v0", "scene-play-v0"
    files = {}
    for i in range(3):
        write_ogbench(tmp_path / f"{i}.npz", [3 + i, 2], first_row=100 * i)
        files[f"datasets/ogbench/{name}/{stem}-{i:03d}.npz"] = (tmp_path / f"{i}.npz").read_bytes()
    with serve_files(files) as server:
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_OGBENCH", server.base_url)
        one = dh.load(f"ogbench/{name}", shards=[0])
        two = dh.load(f"ogbench/{name}", shards=[0, 2])
    assert len(one) == 3 + 2 and len(two) == (3 + 2) + (5 + 2)
    assert one.storage.path != two.storage.path


def test_empty_per_row_arrays_are_skipped_and_noted(tmp_path):
    arrays = write_ogbench(tmp_path / "x.npz", [3, 4], info=False)
    np.savez(tmp_path / "e.npz", **arrays, button_states=np.zeros((len(arrays["terminals"]), 0), dtype=np.int64))
    td, _, notes = convert({"cube-single-play-v0.npz": tmp_path / "e.npz"})
    check(td, expected_transitions([arrays]))
    assert "info" not in td.keys() and notes["empty_arrays_skipped"] == ["button_states"]


# -- single-task rewards (task=) ---------------------------------------------------------------------
def test_task_rewards_follow_the_state_at_t_and_keep_episode_ends(tmp_path):
    """pointmaze-medium task 3: goal cell (4, 2) -> xy (4, 12), tolerance 1.0. Rows placed at the goal,
    at 0.99 and at 1.01 from it say which row's state the reward reads (t, as upstream) and the bound."""
    arrays = write_ogbench(tmp_path / "m.npz", [3, 4], info=False)  # rows 0..3 | 4..8
    qpos = np.full((9, 2), 50.0, dtype=np.float32)
    qpos[1] = (4.0, 12.0)  # at the goal
    qpos[2] = (4.0, 12.99)  # inside
    qpos[3] = (4.0, 12.0)  # the final row of episode 0: no transition of its own, only a next state
    qpos[5] = (5.01, 12.0)  # just outside
    qpos[8] = (4.0, 11.5)  # final row of episode 1
    np.savez(tmp_path / "m.npz", **arrays, qpos=qpos)
    td, _, notes = convert(
        {"pointmaze-medium-navigate-v0.npz": tmp_path / "m.npz"}, "ogbench/pointmaze-medium-navigate-v0", task=3
    )
    np.testing.assert_array_equal(td["next", "reward"].numpy().reshape(-1), [-1, 0, 0, -1, -1, -1, -1])
    np.testing.assert_array_equal(td["info", "success"].numpy().reshape(-1), [0, 1, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(td["next", "info", "success"].numpy().reshape(-1), [1, 1, 1, 0, 0, 0, 1])
    np.testing.assert_array_equal(td["next", "truncated"].numpy().reshape(-1), [0, 0, 1, 0, 0, 0, 1])
    assert not td["next", "terminated"].any() and td["next", "reward"].dtype == torch.float32
    assert "task 3" in notes["rewards"]
    assert notes["environment"]["env_id"] == "pointmaze-medium-singletask-task3-v0"  # upstream's single-task env


def test_task_rewards_of_manipulation_count_subgoals(tmp_path):
    """puzzle-3x3 task 4 (every button on): reward = buttons on - 9, success = all nine."""
    arrays = write_ogbench(tmp_path / "p.npz", [4], info=False)
    buttons = np.ones((5, 9), dtype=np.int64)
    buttons[0, :3] = 0
    buttons[2, 8] = 0
    np.savez(tmp_path / "p.npz", **arrays, button_states=buttons)
    td, _, _ = convert({"puzzle-3x3-play-v0.npz": tmp_path / "p.npz"}, "ogbench/puzzle-3x3-play-v0", task=4)
    np.testing.assert_array_equal(td["next", "reward"].numpy().reshape(-1), [-3, 0, -1, 0])
    np.testing.assert_array_equal(td["info", "success"].numpy().reshape(-1), [0, 1, 0, 1])


def test_task_param_and_singletask_ids():
    import datasets_hub as dh

    loader = OGBenchLoader()
    entry = loader.entry_for("ogbench/cube-double-play-singletask-task5-v0")
    assert entry["params"] == {"dataset": "cube-double-play-v0", "task": 5}
    # no -taskN: the environment's default task (set_tasks: reward_task_id 0)
    for name, task in (
        ("antmaze-large-navigate", 1),
        ("antsoccer-arena-stitch", 4),
        ("visual-cube-single-play", 2),
        ("scene-noisy", 2),
        ("puzzle-4x4-play", 4),
        ("puzzle-4x6-noisy", 2),
    ):
        assert loader.entry_for(f"ogbench/{name}-singletask-v0")["params"]["task"] == task, name
    assert loader.entry_for("ogbench/scene-play-singletask-task2-v0-val")["params"] == {
        "dataset": "scene-play-v0",
        "task": 2,
        "split": "val",
    }
    for bad in ("ogbench/powderworld-easy-play-singletask-v0", "ogbench/nope-singletask-v0", "ogbench/scene-play-v0"):
        assert loader.entry_for(bad) is None, bad
    info = dh.info("ogbench/cube-single-noisy-singletask-task1-v0")
    assert info.params["task"] == 1 and info.params["dataset"] == "cube-single-noisy-v0"
    for dataset, task, match in (
        ("scene-play-v0", 0, "task must be"),
        ("scene-play-v0", 6, "task must be"),
        ("scene-play-v0", True, "task must be"),
        ("powderworld-easy-play-v0", 1, "no single-task variant"),
    ):
        with pytest.raises(InvalidParameter, match=match):
            loader.resources(DatasetSpec(id=f"ogbench/{dataset}", loader="ogbench", params={"task": task}))


def test_task_rewards_need_the_stored_state(tmp_path):
    write_ogbench(tmp_path / "v.npz", [3], info=False)
    with pytest.raises(LoaderError, match="qpos"):
        convert({"cube-single-play-v0.npz": tmp_path / "v.npz"}, task=1)
    arrays = write_ogbench(tmp_path / "b.npz", [3], info=False)
    np.savez(tmp_path / "b.npz", **arrays, button_states=np.zeros((4, 8), dtype=np.int64))  # 3x3 has 9 buttons
    with pytest.raises(LoaderError, match="button_states"):
        convert({"puzzle-3x3-play-v0.npz": tmp_path / "b.npz"}, "ogbench/puzzle-3x3-play-v0", task=1)


def test_task_is_part_of_the_fingerprint(tmp_path, monkeypatch):
    import datasets_hub as dh

    from fixtures.http_server import serve_files
    from fixtures.ogbench_files import write_task_file

    write_task_file(tmp_path / "f.npz", "scene-noisy-v0", [6, 9])
    with serve_files({"datasets/ogbench/scene-noisy-v0.npz": (tmp_path / "f.npz").read_bytes()}) as server:
        monkeypatch.setenv("DATASETS_HUB_ENDPOINT_OGBENCH", server.base_url)
        plain = dh.load("ogbench/scene-noisy-v0")
        two = dh.load("ogbench/scene-noisy-singletask-task2-v0")
        four = dh.load("ogbench/scene-noisy-v0", task=4)
    assert len({plain.storage.path, two.storage.path, four.storage.path}) == 3
    assert torch.isnan(plain[:]["next", "reward"]).all()
    assert not torch.equal(two[:]["next", "reward"], four[:]["next", "reward"])
    assert (two[:]["next", "reward"] <= 0).all() and two[:]["info", "success"].shape == (15, 1)


# -- a user's catalogue entry: its resources are fetched, or refused by name (issue 27) ------------
def test_user_entry_resource_url_is_fetched_instead_of_upstream(tmp_path, monkeypatch):
    """An entry in the form docs/guide/catalogue.md shows (`resources: [{url: file:///…}]`) loads the
    user's file; upstream (its host rewritten to a local server) is never asked."""
    import datasets_hub as dh
    from datasets_hub import catalogue

    from fixtures.http_server import serve_files

    arrays = write_ogbench(tmp_path / "antmaze-large-navigate-v0.npz", [4, 3])
    url = (tmp_path / "antmaze-large-navigate-v0.npz").as_uri()
    catalogue.register_dataset("ogbench/my-antmaze", params={"dataset": "antmaze-large-navigate-v0"},
                               resources=[{"url": url}])  # fmt: skip
    try:
        (res,) = OGBenchLoader().resources(catalogue.resolve("ogbench/my-antmaze"))
        assert res.urls == (url,)  # the user's copy and nothing else
        with serve_files() as server:
            monkeypatch.setenv("DATASETS_HUB_ENDPOINT_OGBENCH", server.base_url)
            check(dh.load("ogbench/my-antmaze")[:], expected_transitions([arrays]))
            assert server.total_requests() == 0  # upstream never asked
        assert dh.info("ogbench/my-antmaze").resources[0]["urls"] == [url]
    finally:
        catalogue.unregister_dataset("ogbench/my-antmaze")


def test_user_entry_resource_of_another_name_is_refused_naming_its_url(tmp_path):
    import datasets_hub as dh
    from datasets_hub import catalogue

    url = (tmp_path / "my-copy.npz").as_uri()
    catalogue.register_dataset("ogbench/my-copy", params={"dataset": "scene-play-v0"}, resources=[{"url": url}])
    try:
        for call in (dh.download, dh.info):
            with pytest.raises(
                InvalidParameter, match=r"does not fetch .*'my-copy.npz'.*my-copy\.npz.*scene-play-v0\.npz"
            ):
                call("ogbench/my-copy")
    finally:
        catalogue.unregister_dataset("ogbench/my-copy")


def test_user_entry_resource_missing_file_error_names_its_url(tmp_path):
    import datasets_hub as dh
    from datasets_hub import catalogue
    from datasets_hub.errors import DownloadError

    url = (tmp_path / "absent" / "scene-play-v0.npz").as_uri()
    catalogue.register_dataset("ogbench/my-absent", params={"dataset": "scene-play-v0"}, resources=[{"url": url}])
    try:
        with pytest.raises(DownloadError) as err:
            dh.download("ogbench/my-absent")
        assert str(tmp_path / "absent" / "scene-play-v0.npz") in str(err.value)
        assert BASE_URL not in str(err.value)  # no fallback to upstream's copy
    finally:
        catalogue.unregister_dataset("ogbench/my-absent")


@pytest.mark.parametrize(
    "dataset, env_id",
    [
        ("cube-single-play-v0", "cube-single-v0"),
        ("visual-antmaze-large-navigate-v0", "visual-antmaze-large-v0"),
        ("puzzle-4x4-noisy-v0", "puzzle-4x4-v0"),
        ("humanoidmaze-giant-navigate-100m-v0", "humanoidmaze-giant-v0"),
    ],
)
def test_the_environment_is_the_one_ogbench_registers_for_the_name(dataset, env_id):
    assert environment_card(dataset) == {
        "env_id": env_id,
        "registry": "gymnasium",
        "registered_by": "ogbench",
        "from": "the dataset name, as ogbench.make_env_and_datasets derives the environment from it",
    }
    assert environment_card("my-own-set-v0") == {}  # not an OGBench name: nothing guessed


def test_the_card_records_the_environment(tmp_path):
    from datasets_hub.dataset_info import DatasetInfo
    from datasets_hub.errors import MissingDependency

    write_ogbench(tmp_path / "x.npz", LENGTHS)
    _td, _chunks, notes = convert({"cube-single-play-v0.npz": tmp_path / "x.npz"})
    assert notes["environment"]["env_id"] == "cube-single-v0"
    card = DatasetInfo("ogbench/cube-single-play-v0", "ogbench", {}, [], {}, "test", True, manifest={"notes": notes})
    try:
        import ogbench  # noqa: F401  (whether the environment's package is here)
    except ImportError:
        with pytest.raises(MissingDependency, match="pip install ogbench"):
            card.recover_environment()
    else:
        assert card.recover_environment().spec.id == "cube-single-v0"


def test_frames_auto_stores_exact_png_for_large_visual_sets(tmp_path, monkeypatch, capsys):
    """frames=None: a visual set over the raw limit (by upstream's generation settings, known before the
    download) is stored as PNG, exactly; under the limit it stays raw; the card says what was stored."""
    import datasets_hub as dh
    from datasets_hub.build import frames as fr

    arrays = write_ogbench(tmp_path / "v.npz", [4, 0, 6], visual=True, side=16, info=False)
    url, dataset_id = (tmp_path / "v.npz").as_uri(), "ogbench/visual-cube-triple-play-v0"
    estimate = OGBenchLoader().frame_bytes(DatasetSpec(id=dataset_id, loader="ogbench", params={"url": url}))
    assert estimate == 3000 * 1001 * 64 * 64 * 3 > fr.RAW_LIMIT_BYTES  # 36.9 GB decoded: PNG by default
    png = dh.load(dataset_id, url=url)
    assert png.storage.manifest["frames"] == {"codec": "png", "quality": None}
    check(png[:], expected_transitions([arrays]))  # every frame decodes to its source exactly
    stored = dh.info(dataset_id, url=url).frames["observation"]
    rows = 5 + 7  # T + 1 rows per trajectory with a transition (the single-row one is skipped)
    assert stored["rows"] == rows and stored["decoded_bytes"] == rows * 16 * 16 * 3 and stored["psnr_db"] is None
    monkeypatch.setattr(fr, "RAW_LIMIT_BYTES", estimate)
    raw = dh.load(dataset_id, url=url)
    assert raw.storage.manifest["frames"] == {"codec": "raw", "quality": None}
    assert torch.equal(raw[:]["observation"], png[:]["observation"])
    from datasets_hub.cli import main

    for args, shown in (([], "observation: raw, stored decoded (exact)"), (["--frames", "png"], "observation: png")):
        assert main(["info", dataset_id, "--param", f"url={url}", *args]) == 0
        frames = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("frames ")]
        assert len(frames) == 1 and shown in frames[0], frames


@pytest.mark.parametrize(
    "dataset, split, decoded",
    [
        ("visual-cube-single-play-v0", "train", 1000 * 1001 * 12288),  # 12.3 GB: raw by default
        ("visual-antmaze-large-explore-v0", "train", 10000 * 501 * 12288),
        ("visual-antmaze-large-explore-v0", "val", 1000 * 501 * 12288),  # a tenth of the trajectories
        ("visual-humanoidmaze-giant-stitch-v0", "train", 10000 * 401 * 12288),
        ("powderworld-hard-play-v0", "train", 5000 * 1001 * 3072),
        ("cube-double-play-v0", "train", 0),  # a state set: no image
        ("cube-double-play-100m-v0", "train", 0),
        ("my-own-set", "train", None),  # not an upstream name: no estimate, raw
    ],
)
def test_frame_bytes_follow_upstreams_generation_settings(dataset, split, decoded):
    spec = DatasetSpec(id=f"ogbench/{dataset}", loader="ogbench", params={"split": split})
    assert OGBenchLoader().frame_bytes(spec) == decoded
