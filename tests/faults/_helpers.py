"""Shared tools of the fault-injection suite (imported by the test files; no conftest).

- :func:`write_d4rl`: a D4RL-layout HDF5 file with distinct values per row (``observations[t, d]
  = t + 0.001 d``), so every sampled row tells which file row it is.
- :func:`register`: an extra catalogue file (``DATASETS_HUB_REGISTRY``) so child processes see
  the same ids as the test.
- :class:`Zygote`: one warm Python process (``sys.executable -c``, datasets_hub and the loaders
  already imported) that forks a child per job. A kill -9 trial then costs the work it
  interrupts, not the 4 s of importing torch; the killed process is still a real, separate
  process writing to the real cache. Jobs can set environment variables, an RLIMIT_FSIZE (disk
  full) and drop the capabilities that let root ignore file permissions (read-only cache).
- :func:`cache_state_ok`: the invariants every fault must leave: no visible partial build,
  every visible build verifies, no raw file with the wrong bytes at its final path.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:  # http_server.py and the loaders' fixture helpers live in tests/
    sys.path.insert(0, str(TESTS))

OBS_DIM, ACT_DIM = 3, 2


# ---------------------------------------------------------------------------------------- fixtures
def write_d4rl(path: Path, rows: int = 60, episode_len: int = 10) -> Path:
    """A D4RL file: ``rows`` transitions, a timeout every ``episode_len`` rows, distinct values."""
    import h5py

    t = np.arange(rows)
    obs = (t[:, None] + 0.001 * np.arange(OBS_DIM)[None]).astype(np.float32)
    ends = (t % episode_len) == episode_len - 1
    with h5py.File(path, "w") as f:
        f["observations"] = obs
        f["next_observations"] = np.where(ends[:, None], obs + 0.5, obs + 1.0).astype(np.float32)
        f["actions"] = (-t[:, None] - 0.01 * np.arange(ACT_DIM)[None]).astype(np.float32)
        f["rewards"] = (10.0 * t).astype(np.float32)
        f["terminals"] = np.zeros(rows, dtype=bool)
        f["timeouts"] = ends
    return path


def sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def register(path: Path, entries: dict[str, Any]) -> Path:
    """Write ``entries`` (id -> catalogue entry) as YAML at ``path``; the caller points
    ``DATASETS_HUB_REGISTRY`` at it (the registry file is data, read by children too)."""
    import yaml

    path.write_text(yaml.safe_dump(entries, sort_keys=True))
    return path


def d4rl_entry(url: str, *, sha: str | None = None, size: int | None = None, name: str | None = None) -> dict:
    resource: dict[str, Any] = {"url": url}
    if sha:
        resource["sha256"] = sha
    if size is not None:
        resource["size"] = size
    if name:
        resource["name"] = name
    return {"loader": "d4rl", "resources": [resource], "description": "fault-injection fixture"}


def check_rows(rb) -> None:
    """Every row of a D4RL-fixture buffer is the file row its observation names (no garbage)."""
    data = rb[:]
    row = data["observation"][:, 0].round().long().numpy()
    np.testing.assert_array_equal(row, np.arange(len(rb)))
    np.testing.assert_allclose(data["next", "reward"][:, 0].numpy(), 10.0 * row)
    np.testing.assert_allclose(data["action"][:, 0].numpy(), -row.astype(np.float32))


# ---------------------------------------------------------------------------------------- invariants
SIDE = (".sha256", ".lock", ".partial", ".corrupt", ".tmp")


def cache_state_ok(cache: Path, raw_truth: dict[str, bytes] | None = None) -> dict[str, int]:
    """Assert the invariants of a cache after a fault; return what was found (for the table).

    - every build directory (named by its 16-hex fingerprint; not ``.incomplete`` or
      ``.deleting-*``) has a manifest, and every published build passes ``verify_build``;
    - every raw file at its final name (no side suffix) has exactly the bytes of ``raw_truth``.
    """
    from datasets_hub.cache import MANIFEST, iter_builds
    from datasets_hub.cache_verify import verify_build

    found = {"builds": 0, "incomplete": 0, "partial": 0, "corrupt": 0}
    datasets = cache / "datasets"
    if datasets.is_dir():
        for entry in datasets.rglob("*"):
            if not entry.is_dir() or not re.fullmatch(r"[0-9a-f]{16}(\.incomplete)?", entry.name):
                continue  # build directories are named by their 16-hex fingerprint
            if entry.name.endswith(".incomplete"):
                found["incomplete"] += 1
            else:
                assert (entry / MANIFEST).is_file(), f"visible build without a manifest: {entry}"
    for build, _manifest in iter_builds():
        result = verify_build(build)
        assert result.ok, result.problems
        found["builds"] += 1
    raw = cache / "raw"
    if raw.is_dir():
        for path in raw.rglob("*"):
            if path.name.endswith(".partial"):
                found["partial"] += 1
            elif path.name.endswith(".corrupt"):
                found["corrupt"] += 1
            elif path.is_file() and not path.name.endswith(SIDE) and ".tmp" not in path.name and raw_truth:
                want = raw_truth.get(path.name)
                if want is not None:
                    assert path.read_bytes() == want, f"{path} is visible with the wrong bytes"
    return found


def files_outside(root: Path, cache: Path) -> set[Path]:
    """Every file under ``root`` that is not under ``cache`` (to prove nothing escaped the cache)."""
    return {p for p in root.rglob("*") if not p.is_relative_to(cache)}


# ---------------------------------------------------------------------------------------- zygote
_ZYGOTE = textwrap.dedent(r'''
    import ctypes, json, os, resource, signal, sys, traceback
    import datasets_hub, datasets_hub.hub, datasets_hub.build, datasets_hub.downloader, datasets_hub.cache_verify
    import datasets_hub.maintenance, datasets_hub.dataset_storage, datasets_hub.buffers.replay_buffers, datasets_hub.cli
    import datasets_hub.catalogue, datasets_hub.plugins
    import datasets_hub.loaders.d4rl, datasets_hub.loaders.gym, gymnasium, h5py, requests, filelock, tqdm.auto, yaml, numpy, torch, tensordict
    from datasets_hub.plugins import get_loader
    for name in ("d4rl", "gym"):
        get_loader(name)

    def drop_dac():
        """Give up CAP_DAC_OVERRIDE/DAC_READ_SEARCH/FOWNER: root then obeys file permissions."""
        libc = ctypes.CDLL(None, use_errno=True)
        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
        class Data(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
        header, data = Header(0x20080522, 0), (Data * 2)()
        if libc.capget(ctypes.byref(header), data) != 0:
            raise OSError(ctypes.get_errno(), "capget")
        mask = ~((1 << 1) | (1 << 2) | (1 << 3)) & 0xFFFFFFFF
        data[0].effective &= mask
        data[0].permitted &= mask
        if libc.capset(ctypes.byref(header), data) != 0:
            raise OSError(ctypes.get_errno(), "capset")

    def child(job):
        out = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        for key, value in (job.get("env") or {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if job.get("fsize") is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit then fail with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (job["fsize"], job["fsize"]))
        if job.get("drop_dac"):
            drop_dac()
        scope = {"__name__": "__job__"}
        try:
            exec(compile(job["code"], "<job>", "exec"), scope)
        except BaseException as exc:
            result = {"ok": False, "type": type(exc).__name__, "message": str(exc),
                      "mro": [c.__name__ for c in type(exc).__mro__], "traceback": traceback.format_exc()}
        else:
            result = {"ok": True, "value": scope.get("RESULT")}
        partial = job["result"] + ".partial"  # written whole, then renamed: a kill never leaves half a result
        with open(partial, "w") as fh:
            json.dump(result, fh, default=str)
        os.replace(partial, job["result"])
        sys.stdout.flush()
        os._exit(0)

    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if "wait" in request:
            _, status = os.waitpid(request["wait"], 0)
            reply = {"signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                     "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None}
        else:
            pid = os.fork()
            if pid == 0:
                try:
                    child(request)
                finally:
                    os._exit(1)
            reply = {"pid": pid}
        print(json.dumps(reply), flush=True)
''')


class Job:
    """One forked child: ``pid``; ``wait()`` -> (signal or None, result dict or None)."""

    def __init__(self, zygote: Zygote, pid: int, result: Path, log: Path) -> None:
        self.zygote, self.pid, self.result_path, self.log_path = zygote, pid, result, log
        self.started = time.monotonic()

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def finished(self) -> bool:
        """True once the child has exited (a zombie waiting to be reaped counts as exited)."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return True
        return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")

    def wait(self, timeout: float = 300) -> tuple[int | None, dict | None]:
        """Reap the child (killing it after ``timeout`` s); return (signal or None, result or None)."""
        deadline = time.monotonic() + timeout
        while not self.finished():
            if time.monotonic() > deadline:
                self.kill()
                break
            time.sleep(0.01)
        reply = self.zygote._ask({"wait": self.pid})
        result = json.loads(self.result_path.read_text()) if self.result_path.exists() else None
        return reply["signal"], result

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


