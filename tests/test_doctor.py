"""The data doctor on builds (datasets_hub/doctor/): one planted defect per step-check class, each
found through the build's own reader, and clean builds (from our synthetic episodes and from the
loaders' own conversions of their upstream-format fixtures) with no finding at all."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from datasets_hub.doctor import CLASSES, ActionSpace, Severity, diagnose
from datasets_hub.errors import CacheError, InvalidParameter
from datasets_hub.testing import FakeLoader

LENGTHS = [60, 45, 70, 52, 66, 48, 58, 61]


def walk(lengths=LENGTHS, seed=0):
    """Episodes whose states look like a robot's: a 2-d position that moves a little every step (a
    random walk) and a 2-d velocity that is mostly new noise every step (AR(1)); the reward of step t
    is a linear function of the state it leads to, s[t+1]. Values are distinct at every step."""
    rng = np.random.default_rng(seed)
    episodes = []
    for e, length in enumerate(lengths):
        vel = np.zeros((length + 1, 2))
        for t in range(1, length + 1):
            vel[t] = 0.3 * vel[t - 1] + rng.normal(0, 1, 2)
        pos = rng.normal(0, 0.3, 2) + np.cumsum(rng.normal(0, 0.05, (length + 1, 2)), axis=0)
        states = np.concatenate([pos, vel], axis=1).astype(np.float32)
        action = np.tanh(rng.normal(0, 1, (length, 2))).astype(np.float32) * 0.9
        reward = (states[1:] @ np.array([0.5, -0.25, 1.0, 0.75], np.float32)).astype(np.float32)
        episodes.append(
            {"states": states, "action": action, "reward": reward, "end": "terminated" if e % 2 else "truncated"}
        )
    return episodes


def chunk_of(episodes):
    """The TED chunk of ``episodes`` (as :func:`walk` makes them)."""
    obs, nxt, action, reward, term, trunc, ids = [], [], [], [], [], [], []
    for e, ep in enumerate(episodes):
        length = len(ep["action"])
        obs.append(ep["states"][:-1])
        nxt.append(ep["states"][1:])
        action.append(ep["action"])
        reward.append(ep["reward"].reshape(-1, 1))
        end = np.zeros((length, 1), bool)
        end[-1] = True
        term.append(end if ep["end"] in ("terminated", "both") else np.zeros_like(end))
        trunc.append(end if ep["end"] in ("truncated", "both") else np.zeros_like(end))
        ids.append(np.full(length, e))
    t = lambda parts: torch.from_numpy(np.concatenate(parts))  # noqa: E731 - a local shorthand
    return TensorDict(
        {
            "observation": t(obs),
            "action": t(action),
            "episode": t(ids).to(torch.int64),
            "next": {"observation": t(nxt), "reward": t(reward), "terminated": t(term), "truncated": t(trunc)},
        },
        batch_size=[sum(len(ep["action"]) for ep in episodes)],
    )


def build_of(episodes, notes=None, name="doctor/planted"):
    """A build of ``episodes`` made by the hub's build (the loader notes ``notes`` on its card)."""
    from datasets_hub.build.pipeline import build
    from datasets_hub.loader import DatasetSpec

    chunk = chunk_of(episodes)

    class ChunkLoader(FakeLoader):
        def episodes(self, spec, files, ctx):
            for key, value in (notes or {}).items():
                ctx.note(key, value)
            yield chunk.clone()

    return build(DatasetSpec(id=name, loader="fake", params={}), ChunkLoader(), {}, [])


def names(report, at_least=Severity.INFO):
    return sorted({f.name for f in report.findings if f.level >= at_least})


def test_a_clean_build_has_no_finding():
    report = diagnose(build_of(walk()))
    assert report.findings == [], report.table()
    assert report.kind == "build" and report.rows == sum(LENGTHS) and report.episodes == len(LENGTHS)
    assert report.exit_code() == 0 and report.ok
    assert {"structure", "numeric", "termination", "alignment", "teleports", "duplicates"} <= set(report.checks)


def planted(defect):
    """``(episodes, notes, diagnose kwargs)`` with one ``defect`` planted in episode 3 (or everywhere)."""
    episodes, notes, kw = walk(), None, {}
    ep = episodes[3]
    if defect == "non-finite":
        ep["states"][10, 1] = np.nan
    elif defect == "all-zero-column":
        for e in episodes:
            e["action"][:] = 0
    elif defect == "constant-column":
        for e in episodes:
            e["action"][:] = 0.25
    elif defect == "terminated-and-truncated":
        ep["end"] = "both"
    elif defect == "episode-end-unflagged":
        ep["end"] = "none"
    elif defect == "reward-shifted":  # reward[t] computed from s[t+2]: one step late (RoboSet read naively)
        for e in episodes:
            e["reward"][:-1] = e["reward"][1:].copy()
    elif defect == "teleport":  # the position resets mid-episode (D4RL antmaze)
        ep["states"][30:, :2] += 5.0
    elif defect == "duplicate-episode":
        episodes[5] = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in episodes[2].items()}
    elif defect == "action-out-of-space":
        ep["action"][7, 0] = 1.5
        notes = {"minari": {"action_space": {"type": "Box", "low": [-1.0, -1.0], "high": [1.0, 1.0], "shape": [2]}}}
    else:
        raise KeyError(defect)
    return episodes, notes, kw


