"""Download sizes before downloading (``datasets-hub info`` and ``list``).

A resource's size is the catalogue's ``size`` when it has one (exact, and checked against every
download). Otherwise ``datasets-hub info`` asks the server: one ``HEAD`` request per http(s)
resource (redirects followed, http/https only, at most :data:`~datasets_hub.downloads.http.MAX_REDIRECTS`),
``Content-Length`` of the final answer, a short timeout and no retry. The answer is kept in
``<cache>/catalogue/sizes.json`` (keyed by the catalogue URL, credentials and signatures removed),
which ``list`` reads without ever touching the network. Offline (``DATASETS_HUB_OFFLINE=1``), or
when the host cannot be resolved, nothing fails: the size is "unknown". A server size is shown as
such; it is never used to check a download (the server's own ``Content-Length`` is, at download time).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from datasets_hub import env
from datasets_hub.redact import redact_url

HEAD_TIMEOUT_S = 5.0  #: seconds per HEAD request (connect and read)
UNKNOWN_OFFLINE = "unknown, N/A offline"


@dataclass(frozen=True)
class SizeAnswer:
    """The size of one resource before download: ``bytes`` (``None``: unknown) and where it comes from
    (``"catalogue"``, ``"server"`` (a HEAD answer, ``checked`` when), or why it is unknown)."""

    name: str
    bytes: int | None
    source: str
    checked: str | None = None


def sizes_file() -> Path:
    """``<cache>/catalogue/sizes.json``: the servers' answers, by catalogue URL (redacted)."""
    return env.cache_root() / "catalogue" / "sizes.json"


def cached_sizes() -> dict[str, dict[str, dict[str, Any]]]:
    """Earlier answers: ``{"urls": {redacted url: {"bytes", "checked"}}, "datasets": {id: {"bytes",
    "checked"}}}`` (a dataset's total, for ids whose files only the loader knows). Empty when none
    or unreadable: a cache, never an error."""
    try:
        payload = json.loads(sizes_file().read_text())
    except (OSError, ValueError):
        payload = {}
    out: dict[str, dict[str, dict[str, Any]]] = {"urls": {}, "datasets": {}}
    for section in out:
        table = payload.get(section) if isinstance(payload, dict) else None
        if isinstance(table, dict):
            out[section] = {k: v for k, v in table.items() if isinstance(v, dict) and isinstance(v.get("bytes"), int)}
    return out


def _remember(urls: Mapping[str, int], datasets: Mapping[str, int] | None = None) -> None:
    """Merge the answers into :func:`sizes_file`; a read-only cache keeps what it has."""
    from datasets_hub.files import write_text_atomic

    if not urls and not datasets:
        return
    known = cached_sizes()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    known["urls"].update({url: {"bytes": n, "checked": stamp} for url, n in urls.items()})
    known["datasets"].update({i: {"bytes": n, "checked": stamp} for i, n in (datasets or {}).items()})
    try:
        sizes_file().parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(sizes_file(), json.dumps(known, indent=1, sort_keys=True))
    except OSError:
        pass  # read-only or full cache: the size is shown now and asked again next time


def head_size(url: str, *, timeout: float = HEAD_TIMEOUT_S) -> tuple[int | None, str]:
    """``(bytes, "server")`` from a HEAD request to ``url``, or ``(None, why)``; never raises for a
    network problem (offline, DNS, refused, timeout, an HTTP error, no ``Content-Length``)."""
    import requests

    from datasets_hub.downloads.http import MAX_REDIRECTS, name_resolution_failed

    if env.offline():
        return None, UNKNOWN_OFFLINE
    current = url
    try:
        with requests.Session() as session:
            for _ in range(MAX_REDIRECTS + 1):
                resp = session.head(
                    current, headers={"Accept-Encoding": "identity"}, timeout=timeout, allow_redirects=False
                )
                if resp.is_redirect:
                    location = urljoin(current, resp.headers["Location"])
                    if urlsplit(location).scheme.lower() not in ("http", "https"):
                        return None, f"unknown (redirected to a {urlsplit(location).scheme}:// URL)"
                    current = location
                    continue
                if resp.status_code >= 400:
                    return None, f"unknown (HTTP {resp.status_code} from {redact_url(current)})"
                length = resp.headers.get("Content-Length")
                if length is None or not length.strip().isdigit():
                    return None, "unknown (the server states no Content-Length)"
                return int(length), "server"
            return None, f"unknown (more than {MAX_REDIRECTS} redirects)"
    except requests.RequestException as exc:
        if name_resolution_failed(exc):
            return None, f"{UNKNOWN_OFFLINE} (the host of {redact_url(current)} cannot be resolved)"
        return None, f"unknown ({type(exc).__name__} from {redact_url(current)})"


