"""Fetching upstream files into ``<cache>/raw/<loader>/``: once, resumably, checksummed.

The contract of :func:`fetch`:

- A file already at ``dest`` is used without any network when it is verified: its size matches the
  catalogue's, and its sha256 matches the catalogue's (or, without one, the sha256 recorded at
  first download). The check is cheap: the sidecar ``<dest>.sha256`` (JSON ``{sha256, size, url,
  downloaded_at, mtime_ns}``) vouches for a file whose size and mtime are unchanged; anything else
  is rehashed once. :func:`verify_file` always rehashes (``datasets-hub verify``).
- Sources (``Resource.urls``) are mirrors tried in order: ``http(s)://``, ``file://`` (a local
  copy, streamed and hashed) and ``hf://<repo_type>s/<repo_id>/<path>[@<revision>]`` (the Hugging
  Face Hub through ``huggingface_hub``, see :mod:`datasets_hub.downloads.huggingface`).
- HTTP(S): streamed in 1 MiB chunks to ``<dest>.partial``; after a dropped connection or a read
  timeout the download resumes with ``Range: bytes=<have>-`` (a 200 answer restarts from zero); a
  partial left by a killed process is resumed too (rehashed first). Connection errors, timeouts,
  429 and 5xx are retried with exponential backoff, up to ``retries`` consecutive failures that
  brought no new bytes; other 4xx fail that mirror at once. Body bytes are written as they arrive
  (a dropped connection loses none of them), and a server that first announces a size and later
  claims the file is shorter is not believed. Redirects are followed (at most
  :data:`MAX_REDIRECTS`, http/https only, loops refused).
- The declared and received sizes are checked against the catalogue's ``size``, the sha256
  (computed while streaming) against the catalogue's ``sha256``: a mismatch raises
  :class:`~datasets_hub.errors.ChecksumMismatch` and the bad bytes go to ``<dest>.corrupt``
  (never reused, never left at ``dest``). Success = atomic rename to ``dest``, then the sidecar (no fsync, see ``_finish``).
- A full disk or an unwritable cache is a :class:`~datasets_hub.errors.CacheError` naming the
  file, the URL and the fix (the ``.partial`` is kept: the next attempt resumes).
- One download per file across processes: a ``filelock`` on ``<dest>.lock``; the other processes
  wait and then find the file verified.

Environment, read at call time:

- ``DATASETS_HUB_OFFLINE=1``: never open a connection. A missing file is a
  :class:`~datasets_hub.errors.DownloadError` saying where to copy it; ``file://`` mirrors and
  files already in the Hugging Face cache still work.
- ``DATASETS_HUB_ENDPOINT_<LOADER>`` (loader name upper-cased, other characters -> ``_``, e.g.
  ``DATASETS_HUB_ENDPOINT_D4RL``): a mirror base URL that replaces the scheme and host of every
  http(s) URL of that loader, keeping the URL's path after the base's own path:
  base ``http://127.0.0.1:8123/mirror`` + ``http://rail.eecs.berkeley.edu/datasets/x.hdf5`` ->
  ``http://127.0.0.1:8123/mirror/datasets/x.hdf5``. The upstream host is then not contacted.
- ``HF_ENDPOINT``, ``HF_HUB_OFFLINE``, ``HF_HUB_CACHE``/``HF_HOME`` for ``hf://`` sources.

Sidecar files the cache must skip when listing raw files: ``.sha256``, ``.lock``, ``.partial``,
``.corrupt`` suffixes (see :data:`SIDE_SUFFIXES`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

from datasets_hub import env
from datasets_hub.downloads.http import CHUNK_SIZE, MAX_REDIRECTS, Progress, http_download
from datasets_hub.errors import CacheError, ChecksumMismatch, DownloadError, HubError
from datasets_hub.files import hash_file, open_nofollow, write_text_atomic
from datasets_hub.redact import redact_text, redact_url

if TYPE_CHECKING:  # loader.py imports tensordict; this module stays light
    from datasets_hub.loader import Resource

# Backoff between retries: BACKOFF_BASE * 2**(n-1) seconds, capped. Tests set BACKOFF_BASE = 0.
BACKOFF_BASE = 0.5
BACKOFF_CAP = 30.0
#: suffixes of the side files beside raw downloads (not raw data): the one list, used to skip them
SIDE_SUFFIXES = (".sha256", ".lock", ".partial", ".corrupt", ".validator", ".tmp")
_SCHEMES = ("http", "https", "file", "hf")
_sleep: Callable[[float], None] = time.sleep


def _sleep_now(seconds: float) -> None:
    """``_sleep`` as it is when called (tests replace the module attribute)."""
    _sleep(seconds)


def _backoff(failures: int) -> float:
    """Seconds to wait before retry ``failures`` (BACKOFF_BASE doubling, capped at BACKOFF_CAP; read per call)."""
    return min(BACKOFF_CAP, BACKOFF_BASE * 2 ** max(failures - 1, 0))


__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_CAP",
    "CHUNK_SIZE",
    "MAX_REDIRECTS",
    "SIDE_SUFFIXES",
    "apply_endpoint",
    "download_settings",
    "endpoint_env_var",
    "endpoint_for",
    "fetch",
    "is_offline",
    "list_hf_files",
    "open_nofollow",
    "read_sidecar",
    "resolve_urls",
    "sidecar_path",
    "source_key",
    "verify_file",
]


# ---------------------------------------------------------------------------------------- environment
is_offline = env.offline  # the names this module has always offered; the readers live in env.py
endpoint_env_var = env.endpoint_env_var
endpoint_for = env.endpoint_for


def apply_endpoint(url: str, base: str | None) -> str:
    """Replace scheme+host(+port) of an http(s) ``url`` by ``base``, keeping the path and query."""
    if base is None or urlsplit(url).scheme not in ("http", "https"):
        return url
    parts = urlsplit(url)
    return base.rstrip("/") + (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def resolve_urls(resource: Resource, loader: str) -> list[str]:
    """The URLs :func:`fetch` tries for ``resource``, mirror override applied, schemes checked."""
    base = endpoint_for(loader)
    urls = []
    for url in resource.urls:
        scheme = urlsplit(url).scheme.lower()
        if scheme not in _SCHEMES:
            raise DownloadError(
                f"{resource.name}: unsupported URL scheme {scheme or '(none)'!r} in {url!r}; "
                f"use http(s)://, file:// or hf://<repo_type>s/<repo_id>/<path>."
            )
        urls.append(apply_endpoint(url, base))
    if not urls:
        raise DownloadError(f"{resource.name}: the resource lists no URL; add one to its catalogue entry.")
    return urls


def download_settings(
    *,
    min_rate: float | None = None,
    rate_window: float | None = None,
    deadline: float | None = None,
    progress_interval: float | None = None,
) -> dict[str, float]:
    """The download limits, keyword arguments over the environment (read now), over the defaults:

    - ``min_rate`` (``DATASETS_HUB_MIN_RATE``, bytes/s, default 1024; 0 disables): an attempt that
      receives fewer than ``min_rate * rate_window`` bytes in any ``rate_window`` seconds
      (``DATASETS_HUB_RATE_WINDOW``, default 60) fails (a slowloris server, a dead link);
    - ``deadline`` (``DATASETS_HUB_DOWNLOAD_DEADLINE``, seconds, default 86400; 0 disables): the
      most one file may take, retries included;
    - ``progress_interval`` (``DATASETS_HUB_PROGRESS_INTERVAL``, seconds, default 30): how often a
      progress line is written to stderr when it is not a terminal (a terminal gets a bar).
    """

    def pick(value: float | None, var: str, default: float) -> float:
        if value is not None:
            return float(value)
        raw = os.environ.get(var, "").strip()
        if not raw:
            return default
        try:
            number = float(raw)
        except ValueError:
            raise DownloadError(
                f"{var}={raw!r} is not a number; set it to a number of "
                f"{'bytes per second' if 'RATE' in var and 'WINDOW' not in var else 'seconds'} "
                "or unset it"
            ) from None
        if number < 0 or number != number:
            raise DownloadError(f"{var}={raw!r} must be >= 0 (0 disables the limit)")
        return number

    return {
        "min_rate": pick(min_rate, "DATASETS_HUB_MIN_RATE", 1024.0),
        "rate_window": max(pick(rate_window, "DATASETS_HUB_RATE_WINDOW", 60.0), 0.001),
        "deadline": pick(deadline, "DATASETS_HUB_DOWNLOAD_DEADLINE", 86400.0),
        "progress_interval": pick(progress_interval, "DATASETS_HUB_PROGRESS_INTERVAL", 30.0),
    }


def source_key(resource: Resource) -> str:
    """The identity of ``resource``'s bytes, the folder its raw file is kept in (docs/design/on-disk.md, "The cache").

    ``sha-<16 hex>`` from the catalogue's sha256 when it has one (same bytes, same file, whatever the
    URL), else ``url-<16 hex>`` hashed from the first URL with credentials and signatures removed
    (:func:`datasets_hub.redact.redact_url`: a presigned URL's changing signature or a password is
    not part of what the file is). Never the basename alone: two URLs ending in ``data.hdf5`` are
    two files. A resource's ``identity`` (a local file's inode and mtime) enters the URL's hash: a file
    rewritten in place is another source.
    """
    if resource.sha256:
        return "sha-" + resource.sha256.lower()[:16]
    seed = redact_url(resource.urls[0]) + (f"\n{resource.identity}" if resource.identity else "")
    return "url-" + hashlib.sha256(seed.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------- sidecar
def sidecar_path(dest: Path) -> Path:
    return Path(dest).with_name(Path(dest).name + ".sha256")


def read_sidecar(dest: Path) -> dict[str, Any] | None:
    """The sidecar record of ``dest``, or ``None`` if absent or unreadable."""
    try:
        meta = json.loads(sidecar_path(dest).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def recorded_sha256(dest: Path) -> str | None:
    """The sha256 the sidecar of ``dest`` recorded at download, or ``None`` (no sidecar, or an unreadable one)."""
    meta = read_sidecar(dest)
    value = meta.get("sha256") if meta is not None else None
    return value if isinstance(value, str) else None


def _write_sidecar(
    dest: Path, sha256: str, size: int, url: str, downloaded_at: str | None = None, source: str | None = None
) -> None:
    record = {
        "sha256": sha256,
        "size": size,
        "url": redact_url(url),
        "source": source,
        "downloaded_at": downloaded_at or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "mtime_ns": dest.stat().st_mtime_ns,
    }
    write_text_atomic(sidecar_path(dest), json.dumps(record, indent=1) + "\n", mode=0o644)


def _check_cached(resource: Resource, dest: Path) -> str | None:
    """``None`` if ``dest`` holds the right bytes, ``"missing"``, or why it is wrong."""
    try:
        st = dest.stat()
    except FileNotFoundError:
        return "missing"
    if not dest.is_file():
        return f"{dest} is not a regular file"
    if resource.size is not None and st.st_size != resource.size:
        return f"it has {st.st_size} bytes, the catalogue says {resource.size}"
    want = resource.sha256.lower() if resource.sha256 else None
    meta = read_sidecar(dest)
    key = source_key(resource)
    if meta is not None and meta.get("source") != key and meta.get("url") not in {redact_url(u) for u in resource.urls}:
        # recorded for another source (an older layout, a hand-made copy of another file): never trusted
        return (
            f"its sidecar records another source ({meta.get('url')!r}, {meta.get('source')!r}), not "
            f"{redact_url(resource.urls[0])!r}"
        )
    if (
        meta
        and meta.get("size") == st.st_size
        and meta.get("mtime_ns") == st.st_mtime_ns
        and (want is None or meta.get("sha256") == want)
    ):
        return None
    # no or stale sidecar: rehash once (a file copied in by hand, or touched since)
    digest = hash_file(dest).hexdigest()
    reference, origin = (want, "the catalogue") if want else ((meta or {}).get("sha256"), "recorded at download")
    if reference and digest != reference:
        return f"its sha256 is {digest}, expected {reference} ({origin})"
    _write_sidecar(
        dest, digest, st.st_size, (meta or {}).get("url") or "local copy", (meta or {}).get("downloaded_at"), source=key
    )
    return None


def verify_file(path: Path | str, resource: Resource | None = None, *, origin: str = "catalogue") -> tuple[bool, str]:
    """Rehash ``path`` fully and compare with the catalogue (``resource``) or the sidecar.

    Returns ``(ok, message)``; the message names the file, where ``resource``'s sha256 and size come from
    (``origin``), and when not ok what is wrong and the fix. Without a sha256 or a sidecar: not ``ok``.
    """
    path = Path(path)
    if not path.is_file():
        return False, f"{path}: missing; run `datasets-hub download` to fetch it again."
    size = path.stat().st_size
    if resource is not None and resource.size is not None and size != resource.size:
        return False, (f"{path}: {size} bytes, the {origin} says {resource.size}; delete it and download again.")
    digest = hash_file(path).hexdigest()
    meta = read_sidecar(path)
    reference: str | None
    if resource is not None and resource.sha256:
        reference = resource.sha256.lower()
    else:
        reference, origin = (meta or {}).get("sha256"), "recorded at download"
    if not reference:
        return False, (
            f"{path}: no checksum to compare with (sha256 is {digest}); files fetched by "
            f"datasets_hub record one in {sidecar_path(path).name}."
        )
    if digest != reference:
        return False, (
            f"{path}: sha256 {digest} does not match {reference} ({origin}); the file is "
            f"corrupt or was modified: delete it and download again."
        )
    if meta and meta.get("sha256") == digest and meta.get("mtime_ns") != path.stat().st_mtime_ns:
        _write_sidecar(
            path, digest, size, meta.get("url", "local copy"), meta.get("downloaded_at"), source=meta.get("source")
        )
    return True, f"{path}: ok ({size} bytes, sha256 {digest[:16]}…, {origin})"


# ---------------------------------------------------------------------------------------- fetch
def fetch(
    resource: Resource,
    dest: Path,
    *,
    loader: str,
    offline: bool | None = None,
    progress: bool | None = None,
    timeout: float = 60.0,
    retries: int = 5,
    min_rate: float | None = None,
    rate_window: float | None = None,
    deadline: float | None = None,
) -> Path:
    """Make ``dest`` hold ``resource``'s verified bytes and return ``dest`` (see the module docstring).

    ``offline`` defaults to ``DATASETS_HUB_OFFLINE``; ``progress`` to "stderr is a TTY" (then a
    bar; otherwise progress lines every ``DATASETS_HUB_PROGRESS_INTERVAL`` seconds; ``False``:
    silent); ``timeout`` is the connect and read timeout in seconds; ``retries`` the number of
    consecutive failed attempts (no new bytes) per mirror before trying the next one;
    ``min_rate``/``rate_window``/``deadline``: see :func:`download_settings`.
    Raises :class:`DownloadError` (with the fix) or :class:`ChecksumMismatch`; URLs in messages are
    redacted (no password, no signature).
    """
    try:
        return _fetch(
            resource,
            Path(dest),
            loader=loader,
            offline=offline,
            progress=progress,
            timeout=timeout,
            retries=retries,
            settings=download_settings(min_rate=min_rate, rate_window=rate_window, deadline=deadline),
        )
    except HubError as exc:
        exc.args = tuple(redact_text(a) if isinstance(a, str) else a for a in exc.args)
        raise


def _fetch(
    resource: Resource,
    dest: Path,
    *,
    loader: str,
    offline: bool | None,
    progress: bool | None,
    timeout: float,
    retries: int,
    settings: dict[str, float],
) -> Path:
    offline = is_offline() if offline is None else bool(offline)
    urls = resolve_urls(resource, loader)
    if _check_cached(resource, dest) is None:
        return dest
    from filelock import FileLock

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(dest) + ".lock")
        lock.acquire()
    except OSError as exc:
        error = _cache_write_error(exc, resource, dest)
        if error is None:
            raise
        raise error from exc
    try:
        problem = _check_cached(resource, dest)  # another process may have fetched it meanwhile
        if problem is None:
            return dest
        if problem != "missing":
            if offline:
                raise ChecksumMismatch(
                    f"{resource.name}: the cached file {dest} is wrong: {problem}. Offline mode forbids "
                    f"downloading it again: copy a good copy to that path, or unset DATASETS_HUB_OFFLINE."
                )
            _move_aside(dest)
        if offline:
            urls = [u for u in urls if urlsplit(u).scheme in ("file", "hf")]  # no connection needed
            if not urls:
                raise DownloadError(_offline_message(resource, dest))
        return _download_any(
            resource,
            dest,
            urls,
            offline=offline,
            progress=progress,
            timeout=timeout,
            retries=retries,
            settings=settings,
        )
    finally:
        lock.release()


def _offline_message(resource: Resource, dest: Path) -> str:
    sources = ", ".join(redact_url(u) for u in resource.urls)
    return (
        f"{resource.name} is not in the cache and offline mode (DATASETS_HUB_OFFLINE=1) forbids "
        f"downloading it from {sources}. Fix: copy the file to exactly {dest}, or unset "
        f"DATASETS_HUB_OFFLINE to download it."
    )


def _cache_write_error(exc: OSError, resource: Resource, dest: Path, url: str | None = None) -> CacheError | None:
    """A teaching ``CacheError`` for a full disk or an unwritable cache, else ``None``."""
    import errno

    source = f" from {redact_url(url)}" if url else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        partial = dest.with_name(dest.name + ".partial")
        kept = partial.stat().st_size if partial.exists() else 0
        return CacheError(
            f"{resource.name}: the disk filled up while downloading{source} to {dest} ({exc.strerror}); "
            f"{kept} bytes are kept in {partial.name} and the next attempt resumes. Free space (e.g. "
            "`datasets-hub cache prune`) or point DATASETS_HUB_CACHE at a larger disk, then load again."
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return CacheError(
            f"{resource.name}: cannot write to {dest.parent} ({exc.strerror}): the cache is read-only for this "
            "process. Point DATASETS_HUB_CACHE at a writable directory or fix its permissions; builds already "
            "in the cache can still be read."
        )
    if exc.errno == errno.ENAMETOOLONG:
        return CacheError(
            f"{resource.name}: the path {dest} is too long for this file system ({exc.strerror}); "
            "shorten the resource's name in the catalogue entry or move DATASETS_HUB_CACHE to a "
            "shorter path."
        )
    return None


def _move_aside(path: Path, dest: Path | None = None) -> Path:
    """Move bad bytes at ``path`` to ``<dest>.corrupt`` (kept for inspection, never reused)."""
    dest = path if dest is None else dest
    corrupt = dest.with_name(dest.name + ".corrupt")
    os.replace(path, corrupt)
    sidecar_path(path).unlink(missing_ok=True)
    return corrupt


def _download_any(
    resource: Resource,
    dest: Path,
    urls: list[str],
    *,
    offline: bool,
    progress: bool | None,
    timeout: float,
    retries: int,
    settings: dict[str, float],
) -> Path:
    partial = dest.with_name(dest.name + ".partial")
    errors: list[tuple[str, HubError]] = []
    started = time.monotonic()
    with Progress(resource.name, resource.size, progress, settings["progress_interval"]) as bar:
        for url in urls:
            scheme = urlsplit(url).scheme.lower()
            try:
                bar.start(redact_url(url), announce=scheme != "file")  # a local copy: one line, at the end
                if scheme in ("http", "https"):
                    digest, size = http_download(
                        url,
                        partial,
                        resource,
                        timeout=timeout,
                        retries=retries,
                        bar=bar,
                        settings=settings,
                        started=started,
                        source=source_key(resource),
                        backoff=_backoff,
                        sleep=_sleep_now,
                    )
                elif scheme == "file":
                    digest, size = _copy_local(_file_url_path(url, resource), partial, bar, link=False)
                else:
                    from datasets_hub.downloads.huggingface import download_hf

                    source = download_hf(
                        url,
                        resource_name=resource.name,
                        dest=dest,
                        offline=offline,
                        progress=bar.is_bar,
                        timeout=timeout,
                    )
                    digest, size = _copy_local(source, partial, bar, link=True)
                _finish(resource, dest, partial, url, digest, size)
                bar.done("copied" if scheme == "file" else "downloaded")
                return dest
            except (DownloadError, ChecksumMismatch) as exc:
                errors.append((url, exc))
            except OSError as exc:  # our side failed (full disk, read-only cache): no other mirror helps
                error = _cache_write_error(exc, resource, dest, url)
                if error is None:
                    raise
                raise error from exc
    if len(errors) == 1:
        raise errors[0][1]
    kind = ChecksumMismatch if any(isinstance(e, ChecksumMismatch) for _, e in errors) else DownloadError
    lines = "\n".join(f"  - {redact_url(url)}: {exc}" for url, exc in errors)
    raise kind(f"{resource.name}: every mirror failed:\n{lines}") from errors[-1][1]


def _finish(resource: Resource, dest: Path, partial: Path, url: str, digest: str, size: int) -> None:
    """Check size and sha256 of the complete ``partial``, then publish it atomically as ``dest``."""
    shown = redact_url(url)
    partial.with_name(dest.name + ".validator").unlink(missing_ok=True)  # the resume validator is spent
    if resource.size is not None and size != resource.size:
        partial.unlink(missing_ok=True)
        raise DownloadError(
            f"{resource.name}: {shown} gave {size} bytes, the catalogue says {resource.size}; "
            f"the upstream file changed or the mirror is wrong (fix the catalogue entry or "
            f"the mirror)."
        )
    if resource.sha256 and digest != resource.sha256.lower():
        corrupt = _move_aside(partial, dest)
        raise ChecksumMismatch(
            f"{resource.name}: the file downloaded from {shown} has sha256 {digest}, expected "
            f"{resource.sha256.lower()}. It was moved aside to {corrupt}. Try again, or use another mirror "
            f"(DATASETS_HUB_ENDPOINT_<LOADER>); if upstream really changed, fix the catalogue's sha256."
        )
    # No fsync, as for builds (datasets_hub/build/pipeline.py): a killed process never publishes a partial
    # file, and after a power loss `datasets-hub verify` finds a damaged one by its recorded sha256.
    # An fsync here cost 0.3-0.6 s per 300 MB, a third of a D4RL build.
    os.replace(partial, dest)
    _write_sidecar(dest, digest, size, url, source=source_key(resource))


# ---------------------------------------------------------------------------------------- local copies
def _file_url_path(url: str, resource: Resource) -> Path:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise DownloadError(
            f"{resource.name}: {redact_url(url)} names host {parts.netloc.rsplit('@', 1)[-1]!r}; "
            f"file:// URLs must be local (file:///absolute/path)."
        )
    path = Path(url2pathname(unquote(parts.path)))
    if not path.is_file():
        raise DownloadError(f"{resource.name}: {url} does not exist ({path}); fix the path or the mirror.")
    return path


def _copy_local(source: Path, partial: Path, bar: Any, *, link: bool) -> tuple[str, int]:
    """Copy (or hard-link, when ``link`` and possible) ``source`` to ``partial``; return (sha256, size).

    A failure to read ``source`` is a :class:`DownloadError` (try another mirror); a failure to write
    (a full disk, a read-only cache) propagates as the ``OSError`` it is, reported by the caller.
    """
    partial.unlink(missing_ok=True)
    if link:
        try:
            os.link(os.path.realpath(source), partial)
        except OSError:
            pass  # another filesystem or no hard links: copy instead
        else:
            h = hash_file(partial)
            size = partial.stat().st_size
            bar.reset(total=size)
            bar.update(size)
            return h.hexdigest(), size
    h = hashlib.sha256()
    size = 0
    bar.reset(total=os.path.getsize(source))
    try:
        src = open(source, "rb")  # noqa: SIM115 - closed by the `with` below, once the read error is named
    except OSError as exc:
        raise DownloadError(f"could not read {source} ({exc.strerror}); fix its permissions or the mirror") from exc
    with src, open_nofollow(partial) as out:
        while True:
            try:
                block = src.read(CHUNK_SIZE)
            except OSError as exc:
                raise DownloadError(
                    f"could not read {source} after {size} bytes ({exc.strerror}); the source "
                    "file or its disk is damaged: use another mirror"
                ) from exc
            if not block:
                break
            out.write(block)  # an OSError here is ours (ENOSPC, EROFS): the caller names it
            h.update(block)
            size += len(block)
            bar.update(len(block))
    return h.hexdigest(), size


def list_hf_files(repo_id: str, repo_type: str = "dataset", revision: str | None = None, prefix: str = "") -> list[str]:
    """Sorted files of a Hugging Face Hub repo starting with ``prefix`` (for loaders that need a
    listing); see :func:`datasets_hub.downloads.huggingface.list_hf_files`."""
    from datasets_hub.downloads.huggingface import list_hf_files as _list

    return _list(repo_id, repo_type=repo_type, revision=revision, prefix=prefix)
