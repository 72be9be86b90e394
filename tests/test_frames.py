"""Compressed frame leaves (datasets_hub/build/frames.py, build format 3): codecs, the build, every read path."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest
import torch

from datasets_hub.buffers.ensemble import ReplayBufferEnsemble
from datasets_hub.buffers.frame_stack import FrameStack
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers.frame_stack import FullStackSampler
from datasets_hub.buffers.samplers.goal import GoalSampler
from datasets_hub.buffers.samplers.random import RandomSampler
from datasets_hub.buffers.samplers.slice import SliceSampler
from datasets_hub.buffers.samplers.window import WindowSampler
from datasets_hub.buffers.writers import ImmutableDatasetWriter
from datasets_hub.build import frame_device, frame_h264
from datasets_hub.build import frames as fr
from datasets_hub.build.format import MANIFEST, write_manifest_checksum
from datasets_hub.build.frames import FrameCodec, FrameError, psnr, resolve_frames
from datasets_hub.build.identity import build_fingerprint
from datasets_hub.build.pipeline import build
from datasets_hub.build.reader import open_build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import CacheError, InvalidParameter
from datasets_hub.interop.torch_data import BufferDataset
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader, fake_episodes

LENGTHS = [9, 4, 12, 7]
H, W = 48, 64


def source_frame(row: int, layout: str = "hwc") -> np.ndarray:
    """Camera-like content that moves with the row: smooth gradients, a moving blob and fixed texture."""
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    cx, cy = 8 + (row * 3) % (W - 16), 8 + (row * 2) % (H - 16)
    blob = 90 * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 40.0)
    texture = np.random.default_rng(7).normal(0, 6, (H, W))
    base = np.stack(
        [
            110 + 60 * np.sin((xx + 2.5 * row) / 9.0) + blob,
            120 + 50 * np.cos((yy - 1.5 * row) / 7.0) + texture,
            100 + 40 * np.sin((xx + yy + 4 * row) / 13.0) + blob / 2,
        ],
        -1,
    )
    img = base.clip(0, 255).astype(np.uint8)
    if layout == "chw":
        return np.ascontiguousarray(img.transpose(2, 0, 1))
    if layout == "hw":
        return np.ascontiguousarray(img[..., 1])
    return img


class ImageLoader(FakeLoader):
    """fake_episodes plus a camera ``("observation_image")``: frame of observation row r = source_frame(r)."""

    def episodes(self, spec, files, ctx):
        layout = spec.params.get("layout", "hwc")
        row = 0
        for e, length in enumerate(spec.params.get("lengths", LENGTHS)):
            td = fake_episodes([length], first_episode=e, first_row=row)
            pix = torch.from_numpy(np.stack([source_frame(r, layout) for r in range(row, row + length + 1)]))
            td.set("pixels", pix[:-1])
            td.set(("next", "pixels"), pix[1:])
            yield td
            row += length + 1


def make_build(codec: FrameCodec, **params) -> DatasetStorage:
    spec = DatasetSpec(id="fake/cam", loader="fake", params={"lengths": LENGTHS, **params})
    return DatasetStorage(build(spec, ImageLoader(), {}, [], frames=codec))


def buffer(storage, sampler=None, seed=0, **kw):
    return TensorDictReplayBuffer(
        storage=storage,
        sampler=sampler if sampler is not None else RandomSampler(),
        writer=ImmutableDatasetWriter(),
        generator=torch.Generator().manual_seed(seed),
        **kw,
    )


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DATASETS_HUB_CACHE", str(tmp_path_factory.mktemp("cache")))
        return {c: make_build(resolve_frames(c, None, None)) for c in ("raw", "png", "jpeg", "h264")}


# -- choosing a codec ---------------------------------------------------------------------------------
def test_auto_is_raw_below_the_limit_and_jpeg_above_it():
    assert resolve_frames(None, None, None) == FrameCodec("raw")
    assert resolve_frames(None, None, fr.RAW_LIMIT_BYTES) == FrameCodec("raw")
    assert resolve_frames("auto", None, fr.RAW_LIMIT_BYTES + 1) == FrameCodec("jpeg", fr.DEFAULT_QUALITY)
    assert resolve_frames("jpeg", 75, None) == FrameCodec("jpeg", 75)
    assert resolve_frames("PNG", None, None) == FrameCodec("png")


def test_auto_above_the_limit_takes_the_loaders_codec():
    over = fr.RAW_LIMIT_BYTES + 1
    assert resolve_frames(None, None, over, above_limit="png") == FrameCodec("png")
    assert resolve_frames(None, None, fr.RAW_LIMIT_BYTES, above_limit="png") == FrameCodec("raw")
    assert resolve_frames(None, None, None, above_limit="png") == FrameCodec("raw")  # no estimate: raw
    assert resolve_frames(None, 90, over, above_limit="png") == FrameCodec("jpeg", 90)  # a quality asks for JPEG
    assert resolve_frames("raw", None, over, above_limit="png") == FrameCodec("raw")  # the user's choice stands
    with pytest.raises(ValueError, match="above_limit"):
        resolve_frames(None, None, over, above_limit="raw")


def test_bad_frame_options_are_refused_with_the_fix():
    with pytest.raises(InvalidParameter, match="did you mean frames='jpeg'"):
        resolve_frames("jpg", None, None)
    with pytest.raises(InvalidParameter, match="applies to JPEG"):
        resolve_frames("png", 80, None)
    with pytest.raises(InvalidParameter, match="1 to 100"):
        resolve_frames("jpeg", 0, None)


def test_the_codec_enters_the_fingerprint_and_a_raw_build_keeps_its_old_one():
    spec = DatasetSpec(id="fake/cam", loader="fake", params={"lengths": LENGTHS})
    loader = ImageLoader()
    plain = build_fingerprint(spec, loader)
    assert build_fingerprint(spec, loader, FrameCodec("raw")) == plain
    prints = {build_fingerprint(spec, loader, FrameCodec("jpeg", q)) for q in (80, 90)}
    prints.add(build_fingerprint(spec, loader, FrameCodec("png")))
    assert len(prints | {plain}) == 4


# -- codecs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["hwc", "chw", "hw"])
def test_png_is_exact_and_jpeg_close_in_every_layout(layout):
    frame = source_frame(5, layout)
    assert fr.image_layout(torch.uint8, frame.shape) == layout
    out = np.empty_like(frame)
    fr.decode_into(fr.encode(frame, FrameCodec("png"), layout), "png", layout, out)
    assert np.array_equal(out, frame)
    fr.decode_into(fr.encode(frame, FrameCodec("jpeg", fr.DEFAULT_QUALITY), layout), "jpeg", layout, out)
    assert psnr(out, frame) >= fr.PSNR_FLOOR_DB


def test_only_uint8_images_are_frames():
    assert fr.image_layout(torch.float32, (48, 64, 3)) is None
    assert fr.image_layout(torch.uint8, (77,)) is None  # text bytes
    assert fr.image_layout(torch.uint8, (48, 64, 5)) is None
    assert fr.image_layout(torch.uint8, (4, 4, 3)) is None


# -- the build -----------------------------------------------------------------------------------------
def test_the_manifest_records_codec_quality_bytes_and_psnr(builds):
    manifest = builds["jpeg"].manifest
    assert manifest["version"] == 3 and manifest["frames"] == {"codec": "jpeg", "quality": fr.DEFAULT_QUALITY}
    assert manifest["layout"]["frames"]["pixels"] == {
        "codec": "jpeg", "quality": fr.DEFAULT_QUALITY, "layout": "hwc", "dtype": "uint8", "shape": [H, W, 3],
    }  # fmt: skip
    stats = manifest["stats"]["frames"]["pixels"]
    rows = sum(LENGTHS) + len(LENGTHS)
    assert stats["rows"] == rows and stats["decoded_bytes"] == rows * H * W * 3
    assert stats["bytes"] == manifest["schema"]["frames/pixels/blob"]["rows"] < stats["decoded_bytes"] / 3
    assert stats["psnr_db"]["min"] >= fr.PSNR_FLOOR_DB and stats["psnr_rows"] == -(-rows // fr.PSNR_EVERY)
    assert "obs/pixels" not in manifest["schema"] and "obs/observation" in manifest["schema"]
    png = builds["png"].manifest["stats"]["frames"]["pixels"]
    assert png["psnr_db"] is None and png["exact_rows"] == png["psnr_rows"]
    assert "frames" not in builds["raw"].manifest["layout"]
    h264 = builds["h264"].manifest  # the codec that needs format 4: older hubs refuse it by version
    assert h264["version"] == 4 and h264["frames"] == {"codec": "h264", "quality": frame_h264.DEFAULT_QP}
    assert h264["layout"]["frames"]["pixels"]["codec"] == "h264"
    assert h264["stats"]["frames"]["pixels"]["psnr_db"]["min"] >= frame_h264.PSNR_FLOOR_DB


@pytest.mark.parametrize("codec", ["jpeg", "h264"])
def test_each_lossy_frame_is_its_own_source_frame(builds, codec):
    """Frame identity: every decoded frame is closer to its own source frame than to its neighbours, and
    at or above the codec's documented PSNR floor."""
    stored = builds[codec].get(torch.arange(len(builds[codec])))
    rows = (stored["episode"] + torch.arange(len(builds[codec]))).numpy()
    sources = np.stack([source_frame(r) for r in range(sum(LENGTHS) + len(LENGTHS))])
    for frame, row in zip(stored["pixels"].numpy(), rows.tolist(), strict=True):
        own = psnr(frame, sources[row])
        assert own >= fr.psnr_floor(codec)
        for other in (row - 1, row + 1):
            if 0 <= other < len(sources):
                assert psnr(frame, sources[other]) < own


