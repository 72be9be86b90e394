"""The h264 frame codec (datasets_hub.build.frame_h264): one intra picture a row, decodable on its own.

The build-level behaviour it shares with JPEG (every read path, take, the manifest's PSNR) is covered with the
other codecs in tests/test_frames.py; here is what is particular to it."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from datasets_hub.build import frame_h264
from datasets_hub.build import frames as fr
from datasets_hub.build.format import format_version_of
from datasets_hub.build.frames import FrameCodec, FrameError, psnr, resolve_frames
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import InvalidParameter, MissingDependency

pytest.importorskip("av")

from test_frames import LENGTHS, make_build, source_frame  # the shared camera fixture

DEFAULT = FrameCodec("h264", frame_h264.DEFAULT_QP)


def _round_trip(frame: np.ndarray, layout: str, codec: FrameCodec = DEFAULT) -> tuple[np.ndarray, bytes]:
    data = fr.encode(frame, codec, layout)
    out = np.empty_like(frame)
    fr.decode_into(data, "h264", layout, out)
    return out, data


# -- choosing it ---------------------------------------------------------------------------------------
def test_the_quantiser_is_the_quality_of_h264_frames():
    assert resolve_frames("h264", None, None) == DEFAULT
    assert resolve_frames("H264", 20, None) == FrameCodec("h264", 20)
    with pytest.raises(InvalidParameter, match=r"x264's quantiser, an int from 1 \(best\) to 51 \(smallest\)"):
        resolve_frames("h264", 90, None)  # a JPEG-style quality is refused, not clipped
    with pytest.raises(InvalidParameter, match="did you mean frames='h264'"):
        resolve_frames("avc", None, None)
    with pytest.raises(InvalidParameter, match="applies to JPEG and h264 frames"):
        resolve_frames("png", 28, None)
    with pytest.raises(InvalidParameter, match="an int"):
        resolve_frames("h264", 28.0, None)


def test_a_build_with_h264_frames_is_format_4_and_jpeg_stays_3():
    layout = {"frames": {"cam": {"codec": "h264"}, "wrist": {"codec": "jpeg"}}}
    assert format_version_of(layout) == 4
    assert format_version_of({"frames": {"cam": {"codec": "jpeg"}}}) == 3
    assert format_version_of({"obs": ["x"]}) == 2


def test_without_libx264_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr(frame_h264, "available", lambda: "libx264 in PyAV")
    with pytest.raises(MissingDependency, match=r"needs libx264 in PyAV: pip install av .*or pass frames='jpeg'"):
        fr.require_codec_libraries(DEFAULT)


# -- the codec -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["hwc", "chw", "hw"])
def test_every_layout_round_trips_above_the_floor_and_is_its_own_frame(layout):
    frames = [source_frame(row, layout) for row in range(6)]
    decoded = [_round_trip(frame, layout)[0] for frame in frames]
    for i, out in enumerate(decoded):
        own = psnr(out, frames[i])
        assert own >= frame_h264.PSNR_FLOOR_DB
        for j in (i - 1, i + 1):
            if 0 <= j < len(frames):
                assert psnr(out, frames[j]) < own


@pytest.mark.parametrize("shape", [(47, 63, 3), (33, 17, 1), (21, 40, 3)])
def test_odd_sizes_are_padded_for_the_encoder_and_cropped_again(shape):
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]]
    planes = [90 + 60 * np.sin(xx / 5.0 + c) + 40 * np.cos(yy / 4.0) for c in range(shape[2])]
    frame = np.stack(planes, -1).clip(0, 255).astype(np.uint8)
    out, _ = _round_trip(frame, "hwc")
    assert out.shape == frame.shape and psnr(out, frame) >= frame_h264.PSNR_FLOOR_DB


def test_a_lower_quantiser_spends_more_bytes_for_closer_frames():
    frame = source_frame(3)
    (fine, fine_bytes), (coarse, coarse_bytes) = (_round_trip(frame, "hwc", FrameCodec("h264", q)) for q in (18, 40))
    assert len(fine_bytes) > len(coarse_bytes)
    assert psnr(fine, frame) > psnr(coarse, frame)


def test_a_frame_decodes_to_the_same_pixels_whatever_was_encoded_before_it():
    """A constant quantiser: a row's pixels do not depend on the order or the thread that encoded it
    (the build encodes rows in several threads, each with its own encoder)."""
    frames = [source_frame(row) for row in range(8)]
    forward = [fr.encode(f, DEFAULT, "hwc") for f in frames]
    backward: list[bytes] = []

    def encode_backward():
        backward.extend(reversed([fr.encode(f, DEFAULT, "hwc") for f in reversed(frames)]))

    thread = threading.Thread(target=encode_backward)
    thread.start()
    thread.join()
    for a, b, frame in zip(forward, backward, frames, strict=True):
        out_a, out_b = np.empty_like(frame), np.empty_like(frame)
        fr.decode_into(a, "h264", "hwc", out_a)
        fr.decode_into(b, "h264", "hwc", out_b)
        assert np.array_equal(out_a, out_b)


def test_damaged_bytes_raise_and_the_next_frame_still_decodes():
    frame = source_frame(4)
    good, data = _round_trip(frame, "hwc")
    out = np.empty_like(frame)
    flipped = bytearray(data)
    flipped[len(data) // 2 : len(data) // 2 + 16] = bytes(16)
    for bad in (bytes(flipped), data[: len(data) // 3], b"\x00\x00\x00\x01" + bytes(64), b""):
        with pytest.raises(ValueError, match=r"h264 cannot decode these bytes|the bytes hold 0 pictures"):
            fr.decode_into(bad, "h264", "hwc", out)
    fr.decode_into(data, "h264", "hwc", out)  # the thread's decoder was made anew: nothing carried over
    assert np.array_equal(out, good)


def test_a_picture_of_another_size_is_refused_not_cropped():
    data = fr.encode(source_frame(2), DEFAULT, "hwc")
    with pytest.raises(ValueError, match="decodes to 64x48 pixels, not 64x40"):
        fr.decode_into(data, "h264", "hwc", np.empty((40, 64, 3), dtype=np.uint8))


# -- in a build ----------------------------------------------------------------------------------------
def test_a_damaged_h264_row_is_named_by_episode_and_frame():
    storage = make_build(DEFAULT)
    offsets = np.fromfile(storage.path / "data" / "frames" / "pixels" / "offsets.memmap", dtype=np.int64)
    row = LENGTHS[0] + 1 + 2  # episode 1, frame 2
    blob = storage.path / "data" / "frames" / "pixels" / "blob.memmap"
    data = bytearray(blob.read_bytes())
    lo, hi = int(offsets[row]), int(offsets[row + 1])
    data[lo:hi] = bytes(hi - lo)  # the row's picture zeroed: no parameter sets, no slice
    blob.write_bytes(bytes(data))
    damaged = DatasetStorage(storage.path)  # sizes still agree: open does not hash (verify does)
    assert damaged.get(torch.tensor([0]))["pixels"].shape == (1, 48, 64, 3)
    with pytest.raises(FrameError, match=r"pixels: the h264 frame of episode 1, frame 2 \(row 12\) cannot be decoded"):
        damaged.get(torch.tensor([LENGTHS[0] + 2]))


def test_a_finished_build_leaves_no_encoder_in_its_frame_threads():
    """The frame threads outlive a build: its h264 encoders (4-8 MiB each) are dropped when it closes, while
    the decoders that sampling reuses stay."""
    make_build(DEFAULT)
    assert frame_h264.release_encoders() == 0  # the build's close dropped them all
    fr.encode(source_frame(1), DEFAULT, "hwc")
    assert frame_h264.release_encoders() == 1 and frame_h264.release_encoders() == 0
    out = np.empty_like(source_frame(1))
    fr.decode_into(fr.encode(source_frame(1), DEFAULT, "hwc"), "h264", "hwc", out)  # a new encoder opens
    assert psnr(out, source_frame(1)) >= frame_h264.PSNR_FLOOR_DB
