"""The command line's start-up: wall time of ``datasets-hub`` commands against other dataset CLIs.

Each command runs as a fresh process (what a user waits for), warm: bytecode cached (in a scratch
``PYTHONPYCACHEPREFIX``, so a ``PYTHONDONTWRITEBYTECODE`` environment is measured as installed
packages run) and one untimed run first, so the facts the CLI records are there. A scratch cache holds
two small gym builds: one of a scratch catalogue entry (``info``/``verify`` with the catalogue's params)
and one with ``--param`` overrides (``info``/``verify``/``rm --dry-run`` of it read recorded facts). One more
command gets params never seen before at every run (``seed=<n>``): the first ``info`` of new params, which
imports the id's loader module (not torch) to name the build. Against, in the same run and the same way:
Hugging Face's ``hf cache ls`` (else ``huggingface-cli scan-cache``) on an empty hub cache, and
``minari list local`` on an empty Minari store, through their console-script entry points.
Commands are timed in rounds (every command once per round) so that load changes hit them alike; the
table gives the median and the minimum per command, and whether it imported torch (from ``-X importtime``).

    .venv/bin/python benchmarks/cli.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import command, environment, write_report

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "cli.json"
BUILT = "gym/cartpole-random-v0"
PARAMS = ["--param", "steps=300"]


TINY = "gym/cli-bench-tiny-v0"  # a catalogue entry of its own: info/verify with the catalogue's params
REGISTRY = f"{TINY}:\n  loader: gym\n  params: {{env: CartPole-v1, steps: 300, seed: 0}}\n"


def ours() -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "datasets_hub.cli"]
    return {
        "datasets-hub --version": [*cli, "--version"],
        "datasets-hub --help": [*cli, "--help"],
        "datasets-hub list": [*cli, "list"],
        "datasets-hub list --json": [*cli, "list", "--json"],
        "datasets-hub cache ls": [*cli, "cache", "ls"],
        f"datasets-hub info {TINY}": [*cli, "info", TINY],
        f"datasets-hub verify {TINY}": [*cli, "verify", TINY],
        f"datasets-hub info {BUILT} --param steps=300": [*cli, "info", BUILT, *PARAMS],
        f"datasets-hub verify {BUILT} --param steps=300": [*cli, "verify", BUILT, *PARAMS],
        f"datasets-hub rm --dry-run {BUILT} --param steps=300": [*cli, "rm", "--dry-run", BUILT, *PARAMS],
        f"datasets-hub info {BUILT} --param steps=300 --param seed=<new>": [
            *cli, "info", BUILT, *PARAMS, "--param", FRESH,
        ],
    }  # fmt: skip


def others() -> dict[str, list[str]]:
    """The other projects' listing commands, run through their console-script entry points with this
    interpreter (so they are found in this environment whatever PATH says)."""
    from importlib.metadata import entry_points

    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}

    def script(name: str, *args: str) -> list[str]:
        module, _, attr = scripts[name].partition(":")
        code = f"import sys; sys.argv[0] = {name!r}; from {module} import {attr} as main; sys.exit(main())"
        return [sys.executable, "-c", code, *args]

    found: dict[str, list[str]] = {}
    if "hf" in scripts:
        found["hf cache ls"] = script("hf", "cache", "ls")
    elif "huggingface-cli" in scripts:
        found["huggingface-cli scan-cache"] = script("huggingface-cli", "scan-cache")
    if "minari" in scripts:
        found["minari list local"] = script("minari", "list", "local")
    return found


FRESH = "seed={fresh}"  # replaced by a number no earlier run used: params whose build is not recorded yet
_runs = iter(range(1000, 10**9))


def run(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    argv = [arg.replace("{fresh}", str(next(_runs))) if arg == FRESH else arg for arg in argv]
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    return time.perf_counter() - started, proc.returncode


def imports_torch(argv: list[str], env: dict[str, str]) -> bool | None:
    """Whether the command imports torch (None: not a Python command we can trace)."""
    if argv[0] != sys.executable:
        return None
    argv = [arg.replace("{fresh}", str(next(_runs))) if arg == FRESH else arg for arg in argv]
    proc = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    return any(line.split("|")[-1].strip() == "torch" for line in proc.stderr.splitlines() if "|" in line)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'command':<80} {'median s':>9} {'min s':>7} {'imports torch':>14} {'exit':>5}"]
    for r in rows:
        torch_cell = "-" if r["imports_torch"] is None else ("yes" if r["imports_torch"] else "no")
        lines.append(
            f"{r['command']:<80} {r['median_s']:>9.3f} {r['min_s']:>7.3f} {torch_cell:>14} {r['exit_code']:>5}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed runs of every command (median reported)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="datasets_hub_cli_bench_") as scratch:
        work = Path(scratch)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(
            DATASETS_HUB_CACHE=str(work / "cache"),
            DATASETS_HUB_OFFLINE="1",
            PYTHONPYCACHEPREFIX=str(work / "pyc"),
            HF_HUB_CACHE=str(work / "hf"),
            HF_HUB_OFFLINE="1",
            MINARI_DATASETS_PATH=str(work / "minari"),
        )
        (work / "hf").mkdir()
        (work / "minari").mkdir()
        (work / "registry.yaml").write_text(REGISTRY)
        env["DATASETS_HUB_REGISTRY"] = str(work / "registry.yaml")
        for dataset in ([TINY], [BUILT, *PARAMS]):
            subprocess.run(
                [sys.executable, "-m", "datasets_hub.cli", "download", *dataset],
                env=env,
                check=True,
                capture_output=True,
            )
        commands = {**ours(), **others()}
        for argv in commands.values():  # untimed: bytecode written, plugin facts recorded
            run(argv, env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        codes: dict[str, int] = {}
        for _ in range(args.rounds):
            for name, argv in commands.items():
                seconds, codes[name] = run(argv, env)
                times[name].append(seconds)
        rows = [
            {
                "command": name,
                "median_s": statistics.median(times[name]),
                "min_s": min(times[name]),
                "runs_s": times[name],
                "exit_code": codes[name],
                "imports_torch": imports_torch(commands[name], env),
            }
            for name in commands
        ]
    print(table(rows))
    write_report({"environment": environment(), "command": command(), "settings": vars(args), "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
