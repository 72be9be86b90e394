"""One HTTP(S) download into a ``.partial`` file, resumable and bounded (used by :mod:`datasets_hub.downloads.fetch`).

The contract of :func:`http_download`:

- Bytes are stored exactly as sent: ``Accept-Encoding: identity`` is asked for and a
  ``Content-Encoding`` the server applies anyway is never decoded (sizes and hashes are of the
  bytes on the wire; a 49 KiB gzip body can never become 50 MiB on disk).
- Nothing is written past the declared size (``Content-Length``/``Content-Range``, else the
  catalogue's ``size``): a server that sends more is refused, its bytes dropped.
- A resume (after a dropped connection, or of a ``.partial`` left by a killed process) sends
  ``Range`` with ``If-Range`` carrying the validator of the first response (a strong ``ETag``, else
  ``Last-Modified``), kept beside the partial in ``<dest>.validator``. A server whose validator
  changed answers the whole new file (200) or is caught by comparing validators, and the download
  restarts from zero: a file that changed upstream is never spliced. Without a validator there is
  no resume: the download starts again from byte zero.
- A minimum throughput over a sliding window and a total deadline (:func:`datasets_hub.downloads.fetch.download_settings`)
  stop a server that trickles bytes forever; the ``.partial`` is kept for the next attempt.
- Cache files are opened with ``O_NOFOLLOW`` (:func:`datasets_hub.files.open_nofollow`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from datasets_hub.errors import DownloadError
from datasets_hub.files import hash_file, human_bytes, open_nofollow
from datasets_hub.redact import redact_text, redact_url

CHUNK_SIZE = 1 << 20  # bytes per read and write
MAX_REDIRECTS = 10  # http(s) redirects followed per request

if TYPE_CHECKING:
    from datasets_hub.loader import Resource

__all__ = ["MAX_REDIRECTS", "Progress", "http_download", "name_resolution_failed"]


# ---------------------------------------------------------------------------------------- progress
class Progress:
    """A tqdm bar on a terminal; on a non-terminal stderr, one line every ``interval`` seconds
    (and at the end), so logs of batch jobs show a download is alive; ``show=False``: silent."""

    def __init__(self, name: str, total: int | None, show: bool | None, interval: float) -> None:
        tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
        self.is_bar = bool(show) if show is not None else tty
        self.lines = show is None and not tty
        self.name, self.total, self.interval = name, total, interval
        self.n, self.url, self._bar = 0, "", None
        self._last = self._t0 = time.monotonic()

    def __enter__(self) -> Progress:
        if self.is_bar:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=self.total, unit="B", unit_scale=True, unit_divisor=1024, desc=self.name, leave=False
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()

    def start(self, url: str, *, announce: bool = True) -> None:
        """Begin ``url``; ``announce=False`` (an instant local copy) prints no line before the last."""
        self.url = url
        if announce:
            self._line("downloading")

    def reset(self, total: int | None = None) -> None:
        self.total, self.n = total if total is not None else self.total, 0
        if self._bar is not None:
            self._bar.reset(total=self.total)

    def update(self, n: int) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.lines and time.monotonic() - self._last >= self.interval:
            self._line("downloading")

    def done(self, verb: str = "downloaded") -> None:
        self._line(verb)

    def _line(self, verb: str) -> None:
        if not self.lines:
            return
        self._last = now = time.monotonic()
        of = f" of {human_bytes(self.total)}" if self.total else ""
        rate = self.n / max(now - self._t0, 1e-9)
        print(
            f"datasets_hub: {verb} {self.name} from {self.url}: {human_bytes(self.n)}{of} ({human_bytes(rate)}/s)",
            file=sys.stderr,
            flush=True,
        )


# ---------------------------------------------------------------------------------------- helpers
class _Retry(Exception):
    """A transient failure of one attempt (5xx, 429, dropped connection, timeout); ``restart``:
    the partial file cannot be resumed and the next attempt starts from byte zero."""

    def __init__(self, message: str, restart: bool = False) -> None:
        super().__init__(message)
        self.restart = restart


def _status_message(url: str, status: int, resource: Resource) -> str:
    url = redact_url(url)
    if status == 404:
        return (
            f"{resource.name}: {url} answered 404: file not found upstream: check the id or point "
            f"DATASETS_HUB_ENDPOINT_<LOADER> at a mirror."
        )
    if status in (401, 403):
        return (
            f"{resource.name}: {url} answered {status} (access denied): the file is private, gated or "
            f"moved; check the URL or use a mirror (DATASETS_HUB_ENDPOINT_<LOADER>)."
        )
    return f"{resource.name}: {url} answered HTTP {status}; check the URL or use a mirror."


def _open(session: Any, url: str, headers: dict[str, str], timeout: float, resource: Resource) -> Any:
    """GET ``url`` following at most MAX_REDIRECTS http(s) redirects; return a 2xx/416 response."""

    chain = [url]
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        resp = session.get(current, headers=headers, stream=True, timeout=timeout, allow_redirects=False)
        if resp.is_redirect:
            location = urljoin(current, resp.headers["Location"])
            resp.close()
            if urlsplit(location).scheme.lower() not in ("http", "https"):
                raise DownloadError(
                    f"{resource.name}: {redact_url(current)} redirects to {redact_url(location)}; only "
                    f"http and https redirects are followed. Use a direct http(s) URL or a mirror."
                )
            if location in chain:
                raise DownloadError(
                    f"{resource.name}: redirect loop: "
                    f"{' -> '.join(redact_url(u) for u in [*chain, location])}; the server is "
                    f"misconfigured, use a mirror (DATASETS_HUB_ENDPOINT_<LOADER>)."
                )
            chain.append(location)
            current = location
            continue
        if resp.status_code == 429 or resp.status_code >= 500:
            resp.close()
            raise _Retry(f"HTTP {resp.status_code} from {redact_url(current)}")
        if resp.status_code >= 400 and resp.status_code != 416:
            resp.close()
            raise DownloadError(_status_message(current, resp.status_code, resource))
        return resp
    raise DownloadError(
        f"{resource.name}: more than {MAX_REDIRECTS} redirects from {redact_url(url)}; use a direct URL."
    )


def _parse_content_range(value: str | None) -> tuple[int, int | None] | None:
    m = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", value or "")
    if not m:
        return None
    return int(m.group(1)), None if m.group(3) == "*" else int(m.group(3))


def _body(resp: Any) -> Any:
    """The response body as sent (never Content-Encoding-decoded), in blocks of at most CHUNK_SIZE,
    each yielded as soon as it arrives (``read1``: a connection dropped after 900 KiB of a 1 MiB
    block keeps those 900 KiB)."""

    raw = resp.raw
    import urllib3.exceptions

    read = raw.read1 if hasattr(raw, "read1") else raw.read  # urllib3 < 2 has no read1
    while True:
        try:
            block = read(CHUNK_SIZE, decode_content=False)
        except urllib3.exceptions.HTTPError as exc:  # dropped connection, read timeout, bad chunking
            raise _Retry(f"{type(exc).__name__}: {exc}") from exc
        if not block:
            return
        yield block


def _validator_of(resp: Any) -> dict[str, str | None]:
    """What If-Range can carry for this response: a strong ETag and/or Last-Modified."""
    etag = resp.headers.get("ETag")
    if etag and etag.startswith("W/"):
        etag = None  # weak validators are not allowed in If-Range
    return {"etag": etag or None, "last_modified": resp.headers.get("Last-Modified") or None}


def _read_validator(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_validator(path: Path, validator: dict[str, Any]) -> None:

    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open_nofollow(tmp) as fh:
        fh.write(json.dumps(validator).encode())
    os.replace(tmp, path)


def _if_range(validator: dict[str, Any] | None) -> str | None:
    if not validator:
        return None
    return validator.get("etag") or validator.get("last_modified")


# ---------------------------------------------------------------------------------------- download
def http_download(
    url: str,
    partial: Path,
    resource: Resource,
    *,
    timeout: float,
    retries: int,
    bar: Any,
    settings: dict[str, float],
    started: float,
    source: str,
    backoff: Callable[[int], float],
    sleep: Callable[[float], None],
) -> tuple[str, int]:
    """Download ``url`` into ``partial`` (resuming what is there when its validator allows);
    return (sha256, size). See the module docstring."""
    import requests

    shown = redact_url(url)
    validator_path = partial.with_name(partial.name[: -len(".partial")] + ".validator")
    have = partial.stat().st_size if partial.exists() else 0
    validator = _read_validator(validator_path) if have else None
    if have and (validator is None or validator.get("source") != source or not _if_range(validator)):
        have = 0  # no validator: resuming could splice two versions of the file
        partial.unlink(missing_ok=True)
    hasher = hash_file(partial, have) if have else hashlib.sha256()  # a resumed partial is rehashed once
    best, failures, last = have, 0, ""
    announced: int | None = None  # the first total size the server stated: a later, smaller one is not trusted
    min_rate, window, deadline = settings["min_rate"], settings["rate_window"], settings["deadline"]
    with requests.Session() as session:
        while True:
            headers = {"Accept-Encoding": "identity"}  # sizes and hashes are of the bytes on the wire
            if have:
                headers["Range"] = f"bytes={have}-"
                headers["If-Range"] = str(_if_range(validator))
            try:
                with _open(session, url, headers, timeout, resource) as resp:
                    total: int | None = None
                    if resp.status_code == 206:
                        rng = _parse_content_range(resp.headers.get("Content-Range"))
                        if rng is None or rng[0] != have:
                            raise _Retry(f"bad Content-Range {resp.headers.get('Content-Range')!r}", restart=True)
                        now = _validator_of(resp)
                        if any(
                            now[k] and validator and validator.get(k) and now[k] != validator[k]
                            for k in ("etag", "last_modified")
                        ):
                            raise _Retry(
                                "the file changed upstream since the first bytes (validator "
                                f"{_if_range(validator)!r} -> {now['etag'] or now['last_modified']!r})",
                                restart=True,
                            )
                        total = rng[1]
                    elif resp.status_code == 416:
                        m = re.fullmatch(r"\s*bytes\s+\*/(\d+)\s*", resp.headers.get("Content-Range", ""))
                        if m and int(m.group(1)) == have and announced in (None, have):
                            return hasher.hexdigest(), have  # the partial was complete (killed before rename)
                        raise _Retry("HTTP 416 for a resumed download", restart=True)  # not a prefix
                    else:  # 200: the whole file (a changed validator, or a server ignoring Range)
                        if have:
                            have, hasher = 0, hashlib.sha256()
                            partial.unlink(missing_ok=True)
                        length = resp.headers.get("Content-Length")
                        total = int(length) if length and length.isdigit() else None
                        validator = {**_validator_of(resp), "source": source, "url": shown}
                        _write_validator(validator_path, validator)
                    if announced is None:
                        announced = total
                    if total is not None and resource.size is not None and total != resource.size:
                        partial.unlink(missing_ok=True)
                        raise DownloadError(
                            f"{resource.name}: {shown} announces {total} bytes, the catalogue says "
                            f"{resource.size}; the upstream file changed or the mirror is wrong."
                        )
                    limit = total if total is not None else resource.size
                    bar.reset(total=limit)
                    bar.update(have)
                    window_start, window_bytes = time.monotonic(), 0
                    with open_nofollow(partial, "ab") as out:
                        for block in _body(resp):
                            if limit is not None and have + len(block) > limit:
                                out.truncate(limit)
                                raise _Refused(
                                    f"{resource.name}: {shown} sent more than the {limit} bytes "
                                    f"declared ({'Content-Length' if total is not None else 'catalogue size'})"
                                    "; the server is broken or hostile: nothing past the declared size is "
                                    "kept. Use a mirror (DATASETS_HUB_ENDPOINT_<LOADER>).",
                                    drop=True,
                                )
                            out.write(block)
                            hasher.update(block)
                            have += len(block)
                            window_bytes += len(block)
                            bar.update(len(block))
                            now_t = time.monotonic()
                            if deadline and now_t - started > deadline:
                                raise _Refused(_deadline_message(resource, shown, deadline, have, partial))
                            if min_rate and now_t - window_start >= window:
                                if window_bytes < min_rate * (now_t - window_start):
                                    raise _Refused(
                                        f"{resource.name}: {shown} sent {window_bytes} bytes in the last "
                                        f"{now_t - window_start:.0f} s, below the minimum of {min_rate:g} bytes/s "
                                        f"(DATASETS_HUB_MIN_RATE, over DATASETS_HUB_RATE_WINDOW={window:g} s); {have} "
                                        f"bytes are kept in {partial} and the next attempt resumes. Check the "
                                        "network, use a mirror, or lower DATASETS_HUB_MIN_RATE (0 disables it)."
                                    )
                                window_start, window_bytes = now_t, 0
                    if total is not None and have < total:
                        raise _Retry(f"connection closed after {have} of {total} bytes")
                    return hasher.hexdigest(), have
            except _Refused as exc:
                if exc.drop:
                    partial.unlink(missing_ok=True)
                    validator_path.unlink(missing_ok=True)
                raise DownloadError(str(exc)) from None
            except (
                _Retry,
                requests.ConnectionError,
                requests.Timeout,
                requests.exceptions.ChunkedEncodingError,
                requests.exceptions.ContentDecodingError,
            ) as exc:
                last = redact_text(str(exc) or type(exc).__name__)
                if name_resolution_failed(exc):  # no DNS (no network): retrying cannot help, say so at once
                    raise DownloadError(
                        f"{resource.name}: cannot resolve the host {urlsplit(url).hostname or shown!r} of {shown}: no "
                        "network or no DNS here. Working offline? Set DATASETS_HUB_OFFLINE=1 to use only the cache (a "
                        "missing dataset is then a clear error at once). Behind a firewall? Point "
                        "DATASETS_HUB_ENDPOINT_<LOADER> (or HF_ENDPOINT) at a mirror you can reach."
                    ) from None
                if isinstance(exc, _Retry) and exc.restart:
                    have, hasher = 0, hashlib.sha256()  # start over: the partial cannot be resumed
                    partial.unlink(missing_ok=True)
                if have > best:  # progress: a flaky but working connection keeps going
                    best, failures = have, 0
                else:
                    failures += 1
                if failures > retries:
                    raise DownloadError(
                        f"{resource.name}: giving up on {shown} after {retries} retries without progress "
                        f"(last error: {last}); {have} bytes are kept in {partial} and the next attempt "
                        f"resumes. Check the network or use a mirror (DATASETS_HUB_ENDPOINT_<LOADER>)."
                    ) from None
                pause = backoff(failures)
                if deadline and time.monotonic() + pause - started > deadline:
                    raise DownloadError(_deadline_message(resource, shown, deadline, have, partial)) from None
                sleep(pause)
            except requests.RequestException as exc:  # invalid URL, too many redirects…: not transient
                raise DownloadError(f"{resource.name}: cannot download {shown}: {redact_text(str(exc))}") from None


def name_resolution_failed(exc: BaseException) -> bool:
    """Whether ``exc`` (a requests error) comes from a failed DNS lookup (``socket.gaierror``)."""
    import socket

    seen: set[int] = set()
    stack: list[object] = [exc]
    while stack:
        err = stack.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, socket.gaierror) or type(err).__name__ == "NameResolutionError":
            return True
        if isinstance(err, BaseException):
            stack += [err.__cause__, err.__context__, getattr(err, "reason", None), *err.args]
    return False


class _Refused(Exception):
    """An attempt that must not be retried on this mirror (too slow, past the deadline, too long)."""

    def __init__(self, message: str, drop: bool = False) -> None:
        super().__init__(message)
        self.drop = drop


def _deadline_message(resource: Resource, shown: str, deadline: float, have: int, partial: Path) -> str:
    return (
        f"{resource.name}: {shown} did not finish within the deadline of {deadline:g} s "
        f"(DATASETS_HUB_DOWNLOAD_DEADLINE); {have} bytes are kept in {partial} and the next attempt resumes. "
        "Use a faster mirror or raise the deadline (0 disables it)."
    )
