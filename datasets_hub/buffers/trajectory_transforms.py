"""``CatFrames`` and ``DensifyReward``: transforms over a time dim, under TorchRL's names, keys and semantics.

Both read a batch of shape ``[*B, T]`` whose ``("next", done_key)`` marks the last step of each trajectory, so
inside a replay buffer they run on sampled slices (a ``SliceSampler`` sample reshaped to ``[num_slices, T]``, or
left flat: the sampler marks every slice's end as done). Trajectories start at index 0 of the time dim and after
every done step; nothing is ever read across that boundary. Neither needs torchrl.

Contract of ``CatFrames(N, dim)`` on a TensorDict (time: the batch dim named ``"time"`` if one is, else the last):

- each ``in_keys[i]`` entry ``x`` (``[*B, T, *frame]``) is written to ``out_keys[i]`` as the concatenation along
  ``dim`` (negative, counted from the last dim of the entry, within the frame dims) of the ``N`` frames
  ``x[t-N+1], ..., x[t]`` (oldest first) of step ``t``'s own trajectory;
- slots before the trajectory's first step are padding: ``padding="same"`` repeats that first frame,
  ``padding="constant"`` writes ``padding_value``;
- an entry ``("next", key)`` whose root ``key`` is also an in_key gets the window the step after ``t`` sees, the
  one an environment wrapped in ``CatFrames`` records: frames ``key[t-N+2], ..., key[t], ("next", key)[t]``,
  where the trajectory's first frame is the root ``key`` (its reset observation), read from the input, so
  ``out_keys`` may equal ``in_keys``. Without its root key, ``("next", key)`` is windowed on its own values;
- ``future=True`` gathers ``x[t], ..., x[t+N-1]`` instead (``"same"`` repeats the trajectory's last frame); there
  ``("next", done_key)`` may be absent (each row is then one trajectory);
- ``mask_key``: also write a ``[*B, T, N]`` bool entry, True at the padded slots;
- ``as_inverse=True``: samples pass unchanged and the windows are built on writes instead (``rb.extend``).

Contract of ``DensifyReward(reward_key=, done_key=, reward_key_out=, discount=)``: ``("next", reward_key)`` and
``("next", done_key)`` share one shape ``[*B, T, F]`` (time at dim -2, as TorchRL's ``reward2go`` reads it);
``("next", reward_key_out)`` becomes each step's discounted reward-to-go within its trajectory (the end of the
batch closes the last one), so a sparse reward paid at the done step is spread over every earlier step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from datasets_hub.buffers.image_transforms import IMAGE_KEYS
from datasets_hub.buffers.returns import reward_to_go
from datasets_hub.buffers.transforms import Transform, _missing, _norm, _require_td
from datasets_hub.errors import InvalidArgument, WrongDataType

_PADDINGS = ("same", "constant")


class CatFrames(Transform):
    """Stack each step's last ``N`` frames along ``dim`` (see the module docstring for the contract)."""

    def __init__(
        self,
        N: int,
        dim: int,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
        padding: str = "same",
        padding_value: float = 0,
        as_inverse: bool = False,
        reset_key: Any = None,
        done_key: Any = None,
        future: bool = False,
        mask_key: Any = None,
    ) -> None:
        if isinstance(N, bool) or not isinstance(N, int) or N < 1:
            raise InvalidArgument(f"CatFrames needs N >= 1 frames, got N={N!r}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim >= 0:
            raise InvalidArgument(
                f"CatFrames(dim={dim!r}): dim must be a negative int, counted from the last dim of each entry, so "
                "that it means the same dim whatever the batch shape (e.g. dim=-3 for [C, H, W] frames)"
            )
        if padding == "zeros":
            raise InvalidArgument(
                "CatFrames(padding='zeros') is gone in TorchRL: use padding='constant', padding_value=0"
            )
        if padding not in _PADDINGS:
            raise InvalidArgument(f"CatFrames(padding={padding!r}): padding must be one of {list(_PADDINGS)}")
        super().__init__(in_keys=IMAGE_KEYS if in_keys is None else in_keys, out_keys=out_keys)
        self.N = N
        self.dim = dim
        self.padding = padding
        self.padding_value = padding_value
        self.as_inverse = bool(as_inverse)
        # reset_key only matters to an environment's partial resets; kept so TorchRL code constructs unchanged
        self.reset_key = reset_key
        self.done_key = _norm("done" if done_key is None else done_key)
        self.future = bool(future)
        self.mask_key = None if mask_key is None else _norm(mask_key)
        if self.future and any(self._root_of(k) is not None for k in self.in_keys):
            raise InvalidArgument(
                "CatFrames(future=True) windows each key on its own values: list ('next', key) without its "
                "root key, or use a second CatFrames for it"
            )

    def make_rb_transform_and_sampler(self, batch_size: int, **sampler_kwargs: Any) -> tuple[Transform, Any]:
        """``(transform, sampler)`` for a buffer that stores single frames and samples stacked ones.

        The sampler is a ``SliceSampler(slice_len=N, **sampler_kwargs)`` drawing ``N`` steps per item asked for;
        the transform stacks each slice (this transform's keys, and their ``("next", key)`` counterparts) and keeps
        its last step, so ``rb.sample(b)`` returns ``b`` items whose windows hold ``N`` frames of one trajectory.
        On writes it drops the ``out_keys``, so stacked frames are never stored (they must differ from ``in_keys``). ``batch_size`` is accepted as in
        TorchRL, where it is not used either: the buffer's batch size is the number of stacked items.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidArgument(f"make_rb_transform_and_sampler needs a batch_size >= 1, got {batch_size!r}")
        shared = [k for k in self.out_keys if k in self.in_keys]
        if shared:
            raise InvalidArgument(
                f"make_rb_transform_and_sampler: out_keys {shared} are also in_keys; the writes drop the out_keys "
                "(stacks are not stored), so the frames would be dropped too: give distinct out_keys"
            )
        from datasets_hub.buffers.samplers.slice import SliceSampler

        def with_next(keys: Sequence[Any]) -> list[Any]:
            return [*keys, *(_norm(("next", *_tuple(k))) for k in keys)]

        stacker = CatFrames(
            N=self.N,
            dim=self.dim,
            in_keys=with_next(self.in_keys),
            out_keys=with_next(self.out_keys),
            padding=self.padding,
            padding_value=self.padding_value,
            done_key=self.done_key,
            future=self.future,
            mask_key=self.mask_key,
        )
        frames = self.N

        class _SliceWindows(SliceSampler):
            """One slice of ``N`` steps per item asked for."""

            def sample(self, storage: Any, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
                return super().sample(storage, batch_size * frames)

        return _StackedSlices(stacker, with_next(self.out_keys)), _SliceWindows(slice_len=frames, **sampler_kwargs)

    def forward(self, data: Any) -> Any:
        return data if self.as_inverse else self.unfolding(data)

    def inverse(self, data: Any) -> Any:
        return self.unfolding(data) if self.as_inverse else data

    def _root_of(self, key: Any) -> Any:
        """The root in_key whose reset frame opens ``key``'s windows, when ``key`` is ``("next", root)``."""
        if isinstance(key, tuple) and key[0] == "next":
            root = _norm(key[1:])
            if root in self.in_keys:
                return root
        return None

    def unfolding(self, data: Any) -> TensorDictBase:
        """The windows of every in_key of ``data`` (a ``[*B, T]`` TensorDict), as a shallow copy."""
        td = _require_td(data, "CatFrames")
        if td.batch_dims == 0:
            raise InvalidArgument(
                "CatFrames needs a time dim: a TensorDict of batch shape [*B, T] (e.g. a SliceSampler sample, "
                "reshaped to [num_slices, slice_len] or left flat)"
            )
        _missing(td, self.in_keys, "CatFrames")
        names = list(td.names)  # [None, ...] when no dim is named
        time_dim = names.index("time") if "time" in names else td.batch_dims - 1
        shape = td.batch_size
        done = td.get(("next", self.done_key), None)
        if done is None:
            if not self.future:
                raise KeyError(
                    f"CatFrames: the sample has no {('next', self.done_key)!r} entry, which delimits its "
                    f"trajectories; pass done_key= if it is stored under another name"
                )
            done = torch.zeros(shape, dtype=torch.bool)
        done = _batch_flags(done, shape, time_dim, self.done_key)
        first, last = _trajectory_bounds(done)  # [M, T] each
        steps = torch.arange(done.shape[-1])
        offsets = torch.arange(self.N) if self.future else torch.arange(self.N) - (self.N - 1)
        frame = steps[:, None] + offsets  # [T, N]: the step each slot shows
        frame = frame.expand(*first.shape, self.N)
        if self.future:
            padded = frame > last[..., None]
            clamp_to = last[..., None]
        else:
            padded = frame < first[..., None]
            clamp_to = first[..., None]
        inputs = {key: td.get(key) for key in self.in_keys}  # read all before writing: out_keys may equal in_keys
        out = td.copy()
        for in_key, out_key in zip(self.in_keys, self.out_keys, strict=True):
            root = self._root_of(in_key)
            if root is None:
                index = torch.where(padded, clamp_to, frame)
                value = self._windows(inputs[in_key], index, padded, shape, time_dim, in_key)
            else:
                # ("next", key) window of step t: slots t-N+2..t+1; slot s (> first) is ("next", key)[s-1],
                # slot == first is the root's reset frame, earlier slots are padding ("same": that reset frame)
                shifted = frame + 1
                from_next = shifted > first[..., None]
                t_len = done.shape[-1]
                index = torch.where(from_next, shifted - 1 + t_len, first[..., None].expand_as(shifted))
                both = torch.cat([_check(inputs[root], shape, root), _check(inputs[in_key], shape, in_key)], time_dim)
                value = self._windows(
                    both, index, shifted < first[..., None], shape, time_dim, in_key, time_len=2 * t_len
                )
            out.set(out_key, value)
        if self.mask_key is not None:
            mask = padded.reshape(*_moved(shape, time_dim), self.N).movedim(len(shape) - 1, time_dim)
            out.set(self.mask_key, mask)
        return out

    def _windows(
        self,
        value: Any,
        index: torch.Tensor,
        padded: torch.Tensor,
        shape: torch.Size,
        time_dim: int,
        key: Any,
        time_len: int | None = None,
    ) -> torch.Tensor:
        """``value[*B, T(or time_len), *frame]`` gathered at ``index[M, T, N]``, the N slots concatenated along dim."""
        value = _check(value, shape, key) if time_len is None else value
        frame_dims = value.ndim - len(shape)
        if -self.dim > frame_dims:
            raise InvalidArgument(
                f"CatFrames(dim={self.dim}): {key!r} has {frame_dims} dims beyond the batch shape "
                f"{list(shape)} (shape {list(value.shape)}); dim must address one of them"
            )
        moved = value.movedim(time_dim, len(shape) - 1)
        flat = moved.reshape(-1, moved.shape[len(shape) - 1], *moved.shape[len(shape) :])  # [M, T, *frame]
        rows = torch.arange(flat.shape[0])[:, None, None]
        windows = flat[rows, index]  # [M, T, N, *frame]
        if self.padding == "constant":
            windows = windows.clone()
            windows[padded] = self.padding_value
        # the N slots go just before the frame dim `dim`, then merge with it: torch.cat of the frames along dim
        cat_at = windows.ndim + self.dim
        windows = windows.movedim(2, cat_at - 1).flatten(cat_at - 1, cat_at)
        batch = _moved(shape, time_dim)
        return windows.reshape(*batch, *windows.shape[2:]).movedim(len(shape) - 1, time_dim)

    def __repr__(self) -> str:
        return f"CatFrames(N={self.N}, dim={self.dim}, keys={self.in_keys})"


class _StackedSlices(Transform):
    """Samples: ``[n * N]`` flat slices -> ``[n, N]`` -> stacked -> each slice's last step. Writes: drop ``out_keys``."""

    def __init__(self, stacker: CatFrames, out_keys: list[Any]) -> None:
        self.stacker = stacker
        self.stacked_keys = out_keys

    def forward(self, data: Any) -> Any:
        td = _require_td(data, "CatFrames")
        return self.stacker(td.reshape(-1, self.stacker.N))[:, -1]

    def inverse(self, data: Any) -> Any:
        return _require_td(data, "CatFrames").exclude(*self.stacked_keys)

    def __repr__(self) -> str:
        return f"StackedSlices({self.stacker!r})"


class DensifyReward(Transform):
    """Give every step its trajectory's reward-to-go (see the module docstring for the contract)."""

    def __init__(
        self,
        *,
        reward_key: Any = "reward",
        done_key: Any = "done",
        reward_key_out: Any = None,
        time_dim: int = 2,
        discount: float = 1.0,
    ) -> None:
        self.in_keys = [_norm(reward_key), _norm(done_key)]
        self.out_keys = [_norm(reward_key if reward_key_out is None else reward_key_out)]
        # TorchRL keeps time_dim but reads time at dim -2 of the reward; so does this class
        self.time_dim = time_dim
        if not 0 <= discount <= 1:
            raise InvalidArgument(f"DensifyReward needs 0 <= discount <= 1, got discount={discount}")
        self.discount = float(discount)

    def forward(self, data: Any) -> Any:
        td = _require_td(data, "DensifyReward")
        reward_key, done_key = (("next", *_tuple(k)) for k in self.in_keys)
        _missing(td, [reward_key, done_key], "DensifyReward")
        reward, done = td.get(reward_key), td.get(done_key)
        if reward.shape != done.shape:
            raise InvalidArgument(
                f"DensifyReward: {reward_key!r} has shape {list(reward.shape)} and {done_key!r} "
                f"{list(done.shape)}; they must match ([*B, T, 1] for a TED reward)"
            )
        if reward.ndim < 2:
            raise InvalidArgument(
                f"DensifyReward reads time at dim -2 of the reward, which has shape {list(reward.shape)}: "
                "give it a trailing feature dim ([T, 1])"
            )
        columns = reward.movedim(-2, -1).reshape(-1, reward.shape[-2])  # [R, T]: one trajectory stream per row
        ends = done.movedim(-2, -1).reshape(-1, reward.shape[-2]).bool().clone()
        ends[:, -1] = True  # the end of the batch closes the last trajectory of every row
        flat_ends = ends.reshape(-1)
        stops = torch.nonzero(flat_ends).squeeze(-1) + 1
        starts = torch.cat([stops.new_zeros(1), stops[:-1]])
        dense = reward_to_go(columns.reshape(-1), starts, stops - starts, self.discount)
        dense = dense.to(reward.dtype).reshape(columns.shape)
        shape = list(reward.shape)
        moved_shape = shape[:-2] + shape[-1:] + shape[-2:-1]
        out = td.copy()
        out.set(("next", *_tuple(self.out_keys[0])), dense.reshape(moved_shape).movedim(-1, -2))
        return out

    def __repr__(self) -> str:
        return f"DensifyReward(reward_key={self.in_keys[0]!r}, discount={self.discount})"


def _tuple(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _moved(shape: torch.Size, time_dim: int) -> list[int]:
    """``shape`` with its time dim moved last."""
    dims = list(shape)
    dims.append(dims.pop(time_dim))
    return dims


def _check(value: Any, shape: torch.Size, key: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise WrongDataType(f"CatFrames stacks tensors, and {key!r} is a {type(value).__name__}")
    return value


def _batch_flags(done: Any, shape: torch.Size, time_dim: int, key: Any) -> torch.Tensor:
    """``done`` (batch shape, optionally followed by 1) as bool ``[M, T]``, time last."""
    if done.shape != shape:
        if done.shape[:-1] == shape and done.shape[-1] == 1:
            done = done.squeeze(-1)
        else:
            raise InvalidArgument(
                f"CatFrames: ('next', {key!r}) has shape {list(done.shape)}, expected the batch shape "
                f"{list(shape)} (or it followed by 1)"
            )
    moved = done.bool().movedim(time_dim, -1)
    return moved.reshape(-1, moved.shape[-1])


def _trajectory_bounds(done: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For ``done`` ``[M, T]``: each step's trajectory's first and last step (index 0 and the end cut too)."""
    t_len = done.shape[-1]
    steps = torch.arange(t_len).expand_as(done)
    starts = torch.zeros_like(done)
    starts[:, 0] = True
    starts[:, 1:] = done[:, :-1]
    first = torch.where(starts, steps, 0).cummax(-1).values
    ends = done.clone()
    ends[:, -1] = True
    last = torch.where(ends, steps, t_len).flip(-1).cummin(-1).values.flip(-1)
    return first, last
