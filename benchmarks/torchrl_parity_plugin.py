"""pytest plugin of ``benchmarks/torchrl_parity.py``: records every test's outcome, and maps names.

Loaded with ``-p torchrl_parity_plugin`` into a pytest run over TorchRL's own ``test/rb``. Environment:

- ``TORCHRL_PARITY_REPORT``: JSON file written at the end: ``{nodeid: {"outcome", "message"}}``.
- ``TORCHRL_PARITY_SIDE=datasets_hub``: before any test module is imported, every public name that
  ``torchrl.data`` (or one of its replay-buffer, storage-map and post-processing modules) defines is
  replaced, in the modules the tests import from, by the datasets_hub object of the same name. Only
  names are mapped, never behaviour: a name datasets_hub does not export becomes a stand-in that
  raises ``NotImplementedError("datasets_hub has no NAME ...")`` when called, so that test fails
  with a cause the report groups. TorchRL's own modules keep their references to TorchRL's classes
  (each mapped module is replaced by a copy in ``sys.modules``), so TorchRL internals the tests use
  (environments, collectors, transforms) are unchanged.
"""

from __future__ import annotations

import inspect
import json
import os
import pkgutil
import signal
import sys
import types
import zlib
from typing import Any

import pytest

# torchrl.data's packages whose public names are the replay-buffer API that datasets_hub mirrors
MAPPED_PACKAGES = ("torchrl.data.replay_buffers", "torchrl.data.map", "torchrl.data.postprocs")
MISSING_MARK = "datasets_hub has no"


def _defined_in_mapped_package(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return any(module == p or module.startswith(p + ".") for p in MAPPED_PACKAGES)


def _stand_in(name: str, original: Any) -> Any:
    """An object under TorchRL's name that fails, naming the missing name, as soon as it is used."""
    message = f"{MISSING_MARK} {name} (torchrl.data.{name} is not mapped to anything)"

    if inspect.isclass(original):

        class _Refuse(type):
            def __call__(cls, *args: Any, **kwargs: Any) -> Any:
                raise NotImplementedError(message)

        return _Refuse(name, (), {"__doc__": message, "__module__": "datasets_hub.missing"})

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(message)

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


def _mapped_modules() -> list[types.ModuleType]:
    import torchrl.data

    modules = [torchrl.data]
    for package_name in MAPPED_PACKAGES:
        package = sys.modules.get(package_name)
        if package is None:
            try:
                package = __import__(package_name, fromlist=["_"])
            except ImportError:
                continue
        modules.append(package)
        for info in pkgutil.walk_packages(getattr(package, "__path__", []), prefix=package_name + "."):
            try:
                modules.append(__import__(info.name, fromlist=["_"]))
            except Exception:  # noqa: BLE001 - an optional TorchRL module (ray, llm) that cannot import here
                continue
    return modules


def map_names() -> dict[str, str]:
    """Put proxies of TorchRL's replay-buffer modules in ``sys.modules``; return ``{name: "ours"|"missing"}``."""
    import datasets_hub

    ours = set(datasets_hub.__all__)
    mapping: dict[str, str] = {}
    proxies: dict[str, types.ModuleType] = {}
    for module in _mapped_modules():
        proxy = types.ModuleType(module.__name__, module.__doc__)
        proxy.__dict__.update(module.__dict__)
        for name, obj in list(module.__dict__.items()):
            if name.startswith("_") or isinstance(obj, types.ModuleType) or not _defined_in_mapped_package(obj):
                continue
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                # constants (default keys, ...) are data, not behaviour, and stay TorchRL's; an object
                # datasets_hub exports under the same name (the query language's ``traj``) is mapped, so a
                # test does not hand TorchRL's expressions to our functions
                if name in ours and not isinstance(obj, (str, bytes, int, float, tuple, frozenset)):
                    proxy.__dict__[name] = getattr(datasets_hub, name)
                    mapping[name] = "ours"
                continue
            if name in ours:
                proxy.__dict__[name] = getattr(datasets_hub, name)
                mapping[name] = "ours"
            else:
                proxy.__dict__[name] = _stand_in(name, obj)
                mapping.setdefault(name, "missing")
        proxies[module.__name__] = proxy
    for name, proxy in proxies.items():
        sys.modules[name] = proxy
        parent_name, _, child = name.rpartition(".")
        parent = proxies.get(parent_name) or sys.modules.get(parent_name)
        if parent is not None and parent_name in proxies:
            setattr(parent, child, proxy)
    import torchrl

    torchrl.__dict__["data"] = proxies["torchrl.data"]
    return mapping


class _Recorder:
    """Outcomes by node id; each finished test is also appended to ``<path>.jsonl`` at once, so an
    interrupted run still tells what it ran (and how long each test took)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.results: dict[str, dict[str, Any]] = {}
        self.progress = open(path + ".jsonl", "a")  # noqa: SIM115 - open for the whole session, closed at its end

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.results.setdefault(report.nodeid, {"outcome": "passed", "message": "", "seconds": 0.0})
        entry["seconds"] = round(entry["seconds"] + report.duration, 3)
        if report.when == "teardown":
            self.progress.write(json.dumps({"test": report.nodeid, **entry}) + "\n")
            self.progress.flush()
        if hasattr(report, "wasxfail"):
            entry["outcome"] = "xfailed" if report.skipped else "xpassed"
            return
        if report.skipped:
            if entry["outcome"] == "passed":
                entry["outcome"] = "skipped"
            return
        if report.failed:
            entry["outcome"] = "failed" if report.when == "call" else "error"
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1:]
            entry["message"] = message if isinstance(message, str) else " ".join(message)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else str(report.longrepr).strip()[-300:]
            self.results[report.nodeid] = {"outcome": "collection error", "message": message}

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.progress.close()
        with open(self.path, "w") as f:
            json.dump(self.results, f)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        """A test running longer than ``TORCHRL_PARITY_TIMEOUT`` seconds fails with TimeoutError (both sides
        alike), so one hung test (a child process waited for) does not stop the measurement."""
        seconds = int(os.environ.get("TORCHRL_PARITY_TIMEOUT", "0"))

        def expire(signum: int, frame: Any) -> None:
            raise TimeoutError(f"the test ran past TORCHRL_PARITY_TIMEOUT={seconds} s")

        previous = signal.signal(signal.SIGALRM, expire) if seconds else None
        if seconds:
            signal.alarm(seconds)
        try:
            yield
        finally:
            if seconds:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, previous)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``TORCHRL_PARITY_SHARD=i/n`` keeps the tests whose node id hashes to ``i`` modulo ``n``: the same
    deterministic subset on both sides, for machines where the whole suite takes too long."""
    shard = os.environ.get("TORCHRL_PARITY_SHARD")
    if not shard:
        return
    i, n = (int(x) for x in shard.split("/"))
    items[:] = [item for item in items if zlib.crc32(item.nodeid.encode()) % n == i]


def pytest_configure(config: pytest.Config) -> None:
    mapping: dict[str, str] = {}
    if os.environ.get("TORCHRL_PARITY_SIDE") == "datasets_hub":
        mapping = map_names()
    path = os.environ.get("TORCHRL_PARITY_REPORT")
    if path:
        config.pluginmanager.register(_Recorder(path), "torchrl_parity_recorder")
        with open(path + ".names", "w") as f:
            json.dump(mapping, f)
