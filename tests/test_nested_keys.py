"""nested_keys: keys as tuples, and NestPlan's builds equal to nest()'s, key order included."""

from __future__ import annotations

import pytest

from datasets_hub.buffers.nested_keys import NestPlan, as_key, key_to_str, nest, parse_key


@pytest.mark.parametrize(
    "keys",
    [
        ["a", "b"],
        [("a",), ("next", "x"), ("b",), ("next", "y"), ("i", "j", "k"), ("c",), ("i", "z")],
        [("x", "y", "z")],
    ],
)
def test_a_plan_builds_what_nest_builds(keys):
    plan = NestPlan(keys)
    for values in (list(range(len(keys))), [f"v{i}" for i in range(len(keys))]):
        built = plan.build(values)
        assert built == nest(keys, values) and repr(built) == repr(nest(keys, values))  # repr: the key order
    marked = plan.build(list(range(len(keys))), inner=lambda d: ("inner", d))
    for key in plan.keys:  # each inner dict handed to ``inner``, its own inner dicts already handed
        node = marked
        for part in key[:-1]:
            tag, node = node[part]
            assert tag == "inner"
        assert node[key[-1]] == plan.keys.index(key)
    first, second = plan.build(list(range(len(keys)))), plan.build(list(range(len(keys))))
    assert first == second and first is not second  # a fresh dict per build
    with pytest.raises(ValueError, match=f"{len(keys) + 1} values for {len(keys)} keys"):
        plan.build(list(range(len(keys) + 1)))


def test_keys_as_tuples_and_strings():
    assert as_key("obs") == ("obs",) and as_key(["next", "obs"]) == ("next", "obs")
    assert key_to_str(("next", "obs")) == "next/obs" and parse_key("next/obs") == ("next", "obs")
