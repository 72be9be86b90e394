"""datasets_hub.progress (the rows-done bar of builds and preprocessing) and its use by the build."""

from __future__ import annotations

import sys

import pytest

import datasets_hub as dh
from datasets_hub.build.pipeline import build
from datasets_hub.loader import DatasetSpec
from datasets_hub.progress import RowProgress
from datasets_hub.testing import FakeLoader


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("DATASETS_HUB_OFFLINE", "1")


def lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("datasets_hub: ")]


def test_log_lines_show_rows_of_total_rate_and_eta(capsys):
    with RowProgress("building x", 1000, interval=0) as bar:
        bar.update(250)
        bar.update(250)
    out = lines(capsys.readouterr().err)
    assert out[0].startswith("datasets_hub: building x: 250 of 1,000 rows (25%), ") and "rows/s, ETA " in out[0]
    assert out[1].startswith("datasets_hub: building x: 500 of 1,000 rows (50%)")
    assert out[-1].endswith(" s") and ", done in " in out[-1] and len(out) == 3


def test_without_a_total_the_line_says_so(capsys):
    with RowProgress("building y", None, interval=0) as bar:
        bar.update(7)
    (first, last) = lines(capsys.readouterr().err)
    assert first.startswith("datasets_hub: building y: 7 rows (total unknown), ") and "ETA" not in first
    assert "done in" in last


def test_more_rows_than_expected_never_read_over_100_percent(capsys):
    """An expected total is an estimate: once outgrown, the line says so instead of "1,065 of 1,000 (100%)"."""
    with RowProgress("building z", 1000, interval=0) as bar:
        bar.update(900)
        bar.update(165)
    out = lines(capsys.readouterr().err)
    assert out[0].startswith("datasets_hub: building z: 900 of 1,000 rows (90%)")
    assert out[1].startswith("datasets_hub: building z: 1,065 rows (more than the 1,000 expected), ")
    assert not [line for line in out if " of 1,000 " in line and "1,065" in line]


def test_a_short_job_prints_nothing_and_show_false_never(capsys):
    with RowProgress("quick", 10, interval=3600) as bar:
        bar.update(10)
    with RowProgress("silent", 10, interval=0, show=False) as bar:
        bar.update(10)
    assert capsys.readouterr().err == ""


def test_a_terminal_gets_a_bar_with_the_total(capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with RowProgress("building z", None, interval=0) as bar:
        assert bar.is_bar and not bar.lines
        bar.set_total(300)  # learnt from the loader
        bar.update(300)
    err = capsys.readouterr().err
    assert "building z (total unknown)" in err and "/300 [" in err  # redrawn with the total once learnt
    assert "datasets_hub: " not in err and bar.n == 300


def test_the_build_shows_the_loaders_expected_count(capsys, monkeypatch):
    monkeypatch.setenv("DATASETS_HUB_PROGRESS_INTERVAL", "0")
    dh.download("gym/cartpole-random-v0", steps=300)  # gym knows its step budget
    err = capsys.readouterr().err
    assert "datasets_hub: building gym/cartpole-random-v0: 300 of 300 rows (100%)" in err


def test_the_build_counts_rows_written_against_the_catalogues_count(capsys, monkeypatch):
    monkeypatch.setenv("DATASETS_HUB_PROGRESS_INTERVAL", "0")
    spec = DatasetSpec(
        id="fake/progress", loader="fake", params={"lengths": [5, 3, 4], "chunks": 3}, metadata={"transitions": 12}
    )
    build(spec, FakeLoader(), {}, [])  # the fake loader reports nothing: rows written drive the bar
    out = lines(capsys.readouterr().err)
    assert out[0].startswith("datasets_hub: building fake/progress: 5 of 12 rows (42%)")
    assert any(line.startswith("datasets_hub: building fake/progress: 12 of 12 rows (100%)") for line in out)
    build(DatasetSpec(id="fake/progress2", loader="fake", params={"lengths": [2]}), FakeLoader(), {}, [])
    assert "2 rows (total unknown)" in capsys.readouterr().err


def test_a_bad_interval_is_named(monkeypatch):
    from datasets_hub.errors import DownloadError

    monkeypatch.setenv("DATASETS_HUB_PROGRESS_INTERVAL", "soon")
    with pytest.raises(DownloadError, match="DATASETS_HUB_PROGRESS_INTERVAL"):
        RowProgress("x", 1)
