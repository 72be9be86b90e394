"""TD-MPC2's multi-task offline datasets as TorchRL Episode Data: ``tdmpc2/mt30`` and ``tdmpc2/mt80``.

**Source.** The Hugging Face dataset ``nicklashansen/tdmpc2``: ``mt30/chunk_{0..3}.pt`` (30 DMControl tasks,
345,690,000 rows = 690,000 episodes of 501 rows) and ``mt80/chunk_{0..19}.pt`` (those 30 and the 50 Meta-World
tasks, 550,450,000 rows = 5,450,000 episodes of 101 rows), each chunk a ``torch.save``-d TensorDict with batch
size ``[episodes, rows]``. Chunks are read in name order, as TD-MPC2's offline trainer globs and sorts them.

**No code from pickles.** TD-MPC2 loads the chunks with ``torch.load(weights_only=False)``; we never do. A
chunk is read with ``weights_only=True`` and an explicit allow-list (:mod:`.safe_load`): tensors,
``torch.Size``, and the names a TensorDict is pickled under, rebuilt from their recorded state. Any other
global is refused with an error naming the file and the global, before anything in it runs. Tensors stay
memory-mapped on the file while an episode group is copied out, so a 5 GB chunk is never read whole.

**Rows** (TD-MPC2's online trainer writes an episode as ``T + 1`` rows: the reset observation with a NaN action
and reward, then one row per step holding the observation reached, the action that led there and its reward;
its ``Buffer`` samples ``obs``, ``action[1:]``, ``reward[1:]``):

=============================  ==================================================================
upstream (rows 0..T)            TED (transitions t = 0..T-1)
=============================  ==================================================================
``obs[t]``, ``obs[t + 1]``      ``observation[t]``, ``("next", "observation")[t]`` (exact; stored once)
``action[t + 1]``               ``action[t]`` (row 0's NaN action is no step)
``reward[t + 1]``               ``("next", "reward")[t]`` ``[T, 1]``
``terminated[t + 1]``           ``("info", "terminated")[t]`` when the chunk has it; the episode ends
(when present)                  ``terminated`` if its last value is set, else ``truncated``
``task``                        ``task[t]`` (int64, constant over an episode; names on the card)
chunk order, row order          ``episode``: 0..E-1 over all chunks (card: ``episodes_per_file``)
=============================  ==================================================================

Observations and actions are zero-padded to the largest task of the set, as TD-MPC2 stores them: the
padding is kept (the card lists the task names; TD-MPC2's env wrappers give the true sizes).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasets_hub.errors import CorruptFile, InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext, Resource

from .safe_load import load_tensordict
from .tasks import TASK_SETS

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    from tensordict import TensorDict, TensorDictBase

__all__ = ["TDMPC2Loader"]

PARAMS = ("task_set",)
_REQUIRED = ("obs", "action", "reward", "task")


class TDMPC2Loader(Loader):
    """Loader for TD-MPC2's mt30/mt80 chunks (see the module docstring for the exact semantics)."""

    name = "tdmpc2"
    requires = ()
    install_hint = ""
    format_version = 1

    def check_params(self, spec: DatasetSpec) -> None:
        self.reject_unknown_params(spec, PARAMS)
        task_set = spec.params.get("task_set")
        if task_set not in TASK_SETS:
            raise InvalidParameter(
                f"{spec.id}: task_set must be one of {', '.join(map(repr, TASK_SETS))} (set by the catalogue id), "
                f"got {task_set!r}"
            )

    def resources(self, spec: DatasetSpec) -> list[Resource]:
        self.check_params(spec)
        if not spec.resources:
            raise InvalidParameter(f"{spec.id} has no resource to fetch: add the chunks to its catalogue entry")
        return list(spec.resources)

    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDictBase]:
        self.check_params(spec)
        if not files:
            raise LoaderError(f"{spec.id}: no chunk to read")
        names = sorted(files, key=_natural)
        converter = _Converter(spec, ctx, TASK_SETS[spec.params["task_set"]])
        for name in names:
            path = Path(files[name])
            try:
                chunk = load_tensordict(path)
            except CorruptFile as exc:  # a truncated or damaged download: the build moves it aside
                raise CorruptFile(f"{spec.id}: {exc}", path=exc.path) from exc
            except LoaderError as exc:  # UnsafeChunk included: the same class, naming the dataset
                raise type(exc)(f"{spec.id}: {exc}") from exc
            yield from converter.read(name, chunk)
        converter.write_notes()


def _natural(name: str) -> tuple[Any, ...]:
    """``chunk_2.pt`` before ``chunk_10.pt``: numbers compare as numbers."""
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


