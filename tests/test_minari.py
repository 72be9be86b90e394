"""The Minari loader on real Minari datasets made here with minari.DataCollector (both backends).

Every value the loader yields is compared with what ``minari.load_dataset(...).iterate_episodes()``
returns. Datasets are tiny (tens to a few hundred steps) and built once per module in a Minari
store under a temporary directory; no test touches the internet (the download path is served
from 127.0.0.1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from datasets_hub.errors import DownloadError, InvalidParameter
from datasets_hub.loader import DatasetSpec, LoaderContext
from datasets_hub.loaders.minari.loader import MinariLoader, decode_text

gym = pytest.importorskip("gymnasium")
minari = pytest.importorskip("minari")


FORMATS = ("hdf5", "arrow")
CHARSET = "abcdefghijklmnopqrstuvwxyz0123456789 é"  # é: 2 UTF-8 bytes, so the text width doubles
REPO_ROOT = Path(__file__).resolve().parents[1]


# -- environments with distinct values per step ---------------------------------------------------
class CounterEnv(gym.Env):
    """Observations say (episode, t): ``pos = [1000*episode + t, -t]``, ``count = t``, and a
    ``mission`` text per episode. Even episodes terminate after ``3 + episode % 4`` steps, odd
    ones run until the TimeLimit truncates them."""

    def __init__(self, kind: str = "dict") -> None:
        pos = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
        if kind == "dict":
            self.observation_space = gym.spaces.Dict(
                {
                    "pos": pos,
                    "count": gym.spaces.Discrete(1000),
                    "goal": gym.spaces.Dict(
                        {
                            "mission": gym.spaces.Text(max_length=12, charset=CHARSET),
                            "target": gym.spaces.Box(0, 100, (), np.int32),
                        }
                    ),
                }
            )
            self.action_space = gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(3)))
        else:
            self.observation_space = gym.spaces.Tuple((pos, gym.spaces.Discrete(1000)))
            self.action_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.kind = kind
        self.episode = -1
        self.t = 0

    def _obs(self):
        pos = np.array([1000 * self.episode + self.t, -self.t], np.float32)
        if self.kind == "dict":
            mission = f"go é{self.episode}"
            return {"pos": pos, "count": self.t, "goal": {"mission": mission, "target": np.int32(self.episode % 100)}}
        return (pos, self.t)

    def _info(self):
        return {"t": self.t, "vec": np.array([self.episode, self.t], np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), self._info()

    def step(self, action):
        self.t += 1
        terminated = self.episode % 2 == 0 and self.t >= 3 + self.episode % 4
        reward = float(100 * self.episode + self.t)
        return self._obs(), reward, terminated, False, self._info()


def _tree_map(fn, tree, *rest):
    """What minari's EpisodeBuffer needs of jax.tree_util.tree_map (dict/tuple/list nodes)."""
    if tree is None:
        return None
    if isinstance(tree, dict):
        return {k: _tree_map(fn, tree[k], *(r[k] for r in rest)) for k in tree}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_tree_map(fn, t, *(r[i] for r in rest)) for i, t in enumerate(tree))
    return fn(tree, *rest)


def _jax_or_stand_in(monkeypatch) -> None:
    """minari's DataCollector imports jax (minari[create]) for one tree_map; use a stand-in when
    jax is not installed, so the real DataCollector writes the datasets."""
    try:
        import jax.tree_util
    except ImportError:
        tree_util = types.ModuleType("jax.tree_util")
        tree_util.tree_map = _tree_map
        jax = types.ModuleType("jax")
        jax.tree_util = tree_util
        monkeypatch.setitem(sys.modules, "jax", jax)
        monkeypatch.setitem(sys.modules, "jax.tree_util", tree_util)


