"""The local ``gym`` loader: a dataset made by rolling out a gymnasium environment on this machine.

Needs no network, so it is the embedded default dataset of the demo and the tests. Params:

- ``env``: a gymnasium id (``CartPole-v1``, ``Pendulum-v1``, ``MountainCar-v0``, …);
- ``policy``: ``"random"`` (the action space sampled with ``seed``) or ``"heuristic"`` (a simple
  hand-written controller for CartPole, MountainCar and Pendulum);
- ``steps``: transitions to collect; ``seed``: seeds the environment resets and the policy;
- ``max_episode_steps`` (optional): overrides the environment's time limit.

Episodes end where the environment says: ``terminated`` for true ends, ``truncated`` for time
limits. The last episode, cut short by the ``steps`` budget, is marked truncated and the card
says so (``notes.budget_truncated_episodes``). The card records the environment as it was made
(``notes.environment``: its gymnasium ``env_spec`` and its observation and action spaces, in the
JSON form Minari uses), so ``datasets_hub.info(id).recover_environment()`` makes it again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from datasets_hub.errors import InvalidParameter, LoaderError
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    import torch
    from tensordict import TensorDict

_PARAMS = {"env", "policy", "steps", "seed", "max_episode_steps"}


def _heuristic(env_id: str) -> Callable[[np.ndarray], Any]:
    family = env_id.split("-")[0]
    if family == "CartPole":
        return lambda obs: int(obs[2] + 0.5 * obs[3] > 0)  # push towards where the pole falls
    if family == "MountainCar":
        return lambda obs: 2 if obs[1] >= 0 else 0  # pump energy: push along the velocity
    if family == "Pendulum":

        def swing(obs: np.ndarray) -> np.ndarray:
            cos, sin, velocity = obs
            torque = -(8.0 * np.arctan2(sin, cos) + 1.0 * velocity) if cos > 0.5 else 2.0 * np.sign(velocity or 1.0)
            return np.array([np.clip(torque, -2.0, 2.0)], dtype=np.float32)

        return swing
    raise InvalidParameter(
        f"no heuristic policy for {env_id!r}; use policy='random', or one of CartPole, MountainCar, Pendulum"
    )


class GymLoader(Loader):
    """Roll out a gymnasium environment with a seeded policy (see the module docstring)."""

    name = "gym"
    requires = ("gymnasium",)
    install_hint = "pip install 'gymnasium>=1.0'"
    format_version = 2  # 2: the card records the environment (env_spec, spaces)
    downloads = False  # rolled out here: nothing to download

    def check_params(self, spec: DatasetSpec) -> None:
        params = spec.params
        self.reject_unknown_params(spec, _PARAMS)
        if not isinstance(params.get("env"), str):
            raise InvalidParameter(f"{spec.id!r}: 'env' must be a gymnasium id string, got {params.get('env')!r}")
        if ":" in params["env"]:  # gymnasium.make('pkg:Env-v0') imports pkg: a catalogue entry must never run code
            raise InvalidParameter(
                f"{spec.id!r}: env {params['env']!r} imports a module ('module:EnvId'); import the module that "
                "registers the environment yourself, then pass its plain id (e.g. 'MyEnv-v0')"
            )
        steps = params.get("steps", 10000)
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise InvalidParameter(f"{spec.id!r}: 'steps' must be a positive integer, got {steps!r}")
        if not isinstance(params.get("seed", 0), int):
            raise InvalidParameter(f"{spec.id!r}: 'seed' must be an integer, got {params.get('seed')!r}")
        if params.get("policy", "random") not in ("random", "heuristic"):
            raise InvalidParameter(
                f"{spec.id!r}: 'policy' must be 'random' or 'heuristic', got {params.get('policy')!r}"
            )

    def resources(self, spec: DatasetSpec) -> list:
        return []

    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDict]:
        import gymnasium

        params = spec.params
        env_id, steps, seed = params["env"], int(params.get("steps", 10000)), int(params.get("seed", 0))
        kwargs = {"max_episode_steps": params["max_episode_steps"]} if params.get("max_episode_steps") else {}
        try:
            env = gymnasium.make(env_id, **kwargs)
        except gymnasium.error.Error as exc:
            raise LoaderError(f"gymnasium cannot make {env_id!r} for {spec.id!r}: {exc}") from exc
        env.action_space.seed(seed)
        policy = _heuristic(env_id) if params.get("policy") == "heuristic" else (lambda _obs: env.action_space.sample())
        pending: list[dict[str, list]] = []
        pending_rows = 0
        episode_id = 0
        obs, _ = env.reset(seed=seed)
        current = _new_episode()
        ctx.expect(steps)  # one row per step: the progress bar's total
        for t in range(steps):
            action = policy(obs)
            next_obs, reward, terminated, truncated, _ = env.step(action)
            budget_end = t == steps - 1 and not (terminated or truncated)
            current["observation"].append(obs)
            current["next_observation"].append(next_obs)
            current["action"].append(action)
            current["reward"].append(reward)
            current["terminated"].append(bool(terminated))
            current["truncated"].append(bool(truncated) or budget_end)
            obs = next_obs
            if terminated or truncated or budget_end:
                current["episode"] = episode_id
                pending.append(current)
                pending_rows += len(current["action"])
                episode_id += 1
                current = _new_episode()
                if budget_end:
                    ctx.note("budget_truncated_episodes", 1)
                if not budget_end:
                    obs, _ = env.reset()
            if pending_rows >= ctx.chunk_rows:
                yield _to_chunk(pending)
                ctx.progress(pending_rows)
                pending, pending_rows = [], 0
        ctx.note("environment", environment_card(env))
        env.close()
        if pending:
            ctx.progress(pending_rows)
            yield _to_chunk(pending)
        ctx.note("env", env_id)


def environment_card(env: Any) -> dict[str, Any]:
    """``{"env_spec", "observation_space", "action_space"}`` of a made environment, as JSON values
    (the spec as gymnasium's ``EnvSpec.to_json`` writes it; ``env_spec`` is left out when the spec
    holds values JSON cannot, such as a callable)."""
    import json

    card: dict[str, Any] = {
        "observation_space": space_to_json(env.observation_space),
        "action_space": space_to_json(env.action_space),
    }
    if env.spec is not None:
        try:
            card["env_spec"] = json.loads(env.spec.to_json())
        except (TypeError, ValueError):
            pass
    return card


def space_to_json(space: Any) -> dict[str, Any]:
    """A gymnasium space as JSON, in the layout Minari records (``type``, ``dtype``, ``shape``, bounds or ``n``)."""
    from gymnasium import spaces

    def values(array: Any) -> Any:
        return np.asarray(array).tolist()

    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "dtype": str(space.dtype),
            "shape": list(space.shape),
            "low": values(space.low),
            "high": values(space.high),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "dtype": str(space.dtype), "start": int(space.start), "n": int(space.n)}
    if isinstance(space, spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "dtype": str(space.dtype),
            "nvec": values(space.nvec),
            "start": values(space.start),
        }
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "dtype": str(space.dtype), "n": values(space.n)}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "subspaces": {k: space_to_json(v) for k, v in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "subspaces": [space_to_json(v) for v in space.spaces]}
    return {"type": type(space).__name__, "repr": repr(space)}


def _new_episode() -> dict[str, Any]:
    return {"observation": [], "next_observation": [], "action": [], "reward": [], "terminated": [], "truncated": []}


def _to_chunk(episodes: list[dict[str, Any]]) -> TensorDict:
    import torch
    from tensordict import TensorDict

    def stack(name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        values = np.stack([np.asarray(v) for ep in episodes for v in ep[name]])
        tensor = torch.from_numpy(values)
        return tensor.to(dtype) if dtype is not None else tensor

    n = sum(len(ep["action"]) for ep in episodes)
    episode = torch.cat([torch.full((len(ep["action"]),), ep["episode"], dtype=torch.int64) for ep in episodes])
    return TensorDict(
        {
            "observation": stack("observation"),
            "action": stack("action"),
            "episode": episode,
            "next": {
                "observation": stack("next_observation"),
                "reward": stack("reward", torch.float32).reshape(n, 1),
                "terminated": stack("terminated", torch.bool).reshape(n, 1),
                "truncated": stack("truncated", torch.bool).reshape(n, 1),
            },
        },
        batch_size=[n],
    )
