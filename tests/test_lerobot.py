"""The lerobot loader on LeRobot datasets written by ``lerobot_writer`` (v3.0 and v2.1: 2 cameras, 3
episodes of different lengths, the global frame index drawn into every frame, language tasks),
videos encoded as LeRobot encodes them (libsvtav1, yuv420p, g=2, crf=30), served by a Hugging
Face-compatible Hub on 127.0.0.1."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from datasets_hub.errors import CorruptFile, DownloadError, InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec
from datasets_hub.loaders.lerobot import loader as lr
from datasets_hub.loaders.lerobot.loader import LeRobotLoader, decode_text

from fixtures import lerobot_writer as lw

os.environ.setdefault("SVT_LOG", "1")  # the SVT-AV1 encoder logs its configuration at info level otherwise
REPO = "acme/koch_push"
ID = f"lerobot/{REPO}"
CAMS = ("observation.images.top", "observation.images.wrist")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The two versions written once per module: {version: (root, spec, summary)}."""
    out = {}
    for version in ("v3.0", "v2.1"):
        root = tmp_path_factory.mktemp(version.replace(".", ""))
        spec = lw.Spec(version=version)
        out[version] = (root, spec, lw.write_dataset(root, spec))
    return out


def serve(server, monkeypatch, tmp_path, files: dict[str, bytes], repo: str = REPO) -> None:
    from fixtures.http_server import point_huggingface_hub_at

    for path, data in files.items():
        server.add_hf_file(repo, path, data)
    point_huggingface_hub_at(server, monkeypatch, tmp_path / "hf-cache")
    monkeypatch.setattr(lr, "_metas", {})


@pytest.fixture
def hub(monkeypatch, tmp_path):
    from fixtures.http_server import serve_files

    with serve_files() as server:
        yield lambda files, repo=REPO: serve(server, monkeypatch, tmp_path, files, repo) or server


def truth(spec: lw.Spec, summary: dict, episodes=None) -> dict[str, np.ndarray]:
    """Plain per-row expectations (episodes in index order)."""
    cols: dict[str, list] = {
        k: [] for k in ("episode", "t", "index", "state", "action", "reward", "term", "trunc", "task", "ts", "last")
    }
    for e, n in enumerate(spec.lengths):
        if episodes is not None and e not in episodes:
            continue
        for t in range(n):
            i = summary["starts"][e] + t
            state = lw.state_of(e, t, spec.state_dim)
            cols["episode"].append(e)
            cols["t"].append(t)
            cols["index"].append(i)
            cols["state"].append(state)
            cols["action"].append(-state[: spec.action_dim])
            cols["reward"].append(np.float32(i / 2))
            cols["term"].append(t == n - 1 and spec.reward)
            cols["trunc"].append(t == n - 1 and not spec.reward)
            cols["task"].append(spec.tasks[e])
            cols["ts"].append(np.float32(t / spec.fps))
            cols["last"].append(t == n - 1)
    return {k: (np.array(v) if k != "task" else v) for k, v in cols.items()}