def test_png_and_raw_builds_are_exact(builds):
    everything = {c: builds[c].get(torch.arange(len(builds[c]))) for c in ("raw", "png")}
    assert (everything["png"] == everything["raw"]).all()
    rows = (everything["raw"]["episode"] + torch.arange(len(builds["raw"]))).numpy()
    assert np.array_equal(everything["raw"]["pixels"].numpy(), np.stack([source_frame(r) for r in rows]))


@pytest.mark.parametrize("layout", ["chw", "hw"])
def test_other_layouts_build_and_read_back(tmp_path, layout):
    storage = make_build(FrameCodec("png"), layout=layout)
    td = storage.get(torch.tensor([0, 10]))
    assert np.array_equal(td["next", "pixels"][1].numpy(), source_frame(12, layout))  # row 10 is episode 1, t=1


def test_a_build_of_format_2_still_opens(tmp_path):
    """Builds made before format 3 (no frames, version 2) open and sample as they did."""
    storage = make_build(FrameCodec("raw"))
    manifest = json.loads((storage.path / MANIFEST).read_text())
    assert manifest["version"] == 2  # a build without compressed frames is written as the oldest version that fits
    del manifest["frames"]  # what a writer before format 3 left
    (storage.path / MANIFEST).write_text(json.dumps(manifest))
    write_manifest_checksum(storage.path)
    again = DatasetStorage(storage.path)
    assert again.manifest["version"] == 2
    assert (again.get(torch.arange(5)) == storage.get(torch.arange(5))).all()