def _collect(env, dataset_id: str, fmt: str, steps: int, record_infos: bool, seed: int):
    collector = minari.DataCollector(env, record_infos=record_infos, data_format=fmt)
    collector.reset(seed=seed)
    collector.action_space.seed(seed)
    for _ in range(steps):
        _, _, terminated, truncated, _ = collector.step(collector.action_space.sample())
        if terminated or truncated:
            collector.reset()
    # the last episode is cut mid-way: DataCollector marks it truncated
    collector.create_dataset(
        dataset_id=dataset_id,
        algorithm_name="random",
        author="datasets_hub tests",
        author_email="tests@example.invalid",
        code_permalink="https://example.invalid/tests",
        description=f"test dataset {dataset_id}",
    )
    collector.close()


def _make_env(name: str):
    if name == "cartpole":  # Box observations, Discrete actions; terminations and truncations
        return gym.make("CartPole-v1", max_episode_steps=25), False
    if name == "frozenlake":  # Discrete observations
        return gym.make("FrozenLake-v1", max_episode_steps=10), False
    return gym.wrappers.TimeLimit(CounterEnv(name), max_episode_steps=8), True  # "dict" / "tuple"


ENVS = {"cartpole": 300, "frozenlake": 200, "dict": 60, "tuple": 60}


