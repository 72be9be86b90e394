"""What every ``datasets-hub`` command shares: the program name, ``--param`` parsing, and plain-text output.

Tables are aligned plain text (no colour, no box drawing), so piped output stays greppable; only a
terminal gets its last column cut to the window's width.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from typing import Any

PROG = "datasets-hub"


def parse_param(text: str) -> tuple[str, Any]:
    """``k=v`` -> ``(k, json.loads(v))``, or ``(k, v)`` when ``v`` is not JSON."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--param takes key=value (e.g. steps=300), got {text!r}")
    too_deep = argparse.ArgumentTypeError(
        f"--param {key}=… is nested more than {MAX_PARAM_DEPTH} levels deep; no dataset parameter is"
    )
    try:
        parsed = json.loads(value)
    except ValueError:
        return key, value
    except RecursionError:  # nested deeper than the parser's stack
        raise too_deep from None
    if _depth(parsed) > MAX_PARAM_DEPTH:
        raise too_deep
    return key, parsed


MAX_PARAM_DEPTH = 32  # lists and objects in one --param value: far beyond any loader's parameter


def _depth(value: Any, level: int = 0) -> int:
    """How deeply lists and dicts nest in ``value`` (stops counting past :data:`MAX_PARAM_DEPTH`)."""
    if level > MAX_PARAM_DEPTH or not isinstance(value, (list, dict)):
        return level
    items = value.values() if isinstance(value, dict) else value
    return max((_depth(v, level + 1) for v in items), default=level + 1)


def params_of(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--param`` overrides of a parsed command line, as a dict (empty when none)."""
    return dict(getattr(args, "param", None) or [])


def add_param(p: argparse.ArgumentParser) -> None:
    """Give a command the repeatable ``--param KEY=VALUE`` option."""
    p.add_argument(
        "--param",
        "-p",
        action="append",
        type=parse_param,
        metavar="KEY=VALUE",
        help="override a catalogue parameter (value parsed as JSON when possible); repeatable",
    )


def add_frames(p: argparse.ArgumentParser) -> None:
    """Give a command ``--frames`` and ``--frame-quality`` (how camera frames are stored, as ``load``'s)."""
    p.add_argument(
        "--frames",
        choices=["auto", "raw", "jpeg", "png", "h264"],
        help="store camera frames raw, or as JPEG, PNG or intra h264 per frame (default auto: raw up to 16 GiB "
        "decoded, above it JPEG or PNG by loader)",
    )
    p.add_argument(
        "--frame-quality", type=int, metavar="Q",
        help="JPEG quality 1-100 (default 75, higher is better) or h264 quantiser 1-51 (default 28, lower is better)",
    )  # fmt: skip


def frames_of(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--frames``/``--frame-quality`` of a parsed command line, as ``load`` keywords (none when unset)."""
    chosen = {"frames": getattr(args, "frames", None), "frame_quality": getattr(args, "frame_quality", None)}
    return {k: v for k, v in chosen.items() if v is not None}


def width() -> int:
    return max(60, shutil.get_terminal_size((100, 24)).columns)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, truncate_last: bool = False) -> list[str]:
    """Aligned columns; with ``truncate_last`` the last column is cut to fit the terminal."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = []
    for row in [list(headers), *cells]:
        line = "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths[:-1], strict=True)) + "  " + row[-1]
        if truncate_last and sys.stdout.isatty() and len(line) > width():  # piped output stays whole
            line = line[: width() - 1] + "…"
        lines.append(line.rstrip())
    return lines


def out(lines: str | Sequence[str] = "") -> None:
    """Print one string, or lines (an empty sequence prints nothing but a newline), credentials redacted:
    an id given as a URL with a password (``http://user:pw@host/…``) is echoed without it."""
    from datasets_hub.redact import redact_text

    print(redact_text(lines if isinstance(lines, str) else "\n".join(lines)))


def err(message: object) -> None:
    """One ``datasets-hub: error: ...`` line on stderr, credentials redacted."""
    from datasets_hub.redact import redact_text

    print(f"{PROG}: error: " + " ".join(redact_text(message).split()), file=sys.stderr)


def note(message: str) -> None:
    """One ``datasets-hub: ...`` line on stderr (progress, remote catalogue outcomes)."""
    print(f"{PROG}: {message}", file=sys.stderr)
