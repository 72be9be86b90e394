"""The files of a published build, read through fsspec (see :mod:`datasets_hub.remote.open_url`).

One :class:`RemoteFolder` per URL: ``hf://`` through huggingface_hub's ``HfFileSystem`` (it honours
``HF_ENDPOINT``), ``http(s)://`` through fsspec's HTTP filesystem (aiohttp), ``s3://`` through ``s3fs``,
``file://`` through the local filesystem. Every failure is a :class:`DownloadError` naming the file and
the URL without its secrets; ``DATASETS_HUB_OFFLINE=1`` refuses every read.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from typing import Any

from datasets_hub import env
from datasets_hub.errors import DownloadError, InvalidParameter, MissingDependency
from datasets_hub.redact import strip_url

REMOTE_SCHEMES = ("hf://", "http://", "https://", "s3://", "file://")


def url_key(url: str) -> str:
    """The folder name of a URL's local copies (credentials and query signatures left out)."""
    return hashlib.sha256(strip_url(url).encode()).hexdigest()[:16]


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

    def read(self, relpath: str) -> bytes:
        if env.offline():
            raise DownloadError(
                f"{self.shown}/{relpath} is needed but DATASETS_HUB_OFFLINE=1: load it once with the network on "
                "(resident='full' keeps a complete copy), or unset DATASETS_HUB_OFFLINE"
            )
        try:
            return bytes(self.fs.cat_file(self.path(relpath)))
        except FileNotFoundError as exc:
            raise DownloadError(
                f"{self.shown}/{relpath} does not exist: is {self.shown} a build published by `datasets-hub export`?"
            ) from exc
        except Exception as exc:
            raise DownloadError(f"could not read {self.shown}/{relpath}: {type(exc).__name__}: {exc}") from exc

    def read_many(self, relpaths: list[str]) -> dict[str, bytes | Exception]:
        """Fetch several files concurrently (one fsspec call); errors are returned per file, not raised."""
        if len(relpaths) == 1:
            try:
                return {relpaths[0]: self.read(relpaths[0])}
            except DownloadError as exc:
                return {relpaths[0]: exc}
        if env.offline():
            refused: Exception = DownloadError(f"chunks of {self.shown} are needed but DATASETS_HUB_OFFLINE=1")
            return dict.fromkeys(relpaths, refused)
        paths = {self.path(p): p for p in relpaths}
        try:
            got = self.fs.cat(list(paths), on_error="return")
        except Exception as exc:  # noqa: BLE001 - a backend that fails the whole call: reported per file
            return dict.fromkeys(relpaths, exc)
        return {paths.get(k, k): (v if isinstance(v, Exception) else bytes(v)) for k, v in got.items()}


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
        if importlib.util.find_spec("aiohttp") is None:  # fsspec's HTTP filesystem needs it
            raise MissingDependency("loading a build over HTTP needs aiohttp: pip install 'datasets-hub[remote]'")
        return fsspec.filesystem("http", block_size=0), url.rstrip("/")
    if url.startswith("s3://"):
        if importlib.util.find_spec("s3fs") is None:  # fsspec loads it by protocol
            raise MissingDependency("loading a build from S3 needs s3fs: pip install s3fs")
        # a fresh client per open: endpoint and credentials come from the AWS environment at call time
        return fsspec.filesystem("s3", skip_instance_cache=True), url[len("s3://") :].rstrip("/")
    if url.startswith("file://"):
        return fsspec.filesystem("file"), url[len("file://") :].rstrip("/")
    raise InvalidParameter(
        f"{url!r} is not a published-build URL; it must start with one of {', '.join(REMOTE_SCHEMES)}"
    )