# -- damaged builds ------------------------------------------------------------------------------------
def test_a_corrupt_frame_names_its_episode_and_frame(tmp_path):
    storage = make_build(FrameCodec("jpeg", 90))
    offsets = open_build(storage.path).leaves["frames/pixels/offsets"].numpy()
    row = LENGTHS[0] + 1 + 3  # episode 1, frame 3
    blob = storage.path / "data" / "frames" / "pixels" / "blob.memmap"
    data = bytearray(blob.read_bytes())
    data[int(offsets[row]) : int(offsets[row]) + 40] = b"\x00" * 40  # clobber the JPEG header
    blob.write_bytes(bytes(data))
    damaged = DatasetStorage(storage.path)  # sizes still agree: open does not hash (verify does)
    assert damaged.get(torch.tensor([0])) is not None
    with pytest.raises(FrameError, match=r"pixels: the jpeg frame of episode 1, frame 3 \(row 13\)"):
        damaged.get(torch.tensor([LENGTHS[0] + 3]))


def test_offsets_that_do_not_match_the_blob_are_refused_at_open(tmp_path):
    storage = make_build(FrameCodec("png"))
    path = storage.path / "data" / "frames" / "pixels" / "offsets.memmap"
    values = np.fromfile(path, dtype=np.int64)
    values[-1] += 1
    values.tofile(path)
    with pytest.raises(CacheError, match="do not run from 0 to"):
        DatasetStorage(storage.path)


