"""OGBench single-task rewards (``task=``), computed from the stored state as upstream does.

OGBench's single-task variants (``<dataset>-singletask[-taskN]-v0``, e.g.
``cube-double-play-singletask-task2-v0``) reuse the goal-conditioned datasets and relabel them in
``ogbench.relabel_utils.relabel_dataset`` with the goal of one fixed evaluation task. That function
reads the goal from a live environment (``env.unwrapped.cur_goal_xy``, ``_data.mocap_pos``,
``_target_button_states`` ...), but in single-task mode every one of those values is a constant of
the task table in the environment's ``set_tasks`` (no noise: ``add_noise_to_goal=False``,
``permute_blocks=False``). The tables below are those constants, so the rule runs without the
simulator; ``tests/upstream/test_upstream_ogbench.py`` checks every value against
``make_env_and_datasets`` with the real environments.

The rule, per stored state ``s`` (upstream computes it on the state at time ``t`` of each
transition, ``success_timing='pre'``):

- locomotion mazes: success = ``||qpos[0:2] - goal_xy|| <= tol`` (tol 1.0 for the point agent, 0.5
  for ant and humanoid), ``goal_xy = (4 j - 4, 4 i - 4)`` of the task's goal cell; reward =
  success - 1.
- antsoccer: the same on the ball's position ``qpos[15:17]`` (tol 0.5).
- cube: per cube ``c``, ``||qpos[14 + 7c : 17 + 7c] - goal_c|| <= 0.04``; scene: those, plus each
  ``button_states == goal``, ``|qpos[23] - drawer| <= 0.04``, ``|qpos[24] - window| <= 0.04``;
  puzzle: each ``button_states == goal``. Reward = (number of sub-goals met) - (number of
  sub-goals), success = all met.

Upstream's ``masks`` are ``1 - success``. Powderworld has no single-task variant upstream, so
``task=`` is refused there.
"""

from __future__ import annotations

import re

import numpy as np

from datasets_hub.errors import InvalidParameter

NUM_TASKS = 5
SINGLETASK = re.compile(r"^(?P<dataset>.+)-singletask(?:-task(?P<task>[1-9]\d*))?-v0$")

