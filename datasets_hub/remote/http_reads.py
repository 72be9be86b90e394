"""Reads of a published build's files over http(s) (and ``hf://``, read over its https URLs), under the
download layer's rules.

A remote build is read one small file at a time (``published.json``, the manifest, each leaf's zarr
metadata and its chunks), concurrently. Each read follows what :mod:`datasets_hub.downloads.http`
enforces for a download:

- a size cap: nothing past the size ``published.json`` records for the file is accepted (a
  ``Content-Length`` above it is refused before the body is read, a body that runs past it is cut and
  refused), so a server that sends an endless body costs at most that many bytes of memory; files the
  record does not size (itself, the manifest) are capped at :data:`MAX_UNLISTED_BYTES`;
- the minimum rate and the deadline of :func:`datasets_hub.downloads.fetch.download_settings`
  (``DATASETS_HUB_MIN_RATE`` over ``DATASETS_HUB_RATE_WINDOW``, ``DATASETS_HUB_DOWNLOAD_DEADLINE`` per
  file): a server that stalls after its headers fails within one rate window (the socket's read timeout
  is that window), one that trickles fails when the window's bytes fall below the rate;
- bytes as sent (``Accept-Encoding: identity``, never decoded): the sha256 in the record is of them;
- at most ``MAX_REDIRECTS`` http(s) redirects; every URL in an error is redacted.

The reads run on one asyncio loop per process (a daemon thread) through aiohttp, as fsspec's HTTP
filesystem did before them, so that a batch's chunk files are fetched all at once (up to
:data:`CONCURRENCY`); a forked child starts its own loop.

Errors are :class:`~datasets_hub.errors.DownloadError` (a missing file: ``FileNotFoundError``, which the
caller words); the caller retries a failed chunk (:mod:`datasets_hub.remote.chunks`).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import time
from collections.abc import Coroutine, Mapping
from typing import Any

from datasets_hub.downloads.fetch import download_settings
from datasets_hub.downloads.http import CHUNK_SIZE, MAX_REDIRECTS
from datasets_hub.errors import DownloadError, MissingDependency
from datasets_hub.process_locks import ProcessLock
from datasets_hub.redact import redact_text, redact_url

MAX_UNLISTED_BYTES = 256 << 20  # published.json and the manifest: the record sizes neither
CONCURRENCY = 100  # files fetched at once by read_many (aiohttp's own default connection limit)
CONNECT_TIMEOUT = 30.0  # seconds to open a connection
READ_TIMEOUT = 60.0  # seconds without a byte before an attempt fails (at most the rate window when a rate is set)


class _Loop:
    """The process's asyncio loop for remote reads, in a daemon thread, and its aiohttp session."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.session: Any = None
        self.gate: asyncio.Semaphore | None = None
        threading.Thread(target=self.loop.run_forever, name="datasets_hub-remote-reads", daemon=True).start()
        atexit.register(self.close)

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def open_session(self) -> tuple[Any, asyncio.Semaphore]:
        """The session and the gate that bounds the reads in flight (made in the loop, on first use)."""
        import aiohttp

        if self.session is None or self.gate is None:
            # bytes as sent (the record's sha256 is of them); timeouts per read, set on each request
            self.session = aiohttp.ClientSession(
                auto_decompress=False, connector=aiohttp.TCPConnector(limit=CONCURRENCY)
            )
            self.gate = asyncio.Semaphore(CONCURRENCY)
        return self.session, self.gate

    def close(self) -> None:
        if self.session is not None and self.loop.is_running():
            try:
                self.run(self.session.close())
            except RuntimeError:  # the loop is already stopping at interpreter exit
                pass


_loops: dict[int, _Loop] = {}
_loops_lock = ProcessLock()


def _loop() -> _Loop:
    """This process's loop (a forked child never uses its parent's: that thread does not exist in it)."""
    pid = os.getpid()
    with _loops_lock:
        if pid not in _loops:
            _loops.clear()
            _loops[pid] = _Loop()
        return _loops[pid]


