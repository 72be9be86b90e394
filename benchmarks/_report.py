"""What every benchmark script records next to its figures: the machine, the versions, the command."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any


def environment(**extra: Any) -> dict[str, Any]:
    """Versions and machine facts (``extra`` adds or overrides entries, e.g. ``torchrl=...``)."""
    import tensordict
    import torch

    import datasets_hub

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "tensordict": tensordict.__version__,
        "datasets_hub": datasets_hub.__version__,
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "load_average": os.getloadavg(),
    }
    env.update(extra)
    return env


def command() -> str:
    """The command line that produced the report, as a user would type it."""
    return " ".join([Path(sys.executable).name, *sys.argv])


def write_report(report: dict[str, Any], out: str | Path) -> None:
    """Write ``report`` as JSON to ``out`` (parents created) and say where."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"\nwrote {out}")