# Goal cells (i, j) of the maze tasks 1..5 (MazeEnv.set_tasks); goal_xy = (4 j - 4, 4 i - 4).
MAZE_GOALS = {
    "medium": ((6, 6), (1, 6), (4, 2), (6, 1), (1, 1)),
    "large": ((7, 10), (7, 1), (1, 10), (5, 4), (5, 4)),
    "giant": ((10, 14), (10, 1), (1, 1), (5, 12), (3, 8)),
    "teleport": ((7, 1), (7, 10), (7, 10), (7, 10), (7, 1)),
}
# Goal cells of the ball (BallEnv.set_tasks).
SOCCER_GOALS = {
    "arena": ((5, 2), (2, 2), (6, 6), (6, 1), (1, 6)),
    "medium": ((6, 6), (1, 1), (6, 5), (5, 3), (1, 6)),
}
# Target cube positions per task (CubeEnv.set_tasks goal_xyzs = the target mocap positions).
CUBE_GOALS = {
    "single": (
        ((0.425, -0.1, 0.02),),
        ((0.5, 0.0, 0.02),),
        ((0.35, 0.0, 0.02),),
        ((0.5, 0.2, 0.02),),
        ((0.5, -0.2, 0.02),),
    ),
    "double": (
        ((0.425, 0.0, 0.02), (0.425, 0.1, 0.02)),
        ((0.35, 0.1, 0.02), (0.5, 0.1, 0.02)),
        ((0.425, -0.2, 0.02), (0.425, 0.2, 0.02)),
        ((0.425, 0.1, 0.02), (0.425, -0.1, 0.02)),
        ((0.425, 0.0, 0.02), (0.425, 0.0, 0.06)),
    ),
    "triple": (
        ((0.35, -0.1, 0.02), (0.35, 0.1, 0.02), (0.5, 0.1, 0.02)),
        ((0.5, 0.0, 0.02), (0.5, 0.2, 0.02), (0.5, -0.2, 0.02)),
        ((0.35, -0.1, 0.02), (0.5, -0.2, 0.02), (0.5, 0.0, 0.02)),
        ((0.5, -0.1, 0.02), (0.5, 0.1, 0.02), (0.35, 0.0, 0.02)),
        ((0.425, 0.2, 0.02), (0.425, 0.2, 0.06), (0.425, 0.2, 0.1)),
    ),
    "quadruple": (
        ((0.35, -0.25, 0.02), (0.35, 0.1, 0.02), (0.5, -0.1, 0.02), (0.5, 0.25, 0.02)),
        ((0.375, 0.1, 0.02), (0.475, 0.1, 0.02), (0.375, -0.1, 0.02), (0.475, -0.1, 0.02)),
        ((0.525, -0.2, 0.02), (0.325, 0.2, 0.02), (0.325, -0.2, 0.02), (0.525, 0.2, 0.02)),
        ((0.525, 0.1, 0.02), (0.325, 0.1, 0.02), (0.325, -0.1, 0.02), (0.525, -0.1, 0.02)),
        ((0.425, 0.2, 0.02), (0.425, 0.2, 0.06), (0.425, 0.2, 0.1), (0.425, 0.2, 0.14)),
    ),
    "octuple": (
        (
            (0.525, 0.05, 0.02), (0.425, -0.15, 0.02), (0.425, -0.05, 0.02), (0.325, 0.15, 0.02),
            (0.525, -0.15, 0.02), (0.425, 0.05, 0.02), (0.425, 0.15, 0.02), (0.325, -0.05, 0.02),
        ),
        (
            (0.525, 0.2, 0.02), (0.525, 0.0, 0.02), (0.525, -0.2, 0.02), (0.425, -0.2, 0.02),
            (0.325, -0.2, 0.02), (0.325, 0.0, 0.02), (0.325, 0.2, 0.02), (0.425, 0.2, 0.02),
        ),
        (
            (0.32, 0.15, 0.02), (0.46, 0.15, 0.02), (0.39, 0.05, 0.02), (0.53, 0.05, 0.02),
            (0.32, -0.05, 0.02), (0.46, -0.05, 0.02), (0.39, -0.15, 0.02), (0.53, -0.15, 0.02),
        ),
        (
            (0.525, 0.05, 0.02), (0.525, -0.05, 0.02), (0.425, -0.15, 0.06), (0.425, -0.15, 0.02),
            (0.425, 0.15, 0.06), (0.425, 0.15, 0.02), (0.325, -0.05, 0.02), (0.325, 0.05, 0.02),
        ),
        (
            (0.325, 0.0, 0.02), (0.325, 0.0, 0.06), (0.425, 0.2, 0.02), (0.425, 0.2, 0.06),
            (0.525, 0.0, 0.02), (0.525, 0.0, 0.06), (0.425, -0.2, 0.02), (0.425, -0.2, 0.06),
        ),
    ),
}  # fmt: skip
# SceneEnv.set_tasks goals: (cube xyz, button states, drawer position, window position).
SCENE_GOALS = (
    ((0.35, 0.05, 0.02), (1, 1), -0.16, 0.2),
    ((0.35, -0.05, 0.02), (0, 0), 0.0, 0.0),
    ((0.4, 0.15, 0.02), (1, 1), -0.16, 0.0),
    ((0.33, -0.356, 0.065986), (1, 0), 0.0, 0.0),
    ((0.33, -0.356, 0.065986), (0, 0), 0.0, 0.2),
)
# PuzzleEnv.set_tasks goal button states, row-major.
PUZZLE_GOALS = {
    "3x3": ("110101011", "011111111", "101010101", "111111111", "101101101"),
    "4x4": ("1111111111111111", "1111100110011111", "0101101001011010", "0000000000000000", "0000000000000000"),
    "4x5": (
        "00000000000000000000",
        "11111111111111111111",
        "11111100011000111111",
        "00000001000010000000",
        "10001011100111010001",
    ),
    "4x6": (
        "000000000000000000000000",
        "000000000000000000000000",
        "111110110101101011011111",
        "100001000000000000100001",
        "100001011110011110100001",
    ),
}
# The task a `-singletask-v0` id (no number) means, per environment (set_tasks: reward_task_id 0).
_DEFAULT_TASK = {"maze": 1, "soccer": 4, "cube": 2, "scene": 2, "puzzle-3x3": 4, "puzzle-4x4": 4}
_QPOS_OBJ, _QPOS_CUBE = 14, 7  # relabel_utils: first object coordinate in qpos, qpos entries per cube
_CUBE_TOL = 0.04


def _env(dataset: str) -> tuple[str, str]:
    """``(family, variant)`` of an OGBench dataset name, e.g. ``("antmaze", "large")``; the family
    of a visual set is that of its state set."""
    parts = dataset.removeprefix("visual-").split("-")
    return parts[0], parts[1] if len(parts) > 2 else ""


def default_task(dataset: str) -> int:
    """The task upstream's ``<dataset>-singletask-v0`` (no ``-taskN``) evaluates."""
    family, variant = _env(dataset)
    if family.endswith("maze"):
        return _DEFAULT_TASK["maze"]
    if family == "antsoccer":
        return _DEFAULT_TASK["soccer"]
    if family == "puzzle":
        return _DEFAULT_TASK.get(f"puzzle-{variant}", 2)
    if family in ("cube", "scene"):
        return _DEFAULT_TASK[family]
    raise InvalidParameter(why_unsupported(dataset))