def check(td, spec: lw.Spec, summary: dict, episodes=None, channels_first=False) -> None:
    want = truth(spec, summary, episodes)
    n = len(want["episode"])
    assert td.batch_size == torch.Size([n])
    np.testing.assert_array_equal(td["episode"].numpy(), want["episode"])
    np.testing.assert_array_equal(td["step"].numpy(), want["t"])
    np.testing.assert_array_equal(td["observation", "state"].numpy(), want["state"])
    np.testing.assert_array_equal(td["action"].numpy(), want["action"])
    np.testing.assert_array_equal(td["next", "reward"].numpy()[:, 0], want["reward"] if spec.reward else 0)
    np.testing.assert_array_equal(td["next", "terminated"].numpy()[:, 0], want["term"])
    np.testing.assert_array_equal(td["next", "truncated"].numpy()[:, 0], want["trunc"])
    np.testing.assert_array_equal(td["info", "timestamp"].numpy(), want["ts"])
    np.testing.assert_array_equal(td["info", "index"].numpy(), want["index"])
    np.testing.assert_array_equal(td["info", "frame_index"].numpy(), want["t"])
    np.testing.assert_array_equal(td["info", "next_observation_unknown"].numpy(), want["last"])
    assert decode_text(td["task"]) == want["task"]
    # next observation: the following row inside an episode, NaN after the last step
    inner = ~want["last"]
    nxt = td["next", "observation", "state"].numpy()
    np.testing.assert_array_equal(nxt[inner], want["state"][1:][inner[:-1]])
    assert np.isnan(nxt[want["last"]]).all()
    for c, cam in enumerate(CAMS):
        frames = td[("observation", "images", cam.rsplit(".", 1)[1])]
        assert frames.dtype == torch.uint8
        expected_shape = (3, spec.height, spec.width) if channels_first else (spec.height, spec.width, 3)
        assert tuple(frames.shape[1:]) == expected_shape
        got = [lw.read_index(f, channels_first) for f in frames.numpy()]
        assert got == [(int(i), c) for i in want["index"]], cam
        nxt_frames = td[("next", "observation", "images", cam.rsplit(".", 1)[1])].numpy()
        assert [lw.read_index(f, channels_first)[0] for f in nxt_frames[inner]] == list(want["index"][1:][inner[:-1]])
        assert (nxt_frames[want["last"]] == 0).all()


@pytest.mark.parametrize("version", ["v3.0", "v2.1"])
def test_load_every_value(hub, written, version):
    import datasets_hub

    root, spec, summary = written[version]
    hub(lw.files_of(root))
    rb = datasets_hub.load(ID, num_workers=1)
    td = rb[:]
    check(td, spec, summary)
    info = datasets_hub.info(ID)
    notes = info.notes
    assert notes["codebase_version"] == version and notes["fps"] == 10 and notes["robot_type"] == "koch"
    assert notes["cameras"]["observation.images.top"]["codec"] == "av1"
    assert set(notes["tasks"].values()) == set(spec.tasks)


def test_episode_subset_fetches_only_its_files(hub, written):
    import datasets_hub

    root, spec, summary = written["v3.0"]
    server = hub(lw.files_of(root))
    rb = datasets_hub.load(ID, episodes=[2], num_workers=1)
    check(rb[:], spec, summary, episodes=[2])
    fetched = {r.path.split("/resolve/main/", 1)[1] for r in server.requests if "/resolve/main/" in r.path}
    assert "data/chunk-000/file-001.parquet" in fetched
    assert not any(p.endswith("file-000.parquet") and p.startswith("data/") for p in fetched)  # episodes 0 and 1
    assert not any(p.endswith("file-000.mp4") for p in fetched)
    assert "meta/stats.json" not in fetched
    # a different selection is a different build
    full = datasets_hub.download(ID, num_workers=1)
    sub = datasets_hub.download(ID, episodes=[2])
    assert full != sub and sub.parent == full.parent


def test_v21_subset_and_two_workers(hub, written):
    import datasets_hub

    root, spec, summary = written["v2.1"]
    server = hub(lw.files_of(root))
    rb = datasets_hub.load(ID, episodes=[0, 2], num_workers=2)
    check(rb[:], spec, summary, episodes=[0, 2])
    fetched = {r.path.split("/resolve/main/", 1)[1] for r in server.requests if "/resolve/main/" in r.path}
    assert not any("episode_000001" in p for p in fetched)
    # num_workers is not part of the fingerprint: the same build opens with any value
    assert datasets_hub.download(ID, episodes=[0, 2], num_workers=1) == datasets_hub.download(ID, episodes=[0, 2])


def test_image_size_and_channels_first_are_build_options(hub, written):
    import datasets_hub

    root, spec, summary = written["v3.0"]
    hub(lw.files_of(root))
    cf = datasets_hub.load(ID, channels_first=True, num_workers=1)
    check(cf[:], spec, summary, channels_first=True)
    small = datasets_hub.load(ID, image_size=[32, 48], num_workers=1)
    frames = small[:]["observation", "images", "top"]
    assert tuple(frames.shape[1:]) == (32, 48, 3)
    paths = {
        datasets_hub.download(ID),
        datasets_hub.download(ID, channels_first=True),
        datasets_hub.download(ID, image_size=[32, 48]),
    }
    assert len(paths) == 3


