"""Resumable builds (datasets_hub.build.resume) on a LeRobot v3.0 dataset read from a local root (3 episodes
of 5, 8 and 3 frames, 2 AV1 cameras, the global frame index drawn into every frame): a build interrupted after
two episodes (an exception in the loader, or kill -9) resumes without decoding them again, and equals an
uninterrupted build byte for byte; a checkpoint its files disagree with starts the build over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import datasets_hub
from datasets_hub.build import resume
from datasets_hub.build.format import MANIFEST
from datasets_hub.errors import CorruptFile, LoaderError
from datasets_hub.loaders.lerobot import loader as lr

from fixtures import lerobot_writer as lw

os.environ.setdefault("SVT_LOG", "1")
ID = "lerobot/local/koch"
STOP_AT = 2  # the episode whose conversion is interrupted: episodes 0 and 1 are done by then


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("koch")
    lw.write_dataset(folder, lw.Spec())
    return folder


class Trial:
    """The loader watched and steered: ``decoded`` lists the episodes submitted for decoding, in order;
    ``stop_at`` (an episode index, or None) makes its conversion fail. Every chunk is checkpointed."""

    def __init__(self, monkeypatch) -> None:
        self.decoded: list[int] = []
        self.stop_at: int | None = None
        monkeypatch.setattr(resume, "CHECKPOINT_EVERY_S", 0.0)
        submit, chunk = lr._Converter._submit, lr._Converter._chunk

        def counting(converter, pool, episode, rows, scratch):
            self.decoded.append(episode.index)
            return submit(converter, pool, episode, rows, scratch)

        def failing(converter, episode, rows, frames):
            if episode.index == self.stop_at:
                raise RuntimeError(f"injected failure at episode {episode.index}")
            return chunk(converter, episode, rows, frames)

        monkeypatch.setattr(lr._Converter, "_submit", counting)
        monkeypatch.setattr(lr._Converter, "_chunk", failing)

    def interrupted(self, root: Path, **params) -> Path:
        """Build until episode STOP_AT fails; the staging folder it leaves."""
        self.stop_at = STOP_AT
        with pytest.raises(LoaderError, match=f"injected failure at episode {STOP_AT}"):
            build(root, **params)
        self.stop_at = None
        staged = [p for p in Path(os.environ["DATASETS_HUB_CACHE"]).rglob("*.incomplete") if p.is_dir()]
        assert len(staged) == 1
        return staged[0]


@pytest.fixture
def trial(monkeypatch) -> Trial:
    return Trial(monkeypatch)


def build(root: Path, **params) -> Path:
    return Path(datasets_hub.load(ID, root=str(root), num_workers=1, **params).storage.path)


def same_build(a: Path, b: Path) -> None:
    """Equal manifests (but for when and how long) and equal bytes in every other file."""
    ma, mb = (json.loads((p / MANIFEST).read_text()) for p in (a, b))
    for m in (ma, mb):
        for varying in ("created", "build_seconds"):
            m.pop(varying)
    assert ma == mb
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files:
        if rel.name not in (MANIFEST, "manifest.sha256"):  # the manifest holds the build time
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def uninterrupted(root: Path, tmp_path: Path, monkeypatch, trial: Trial, **params) -> Path:
    """The same build made in one go in a cache of its own (every episode decoded once)."""
    monkeypatch.setenv("DATASETS_HUB_CACHE", str(tmp_path / "uninterrupted-cache"))
    trial.decoded.clear()
    whole = build(root, **params)
    assert trial.decoded == [0, 1, 2]
    return whole


@pytest.mark.parametrize("frames", ["raw", "jpeg"])
def test_an_interrupted_build_resumes_without_redoing_finished_episodes(root, tmp_path, monkeypatch, trial, frames):
    staged = trial.interrupted(root, frames=frames)
    assert trial.decoded == [0, 1, 2]
    assert resume.has_checkpoint(staged) and not (staged / MANIFEST).exists()  # nothing half-built is served
    assert not staged.with_name(staged.name.removesuffix(".incomplete")).exists()

    trial.decoded.clear()
    resumed = build(root, frames=frames)
    assert trial.decoded == [STOP_AT]  # episodes 0 and 1 come from the checkpoint, not from the videos again
    assert not staged.exists() and not (resumed / resume.CHECKPOINT).exists()
    same_build(resumed, uninterrupted(root, tmp_path, monkeypatch, trial, frames=frames))


def test_a_checkpoint_its_files_disagree_with_starts_over(root, tmp_path, monkeypatch, trial):
    staged = trial.interrupted(root)
    leaf = next(p for p in sorted((staged / "data").rglob("*.memmap")) if p.stat().st_size)
    damaged = bytearray(leaf.read_bytes())
    damaged[0] ^= 0xFF  # what a power loss or an edit could leave
    leaf.write_bytes(bytes(damaged))
    trial.decoded.clear()
    resumed = build(root)
    assert trial.decoded == [0, 1, 2]  # nothing is trusted from the damaged staging folder
    same_build(resumed, uninterrupted(root, tmp_path, monkeypatch, trial))


def test_force_starts_over(root, trial):
    trial.interrupted(root)
    trial.decoded.clear()
    datasets_hub.download(ID, root=str(root), num_workers=1, force=True)
    assert trial.decoded == [0, 1, 2]


def test_a_corrupt_source_drops_the_staging_folder(root, trial, monkeypatch):
    staged = trial.interrupted(root)
    monkeypatch.setattr(lr._Converter, "_chunk", lambda *a: (_ for _ in ()).throw(CorruptFile("damaged video")))
    with pytest.raises(CorruptFile):
        build(root)
    assert not staged.exists()


_KILLED_BUILD = """
import os, signal, sys
from datasets_hub.build import resume
from datasets_hub.loaders.lerobot import loader as lr
import datasets_hub

