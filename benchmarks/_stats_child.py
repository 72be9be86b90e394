"""The child process of ``benchmarks/stats_process.py``: the statistics of a build's chunks, computed
from shared memory, in a process that never imports torch.

``datasets_hub.buffers.feature_stats`` imports torch and tensordict at its top (2.8 s here); the float32
path a state build takes uses neither, so this module puts empty stand-ins for both in ``sys.modules``
before importing it. Importing this module is the child's whole start: numpy and the statistics (a
forkserver's server imports it once; a spawned child imports it itself).
"""

from __future__ import annotations

import sys
import time
import types
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np

for _name in ("torch", "tensordict"):  # never imported: the float32 path does not use them
    sys.modules.setdefault(_name, types.ModuleType(_name))
if not hasattr(sys.modules["tensordict"], "TensorDictBase"):
    sys.modules["tensordict"].TensorDictBase = object  # type: ignore[attr-defined]  # an annotation only
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datasets_hub.buffers.feature_stats import _KeyStats


def child(conn: Any) -> None:
    """The statistics process. It sends the time it is ready at, then takes, per chunk,
    ``[(slot, key, rows, channels), ...]`` and answers ``"ok"``; ``"result"`` sends the results and
    its CPU seconds so far and starts over (a kept child serves build after build); ``None`` ends it."""
    conn.send(time.perf_counter())
    stats: dict[str, Any] = {}
    slots: dict[str, Any] = {}
    while (message := conn.recv()) is not None:
        if message == "result":
            conn.send(
                {
                    k: {n: v for n, v in s.result().items() if n in ("mean", "std", "q01", "q99")}
                    for k, s in stats.items()
                }
            )
            conn.send(time.process_time())  # a forkserver's child is not the build's child: it says
            stats = {}
            continue
        for shm_name, key, rows, channels in message:
            if shm_name not in slots:
                slots[shm_name] = shared_memory.SharedMemory(name=shm_name)  # the parent's tracker unlinks it
            values = np.ndarray((rows, channels), np.float32, buffer=slots[shm_name].buf)
            stats.setdefault(key, _KeyStats((channels,), np.dtype(np.float32))).update(values)
            del values
        conn.send("ok")
    for slot in slots.values():
        slot.close()
