"""The catalogue: registry.yaml, extra files, register_dataset, loader catalogues, id safety."""

from __future__ import annotations

import pytest
import yaml

import datasets_hub as dh
from datasets_hub import catalogue
from datasets_hub.build.identity import build_fingerprint
from datasets_hub.errors import CatalogueError, InvalidParameter, UnknownDataset
from datasets_hub.plugins import get_loader, loader_names

REGISTRY = catalogue.builtin_registry()
ENTRIES = yaml.safe_load(REGISTRY.read_text()) or {}


@pytest.fixture(autouse=True)
def _forget_registrations():
    yield
    for dataset_id in list(catalogue._registered):
        catalogue.unregister_dataset(dataset_id)


def test_registry_yaml_is_sorted_and_every_entry_is_well_formed():
    ids = list(ENTRIES)
    assert ids == sorted(ids), "keep registry.yaml sorted by id"
    for dataset_id, entry in ENTRIES.items():
        catalogue._check_entry(dataset_id, entry, "registry.yaml")


@pytest.mark.parametrize("loader", sorted({i.split("/", 1)[0] for i in ENTRIES}))
def test_every_registry_loader_is_an_installed_plugin(loader):
    assert loader in loader_names()
    assert get_loader(loader).name == loader


@pytest.mark.parametrize("loader", sorted({i.split("/", 1)[0] for i in ENTRIES}))
def test_every_entry_of_each_loader_resolves(loader):
    for dataset_id in [i for i in ENTRIES if i.startswith(loader + "/")]:
        spec = catalogue.resolve(dataset_id)
        assert spec.loader == loader and spec.id == dataset_id


def test_unknown_id_suggests_close_ids():
    with pytest.raises(UnknownDataset, match="Did you mean 'gym/pendulum-random-v0'"):
        dh.info("gym/pendulum-randm-v0")


def test_unknown_loader_prefix_is_named():
    with pytest.raises(UnknownDataset, match="No loader 'nosuch' is installed"):
        catalogue.resolve("nosuch/thing")


@pytest.mark.parametrize(
    "bad",
    [
        "../etc/passwd",
        "gym/../../x",
        "/abs/path",
        "gym//x",
        "gym/a\x00b",
        "gym/a\nb",
        "gym/" + "x" * 300,
        "noslash",
        "Gym/upper-prefix",
        42,
    ],
)
def test_unsafe_ids_are_rejected_before_touching_disk(bad, isolated_cache):
    with pytest.raises(InvalidParameter):
        dh.load(bad)
    assert not isolated_cache.exists()


def test_extra_registry_files_merge_and_clashes_name_both_sources(tmp_path, monkeypatch):
    extra = tmp_path / "mine.yaml"
    extra.write_text("gym/tiny-cartpole:\n  loader: gym\n  params: {env: CartPole-v1, steps: 50}\n")
    monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(extra))
    assert "gym/tiny-cartpole" in dh.list_datasets(loader="gym")
    assert catalogue.resolve("gym/tiny-cartpole").params["steps"] == 50
    clash = tmp_path / "clash.yaml"
    clash.write_text("gym/cartpole-random-v0:\n  loader: gym\n")
    monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(clash))
    with pytest.raises(CatalogueError, match=r"registry.yaml.*clash.yaml"):
        dh.list_datasets()


def test_catalogue_files_cannot_execute_code(tmp_path, monkeypatch):
    evil = tmp_path / "evil.yaml"
    evil.write_text("gym/evil: !!python/object/apply:os.system ['touch pwned']\n")
    monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(evil))
    with pytest.raises(CatalogueError, match="not valid YAML"):
        dh.list_datasets()
    assert not (tmp_path / "pwned").exists()


def test_an_entry_cannot_name_another_prefix_loader(tmp_path, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("gym/sneaky:\n  loader: d4rl\n")
    monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(bad))
    with pytest.raises(CatalogueError, match="prefix is 'gym'"):
        catalogue.resolve("gym/sneaky")


