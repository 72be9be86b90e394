"""madvise hints: one read-ahead hint per run of consecutive large rows, nothing for small rows; pages dropped from
a file mapping keep their data."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from datasets_hub.build import memory as ma


def test_will_need_hints_each_run_of_large_rows(monkeypatch):
    calls = []
    monkeypatch.setattr(ma, "advise", lambda address, nbytes, advice, inner=False: calls.append((address, nbytes)))
    monkeypatch.setattr(ma, "_LIBC", object())
    frames = np.zeros((20, 256, 256), dtype=np.uint8)  # 64 KB rows
    ma.will_need(frames, np.array([7, 3, 4, 5, 12, 4, 13, 19]))
    row, base = frames.strides[0], frames.ctypes.data
    assert calls == [
        (base + 3 * row, 3 * row),
        (base + 7 * row, row),
        (base + 12 * row, 2 * row),
        (base + 19 * row, row),
    ]
    calls.clear()
    ma.will_need(np.zeros((20, 8), dtype=np.float32), np.arange(5))  # small rows: no hint
    ma.will_need(frames, np.array([], dtype=np.int64))
    assert calls == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc/self/maps")
def test_page_out_keeps_a_file_mappings_data(tmp_path):
    path = tmp_path / "f.u8"
    data = np.memmap(path, dtype=np.uint8, mode="w+", shape=(64, 4096))
    data[:] = np.arange(64, dtype=np.uint8)[:, None]
    data.flush()
    again = np.memmap(path, dtype=np.uint8, mode="r+", shape=(64, 4096))
    assert ma.mapped_file(again.ctypes.data, again.nbytes)
    assert not ma.mapped_file(np.zeros(10**6).ctypes.data, 8 * 10**6)  # anonymous memory
    ma.page_out(again.ctypes.data, again.nbytes)
    ma.will_need(again, np.arange(64))
    assert (again == np.arange(64, dtype=np.uint8)[:, None]).all()