def test_a_layout_naming_a_key_without_its_columns_is_refused(tmp_path):
    storage = make_build(FrameCodec("png"))
    manifest = json.loads((storage.path / MANIFEST).read_text())
    manifest["schema"]["frames/stray/blob"] = manifest["schema"].pop("frames/pixels/blob")
    (storage.path / "data/frames/pixels/blob.memmap").rename(storage.path / "data/frames/stray.memmap")
    (storage.path / "data/frames/stray").mkdir()
    (storage.path / "data/frames/stray.memmap").rename(storage.path / "data/frames/stray/blob.memmap")
    (storage.path / MANIFEST).write_text(json.dumps(manifest))
    write_manifest_checksum(storage.path)
    with pytest.raises(CacheError, match="needs columns"):
        DatasetStorage(storage.path)


# -- every read path -----------------------------------------------------------------------------------
def _plain(storage):
    return buffer(storage).sample(32)


def _slices(storage):
    return buffer(storage, SliceSampler(slice_len=4)).sample(16)


def _windows(storage):
    return buffer(storage, WindowSampler({"pixels": [-3, -1, 0, 2], "action": [0, 1]})).sample(16)


def _frame_stack(storage):
    return buffer(storage, transform=FrameStack(3, keys=["pixels"])).sample(16)


def _full_stacks(storage):
    return buffer(storage, FullStackSampler(3), transform=FrameStack(3, keys=["pixels"])).sample(16)


def _goals(storage):
    return buffer(storage, GoalSampler(0.2, 0.5, 0.3, goal_keys=["pixels"])).sample(16)


def _ensemble(storage):
    ensemble = ReplayBufferEnsemble(
        buffer(storage, seed=1), buffer(storage, seed=2), generator=torch.Generator().manual_seed(3)
    )
    return ensemble.sample(16)


def _dataloader_workers(storage):
    loader = BufferDataset(buffer(storage)).dataloader(batch_size=10, num_workers=2)
    return torch.cat(list(loader))


PATHS = [_plain, _slices, _windows, _frame_stack, _full_stacks, _goals, _ensemble, _dataloader_workers]


def _pixel_leaves(td):
    return [
        k
        for k in td.keys(include_nested=True, leaves_only=True)
        if "pixels" in (k if isinstance(k, tuple) else (k,))
        and not str(k[-1] if isinstance(k, tuple) else k).endswith("_is_pad")
    ]


