"""The data doctor on raw sources before any build: one planted defect per class the raw readers find
(LeRobot metadata, parquet rows and video headers; HDF5; npz; TFRecord), each found with its first
example, in files written in the exact upstream format by the test fixtures."""

from __future__ import annotations

import os
import shutil

import h5py
import numpy as np
import pytest

from datasets_hub.doctor import diagnose

os.environ.setdefault("SVT_LOG", "1")

LENGTHS = (5, 8, 3, 6)  # v3.0: episodes 0-1 in data/.../file-000, 2-3 in file-001 (two per file)
DATA0, DATA1 = "data/chunk-000/file-000.parquet", "data/chunk-000/file-001.parquet"
EPISODES_META = "meta/episodes/chunk-000/file-000.parquet"
CAM = "observation.images.top"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    from fixtures import lerobot_writer as lw

    out = {}
    for version in ("v3.0", "v2.1"):
        root = tmp_path_factory.mktemp(version.replace(".", ""))
        lw.write_dataset(root, lw.Spec(version=version, lengths=LENGTHS, tasks=("push", "stack", "push", "wipe")))
        out[version] = root
    return out


@pytest.fixture
def lerobot(written, tmp_path):
    """A fresh copy of the clean v3.0 dataset (``lerobot("v2.1")`` for the other version)."""

    def copy(version="v3.0"):
        root = tmp_path / version
        shutil.copytree(written[version], root)
        return root

    return copy


