"""``MultiStep``: n-step returns over a collected ``[*B, T]`` batch, with TorchRL's keys and semantics.

The same computation as ``torchrl.data.MultiStep`` (a collector post-processor), without torchrl. For a
stored dataset, :class:`~datasets_hub.buffers.samplers.n_step.NStepReturnSampler` computes n-step returns at
sample time instead, across batch boundaries. :class:`MultiStepTransform` is the replay-buffer form (on writes).

Contract of ``MultiStep(gamma, n_steps)(td)`` for ``td`` of batch shape ``[*B, T]`` (time last), whose
``("next", "done")`` is ``[*B, T]`` or ``[*B, T, 1]``. Trajectories are cut after every done step and at the
end of the batch; for step ``t`` let ``k`` be the number of steps from ``t`` to the end of its trajectory,
at most ``n_steps``:

- ``("next", "reward")`` becomes ``sum(gamma**i * reward[t + i] for i < k)``; the original is kept as
  ``("next", "original_reward")``.
- every other ``"next"`` entry except the done flags (``done``, ``terminated``, ``truncated``) is read at
  ``t + k - 1``;
- new entries: ``"steps_to_next_obs"`` = ``k``, ``"gamma"`` = ``gamma ** k`` (the discount of the
  bootstrap value), ``"nonterminal"`` = ``k > 1``, forced False where ``("collector", "mask")`` is False.

The input is not changed: the result is a shallow copy with the new entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from tensordict import TensorDictBase

from datasets_hub.buffers.transforms import Transform
from datasets_hub.errors import InvalidArgument, WrongDataType

_DONE_KEYS = ("done", "terminated", "truncated")


class MultiStep:
    """n-step returns of a ``[*B, T]`` batch (see the module docstring for the contract)."""

    def __init__(self, gamma: float, n_steps: int) -> None:
        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps <= 0:
            raise InvalidArgument(f"MultiStep needs n_steps >= 1, got {n_steps!r}")
        if not 0 < gamma <= 1:
            raise InvalidArgument(f"MultiStep needs a discount 0 < gamma <= 1, got gamma={gamma}")
        self.gamma = float(gamma)
        self.n_steps = n_steps
        self.done_key: Any = "done"
        self.done_keys: tuple[Any, ...] = _DONE_KEYS
        self.reward_keys: tuple[Any, ...] = ("reward",)
        self.mask_key: Any = ("collector", "mask")

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self.forward(tensordict)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not isinstance(tensordict, TensorDictBase):
            raise WrongDataType(
                f"MultiStep works on TensorDicts of batch shape [*B, T], got {type(tensordict).__name__}"
            )
        if tensordict.batch_dims == 0:
            raise InvalidArgument("MultiStep needs a time dim: a TensorDict of batch shape [*B, T]")
        td = tensordict.clone(False)
        shape = td.batch_size
        done = td.get(("next", self.done_key))
        if done.shape[:-1] == shape and done.shape[-1] == 1:
            done = done.squeeze(-1)
        if done.shape != shape:
            raise InvalidArgument(
                f"MultiStep: ('next', {self.done_key!r}) has shape {list(done.shape)}, expected the batch shape "
                f"{list(shape)} (or it followed by 1)"
            )
        steps = _steps_ahead(done.reshape(-1, shape[-1]).bool(), self.n_steps).reshape(shape)  # k
        discounts = self.gamma ** torch.arange(self.n_steps, dtype=torch.float64)
        for key in self.reward_keys:
            reward = td.get(("next", key))
            td.set(("next", "original_reward"), reward)
            td.set(("next", key), _discounted_sum(reward, steps, discounts, td.batch_dims))
        target = (torch.arange(shape[-1]) + steps - 1).reshape(shape)
        skip = {*self.reward_keys, *self.done_keys, "original_reward"}
        nxt = td.get("next")
        for key in list(nxt.keys(include_nested=True, leaves_only=True)):
            top = key[0] if isinstance(key, tuple) else key
            if top in skip:
                continue
            value = nxt.get(key)
            index = target.reshape(*shape, *([1] * (value.ndim - td.batch_dims))).expand_as(value)
            nxt.set(key, value.gather(td.batch_dims - 1, index))
        td.set("steps_to_next_obs", steps)
        td.set("gamma", self.gamma**steps)
        nonterminal = steps > 1
        mask = td.get(self.mask_key, None) if self.mask_key is not None else None
        if mask is not None:
            nonterminal = nonterminal & mask.reshape(shape).bool()
        td.set("nonterminal", nonterminal)
        return td

    def __repr__(self) -> str:
        return f"MultiStep(gamma={self.gamma}, n_steps={self.n_steps})"


def _steps_ahead(done: torch.Tensor, n: int) -> torch.Tensor:
    """For ``done`` of shape ``[N, T]``: steps from each ``t`` to its trajectory's last step (inclusive), capped at n."""
    _, T = done.shape
    t = torch.arange(T)
    ends = done.clone()
    ends[:, -1] = True  # the batch end closes every trajectory
    end_at = torch.where(ends, t, T)
    next_end = end_at.flip(-1).cummin(-1).values.flip(-1)
    return (next_end - t + 1).clamp_max(n)


