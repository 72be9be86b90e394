"""Shared fixtures: every test gets its own cache under tmp_path and never touches the internet."""

from __future__ import annotations

import ipaddress
import socket

import pytest

# Fixtures shared by several test files live in tests/fixtures/ (test files never import each other).
pytest_plugins = ["fixtures.roboset", "fixtures.cli"]

_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", ""}


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Point the hub's cache at a per-test directory and forbid outside network by default."""
    cache = tmp_path / "hub-cache"
    monkeypatch.setenv("DATASETS_HUB_CACHE", str(cache))
    monkeypatch.delenv("DATASETS_HUB_REGISTRY", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return cache


def _is_local(host) -> bool:
    if isinstance(host, bytes):
        host = host.decode()
    if host is None or host in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def no_outside_network(monkeypatch):
    """Any attempt of this process to resolve or reach a host other than the loopback fails the test
    at once (the rule: network code is tested against servers on 127.0.0.1 only)."""
    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.socket.connect

    def getaddrinfo(host, *args, **kwargs):
        if not _is_local(host):
            raise OSError(f"test tried to resolve outside host {host!r}: tests may only reach 127.0.0.1")
        return real_getaddrinfo(host, *args, **kwargs)

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            raise OSError(f"test tried to connect to {address!r}: tests may only reach 127.0.0.1")
        return real_connect(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