def test_images_stored_in_parquet(tmp_path, hub):
    import datasets_hub

    spec = lw.Spec(version="v3.0", image_mode="image", reward=False, lengths=(4, 2, 3))
    summary = lw.write_dataset(tmp_path / "img", spec)
    hub(lw.files_of(tmp_path / "img"))
    td = datasets_hub.load(ID)[:]
    for c, cam in enumerate(("top", "wrist")):  # PNG is lossless: the drawn index reads back exactly
        np.testing.assert_array_equal(
            td["observation", "images", cam].numpy()[0], lw.frame_image(0, c, spec.height, spec.width)
        )
    check(td, spec, summary)
    notes = datasets_hub.info(ID).notes
    assert "next.reward" in notes["reward"] and notes["cameras"]["observation.images.top"]["source"] == "image"


def test_slices_stay_in_one_episode(hub, written):
    import datasets_hub
    from datasets_hub import SliceSampler

    root, _, _ = written["v3.0"]
    hub(lw.files_of(root))
    rb = datasets_hub.load(
        ID, sampler=SliceSampler(slice_len=3), batch_size=30, num_workers=1, generator=torch.Generator().manual_seed(0)
    )
    batch = rb.sample()
    index = batch["info", "index"].reshape(-1, 3)
    assert (index[:, 1:] - index[:, :-1] == 1).all()
    assert (batch["episode"].reshape(-1, 3) == batch["episode"].reshape(-1, 3)[:, :1]).all()
    top = batch["observation", "images", "top"].numpy()
    assert [lw.read_index(f)[0] for f in top] == batch["info", "index"].tolist()


def test_unknown_version_is_named(tmp_path, hub):
    import datasets_hub

    spec = lw.Spec(version="v3.0", lengths=(2,), tasks=("t",), cameras=())
    lw.write_dataset(tmp_path / "d", spec)
    info = tmp_path / "d" / "meta" / "info.json"
    info.write_text(info.read_text().replace('"v3.0"', '"v4.0"'))
    hub(lw.files_of(tmp_path / "d"))
    with pytest.raises(LoaderError, match=r"codebase_version 'v4.0' is not supported"):
        datasets_hub.load(ID)


def test_params_are_checked():
    loader = LeRobotLoader()
    for params, match in [
        ({"episode": [1]}, "Did you mean 'episodes'"),
        ({"episodes": []}, "non-empty list"),
        ({"episodes": [1, 1]}, "twice"),
        ({"episodes": [-1]}, "episode indices"),
        ({"image_size": [10]}, r"\[height, width\]"),
        ({"image_size": [9, 10]}, "even"),
        ({"channels_first": "yes"}, "true or false"),
        ({"num_workers": -1}, "non-negative"),
        ({"tolerance_s": 0}, "positive"),
        ({"repo": "noslash"}, "<org>/<name>"),
    ]:
        with pytest.raises(InvalidParameter, match=match):
            loader.check_params(DatasetSpec(id=ID, loader="lerobot", params=dict(params)))


def test_any_repo_id_resolves_and_catalogue_lists_known_repos():
    import datasets_hub
    from datasets_hub.catalogue import resolve

    ids = datasets_hub.list_datasets(loader="lerobot")
    assert "lerobot/lerobot/pusht" in ids and "lerobot/lerobot/aloha_sim_insertion_human" in ids
    spec = resolve("lerobot/someone/their_dataset", revision="v3.0")
    assert spec.loader == "lerobot" and spec.params == {"revision": "v3.0"}
    with pytest.raises(Exception, match="unknown dataset"):
        resolve("lerobot/just_one_part")


# -- bad input: each a named error, and no build left behind -------------------------------------
def _no_build_left(dataset_id: str = ID) -> None:
    from datasets_hub.cache.layout import dataset_dir

    folder = dataset_dir(dataset_id)
    leftovers = [p.name for p in folder.iterdir()] if folder.exists() else []
    assert not [n for n in leftovers if not n.endswith(".lock")], leftovers


