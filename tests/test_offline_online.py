"""OfflineOnlineBuffer: a read-only build plus a memory-mapped online part; fixed and scheduled ratios,
TorchRL write semantics, priorities, refused writes that write nothing, and a build left untouched."""

from __future__ import annotations

import hashlib

import pytest
import torch

import datasets_hub as dh
from datasets_hub import catalogue
from datasets_hub.buffers import offline_online
from datasets_hub.buffers.offline_online import OfflineOnlineBuffer
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.samplers import RandomSampler
from datasets_hub.buffers.samplers.prioritized import PrioritizedSampler
from datasets_hub.buffers.writers import ImmutableDatasetWriter
from datasets_hub.build.pipeline import build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import InvalidParameter, ReadOnlyError
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader, fake_episodes, naive_ted

LENGTHS = [12, 7, 20]
OFFLINE_ROWS = sum(LENGTHS)


def offline_buffer():
    path = build(DatasetSpec(id="fake/offline", loader="fake", params={"lengths": LENGTHS}), FakeLoader(), {}, [])
    rb = TensorDictReplayBuffer(
        storage=DatasetStorage(path),
        sampler=RandomSampler(),
        writer=ImmutableDatasetWriter(),
        generator=torch.Generator().manual_seed(0),
    )
    return rb, path


def online_rows(lengths=(5, 6), first_row=10_000):
    """Experience in the offline schema, told apart by its values (observation rows from 10,000 on)."""
    return naive_ted(fake_episodes(list(lengths), first_episode=100, first_row=first_row))


def digest(path):
    h = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(file.name.encode())
        h.update(file.read_bytes())
    return h.hexdigest()


@pytest.fixture
def mixed(tmp_path):
    rb, path = offline_buffer()
    before = digest(path)
    buf = OfflineOnlineBuffer(
        rb, capacity=16, ratio=0.25, scratch_dir=tmp_path / "online", generator=torch.Generator().manual_seed(1)
    )
    yield buf, path
    assert digest(path) == before  # the build is never modified


def test_all_offline_until_online_holds_something_then_the_ratio(mixed):
    buf, _ = mixed
    out = buf.sample(8)
    assert not out["index", "online"].any() and len(buf) == OFFLINE_ROWS
    positions = buf.extend(online_rows())
    assert positions.tolist() == list(range(11)) and len(buf.online) == 11 and len(buf) == OFFLINE_ROWS + 11
    out = buf.sample(8)
    assert out["index", "online"].tolist() == [False] * 2 + [True] * 6
    obs = out["observation"][:, 0] / 100
    assert (obs[:2] < 10_000).all() and (obs[2:] >= 10_000).all()  # offline rows, then online rows
    # ("index", "index") points at the item in its own part
    stored = buf.online.storage[out["index", "index"][2:]]
    assert torch.equal(stored["observation"], out["observation"][2:])
    offline = buf.offline.storage[out["index", "index"][:2]]
    assert torch.equal(offline["action"], out["action"][:2])


def test_online_part_follows_torchrl_write_semantics(mixed):
    buf, _ = mixed
    item = online_rows((3,))[0]
    assert buf.add(item) == 0
    buf.extend(online_rows((8, 9), first_row=20_000))  # 1 + 17 > capacity 16: the oldest are overwritten
    assert len(buf.online) == 16
    assert buf.online.storage[torch.tensor([0])]["observation"][0, 0] >= 20_000 * 100


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda td: td.set("action", td["action"].double()), r"online 'action' is torch.float64 \[2\] per item"),
        (lambda td: td.set("action", torch.zeros(td.shape[0], 3)), r"'action' is torch.float32 \[3\] per item"),
        (lambda td: td.exclude("step"), r"missing \['step'\]"),
        (lambda td: td.set("extra", torch.zeros(td.shape[0])), r"unexpected \['extra'\]"),
    ],
)
def test_a_wrong_write_writes_nothing(mixed, change, match):
    buf, _ = mixed
    buf.extend(online_rows((4,)))
    kept = buf.online.storage[torch.arange(4)].clone()
    with pytest.raises(InvalidParameter, match=match):
        buf.extend(change(online_rows((5,), first_row=30_000)))
    with pytest.raises(InvalidParameter, match=match):
        buf.add(change(online_rows((5,), first_row=30_000))[0])
    assert len(buf.online) == 4
    assert (buf.online.storage[torch.arange(4)] == kept).all()


def test_the_offline_part_is_read_only(mixed):
    buf, _ = mixed
    with pytest.raises(ReadOnlyError):
        buf.offline.extend(online_rows())


def test_a_scheduled_ratio(tmp_path):
    rb, _ = offline_buffer()
    buf = OfflineOnlineBuffer(rb, capacity=32, ratio=lambda step: max(0.0, 1 - step / 4), scratch_dir=tmp_path / "s")
    buf.extend(online_rows())
    shares = [int((~buf.sample(8)["index", "online"]).sum()) for _ in range(5)]
    assert shares == [8, 6, 4, 2, 0]
    bad = OfflineOnlineBuffer(rb, capacity=4, ratio=lambda step: 1.5, scratch_dir=tmp_path / "b")
    with pytest.raises(InvalidParameter, match=r"must be a number in \[0, 1\], got 1.5"):
        bad.sample(4)
    for ratio in (-0.1, float("nan"), "half"):
        with pytest.raises(InvalidParameter, match="ratio"):
            OfflineOnlineBuffer(rb, capacity=4, ratio=ratio)