def why_unsupported(dataset: str) -> str:
    return (
        f"{dataset}: OGBench has no single-task variant of this environment (upstream registers "
        "`-singletask` envs for the point/ant/humanoid mazes, antsoccer, cube, scene and puzzle only), "
        "so there is no task reward to compute; drop task= and use GoalSampler for goal-conditioned rewards"
    )


def check_task(dataset: str, task: object) -> int:
    """``task`` as a task number 1..5 of ``dataset``'s environment, or a clear error."""
    family, variant = _env(dataset)
    known = (
        (family.endswith("maze") and variant in MAZE_GOALS)
        or (family == "antsoccer" and variant in SOCCER_GOALS)
        or (family == "cube" and variant in CUBE_GOALS)
        or family == "scene"
        or (family == "puzzle" and variant in PUZZLE_GOALS)
    )
    if not known:
        raise InvalidParameter(why_unsupported(dataset))
    if isinstance(task, bool) or not isinstance(task, int) or not 1 <= task <= NUM_TASKS:
        raise InvalidParameter(
            f"{dataset}: task must be an evaluation task number 1..{NUM_TASKS} (upstream's -singletask-taskN; "
            f"its default -singletask-v0 is task {default_task(dataset)}), got {task!r}"
        )
    return task


def relabel(
    dataset: str, task: int, qpos: np.ndarray | None, button_states: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(reward float32 [n], success bool [n])`` of ``n`` stored states for ``task`` (module docstring).

    Raises ``ValueError`` naming the array when the file lacks the state the rule reads."""
    family, variant = _env(dataset)

    def need(name: str, value: np.ndarray | None, columns: int, exact: bool = False) -> np.ndarray:
        if value is None or value.ndim != 2 or value.shape[1] < columns or (exact and value.shape[1] != columns):
            got = "no such array" if value is None else f"shape {value.shape}"
            many = "" if exact else "at least "
            raise ValueError(f"task {task} rewards of {dataset} read {name!r} with {many}{columns} columns ({got})")
        return value

    if family.endswith("maze") or family == "antsoccer":
        goals = MAZE_GOALS if family != "antsoccer" else SOCCER_GOALS
        i, j = goals[variant][task - 1]
        goal_xy = np.array((j * 4.0 - 4, i * 4.0 - 4))  # float64, as upstream's tuple of floats
        first = 15 if family == "antsoccer" else 0  # the ball's x, y in antsoccer; the agent's otherwise
        xy = need("qpos", qpos, first + 2)[:, first : first + 2]
        tol = 1.0 if family == "pointmaze" else 0.5
        hit = (np.linalg.norm(xy - goal_xy, axis=-1) <= tol).astype(np.float32)
        return hit - 1.0, hit > 0
    parts: list[np.ndarray] = []
    if family in ("cube", "scene"):
        targets = np.array(CUBE_GOALS[variant][task - 1] if family == "cube" else (SCENE_GOALS[task - 1][0],))
        cubes = len(targets)
        extra = 2 if family == "scene" else 0  # drawer and window after the buttons' joints
        buttons = 2 if family == "scene" else 0
        q = need("qpos", qpos, _QPOS_OBJ + cubes * _QPOS_CUBE + buttons + extra)
        xyz = np.stack([q[:, _QPOS_OBJ + c * _QPOS_CUBE : _QPOS_OBJ + c * _QPOS_CUBE + 3] for c in range(cubes)], 1)
        parts.append(np.linalg.norm(targets - xyz, axis=-1) <= _CUBE_TOL)
        if family == "scene":
            _, button_goal, drawer, window = SCENE_GOALS[task - 1]
            b = need("button_states", button_states, len(button_goal), exact=True)
            parts.append(b == np.array(button_goal))
            drawer_idx = _QPOS_OBJ + cubes * _QPOS_CUBE + buttons
            parts.append((np.abs(q[:, drawer_idx] - drawer) <= _CUBE_TOL)[:, None])
            parts.append((np.abs(q[:, drawer_idx + 1] - window) <= _CUBE_TOL)[:, None])
    else:  # puzzle
        goal = np.array([int(c) for c in PUZZLE_GOALS[variant][task - 1]])
        parts.append(need("button_states", button_states, goal.size, exact=True) == goal)
    successes = np.concatenate(parts, axis=-1)
    reward = (successes.sum(axis=-1) - successes.shape[-1]).astype(np.float32)
    return reward, np.asarray(successes.all(axis=-1))
