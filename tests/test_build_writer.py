"""The build writer's memory: frames a loader hands over memory-mapped (LeRobot's decoded scratch files) do not
stay in the build process's resident set once written, and what is written is exactly what was handed over."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from datasets_hub.build.pipeline import build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader

FRAME = (64, 64, 3)


def mapped_rss(path: Path) -> int:
    """Resident bytes of this process's mappings of ``path`` (from /proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(head[1]) * 1024
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_memory_mapped_frames_leave_the_resident_set_once_written(tmp_path):
    n = 2000  # 2001 frames of 12 KB: 24 MB, above the size where the writer looks at mappings
    scratch = tmp_path / "frames.u8"
    scratch.write_bytes(b"")
    # written by another process, as the decoding workers do (dirty pages of the file, not of ours)
    shape = (n + 1, *FRAME)
    code = (
        f"import numpy as np, sys; m = np.memmap(sys.argv[1], dtype=np.uint8, mode='w+', shape={shape}); "
        "m[:] = (np.arange(m.shape[0]) % 251).astype(np.uint8)[:, None, None, None]; m.flush()"
    )
    subprocess.run([sys.executable, "-c", code, str(scratch)], check=True)
    frames = np.memmap(scratch, dtype=np.uint8, mode="r+", shape=(n + 1, *FRAME))
    values = torch.from_numpy(frames)
    seen = {}

    class MappedLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            truncated = torch.zeros(n, 1, dtype=torch.bool)
            truncated[-1] = True
            yield TensorDict(
                {
                    "observation": values[:-1],
                    "action": torch.zeros(n, 1),
                    "episode": torch.zeros(n, dtype=torch.int64),
                    "next": {
                        "observation": values[1:],
                        "reward": torch.zeros(n, 1),
                        "terminated": torch.zeros(n, 1, dtype=torch.bool),
                        "truncated": truncated,
                    },
                },
                batch_size=[n],
            )
            seen["loader_done"] = True

    path = build(DatasetSpec(id="fake/mapped", loader="fake", params={}), MappedLoader(), {}, [])
    size = frames.nbytes
    assert seen["loader_done"]
    # every frame was read (compared, hashed, written) while the loader still maps them all
    resident = mapped_rss(scratch)
    assert resident < size // 4, f"{resident} of {size} bytes still resident"
    built = DatasetStorage(path)
    everything = built.get(torch.arange(n))
    assert torch.equal(everything["observation"], values[:-1])
    assert torch.equal(everything["next", "observation"], values[1:])


@pytest.mark.parametrize("failing_call", [1, 3])
def test_an_error_in_the_statistics_thread_fails_the_build_and_leaves_nothing(monkeypatch, failing_call):
    """The statistics of each chunk are computed beside the writes: their error (first chunk, or the
    last one, joined only before the manifest) fails the build like any other, and no build is left."""
    from datasets_hub.buffers.feature_stats import FeatureStats
    from datasets_hub.build.identity import build_path

    real_update, calls = FeatureStats.update, []

    def update(self: FeatureStats, batch: TensorDict) -> None:
        calls.append(threading.current_thread().name)
        if len(calls) == failing_call:
            raise RuntimeError("statistics failed")
        real_update(self, batch)

    monkeypatch.setattr(FeatureStats, "update", update)
    spec = DatasetSpec(id="fake/stats-error", loader="fake", params={"lengths": [5, 3, 4], "chunks": 3})
    with pytest.raises(RuntimeError, match="statistics failed"):
        build(spec, FakeLoader(), {}, [])
    assert all(name.startswith("datasets_hub-build-stats") for name in calls)  # not the writing thread
    final = build_path(spec, FakeLoader(), None)
    assert not final.exists()
    assert [p.name for p in final.parent.iterdir() if p.name.startswith(final.name) and p.suffix != ".lock"] == []