def edit(path, change):
    """Rewrite the parquet file ``path`` with ``change(columns)`` applied to its columns (a dict of lists)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    columns = table.to_pydict()
    change(columns)
    pq.write_table(pa.table({k: pa.array(v, type=table.schema.field(k).type) for k, v in columns.items()}), path)


def rows_of(columns, episode):
    return [i for i, e in enumerate(columns["episode_index"]) if e == episode]


def only(report, expected, also=()):
    """``expected`` is found, and nothing but it and the consequences ``also`` it brings along."""
    found = {f.name for f in report.findings}
    assert expected in found, "\n".join(report.table())
    assert found <= {expected, *also}, "\n".join(report.table())
    return report.of(expected)[0]


def test_orphaned_rows(lerobot):  # DROID: rows of episodes the metadata does not list
    root = lerobot()

    def orphan(c):
        for i in rows_of(c, 3):
            c["episode_index"][i] = 41

    edit(root / DATA1, orphan)
    found = only(diagnose(root), "orphan-rows", also={"metadata-mismatch"})
    assert found.count == 6 and found.examples[0] == (41, 0)


def test_repeated_episode_index_in_the_metadata(lerobot):  # DROID: non-unique episode_index
    root = lerobot()
    edit(root / EPISODES_META, lambda c: c["episode_index"].__setitem__(3, 2))
    found = only(diagnose(root), "episode-id-duplicate", also={"orphan-rows", "metadata-mismatch"})
    assert found.examples == [(2, None)]


def test_metadata_row_range_off_by_one(lerobot):  # lerobot/libero_10 needed an index fix
    root = lerobot()

    def shift(c):
        c["dataset_from_index"][2] += 1
        c["dataset_to_index"][2] += 1

    edit(root / EPISODES_META, shift)
    found = only(diagnose(root), "metadata-mismatch")
    assert found.examples == [(2, None)] and "[14, 17)" in found.detail


def test_global_index_repeated(lerobot):
    root = lerobot()
    edit(root / DATA0, lambda c: c["index"].__setitem__(7, 6))
    found = only(diagnose(root), "global-index-gap", also={"metadata-mismatch"})
    assert found.examples[0] == (1, 2)


def test_frame_index_gap(lerobot):
    root = lerobot()
    edit(root / DATA0, lambda c: c["frame_index"].__setitem__(9, 5))  # episode 1, t = 4 says 5
    found = only(diagnose(root), "frame-index-gap")
    assert found.examples == [(1, 5)]


def test_episode_split_in_two_runs(lerobot):
    root = lerobot()

    def interleave(c):  # episode 0's last two rows moved after episode 1
        order = [0, 1, 2, *range(5, 13), 3, 4]
        for k in c:
            c[k] = [c[k][i] for i in order]

    edit(root / DATA0, interleave)
    found = only(diagnose(root), "episode-split", also={"global-index-gap"})
    assert found.examples == [(0, 3)]


def test_timestamps_going_back(lerobot):
    root = lerobot()
    edit(root / DATA0, lambda c: c["timestamp"].__setitem__(8, c["timestamp"][7]))  # episode 1, t = 3
    found = only(diagnose(root), "timestamps-not-monotone")
    assert found.examples == [(1, 3)]


def test_timestamps_drifting_off_the_fps_grid(lerobot):
    root = lerobot()

    def drift(c):
        for k, i in enumerate(rows_of(c, 2)):
            c["timestamp"][i] += 0.003 * k

    edit(root / DATA1, drift)
    found = only(diagnose(root), "timestamps-off-grid")
    assert found.examples[0] == (2, 1) and found.count == 2


def test_done_inside_an_episode(lerobot):
    root = lerobot()
    edit(root / DATA0, lambda c: c["next.done"].__setitem__(7, True))
    found = only(diagnose(root), "flag-mid-episode")
    assert found.examples == [(1, 2)]


def test_video_shorter_than_its_episodes_v3(lerobot):  # three of eight sets list frames their videos lack
    root = lerobot()
    edit(root / EPISODES_META, lambda c: c[f"videos/{CAM}/to_timestamp"].__setitem__(3, 1.5))
    found = only(diagnose(root), "video-missing-frames")
    assert found.examples == [(3, None)]


def test_video_shorter_than_its_episode_v21(lerobot):
    from fixtures import lerobot_writer as lw

    root = lerobot("v2.1")
    video = root / "videos" / "chunk-000" / CAM / "episode_000001.mp4"
    lw.encode_video(video, [lw.frame_image(i, 0, 64, 64) for i in range(5, 10)], fps=10)  # 5 of 8 frames
    found = only(diagnose(root), "video-missing-frames")
    assert found.examples == [(1, None)] and "needs frames up to 8, the header says 5" in found.detail


def test_a_video_header_that_promises_frames_the_stream_lacks(lerobot, monkeypatch):
    from datasets_hub.doctor import lerobot_source

    root = lerobot("v2.1")
    real = lerobot_source._video_header
    monkeypatch.setattr(lerobot_source, "_video_header", lambda path, fps: (real(path, fps)[0] + 40, 9.0))
    video = root / "videos" / "chunk-000" / CAM / "episode_000002.mp4"
    from fixtures import lerobot_writer as lw

    lw.encode_video(video, [lw.frame_image(i, 0, 64, 64) for i in range(13, 15)], fps=10)  # 2 of 3 frames
    found = only(diagnose(root, video_sample=100), "video-missing-frames")
    assert "decoding finds none" in found.detail and "episode_000002.mp4" in found.detail


def test_a_damaged_parquet_file(lerobot):
    root = lerobot()
    data = (root / DATA1).read_bytes()
    (root / DATA1).write_bytes(data[: len(data) // 2])
    report = diagnose(root)
    found = only(report, "unreadable-file", also={"metadata-mismatch"})
    assert DATA1 in found.detail and report.exit_code() == 1


def antmaze_like(path, *, reset_at=None):
    """A D4RL-layout file shaped like antmaze: 2-d positions that move a little every step plus joint
    velocities, 1000-step timeouts; ``reset_at``: a row where the ant is put back at the start without
    any flag (the hidden reset behind antmaze's teleports)."""
    rng = np.random.default_rng(1)
    n = 3000
    pos = np.cumsum(rng.normal(0.004, 0.05, (n, 2)), axis=0)  # walking towards the goal
    if reset_at is not None:
        pos[reset_at:] -= pos[reset_at] - pos[0]
    vel = rng.normal(0, 1, (n, 6))
    with h5py.File(path, "w") as f:
        f["observations"] = np.concatenate([pos, vel], axis=1).astype(np.float32)
        f["actions"] = np.tanh(rng.normal(0, 1, (n, 2))).astype(np.float32)
        f["rewards"] = -np.linalg.norm(np.r_[pos[1:], pos[-1:]] - [1, 1], axis=1).astype(np.float32)  # of s[t+1]
        f["terminals"] = np.zeros(n, bool)
        f["timeouts"] = (np.arange(n) % 1000) == 999
    return path


def test_a_hidden_reset_is_a_teleport(tmp_path):  # D4RL antmaze
    assert diagnose(antmaze_like(tmp_path / "clean.hdf5")).findings == []
    found = only(diagnose(antmaze_like(tmp_path / "reset.hdf5", reset_at=1700)), "teleport")
    assert found.examples == [(1, 700)] and found.column == "observations"


def test_damaged_hdf5_and_npz_files(tmp_path):
    path = antmaze_like(tmp_path / "cut.hdf5")
    path.write_bytes(path.read_bytes()[:2000])
    assert only(diagnose(path), "unreadable-file").column == "cut.hdf5"
    npz = tmp_path / "cut.npz"
    np.savez(npz, observations=np.zeros((10, 2)), actions=np.ones((10, 1)))
    npz.write_bytes(npz.read_bytes()[:300])
    assert only(diagnose(npz), "unreadable-file").column == "cut.npz"


def rlds_episode(first, length, *, late_first=None):
    from fixtures.tfrecord import encode_example

    t = np.arange(length)
    g = first + t
    is_first = t == 0
    if late_first is not None:
        is_first[late_first] = True
    return encode_example(
        {
            "steps/observation/state": np.stack([g + 0.5, np.sin(g)], 1).astype(np.float32),
            "steps/action": (-g * 0.01).astype(np.float32),
            "steps/reward": (g % 3).astype(np.float32),
            "steps/is_first": is_first,
            "steps/is_last": t == length - 1,
            "steps/is_terminal": t == length - 1,
            "steps/language_instruction": [f"task {first}"] * length,
        }
    )


def test_tfrecord_damage_and_a_late_is_first(tmp_path):
    from fixtures.tfrecord import write_tfrecord

    clean = write_tfrecord(tmp_path / "clean.tfrecord-00000-of-00001", [rlds_episode(0, 6), rlds_episode(6, 4)])
    report = diagnose(clean)
    assert report.findings == [] and report.rows == 10 and report.episodes == 2
    late = write_tfrecord(tmp_path / "late.tfrecord", [rlds_episode(0, 6), rlds_episode(6, 4, late_first=2)])
    assert only(diagnose(late), "flag-mid-episode").examples == [(1, 2)]
    data = bytearray(clean.read_bytes())
    data[40] ^= 0xFF  # a byte inside the first record's data
    damaged = tmp_path / "damaged.tfrecord"
    damaged.write_bytes(bytes(data))
    found = only(diagnose(damaged), "unreadable-file")
    assert "CRC" in found.detail and "byte 0" in found.detail


def test_every_defect_class_is_planted_by_some_test():
    """The planted-defect tests of the three doctor test files cover every registered class."""
    from pathlib import Path

    from datasets_hub.doctor import CLASSES

    here = Path(__file__).parent
    text = "".join((here / name).read_text() for name in ("test_doctor.py", "test_doctor_sources.py"))
    missing = [name for name in CLASSES if f'"{name}"' not in text]
    assert missing == []


def test_unknown_paths_and_targets_are_refused(tmp_path):
    from datasets_hub.errors import InvalidParameter

    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(InvalidParameter, match="nothing the doctor can read"):
        diagnose(tmp_path)
    with pytest.raises(InvalidParameter, match="max_rows"):
        diagnose(tmp_path, max_rows=0)


def test_large_flat_files_are_read_as_whole_episodes_within_the_row_budget(tmp_path):
    path = antmaze_like(tmp_path / "big.hdf5", reset_at=1700)
    report = diagnose(path, max_rows=1500)  # two of the three 1000-step episodes, drawn at random
    assert report.sampled and report.rows_read == 2000 and report.rows == 3000
    assert any("2,000 of 3,000 rows read" in n for n in report.notes)
    arrays = {"observations": np.arange(3000, dtype=np.float32)[:, None] * [1, -1], "actions": np.ones((3000, 1))}
    arrays["terminals"] = (np.arange(3000) % 500) == 499
    np.savez_compressed(tmp_path / "big.npz", **arrays)
    report = diagnose(tmp_path / "big.npz", max_rows=1200)  # npz streams from the start: its first episodes
    assert report.sampled and report.rows_read == 1500 and report.episodes == 6


def test_image_arrays_are_sampled_and_black_frames_found(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "pixels.hdf5"
    with h5py.File(path, "w") as f:
        f["observations/state"] = rng.normal(0, 1, (400, 3)).astype(np.float32)
        f["observations/pixels"] = np.zeros((400, 32, 32, 3), np.uint8)  # a camera that recorded nothing
        f["actions"] = rng.uniform(-1, 1, (400, 2)).astype(np.float32)
        f["terminals"] = (np.arange(400) % 100) == 99
    found = only(diagnose(path), "all-zero-column")
    assert found.column == "observations/pixels" and found.unit == "sampled frames" and found.count == 64


def test_a_large_lerobot_dataset_samples_data_files_but_checks_structure_on_every_row(lerobot):
    root = lerobot()
    edit(root / DATA1, lambda c: c["frame_index"].__setitem__(2, 7))  # episode 2, t = 2 says 7
    report = diagnose(root, max_rows=5)  # one of the two data files is read for the step checks
    assert report.sampled and report.rows_read in (13, 9) and report.rows == 22
    assert only(report, "frame-index-gap").examples == [(2, 7)]
    assert report.checks.count("structure") == 1


def test_a_camera_that_recorded_black_frames(lerobot):
    from fixtures import lerobot_writer as lw

    root = lerobot("v2.1")
    for e, length in enumerate(LENGTHS):
        black = np.zeros((length, 64, 64, 3), np.uint8)
        lw.encode_video(root / "videos" / "chunk-000" / CAM / f"episode_{e:06d}.mp4", black, fps=10)
    found = only(diagnose(root, video_sample=8), "all-zero-column")
    assert found.column == CAM and found.unit == "sampled frames"


def test_episode_groups_within_the_row_budget_and_their_image_arrays_sampled(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "main_data.hdf5"
    with h5py.File(path, "w") as f:  # Minari's layout: T+1 observations per episode group
        for e in range(6):
            g = f.create_group(f"episode_{e}")
            g["observations/state"] = rng.normal(0, 1, (51, 3)).astype(np.float32)
            g["observations/pixels"] = np.zeros((51, 32, 32, 3), np.uint8)
            g["actions"] = rng.uniform(-1, 1, (50, 2)).astype(np.float32)
            g["rewards"] = rng.normal(0, 1, 50)
            g["terminations"] = np.r_[np.zeros(49, bool), True]
            g["truncations"] = np.zeros(50, bool)
    report = diagnose(path, max_rows=120)
    assert report.sampled and report.rows == 300 and report.rows_read == 150 and report.episodes == 6
    found = only(report, "all-zero-column")
    assert found.column == "observations/pixels" and found.unit == "sampled frames"
