"""The TD-MPC2 loader against TD-MPC2's own reader: ``OfflineTrainer._load_dataset`` and ``Buffer.sample``.

TD-MPC2 is not on PyPI, so these tests need a checkout of ``nicklashansen/tdmpc2`` (``TDMPC2_SRC``, the
repository root) and TorchRL, which its ``Buffer`` is built on: ``make test-upstream-tdmpc2
TDMPC2_SRC=path/to/tdmpc2`` runs them in the benchmark venv (TorchRL 0.14). Without them the tests skip,
unless ``DATASETS_HUB_UPSTREAM_REQUIRED=1`` (the make target sets it), which turns a missing checkout or
package into a failure. They carry the ``upstream`` marker, so ``make test`` leaves them out.

What is compared, value by value, on chunks in TD-MPC2's layout (``tests/fixtures/tdmpc2.py``, distinct
values per row; ``[episodes, 501]`` rows as mt30's files hold):

- upstream's storage after ``_load_dataset`` (its sorted glob, ``torch.load``, ``Buffer.load``) against our
  build: row ``r`` of episode ``e`` upstream is ``obs[e, r]``, ``action[e, r]``, ``reward[e, r]``; our
  transition ``t`` holds ``obs[e, t]``, ``next obs = obs[e, t + 1]``, ``action[e, t + 1]`` and
  ``reward[e, t + 1]`` (upstream's ``_prepare_batch`` drops row 0's NaN action and reward the same way);
- upstream's sampled batches (``Buffer.sample``: ``horizon + 1`` observations, ``horizon`` actions, rewards
  and terminations, one task per slice): each slice is found in our build by its episode and first step, and
  our rows give the same tensors.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest
import torch

from datasets_hub import catalogue

from fixtures.tdmpc2 import chunk, save_chunk

pytestmark = pytest.mark.upstream

REQUIRED = os.environ.get("DATASETS_HUB_UPSTREAM_REQUIRED") == "1"
SOURCE = os.environ.get("TDMPC2_SRC", "")
EPISODE_ROWS = 501  # mt30's episode length, which _load_dataset asserts
HORIZON = 3


def _unavailable(why: str) -> None:
    if REQUIRED:
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def upstream() -> types.SimpleNamespace:
    """TD-MPC2's ``OfflineTrainer`` and ``Buffer`` modules, imported from the checkout in ``TDMPC2_SRC``."""
    if not SOURCE:
        _unavailable("TDMPC2_SRC is not set: give a checkout of github.com/nicklashansen/tdmpc2")
    package = Path(SOURCE) / "tdmpc2"
    if not (package / "common" / "buffer.py").is_file():
        _unavailable(f"TDMPC2_SRC={SOURCE} holds no tdmpc2/common/buffer.py: it must be the repository's root")
    try:
        import torchrl  # noqa: F401  (TD-MPC2's Buffer is a TorchRL replay buffer)
    except ImportError:
        _unavailable("TD-MPC2's Buffer needs torchrl: run in the benchmark venv (make test-upstream-tdmpc2)")
    sys.path.insert(0, str(package))  # TD-MPC2 imports its modules as top-level ones (common.buffer, ...)
    try:
        from common import buffer  # type: ignore[import-not-found]  # TD-MPC2 checkout, on sys.path here
        from trainer import offline_trainer  # type: ignore[import-not-found]  # the same checkout
    finally:
        sys.path.remove(str(package))
    return types.SimpleNamespace(buffer=buffer, offline_trainer=offline_trainer)


def _on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """TD-MPC2 asks CUDA for free memory to place its storage; on a machine without a GPU it gets none
    (its heuristic then picks CPU memory, as it does when the data does not fit the GPU)."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (0, 0))


def _upstream_buffer(upstream, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """``OfflineTrainer._load_dataset`` over ``data_dir``: TD-MPC2's own glob, ``torch.load`` and ``Buffer``."""
    _on_cpu(monkeypatch)
    cfg = types.SimpleNamespace(
        data_dir=str(data_dir), task="mt30", multitask=True, batch_size=8, horizon=HORIZON, steps=1
    )
    trainer = upstream.offline_trainer.OfflineTrainer.__new__(upstream.offline_trainer.OfflineTrainer)
    trainer.cfg = cfg  # the one attribute _load_dataset reads (the agent and environments are not needed)
    trainer._load_dataset()
    trainer.buffer._device = torch.device("cpu")  # where _prepare_batch puts a batch: CUDA upstream
    return trainer.buffer