class Zygote:
    """A warm process that forks one child per :meth:`start` (see the module docstring)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._n = 0
        env = {k: v for k, v in os.environ.items() if not k.startswith("DATASETS_HUB_")}
        env.update(DATASETS_HUB_CACHE=str(self.workdir / "unused-cache"), HF_HUB_OFFLINE="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            cwd=str(TESTS.parent),
            env=env,
        )
        first = self.proc.stdout.readline()
        if not first:
            raise RuntimeError("the zygote process failed to start (see stderr)")

    def _ask(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def start(
        self, code: str, *, env: dict[str, str] | None = None, fsize: int | None = None, drop_dac: bool = False
    ) -> Job:
        self._n += 1
        result, log = self.workdir / f"job{self._n}.json", self.workdir / f"job{self._n}.log"
        result.unlink(missing_ok=True)
        reply = self._ask(
            {
                "code": textwrap.dedent(code),
                "env": env or {},
                "fsize": fsize,
                "drop_dac": drop_dac,
                "result": str(result),
                "log": str(log),
            }
        )
        return Job(self, reply["pid"], result, log)

    def run(self, code: str, timeout: float = 120, **kw: Any) -> dict:
        """Run ``code`` in a child to the end; return its result dict (``RESULT`` global -> value)."""
        job = self.start(code, **kw)
        sig, result = job.wait()
        if result is None:
            raise AssertionError(f"child died (signal {sig}); log:\n{job.log()}")
        return result

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def hub_env(cache: Path, **extra: str) -> dict[str, str | None]:
    """The environment a child needs to see the test's cache, catalogue and mirror (None: unset)."""
    env: dict[str, str | None] = {
        "DATASETS_HUB_CACHE": str(cache),
        "DATASETS_HUB_REGISTRY": os.environ.get("DATASETS_HUB_REGISTRY"),
    }
    for key, value in os.environ.items():
        if key.startswith("DATASETS_HUB_ENDPOINT_"):
            env[key] = value
    env.update(extra)
    return env


def double_observation(td):
    """A row-wise preprocessing function (importable by worker processes): observations x 2."""
    out = td.select("observation", ("next", "observation"), "episode", "step").clone()
    out["observation"] = out["observation"] * 2
    out["next", "observation"] = out["next", "observation"] * 2
    return out


def stop_one_worker(td):
    """A preprocessing function whose first call in a worker process (never in the test process, which
    runs the probe) sends SIGSTOP to that worker; the stopped PID is written to the marker file."""
    marker = os.environ["DATASETS_HUB_TEST_STOP_MARK"]
    if os.getpid() != int(os.environ["DATASETS_HUB_TEST_PARENT"]):
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            pass
        else:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            os.kill(os.getpid(), signal.SIGSTOP)
    return double_observation(td)