@pytest.mark.parametrize("read", PATHS, ids=[p.__name__.strip("_") for p in PATHS])
def test_every_read_path_serves_compressed_frames(builds, read):
    """PNG gives exactly the raw build's samples (same seed); JPEG and h264 the same samples with frames
    close to them."""
    raw, png = read(builds["raw"]), read(builds["png"])
    assert (png == raw).all()
    frame_keys = _pixel_leaves(raw)
    assert frame_keys
    for codec in ("jpeg", "h264"):
        lossy = read(builds[codec])
        assert (lossy.exclude(*frame_keys) == raw.exclude(*frame_keys)).all()
        for key in frame_keys:
            a, b = lossy.get(key).numpy(), raw.get(key).numpy()
            assert a.shape == b.shape and a.dtype == np.uint8
            flat_a, flat_b = a.reshape(-1, H * W), b.reshape(-1, H * W)
            for x, y in zip(flat_a, flat_b, strict=True):
                if y.any():  # a padded (zero) frame stays zero, raw or not
                    assert psnr(x, y) >= fr.psnr_floor(codec) - 3  # against the raw frame (itself the source)
                else:
                    assert not x.any()


# -- decoding on the host: once per frame, straight into the batch --------------------------------------
def _one_by_one(column, rows):
    """What take must give: each row's frame decoded on its own."""
    out = np.empty((len(rows), *column.frame_shape), dtype=np.uint8)
    for i, row in enumerate(rows):
        lo, hi = int(column.offsets[row]), int(column.offsets[row + 1])
        fr.decode_into(column.blob[lo:hi].tobytes(), column.codec, column.layout, out[i])
    return out


@pytest.fixture
def decoded_rows(monkeypatch):
    """Every row a FrameColumn decodes, in order (frames copied from another place are not counted)."""
    rows: list[int] = []
    decode = fr.FrameColumn._decode_rows

    def counting(column, todo, out, slots):
        rows.extend(todo.tolist())
        return decode(column, todo, out, slots)

    monkeypatch.setattr(fr.FrameColumn, "_decode_rows", counting)
    return rows


@pytest.mark.parametrize("codec", ["jpeg", "png", "h264"])
def test_take_decodes_each_row_once_into_its_output(builds, codec, decoded_rows):
    column = open_build(builds[codec].path).obs[("pixels",)]
    n = len(column)
    rows = np.array([[5, 0, 5], [n - 1, -1, 7]])  # repeats, and -1 is the last row again
    want = _one_by_one(column, np.where(rows < 0, rows + n, rows).reshape(-1)).reshape(2, 3, H, W, 3)
    assert np.array_equal(column.take(rows), want)
    assert sorted(decoded_rows) == [0, 5, 7, n - 1]  # each distinct row once
    out = np.zeros((2, 3, H, W, 3), dtype=np.uint8)
    assert column.take(rows, out=out) is out and np.array_equal(out, want)
    with pytest.raises(ValueError, match=r"out must be C-contiguous uint8 \[2, 3, 48, 64, 3\]"):
        column.take(rows, out=np.zeros((2, 3, H, W, 3), dtype=np.int16))

    decoded_rows.clear()
    done = np.array([7, 0, 9])
    done_frames = column.take(done)
    decoded_rows.clear()
    assert np.array_equal(column.take(rows, reuse=(done, done_frames)), want)
    assert sorted(decoded_rows) == [5, n - 1]  # rows 0 and 7 are copied from the frames already decoded


def test_a_damaged_frame_in_a_batch_is_named_whatever_the_thread(builds, monkeypatch):
    column = open_build(builds["jpeg"].path).obs[("pixels",)]
    blob = np.array(column.blob)
    lo = int(column.offsets[10])
    blob[lo : lo + 40] = 0  # the JPEG header of row 10
    damaged = fr.FrameColumn(column.key, blob, column.offsets, "jpeg", "hwc", column.frame_shape)
    monkeypatch.setenv("DATASETS_HUB_FRAME_THREADS", "3")
    with pytest.raises(FrameError, match=r"pixels: the jpeg frame of row 10 cannot be decoded"):
        damaged.take(np.arange(len(column)))
    offsets = np.array(column.offsets)
    offsets[4] = offsets[5] + 1  # row 4 ends before it starts
    broken = fr.FrameColumn(column.key, column.blob, offsets, "jpeg", "hwc", column.frame_shape)
    with pytest.raises(FrameError, match=r"row 4 has offsets \d+\.\.\d+ outside"):
        broken.take([1, 4])


