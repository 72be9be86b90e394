"""Shared fixtures: every test gets its own cache under tmp_path and never touches the internet."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Point the hub's cache at a per-test directory and forbid outside network by default."""
    cache = tmp_path / "hub-cache"
    monkeypatch.setenv("DATASETS_HUB_CACHE", str(cache))
    monkeypatch.delenv("DATASETS_HUB_REGISTRY", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return cache