class _Converter:
    def __init__(self, spec: DatasetSpec, ctx: LoaderContext, tasks: tuple[str, ...]) -> None:
        self.spec, self.ctx, self.tasks = spec, ctx, tasks
        self.episode_id = 0
        self.rows_per_episode: int | None = None
        self.per_file: dict[str, int] = {}
        self.task_counts: dict[int, int] = {}
        self.has_terminated: bool | None = None
        self.first_row_not_nan = 0
        self.ends = {"terminated": 0, "truncated": 0}

    def read(self, name: str, chunk: TensorDict) -> Iterator[TensorDictBase]:
        import torch

        where = f"{self.spec.id}: {name}"
        keys = set(chunk.keys())
        missing = [k for k in _REQUIRED if k not in keys]
        if missing:
            raise LoaderError(f"{where} has no {missing[0]!r} (keys: {sorted(keys)}): not a TD-MPC2 chunk")
        if chunk.batch_dims != 2:
            raise LoaderError(f"{where}: batch size {list(chunk.batch_size)} is not [episodes, rows]")
        episodes, rows = chunk.batch_size
        if rows < 2:
            raise LoaderError(f"{where}: episodes of {rows} row(s) hold no transition")
        if self.rows_per_episode is None:
            self.rows_per_episode = rows
        elif rows != self.rows_per_episode:
            raise LoaderError(f"{where}: episodes have {rows} rows, earlier chunks {self.rows_per_episode}")
        terminated = "terminated" in keys
        if self.has_terminated is None:
            self.has_terminated = terminated
        elif terminated != self.has_terminated:
            raise LoaderError(
                f"{where}: 'terminated' is {'present' if terminated else 'absent'}, unlike earlier chunks"
            )
        task = chunk["task"]
        if task.dtype.is_floating_point or task.dtype == torch.bool or task.shape != (episodes, rows):
            raise LoaderError(f"{where}: 'task' is {task.dtype} {list(task.shape)}, not integer [episodes, rows]")
        self.per_file[name] = int(episodes)
        group = max(1, self.ctx.chunk_rows // (rows - 1))
        for first in range(0, episodes, group):
            block = chunk[first : first + group]
            yield self._convert(block, f"{where}: episodes {first}..{first + block.batch_size[0] - 1}")
            self.ctx.progress(int(block.batch_size[0]) * rows)

    def _convert(self, block: TensorDict, where: str) -> TensorDictBase:
        import torch
        from tensordict import TensorDict

        e, rows = block.batch_size
        t = rows - 1
        n = e * t
        task = block["task"].clone()
        if not bool((task == task[:, :1]).all()):
            bad = int((task != task[:, :1]).any(dim=1).nonzero()[0])
            raise LoaderError(f"{where}: episode {bad} of this group changes task mid-episode")
        ids, counts = task[:, 0].unique(return_counts=True)
        for task_id, count in zip(ids.tolist(), counts.tolist(), strict=True):
            if not 0 <= task_id < len(self.tasks):
                raise LoaderError(f"{where}: task id {task_id} is outside the {len(self.tasks)} tasks of the set")
            self.task_counts[task_id] = self.task_counts.get(task_id, 0) + count
        action, reward = block["action"], block["reward"]
        first_action = action[:, 0]
        if first_action.is_floating_point() and not bool(first_action.isnan().all()):
            self.first_row_not_nan += int((~first_action.isnan()).reshape(e, -1).any(dim=1).sum())
        obs = block["obs"]
        out = TensorDict(
            {
                "observation": obs[:, :-1].reshape(n, *obs.shape[2:]).clone(),
                "action": action[:, 1:].reshape(n, *action.shape[2:]).clone(),
                "task": task[:, 1:].reshape(n).to(torch.int64),
                "episode": torch.arange(self.episode_id, self.episode_id + e, dtype=torch.int64).repeat_interleave(t),
                "next": {
                    "observation": obs[:, 1:].reshape(n, *obs.shape[2:]).clone(),
                    "reward": reward[:, 1:].reshape(n, 1).clone(),
                },
            },
            batch_size=[n],
        )
        last = torch.zeros(e, t, dtype=torch.bool)
        last[:, -1] = True
        ended_terminated = torch.zeros(e, dtype=torch.bool)
        if self.has_terminated:
            raw = block["terminated"][:, 1:]
            flag = raw.bool() if not raw.is_floating_point() else raw.nan_to_num(0) != 0
            out.set(("info", "terminated"), raw.reshape(n).clone())
            ended_terminated = flag[:, -1]
        terminated = last & ended_terminated[:, None]
        out.set(("next", "terminated"), terminated.reshape(n, 1))
        out.set(("next", "truncated"), (last & ~terminated).reshape(n, 1))
        self.ends["terminated"] += int(ended_terminated.sum())
        self.ends["truncated"] += int(e - ended_terminated.sum())
        self.episode_id += e
        return out

    def write_notes(self) -> None:
        note = self.ctx.note
        note("task_names", list(self.tasks))
        note("episodes_per_task", {self.tasks[k]: v for k, v in sorted(self.task_counts.items())})
        note("episodes_per_file", self.per_file)
        note("rows_per_episode", self.rows_per_episode)
        note("episode_ends", self.ends)
        note(
            "first_row",
            "each episode's row 0 (the reset observation) gives the first observation; its action and reward "
            "are not a step (TD-MPC2's Buffer reads action[1:], reward[1:])"
            + (
                f"; {self.first_row_not_nan} episodes have a non-NaN action there"
                if self.first_row_not_nan
                else "; they are NaN in every episode"
            ),
        )
        note(
            "terminated",
            "from the chunks' 'terminated'" if self.has_terminated else "absent: every episode ends truncated",
        )
