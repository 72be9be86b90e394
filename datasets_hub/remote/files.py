"""The files of a published build, read through fsspec (see :mod:`datasets_hub.remote.open_url`).

One :class:`RemoteFolder` per URL: ``hf://`` through huggingface_hub's ``HfFileSystem`` (it honours
``HF_ENDPOINT``), ``http(s)://`` by :mod:`datasets_hub.remote.http_reads` (aiohttp, under the download
layer's size caps, minimum rate and deadline), ``s3://`` through ``s3fs``, ``file://`` through the local
filesystem. No file is accepted past the size its publishing record gives. Every failure is a
:class:`DownloadError` naming the file and the URL without its secrets (the backend's exception, which
holds the whole URL, is not chained); ``DATASETS_HUB_OFFLINE=1`` refuses every read.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from typing import Any

from datasets_hub import env
from datasets_hub.errors import DownloadError, InvalidParameter, MissingDependency
from datasets_hub.redact import redact_text, strip_url
from datasets_hub.remote.format import PUBLISHED
from datasets_hub.remote.http_reads import MAX_UNLISTED_BYTES, HttpFiles

REMOTE_SCHEMES = ("hf://", "http://", "https://", "s3://", "file://")


class RemoteFolder:
    """The files of one published folder, read through fsspec; ``read`` returns bytes.

    ``url`` is kept whole (a signed URL needs its query to be read) but only ``shown`` (no secrets)
    ever appears in a message.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.shown = strip_url(url)
        self._fs, self.root = _filesystem(url)
        self._pid = os.getpid()
        # http(s), and hf:// through its https URLs: read under the download layer's rules (size caps, minimum
        # rate, deadline)
        self._http: HttpFiles | None = None
        if url.startswith(("http://", "https://")):
            self._http = HttpFiles(self.root, self.shown)
        elif url.startswith("hf://"):
            root, headers = _hf_https_root(self._fs, self.root, self.shown)
            self._http = HttpFiles(root, self.shown, headers)

    @property
    def fs(self) -> Any:
        """The fsspec filesystem; a forked child (a DataLoader worker) makes its own, since fsspec's async
        filesystems (HTTP, S3) are not fork-safe."""
        if self._pid != os.getpid():
            self._fs, _ = _filesystem(self.url)
            self._pid = os.getpid()
        return self._fs

    def path(self, relpath: str) -> str:
        return f"{self.root.rstrip('/')}/{relpath}"

    def read(self, relpath: str, max_bytes: int | None = None) -> bytes:
        """The bytes of ``relpath``; more than ``max_bytes`` (the size its publishing record gives; default
        :data:`~datasets_hub.remote.http_reads.MAX_UNLISTED_BYTES`) is a :class:`DownloadError`. Over
        http(s) the body is never read past that size, and reads follow the download rules
        (:mod:`datasets_hub.remote.http_reads`)."""
        if env.offline():
            raise DownloadError(
                f"{self.shown}/{relpath} is needed but DATASETS_HUB_OFFLINE=1: load it once with the network on "
                "(resident='full' keeps a complete copy), or unset DATASETS_HUB_OFFLINE"
            )
        try:
            if self._http is not None:
                return self._http.read(relpath, max_bytes)
            limit = MAX_UNLISTED_BYTES if max_bytes is None else max_bytes
            # a ranged read: the backend is never asked for more than one byte past what is allowed
            return self._capped(relpath, bytes(self.fs.cat_file(self.path(relpath), start=0, end=limit + 1)), limit)
        except FileNotFoundError:
            # not chained: fsspec's error holds the whole URL, password and signature included
            raise DownloadError(
                f"{self.shown}/{relpath} does not exist: is {self.shown} a build published by `datasets-hub export`?"
            ) from None
        except Exception as exc:  # noqa: BLE001 - every backend's failure becomes one DownloadError
            raise self._failure(relpath, exc) from None

    def _failure(self, relpath: str, exc: BaseException) -> DownloadError:
        """A :class:`DownloadError` for a failed read, with every URL in the backend's message redacted (the
        original is not chained: a traceback would show its text, secrets included)."""
        if isinstance(exc, DownloadError):
            return exc
        if isinstance(exc, FileNotFoundError):
            return DownloadError(f"{self.shown}/{relpath} does not exist (a file {PUBLISHED} lists)")
        text = redact_text(str(exc)).replace(self.url, self.shown)
        return DownloadError(f"could not read {self.shown}/{relpath}: {type(exc).__name__}: {text}")

    def _capped(self, relpath: str, data: bytes, max_bytes: int | None) -> bytes:
        limit = MAX_UNLISTED_BYTES if max_bytes is None else max_bytes
        if len(data) > limit:
            raise DownloadError(
                f"{self.shown}/{relpath} holds {len(data):,} bytes, more than the {limit:,} its publishing record allows"
            )
        return data

    def read_many(self, relpaths: list[str], limits: Mapping[str, int] | None = None) -> dict[str, bytes | Exception]:
        """Fetch several files concurrently, each capped at its ``limits`` entry (as :meth:`read`); errors are
        returned per file, not raised."""
        limits = limits or {}
        if len(relpaths) == 1:
            try:
                return {relpaths[0]: self.read(relpaths[0], limits.get(relpaths[0]))}
            except DownloadError as exc:
                return {relpaths[0]: exc}
        if env.offline():
            refused: Exception = DownloadError(f"chunks of {self.shown} are needed but DATASETS_HUB_OFFLINE=1")
            return dict.fromkeys(relpaths, refused)
        if self._http is not None:
            got_http = self._http.read_many(relpaths, limits)
            return {p: self._failure(p, v) if isinstance(v, Exception) else v for p, v in got_http.items()}
        caps = [MAX_UNLISTED_BYTES if limits.get(p) is None else int(limits[p]) for p in relpaths]
        try:  # ranged reads, as in read()
            got = self.fs.cat_ranges(
                [self.path(p) for p in relpaths], [0] * len(relpaths), [cap + 1 for cap in caps], on_error="return"
            )
        except Exception as exc:  # noqa: BLE001 - a backend that fails the whole call: reported per file
            return {p: self._failure(p, exc) for p in relpaths}
        out: dict[str, bytes | Exception] = {}
        for relpath, value in zip(relpaths, got, strict=True):
            if isinstance(value, Exception):
                out[relpath] = self._failure(relpath, value)
                continue
            try:
                out[relpath] = self._capped(relpath, bytes(value), limits.get(relpath))
            except DownloadError as exc:
                out[relpath] = exc
        return out