def _tid(env: str, fmt: str) -> str:
    return f"hubtest/{env}-{fmt}-v0"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A Minari store with every test dataset, in both formats."""
    root = tmp_path_factory.mktemp("minari-store")
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        _jax_or_stand_in(mp)
        for i, (env_name, steps) in enumerate(ENVS.items()):
            for fmt in FORMATS:
                env, infos = _make_env(env_name)
                _collect(env, _tid(env_name, fmt), fmt, steps, infos, seed=i)
        # T-row infos and a string info: only buffers written directly carry them, and only the
        # hdf5 backend stores infos whose length differs from the observations'
        from minari.data_collector.episode_buffer import EpisodeBuffer

        for fmt in ("hdf5",):
            buffers = []
            for e, length in enumerate((4, 6, 3)):
                t = np.arange(length + 1)
                buffers.append(
                    EpisodeBuffer(
                        observations=np.stack([10.0 * e + t, -t], 1).astype(np.float32),
                        actions=(np.arange(length) + e).astype(np.int64),
                        rewards=list(0.5 * np.arange(length) + e),
                        terminations=[False] * (length - 1) + [e != 1],
                        truncations=[False] * (length - 1) + [e == 1],
                        infos={
                            "step_cost": [float(-s - 10 * e) for s in range(length)],
                            "label": [f"s{s}" for s in range(length)],
                        },
                    )
                )
            minari.create_dataset_from_buffers(
                f"hubtest/steprows-{fmt}-v0",
                buffers,
                data_format=fmt,
                observation_space=gym.spaces.Box(-1e3, 1e3, (2,), np.float32),
                action_space=gym.spaces.Discrete(20),
                author="datasets_hub tests",
            )
    return root


@pytest.fixture
def minari_store(store, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(store))
    return store


def _convert(dataset_id: str, chunk_rows: int = 65536):
    ctx = LoaderContext(chunk_rows=chunk_rows)
    spec = DatasetSpec(id=f"minari/{dataset_id}", loader="minari")
    MinariLoader().check_params(spec)
    chunks = list(MinariLoader().episodes(spec, {}, ctx))
    return chunks, ctx


def _episodes(dataset_id: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(minari.load_dataset(dataset_id).iterate_episodes())


def _eq(actual: torch.Tensor, expected) -> None:
    expected = np.asarray(expected)
    assert actual.numpy().dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual.numpy(), expected)


def _check_common(td, ep) -> None:
    """Everything but observations, actions and infos of one episode."""
    steps = len(ep)
    assert td.batch_size[0] == steps
    _eq(td["episode"], np.full(steps, ep.id, dtype=np.int64))
    _eq(td["next", "reward"], np.asarray(ep.rewards).reshape(steps, 1))
    _eq(td["next", "terminated"], np.asarray(ep.terminations, bool).reshape(steps, 1))
    _eq(td["next", "truncated"], np.asarray(ep.truncations, bool).reshape(steps, 1))


def _split(chunks, episodes):
    data = torch.cat(chunks)
    ids = data["episode"]
    assert ids.tolist() == sorted(ids.tolist()), "episodes must come in minari's order"
    out, start = [], 0
    for ep in episodes:
        out.append(data[start : start + len(ep)])
        start += len(ep)
    assert start == data.batch_size[0]
    return data, out


# -- every value, every layout -------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_box_observations_match_minari(minari_store, fmt):
    dataset_id = _tid("cartpole", fmt)
    chunks, _ = _convert(dataset_id)
    episodes = _episodes(dataset_id)
    data, parts = _split(chunks, episodes)
    assert set(data.keys(True, True)) == {
        "observation",
        ("next", "observation"),
        "action",
        "episode",
        ("next", "reward"),
        ("next", "terminated"),
        ("next", "truncated"),
    }
    for td, ep in zip(parts, episodes, strict=True):
        _check_common(td, ep)
        _eq(td["observation"], ep.observations[:-1])
        _eq(td["next", "observation"], ep.observations[1:])
        _eq(td["action"], ep.actions)
    ends = data["next", "terminated"] | data["next", "truncated"]
    assert int(ends.sum()) == len(episodes)
    assert data["next", "terminated"].any() and data["next", "truncated"].any(), "both kinds of end are covered"


@pytest.mark.parametrize("fmt", FORMATS)
def test_discrete_observations_keep_integer_dtype(minari_store, fmt):
    dataset_id = _tid("frozenlake", fmt)
    chunks, _ = _convert(dataset_id)
    episodes = _episodes(dataset_id)
    data, parts = _split(chunks, episodes)
    assert data["observation"].dtype == torch.int64 and data["action"].dtype == torch.int64
    for td, ep in zip(parts, episodes, strict=True):
        _check_common(td, ep)
        _eq(td["observation"], ep.observations[:-1])
        _eq(td["next", "observation"], ep.observations[1:])
        _eq(td["action"], ep.actions)
    assert data["next", "terminated"].any() and data["next", "truncated"].any()


@pytest.mark.parametrize("fmt", FORMATS)
def test_dict_observations_text_and_infos(minari_store, fmt):
    dataset_id = _tid("dict", fmt)
    chunks, ctx = _convert(dataset_id)
    episodes = _episodes(dataset_id)
    data, parts = _split(chunks, episodes)
    for td, ep in zip(parts, episodes, strict=True):
        _check_common(td, ep)
        obs = ep.observations
        for key, values in (
            (("pos",), obs["pos"]),
            (("count",), obs["count"]),
            (("goal", "target"), obs["goal"]["target"]),
        ):
            _eq(td[("observation", *key)], values[:-1])
            _eq(td[("next", "observation", *key)], values[1:])
        missions = list(obs["goal"]["mission"])
        assert decode_text(td["observation", "goal", "mission"]) == missions[:-1]
        assert decode_text(td["next", "observation", "goal", "mission"]) == missions[1:]
        assert td["observation", "goal", "mission"].dtype == torch.uint8
        assert td["observation", "goal", "mission"].shape[-1] == 24  # 12 chars x 2 bytes (é)
        _eq(td["action", "0"], ep.actions[0])
        _eq(td["action", "1"], ep.actions[1])
        # DataCollector infos have T+1 rows (reset, then every step): info at t, next/info at t+1
        for key in ("t", "vec"):
            _eq(td["info", key], ep.infos[key][:-1])
            _eq(td["next", "info", key], ep.infos[key][1:])
    # the values are the ones the environment produced (not just what minari echoes back)
    first = parts[0]
    assert first["observation", "pos"][:, 1].tolist() == [-t for t in range(len(episodes[0]))]
    assert decode_text(first["observation", "goal", "mission"][:1]) == ["go é0"]
    assert ctx.notes["text_fields"]["observation/goal/mission"]["width"] == 24
    assert ctx.notes["info_keys"]["info/t"].startswith("T+1")
    assert data["next", "terminated"].any() and data["next", "truncated"].any()
    assert parts[-1]["next", "truncated"][-1].item(), "the cut last episode is truncated"


@pytest.mark.parametrize("fmt", FORMATS)
def test_tuple_observations_become_numbered_keys(minari_store, fmt):
    dataset_id = _tid("tuple", fmt)
    chunks, _ = _convert(dataset_id)
    episodes = _episodes(dataset_id)
    data, parts = _split(chunks, episodes)
    assert set(data["observation"].keys()) == {"0", "1"}
    for td, ep in zip(parts, episodes, strict=True):
        _check_common(td, ep)
        for i in range(2):
            _eq(td["observation", str(i)], ep.observations[i][:-1])
            _eq(td["next", "observation", str(i)], ep.observations[i][1:])
        _eq(td["action"], ep.actions)


def test_step_row_infos_kept_per_step_and_strings_reported(minari_store):
    dataset_id = "hubtest/steprows-hdf5-v0"
    chunks, ctx = _convert(dataset_id)
    episodes = _episodes(dataset_id)
    data, parts = _split(chunks, episodes)
    assert ("next", "info", "step_cost") not in data.keys(True, True)
    for td, ep in zip(parts, episodes, strict=True):
        _check_common(td, ep)
        _eq(td["info", "step_cost"], ep.infos["step_cost"])
        _eq(td["observation"], ep.observations[:-1])
    assert data["info", "step_cost"][:4].tolist() == [0.0, -1.0, -2.0, -3.0]
    assert ctx.notes["info_keys"] == {"info/step_cost": "T rows: kept per step at t"}
    assert "info/label" in ctx.notes["info_dropped"]


def test_chunks_hold_whole_episodes(minari_store):
    dataset_id = _tid("cartpole", "hdf5")
    small, _ = _convert(dataset_id, chunk_rows=40)
    whole, _ = _convert(dataset_id)
    assert len(small) > 3 and len(whole) == 1
    seen = set()
    for chunk in small:
        ids = chunk["episode"].unique().tolist()
        assert not seen.intersection(ids), "an episode was split across chunks"
        seen.update(ids)
        ends = chunk["next", "terminated"] | chunk["next", "truncated"]
        assert ends[-1].item(), "a chunk ends on an episode end"
    big = torch.cat(small)
    for key in whole[0].keys(True, True):
        assert torch.equal(big[key], whole[0][key]), key


def test_lean_layout_stores_observations_once(minari_store):
    from datasets_hub.testing import check_loader

    spec = DatasetSpec(id=f"minari/{_tid('dict', 'arrow')}", loader="minari")
    summary = check_loader(MinariLoader, spec)  # TED contract + deterministic over two runs
    layout = summary["layout"]
    assert layout["next_stored_per_step"] == []
    assert "observation/goal/mission" in layout["obs"] and "info/vec" in layout["obs"]


def test_card_has_minari_metadata(minari_store):
    _, ctx = _convert(_tid("cartpole", "arrow"))
    card = ctx.notes["minari"]
    assert card["dataset_id"] == _tid("cartpole", "arrow")
    assert card["data_format"] == "arrow"
    assert card["env_spec"]["id"] == "CartPole-v1"
    assert card["author"] == ["datasets_hub tests"]
    assert card["minari_version"] == minari.__version__
    assert card["total_steps"] == 300 and card["total_episodes"] == len(_episodes(_tid("cartpole", "arrow")))
    assert card["dataset_size"] > 0
    json.dumps(ctx.notes)  # the card is JSON


def test_the_loader_tells_the_build_how_many_steps_it_will_read(minari_store):
    expected, read = [], []
    ctx = LoaderContext(chunk_rows=64, progress=read.append, expect=expected.append)
    spec = DatasetSpec(id=f"minari/{_tid('cartpole', 'arrow')}", loader="minari")
    chunks = list(MinariLoader().episodes(spec, {}, ctx))
    assert expected == [300] and sum(read) == 300 == sum(int(c.batch_size[0]) for c in chunks)


# -- ids, params, offline, catalogue ----------------------------------------------------------------
def test_offline_missing_dataset_is_a_clear_error(minari_store, monkeypatch):
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")
    spec = DatasetSpec(id="minari/D4RL/door/human-v2", loader="minari")
    with pytest.raises(DownloadError, match=r"not in the local Minari store.*DATASETS_HUB_OFFLINE") as err:
        list(MinariLoader().episodes(spec, {}, LoaderContext()))
    assert "minari download D4RL/door/human-v2" in str(err.value)
    # local datasets need no network, offline or not
    assert _convert(_tid("cartpole", "hdf5"))[0]


def test_params_and_ids_are_checked():
    loader = MinariLoader()
    with pytest.raises(InvalidParameter, match="takes no parameters"):
        loader.check_params(DatasetSpec(id="minari/D4RL/door/human-v2", loader="minari", params={"x": 1}))
    with pytest.raises(InvalidParameter, match="-v<version>"):
        loader.check_params(DatasetSpec(id="minari/D4RL/door/human", loader="minari"))
    assert loader.resources(DatasetSpec(id="minari/D4RL/door/human-v2", loader="minari")) == []


def test_catalogue_lists_the_local_store_without_network(minari_store):
    entries = MinariLoader().catalogue()  # HF_HUB_OFFLINE=1 (conftest): no remote listing
    assert f"minari/{_tid('cartpole', 'hdf5')}" in entries
    assert entries[f"minari/{_tid('dict', 'arrow')}"]["loader"] == "minari"
    assert "test dataset" in entries[f"minari/{_tid('dict', 'arrow')}"]["description"]


def test_registry_minari_entries_are_wellformed():
    import yaml

    from datasets_hub.loaders.minari.loader import _MINARI_ID_RE

    registry = yaml.safe_load((REPO_ROOT / "registry.yaml").read_text())
    ids = [k for k in registry if k.startswith("minari/")]
    assert len(ids) > 40 and "minari/D4RL/door/human-v2" in ids and "minari/mujoco/hopper/expert-v0" in ids
    assert ids == sorted(ids), "the minari block is kept sorted"
    for dataset_id in ids:
        entry = registry[dataset_id]
        assert entry["loader"] == "minari" and entry.get("license") and entry.get("description"), dataset_id
        assert _MINARI_ID_RE.match(dataset_id.split("/", 1)[1]), dataset_id


# -- download through a Hugging Face endpoint on 127.0.0.1 ---------------------------------------------
_CHILD = r"""
import sys, torch
from datasets_hub.errors import DownloadError
from datasets_hub.loader import DatasetSpec, LoaderContext
from datasets_hub.loaders.minari.loader import MinariLoader
out = sys.argv[1]
for i, dataset_id in enumerate(sys.argv[2:]):
    spec = DatasetSpec(id="minari/" + dataset_id, loader="minari")
    try:
        chunks = list(MinariLoader().episodes(spec, {}, LoaderContext()))
    except DownloadError as exc:
        with open(f"{out}/{i}.err", "w") as fh:
            fh.write(str(exc))
    else:
        torch.save(torch.cat(chunks).to_dict(), f"{out}/{i}.pt")
