"""How preprocessing cuts a buffer into chunks, and the probe that checks ``fn`` may be chunked so.

Two modes (``by=``):

- ``"row"``: chunks of ``chunk_size`` consecutive transitions, cut anywhere. Correct only for a
  row-wise ``fn`` (row ``i`` of the output depends on input row ``i`` alone). Before anything is
  computed, :func:`check_row_wise` runs ``fn`` on a few probe windows once whole and once split
  in two; different outputs mean ``fn`` is not row-wise, and preprocessing refuses (pointing to
  ``by="episode"``) instead of writing values that depend on where chunks happen to fall.
- ``"episode"``: chunks are cut on episode starts only, so ``fn`` sees whole episodes (an episode
  longer than ``chunk_size`` is a chunk of its own). :func:`check_episode_wise` checks that
  ``fn``'s output for an episode does not depend on the other episodes in its chunk.

A function may declare its mode with a ``by`` attribute (``ReturnToGo.by == "episode"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from datasets_hub.buffers.episode_index import EpisodeIndex
from datasets_hub.errors import InvalidParameter, PreprocessError

MODES = ("row", "episode")
PROBE_WINDOW = 64  # rows per probe window of the row-wise check
Rows = Callable[[int, int], TensorDictBase]


def resolve_mode(fn: Callable, by: str | None, fn_name: str) -> str:
    """``by``, else what ``fn`` declares (``fn.by``), else ``"row"``; a conflict is an error."""
    declared = getattr(fn, "by", None)
    if declared is not None and declared not in MODES:
        declared = None  # an unrelated attribute that happens to be called `by`
    if by is None:
        return declared or "row"
    if by not in MODES:
        from datasets_hub.errors import did_you_mean

        raise InvalidParameter(f"by must be 'row' or 'episode', got {by!r}." + did_you_mean(str(by), MODES))
    if declared == "episode" and by == "row":
        raise InvalidParameter(
            f"{fn_name} works on whole episodes (its by = 'episode'); it cannot run with by='row', "
            "where chunks cut episodes. Leave by unset or pass by='episode'"
        )
    return by


def episode_index_of(rb: Any) -> EpisodeIndex:
    """The buffer's episodes (its storage's index, else derived from ``episode`` ids or done flags)."""
    from datasets_hub.buffers.episodes import episode_index_of as derive

    try:
        return derive(rb.storage, len(rb))
    except InvalidParameter as exc:
        raise InvalidParameter(f"preprocess(by='episode') needs episode boundaries: {exc}") from None


def row_chunks(n: int, chunk_size: int) -> list[tuple[int, int]]:
    return [(a, min(a + chunk_size, n)) for a in range(0, n, chunk_size)]


def episode_chunks(index: EpisodeIndex, n: int, chunk_size: int) -> list[tuple[int, int]]:
    """Chunks of about ``chunk_size`` rows cut only where an episode starts (or at ``n``)."""
    cuts = torch.cat([index.start[index.start > 0], torch.tensor([n])]).unique()
    chunks, a = [], 0
    while a < n:
        fit = int(torch.searchsorted(cuts, torch.tensor(a + chunk_size), right=True)) - 1
        b = (
            int(cuts[fit])
            if fit >= 0 and int(cuts[fit]) > a
            else int(cuts[int(torch.searchsorted(cuts, torch.tensor(a), right=True))])
        )
        chunks.append((a, b))
        a = b
    return chunks


def _differs(one: TensorDictBase, parts: list[TensorDictBase]) -> str | None:
    """The first key whose values differ between ``one`` and the concatenated ``parts`` (None: equal)."""
    for key in one.keys(include_nested=True, leaves_only=True):
        whole = one.get(key)
        try:
            split = torch.cat([p.get(key) for p in parts])
        except (KeyError, RuntimeError, TypeError):
            return "/".join(key) if isinstance(key, tuple) else key
        if whole.shape != split.shape or whole.dtype != split.dtype:
            return "/".join(key) if isinstance(key, tuple) else key
        if whole.is_floating_point() or whole.is_complex():
            same = torch.allclose(whole, split, rtol=1e-5, atol=1e-6, equal_nan=True)  # BLAS blocking may differ
        else:
            same = torch.equal(whole, split)
        if not same:
            return "/".join(key) if isinstance(key, tuple) else key
    return None


def _call(fn: Callable, rows: Rows, a: int, b: int, fn_name: str) -> Any:
    try:
        return fn(rows(a, b))
    except Exception as exc:
        raise PreprocessError(
            f"{fn_name} failed on transitions [{a}, {b}) (the probe): {type(exc).__name__}: {exc}"
        ) from exc


def row_probe_windows(n: int) -> list[tuple[int, int]]:
    """The row ranges :func:`check_row_wise` runs fn on (each whole, then split in two): one at the
    start and one in the middle of the buffer, ``PROBE_WINDOW`` rows each."""
    width = min(n, PROBE_WINDOW)
    if width < 2:
        return []
    return [(a, a + width) for a in sorted({0, max(0, n // 2 - width // 2)})]


def probe_calls(n: int, by: str = "row", episodes: int = 2) -> int:
    """How many times preprocessing calls fn before the first chunk (schema probe + checks)."""
    if by == "episode":
        return 1 + (3 if episodes >= 2 else 0)
    return 1 + 3 * len(row_probe_windows(n))


def check_row_wise(fn: Callable, rows: Rows, n: int, fn_name: str) -> None:
    """Run ``fn`` on the probe windows whole and split in two; refuse if the outputs differ."""
    for a, b in row_probe_windows(n):
        m = (a + b) // 2
        one = _call(fn, rows, a, b, fn_name)
        parts = [_call(fn, rows, a, m, fn_name), _call(fn, rows, m, b, fn_name)]
        if not all(isinstance(x, TensorDictBase) for x in [one, *parts]):
            return  # the schema check that follows explains what fn must return
        key = _differs(one, parts)
        if key is not None:
            raise PreprocessError(
                f"{fn_name} is not row-wise: on transitions [{a}, {b}) its output {key!r} changed when the rows "
                f"were passed as one chunk and as two ([{a}, {m}) + [{m}, {b})). preprocess maps fn over chunks "
                "whose boundaries fall anywhere, so the result would depend on the chunking. If fn works on whole "
                "episodes (returns-to-go, per-episode statistics), pass by='episode': rb.preprocess(fn, "
                "by='episode') or load(id, preprocess=fn, preprocess_by='episode'). If fn is random, make it "
                "deterministic (e.g. seed it from td['episode'] and td['step'])"
            )


def check_episode_wise(fn: Callable, rows: Rows, chunks: list[tuple[int, int]], fn_name: str) -> None:
    """Run ``fn`` on the first two single-episode chunks together and apart; refuse if they differ."""
    if len(chunks) < 2:
        return
    (a, m), (_, b) = chunks[0], chunks[1]
    one = _call(fn, rows, a, b, fn_name)
    parts = [_call(fn, rows, a, m, fn_name), _call(fn, rows, m, b, fn_name)]
    if not all(isinstance(x, TensorDictBase) for x in [one, *parts]):
        return
    key = _differs(one, parts)
    if key is not None:
        raise PreprocessError(
            f"{fn_name} is not episode-wise: its output {key!r} for the episodes in transitions [{a}, {m}) and "
            f"[{m}, {b}) changed when they were passed in one chunk rather than apart. With by='episode' fn gets "
            "whole episodes, several per chunk; its output for an episode must depend on that episode alone"
        )


def single_episode_chunks(index: EpisodeIndex, n: int) -> list[tuple[int, int]]:
    """The first two chunks holding one episode each (for the probe of ``by='episode'``)."""
    return episode_chunks(index, n, 1)[:2]
