"""Transform fingerprints (docs/guide/preprocessing.md): what changes them, what does not, and what cannot be hashed."""

from __future__ import annotations

import functools
import importlib
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
import torch

from datasets_hub.fingerprint import (
    UncachedPreprocessWarning,
    Unfingerprintable,
    fingerprint_callable,
    transform_fingerprint,
)

F = fingerprint_callable


def write_module(tmp_path, name, source):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    sys.path.insert(0, str(tmp_path))
    try:
        sys.modules.pop(name, None)
        importlib.invalidate_caches()
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


MODULE = """
    import torch
    SCALE = {scale}
    TABLE = {{"b", "a", "c"}}

    def helper(x):
        return x * {helper}

    def fn(td, k=1):
        return helper(td) * SCALE * k + len(TABLE)
"""


def test_same_function_same_fingerprint_in_another_process(tmp_path):
    mod = write_module(tmp_path, "fp_same", MODULE.format(scale=2.0, helper=3))
    here = F(mod.fn)
    assert here == F(mod.fn) and len(here) == 64
    script = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import fp_same; "
        "from datasets_hub.fingerprint import fingerprint_callable as F; print(F(fp_same.fn))"
    )
    # another interpreter has another str-hash seed: the set global must not change the fingerprint
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == here


@pytest.mark.parametrize("change", [{"scale": 2.5, "helper": 3}, {"scale": 2.0, "helper": 4}])
def test_a_changed_global_or_called_helper_changes_it(tmp_path, change):
    base = F(write_module(tmp_path, "fp_base", MODULE.format(scale=2.0, helper=3)).fn)
    changed = F(write_module(tmp_path, "fp_changed", MODULE.format(**change)).fn)
    renamed = F(write_module(tmp_path, "fp_same2", MODULE.format(scale=2.0, helper=3)).fn)
    assert base != changed
    assert base != renamed  # the module is part of the identity (conservative)


def test_body_defaults_closures_partials_and_versions():
    def body_a(td):
        return td + 1

    def body_b(td):
        return td + 2

    def make(v):
        def inner(td):
            return td * v

        return inner

    def with_default(td, k=1):
        return td * k

    assert F(body_a) != F(body_b)
    assert F(make(1)) == F(make(1)) != F(make(2))
    assert F(make(torch.ones(3))) == F(make(torch.ones(3))) != F(make(torch.zeros(3)))
    before = F(with_default)
    with_default.__defaults__ = (2,)
    assert F(with_default) != before
    assert F(functools.partial(with_default, k=2)) != F(functools.partial(with_default, k=3))
    assert F(functools.partial(with_default, k=2)) == F(functools.partial(with_default, k=2))
    assert transform_fingerprint("p", body_a) != transform_fingerprint("p", body_a, version=1)
    assert transform_fingerprint("p", body_a) != transform_fingerprint("q", body_a)
    assert len(transform_fingerprint("p", body_a)) == 16


def test_lambdas_in_loops_and_on_one_line_differ():
    by_default = [lambda td, k=k: td * k for k in range(3)]
    assert len({F(f) for f in by_default}) == 3
    a, b = (lambda td: td + 1), (lambda td: td + 2)  # same source line
    assert F(a) != F(b)
    same = [lambda td: td * 2 for _ in range(2)]
    assert F(same[0]) == F(same[1])  # identical code and values: the same transform


def test_callable_objects_by_class_and_state():
    class Scale:
        def __init__(self, s):
            self.s = s

        def __call__(self, td):
            return td * self.s

    assert F(Scale(1)) == F(Scale(1)) != F(Scale(2))
    assert F(Scale(1).__call__) != F(Scale(2).__call__)


def test_unhashable_things_warn_once_and_return_none():
    lock = threading.Lock()

    def locked(td):
        with lock:
            return td

    with pytest.raises(Unfingerprintable, match="'lock'"):
        F(locked)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert transform_fingerprint("p", locked) is None
        assert transform_fingerprint("p", locked) is None
        assert transform_fingerprint("p", torch.neg) is None
        assert transform_fingerprint("p", functools.partial(torch.add, other=1)) is None
    messages = [str(w.message) for w in caught]
    assert [w.category for w in caught] == [UncachedPreprocessWarning] * 3
    assert "closure variable 'lock'" in messages[0] and "builtin without Python source" in messages[1]
