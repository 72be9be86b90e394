"""TorchRL dataset-class keywords are refused with what to write instead (datasets_hub/torchrl_porting.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import datasets_hub as dh
from datasets_hub.errors import InvalidParameter
from datasets_hub.hub import load_keywords
from datasets_hub.torchrl_porting import KEYWORDS, PAGE, anchor

ROOT = Path(__file__).resolve().parents[1]


def test_every_keyword_has_its_row_in_the_porting_page():
    page = (ROOT / PAGE).read_text()
    rows = re.findall(r'<a id="kw-([A-Za-z_]+)"></a>', page)
    assert sorted(rows) == sorted(KEYWORDS)
    assert not set(KEYWORDS) & set(load_keywords())  # load()'s own keywords are never refused


@pytest.mark.parametrize(
    "keyword", sorted(set(KEYWORDS) - {"num_slices", "slice_len", "strict_length", "replacement", "shuffle"})
)
def test_load_with_a_torchrl_keyword_points_at_its_row(keyword):
    """(num_slices, slice_len, strict_length, replacement, shuffle: load() names the sampler to use first.)"""
    with pytest.raises(InvalidParameter) as info:
        dh.load("d4rl/hopper-medium-v2", download=False, **{keyword: True})
    message = str(info.value)
    assert f"{keyword!r} is a keyword of TorchRL's {KEYWORDS[keyword][0]}" in message
    assert f"{PAGE}#{anchor(keyword)}" in message and KEYWORDS[keyword][1] in message


def test_info_and_a_loader_without_params_refuse_them_too():
    with pytest.raises(InvalidParameter, match="#kw-split_trajs"):
        dh.info("gym/cartpole-random-v0", split_trajs=True)
    with pytest.raises(InvalidParameter, match="#kw-load_from_local_minari"):
        dh.info("minari/D4RL/door/human-v2", load_from_local_minari=True)


def test_a_loader_that_takes_the_keyword_gets_it():
    """lerobot/* ids take root= (a local folder): its own check answers, not the porting table."""
    with pytest.raises(InvalidParameter, match=r"has no meta/info\.json") as info:
        dh.info("lerobot/local/koch", root="/nonexistent-folder")
    assert "porting" not in str(info.value)
