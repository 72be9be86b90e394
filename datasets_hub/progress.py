"""Progress of long row-by-row work (a build, a preprocessing pass), on stderr.

On a terminal: a tqdm bar, with the rows done of the total, the rate and the time left when the
total is known (the rows and the rate alone, and the words "total unknown", when it is not). On
any other stderr (a batch job's log): one line every ``DATASETS_HUB_PROGRESS_INTERVAL`` seconds
(default 30, as downloads do) and, when any was printed, one at the end, so the log of a long job
shows it is alive and how far it got, and a short one stays quiet.
``show=False`` prints nothing.
"""

from __future__ import annotations

import sys
import time
from typing import Any


def _count(n: float) -> str:
    return f"{int(n):,}"


def _eta(seconds: float) -> str:
    seconds = round(seconds)  # an int
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


class RowProgress:
    """``with RowProgress("building d4rl/x", total=1_000_000) as bar: bar.update(n)``; ``set_total``
    gives the total once it is learnt (a loader that knows how many rows it will read)."""

    def __init__(
        self,
        desc: str,
        total: int | None = None,
        *,
        unit: str = "rows",
        show: bool | None = None,
        interval: float | None = None,
    ) -> None:
        tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
        self.desc, self.unit = desc, unit
        self.total = total if total is None or total > 0 else None
        self.is_bar = tty if show is None else bool(show) and tty
        self.lines = (not tty) if show is None else bool(show) and not tty
        if interval is None:
            from datasets_hub.downloads.fetch import download_settings

            interval = download_settings()["progress_interval"]  # DATASETS_HUB_PROGRESS_INTERVAL, checked there
        self.interval = float(interval)
        self.n = 0
        self.outgrown: int | None = None  # the expected total, once more rows than it were counted
        self.printed = 0  # progress lines written so far
        self._bar: Any = None
        self._t0 = self._last = time.monotonic()

    def __enter__(self) -> RowProgress:
        if self.is_bar:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=self._bar_desc(), unit=self.unit, unit_scale=True, leave=False)
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
        if self.lines and exc_type is None and self.printed:
            self._line(final=True)

    def _bar_desc(self) -> str:
        if self.outgrown is not None:
            return f"{self.desc} (more than the {_count(self.outgrown)} expected)"
        return self.desc if self.total is not None else f"{self.desc} (total unknown)"

    def set_total(self, total: int | None) -> None:
        """The expected number of rows, once known (``None`` or 0: unknown)."""
        self.total = int(total) if total else None
        if self.total is not None and self.total >= self.n:
            self.outgrown = None
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.set_description(self._bar_desc(), refresh=True)

    def update(self, n: int) -> None:
        self.n += int(n)
        if self.total is not None and self.n > self.total:  # the total was an estimate: never "1.07M of 1M (100%)"
            self.outgrown = self.total
            self.set_total(None)
        if self._bar is not None:
            self._bar.update(n)
        elif self.lines and time.monotonic() - self._last >= self.interval:
            self._line()

    def status(self) -> str:
        """The line printed on a non-terminal stderr (without the ``datasets_hub:`` prefix)."""
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        rate = self.n / elapsed
        if self.total is None:
            known = f"more than the {_count(self.outgrown)} expected" if self.outgrown is not None else "total unknown"
            return f"{self.desc}: {_count(self.n)} {self.unit} ({known}), {_count(rate)} {self.unit}/s"
        done = min(self.n / self.total, 1.0)
        left = (self.total - self.n) / rate if rate > 0 and self.n < self.total else 0.0
        return (
            f"{self.desc}: {_count(self.n)} of {_count(self.total)} {self.unit} ({done:.0%}), "
            f"{_count(rate)} {self.unit}/s, ETA {_eta(left)}"
        )

    def _line(self, *, final: bool = False) -> None:
        self._last = time.monotonic()
        self.printed += 1
        text = self.status()
        if final:
            text += f", done in {_eta(self._last - self._t0)}"
        print(f"datasets_hub: {text}", file=sys.stderr, flush=True)