def _our_build(tmp_path: Path, files: list[Path], request: pytest.FixtureRequest):
    import datasets_hub

    dataset_id = f"tdmpc2/upstream-{tmp_path.name}"
    datasets_hub.register_dataset(
        dataset_id,
        loader="tdmpc2",
        params={"task_set": "mt30"},
        resources=[{"url": "file://" + str(p)} for p in files],
    )
    request.addfinalizer(lambda: catalogue.unregister_dataset(dataset_id))
    return datasets_hub.load(dataset_id, batch_size=4)[:]


def _chunks(tmp_path: Path) -> list[Path]:
    data_dir = tmp_path / "mt30"
    data_dir.mkdir()
    # three files, read in TD-MPC2's sorted-glob order (chunk_0, chunk_1, chunk_2), tasks 0-29 of mt30
    layout = [(0, 2, [3, 17]), (1, 1, [29]), (2, 3, [0, 0, 11])]
    return [save_chunk(data_dir / f"chunk_{f}.pt", chunk(f, n, EPISODE_ROWS, tasks)) for f, n, tasks in layout]


def test_upstream_storage_matches_our_build_row_by_row(upstream, tmp_path, monkeypatch, request):
    files = _chunks(tmp_path)
    buffer = _upstream_buffer(upstream, files[0].parent, monkeypatch)
    stored = buffer._buffer.storage[: buffer.num_eps * EPISODE_ROWS]  # TD-MPC2's own rows, in its order
    ours = _our_build(tmp_path, files, request)

    episodes = buffer.num_eps
    assert episodes == 6 and ours.batch_size[0] == episodes * (EPISODE_ROWS - 1)
    up = stored.reshape(episodes, EPISODE_ROWS)
    mine = ours.reshape(episodes, EPISODE_ROWS - 1)
    exact = {"rtol": 0, "atol": 0}
    torch.testing.assert_close(mine["observation"], up["obs"][:, :-1], **exact)
    torch.testing.assert_close(mine["next", "observation"], up["obs"][:, 1:], **exact)
    torch.testing.assert_close(mine["action"], up["action"][:, 1:], **exact)
    torch.testing.assert_close(mine["next", "reward"][..., 0], up["reward"][:, 1:], **exact)
    assert torch.equal(mine["task"], up["task"][:, 1:])
    assert torch.equal(mine["episode"], up["episode"][:, 1:])  # both number episodes 0.. in reading order
    # every upstream episode ends where its rows end: the last transition is truncated, none terminated
    assert mine["next", "truncated"][:, -1].all() and not mine["next", "truncated"][:, :-1].any()
    assert not mine["next", "terminated"].any()


def test_upstream_sampled_slices_are_our_rows(upstream, tmp_path, monkeypatch, request):
    files = _chunks(tmp_path)
    buffer = _upstream_buffer(upstream, files[0].parent, monkeypatch)
    ours = _our_build(tmp_path, files, request).reshape(buffer.num_eps, EPISODE_ROWS - 1)
    torch.manual_seed(0)
    seen = set()
    for _ in range(20):
        obs, action, reward, terminated, task = buffer.sample()  # [H + 1, B, ...], [H, B, ...], ..., [B]
        for b in range(obs.shape[1]):
            # the fixture's values name their row: obs[..., 0] = file * 100000 + episode * 1000 + step
            value = int(obs[0, b, 0])
            step = value % 1000
            first = next(
                i for i, (f, e) in enumerate(_episode_order()) if (f, e) == (value // 100000, value // 1000 % 100)
            )
            rows = ours[first, step : step + HORIZON]
            seen.add((first, step))
            torch.testing.assert_close(obs[:HORIZON, b], rows["observation"], rtol=0, atol=0)
            torch.testing.assert_close(obs[HORIZON, b], rows["next", "observation"][-1], rtol=0, atol=0)
            torch.testing.assert_close(action[:, b], rows["action"], rtol=0, atol=0)
            torch.testing.assert_close(reward[:, b, 0], rows["next", "reward"][:, 0], rtol=0, atol=0)
            assert not terminated[:, b].any() and not rows["next", "terminated"].any()
            assert int(task[b]) == int(rows["task"][0])
    assert len(seen) > 100  # 160 slices drawn: they cover many episodes and steps


def _episode_order() -> list[tuple[int, int]]:
    """``(file, episode within the file)`` of each episode in reading order (``_chunks``' layout)."""
    return [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (2, 2)]
