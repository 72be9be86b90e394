"""TFRecord files before any build: the framing and checksums of every record, and, for RLDS episodes
(Open X-Embodiment: one ``tf.train.Example`` per episode with ``steps/...`` features), the steps.

The framing is TensorFlow's (``uint64 length``, masked CRC-32C of the length, the data, masked CRC-32C
of the data); CRCs are checked when ``google-crc32c`` is installed (else a note says they were not).
An RLDS episode's numeric step features become rows: ``steps/observation/<k>`` observations,
``steps/action`` (or the ``steps/action/<k>`` parts side by side) the action, ``steps/reward``,
``steps/is_terminal`` terminated and ``steps/is_last`` without it truncated; an ``is_first`` anywhere
but the first step is reported as a flag inside the episode.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from datasets_hub.doctor.findings import UNREADABLE, Finding, examples_at
from datasets_hub.doctor.steps import SourceRead, StepTable
from datasets_hub.doctor.termination import FLAG_MID_EPISODE

_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")


class _Damaged(Exception):
    pass


def _crc() -> Any:
    try:
        import google_crc32c
    except ImportError:
        return None

    def masked(data: bytes) -> int:
        crc = google_crc32c.value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    return masked


def records(path: Path, masked: Any) -> Iterator[bytes]:
    """The records of ``path``; :class:`_Damaged` naming the byte offset of a bad one."""
    with open(path, "rb") as f:
        offset = 0
        while True:
            header = f.read(_HEADER.size)
            if not header:
                return
            if len(header) < _HEADER.size:
                raise _Damaged(f"the file ends inside the record header at byte {offset}")
            length, length_crc = _HEADER.unpack(header)
            if masked is not None and masked(header[:8]) != length_crc:
                raise _Damaged(f"the length CRC of the record at byte {offset} does not match")
            data, trailer = f.read(length), f.read(4)
            if len(data) < length or len(trailer) < 4:
                raise _Damaged(f"the file ends inside the {length}-byte record at byte {offset}")
            if masked is not None and masked(data) != _U32.unpack(trailer)[0]:
                raise _Damaged(f"the data CRC of the record at byte {offset} does not match")
            yield data
            offset += _HEADER.size + length + 4


# -- tf.train.Example, from the protobuf wire format (Example.features=1, Features.feature=1 map
# entries key=1 value=2, Feature bytes_list=1 float_list=2 int64_list=3, each with repeated value=1)
def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    i = 0
    while i < len(buf):
        tag, i = _varint(buf, i)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i : i + size], i + size
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        else:
            raise _Damaged(f"unsupported protobuf wire type {wire}")
        yield number, wire, value


def parse_example(data: bytes) -> dict[str, np.ndarray | None]:
    """Numeric features of a ``tf.train.Example`` as arrays (bytes features as None)."""
    out: dict[str, np.ndarray | None] = {}
    for number, _, features in _fields(data):
        if number != 1:
            continue
        for entry_number, _, entry in _fields(features):
            if entry_number != 1:
                continue
            key, value = "", b""
            for n, _, v in _fields(entry):
                if n == 1:
                    key = bytes(v).decode("utf-8", "replace")
                elif n == 2:
                    value = v
            out[key] = _feature(value)
    return out


def _feature(buf: bytes) -> np.ndarray | None:
    for kind, _, payload in _fields(buf):
        if kind == 1:
            return None
        values: list[Any] = []
        for n, wire, v in _fields(payload):
            if n != 1:
                continue
            if kind == 2:
                values.extend(np.frombuffer(v, "<f4").tolist() if wire == 2 else struct.unpack("<f", v))
            else:
                if wire == 2:
                    j = 0
                    while j < len(v):
                        x, j = _varint(v, j)
                        values.append(x - (1 << 64) if x >= 1 << 63 else x)
                else:
                    values.append(v - (1 << 64) if v >= 1 << 63 else v)
        return np.asarray(values, dtype=np.float32 if kind == 2 else np.int64)
    return np.zeros(0, np.float32)


def read_tfrecords(paths: list[Path], *, max_rows: int) -> SourceRead:
    """Every record of ``paths`` framed and checksummed; RLDS steps of up to ``max_rows`` rows as a table."""
    out = SourceRead(kind="tfrecord", table=None, rows=0, episodes=0, families=["tfrecord framing"])
    masked = _crc()
    if masked is None:
        out.notes.append("google-crc32c is not installed: record CRCs were not checked (pip install google-crc32c)")
    cols: dict[str, list[np.ndarray]] = {}
    episodes: list[np.ndarray] = []
    rows_read = 0
    for path in paths:
        try:
            for data in records(path, masked):
                out.episodes += 1
                if rows_read >= max_rows:
                    out.sampled = True
                    continue
                steps = _rlds_steps(parse_example(data))
                if steps is None:
                    continue
                t = len(steps["is_first"])
                for key, values in steps.items():
                    cols.setdefault(key, []).append(values)
                episodes.append(np.full(t, out.episodes - 1, np.int64))
                rows_read += t
        except (_Damaged, IndexError) as exc:
            out.findings.append(Finding(UNREADABLE, 1, "files", f"{path.name}: {exc}", column=path.name))
    if not episodes:
        out.notes.append("no RLDS steps (steps/is_first ...) in the records: only the framing was checked")
        return out
    out.families.append("rlds steps")
    episode = np.concatenate(episodes)
    n = episode.size
    joined = {k: np.concatenate(v) for k, v in cols.items() if sum(len(x) for x in v) == n}
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    step = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    table = StepTable(episode=episode, step=step)
    table.observations = {k: v for k, v in joined.items() if k.startswith("observation/")}
    table.action = joined.get("action")
    table.reward = joined["reward"].reshape(n) if "reward" in joined else None
    is_last = joined["is_last"].astype(bool)
    terminal = joined["is_terminal"].astype(bool) if "is_terminal" in joined else np.zeros(n, bool)
    table.terminated, table.truncated = terminal, is_last & ~terminal
    table.columns = {k: v for k, v in joined.items() if not k.startswith("is_")}
    late_first = joined["is_first"].astype(bool) & (step > 0)
    if late_first.any():
        out.findings.append(
            Finding(
                FLAG_MID_EPISODE,
                count=int(late_first.sum()),
                unit="rows",
                column="is_first",
                detail="is_first is set on a step that is not its episode's first",
                examples=examples_at(episode, step, late_first),
            )
        )
    out.table, out.rows = table, n
    if out.sampled:
        out.notes.append(f"RLDS steps read from the first {rows_read:,} rows' episodes; the rest only framed")
    return out


def _rlds_steps(features: dict[str, np.ndarray | None]) -> dict[str, np.ndarray] | None:
    first = features.get("steps/is_first")
    if first is None or not first.size:
        return None
    t = first.size
    out: dict[str, np.ndarray] = {}
    action_parts = []
    for key, values in sorted(features.items()):
        if not key.startswith("steps/") or values is None or values.size % t:
            continue
        name = key[len("steps/") :]
        per_step = values.reshape(t, -1)
        if name == "action" or name.startswith("action/"):
            action_parts.append(per_step.astype(np.float64))
        else:
            out[name] = per_step if per_step.shape[1] > 1 else per_step[:, 0]
    if action_parts:
        out["action"] = np.concatenate(action_parts, axis=1)
    if "is_last" not in out:
        return None
    return out