def _discounted_sum(
    reward: torch.Tensor, steps: torch.Tensor, discounts: torch.Tensor, batch_dims: int
) -> torch.Tensor:
    """``sum(discounts[i] * reward[..., t + i, ...] for i < steps[t])`` along the time dim (``batch_dims - 1``)."""
    time_dim = batch_dims - 1
    n = discounts.numel()
    pad = [0, 0] * (reward.ndim - batch_dims) + [0, n - 1]
    padded = torch.nn.functional.pad(reward.to(torch.float64), pad)
    windows = padded.unfold(time_dim, n, 1)  # [..., T, *rest, n]
    take = torch.arange(n) < steps.unsqueeze(-1)  # [*B, T, n]
    take = take.reshape(*steps.shape, *([1] * (reward.ndim - batch_dims)), n)
    return (windows * (discounts * take)).sum(-1).to(reward.dtype)


class MultiStepTransform(Transform):
    """n-step returns computed as data is written to a buffer, remembering the end of the previous write.

    TorchRL's write-side form of :class:`MultiStep`, for ``rb = ReplayBuffer(..., transform=MultiStepTransform(n,
    gamma))``. Each ``rb.extend(td)`` (``td`` of batch shape ``[*B, T]``, time last) is joined, along time, to the
    last ``n_steps`` steps of the previous write, and :class:`MultiStep`'s contract is applied to the whole; all
    but its last ``n_steps`` steps are written (they wait for the steps that complete their returns). So the
    first write stores ``T - n_steps`` steps and every later one ``T``; a write leaving at most ``n_steps`` steps
    in hand stores nothing (``extend`` returns no index). Samples pass unchanged.

    Keywords as TorchRL's: ``reward_keys`` (default ``["reward"]``), ``done_key`` (``"done"``), ``done_keys``
    (``["done", "terminated", "truncated"]``, left as they are), ``mask_key`` (``"mask"``: steps where it is
    False get ``nonterminal`` False). ``n_steps`` may be changed between writes.
    """

    def __init__(
        self,
        n_steps: int,
        gamma: float,
        *,
        reward_keys: Sequence[Any] | None = None,
        done_key: Any = None,
        done_keys: Sequence[Any] | None = None,
        mask_key: Any = None,
    ) -> None:
        MultiStep(gamma, n_steps)  # the same argument checks, before anything is written
        self._n_steps = n_steps
        self.gamma = float(gamma)
        self.reward_keys = ["reward"] if reward_keys is None else list(reward_keys)
        self.done_key = "done" if done_key is None else done_key
        self.done_keys = list(_DONE_KEYS) if done_keys is None else list(done_keys)
        self.mask_key = "mask" if mask_key is None else mask_key
        self._held: TensorDictBase | None = None  # the last n_steps steps written, awaiting their successors

    @property
    def n_steps(self) -> int:
        return self._n_steps

    @n_steps.setter
    def n_steps(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidArgument(f"MultiStepTransform needs n_steps >= 1, got {value!r}")
        self._n_steps = value

    def inverse(self, data: Any) -> TensorDictBase | None:
        if not isinstance(data, TensorDictBase) or data.batch_dims == 0:
            raise WrongDataType(
                "MultiStepTransform is written TensorDicts of batch shape [*B, T] (time last), got "
                f"{type(data).__name__}{'' if not isinstance(data, TensorDictBase) else ' with no batch dim'}"
            )
        joined: TensorDictBase = data if self._held is None else cast(TensorDictBase, torch.cat([self._held, data], -1))
        n = self._n_steps
        self._held = joined[..., -n:].copy()
        if joined.shape[-1] <= n:
            return None
        step = MultiStep(self.gamma, n)
        step.done_key, step.done_keys = self.done_key, tuple(self.done_keys)
        step.reward_keys, step.mask_key = tuple(self.reward_keys), self.mask_key
        return step(joined)[..., :-n]

    def __repr__(self) -> str:
        return f"MultiStepTransform(n_steps={self._n_steps}, gamma={self.gamma})"