def test_register_dataset_in_code_and_clash():
    dh.register_dataset("gym/my-pendulum", loader="gym", params={"env": "Pendulum-v1", "steps": 40}, description="mine")
    spec = catalogue.resolve("gym/my-pendulum")
    assert spec.params == {"env": "Pendulum-v1", "steps": 40} and spec.metadata["description"] == "mine"
    with pytest.raises(CatalogueError, match="already exists"):
        dh.register_dataset("gym/cartpole-random-v0", loader="gym")


def test_param_overrides_change_the_build_fingerprint():
    loader = get_loader("gym")
    base = build_fingerprint(catalogue.resolve("gym/cartpole-random-v0"), loader)
    same = build_fingerprint(catalogue.resolve("gym/cartpole-random-v0", steps=20000), loader)
    other = build_fingerprint(catalogue.resolve("gym/cartpole-random-v0", steps=100), loader)
    assert base == same != other


def test_params_must_be_json_values():
    with pytest.raises(InvalidParameter, match="JSON values"):
        catalogue.resolve("gym/cartpole-random-v0", steps=object())


def test_search_filters_ids_and_descriptions():
    assert dh.list_datasets(loader="gym", search="pendulum") == ["gym/pendulum-random-v0"]
    assert "gym/cartpole-random-v0" not in dh.list_datasets(search="pendulum")
    assert "gym/mountaincar-random-v0" in dh.list_datasets(search="MOUNTAINCAR")


HONOURS_ENTRY_FILES = {"calvin", "d4rl", "robomimic", "roboset", "tdmpc2"}  # files: the entry's resources as listed


@pytest.mark.parametrize("loader", sorted({i.split("/", 1)[0] for i in ENTRIES}))
def test_every_loader_fetches_a_users_resource_or_refuses_it_by_name(loader):
    """An entry's resource of the user's own is fetched, or refused naming its URL: never ignored
    while the loader downloads upstream's file instead (issue 27)."""
    first = next(i for i in ENTRIES if i.startswith(loader + "/"))
    entry = ENTRIES[first]
    params = dict(entry.get("params") or {})
    if loader in ("atari", "rlu_atari"):  # their ids name the game and run; these params do too
        params.update(game="Pong", run=1)
    users = {"name": "a-file-it-does-not-read.bin", "url": "file:///srv/mine/users-copy.bin"}
    dataset_id = f"{loader}/mine/users-entry-v0" if loader == "minari" else f"{loader}/users-entry"  # minari's id form
    dh.register_dataset(dataset_id, loader=loader, params=params, resources=[*(entry.get("resources") or []), users])
    if loader in HONOURS_ENTRY_FILES:
        fetched = get_loader(loader).resources(catalogue.resolve(dataset_id))
        assert any(users["url"] in r.urls for r in fetched)
        return
    with pytest.raises(InvalidParameter, match=r"does not fetch the entry's resource 'a-file-it-does-not-read\.bin' "
                                               r"\(file:///srv/mine/users-copy\.bin\)"):  # fmt: skip
        dh.info(dataset_id)


def test_the_catalogue_cache_never_stores_a_password_or_a_signature(tmp_path, monkeypatch):
    """A user's catalogue with a user:password@ URL and a presigned URL is read correctly, every time,
    and no copy of it in <cache>/catalogue holds either secret (issue 27)."""
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "d4rl/with-password: {loader: d4rl, resources: [{url: 'https://me:hunter2@host.example/a.hdf5'}]}\n"
        "d4rl/presigned: {loader: d4rl, resources: [{url: 'https://b.example/x.hdf5?X-Amz-Signature=s3cr3t'}]}\n"
    )
    monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(mine))
    for _ in range(2):  # the second read finds no copy to trust: it parses again
        assert catalogue.resolve("d4rl/with-password").resources[0].urls == ("https://me:hunter2@host.example/a.hdf5",)
        assert "s3cr3t" in catalogue.resolve("d4rl/presigned").resources[0].urls[0]
    from datasets_hub.env import cache_root

    stored = [p.read_text() for p in (cache_root() / "catalogue").rglob("*") if p.is_file()]
    assert not any("hunter2" in text or "s3cr3t" in text for text in stored)
