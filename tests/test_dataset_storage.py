"""DatasetStorage's one-read paths give what the generic Storage paths give: ``gather_states`` (states at
rows and right after them, from the per-episode T+1 rows) and ``gather`` with extras (built into the
TensorDict in one go instead of set key by key)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datasets_hub.buffers.storages import Storage, attach_extras
from datasets_hub.testing import FakeLoader, fake_episodes

LENGTHS = [5, 1, 8, 3]


@pytest.fixture
def storage():
    from datasets_hub.build import build
    from datasets_hub.dataset_storage import DatasetStorage
    from datasets_hub.loader import DatasetSpec

    chunk = fake_episodes(LENGTHS)

    class ChunkLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            yield chunk.clone()

    return DatasetStorage(build(DatasetSpec(id="fake/states", loader="fake", params={}), ChunkLoader(), {}, []))


def test_gather_states_reads_the_state_at_or_after_each_row(storage):
    n = len(storage)
    rng = np.random.default_rng(0)
    rows = rng.integers(0, n, 200)
    after = rng.random(200) < 0.5
    everything = storage.get(torch.arange(n))
    want = torch.where(
        torch.from_numpy(after)[:, None],
        everything["next", "observation"][rows],
        everything["observation"][rows],
    )
    episodes = np.searchsorted(np.cumsum([0, *LENGTHS[:-1]]), rows, side="right") - 1
    for kw in ({}, {"episodes": episodes}):
        got = storage.gather_states(("observation",), rows, after, **kw)
        assert torch.equal(got, want)
        assert torch.equal(Storage.gather_states(storage, ("observation",), rows, after, **kw), want)  # generic path
    assert torch.equal(
        storage.gather_states(("observation",), rows, np.ones(200, bool)),
        everything["next", "observation"][rows],
    )
    assert torch.equal(storage.gather_states(("observation",), rows), everything["observation"][rows])
    with pytest.raises(IndexError):
        storage.gather_states(("observation",), np.array([n]), None)
    with pytest.raises(KeyError):
        storage.gather_states(("nope",), rows[:3], None)


def test_gather_with_extras_equals_get_then_set(storage):
    index = torch.tensor([0, 4, 5, 13, 2, 2])
    extras = {
        "index": index.clone(),
        ("goal", "observation"): torch.randn(6, 3),
        ("goal", "distance"): torch.arange(6),
        ("next", "truncated"): torch.ones(6, 1, dtype=torch.bool),  # a sampler's info overrides a stored key
    }
    obs = storage.get(index)["observation"]
    for more in (
        {},
        {"observation": torch.zeros(6, 2, *obs.shape[1:])},  # a window replacing the stored key: not read
        {("next", "observation"): torch.ones(6, *obs.shape[1:])},
        {"observation": obs + 1, ("next", "observation"): obs - 1},
    ):
        got = storage.gather(index, {**extras, **more})
        want = attach_extras(storage.get(index), {**extras, **more})
        assert set(got.keys(True, True)) == set(want.keys(True, True))
        for key in want.keys(True, True):
            assert torch.equal(got[key], want[key]), key
