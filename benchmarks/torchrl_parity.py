"""TorchRL's own replay-buffer tests (pytorch/rl ``test/rb``) run against TorchRL and against datasets_hub.

    make torchrl-parity TORCHRL_SRC=path/to/pytorch-rl
    python benchmarks/torchrl_parity.py --torchrl-src path/to/pytorch-rl [--files test_writers.py ...] [-k EXPR]

The tests are read from the checkout at a pinned commit (``git archive``, into a temporary folder: nothing of
TorchRL's is copied into this repository) and run twice in this interpreter, which must have TorchRL installed
(``make bench-install``): once as they are, once with only the names of ``torchrl.data``'s replay-buffer
modules mapped to datasets_hub's objects of the same name (``benchmarks/torchrl_parity_plugin.py``; a name
we do not export fails with "datasets_hub has no NAME"). Printed: TorchRL's pass rate, ours over the tests
TorchRL passes, and our failures grouped by cause. JSON goes to ``benchmarks/results/torchrl_parity.json``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from _report import command, environment, write_report

# pytorch/rl main of 2026-08-22 (version.txt 0.14.0): its test/rb matches the TorchRL 0.14 release
PINNED_COMMIT = "ae9719f17b1517af5c2523a36c4616f003ee55cf"
# RPC and Ray tests start servers and processes of their own: opt in with --files test_rb_distributed.py
DEFAULT_EXCLUDED = ("test_rb_distributed.py",)
MISSING_MARK = "datasets_hub has no"
SIDES = ("torchrl", "datasets_hub")


def extract_tests(source: Path, commit: str, into: Path) -> list[str]:
    """``test/rb`` (and the pytest configuration around it) of ``commit``, written under ``into``."""
    git = ["git", "-C", str(source)]
    found = subprocess.run([*git, "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
    if found.returncode != 0:
        raise SystemExit(
            f"{source} has no commit {commit} (the pinned pytorch/rl commit): "
            f"run `git -C {source} fetch origin {commit}` or point TORCHRL_SRC at a newer clone"
        )
    paths = ["pytest.ini", "test/conftest.py", "test/rb"]
    archive = subprocess.run([*git, "archive", "--format=tar", commit, *paths], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return sorted(p.name for p in (into / "test" / "rb").glob("test_*.py"))


def start_side(
    side: str, root: Path, files: list[str], args: argparse.Namespace, out: Path
) -> tuple[subprocess.Popen, float]:
    """Start pytest over ``files`` for one side (``torchrl`` or ``datasets_hub``)."""
    env = dict(os.environ)
    env["TORCHRL_PARITY_TIMEOUT"] = str(args.timeout)
    if args.shard:
        env["TORCHRL_PARITY_SHARD"] = args.shard
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["TORCHRL_PARITY_REPORT"] = str(out)
    env["TORCHRL_PARITY_SIDE"] = side
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "torchrl_parity_plugin", "-p", "no:cacheprovider"]
    cmd += ["-o", "addopts=", "--tb=no", "--no-header", "-rN", "--rootdir", str(root)]
    cmd += [f"test/rb/{f}" for f in files]
    if args.keyword:
        cmd += ["-k", args.keyword]
    log = open(root / f"{side}.log", "w")  # noqa: SIM115 - the child writes it; closed with the run
    return subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT), time.perf_counter()


def finish_side(side: str, started: tuple[subprocess.Popen, float], root: Path, out: Path) -> tuple[dict, dict, float]:
    """Wait for one side; return ({nodeid: result}, {name: mapping}, seconds)."""
    proc, t0 = started
    proc.wait()
    seconds = time.perf_counter() - t0
    if not out.exists():
        tail = (root / f"{side}.log").read_text()[-3000:]
        raise SystemExit(f"pytest ({side}) wrote no report; its output ended with:\n{tail}")
    names_file = Path(str(out) + ".names")
    names = json.loads(names_file.read_text()) if names_file.exists() else {}
    return json.loads(out.read_text()), names, seconds


def cause(message: str) -> str:
    """A failure message reduced to its cause: numbers, addresses and quoted values blanked, first line."""
    if MISSING_MARK in message:
        return "missing: " + message.split(MISSING_MARK, 1)[1].split()[0]
    line = message.strip().splitlines()[0] if message.strip() else "(no message)"
    line = re.sub(r"0x[0-9a-f]+", "0x_", line)
    line = re.sub(r"\d+(\.\d+)?", "N", line)
    line = re.sub(r"tensor\(.*", "tensor(...)", line)
    return line[:140]


def compare(theirs: dict, ours: dict) -> dict:
    """Pass rates and our failures, grouped by cause, over the tests TorchRL passes."""
    counted = ("passed", "failed", "error")
    theirs_run = [t for t, r in theirs.items() if r["outcome"] in counted]
    theirs_passed = [t for t in theirs_run if theirs[t]["outcome"] == "passed"]
    collection_errors = {t: r for t, r in ours.items() if r["outcome"] == "collection error"}
    groups: dict[str, list[str]] = defaultdict(list)
    passed = 0
    for test in theirs_passed:
        result = ours.get(test)
        if result is None:  # never collected on our side: its module failed to import
            module = test.split("::", 1)[0]
            message = collection_errors.get(module, {"message": "not collected"})["message"]
            result = {"outcome": "collection error", "message": message}
        if result["outcome"] == "passed":
            passed += 1
        else:
            groups[cause(result["message"])].append(test)
    by_file = Counter(t.split("::", 1)[0].rsplit("/", 1)[-1] for t in theirs_passed)
    passed_by_file = Counter(
        t.split("::", 1)[0].rsplit("/", 1)[-1] for t in theirs_passed if ours.get(t, {}).get("outcome") == "passed"
    )
    return {
        "torchrl": {
            "collected": len(theirs),
            "run": len(theirs_run),
            "passed": len(theirs_passed),
            "pass_rate": len(theirs_passed) / len(theirs_run) if theirs_run else 0.0,
        },
        "datasets_hub": {
            "of_torchrl_passed": len(theirs_passed),
            "passed": passed,
            "pass_rate": passed / len(theirs_passed) if theirs_passed else 0.0,
            "passed_anywhere": sum(r["outcome"] == "passed" for r in ours.values()),
        },
        "by_file": {
            f: {"torchrl_passed": n, "datasets_hub_passed": passed_by_file[f]} for f, n in sorted(by_file.items())
        },
        "failure_causes": sorted(
            ({"cause": c, "tests": len(ts), "example": ts[0]} for c, ts in groups.items()), key=lambda g: -g["tests"]
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torchrl-src", required=True, type=Path, help="a pytorch/rl git clone (or bare mirror)")
    parser.add_argument("--commit", default=PINNED_COMMIT, help="the pytorch/rl commit whose test/rb is run")
    parser.add_argument("--files", nargs="*", help="test files of test/rb to run (default: all but distributed)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression, passed to both runs")
    parser.add_argument("--causes", type=int, default=40, help="failure causes to print")
    parser.add_argument("--timeout", type=int, default=120, help="seconds a test may run before it fails (0: none)")
    parser.add_argument("--shard", help="i/n: run only the tests whose node id hashes to i mod n (both sides)")
    parser.add_argument("--work-dir", help="keep the extracted tests and per-test progress (*.jsonl) here")
    parser.add_argument("--out", default=str(HERE / "results" / "torchrl_parity.json"))
    args = parser.parse_args()
    try:
        import torchrl
    except ImportError:
        raise SystemExit(
            "TorchRL is not installed in this interpreter: run `make bench-install` and use .venv-bench"
        ) from None

    with tempfile.TemporaryDirectory(prefix="torchrl-parity-") as tmp:
        root = Path(args.work_dir or tmp)
        root.mkdir(parents=True, exist_ok=True)
        available = extract_tests(args.torchrl_src.expanduser(), args.commit, root)
        files = args.files or [f for f in available if f not in DEFAULT_EXCLUDED]
        unknown = sorted(set(files) - set(available))
        if unknown:
            raise SystemExit(f"not in test/rb at {args.commit[:12]}: {unknown}; there are {available}")
        # the two sides are independent processes: run them side by side
        running = {side: start_side(side, root, files, args, root / f"{side}.json") for side in SIDES}
        theirs, _, theirs_s = finish_side("torchrl", running["torchrl"], root, root / "torchrl.json")
        ours, names, ours_s = finish_side("datasets_hub", running["datasets_hub"], root, root / "datasets_hub.json")

    summary = compare(theirs, ours)
    t, o = summary["torchrl"], summary["datasets_hub"]
    print(
        f"pytorch/rl test/rb at {args.commit[:12]}, files: {' '.join(files)}"
        + (f", -k {args.keyword}" if args.keyword else "")
        + (f", shard {args.shard} of the tests" if args.shard else "")
    )
    print(
        f"TorchRL {torchrl.__version__}: {t['passed']}/{t['run']} passed ({100 * t['pass_rate']:.1f}%), {theirs_s:.0f} s"
    )
    print(
        f"datasets_hub: {o['passed']}/{o['of_torchrl_passed']} of the tests TorchRL passes "
        f"({100 * o['pass_rate']:.1f}%), {ours_s:.0f} s"
    )
    print("\nper file (TorchRL passed -> datasets_hub passed):")
    for f, n in summary["by_file"].items():
        print(f"  {f:28s} {n['torchrl_passed']:6d} -> {n['datasets_hub_passed']:6d}")
    missing = sorted(n for n, how in names.items() if how == "missing")
    print(f"\nnames mapped: {sum(h == 'ours' for h in names.values())}; not exported by datasets_hub: {len(missing)}")
    print(f"\nour failures by cause (top {args.causes}):")
    for group in summary["failure_causes"][: args.causes]:
        print(f"  {group['tests']:5d}  {group['cause']}\n         e.g. {group['example']}")
    report = {
        "command": command(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "environment": environment(torchrl=torchrl.__version__),
        "pytorch_rl_commit": args.commit,
        "files": files,
        "keyword": args.keyword,
        "shard": args.shard,
        "seconds": {"torchrl": round(theirs_s, 1), "datasets_hub": round(ours_s, 1)},
        "names_not_exported": missing,
        **summary,
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
