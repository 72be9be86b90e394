"""The TD-MPC2 loader on chunks written as TD-MPC2 writes them (``tests/fixtures/tdmpc2.py``), row by row.

The expected rows follow TD-MPC2's own ``Buffer._prepare_batch``: observations at every row, ``action[1:]``
and ``reward[1:]``; they are computed here by a plain loop over episodes and steps.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from datasets_hub import catalogue
from datasets_hub.errors import CorruptFile, InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, LoaderContext, Resource
from datasets_hub.loaders.tdmpc2 import TASK_SETS, TDMPC2Loader, UnsafeChunk, load_tensordict

from fixtures.docs_tables import docs_pins
from fixtures.tdmpc2 import chunk, save_chunk


def convert(paths: list[Path], chunk_rows: int = 1000, task_set: str = "mt30"):
    spec = DatasetSpec("tdmpc2/test", "tdmpc2", params={"task_set": task_set}, resources=[])
    ctx = LoaderContext(chunk_rows=chunk_rows)
    chunks = list(TDMPC2Loader().episodes(spec, {p.name: p for p in paths}, ctx))
    return chunks, ctx.notes


def expected(files: list[tuple[int, int, int, list[int]]]):
    """Plain-loop truth over ``(file value, episodes, rows, tasks)`` in reading order."""
    obs, nxt, act, rew, task, episode, last = [], [], [], [], [], [], []
    eid = 0
    for f, episodes, rows, tasks in files:
        source = chunk(f, episodes, rows, tasks)
        for e in range(episodes):
            for t in range(rows - 1):
                obs.append(source["obs"][e, t])
                nxt.append(source["obs"][e, t + 1])
                act.append(source["action"][e, t + 1])
                rew.append(source["reward"][e, t + 1])
                task.append(tasks[e])
                episode.append(eid)
                last.append(t == rows - 2)
            eid += 1
    return {
        "observation": torch.stack(obs),
        "next_observation": torch.stack(nxt),
        "action": torch.stack(act),
        "reward": torch.stack(rew),
        "task": torch.tensor(task),
        "episode": torch.tensor(episode),
        "last": torch.tensor(last),
    }


def check(td, truth) -> None:
    torch.testing.assert_close(td["observation"], truth["observation"], rtol=0, atol=0)
    torch.testing.assert_close(td["next", "observation"], truth["next_observation"], rtol=0, atol=0)
    torch.testing.assert_close(td["action"], truth["action"], rtol=0, atol=0)
    torch.testing.assert_close(td["next", "reward"][:, 0], truth["reward"], rtol=0, atol=0)
    assert td["task"].tolist() == truth["task"].tolist() and td["episode"].tolist() == truth["episode"].tolist()
    assert td["next", "truncated"][:, 0].tolist() == truth["last"].tolist()


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("chunk_rows", [1, 7, 1000])
def test_chunks_become_exact_episodes(tmp_path, legacy, chunk_rows):
    # chunk_10 is read after chunk_2, as TD-MPC2's sorted glob would not: numbers compare as numbers
    a = save_chunk(tmp_path / "chunk_2.pt", chunk(2, 3, 5, [0, 29, 4]), legacy=legacy)
    b = save_chunk(tmp_path / "chunk_10.pt", chunk(10, 2, 5, [7, 7]), legacy=legacy)
    chunks, notes = convert([b, a], chunk_rows=chunk_rows)
    td = torch.cat(chunks)
    check(td, expected([(2, 3, 5, [0, 29, 4]), (10, 2, 5, [7, 7])]))
    assert not td["next", "terminated"].any() and td.batch_size[0] == 5 * 4
    assert notes["episodes_per_file"] == {"chunk_2.pt": 3, "chunk_10.pt": 2}
    assert notes["episodes_per_task"] == {
        TASK_SETS["mt30"][0]: 1, TASK_SETS["mt30"][4]: 1, TASK_SETS["mt30"][7]: 2, TASK_SETS["mt30"][29]: 1
    }  # fmt: skip
    assert notes["rows_per_episode"] == 5 and notes["episode_ends"] == {"terminated": 0, "truncated": 5}
    assert "NaN in every episode" in notes["first_row"]


def test_terminated_ends_the_episode_as_upstream_says(tmp_path):
    path = save_chunk(tmp_path / "chunk_0.pt", chunk(0, 3, 4, [1, 2, 3], terminated=[True, False, True]))
    chunks, notes = convert([path])
    td = torch.cat(chunks)
    assert td["next", "terminated"][:, 0].tolist() == [False, False, True, False, False, False, False, False, True]
    assert td["next", "truncated"][:, 0].tolist() == [False, False, False, False, False, True, False, False, False]
    assert notes["episode_ends"] == {"terminated": 2, "truncated": 1}
    np.testing.assert_array_equal(td["info", "terminated"].numpy(), [0, 0, 1, 0, 0, 0, 0, 0, 1])


def test_a_pickle_asking_for_code_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    bad = tmp_path / "chunk_0.pt"
    torch.save({"obs": Payload()}, bad)
    with pytest.raises(UnsafeChunk, match=r"chunk_0\.pt is refused.*it asks for posix\.system"):
        convert([bad])
    assert not marker.exists()
    torch.save({"obs": torch.zeros(2, 3)}, tmp_path / "plain.pt")  # tensors, but not a TensorDict
    with pytest.raises(UnsafeChunk, match="holds a dict, not a TensorDict"):
        load_tensordict(tmp_path / "plain.pt")


def test_a_truncated_chunk_is_a_corrupt_file_naming_it(tmp_path):
    good = save_chunk(tmp_path / "chunk_0.pt", chunk(0, 2, 5, [0, 1]))
    cut = tmp_path / "chunk_1.pt"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CorruptFile, match=r"chunk_1\.pt cannot be read") as info:
        convert([cut])
    assert Path(info.value.path) == cut


def test_bad_chunks_are_clear_errors(tmp_path):
    td = chunk(0, 2, 5, [0, 1])
    td["task"][1, 3] = 2
    with pytest.raises(LoaderError, match="changes task mid-episode"):
        convert([save_chunk(tmp_path / "a.pt", td)])
    with pytest.raises(LoaderError, match="task id 30 is outside the 30 tasks"):
        convert([save_chunk(tmp_path / "b.pt", chunk(0, 1, 5, [30]))])
    convert([save_chunk(tmp_path / "c.pt", chunk(0, 1, 5, [30]))], task_set="mt80")  # 30 is mw-assembly in mt80
    missing = chunk(0, 2, 5, [0, 1]).exclude("reward")
    with pytest.raises(LoaderError, match="has no 'reward'"):
        convert([save_chunk(tmp_path / "d.pt", missing)])
    with pytest.raises(LoaderError, match="episodes have 4 rows, earlier chunks 5"):
        convert(
            [save_chunk(tmp_path / "e_0.pt", chunk(0, 1, 5, [0])), save_chunk(tmp_path / "e_1.pt", chunk(1, 1, 4, [0]))]
        )


def test_params_are_checked():
    with pytest.raises(InvalidParameter, match="task_set"):
        TDMPC2Loader().check_params(DatasetSpec("tdmpc2/x", "tdmpc2", params={"task_set": "mt40"}))


def test_check_loader_contract(tmp_path):
    from datasets_hub.testing import check_loader

    path = save_chunk(tmp_path / "chunk_0.pt", chunk(0, 3, 6, [0, 1, 2]))
    spec = DatasetSpec("tdmpc2/t", "tdmpc2", params={"task_set": "mt30"}, resources=[Resource(path.name, ("x",))])
    assert check_loader(TDMPC2Loader, spec, {path.name: path})["counts"]["episodes"] == 3


def test_load_end_to_end(tmp_path, request):
    import datasets_hub

    path = save_chunk(tmp_path / "chunk_0.pt", chunk(0, 3, 6, [0, 1, 2]))
    dataset_id = "tdmpc2/test-mt30"
    datasets_hub.register_dataset(
        dataset_id, loader="tdmpc2", params={"task_set": "mt30"}, resources=[{"url": "file://" + str(path)}]
    )
    request.addfinalizer(lambda: catalogue.unregister_dataset(dataset_id))
    rb = datasets_hub.load(dataset_id, batch_size=4)
    check(rb[:], expected([(0, 3, 6, [0, 1, 2])]))


def test_catalogue_lists_the_chunks():
    for name, count in (("mt30", 4), ("mt80", 20)):
        spec = catalogue.resolve(f"tdmpc2/{name}")
        resources = TDMPC2Loader().resources(spec)
        assert spec.params["task_set"] == name and len(resources) == count
        assert resources[-1].urls[0] == (
            f"hf://datasets/nicklashansen/tdmpc2/{name}/chunk_{count - 1}.pt@d0364e9b4451761012e548b4269b7c6c02234c49"
        )


def test_pinned_sizes_and_sha256_are_the_docs_table():
    """Every chunk of both sets is in the docs table, and each resource pins exactly the table's size and sha256
    (none where the table has none): a figure changed in one place only fails."""
    table = docs_pins("tdmpc2.md", r"mt\d\d/chunk_\d+\.pt", "not found")
    assert len(table) == 24
    for name in ("mt30", "mt80"):
        for resource in TDMPC2Loader().resources(catalogue.resolve(f"tdmpc2/{name}")):
            chunk = resource.name.removeprefix("tdmpc2/")
            assert table[chunk] == (resource.size, resource.sha256), chunk
    assert sum(1 for _, sha in table.values() if sha) == 16


def test_torch_legacy_serialization_is_read_without_mmap(tmp_path):
    td = chunk(0, 2, 4, [3, 5])
    path = tmp_path / "chunk_0.pt"
    torch.save(td, path, _use_new_zipfile_serialization=False)  # cannot be memory-mapped
    check(torch.cat(convert([path])[0]), expected([(0, 2, 4, [3, 5])]))


def test_a_tensordict_holding_no_tensors_is_a_loader_error_not_a_corrupt_file(tmp_path):
    from fixtures.tdmpc2 import save_legacy_state

    bad = save_legacy_state(tmp_path / "chunk_1.pt", {"obs": [1, 2]}, torch.Size([1, 2]))  # a list for a tensor
    with pytest.raises(LoaderError, match=r"entry 'obs' is a list, not a tensor") as info:
        convert([bad])
    assert not isinstance(info.value, CorruptFile)


def test_a_chunk_reads_where_tensordict_registers_no_safe_globals(tmp_path):
    # tensordict 0.14 (TorchRL 0.14's) registers neither _make_td nor TensorDict for weights_only loading; a chunk
    # saved by a recent tensordict names both (_make_td(tensordict._td.TensorDict, state)): our stand-ins serve
    path = save_chunk(tmp_path / "chunk_0.pt", chunk(0, 2, 4, [1, 2]))
    registered = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        td = load_tensordict(path)
    finally:
        torch.serialization.add_safe_globals(registered)
    torch.testing.assert_close(td["obs"], chunk(0, 2, 4, [1, 2])["obs"], rtol=0, atol=0, equal_nan=True)
    assert td.batch_size == (2, 4)
