"""Local copies of published URLs in the cache (datasets_hub/cache/remote_copies.py): listed by ``cache ls``,
pruned when their URL was exported again (or unused for long), removed by ``cache rm URL`` and ``rm URL``,
never under a process still reading an unfinished copy."""

from __future__ import annotations

import os
import shutil
import time

import pytest
import torch

import datasets_hub as dh
from datasets_hub.cache.layout import LAST_USED
from datasets_hub.cache.listing import list_cache
from datasets_hub.cache.maintenance import prune, remove
from datasets_hub.cache.remote_copies import copies_of
from datasets_hub.errors import CacheError

from fixtures.remote import local_build, publish
from fixtures.remote import same as _same

pytest.importorskip("zarr")  # an optional extra (datasets-hub[remote]); make test installs it


@pytest.fixture(scope="module")
def local_rb():
    return local_build()


def _export_again(local_rb, published, tmp_path):
    """The same URL serving a new export (another chunking: another ``published.json``)."""
    again = publish(local_rb, tmp_path / "again", chunk_bytes=8192)
    shutil.rmtree(published)
    shutil.copytree(again, published)


def test_a_re_exported_url_leaves_a_stale_copy_that_ls_shows_and_prune_removes(local_rb, tmp_path):
    published = publish(local_rb, tmp_path / "published")
    url = f"file://{published}"
    everything = torch.arange(len(local_rb))
    first = dh.load(url)
    first.storage.wait_complete(120)
    first.storage.close()
    _export_again(local_rb, published, tmp_path)
    second = dh.load(url, resident="lazy")
    assert _same(second[everything], local_rb[everything])
    second.storage.close()

    copies = {c.path: c for c in list_cache().remote}
    assert set(copies) == set(copies_of(url)) and len(copies) == 2
    old, new = copies[first.storage.path], copies[second.storage.path]
    assert old.id == new.id == url and old.complete and not new.complete and old.bytes > 0
    assert old.stale and new.published in old.stale and new.stale is None
    assert new.last_used is not None

    assert [item.path for item in prune(dry_run=True)] == [old.path]
    assert old.path.exists()
    items = prune()
    assert [(item.path, item.skipped) for item in items] == [(old.path, None)]
    assert not old.path.exists() and new.path.exists()
    assert _same(dh.load(url, resident="lazy")[everything], local_rb[everything])  # the current copy, untouched


def test_older_than_prunes_copies_unused_for_that_long(local_rb, tmp_path):
    url = f"file://{publish(local_rb, tmp_path / 'published')}"
    rb = dh.load(url, resident="lazy")
    rb[torch.arange(10)]
    rb.storage.close()
    (copy,) = copies_of(url)
    assert prune(older_than_days=5) == []
    ten_days_ago = time.time() - 10 * 86400
    os.utime(copy / LAST_USED, (ten_days_ago, ten_days_ago))
    (item,) = prune(older_than_days=5)
    assert item.path == copy and "not used for 5 days" in item.reason and not copy.exists()


def test_a_copy_read_while_unfinished_is_never_removed_under_its_reader(local_rb, tmp_path):
    url = f"file://{publish(local_rb, tmp_path / 'published')}"
    rb = dh.load(url, resident="lazy")
    rows = torch.arange(20)
    assert _same(rb[rows], local_rb[rows])
    (copy,) = copies_of(url)
    with pytest.raises(CacheError, match="being read or made by another process"):
        remove(url)
    ten_days_ago = time.time() - 10 * 86400
    os.utime(copy / LAST_USED, (ten_days_ago, ten_days_ago))
    (item,) = prune(older_than_days=5)
    assert item.skipped == "in use by another process" and copy.exists()
    assert _same(rb[rows + 100], local_rb[rows + 100])  # the reader goes on
    rb.storage.close()  # lets go of the copy
    assert remove(url) == [copy] and not copy.exists()


def test_cache_ls_and_cache_rm_name_copies_by_url(local_rb, tmp_path, run):
    url = f"file://{publish(local_rb, tmp_path / 'published')}"
    rb = dh.load(url, resident="lazy")
    rb[torch.arange(5)]
    rb.storage.close()
    (copy,) = copies_of(url)
    code, out, _ = run("cache", "ls")
    assert code == 0 and "local copies of published URLs (1" in out and url in out and "partial" in out
    code, out, _ = run("cache", "du")
    assert code == 0 and "remote" in out
    code, out, _ = run("cache", "rm", url, "--dry-run")
    assert code == 0 and f"would remove local copy {copy}" in out and copy.exists()
    code, out, _ = run("cache", "rm", url)
    assert code == 0 and f"removed local copy {copy}" in out and not copy.exists()
    code, _, err = run("cache", "rm", url)
    assert code != 0 and "no local copy of" in err
    rb = dh.load(url, resident="lazy")  # made again from scratch
    rows = torch.arange(30)
    assert _same(rb[rows], local_rb[rows])
    rb.storage.close()
    code, out, _ = run("rm", url)
    assert code == 0 and str(copy) in out and not copy.exists()