def resource_sizes(
    resources: Iterable[Mapping[str, Any]],
    loader: str,
    *,
    ask_server: bool,
    dataset_id: str | None = None,
    timeout: float = HEAD_TIMEOUT_S,
) -> list[SizeAnswer]:
    """The size of each resource (dicts as in a catalogue entry or ``DatasetInfo.resources``):
    the catalogue's, else a cached server answer, else (``ask_server``) a HEAD request to the URL a
    download would use (mirror override applied), remembered for next time. With ``dataset_id``
    (the catalogue's own params), a total learnt from the server is remembered for that id too,
    so that ``list`` shows it without knowing the id's files."""
    from datasets_hub.downloads.fetch import apply_endpoint

    cached = cached_sizes()["urls"]
    out: list[SizeAnswer] = []
    fresh: dict[str, int] = {}
    for res in resources:
        name = str(res.get("name") or "?")
        size = res.get("size", res.get("bytes"))
        urls = res.get("urls") or ([res["url"]] if res.get("url") else [])
        if isinstance(size, int) and not isinstance(size, bool):
            out.append(SizeAnswer(name, size, "catalogue"))
            continue
        if not urls:
            out.append(SizeAnswer(name, None, "unknown (no URL)"))
            continue
        key = redact_url(str(urls[0]))
        if key in cached:
            out.append(SizeAnswer(name, cached[key]["bytes"], "server", str(cached[key].get("checked"))))
            continue
        local = _local_size(str(urls[0]))
        if local is not None:  # a file:// source: its size is a stat away
            out.append(SizeAnswer(name, local, "local file"))
            continue
        http = [str(u) for u in urls if urlsplit(str(u)).scheme.lower() in ("http", "https")]
        if not http:
            out.append(SizeAnswer(name, None, "unknown (not an http(s) URL)"))
            continue
        if not ask_server:
            out.append(SizeAnswer(name, None, "unknown (not asked)"))
            continue
        n, why = head_size(apply_endpoint(http[0], env.endpoint_for(loader)), timeout=timeout)
        if n is not None:
            fresh[key] = n
        out.append(SizeAnswer(name, n, why, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) if n else None))
    whole = total(out)
    learnt = dataset_id is not None and whole is not None and any(a.source == "server" for a in out)
    _remember(fresh, {dataset_id: whole} if learnt and dataset_id and whole is not None else None)
    return out


def _local_size(url: str) -> int | None:
    """The size of the file a ``file://`` URL names, None for another URL or a missing file."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "file" or parts.netloc not in ("", "localhost"):
        return None
    from urllib.parse import unquote
    from urllib.request import url2pathname

    try:
        return Path(url2pathname(unquote(parts.path))).stat().st_size
    except OSError:
        return None


def listed_size(dataset_id: str, resources: Iterable[Mapping[str, Any]], known: Mapping[str, Any]) -> int | None:
    """What ``list`` shows for ``dataset_id`` without the network: the catalogue's sizes, else the
    servers' cached answers for its URLs, else its remembered total; ``None`` when unknown.
    ``known`` is :func:`cached_sizes` (read once per listing)."""
    sizes = []
    for res in resources:
        size = res.get("size", res.get("bytes"))
        if not (isinstance(size, int) and not isinstance(size, bool)):
            urls = res.get("urls") or ([res["url"]] if res.get("url") else [])
            hit = known["urls"].get(redact_url(str(urls[0]))) if urls else None
            size = hit["bytes"] if hit else None
        sizes.append(size)
    if sizes and all(s is not None for s in sizes):
        return sum(sizes)
    hit = known["datasets"].get(dataset_id)
    return int(hit["bytes"]) if hit else None


def total(answers: Iterable[SizeAnswer]) -> int | None:
    """The sum of ``answers``' sizes, or ``None`` when any is unknown."""
    sizes = [a.bytes for a in answers]
    return sum(s for s in sizes if s is not None) if all(s is not None for s in sizes) else None
