"""Tree and MCTSForest (datasets_hub/buffers/maps/forest.py)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from datasets_hub import MCTSForest, Tree


def rollout(observations: list[int], actions: list[int]) -> TensorDict:
    """Steps ``observations[t] --actions[t]--> observations[t + 1]``, reward ``10 * action``."""
    obs, act = torch.tensor(observations), torch.tensor(actions)
    return TensorDict(
        {
            "observation": obs[:-1],
            "action": act,
            "next": {"observation": obs[1:], "reward": act * 10, "done": torch.zeros(len(act), 1, dtype=torch.bool)},
        },
        batch_size=[len(act)],
    )


def forest() -> MCTSForest:
    """0 -a1-> 1 -a1-> 2 -a1-> 3, 2 -a2-> 4 -a2-> 5, and 0 -a3-> 6: vertices at 2 (branching), 3, 5, 6."""
    f = MCTSForest()
    f.extend(rollout([0, 1, 2, 3], [1, 1, 1]))
    f.extend(rollout([2, 4, 5], [2, 2]))
    f.extend(rollout([0, 6], [3]))
    f.extend(rollout([0, 1], [1]))  # a step seen before changes nothing
    return f


def test_compact_tree_has_a_vertex_per_branching_and_leaf():
    tree = forest().get_tree(TensorDict(observation=0))
    assert tree.rollout is None and tree.hash is None and tree.node_id == 0
    assert [tree.subtree[i].node_observation.item() for i in range(2)] == [2, 6]
    assert sorted(tree.edges()) == [(0, 1), (0, 2), (1, 3), (1, 4)]
    assert sorted(tree.valid_paths()) == [(0, 0), (0, 1), (1,)]
    assert tree.num_vertices() == 5 and tree.max_length() == 2
    to_three = tree.rollout_from_path((0, 0))
    assert to_three["observation"].tolist() == [0, 1, 2] and to_three["next", "reward"].tolist() == [10] * 3
    assert tree.subtree[0].branching_action.item() == 1 and tree.get_vertex_by_id(4).prev_action.item() == 2
    assert tree.to_string() == "\n".join(
        [
            "(0,) {'observation': tensor(2)}",
            " (0, 0) {'observation': tensor(3)}",
            " (0, 1) {'observation': tensor(5)}",
            "(1,) {'observation': tensor(6)}",
        ]
    )


def test_step_by_step_tree_and_a_root_with_one_way_out():
    f = forest()
    assert f.get_tree(TensorDict(observation=0), compact=False).num_vertices() == 7  # the root and 6 steps
    from_one = f.get_tree(TensorDict(observation=1))
    assert from_one.rollout["observation"].tolist() == [1]  # the root takes the single step out of it
    assert from_one.node_observation.item() == 2 and from_one.num_children == 2
    assert len(f) == 6
    with pytest.raises(KeyError, match="no stored rollout leaves from"):
        f.get_tree(TensorDict(observation=99))


def test_parents_and_membership():
    tree = forest().get_tree(TensorDict(observation=0))
    branching = tree.subtree[0]
    assert branching.parent.node_data is tree.node_data
    assert branching.subtree[1].parent.node_data is branching.node_data and tree.parent is None
    assert branching in tree and tree not in branching
    assert set(tree.vertices(key_type="id")) == {0, 1, 2, 3, 4}
    with pytest.raises(ValueError, match="key_type must be one of"):
        tree.vertices(key_type="name")


def test_rollouts_that_meet_again_share_a_vertex():
    f = forest()
    f.extend(rollout([6, 2], [4]))  # 0 -a3-> 6 -a4-> 2: vertex 2 is now reached along two paths
    tree = f.get_tree(TensorDict(observation=0))
    assert len(tree.vertices(key_type="path")) > len(tree.vertices(key_type="hash"))
    via_six = tree.subtree[1]  # 0 -> 6 -> 2 in one vertex: 6 has one way out
    assert via_six.rollout["observation"].tolist() == [0, 6] and via_six.node_observation.item() == 2
    shared = via_six.subtree[0]
    assert shared is not tree.subtree[0].subtree[0] and shared.node_id == tree.subtree[0].subtree[0].node_id
    parents = shared.parent
    assert parents.batch_size == (2,)
    assert sorted(parents.rollout[i]["observation"].tolist()[0] for i in range(2)) == [0, 0]


def test_make_node_and_refusals():
    step = rollout([7, 8], [5])[0]
    node = Tree.make_node(step)
    assert node.rollout.batch_size == (1,) and node.subtree[0].node_data["observation"].item() == 8
    assert "next" not in Tree.make_node(TensorDict(observation=3)).node_data.keys()
    with pytest.raises(NotImplementedError, match="consolidated"):
        MCTSForest(consolidated=True)
    with pytest.raises(ValueError, match="conflicting sizes"):
        MCTSForest(max_size=10, data_map=forest().data_map)