def test_a_stored_jpeg_of_another_size_is_a_damaged_frame_not_a_partial_one(builds):
    """A valid JPEG smaller than the stored frame shape would fit the decode buffer: it is refused by name
    rather than leaving the rest of the frame as whatever the batch memory held."""
    import simplejpeg

    column = open_build(builds["jpeg"].path).obs[("pixels",)]
    h, w, c = column.frame_shape
    small = simplejpeg.encode_jpeg(np.full((h // 2, w // 2, c), 200, dtype=np.uint8), quality=75, colorspace="RGB")
    frames = [bytes(column.blob[column.offsets[r] : column.offsets[r + 1]]) for r in range(3)]
    frames[1] = small
    blob = np.frombuffer(b"".join(frames), dtype=np.uint8)
    offsets = np.cumsum([0, *map(len, frames)]).astype(np.int64)
    mixed = fr.FrameColumn(column.key, blob, offsets, "jpeg", "hwc", column.frame_shape)
    assert np.array_equal(mixed.take([0, 2]), column.take([0, 2]))
    with pytest.raises(FrameError, match=r"pixels: the jpeg frame of row 1 cannot be decoded \(a \[24, 32, 3\] image"):
        mixed.take([0, 1, 2])


def test_a_window_batch_decodes_each_camera_frame_once_and_gives_the_same_batch(builds, decoded_rows, monkeypatch):
    """A window of offsets 0..3 holds the anchor's frame and the next one: the plain next/pixels of the
    batch copy them from it (only an episode's last step needs its final frame, which no window holds)."""
    storage = builds["jpeg"]

    def sample():
        windows = WindowSampler({"pixels": [0, 1, 2, 3], "action": [0, 1]})
        return buffer(storage, windows, seed=3).sample(64)

    once = sample()
    rows_once = list(decoded_rows)
    assert len(rows_once) == len(set(rows_once))  # no frame of the batch is decoded twice
    decoded_rows.clear()
    monkeypatch.setattr(DatasetStorage, "_reusable", lambda self, column, extras: None)  # every gather decodes
    twice = sample()
    assert len(decoded_rows) > len(rows_once) and set(decoded_rows) == set(rows_once)
    assert set(once.keys(True, True)) == set(twice.keys(True, True))
    for key in twice.keys(True, True):
        assert torch.equal(once[key], twice[key]), key  # the same batch, bit for bit


def test_a_window_the_sampler_changed_is_not_reused(builds, decoded_rows):
    """Only the very frames the storage decoded (the window tensor in the batch's extras) are reused."""
    storage = builds["jpeg"]
    rows = torch.tensor([0, 3, 8])
    window = storage.gather_key("pixels", rows)
    decoded_rows.clear()
    state = storage.gather(rows, {"pixels": window.clone()})  # another tensor: next/pixels decoded again
    assert len(decoded_rows) == 3
    decoded_rows.clear()
    assert torch.equal(storage.gather(rows, {"pixels": window})["next", "pixels"], state["next", "pixels"])
    assert len(decoded_rows) == 3  # the window holds rows t, not t + 1: nothing to copy from it
    assert torch.equal(state["next", "pixels"], storage.gather(rows)["next", "pixels"])


def test_frame_threads_are_the_cores_shared_by_the_sampling_threads(monkeypatch):
    import os

    monkeypatch.delenv("DATASETS_HUB_FRAME_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # what a sampling thread of ThreadedBatches sets, process-wide
        assert fr.thread_count() == cores  # not torch's count
    finally:
        torch.set_num_threads(threads)
    monkeypatch.setenv("DATASETS_HUB_FRAME_THREADS", "4")
    assert fr.sampling_threads() == 4  # one sampling thread: every frame thread
    with fr._Taking(), fr._Taking():
        assert fr.sampling_threads() == 2  # two take at once: half each
        with fr._Taking(), fr._Taking(), fr._Taking():
            assert fr.sampling_threads() == 1  # as many as the cores or more: each on its own thread


# -- decoding on a device ------------------------------------------------------------------------------
def test_device_decode_falls_back_to_host_threads_without_a_device_decoder(builds):
    column = open_build(builds["jpeg"].path).obs[("pixels",)]
    rows = np.array([[0, 5], [7, 5]])
    assert not frame_device.device_decoder_available("cpu")
    out = frame_device.decode_on_device(column, rows, "cpu")
    assert out.shape == (2, 2, H, W, 3) and torch.equal(out, torch.from_numpy(column.take(rows)))


def test_device_decode_hands_the_stored_bytes_to_nvjpeg_in_one_batch(builds, monkeypatch):
    """The CUDA path, checked on the CPU with a stand-in for torchvision.io.decode_jpeg (no GPU here)."""
    column = open_build(builds["jpeg"].path).obs[("pixels",)]
    calls = []

    def decode_jpeg(data, mode, device):
        calls.append((len(data), mode, torch.device(device)))
        out = []
        for tensor in data:
            image = np.empty((H, W, 3), dtype=np.uint8)
            fr.decode_into(tensor.numpy().tobytes(), "jpeg", "hwc", image)
            out.append(torch.from_numpy(image).permute(2, 0, 1))  # nvJPEG gives [C, H, W]
        return out

    io = types.ModuleType("torchvision.io")
    io.decode_jpeg = decode_jpeg
    io.ImageReadMode = types.SimpleNamespace(RGB="RGB", GRAY="GRAY")
    monkeypatch.setitem(sys.modules, "torchvision", types.ModuleType("torchvision"))
    monkeypatch.setitem(sys.modules, "torchvision.io", io)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert frame_device.device_decoder_available("cuda")
    rows = np.array([3, 1, 4])
    out = frame_device.decode_on_device(column, rows, "cuda")
    assert calls == [(3, "RGB", torch.device("cuda"))]
    assert torch.equal(out, torch.from_numpy(column.take(rows)))


# -- published builds --------------------------------------------------------------------------------
@pytest.mark.parametrize("resident", ["lazy", "full", "pool"])
@pytest.mark.parametrize("codec", ["jpeg", "h264"])
def test_a_published_build_with_compressed_frames_samples_like_the_local_one(builds, tmp_path, resident, codec):
    """Export carries the blob and offsets as they are; a lazy copy fetches the blob chunks its frames lie in."""
    import datasets_hub as dh
    from datasets_hub.remote.publish import export

    pytest.importorskip("zarr")
    local = buffer(builds[codec])
    folder = export(local, tmp_path / "pub", chunk_bytes=4096)  # small chunks: a batch touches some of them
    kwargs = {"pool_episodes": 2} if resident == "pool" else {}
    remote = dh.load(folder.as_uri(), resident=resident, **kwargs)
    if resident == "full":
        remote.storage.wait_complete(timeout=60)
    rows = torch.tensor([0, 3, 11, 20, 31])
    if resident == "pool":  # rows of the pool's episodes only
        batch = remote.sample(8)
        assert (batch.exclude("index") == local[batch["index"]].exclude("index")).all()
        return
    assert (remote[rows] == local[rows]).all()
    card = (folder / "README.md").read_text()
    quality = {"jpeg": f"{fr.DEFAULT_QUALITY}", "h264": f"qp {frame_h264.DEFAULT_QP}"}[codec]
    assert "## Compressed frames" in card and f"| `pixels` | {codec} | {quality} |" in card
    stacks = buffer(remote.storage, transform=FrameStack(3, keys=["pixels"])).sample(8)
    assert (stacks == buffer(builds[codec], transform=FrameStack(3, keys=["pixels"])).sample(8)).all()


def test_decode_device_serves_every_read_path_and_pickles(builds):
    storage = DatasetStorage(builds["jpeg"].path, decode_device="cpu")
    for read in (_plain, _windows, _frame_stack, _goals):
        assert (read(storage) == read(builds["jpeg"])).all()
    again = __import__("pickle").loads(__import__("pickle").dumps(storage))
    assert again.decode_device == torch.device("cpu")


def test_decode_device_and_device_copies_are_refused_where_they_cannot_apply(builds):
    with pytest.raises(InvalidParameter, match="holds no compressed frames"):
        DatasetStorage(builds["raw"].path, decode_device="cpu")
    with pytest.raises(InvalidParameter, match="decode_device='cuda'"):
        builds["jpeg"].device_copy("cpu")


def test_frames_asked_for_a_dataset_without_camera_keys_are_refused():
    spec = DatasetSpec(id="fake/vectors", loader="fake", params={"lengths": [3, 2]})
    with pytest.raises(InvalidParameter, match=r"no camera key .*{'observation': 'float32 \[3\]'"):
        build(spec, FakeLoader(), {}, [], frames=FrameCodec("jpeg", 90))


def test_frame_threads_follow_the_environment(monkeypatch):
    monkeypatch.setattr(torch.utils.data, "get_worker_info", object)  # any worker info
    assert fr.thread_count() == 1  # inside a DataLoader worker process: its siblings use the other cores
    monkeypatch.setenv("DATASETS_HUB_FRAME_THREADS", "3")
    assert fr.thread_count() == fr.build_thread_count() == 3
    monkeypatch.setenv("DATASETS_HUB_FRAME_THREADS", "many")
    with pytest.raises(InvalidParameter, match="DATASETS_HUB_FRAME_THREADS"):
        fr.thread_count()


def test_verify_rehashes_the_frame_leaves_and_finds_a_damaged_blob(monkeypatch):
    from importlib.metadata import EntryPoint

    from datasets_hub import plugins
    from datasets_hub.cache import verify as cv

    # fake/ is no installed loader: let verify recompute the fingerprint with the test's own
    real = plugins._entry_points()
    ep = EntryPoint(name="fake", value=f"{__name__}:ImageLoader", group=plugins.GROUP)
    monkeypatch.setattr(plugins, "_entry_points", lambda: {**real, "fake": ep})
    monkeypatch.setattr("datasets_hub.plugins.get_loader", lambda name: ImageLoader())
    monkeypatch.setattr(
        "datasets_hub.catalogue.resolve",
        lambda dataset_id, **params: DatasetSpec(id=dataset_id, loader="fake", params=params),
    )
    storage = make_build(FrameCodec("jpeg", 90))
    result = cv.verify_build(storage.path, raw=False)
    assert result.ok and not result.notes, (result.problems, result.notes)  # the codec enters the fingerprint
    assert any("frames/pixels/blob.memmap: ok" in line for line in result.checked)
    blob = storage.path / "data" / "frames" / "pixels" / "blob.memmap"
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF
    blob.write_bytes(bytes(data))
    assert any("blob.memmap" in p for p in cv.verify_build(storage.path, raw=False).problems)


def test_an_in_memory_copy_keeps_frames_compressed_and_reads_the_same(builds):
    copy = DatasetStorage(builds["jpeg"].path, in_memory=True)
    assert (_slices(copy) == _slices(builds["jpeg"])).all()
    assert (_frame_stack(copy) == _frame_stack(builds["jpeg"])).all()


def test_the_doctor_reads_compressed_frames_like_raw_ones(builds):
    from datasets_hub.doctor.diagnosis import diagnose

    raw, jpeg = diagnose(builds["raw"].path), diagnose(builds["jpeg"].path)
    assert [f.check for f in jpeg.findings] == [f.check for f in raw.findings]
    assert jpeg.rows == raw.rows and set(jpeg.checks) == set(raw.checks)