class HttpFiles:
    """The files under one http(s) folder ``root``; ``shown`` is its URL without secrets."""

    def __init__(self, root: str, shown: str, headers: Mapping[str, str] | None = None) -> None:
        import importlib.util

        if importlib.util.find_spec("aiohttp") is None:
            raise MissingDependency("loading a build over HTTP needs aiohttp: pip install 'datasets-hub[remote]'")
        self.root = root.rstrip("/")
        self.shown = shown
        # sent with every read (a Hugging Face token); aiohttp drops Authorization on a redirect to another origin
        self.headers = dict(headers or {})

    def read(self, relpath: str, max_bytes: int | None = None) -> bytes:
        """The bytes of ``relpath``, at most ``max_bytes`` (default :data:`MAX_UNLISTED_BYTES`); a missing file
        is ``FileNotFoundError``, any other failure a :class:`DownloadError`."""
        loop = _loop()
        return loop.run(self._read(loop, relpath, max_bytes))

    def read_many(self, relpaths: list[str], limits: Mapping[str, int] | None = None) -> dict[str, bytes | Exception]:
        """Every file of ``relpaths``, all at once (at most :data:`CONCURRENCY` in flight), each capped at its
        ``limits`` entry; a failure is returned as the file's value, never raised."""
        loop = _loop()
        limits = limits or {}

        async def every() -> list[Any]:
            return await asyncio.gather(*(self._read(loop, p, limits.get(p)) for p in relpaths), return_exceptions=True)

        out: dict[str, bytes | Exception] = {}
        for relpath, value in zip(relpaths, loop.run(every()), strict=True):
            if isinstance(value, (DownloadError, FileNotFoundError, bytes)):
                out[relpath] = value
            elif isinstance(value, BaseException):
                raise value  # a bug, or KeyboardInterrupt: not a failed read
        return out

    async def _read(self, loop: _Loop, relpath: str, max_bytes: int | None) -> bytes:
        import aiohttp

        limit = MAX_UNLISTED_BYTES if max_bytes is None else int(max_bytes)
        shown = f"{self.shown}/{relpath}"
        settings = download_settings()  # at each read, as every download does
        min_rate, window, deadline = (settings[k] for k in ("min_rate", "rate_window", "deadline"))
        read_timeout = min(READ_TIMEOUT, window) if min_rate else READ_TIMEOUT
        timeout = aiohttp.ClientTimeout(total=deadline or None, sock_connect=CONNECT_TIMEOUT, sock_read=read_timeout)
        session, gate = await loop.open_session()
        started = time.monotonic()
        try:
            async with (
                gate,
                session.get(
                    f"{self.root}/{relpath}",
                    headers={**self.headers, "Accept-Encoding": "identity"},
                    timeout=timeout,
                    max_redirects=MAX_REDIRECTS,
                ) as resp,
            ):
                if resp.status == 404:
                    raise FileNotFoundError(shown)
                if resp.status >= 400:
                    raise DownloadError(f"{redact_url(shown)} answered HTTP {resp.status}")
                if resp.content_length is not None and resp.content_length > limit:
                    raise DownloadError(
                        f"{redact_url(shown)} announces {resp.content_length:,} bytes, more than the {limit:,} its "
                        "publishing record allows; the server is broken or hostile"
                    )
                parts: list[bytes] = []
                have = 0
                window_start, window_bytes = time.monotonic(), 0  # the rate counts from the headers, as downloads do
                async for block in resp.content.iter_chunked(CHUNK_SIZE):
                    have += len(block)
                    if have > limit:
                        raise DownloadError(
                            f"{redact_url(shown)} sent more than the {limit:,} bytes its publishing record allows; "
                            "nothing past them is kept: the server is broken or hostile"
                        )
                    parts.append(block)
                    window_bytes += len(block)
                    now = time.monotonic()
                    if min_rate and now - window_start >= window:
                        if window_bytes < min_rate * (now - window_start):
                            raise DownloadError(
                                f"{redact_url(shown)} sent {window_bytes} bytes in {now - window_start:.1f} s, below "
                                f"the minimum of {min_rate:g} bytes/s (DATASETS_HUB_MIN_RATE over "
                                f"DATASETS_HUB_RATE_WINDOW={window:g} s); check the network, or lower "
                                "DATASETS_HUB_MIN_RATE (0 disables it)"
                            )
                        window_start, window_bytes = now, 0
                return b"".join(parts)
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            if deadline and time.monotonic() - started >= deadline:
                why = f"it took more than {deadline:g} s (DATASETS_HUB_DOWNLOAD_DEADLINE)"
            else:
                why = f"no byte for {read_timeout:g} s (DATASETS_HUB_RATE_WINDOW / the read timeout)"
            raise DownloadError(f"could not read {redact_url(shown)}: {why}") from None
        except aiohttp.ClientError as exc:
            raise DownloadError(
                f"could not read {redact_url(shown)}: {type(exc).__name__}: {redact_text(str(exc))}"
            ) from None
