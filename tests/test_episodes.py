"""Episodes as first-class objects (datasets_hub.buffers.episodes): iteration with metadata, filtering
as a view without copying, seeded splits by episode, on builds and on in-memory buffers (issue 13)."""

from __future__ import annotations

import pytest
import torch

from datasets_hub import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
from datasets_hub.buffers.episodes import EpisodeSubsetStorage
from datasets_hub.build.pipeline import build
from datasets_hub.build.storage import DatasetStorage
from datasets_hub.errors import InvalidParameter
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader, fake_episodes

LENGTHS = [5, 9, 3, 7, 4, 6, 8, 2]
ENDS = ["terminated" if e % 2 == 0 else "truncated" for e in range(len(LENGTHS))]


def build_rb(**kwargs):
    path = build(
        DatasetSpec(id="fake/eps", loader="fake", params={"lengths": LENGTHS, "chunks": 3}), FakeLoader(), {}, []
    )
    return TensorDictReplayBuffer(storage=DatasetStorage(path), **kwargs)


def memory_rb():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
    rb.extend(fake_episodes(LENGTHS))
    return rb


def loop_stats(rb):
    """Per-episode truth by a plain loop over rows."""
    data = rb[:]
    out, prev = [], None
    for t in range(len(rb)):
        e = int(data["episode"][t])
        if e != prev:
            out.append({"id": e, "start": t, "length": 0, "return": 0.0})
            prev = e
        out[-1]["length"] += 1
        out[-1]["return"] += float(data["next", "reward"][t])
        out[-1]["terminated"] = bool(data["next", "terminated"][t])
        out[-1]["truncated"] = bool(data["next", "truncated"][t])
    return out


@pytest.mark.parametrize("make", [build_rb, memory_rb])
def test_iteration_gives_metadata_and_data(make):
    rb = make()
    eps = rb.episodes
    truth = loop_stats(rb)
    assert len(eps) == len(LENGTHS)
    for ep, want in zip(eps, truth, strict=True):
        assert (ep.id, ep.start, ep.length) == (want["id"], want["start"], want["length"])
        assert ep.ret == pytest.approx(want["return"])
        assert (ep.terminated, ep.truncated) == (want["terminated"], want["truncated"])
        data = ep.data()
        assert data.batch_size[0] == ep.length and bool((data["episode"] == ep.id).all())
    assert eps.by_id(truth[3]["id"]).length == LENGTHS[3]
    assert eps[-1].length == LENGTHS[-1]
    assert torch.equal(eps.lengths, torch.tensor(LENGTHS))


def test_filter_is_a_view_without_copy_and_samples_only_kept_episodes():
    rb = build_rb(batch_size=64, generator=torch.Generator().manual_seed(0))
    eps = rb.episodes
    long = eps.filter(lambda s: s["length"] >= 6)
    kept = [i for i, n in enumerate(LENGTHS) if n >= 6]
    assert isinstance(long.storage, EpisodeSubsetStorage) and long.storage.parent is rb.storage
    assert len(long) == sum(LENGTHS[i] for i in kept)
    assert torch.equal(long.episodes.lengths, torch.tensor([LENGTHS[i] for i in kept]))
    batch = long.sample()
    ids = set(batch["episode"].tolist())
    assert ids <= {int(eps[i].id) for i in kept}
    # rows of the view are exactly the parent's rows of those episodes, in order
    parent_rows = torch.cat([torch.arange(eps[i].start, eps[i].start + eps[i].length) for i in kept])
    assert torch.equal(long[:]["observation"], rb[parent_rows]["observation"])
    assert torch.equal(long[:]["next", "observation"], rb[parent_rows]["next", "observation"])


def test_slices_never_cross_episodes_of_a_filtered_view():
    rb = build_rb(sampler=SliceSampler(slice_len=3), batch_size=30, generator=torch.Generator().manual_seed(1))
    top = rb.episodes.top(0.5)
    assert len(top.episodes) == 4
    best = sorted(loop_stats(rb), key=lambda s: -s["return"])[:4]
    assert set(top.episodes.ids.tolist()) == {s["id"] for s in best}
    for _ in range(5):
        batch = top.sample().reshape(10, 3)
        assert bool((batch["episode"] == batch["episode"][:, :1]).all())
        assert bool((batch["step"][:, 1:] == batch["step"][:, :-1] + 1).all())


def test_split_is_seeded_disjoint_and_complete():
    rb = build_rb()
    train, val = rb.episodes.split(0.25, seed=3)
    train2, val2 = rb.episodes.split(0.25, seed=3)
    t, v = set(train.episodes.ids.tolist()), set(val.episodes.ids.tolist())
    assert len(v) == 2 and not t & v and t | v == set(rb.episodes.ids.tolist())
    assert v == set(val2.episodes.ids.tolist()) and t == set(train2.episodes.ids.tolist())
    assert len(train) + len(val) == len(rb)
    assert any(set(rb.episodes.split(0.25, seed=s)[1].episodes.ids.tolist()) != v for s in range(4, 12))


def test_bad_predicates_and_arguments():
    eps = build_rb().episodes
    with pytest.raises(InvalidParameter, match="one value per episode"):
        eps.filter(lambda s: s["length"].sum())
    with pytest.raises(InvalidParameter, match="no episode"):
        eps.filter(lambda s: s["length"] > 1000)
    with pytest.raises(InvalidParameter, match="val_fraction"):
        eps.split(1.5)
    with pytest.raises(IndexError):
        eps[len(LENGTHS)]
    with pytest.raises(KeyError):
        eps.by_id(12345)
    assert len(eps.sample(3, generator=torch.Generator().manual_seed(0))) == 3


def test_views_are_read_only():
    view = build_rb().episodes.filter(lambda s: s["terminated"])
    with pytest.raises((RuntimeError, ValueError)):
        view.extend(view[:2])


def test_the_episode_table_is_computed_once_per_buffer_state(monkeypatch):
    from datasets_hub.buffers import episodes as episodes_module

    calls = []
    real = episodes_module.episode_index_of

    def counting(storage, n):
        calls.append(n)
        return real(storage, n)

    monkeypatch.setattr(episodes_module, "episode_index_of", counting)
    rb = memory_rb()
    first = rb.episodes
    assert rb.episodes is first and len(rb.episodes) == len(LENGTHS) and len(calls) == 1  # reused, not recomputed
    rb.extend(fake_episodes([4, 2], first_episode=len(LENGTHS)))  # an online buffer grows
    second = rb.episodes
    assert second is not first and len(calls) == 2
    assert len(second) == len(LENGTHS) + 2 and second.lengths[-2:].tolist() == [4, 2]
    assert rb.episodes is second and len(calls) == 2
    rb.empty()
    assert len(rb.episodes) == 0 and len(calls) == 3  # emptied: recomputed
    built = build_rb()
    table = built.episodes
    assert built.episodes is table  # a read-only build never changes: computed once
    import pickle

    clone = pickle.loads(pickle.dumps(memory_rb()))  # the cached table is not pickled along
    assert len(clone.episodes) == len(LENGTHS)