"""


def _hf_server(store: Path, dataset_ids: list[str]):
    """The files of ``dataset_ids`` as Minari's HF remote lays them out: repo ``<org>/<namespace
    root>``, the dataset under its remaining path, ``namespace_metadata.json`` listing them."""
    from urllib.parse import parse_qs, urlsplit

    from fixtures import http_server

    server = http_server.FileServer()
    repos: dict[str, list[str]] = {}
    for dataset_id in dataset_ids:
        group, rest = dataset_id.split("/", 1)
        repos.setdefault(f"farama-minari/{group}", []).append(dataset_id)
        for path in sorted((store / dataset_id).rglob("*")):
            if path.is_file():
                server.add_hf_file(
                    f"farama-minari/{group}",
                    f"{rest}/{path.relative_to(store / dataset_id).as_posix()}",
                    path.read_bytes(),
                )
    for repo, ids in repos.items():
        server.add_hf_file(repo, "namespace_metadata.json", json.dumps({"datasets": ids}).encode())

    base = server._httpd.RequestHandlerClass

    class MinariHub(base):
        # what minari calls beyond tests/fixtures/http_server.py: list_datasets(author=…, search=…) and
        # repo_info (snapshot_download resolves the revision with it)
        def _hf_api(self, path, head):
            parts = path.split("/")
            if parts == ["api", "datasets"]:
                query = parse_qs(urlsplit(self.path).query)
                author, search = query.get("author", [""])[0], query.get("search", [""])[0]
                body = [
                    {"id": r, "author": r.split("/")[0], "sha": self.state.hf_commit(r), "private": False}
                    for r in sorted(repos)
                    if r.startswith(author + "/") and search in r.split("/", 1)[1]
                ]
                return self._simple(200, json.dumps(body).encode(), {"Content-Type": "application/json"}, head)
            if len(parts) >= 6 and parts[1] == "datasets" and parts[4] == "revision":
                repo = "/".join(parts[2:4])
                if repo not in repos:
                    return self._simple(
                        404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, head
                    )
                body = {"id": repo, "sha": self.state.hf_commit(repo), "private": False}
                return self._simple(200, json.dumps(body).encode(), {"Content-Type": "application/json"}, head)
            return super()._hf_api(path, head)

    server._httpd.RequestHandlerClass = MinariHub
    return server


def test_download_from_a_hugging_face_endpoint(store, tmp_path):
    ids = [_tid("dict", "hdf5"), _tid("dict", "arrow"), "hubtest/nothing-v0"]
    server = _hf_server(store, ids[:2])
    fresh = tmp_path / "fresh-store"
    out = tmp_path / "out"
    out.mkdir()
    # huggingface_hub reads HF_ENDPOINT/HF_HUB_OFFLINE at import: a child process starts clean
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "DATASETS_HUB_OFFLINE")}
    env.update(
        HF_ENDPOINT=server.base_url,
        HF_HOME=str(tmp_path / "hf-home"),
        MINARI_DATASETS_PATH=str(fresh),
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]),
        HF_HUB_DISABLE_XET="1",
    )
    with server:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(out), *ids], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout == "", "a loader never prints"
        assert server.total_requests() > 0
    # an id the remote does not have is a DownloadError naming it
    error = (out / "2.err").read_text()
    assert "hubtest/nothing-v0" in error and "could not download" in error
    # the datasets landed in the fresh store, complete, with no temporary directory left
    assert not [p for p in fresh.iterdir() if p.name.startswith(".datasets_hub-download-")]
    from tensordict import TensorDict

    for i, dataset_id in enumerate(ids[:2]):
        assert (fresh / dataset_id / "data" / "metadata.json").is_file()
        downloaded = TensorDict(torch.load(out / f"{i}.pt"), batch_size=[])
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("MINARI_DATASETS_PATH", str(store))
            expected = torch.cat(_convert(dataset_id)[0])
        assert set(downloaded.keys(True, True)) == set(expected.keys(True, True))
        for key in expected.keys(True, True):
            assert torch.equal(downloaded[key], expected[key]), (dataset_id, key)


# -- end to end through the hub --------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_hub_load_matches_minari(minari_store, fmt):
    from datasets_hub import hub

    dataset_id = _tid("dict", fmt)
    rb = hub.load(f"minari/{dataset_id}")
    data = rb[:]
    episodes = _episodes(dataset_id)
    assert len(rb) == sum(len(ep) for ep in episodes)
    start = 0
    for ep in episodes:
        td = data[start : start + len(ep)]
        start += len(ep)
        _check_common(td, ep)
        _eq(td["observation", "pos"], ep.observations["pos"][:-1])
        _eq(td["next", "observation", "pos"], ep.observations["pos"][1:])
        _eq(td["next", "observation", "count"], ep.observations["count"][1:])
        assert decode_text(td["next", "observation", "goal", "mission"]) == list(ep.observations["goal"]["mission"][1:])
        _eq(td["next", "info", "vec"], ep.infos["vec"][1:])
        _eq(td["action", "1"], ep.actions[1])


def test_card_shows_sample_keys_spaces_and_recovers_the_environment(minari_store):
    from datasets_hub import hub

    dataset_id = f"minari/{_tid('cartpole', 'arrow')}"
    hub.download(dataset_id)
    card = hub.info(dataset_id)
    dataset = minari.load_dataset(_tid("cartpole", "arrow"))
    assert card.sample_keys["observation"] == {"dtype": "float32", "shape": list(dataset.observation_space.shape)}
    assert card.sample_keys["next/reward"]["shape"] == [1] and card.sample_keys["next/done"]["dtype"] == "bool"
    assert card.spaces["observation_space"]["type"] == "Box"
    env = card.recover_environment()
    reference = dataset.recover_environment()
    assert env.spec.id == reference.spec.id == "CartPole-v1"
    assert env.observation_space == reference.observation_space and env.action_space == reference.action_space


def _pixel_buffers(lengths=(4, 6, 3)):
    """Episodes whose every observation image is distinct: pixel (0, 0) holds the episode, (0, 1) the step, and
    the rest a smooth gradient that moves with both (rendered-frame-like content)."""
    from minari.data_collector.episode_buffer import EpisodeBuffer

    yy, xx = np.mgrid[0:16, 0:16]
    buffers = []
    for e, length in enumerate(lengths):
        frames = np.stack([(yy * 8 + xx * 4 + 20 * e + 3 * t) % 256 for t in range(length + 1)])
        frames = np.repeat(frames[..., None], 3, axis=3).astype(np.uint8)
        frames[:, 0, 0, 0], frames[:, 0, 1, 0] = e, np.arange(length + 1)
        state = np.stack([np.full(length + 1, float(e)), np.arange(length + 1.0)], 1).astype(np.float32)
        buffers.append(
            EpisodeBuffer(
                observations={"pixels": frames, "state": state},
                actions=(np.arange(length) % 3).astype(np.int64),
                rewards=list(0.5 * np.arange(length)),
                terminations=[False] * (length - 1) + [True],
                truncations=[False] * length,
            )
        )
    return buffers


def test_frames_auto_stores_image_observations_as_png_above_the_raw_limit(tmp_path, monkeypatch):
    """frames=None: the estimate from metadata.json (exact: T + 1 frames an episode) picks PNG above the
    raw limit and raw under it; PNG frames are the source frames exactly; the card says what was stored."""
    import datasets_hub
    from datasets_hub.build import frames as fr

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "store"))
    space = gym.spaces.Dict(
        {"pixels": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8), "state": gym.spaces.Box(-1e3, 1e3, (2,), np.float32)}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        minari.create_dataset_from_buffers(
            "hubtest/pixels-v0", _pixel_buffers(), observation_space=space, action_space=gym.spaces.Discrete(3),
            author="datasets_hub tests", data_format="hdf5",
        )  # fmt: skip
    spec = DatasetSpec(id="minari/hubtest/pixels-v0", loader="minari")
    estimate = MinariLoader().frame_bytes(spec)
    assert estimate == (4 + 6 + 3 + 3) * 16 * 16 * 3
    monkeypatch.setattr(fr, "RAW_LIMIT_BYTES", estimate - 1)
    png = datasets_hub.load("minari/hubtest/pixels-v0")
    assert png.storage.manifest["frames"] == {"codec": "png", "quality": None}
    stored = datasets_hub.info("minari/hubtest/pixels-v0").frames["observation/pixels"]
    assert stored["decoded_bytes"] == estimate and stored["psnr_db"] is None  # the estimate is exact
    monkeypatch.setattr(fr, "RAW_LIMIT_BYTES", estimate)
    raw = datasets_hub.load("minari/hubtest/pixels-v0")
    assert raw.storage.manifest["frames"] == {"codec": "raw", "quality": None}
    a, b = png[:], raw[:]
    source = minari.load_dataset("hubtest/pixels-v0")
    want = np.concatenate([ep.observations["pixels"][:-1] for ep in source.iterate_episodes()])
    np.testing.assert_array_equal(a["observation", "pixels"].numpy(), want)
    assert torch.equal(a["next", "observation", "pixels"], b["next", "observation", "pixels"])
    # the state leaf is not an image: the estimate and the build count the pixels only
    assert set(datasets_hub.info("minari/hubtest/pixels-v0", frames="png").frames) == {"observation/pixels"}


def test_frame_bytes_of_a_remote_dataset_come_from_its_metadata(tmp_path, monkeypatch):
    import minari.storage.remotes as remotes

    from datasets_hub.loaders.minari.loader import image_observation_bytes

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("DATASETS_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    space = {"type": "Tuple", "subspaces": [{"type": "Box", "dtype": "uint8", "shape": [3, 64, 64]},
                                            {"type": "Box", "dtype": "uint8", "shape": [4]}]}  # fmt: skip
    metadata = {"observation_space": json.dumps(space), "total_steps": 1000, "total_episodes": 10}
    asked = []

    class Remote:
        def get_dataset_metadata(self, dataset_id):
            asked.append(dataset_id)
            return metadata

    monkeypatch.setattr(remotes, "get_cloud_storage", lambda *a, **k: Remote())
    spec = DatasetSpec(id="minari/atari/pong/expert-v0", loader="minari")
    assert MinariLoader().frame_bytes(spec) == 1010 * 3 * 64 * 64 and asked == ["atari/pong/expert-v0"]
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")
    assert MinariLoader().frame_bytes(spec) is None  # offline and not local: no estimate (nor a build)
    monkeypatch.delenv("DATASETS_HUB_OFFLINE")

    class Down:
        def get_dataset_metadata(self, dataset_id):
            raise OSError("connection refused")

    monkeypatch.setattr(remotes, "get_cloud_storage", lambda *a, **k: Down())
    with pytest.raises(DownloadError, match="pass frames='raw'"):
        MinariLoader().frame_bytes(spec)
    assert image_observation_bytes({"total_steps": 5}) is None  # an older store without the counts


def test_info_of_a_dataset_not_in_the_local_store_opens_no_connection(tmp_path, monkeypatch):
    """``info`` (the API and the CLI's recorded path) names the build from local facts: the remote metadata
    that sizes a ``load``'s frames is not fetched, and the name made without it is not recorded as final."""
    import minari.storage.remotes as remotes

    import datasets_hub
    from datasets_hub.cache.catalogue_builds import catalogue_build_record
    from datasets_hub.env import cache_root, connections_refused, offline

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("DATASETS_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    asked = []

    class Remote:
        def get_dataset_metadata(self, dataset_id):
            asked.append(dataset_id)
            raise OSError("no network in this test")

    monkeypatch.setattr(remotes, "get_cloud_storage", lambda *a, **k: Remote())
    card = datasets_hub.info("minari/D4RL/door/human-v2")
    assert card.id == "minari/D4RL/door/human-v2" and not card.cached
    name, _ = catalogue_build_record("minari/D4RL/door/human-v2")
    assert asked == []
    records = list(cache_root().rglob("minari-builds.json"))
    assert all("door" not in p.read_text() for p in records)  # not recorded: an online load may size it
    assert catalogue_build_record("minari/D4RL/door/human-v2")[0] == name
    with connections_refused() as refusals:
        assert offline() and len(refusals) == 1
    assert not offline()
