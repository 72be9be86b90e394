"""check_loader (datasets_hub.loader_check) and the build's own TED checks (datasets_hub.ted_contract):
loaders that break the contract are refused, naming the loader and the key (issue 13)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import datasets_hub as dh
from datasets_hub import plugins
from datasets_hub.build.pipeline import build
from datasets_hub.errors import TEDError
from datasets_hub.loader import DatasetSpec
from datasets_hub.testing import FakeLoader, check_loader, fake_episodes

SPEC = DatasetSpec(id="fake/x", loader="fake", params={"lengths": [5, 3, 4, 6], "chunks": 2})


class BrokenLoader(FakeLoader):
    """FakeLoader with one contract violation, chosen by ``how``."""

    how = ""
    calls = 0

    def episodes(self, spec, files, ctx):
        type(self).calls += 1
        for i, original in enumerate(super().episodes(spec, files, ctx)):
            chunk = original
            n = chunk.batch_size[0]
            if self.how == "reward_1d":
                chunk = chunk.exclude(("next", "reward")).set(("next", "reward"), torch.arange(n, dtype=torch.float32))
            elif self.how == "float_done":
                chunk.set(("next", "terminated"), chunk.get(("next", "terminated")).float())
            elif self.how == "no_next_obs":
                chunk = chunk.exclude(("next", "observation"))
            elif self.how == "order" and type(self).calls % 2 == 0:
                # the same episodes in the same order, but cut into other chunks than in odd runs
                cut = int((chunk.get("episode") != chunk.get("episode")[0]).nonzero()[0])
                yield chunk[:cut].clone()
                yield chunk[cut:].clone()
                continue
            elif self.how == "values" and type(self).calls == 2:
                chunk = chunk.clone()
                chunk.set("action", chunk.get("action") + i + 1)
            elif self.how == "prints":
                print("reading chunk", i)
            yield chunk
            if self.how == "mutates":
                chunk.get("action").zero_()


def broken(how):
    return type(f"Broken_{how}", (BrokenLoader,), {"how": how, "calls": 0})


@pytest.mark.parametrize(
    "how, match",
    [
        ("reward_1d", r"'next/reward' has shape \[8\]; TED needs \[8, 1\]"),
        ("float_done", r"'next/terminated' is torch.float32 \[8, 1\]; done flags are bool"),
        ("no_next_obs", r"'observation' but no 'next/observation'"),
        ("values", r"not deterministic: runs 1 and 2 differ at 'action'"),
        ("prints", "never prints"),
        ("mutates", "changed chunk 0 at 'action' after yielding it"),
    ],
)
def test_check_loader_refuses_contract_violations(how, match):
    with pytest.raises(AssertionError, match=match):
        check_loader(broken(how), SPEC)


def test_chunk_order_changing_between_runs_is_refused():
    cls = broken("order")
    with pytest.raises(AssertionError, match="not deterministic: run 1 yielded chunks of"):
        check_loader(cls, SPEC)
    assert cls.calls == 2


def test_three_runs_by_default_and_a_good_loader_passes():
    cls = broken("")
    summary = check_loader(cls, SPEC)
    assert cls.calls == 3 and summary["counts"]["transitions"] == 18


@pytest.mark.parametrize(
    "how, key", [("reward_1d", "next/reward"), ("float_done", "next/terminated"), ("no_next_obs", "next/observation")]
)
def test_the_build_itself_names_loader_and_key(how, key, isolated_cache):
    with pytest.raises(TEDError, match=rf"the 'fake' loader's chunk of 'fake/x'.*{key}"):
        build(SPEC, broken(how)(), {}, [])
    assert not list((isolated_cache / "datasets").rglob("manifest.json"))


def test_nested_observation_keys_are_accepted():
    from datasets_hub.ted_contract import check_chunk

    td = fake_episodes([3, 2])
    obs = td.get("observation")
    td = td.exclude("observation", ("next", "observation"))
    td.set(("observation", "state"), obs)
    td.set(("next", "observation", "state"), obs + 1)
    check_chunk(td, "x", "x/y")
    with pytest.raises(TEDError, match="no observation"):
        check_chunk(td.exclude(("next", "observation", "state")).exclude(("observation", "state")), "x", "x/y")


def test_entry_point_name_must_equal_loader_name(monkeypatch):
    from importlib.metadata import EntryPoint

    ep = EntryPoint(name="fakes", value=f"{FakeLoader.__module__}:{FakeLoader.__qualname__}", group=plugins.GROUP)
    monkeypatch.setattr(plugins, "_entry_points", lambda: {"fakes": ep})
    with pytest.raises(AssertionError, match="registered as entry point 'fakes' but declares name 'fake'"):
        check_loader(FakeLoader)


def test_a_catalogue_entry_end_to_end(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from fixtures.d4rl import write_d4rl

    path = write_d4rl(tmp_path / "tiny.hdf5")
    dh.register_dataset("d4rl/check-loader-tiny-v0", params={}, resources=[{"url": "file://" + str(path)}])
    try:
        summary = check_loader("d4rl/check-loader-tiny-v0", batch_size=4)
    finally:
        from datasets_hub.catalogue import unregister_dataset

        unregister_dataset("d4rl/check-loader-tiny-v0")
    assert summary["build_path"].exists() and "next/reward" in summary["sample_keys"]
    assert summary["counts"]["transitions"] > 0


def test_a_catalogue_entry_failing_names_the_stage(tmp_path):
    with pytest.raises(AssertionError, match="failed at resolve"):
        check_loader("d4rl/no-such-dataset-v9")
    dh.register_dataset("d4rl/check-loader-missing-v0", resources=[{"url": "file://" + str(tmp_path / "gone.hdf5")}])
    try:
        with pytest.raises(AssertionError, match="failed at fetch"):
            check_loader("d4rl/check-loader-missing-v0")
    finally:
        from datasets_hub.catalogue import unregister_dataset

        unregister_dataset("d4rl/check-loader-missing-v0")


def test_gym_entry_end_to_end():
    pytest.importorskip("gymnasium")
    summary = check_loader("gym/cartpole-random-v0", params={"steps": 300}, runs=2)
    assert summary["counts"]["transitions"] == 300


def test_auto_frames_must_name_a_compressed_codec():
    class Blurry(FakeLoader):
        auto_frames = "webp"

    with pytest.raises(AssertionError, match="auto_frames must be 'jpeg' or 'png'"):
        check_loader(Blurry)
