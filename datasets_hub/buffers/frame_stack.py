"""DQN-style frame stacks built at sample time, never crossing an episode start.

A build stores every frame once (docs/design/on-disk.md); the stacked state a DQN consumes — frames
``t-n+1..t`` — is gathered when a batch is sampled, so a 4-frame Atari build costs no more disk than
a 1-frame one. :class:`FrameStack` is the transform;
:class:`~datasets_hub.buffers.samplers.frame_stack.FullStackSampler` is the sampler
option for those who would rather never pad.

Contract of ``FrameStack(n)`` on a sample (any batch shape, TED keys):

- ``observation`` becomes ``[*B, n, *frame]`` holding frames ``t-n+1, …, t`` of the row's own
  episode (oldest first, so ``[..., -1, :, :]`` is the sample's own frame), and
  ``("next", "observation")`` becomes frames ``t-n+2, …, t+1``; dtype unchanged.
- Frames before the episode's first one are **zeros** (``padding="zeros"``, the default): this is
  what Dopamine, which produced the DQN Replay Dataset, feeds its agents at an episode's start (it
  writes 3 zero frames before every episode). ``padding="first"`` repeats the episode's first frame
  instead (the convention of many PyTorch DQN implementations and TorchRL's ``CatFrames``).
- Except where the build keeps **history frames** for an episode (the real frames that preceded its
  first transition, e.g. the oldest episode of a wrapped Dopamine checkpoint, whose beginning was
  overwritten): those are used, whatever the padding, and only times before them are padded.
- A stack never holds a frame of another episode, whatever the padding.

The transform reads earlier frames from the buffer's storage, so it must be bound to it. A replay
buffer binds the transforms it is given (``load(id, transform=FrameStack(4))``,
``rb.append_transform(FrameStack(4))``); used on its own, bind it explicitly:
``fs = FrameStack(4).bind(rb); fs(rb.sample())``. Over a storage that keeps frames once per
episode (``storage.frame_keys()`` is not None: a hub build) the frames are asked of the storage
with ``storage.episode_frames`` (one read of ``n + 1`` frames per sample serves both stacks) and the
sample only needs its ``episode`` and ``step`` keys. Over any other storage whose episodes occupy consecutive
rows, the sample must also carry ``"index"`` (``TensorDictReplayBuffer`` samples do).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from datasets_hub.buffers.nested_keys import as_key
from datasets_hub.buffers.transforms import Transform

_PADDINGS = ("zeros", "first")


class FrameStack(Transform):
    """Replace ``keys`` (default ``observation``) and their ``next`` values by n-frame stacks.

    See the module docstring for the contract. ``storage`` (or a later :meth:`bind`) is the
    buffer or storage the samples come from.
    """

    def __init__(
        self, n: int = 4, keys: Sequence[Any] = ("observation",), *, padding: str = "zeros", storage: Any = None
    ) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"FrameStack needs a positive number of frames (e.g. FrameStack(4)), got {n!r}")
        if padding not in _PADDINGS:
            raise ValueError(f"FrameStack padding must be one of {_PADDINGS}, got {padding!r}")
        if isinstance(keys, str):
            keys = [keys]  # one key; a nested key is a tuple inside the list: keys=[("pixels", "left")]
        self.n = n
        self.keys = [as_key(k) for k in keys]
        self.padding = padding
        self._storage: Any = None
        self._per_episode = False  # the storage serves frames by (episode, time)
        if storage is not None:
            self.bind(storage)

    # -- binding --------------------------------------------------------------------------------
    def bind(self, buffer: Any) -> FrameStack:
        """Attach to ``buffer`` (a replay buffer, or a storage) whose samples this transform sees."""
        storage = getattr(buffer, "storage", buffer)
        if not hasattr(storage, "get"):
            raise TypeError(f"FrameStack.bind needs a replay buffer or a storage, got {type(buffer).__name__}")
        self._storage = storage
        frame_keys = storage.frame_keys() if hasattr(storage, "frame_keys") else None
        self._per_episode = frame_keys is not None
        if frame_keys is not None:
            missing = [k for k in self.keys if k not in frame_keys]
            if missing:
                raise KeyError(
                    f"FrameStack: {'/'.join(missing[0])!r} is not a frame key stored once per episode in this build "
                    f"(such keys: {sorted('/'.join(k) for k in frame_keys)}); pass keys=[...] naming one of them"
                )
        return self

    # -- the transform --------------------------------------------------------------------------
    def forward(self, data: Any) -> Any:
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"FrameStack works on TensorDict samples, got {type(data).__name__}")
        if self._storage is None:
            raise RuntimeError(
                f"FrameStack({self.n}) is not bound to a buffer, so it cannot read earlier frames: use "
                f"rb.append_transform(FrameStack({self.n}).bind(rb)), or keep a handle and call fs.bind(rb)"
            )
        for needed in ("episode", "step"):
            if needed not in data.keys():
                raise KeyError(f"FrameStack needs the sample's {needed!r} key (TED samples carry it); it is missing")
        shape = data.batch_size
        flat = data.reshape(-1) if len(shape) != 1 else data
        flat = flat.copy()  # shallow: never change the caller's TensorDict in place
        step = flat.get("step").reshape(-1).to(torch.int64)
        # times t-n+1 .. t+1 of each row's episode: columns [:n] are the state, [1:] the next state
        offsets = torch.arange(-self.n + 1, 2, dtype=torch.int64)
        raw = step[:, None] + offsets[None, :]
        before = raw < 0
        if self._per_episode:  # the storage keeps frames (and maybe history frames) by episode and time
            frames, present = self._storage.episode_frames(self.keys, flat.get("episode").reshape(-1), raw)
            pad = {key: ~mask for key, mask in present.items()}
        else:
            frames = self._from_storage(flat, step, raw.clamp_min(0))
            pad = dict.fromkeys(frames, before)
        for key, window in frames.items():
            if self.padding == "zeros" and pad[key].any():
                window[pad[key]] = 0
            flat.set(key, window[:, : self.n])
            flat.set(("next", *key), window[:, 1:])
        return flat.reshape(shape) if len(shape) != 1 else flat

    def _from_storage(
        self, flat: TensorDictBase, step: torch.Tensor, times: torch.Tensor
    ) -> dict[tuple[str, ...], torch.Tensor]:
        if "index" not in flat.keys():
            raise KeyError(
                "FrameStack over this storage needs the sample's 'index' key (TensorDictReplayBuffer samples "
                "carry it): earlier frames are read at rows index - k"
            )
        index = flat.get("index").reshape(-1).to(torch.int64)
        b = index.numel()
        first_row = index - step
        # frames at t-n+1..t are the root observations of earlier rows; t+1 is this row's next value
        rows = (first_row[:, None] + times[:, : self.n]).reshape(-1)
        earlier = self._storage.get(rows)
        out = {}
        for key in self.keys:
            now = earlier.get(key).reshape(b, self.n, *earlier.get(key).shape[1:])
            nxt = flat.get(("next", *key))[:, None]
            out[key] = torch.cat([now, nxt], dim=1)
        return out

    def __repr__(self) -> str:
        keys = ", ".join("/".join(k) for k in self.keys)
        return f"FrameStack(n={self.n}, keys=[{keys}], padding={self.padding!r}, bound={self._storage is not None})"