def test_offline_rows_drawn_ahead_are_those_of_drawing_each_batch(tmp_path):
    """The offline rows are read ahead in blocks, yet each batch's are those of drawing its share when it
    is asked for (one generator stream, also across a block's end and a changing share), with the stored
    values, and a batch is its own copy: later batches never change it."""
    rb, _ = offline_buffer()
    buf = OfflineOnlineBuffer(rb, capacity=32, ratio=lambda step: [0.5, 0.25, 1.0][step % 3], scratch_dir=tmp_path)
    buf.extend(online_rows())
    expected = torch.Generator().manual_seed(0)  # the offline buffer's seed: the draws it would make
    kept, first = None, None
    for step in range(3 * offline_online.READ_AHEAD_ROWS // 16 + 5):  # past the end of several blocks
        out = buf.sample(16)
        n = int((~out["index", "online"]).sum())
        assert n == round([0.5, 0.25, 1.0][step % 3] * 16)
        rows = out["index", "index"][:n]
        assert torch.equal(rows, torch.randint(OFFLINE_ROWS, (n,), generator=expected))
        assert torch.equal(out["observation"][:n], rb.storage[rows]["observation"])
        if kept is None:
            kept, first = out, out.clone()
    assert (kept == first).all()


def test_batches_are_those_of_drawing_each_part_when_asked(tmp_path):
    """Every batch, key by key, is what drawing its offline share from the offline buffer's generator and
    then its online share from the online one gives when it is asked for (gathered from each part's
    storage): across blocks of rows drawn ahead, changes of share and batch size (also to all offline,
    to none offline and to shares too large to be drawn ahead), and online writes between calls, which
    the very next batch sees. Batches kept without a copy never change afterwards."""
    rb, _ = offline_buffer()
    calls = (
        [(512, 0.25)] * 40  # 128 offline rows each: past the end of a block drawn ahead
        + [(512, 0.5), (300, 0.25), (64, 1.0), (64, 0.0), (2048, 1.0), (512, 0.25), (512, 0.25)]
        + [(64, 0.3)] * 30
        + [(4000, 0.3), (16, 0.5), (512, 0.25)]
    )
    writes = {0: 0, 1: 1, 41: 2, 45: 3, 60: 4, 80: 5}  # call -> which write goes before it
    buf = OfflineOnlineBuffer(
        rb,
        capacity=24,  # the writes wrap around: older online rows are overwritten
        ratio=lambda step: calls[step][1],
        scratch_dir=tmp_path,
        generator=torch.Generator().manual_seed(1),
    )
    offline_draws, online_draws = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    kept = []
    for step, (size, ratio) in enumerate(calls):
        if step in writes:
            buf.extend(online_rows((4, 3), first_row=10_000 + 1000 * writes[step]))
        n = round(ratio * size) if len(buf.online) else size
        rows = torch.randint(OFFLINE_ROWS, (n,), generator=offline_draws) if n else torch.zeros(0, dtype=torch.int64)
        online = (
            torch.randint(len(buf.online), (size - n,), generator=online_draws)
            if size > n
            else torch.zeros(0, dtype=torch.int64)
        )
        out = buf.sample(size)
        parts = [rb.storage[rows].exclude("index")] if n else []
        parts += [buf.online.storage[online]] if size > n else []
        expected = torch.cat(parts)
        assert set(out.keys(True, True)) == set(expected.keys(True, True)) | {("index", "index"), ("index", "online")}
        for key, value in expected.items(True, True):
            assert torch.equal(out[key], value), (step, key)
        assert torch.equal(out["index", "index"], torch.cat([rows, online]))
        assert out["index", "online"].tolist() == [False] * n + [True] * (size - n)
        if step % 7 == 0:
            kept.append((out, out.clone()))
    assert all((batch == copy).all() for batch, copy in kept)


def test_priorities_of_online_items(tmp_path):
    rb, _ = offline_buffer()
    buf = OfflineOnlineBuffer(
        rb,
        capacity=16,
        ratio=0.5,
        scratch_dir=tmp_path / "p",
        online_sampler=PrioritizedSampler(16, alpha=1.0, beta=1.0),
        generator=torch.Generator().manual_seed(2),
    )
    buf.extend(online_rows())
    batch = buf.sample(8)
    priority = torch.where(batch["index", "index"] == batch["index", "index"][-1], 1.0, 1e-9)
    others = torch.arange(11)[torch.arange(11) != int(batch["index", "index"][-1])]
    buf.update_priority(others, torch.full((10,), 1e-9))
    buf.update_priority(batch["index", "index"], priority, online=batch["index", "online"])
    picked = torch.cat([buf.sample(8)["index", "index"][4:] for _ in range(20)])
    assert (picked == batch["index", "index"][-1]).all()


def test_hub_offline_online_by_id(tmp_path):
    catalogue.register_dataset("gym/oo-pendulum", loader="gym", params={"env": "Pendulum-v1", "steps": 200})
    try:
        buf = dh.offline_online(
            "gym/oo-pendulum",
            capacity=100,
            ratio=0.5,
            scratch_dir=tmp_path / "o",
            generator=torch.Generator().manual_seed(0),
        )
        seed = buf.offline.storage[0:10]
        buf.extend(seed.exclude("index") if "index" in seed.keys() else seed)
        out = buf.sample(10)
        assert out["index", "online"].sum() == 5 and out["observation"].shape == (10, 3)
    finally:
        catalogue.unregister_dataset("gym/oo-pendulum")
