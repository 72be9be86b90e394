"""The loader's side of the TED contract, checked on every chunk a build receives (docs/design/ted.md and docs/design/plugins.md).

:class:`~datasets_hub.build.writer.LeanTEDWriter` checks what the on-disk layout needs (whole
episodes, unique ids, done flags only at episode ends, a stable schema). This module checks the
shapes and dtypes a *sample* relies on, which a loader can get wrong without the layout noticing:
a ``[N]`` reward broadcasts silently against a ``[B, 1]`` value in a TD target, float done flags
turn ``~done`` into garbage, and a missing ``("next", "observation")`` leaves nothing to bootstrap
from. Every error names the loader, the dataset and the key.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from datasets_hub.errors import TEDError

FLAGS = ("done", "terminated", "truncated")
_NOT_OBSERVATIONS = {("reward",), ("done",), ("terminated",), ("truncated",)}


def _name(key: tuple[str, ...]) -> str:
    return "/".join(key)


def _keys(chunk: TensorDictBase) -> set[tuple[str, ...]]:
    return {(k,) if isinstance(k, str) else tuple(k) for k in chunk.keys(include_nested=True, leaves_only=True)}


def observation_keys(keys: set[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Keys ``K`` present at time t and as ``("next", *K)`` at t+1 (observations and per-step state)."""
    return sorted(k[1:] for k in keys if k[0] == "next" and k[1:] in keys and k[1:] not in _NOT_OBSERVATIONS)


def check_chunk(chunk: Any, loader: str, dataset_id: str) -> None:
    """Raise :class:`TEDError` naming ``loader``, ``dataset_id`` and the key if ``chunk`` breaks the
    sample-level TED contract: a 1-D batch; ``episode`` an integer ``[N]``; ``("next", "reward")``
    a floating ``[N, 1]``; ``next/terminated``, ``next/truncated`` (and ``next/done`` when sent)
    bool ``[N, 1]``; at least one observation key ``K`` with ``("next", *K)`` (``observation``,
    or nested keys such as ``("observation", "image")``), and every root ``observation`` leaf with
    its ``next`` counterpart."""
    where = f"the {loader!r} loader's chunk of {dataset_id!r}"
    if not isinstance(chunk, TensorDictBase):
        raise TEDError(f"{where} is a {type(chunk).__name__}; a loader must yield TensorDicts")
    if chunk.batch_dims != 1 or chunk.batch_size[0] == 0:
        raise TEDError(f"{where} has batch size {list(chunk.batch_size)}; a TED chunk has batch size [N], N >= 1")
    n = chunk.batch_size[0]
    keys = _keys(chunk)

    def need(key: tuple[str, ...], why: str) -> torch.Tensor:
        if key not in keys:
            raise TEDError(f"{where} has no {_name(key)!r} ({why}); it sent {sorted(map(_name, keys))}")
        return chunk.get(key)

    episode = need(("episode",), "the int64 episode id of every row")
    if episode.dtype.is_floating_point or episode.dtype == torch.bool or tuple(episode.shape) not in ((n,), (n, 1)):
        raise TEDError(f"{where}: 'episode' is {episode.dtype} {list(episode.shape)}; it must be an integer [{n}]")
    reward = need(("next", "reward"), "the reward of each transition, at time t+1")
    if tuple(reward.shape) != (n, 1):
        raise TEDError(
            f"{where}: 'next/reward' has shape {list(reward.shape)}; TED needs [{n}, 1] (a [{n}] reward broadcasts "
            f"silently against [B, 1] values in a TD target). Fix in the loader: reward.reshape({n}, 1)"
        )
    if not reward.dtype.is_floating_point:
        raise TEDError(f"{where}: 'next/reward' is {reward.dtype}; it must be a floating dtype")
    for flag in FLAGS:  # root flags are derived by the core (a loader's are ignored)
        key = ("next", flag)
        if key not in keys:
            if flag != "done":
                need(key, f"bool [{n}, 1]; False unless upstream says the episode ended so")
            continue
        value = chunk.get(key)
        if value.dtype != torch.bool or tuple(value.shape) != (n, 1):
            raise TEDError(
                f"{where}: {_name(key)!r} is {value.dtype} {list(value.shape)}; done flags are bool [{n}, 1]. "
                f"Fix in the loader: flags.to(torch.bool).reshape({n}, 1)"
            )
    observed = observation_keys(keys)
    missing = sorted(k for k in keys if k[0] == "observation" and k not in observed)
    if missing:
        raise TEDError(
            f"{where} has {_name(missing[0])!r} but no {_name(('next', *missing[0]))!r}: TED stores every "
            "observation at t and at t+1 (the next observation of an episode's last step is its final state)"
        )
    if not observed:
        raise TEDError(
            f"{where} has no observation: TED needs 'observation' and 'next/observation' (or nested keys, e.g. "
            f"'observation/image' and 'next/observation/image'); it sent {sorted(map(_name, keys))}"
        )
