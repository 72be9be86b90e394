"""Bad input is rejected with a clear message and writes nothing outside the cache root; catalogue
files are data (safe YAML), and no registry entry can make the hub import or run code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import datasets_hub as dh
from datasets_hub.errors import HubError, InvalidParameter, UnknownDataset

from fixtures.faults import files_outside, register

GYM = "gym/cartpole-random-v0"


class Sandbox:
    """Files outside the cache root before a test; ``allow`` the test's own inputs, ``check`` the rest."""

    def __init__(self, root, cache):
        self.root, self.cache = root, cache
        self.before = files_outside(root, cache)
        self.allowed: set = set()

    def allow(self, *paths) -> None:
        for path in paths:
            self.allowed |= {path, *path.parents}
            if path.is_dir():
                self.allowed |= set(path.rglob("*"))

    def check(self) -> None:
        extra = files_outside(self.root, self.cache) - self.before - self.allowed
        assert not extra, f"written outside the cache root: {sorted(map(str, extra))}"


@pytest.fixture
def sandbox(tmp_path, monkeypatch, isolated_cache):
    """Run in an empty working directory; after the test, nothing may have appeared outside the cache."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    box = Sandbox(tmp_path, isolated_cache)
    yield box
    box.check()


@pytest.mark.parametrize(
    "bad, words",
    [
        ("gym/../../../etc/passwd", "'..'"),
        ("gym/..", "'..'"),
        ("gym/./x", "'.'"),
        ("../gym/x", "loader prefix"),
        ("/etc/passwd", "loader prefix"),
        ("/tmp/x/y", "loader prefix"),
        ("gym//x", "segment ''"),
        ("gym/x\x00y", "control characters"),
        ("gym/x\ny", "control characters"),
        ("gym/x\x1b[31m", "control characters"),
        ("gym/" + "a" * 300, "limit is 200"),
        ("gym/x y", "not allowed"),
        ("gym/~root", "not allowed"),
        ("gym\\..\\x", "no loader prefix"),
        ("Gym/x", "lower-case"),
        ("", "no loader prefix"),
    ],
)
def test_bad_ids_are_rejected_before_touching_the_disk(sandbox, isolated_cache, bad, words):
    for call in (dh.load, dh.download, dh.info):
        with pytest.raises(InvalidParameter) as info:
            call(bad)
        assert words in str(info.value)
    assert not isolated_cache.exists() or not (isolated_cache / "datasets").exists()


@pytest.mark.parametrize("bad", [None, 42, b"gym/x", ("gym", "x")])
def test_ids_that_are_not_strings(sandbox, bad):
    with pytest.raises(InvalidParameter, match="is a string"):
        dh.load(bad)


def test_unknown_loader_and_unknown_name_teach(sandbox):
    with pytest.raises(UnknownDataset, match="No loader 'nosuchloader' is installed"):
        dh.load("nosuchloader/x")
    with pytest.raises(UnknownDataset, match="Did you mean 'gym/cartpole-random-v0'"):
        dh.load("gym/cartpole-randm-v0")


@pytest.mark.parametrize(
    "params, words",
    [
        ({"steps": "100"}, "'steps' must be a positive integer"),
        ({"steps": 0}, "'steps' must be a positive integer"),
        ({"steps": -5}, "'steps' must be a positive integer"),
        ({"steps": True}, "'steps' must be a positive integer"),
        ({"steps": 1.5}, "'steps' must be a positive integer"),
        ({"seed": "zero"}, "'seed' must be an integer"),
        ({"env": 3}, "'env' must be a gymnasium id"),
        ({"policy": "greedy"}, "'policy' must be"),
        ({"stepz": 10}, "unknown parameter.*'stepz'"),
        ({"steps": object()}, "must be JSON values"),
        ({"steps": float("nan")}, "must be JSON values"),
    ],
)
def test_wrong_parameter_types(sandbox, isolated_cache, params, words):
    with pytest.raises(InvalidParameter, match=words):
        dh.load(GYM, **params)
    assert not (isolated_cache / "datasets").exists()


@pytest.mark.parametrize(
    "params, words",
    [
        ({"max_episode_steps": "5"}, "max_episode_steps"),
        ({"max_episode_steps": 0}, "max_episode_steps"),
        ({"url": 5}, "url"),
    ],
)
def test_wrong_d4rl_parameter_types(sandbox, params, words):
    with pytest.raises(InvalidParameter, match=words):
        dh.load("d4rl/hopper-medium-v2", **params)


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, True, "8"])
def test_invalid_batch_sizes(sandbox, batch_size):
    with pytest.raises(InvalidParameter, match="batch_size must be a positive integer"):
        dh.load(GYM, steps=50, batch_size=batch_size)


def test_batch_sizes_against_the_dataset_size(sandbox):
    from datasets_hub import SamplerWithoutReplacement

    rb = dh.load(GYM, steps=50, batch_size=8)
    with pytest.raises(ValueError, match="batch_size must be"):
        rb.sample(0)
    # with replacement a batch larger than the dataset is valid: rows repeat, all real
    big = rb.sample(500)
    assert big.batch_size == (500,) and big["episode"].max() < 50
    drop = dh.load(GYM, steps=50, sampler=SamplerWithoutReplacement(drop_last=True))
    with pytest.raises(
        ValueError, match=r"batch size \(64\) is greater than the storage capacity \(50\).*lower the batch size"
    ):
        drop.sample(64)
    whole = dh.load(GYM, steps=50, sampler=SamplerWithoutReplacement(drop_last=False))
    assert sorted(whole.sample(64)["step"].tolist()) == sorted(whole[:]["step"].tolist())  # one epoch, no repeats


def test_slices_longer_than_every_episode(sandbox):
    from datasets_hub import SliceSampler

    rb = dh.load(GYM, steps=200, max_episode_steps=10, sampler=SliceSampler(slice_len=11), batch_size=22)
    with pytest.raises(
        RuntimeError, match=r"no episode is long enough for slices of 11 rows: the longest .* has 10 rows"
    ):
        rb.sample()
    ok = dh.load(
        GYM, steps=200, max_episode_steps=10, sampler=SliceSampler(slice_len=11, strict_length=False), batch_size=22
    )
    assert ok.sample().batch_size[0] > 0


def test_resource_names_cannot_escape_the_raw_folder(sandbox, tmp_path, monkeypatch):
    src = tmp_path / "cwd" / "source.hdf5"
    src.write_bytes(b"x")
    entries = {
        f"d4rl/escape-{i}": {"loader": "d4rl", "resources": [{"url": src.as_uri(), "name": name}]}
        for i, name in enumerate(["../../../../escaped.hdf5", "/tmp/escaped.hdf5", "a/../../b.hdf5"])
    }
    register(tmp_path / "extra.yaml", entries)
    sandbox.allow(tmp_path / "extra.yaml", src)
    monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(tmp_path / "extra.yaml"))
    for dataset_id in entries:
        with pytest.raises(InvalidParameter, match="names must be relative paths"):
            dh.load(dataset_id)
    assert not Path("/tmp/escaped.hdf5").exists()


# ---------------------------------------------------------------------------------------- the catalogue is data
def test_yaml_tags_that_construct_python_objects_are_refused(sandbox, tmp_path, monkeypatch):
    canary = tmp_path / "canary"
    evil = tmp_path / "evil.yaml"
    sandbox.allow(evil)
    evil.write_text(
        f"gym/evil-v0:\n  loader: !!python/object/apply:os.system ['touch {canary}']\n  params: {{env: CartPole-v1}}\n"
    )
    monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(evil))
    for call in (lambda: dh.load("gym/evil-v0"), dh.list_datasets):
        with pytest.raises(HubError, match="not valid YAML"):
            call()
    assert not canary.exists()
    evil.write_text(f"gym/evil-v1: !!python/object/new:subprocess.Popen [['touch', '{canary}']]\n")
    with pytest.raises(HubError, match="not valid YAML"):
        dh.load("gym/evil-v1")
    assert not canary.exists()


@pytest.fixture
def trap_module(tmp_path, monkeypatch, sandbox):
    """An importable module that leaves a canary file when imported: importing it is the failure."""
    canary = tmp_path / "imported"
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "trap_mod.py").write_text(
        f"open({str(canary)!r}, 'w').write('imported')\nclass Loader: pass\nclass Env: pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "modules"))
    sandbox.allow(tmp_path / "modules", tmp_path / "extra.yaml")
    yield canary
    sys.modules.pop("trap_mod", None)
    assert not canary.exists(), "a catalogue entry made the hub import code"


@pytest.mark.parametrize(
    "entry",
    [
        {"trap_mod/x": {"loader": "trap_mod"}},
        {"trap_mod/x": {"loader": "trap_mod:Loader"}},
        {"gym/trap": {"loader": "trap_mod:Loader", "params": {"env": "CartPole-v1"}}},
        {"gym/trap": {"params": {"env": "trap_mod:Env-v0", "steps": 10}}},
        {"gym/trap": {"params": {"env": "trap_mod/Env-v0", "steps": 10}}},
    ],
)
def test_a_registry_entry_cannot_make_the_hub_import_anything(sandbox, tmp_path, monkeypatch, trap_module, entry):
    register(tmp_path / "extra.yaml", entry)
    monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(tmp_path / "extra.yaml"))
    (dataset_id,) = entry
    with pytest.raises(HubError):
        dh.load(dataset_id)
    assert "trap_mod" not in sys.modules


def test_a_gym_env_id_that_would_import_a_module_is_refused(sandbox, trap_module):
    with pytest.raises(InvalidParameter, match="imports a module"):
        dh.load(GYM, env="trap_mod:Env-v0", steps=10)
    assert "trap_mod" not in sys.modules


def test_register_dataset_validates_like_the_yaml(sandbox):
    with pytest.raises(InvalidParameter):
        dh.register_dataset("gym/../x", loader="gym")
    with pytest.raises(HubError, match="names loader"):
        dh.register_dataset("gym/okay-v9", loader="os")
    with pytest.raises(InvalidParameter, match="JSON values"):
        dh.register_dataset("gym/okay-v9", params={"env": torch.zeros(1)})
