"""A scriptable HTTP server on 127.0.0.1 for network tests (no test ever talks to an outside host).

Import it from any test file in ``tests/`` as a plain module (pytest's default ``prepend`` import
mode puts ``tests/`` on ``sys.path``; no conftest or package needed)::

    from http_server import serve_files

    def test_resume(tmp_path):
        with serve_files({"data/x.hdf5": payload}) as server:
            server.fault("data/x.hdf5", drop_after=1000)      # cut the body after 1000 bytes, once
            url = server.url("data/x.hdf5")                   # http://127.0.0.1:<port>/data/x.hdf5
            ...
            assert server.count("data/x.hdf5") == 2
            assert server.ranges("data/x.hdf5") == [None, "bytes=1000-"]

``FileServer`` (what ``serve_files`` yields; also usable as ``with FileServer(...) as server``):

- ``add(path, data, **fault)`` serves ``data`` at ``path`` (no leading slash needed); ``url(path)``
  is its URL; ``base_url`` is ``http://127.0.0.1:<port>``. HEAD and GET, ``Accept-Ranges``,
  ``Range: bytes=a-[b]`` answered 206 with ``Content-Range`` (416 when past the end), ``ETag``.
  Unknown paths answer 404.
- ``fault(path, **kw)`` scripts misbehaviour for one path (keywords add to / replace earlier ones):
  ``status=404`` always answer that status; ``fail_status=500, fail_times=K`` answer
  ``fail_status`` to the first K GETs, then serve; ``drop_after=N, drop_times=1`` send only N body
  bytes of the response, then close the connection (the first ``drop_times`` GETs); with
  ``stall=s`` it first goes silent for s seconds (a client read timeout shorter than s fires);
  ``corrupt=True`` flip every byte of the body (same length); ``length_delta=d`` declare
  ``Content-Length`` d bytes off (d > 0: the body then ends early; d < 0: it is cut to the
  declared length); ``ignore_range=True`` answer 200 and the whole body to a Range request;
  ``trickle=s, trickle_chunk=1024`` sleep s seconds between body chunks (slow server);
  ``gzip=True`` send the body gzip-compressed with ``Content-Encoding: gzip`` and no
  ``Content-Length`` (whatever the client asked for); ``endless=True`` no ``Content-Length``, the
  body then garbage forever (until the client hangs up); ``garbage=True`` answer a status line
  that is not HTTP. ``If-Range`` is honoured: a validator other than the current ETag gets the
  whole (current) file with 200, as RFC 9110 says.
- ``redirect(path, target, status=302)`` answers ``path`` with a redirect to ``target`` (another
  path, or any absolute URL such as ``ftp://…``); two calls make a chain or a loop.
- Request log: ``requests`` (list of ``Request(method, path, range, headers)``), ``count(path,
  method="GET")``, ``ranges(path)`` (the Range header of each GET, ``None`` when absent),
  ``full_gets(path)`` (GETs without Range), ``total_requests()``, ``reset_log()``.
- A minimal Hugging Face Hub endpoint for ``huggingface_hub`` (point ``HF_ENDPOINT`` at
  ``base_url``): ``add_hf_file(repo_id, path_in_repo, data, repo_type="dataset")`` serves
  HEAD/GET ``/{datasets|spaces/}{repo_id}/resolve/{main|<commit>}/{path}`` with ``X-Repo-Commit``,
  ``ETag`` and ``Content-Length`` (what ``hf_hub_download`` requires), 404 with
  ``X-Error-Code: EntryNotFound`` / ``RepoNotFound`` otherwise, and
  ``GET /api/{repo_type}s/{repo_id}/tree/{revision}[/{path}]`` (what ``list_repo_files`` calls,
  as JSON ``[{"type": "file"|"directory", "path", "size", "oid"}]``). ``hf_path(repo_id, path)``
  is the server path of a Hub file (to script faults or count requests), ``hf_commit(repo_id)``
  the fake commit hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

_FAULT_KEYS = {
    "status",
    "fail_status",
    "fail_times",
    "drop_after",
    "drop_times",
    "stall",
    "corrupt",
    "length_delta",
    "ignore_range",
    "trickle",
    "trickle_chunk",
    "gzip",
    "endless",
    "garbage",
}


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _HFRepo:
    repo_type: str
    repo_id: str
    commit: str
    files: dict[str, bytes] = field(default_factory=dict)


def _norm(path: str) -> str:
    return unquote(path.split("?", 1)[0]).lstrip("/")


class FileServer:
    """A threaded HTTP server on 127.0.0.1, ephemeral port; see the module docstring."""

    def __init__(self, files: dict[str, bytes] | None = None) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, bytes] = {}
        self._faults: dict[str, dict[str, Any]] = {}
        self._redirects: dict[str, tuple[str, int]] = {}
        self._hf: dict[tuple[str, str], _HFRepo] = {}
        self.requests: list[Request] = []
        handler = type("_Handler", (_Handler,), {"state": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False  # a trickling handler must not hold up the test's exit
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._thread: threading.Thread | None = None
        for path, data in (files or {}).items():
            self.add(path, data)

    # lifecycle
    def start(self) -> FileServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # content
    def url(self, path: str) -> str:
        return f"{self.base_url}/{quote(path.lstrip('/'))}"

    def add(self, path: str, data: bytes, **fault: Any) -> str:
        with self._lock:
            self._files[_norm(path)] = bytes(data)
        if fault:
            self.fault(path, **fault)
        return self.url(path)

    def fault(self, path: str, **kw: Any) -> None:
        unknown = set(kw) - _FAULT_KEYS
        if unknown:
            raise TypeError(f"unknown fault(s) {sorted(unknown)}; known: {sorted(_FAULT_KEYS)}")
        with self._lock:
            self._faults.setdefault(_norm(path), {}).update(kw)

    def redirect(self, path: str, target: str, status: int = 302) -> str:
        with self._lock:
            self._redirects[_norm(path)] = (target, status)
        return self.url(path)

    # Hugging Face Hub emulation
    def hf_commit(self, repo_id: str, repo_type: str = "dataset") -> str:
        return hashlib.sha1(f"{repo_type}/{repo_id}".encode()).hexdigest()

    def hf_path(self, repo_id: str, path_in_repo: str, repo_type: str = "dataset", revision: str = "main") -> str:
        prefix = "" if repo_type == "model" else f"{repo_type}s/"
        return f"{prefix}{repo_id}/resolve/{revision}/{path_in_repo}"

    def add_hf_file(self, repo_id: str, path_in_repo: str, data: bytes, repo_type: str = "dataset") -> None:
        with self._lock:
            repo = self._hf.setdefault(
                (repo_type, repo_id), _HFRepo(repo_type, repo_id, self.hf_commit(repo_id, repo_type))
            )
            repo.files[path_in_repo] = bytes(data)
            for revision in ("main", repo.commit):
                self._files[self.hf_path(repo_id, path_in_repo, repo_type, revision)] = bytes(data)

    # request log
    def count(self, path: str, method: str = "GET") -> int:
        path = _norm(path)
        with self._lock:
            return sum(1 for r in self.requests if r.path == path and r.method == method)

    def ranges(self, path: str) -> list[str | None]:
        path = _norm(path)
        with self._lock:
            return [r.range for r in self.requests if r.path == path and r.method == "GET"]

    def full_gets(self, path: str) -> int:
        return sum(1 for r in self.ranges(path) if r is None)

    def served_paths(self) -> list[str]:
        """Every path the server holds (what ``add`` and ``add_hf_file`` put there)."""
        with self._lock:
            return list(self._files)

    def bytes_of(self, path: str) -> int:
        """The size of the file served at ``path`` (0 when none is)."""
        with self._lock:
            return len(self._files.get(_norm(path), b""))

    def total_requests(self) -> int:
        with self._lock:
            return len(self.requests)

    def reset_log(self) -> None:
        with self._lock:
            self.requests.clear()


@contextlib.contextmanager
def serve_files(files: dict[str, bytes] | None = None) -> Iterator[FileServer]:
    """Start a :class:`FileServer` serving ``files`` (path -> bytes) for the ``with`` block."""
    server = FileServer(files).start()
    try:
        yield server
    finally:
        server.stop()


def point_huggingface_hub_at(server: FileServer, monkeypatch: Any, hf_cache: Path) -> None:
    """Make huggingface_hub talk to ``server`` only, with its cache in ``hf_cache``.

    huggingface_hub reads HF_HUB_OFFLINE and HF_ENDPOINT once, at import (tests/conftest.py sets
    HF_HUB_OFFLINE=1, so an earlier import froze offline mode): reset the frozen offline flag, and
    point its import-time default endpoint at a closed local port, so that only an endpoint our
    code reads from HF_ENDPOINT at call time can work, and nothing can reach huggingface.co.
    """
    from huggingface_hub import constants

    for name in ("HF_HUB_OFFLINE", "DATASETS_HUB_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", server.base_url)
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", "http://127.0.0.1:9/{repo_id}/resolve/{revision}/{filename}"
    )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: FileServer  # set on the per-server subclass

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        return None

    def do_HEAD(self) -> None:
        self._handle(head=True)

    def do_GET(self) -> None:
        self._handle(head=False)

    # helpers
    def _simple(
        self, status: int, body: bytes = b"", headers: dict[str, str] | None = None, head: bool = False
    ) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def _handle(self, head: bool) -> None:
        state = self.state
        path = _norm(self.path)
        rng = self.headers.get("Range")
        with state._lock:
            state.requests.append(Request(self.command, path, rng, dict(self.headers.items())))
            redirect = state._redirects.get(path)
            data = state._files.get(path)
            fault = dict(state._faults.get(path, {}))
            # consume one-shot faults under the lock so concurrent requests see them once
            fail = False
            if not head and fault.get("fail_times", 0) > 0:
                state._faults[path]["fail_times"] -= 1
                fail = True
            drop = None
            if not head and fault.get("drop_after") is not None and fault.get("drop_times", 1) > 0:
                state._faults[path]["drop_times"] = fault.get("drop_times", 1) - 1
                drop = int(fault["drop_after"])
        try:
            if redirect is not None:
                target, status = redirect
                if "://" not in target and not target.startswith("/"):
                    target = "/" + quote(target)
                return self._simple(status, headers={"Location": target}, head=head)
            if path.startswith("api/"):
                return self._hf_api(path, head)
            if data is None:
                return self._not_found(path, head)
            if fault.get("status"):
                return self._simple(int(fault["status"]), f"status {fault['status']}\n".encode(), head=head)
            if fail:
                return self._simple(int(fault.get("fail_status", 500)), b"try again\n", head=head)
            self._send_file(path, data, fault, rng, drop, head)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_file(self, path: str, data: bytes, fault: dict, rng: str | None, drop: int | None, head: bool) -> None:
        if fault.get("garbage"):
            self.wfile.write(b"HELLO THERE this is not HTTP\r\n\r\n")
            self.close_connection = True
            return
        if fault.get("corrupt"):
            data = bytes(b ^ 0xFF for b in data)
        if fault.get("gzip") or fault.get("endless"):
            return self._send_unsized(data, fault, head)
        total = len(data)
        start, end = 0, total  # [start, end)
        status = 200
        etag = '"' + hashlib.sha256(data).hexdigest() + '"'
        if_range = self.headers.get("If-Range")
        if rng and if_range is not None and if_range != etag:
            rng = None  # the client's copy is of another version: send the whole current file
        if rng and not fault.get("ignore_range"):
            spec = rng.strip()
            if not spec.startswith("bytes="):
                return self._simple(416, headers={"Content-Range": f"bytes */{total}"}, head=head)
            a, _, b = spec[len("bytes=") :].partition("-")
            start = int(a)
            end = min(total, int(b) + 1) if b else total
            if start >= total:
                return self._simple(416, headers={"Content-Range": f"bytes */{total}"}, head=head)
            status = 206
        body = data[start:end]
        declared = len(body) + int(fault.get("length_delta", 0))
        if declared < len(body):
            body = body[: max(declared, 0)]
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(declared))
        self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{total}")
        for k, v in self._hf_headers(path).items():
            self.send_header(k, v)
        self.end_headers()
        if head:
            return
        chunk = int(fault.get("trickle_chunk", 1024)) if fault.get("trickle") else 1 << 16
        sent = 0
        limit = len(body) if drop is None else min(drop, len(body))
        while sent < limit:
            piece = body[sent : min(limit, sent + chunk)]
            self.wfile.write(piece)
            self.wfile.flush()
            sent += len(piece)
            if fault.get("trickle"):
                time.sleep(float(fault["trickle"]))
        if drop is not None or declared > len(body):
            # the client is promised more bytes than it gets: cut the connection like a flaky network
            if drop is not None and fault.get("stall"):
                time.sleep(float(fault["stall"]))
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def _send_unsized(self, data: bytes, fault: dict, head: bool) -> None:
        """A body without Content-Length, ended by closing the connection: gzip-encoded or endless."""
        import gzip

        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        if fault.get("gzip"):
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if head:
            return
        if fault.get("gzip"):
            self.wfile.write(gzip.compress(data))
            return
        self.wfile.write(data)
        block = b"\xaa" * (1 << 16)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # "forever", bounded so a broken client cannot hang the tests
            self.wfile.write(block)

    # Hugging Face Hub emulation
    def _hf_repo_of(self, path: str) -> tuple[_HFRepo | None, str | None, str | None]:
        """For ``[datasets/|spaces/]owner/name/resolve/rev/file`` return (repo, revision, file)."""
        parts = path.split("/")
        repo_type = "model"
        if parts and parts[0] in ("datasets", "spaces", "models"):
            repo_type = parts[0][:-1]
            parts = parts[1:]
        if len(parts) < 5 or parts[2] != "resolve":
            return None, None, None
        repo = self.state._hf.get((repo_type, "/".join(parts[:2])))
        return repo, parts[3], "/".join(parts[4:])

    def _hf_headers(self, path: str) -> dict[str, str]:
        repo, _, _ = self._hf_repo_of(path)
        return {} if repo is None else {"X-Repo-Commit": repo.commit}

    def _not_found(self, path: str, head: bool) -> None:
        repo, revision, _ = self._hf_repo_of(path)
        if repo is None and "/resolve/" in path:
            return self._simple(404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, head)
        if repo is not None:
            if revision not in ("main", repo.commit):
                return self._simple(404, b'{"error": "Revision not found"}', {"X-Error-Code": "RevisionNotFound"}, head)
            return self._simple(
                404,
                b'{"error": "Entry not found"}',
                {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": repo.commit},
                head,
            )
        return self._simple(404, b"not found\n", head=head)

    def _hf_repo_info(self, parts: list[str], head: bool) -> None:
        """What ``HfApi.repo_info`` (and so ``HfFileSystem``) reads: the repo's id, commit and files."""
        repo = self.state._hf.get((parts[1][:-1], f"{parts[2]}/{parts[3]}"))
        if repo is None:
            return self._simple(404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, head)
        if len(parts) == 6 and parts[5] not in ("main", repo.commit):
            return self._simple(404, b'{"error": "Revision not found"}', {"X-Error-Code": "RevisionNotFound"}, head)
        body = {
            "id": repo.repo_id,
            "sha": repo.commit,
            "private": False,
            "siblings": [{"rfilename": name, "size": len(data)} for name, data in sorted(repo.files.items())],
        }
        return self._simple(200, json.dumps(body).encode(), {"Content-Type": "application/json"}, head)

    def _hf_api(self, path: str, head: bool) -> None:
        # api/{type}s/{owner}/{name}/tree/{revision}[/{path}]
        parts = path.split("/")
        if len(parts) in (4, 6) and parts[1].endswith("s") and (len(parts) == 4 or parts[4] == "revision"):
            return self._hf_repo_info(parts, head)  # api/{type}s/{owner}/{name}[/revision/{revision}]
        if len(parts) < 6 or parts[4] != "tree" or not parts[1].endswith("s"):
            return self._simple(404, b'{"error": "not emulated"}', head=head)
        repo = self.state._hf.get((parts[1][:-1], f"{parts[2]}/{parts[3]}"))
        if repo is None:
            return self._simple(404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, head)
        if parts[5] not in ("main", repo.commit):
            return self._simple(404, b'{"error": "Revision not found"}', {"X-Error-Code": "RevisionNotFound"}, head)
        under = "/".join(parts[6:]).strip("/")
        recursive = "recursive=true" in self.path.lower() or "recursive=1" in self.path
        entries: dict[str, dict[str, Any]] = {}
        for file_path, data in sorted(repo.files.items()):
            if under and not file_path.startswith(under + "/"):
                continue
            rel = file_path[len(under) + 1 :] if under else file_path
            if "/" in rel and not recursive:
                folder = (under + "/" if under else "") + rel.split("/", 1)[0]
                entries[folder] = {
                    "type": "directory",
                    "path": folder,
                    "oid": hashlib.sha1(folder.encode()).hexdigest(),
                }
                continue
            if recursive:  # list the folders on the way, as the Hub does
                segments = file_path.split("/")[:-1]
                for i in range(len(segments)):
                    folder = "/".join(segments[: i + 1])
                    if not under or folder.startswith(under + "/"):
                        entries.setdefault(
                            folder,
                            {"type": "directory", "path": folder, "oid": hashlib.sha1(folder.encode()).hexdigest()},
                        )
            entries[file_path] = {
                "type": "file",
                "path": file_path,
                "size": len(data),
                "oid": hashlib.sha1(data).hexdigest(),
            }
        body = json.dumps(list(entries.values())).encode()
        self._simple(200, body, {"Content-Type": "application/json"}, head)