BUILD_PLANTED = [
    ("non-finite", (3, 10)),
    ("all-zero-column", None),
    ("constant-column", None),
    ("terminated-and-truncated", (3, 51)),
    ("episode-end-unflagged", (3, 51)),
    ("reward-shifted", None),
    ("teleport", (3, 30)),
    ("duplicate-episode", (5, None)),
    ("action-out-of-space", (3, 7)),
]


@pytest.mark.parametrize("defect, example", BUILD_PLANTED, ids=[d for d, _ in BUILD_PLANTED])
def test_each_planted_defect_is_found_in_a_build(defect, example):
    episodes, notes, kw = planted(defect)
    report = diagnose(build_of(episodes, notes), **kw)
    found = report.of(defect)
    assert found, report.table()
    assert names(report) == [defect], report.table()  # nothing else is reported
    if example is not None:
        assert found[0].examples[0] == example
    assert found[0].defect.consequence and found[0].count >= 1
    assert report.exit_code() == {Severity.ERROR: 1, Severity.WARNING: 3, Severity.INFO: 0}[found[0].level] or (
        found[0].level == Severity.INFO and report.exit_code(Severity.INFO) == 4
    )


def test_an_all_zero_reward_is_a_warning_and_an_all_zero_observation_an_error():
    episodes = walk()
    for e in episodes:
        e["reward"][:] = 0
        e["states"][:] = 0
    report = diagnose(build_of(episodes))
    levels = {f.column: f.level for f in report.of("all-zero-column")}
    assert levels == {"next/reward": Severity.WARNING, "observation": Severity.ERROR}


def test_a_declared_space_can_be_given_and_a_discrete_one_is_checked():
    episodes = walk()
    episodes[1]["action"][4] = [2.0, 0.0]
    report = diagnose(build_of(episodes), action_space=([-1, -1], [1, 1]))
    assert [f.examples[0] for f in report.of("action-out-of-space")] == [(1, 4)]
    assert not any("no action space declared" in n for n in report.notes)
    assert any("no action space declared" in n for n in diagnose(build_of(walk(), name="doctor/d1")).notes)
    with pytest.raises(InvalidParameter, match="params= selects the build of a catalogue id"):
        diagnose(build_of(walk(), name="doctor/d1"), params={"steps": 3})
    with pytest.raises(InvalidParameter, match="action_space must be"):
        diagnose("no/such-id", action_space="box")  # refused before anything is read
    found = diagnose(build_of(walk(), name="doctor/d2"), action_space=ActionSpace("test", n=3)).of(
        "action-out-of-space"
    )
    assert found and found[0].count == sum(LENGTHS)  # no continuous action is one of 0, 1, 2


def test_a_buffer_over_a_build_and_a_catalogue_id_are_diagnosed_like_the_build(tmp_path):
    import datasets_hub as dh

    from fixtures.d4rl import write_d4rl

    path = write_d4rl(tmp_path / "tiny.hdf5", [(5, "terminal"), (12, "timeout"), (9, "timeout"), (4, "terminal")])
    dh.register_dataset("d4rl/doctor-tiny-v0", params={}, resources=[{"url": "file://" + str(path)}])
    with pytest.raises(CacheError, match="neither a build nor raw files"):
        diagnose("d4rl/doctor-tiny-v0")
    rb = dh.load("d4rl/doctor-tiny-v0")
    by_buffer, by_id = diagnose(rb), diagnose("d4rl/doctor-tiny-v0")
    assert by_buffer.target == by_id.target and by_buffer.kind == "build"
    assert by_id.findings == [] and by_buffer.findings == []
    with pytest.raises(InvalidParameter, match="in-memory buffer has no source"):
        diagnose(dh.ReplayBuffer(storage=dh.LazyTensorStorage(10)))


def test_a_partly_resident_remote_copy_is_refused():
    class PartlyResident:  # what a remote build's storage answers while chunks are still missing
        path = build_of(walk())
        url = "hf://datasets/org/repo"

        def fill_status(self):
            return {"complete": False, "resident_bytes": 10, "total_bytes": 100}

    with pytest.raises(InvalidParameter, match="only partly resident here"):
        diagnose(PartlyResident())


def test_a_large_build_is_read_as_a_sample_of_whole_episodes():
    report = diagnose(build_of(walk()), max_rows=100)
    assert report.sampled and 100 <= report.rows_read < report.rows
    assert report.findings == []


def test_report_json_and_table_name_every_finding():
    episodes, notes, _ = planted("teleport")
    report = diagnose(build_of(episodes, notes))
    data = report.to_json()
    assert data["worst"] == "warning" and data["findings"][0]["class"] == "teleport"
    assert data["findings"][0]["examples"][0] == {"episode": 3, "step": 30}
    lines = "\n".join(report.table())
    assert "teleport" in lines and "consequence:" in lines and "(3, 30)" in lines


def test_every_class_is_registered_with_a_consequence_and_an_unknown_name_is_refused():
    assert len(CLASSES) >= 20
    for cls in CLASSES.values():
        assert cls.consequence and cls.summary and cls.family
    with pytest.raises(InvalidParameter, match="Did you mean 'teleport'"):
        diagnose(build_of(walk())).of("teleports")


def test_the_guide_lists_every_class():
    from pathlib import Path

    guide = (Path(__file__).parents[1] / "docs" / "guide" / "doctor.md").read_text()
    missing = [name for name in CLASSES if f"| `{name}` |" not in guide]
    assert missing == []
