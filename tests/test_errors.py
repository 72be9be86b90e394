"""The error tree of datasets_hub/errors.py: its shape, the drawing in its docstring, and the built-in
exceptions each class can also be caught as."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from tensordict import TensorDict

import datasets_hub as dh
from datasets_hub import errors
from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.tensor_storages import TensorStorage
from datasets_hub.buffers.writers import ImmutableDatasetWriter

CLASSES = {name: obj for name, obj in vars(errors).items() if inspect.isclass(obj) and issubclass(obj, Exception)}


def test_every_error_is_a_hub_error_and_exported_by_the_package():
    for name, cls in CLASSES.items():
        assert issubclass(cls, errors.HubError), name
        assert getattr(dh, name) is cls, f"datasets_hub.{name} is not exported"


def test_the_docstring_draws_the_tree_as_it_is():
    """Each class of the drawing sits under the parent it is drawn under, and no class is left out."""
    drawn: dict[str, str] = {}
    parents: list[tuple[int, str]] = []
    for line in errors.__doc__.splitlines():
        m = re.match(r"^(\s*)(?:[│ ]*[├└]── )?([A-Z]\w+)\s", line + " ")
        if not m or m.group(2) not in CLASSES:
            continue
        depth = len(line) - len(line.lstrip(" │├└─"))
        while parents and parents[-1][0] >= depth:
            parents.pop()
        drawn[m.group(2)] = parents[-1][1] if parents else ""
        parents.append((depth, m.group(2)))
    assert set(drawn) == set(CLASSES), f"not drawn: {sorted(set(CLASSES) - set(drawn))}"
    for name, parent in drawn.items():
        if parent:
            assert CLASSES[parent] in CLASSES[name].__mro__[1:], f"{name} is drawn under {parent}"


@pytest.mark.parametrize(
    "name, builtin",
    [
        ("UnknownDataset", KeyError),
        ("UnknownLoader", KeyError),
        ("MissingDependency", ImportError),
        ("TEDError", ValueError),
        ("InvalidParameter", ValueError),
        ("ReadOnlyError", RuntimeError),
    ],
)
def test_errors_are_also_the_builtin_exception_users_catch(name, builtin):
    assert issubclass(CLASSES[name], builtin)


def test_catalogue_and_plugin_failures_have_their_own_classes():
    assert issubclass(errors.UnknownDataset, errors.CatalogueError)
    assert issubclass(errors.UnknownLoader, errors.PluginError)
    assert not issubclass(errors.CatalogueError, errors.PluginError)
    with pytest.raises(errors.CatalogueError, match="already exists"):
        dh.register_dataset("gym/cartpole-random-v0", loader="gym")
    from datasets_hub.plugins import get_loader

    with pytest.raises(errors.PluginError, match="no loader named 'no-such-loader'"):
        get_loader("no-such-loader")


def test_one_read_only_refusal_for_writers_and_storages():
    rb = TensorDictReplayBuffer(
        storage=TensorStorage(TensorDict({"obs": torch.arange(4)}, [4])), writer=ImmutableDatasetWriter()
    )
    for write in (lambda: rb.extend(TensorDict({"obs": torch.arange(2)}, [2])), rb.empty):
        with pytest.raises(errors.ReadOnlyError, match=r"read-only.*rb2\.extend"):
            write()
