"""``make test-upstream`` can never pass by skipping: a missing reference package fails there."""

from __future__ import annotations

import pytest
from upstream_ref import REQUIRED_ENV, upstream


def test_missing_reference_fails_when_required_and_skips_otherwise(monkeypatch):
    monkeypatch.setenv(REQUIRED_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="cannot be imported under make test-upstream"):
        upstream("no_such_upstream_package_for_datasets_hub")
    monkeypatch.delenv(REQUIRED_ENV)
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        upstream("no_such_upstream_package_for_datasets_hub")
    assert upstream("json").dumps([1]) == "[1]"  # present: the module itself