def _hf_https_root(fs: Any, rest: str, shown: str) -> tuple[str, dict[str, str]]:
    """The https URL of the folder ``rest`` (``datasets/<org>/<repo>[@rev][/path]``) on the Hugging Face Hub, and
    the headers its reads send (the user's token, if any)."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    try:
        resolved = fs.resolve_path(rest)
    except FileNotFoundError:
        raise DownloadError(f"{shown} does not exist on the Hugging Face Hub (repository or revision)") from None
    except Exception as exc:  # noqa: BLE001 - huggingface_hub's errors vary; their text may hold URLs
        raise DownloadError(f"could not resolve {shown}: {type(exc).__name__}: {redact_text(str(exc))}") from None
    prefix = f"{resolved.path_in_repo}/" if resolved.path_in_repo else ""
    record = hf_hub_url(
        resolved.repo_id,
        prefix + PUBLISHED,
        repo_type=resolved.repo_type,
        revision=resolved.revision,
        endpoint=env.hf_endpoint(),
    )
    return record[: -len(PUBLISHED) - 1], build_hf_headers()


def _filesystem(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as exc:
        raise MissingDependency("loading a published build needs fsspec: pip install 'datasets-hub[remote]'") from exc
    if url.startswith("hf://"):
        from huggingface_hub import HfFileSystem

        rest = url[len("hf://") :].rstrip("/")
        if env.hf_offline():
            raise DownloadError(
                f"{url} is on the Hugging Face Hub but HF_HUB_OFFLINE=1; unset it, or load with DATASETS_HUB_OFFLINE=1 "
                "to use a complete local copy"
            )
        if not rest.startswith(("datasets/", "models/", "spaces/")):
            raise InvalidParameter(f"{url!r}: a Hugging Face URL reads hf://datasets/<org>/<repo>[@revision]")
        return HfFileSystem(endpoint=env.hf_endpoint()), rest  # read at call time
    if url.startswith(("http://", "https://")):
        return None, url.rstrip("/")  # read by datasets_hub.remote.http_reads, under the download rules
    if url.startswith("s3://"):
        if importlib.util.find_spec("s3fs") is None:  # fsspec loads it by protocol
            raise MissingDependency("loading a build from S3 needs s3fs: pip install s3fs")
        # a fresh client per open: endpoint and credentials come from the AWS environment at call time; a read
        # that sends no byte for the download layer's rate window fails (botocore's read timeout), as over http
        from datasets_hub.downloads.fetch import download_settings
        from datasets_hub.remote.http_reads import CONNECT_TIMEOUT, READ_TIMEOUT

        settings = download_settings()
        silence = min(READ_TIMEOUT, settings["rate_window"]) if settings["min_rate"] else READ_TIMEOUT
        timeouts = {"connect_timeout": CONNECT_TIMEOUT, "read_timeout": silence}
        return fsspec.filesystem("s3", skip_instance_cache=True, config_kwargs=timeouts), url[len("s3://") :].rstrip(
            "/"
        )
    if url.startswith("file://"):
        return fsspec.filesystem("file"), url[len("file://") :].rstrip("/")
    raise InvalidParameter(
        f"{url!r} is not a published-build URL; it must start with one of {', '.join(REMOTE_SCHEMES)}"
    )
