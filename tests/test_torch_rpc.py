"""RemoteTensorDictReplayBuffer: a TensorDictReplayBuffer locally, and its methods called through a torch RPC RRef."""

from __future__ import annotations

import socket

import torch
import torch.distributed.rpc as rpc
from tensordict import TensorDict

import datasets_hub as dh
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.interop.torch_rpc import RemoteTensorDictReplayBuffer


def rows(n: int) -> TensorDict:
    return TensorDict(obs=torch.arange(n).float(), batch_size=[n])


def test_locally_it_is_a_tensordict_replay_buffer():
    rb = RemoteTensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
    assert isinstance(rb, dh.TensorDictReplayBuffer)
    rb.extend(rows(6))
    sample = rb.sample()
    assert sample["obs"].shape == (4,) and torch.equal(sample["obs"], sample["index"].float())
    assert dh.RemoteTensorDictReplayBuffer is RemoteTensorDictReplayBuffer


def test_methods_take_an_rref_in_place_of_self(monkeypatch):
    with socket.socket() as s:  # a free port on 127.0.0.1 for the one-worker RPC group
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    # listen on the loopback only: TensorPipe and Gloo otherwise pick the address the hostname resolves to
    monkeypatch.setenv("TP_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    rpc.init_rpc("owner", rank=0, world_size=1)
    try:
        rref = rpc.remote("owner", RemoteTensorDictReplayBuffer, kwargs={"storage": LazyTensorStorage(10)})
        index = rpc.rpc_sync("owner", RemoteTensorDictReplayBuffer.extend, args=(rref, rows(5)))
        assert index.tolist() == [0, 1, 2, 3, 4]
        sample = rpc.rpc_sync("owner", RemoteTensorDictReplayBuffer.sample, args=(rref, 3))
        assert sample["obs"].shape == (3,)
        assert len(rref.local_value()) == 5
    finally:
        rpc.shutdown()