def _edit_v3(root: Path, tmp_path: Path) -> Path:
    import shutil

    copy = tmp_path / "edited"
    shutil.copytree(root, copy)
    return copy


def test_truncated_mp4_is_a_corrupt_file(tmp_path, hub, written):
    import datasets_hub

    root, _, _ = written["v3.0"]
    files = lw.files_of(root)
    video = "videos/observation.images.wrist/chunk-000/file-001.mp4"
    files[video] = files[video][: len(files[video]) // 2]
    hub(files)
    with pytest.raises(CorruptFile, match=r"episode 2, camera 'observation.images.wrist'.*file-001.mp4"):
        datasets_hub.load(ID, num_workers=1)
    _no_build_left()


def test_parquet_disagreeing_with_episode_metadata(tmp_path, hub, written):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import datasets_hub

    root, _, _ = written["v3.0"]
    copy = _edit_v3(root, tmp_path)
    path = copy / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    ep = table.column("episode_index").to_numpy().copy()
    ep[4] = 1  # the last row of episode 0 (length 5) claims to be episode 1
    pq.write_table(
        table.set_column(table.column_names.index("episode_index"), "episode_index", pa.array(ep, type=pa.int64())),
        path,
    )
    hub(lw.files_of(copy))
    with pytest.raises(
        LoaderError, match=r"episode 0 .*4 rows with episode_index 0 but the episode metadata says length 5"
    ):
        datasets_hub.load(ID, num_workers=1)
    _no_build_left()


@pytest.mark.parametrize("stored_as", [None, "jpeg"])
def test_video_shorter_than_its_episode(tmp_path, hub, stored_as):
    import datasets_hub

    spec = lw.Spec(version="v2.1")
    summary = lw.write_dataset(tmp_path / "d", spec)
    video = tmp_path / "d" / lw.V21_VIDEO.format(episode_chunk=0, video_key=CAMS[0], episode_index=1)
    frames = np.stack([lw.frame_image(summary["starts"][1] + t, 0, spec.height, spec.width) for t in range(6)])
    lw.encode_video(video, frames, spec.fps)  # 6 frames for an episode of 8
    hub(lw.files_of(tmp_path / "d"))
    with pytest.raises(
        LoaderError,
        match=r"episode 1, camera 'observation.images.top'.*timestamp 0\.600000 s "
        r"\(row 6 of 8; 2 rows without a frame",
    ):
        datasets_hub.load(ID, num_workers=1, frames=stored_as)
    _no_build_left()


def test_off_grid_timestamps_are_refused(tmp_path, hub):
    import datasets_hub

    spec = lw.Spec(version="v2.1", lengths=(4,), tasks=("t",))
    lw.write_dataset(tmp_path / "d", spec)
    video = tmp_path / "d" / lw.V21_VIDEO.format(episode_chunk=0, video_key=CAMS[1], episode_index=0)
    frames = np.stack([lw.frame_image(t, 1, spec.height, spec.width) for t in range(4)])
    lw.encode_video(video, frames, 20)  # 20 fps: frames at 0.05 s steps, rows at 0.1 s
    hub(lw.files_of(tmp_path / "d"))
    with pytest.raises(LoaderError, match=r"episode 0, camera 'observation.images.wrist'.*timestamp 0\.200000 s"):
        datasets_hub.load(ID, num_workers=1)
    _no_build_left()


def test_missing_camera(tmp_path, hub, written):
    import pyarrow.parquet as pq

    import datasets_hub

    root, _, _ = written["v3.0"]
    files = lw.files_of(root)
    gone = {p: d for p, d in files.items() if "observation.images.wrist" not in p}
    hub(gone)
    with pytest.raises(DownloadError, match=r"videos/observation.images.wrist/chunk-000/file-000.mp4"):
        datasets_hub.load(ID, num_workers=1)
    _no_build_left()

    copy = _edit_v3(root, tmp_path)  # the episode metadata forgets the camera that info.json declares
    path = copy / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    pq.write_table(table.drop_columns([c for c in table.column_names if "images.wrist" in c]), path)
    hub(lw.files_of(copy), repo="acme/other")
    with pytest.raises(
        LoaderError,
        match=r"camera 'observation.images.wrist' is declared in info.json but "
        r"meta/episodes has no videos/observation.images.wrist/chunk_index",
    ):
        datasets_hub.load("lerobot/acme/other", num_workers=1)
    _no_build_left("lerobot/acme/other")


def test_check_loader_contract(tmp_path, written):
    from datasets_hub.testing import check_loader

    root, _, _ = written["v2.1"]
    files = {f"{REPO}/{p}": root / p for p in lw.files_of(root)}
    summary = check_loader(LeRobotLoader, DatasetSpec(id=ID, loader="lerobot", params={"episodes": [0, 1]}), files)
    assert summary


# -- delta_timestamps ----------------------------------------------------------------------------
def test_delta_timestamps_windows(hub, written):
    import datasets_hub
    from datasets_hub.loaders.lerobot.windows import delta_timestamps_sampler

    root, spec, summary = written["v3.0"]
    hub(lw.files_of(root))
    delta = {
        "observation.images.top": [-0.1, 0.0],
        "observation.state": [-0.2, -0.1, 0.0],
        "action": [0.0, 0.1, 0.2, 0.3],
        "next.reward": [0.0],
    }
    sampler = delta_timestamps_sampler(delta, fps=ID)  # the rate read from the repo's info.json
    rb = datasets_hub.load(
        ID, batch_size=40, sampler=sampler, num_workers=1, generator=torch.Generator().manual_seed(1)
    )
    batch = rb.sample()
    assert batch["action"].shape == (40, 4, spec.action_dim) and batch["action_is_pad"].shape == (40, 4)
    assert batch["observation", "images", "top"].shape == (40, 2, spec.height, spec.width, 3)
    starts, lengths = summary["starts"], spec.lengths
    for b in range(40):
        e, i = int(batch["episode"][b]), int(batch["info", "index"][b])
        t = i - starts[e]
        for name, offsets in (("action", [0, 1, 2, 3]), ("state", [-2, -1, 0]), ("top", [-1, 0])):
            pos = [t + o for o in offsets]
            pad = [not 0 <= p < lengths[e] for p in pos]
            clipped = [min(max(p, 0), lengths[e] - 1) for p in pos]
            if name == "action":
                got, mask = batch["action"][b], batch["action_is_pad"][b]
                want = np.stack([-lw.state_of(e, p, spec.state_dim)[: spec.action_dim] for p in clipped])
                np.testing.assert_array_equal(got.numpy(), want)
            elif name == "state":
                got, mask = batch["observation", "state"][b], batch["observation", "state_is_pad"][b]
                np.testing.assert_array_equal(
                    got.numpy(), np.stack([lw.state_of(e, p, spec.state_dim) for p in clipped])
                )
            else:
                got, mask = batch["observation", "images", "top"][b], batch["observation", "images", "top_is_pad"][b]
                assert [lw.read_index(f)[0] for f in got.numpy()] == [starts[e] + p for p in clipped]
            assert mask.tolist() == pad


def test_delta_timestamps_off_the_frame_grid_are_refused():
    from datasets_hub.loaders.lerobot.windows import delta_indices

    assert delta_indices({"action": [0.0, 0.1, 0.2], "next.reward": [0.1]}, fps=10) == {
        ("action",): [0, 1, 2],
        ("next", "reward"): [1],
    }
    with pytest.raises(InvalidParameter, match=r"delta_timestamps\['action'\] holds 0.15 s, which is not a multiple"):
        delta_indices({"action": [0.0, 0.15]}, fps=10)
    with pytest.raises(InvalidParameter, match="fps must be a positive number"):
        delta_indices({"action": [0.0]}, fps=0)


def test_local_root_reads_in_place(written, tmp_path):
    import datasets_hub

    root, spec, summary = written["v2.1"]
    td = datasets_hub.load("lerobot/local/koch", root=str(root), episodes=[1], num_workers=1)[:]
    check(td, spec, summary, episodes=[1])
    with pytest.raises(InvalidParameter, match=r"has no meta/info\.json"):
        datasets_hub.load("lerobot/local/koch", root=str(tmp_path))


def test_local_root_is_never_copied_and_is_identified_by_content(written, tmp_path):
    """A local folder is read where it is (nothing under raw/), and its bytes, not its path, name the build."""
    import json
    import shutil

    import datasets_hub
    from datasets_hub.cache.layout import cache_root
    from datasets_hub.cache.verify import verify

    root, _, _ = written["v2.1"]
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    first = datasets_hub.download("lerobot/local/koch", root=str(copy), episodes=[1], num_workers=1)
    raw = cache_root() / "raw"
    assert not raw.exists() or not [p for p in raw.rglob("*") if p.is_file()]
    manifest = json.loads((first / "manifest.json").read_text())
    assert all(s["in_place"] and s["sha256"] for s in manifest["sources"])
    result = verify("lerobot/local/koch", params={"root": str(copy), "episodes": [1], "num_workers": 1})
    assert result.ok and any("read in place" in line for line in result.checked)
    moved = tmp_path / "moved"
    shutil.copytree(copy, moved)  # the same bytes elsewhere: the same source identities (root is a param)
    again = datasets_hub.download("lerobot/local/koch", root=str(moved), episodes=[1], num_workers=1)
    moved_sources = json.loads((again / "manifest.json").read_text())["sources"]
    assert [s["sha256"] for s in moved_sources] == [s["sha256"] for s in manifest["sources"]]
    info = copy / "meta" / "info.json"
    info.write_text(info.read_text() + "\n")  # other bytes, same meaning: another build, never the stale one
    rebuilt = datasets_hub.download("lerobot/local/koch", root=str(copy), episodes=[1], num_workers=1)
    assert rebuilt != first


def test_cached_build_reopens_without_requests(hub, written):
    import datasets_hub

    root, _, _ = written["v3.0"]
    server = hub(lw.files_of(root))
    first = datasets_hub.download(ID, num_workers=1)
    server.reset_log()
    assert datasets_hub.download(ID) == first
    assert len(datasets_hub.load(ID)) == sum(lw.Spec().lengths)
    assert server.total_requests() == 0


def test_a_user_entrys_resources_are_refused_by_name(written):
    """The lerobot loader derives its files from the dataset's metadata: an entry's own resource is
    refused naming its URL, never ignored (issue 27)."""
    import datasets_hub
    from datasets_hub import catalogue

    root, _, _ = written["v2.1"]
    catalogue.register_dataset("lerobot/local/mine", params={"root": str(root)},
                               resources=[{"url": "file:///srv/mine/episode_000000.parquet"}])  # fmt: skip
    try:
        with pytest.raises(InvalidParameter, match=r"does not fetch .*file:///srv/mine/episode_000000\.parquet"):
            datasets_hub.load("lerobot/local/mine")
    finally:
        catalogue.unregister_dataset("lerobot/local/mine")


def test_a_local_root_rewritten_with_same_size_files_is_converted_again(written, tmp_path):
    """A parquet file of a root= dataset rewritten with other values and the very same size: the next load
    converts the new values, never the old build (issue 27)."""
    import shutil

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    import datasets_hub

    source, _, _ = written["v2.1"]
    root = tmp_path / "root"
    shutil.copytree(source, root)
    first = sorted((root / "data").rglob("*.parquet"))[0]
    plain = {"compression": "none", "use_dictionary": False, "write_statistics": False}  # fixed-width values
    table = pq.read_table(first)
    pq.write_table(table, first, **plain)
    before = datasets_hub.load("lerobot/local/koch", root=str(root), num_workers=1)[:]
    action = table.column("action")
    doubled = pa.array([list(np.asarray(row, np.float32) * 2 + 1) for row in action.to_pylist()], type=action.type)
    size = first.stat().st_size
    pq.write_table(table.set_column(table.schema.get_field_index("action"), "action", doubled), first, **plain)
    assert first.stat().st_size == size
    rows = before["episode"] == int(table.column("episode_index")[0].as_py())
    after = datasets_hub.load("lerobot/local/koch", root=str(root), num_workers=1)[:]
    assert torch.equal(after["action"][rows], before["action"][rows] * 2 + 1)
    assert torch.equal(after["action"][~rows], before["action"][~rows])


# -- compressed frames ---------------------------------------------------------------------------
@pytest.mark.parametrize("codec", ["jpeg", "png", "h264"])
def test_frames_compressed_from_the_videos(hub, written, codec, capsys):
    """Built from the MP4s episode by episode and stored one image per frame: every row still reads its
    own frame (the index drawn into it), PNG exactly as the raw build, JPEG and h264 within their PSNR floor."""
    import datasets_hub
    from datasets_hub.build.frame_h264 import DEFAULT_QP
    from datasets_hub.build.frames import DEFAULT_QUALITY, psnr_floor

    root, spec, summary = written["v3.0"]
    hub(lw.files_of(root))
    td = datasets_hub.load(ID, num_workers=1, frames=codec)[:]
    check(td, spec, summary)
    card = datasets_hub.info(ID, frames=codec)
    assert card.manifest["version"] == (4 if codec == "h264" else 3)
    assert set(card.frames) == {f"observation/images/{c}" for c in ("top", "wrist")}
    top = card.frames["observation/images/top"]
    assert top["codec"] == codec and top["quality"] == {"jpeg": DEFAULT_QUALITY, "h264": DEFAULT_QP}.get(codec)
    assert top["decoded_bytes"] == top["rows"] * spec.height * spec.width * 3 > top["bytes"]
    assert top["rows"] == sum(spec.lengths) + len(spec.lengths)
    raw = datasets_hub.load(ID, num_workers=1)[:]
    if codec == "png":
        for cam in ("top", "wrist"):
            for key in (("observation", "images", cam), ("next", "observation", "images", cam)):
                assert torch.equal(td[key], raw[key])
        assert top["psnr_db"] is None
    else:
        assert not torch.equal(td["observation", "images", "top"], raw["observation", "images", "top"])
    if codec == "jpeg":
        # the fixture's texture is a random colour per 8x8 cell: the worst case for JPEG's 4:2:0 chroma (about
        # 28 dB at quality 90, 26 at 75); camera-like content holds its floor (tests/test_frames.py). Identity: check() above
        assert 25 <= top["psnr_db"]["min"] < psnr_floor(codec)
    elif codec == "h264":  # intra prediction copes with flat cells: it holds its floor even here (34.4 dB)
        assert top["psnr_db"]["min"] >= psnr_floor(codec)
    assert LeRobotLoader().frame_bytes(DatasetSpec(id=ID, loader="lerobot")) == 2 * top["decoded_bytes"]
    assert datasets_hub.info(ID).frames == {}  # the raw build is another build
    from datasets_hub.cli import main

    assert main(["info", ID, "--frames", codec]) == 0
    shown = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("frames ")]
    assert len(shown) == 2 and f"observation/images/top: {codec}" in shown[0]
    assert ("exact" in shown[0]) == (codec == "png") and (f" q{DEFAULT_QUALITY}," in shown[0]) == (codec == "jpeg")
    assert (f" qp{DEFAULT_QP}," in shown[0]) == (codec == "h264")


def test_frames_auto_compresses_above_the_limit(hub, written, monkeypatch):
    import datasets_hub
    from datasets_hub.build import frames as fr

    root, _, _ = written["v3.0"]
    hub(lw.files_of(root))
    monkeypatch.setattr(fr, "RAW_LIMIT_BYTES", 1000)  # the fixture's frames are ~100 kB decoded
    rb = datasets_hub.load(ID, num_workers=1)
    assert rb.storage.manifest["frames"] == {"codec": "jpeg", "quality": fr.DEFAULT_QUALITY}
    monkeypatch.setattr(fr, "RAW_LIMIT_BYTES", 10**12)
    assert datasets_hub.load(ID, num_workers=1).storage.manifest["frames"] == {"codec": "raw", "quality": None}