resume.CHECKPOINT_EVERY_S = 0.0
chunk = lr._Converter._chunk
def killing(self, episode, rows, frames):
    if episode.index == {stop}:
        os.kill(os.getpid(), signal.SIGKILL)
    return chunk(self, episode, rows, frames)
lr._Converter._chunk = killing
datasets_hub.load({id!r}, root=sys.argv[1], num_workers=2, frames="jpeg")
"""


@pytest.mark.slow  # a kill -9 trial: make test-faults runs it
def test_a_killed_build_resumes(root, tmp_path, monkeypatch, trial):
    """Killed with two decoding processes: they end with the build (else they would hold its output pipes
    open and ``run`` would never return), and the build resumes."""
    run = subprocess.run(
        [sys.executable, "-c", _KILLED_BUILD.format(stop=STOP_AT, id=ID), str(root)],
        env=os.environ,
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr.decode()
    resumed = build(root, frames="jpeg")
    assert trial.decoded == [STOP_AT]
    same_build(resumed, uninterrupted(root, tmp_path, monkeypatch, trial, frames="jpeg"))


def test_prune_keeps_a_resumable_build_and_names_its_progress(root, trial, run):
    from datasets_hub.cache import maintenance as mt

    staged = trial.interrupted(root)
    code, out, _ = run("cache", "prune")
    assert code == 0 and staged.exists() and resume.has_checkpoint(staged)
    assert f"kept         {staged} (resumable build: {STOP_AT} episode(s) done, last checkpoint " in out
    assert "loading the dataset again resumes it (`--drop-resumable` removes it)" in out
    assert "removed 0 item(s)" in out and "kept 1 resumable build(s)" in out
    assert "unfinished build" not in out

    assert mt.prune(older_than_days=1)[0].kept and staged.exists()  # checkpointed seconds ago
    saved = (staged / resume.CHECKPOINT).stat().st_mtime
    os.utime(staged / resume.CHECKPOINT, (saved - 3 * 86400, saved - 3 * 86400))  # no progress for 3 days
    [old] = mt.prune(older_than_days=2, dry_run=True)
    assert not old.kept and old.skipped is None and "older than the --older-than age" in old.reason and staged.exists()

    code, out, _ = run("cache", "prune", "--drop-resumable")
    assert code == 0 and not staged.exists() and f"removed      {staged} (resumable build: {STOP_AT} episode" in out
    trial.decoded.clear()
    build(root)
    assert trial.decoded == [0, 1, 2]  # the resume was given up: every episode is decoded again


def test_prune_removes_a_staging_folder_no_build_could_resume(root, trial, monkeypatch, run):
    staged = trial.interrupted(root)
    monkeypatch.setattr(resume, "__version__", "0.0.0-another")  # a checkpoint of another hub version
    code, out, _ = run("cache", "prune")
    assert code == 0 and not staged.exists() and f"removed      {staged} (unfinished build (its process died)" in out
