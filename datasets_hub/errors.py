"""The one error tree of datasets_hub.

Every error names the problem and the fix. Buffer misuse that TorchRL users expect as built-in
exceptions (wrong shapes, bad arguments) raises ``ValueError``/``TypeError``/``RuntimeError``;
everything about datasets, loaders, downloads and the cache raises a :class:`HubError`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class HubError(Exception):
    """Base class of every datasets_hub error."""


class UnknownDataset(HubError, KeyError):
    """A dataset id that no catalogue knows."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnknownLoader(HubError, KeyError):
    """A loader name that no installed plugin provides."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class MissingDependency(HubError, ImportError):
    """An optional dependency (or a loader plugin) cannot be imported; the message has the pip line."""


class ChecksumMismatch(HubError):
    """A downloaded or cached file does not have the bytes it should."""


class DownloadError(HubError):
    """A source could not be fetched (network, HTTP status, size, offline mode)."""


class LoaderError(HubError):
    """A loader could not read its upstream data (malformed file, unexpected layout)."""


class CacheError(HubError):
    """The cache is unusable: unwritable, full, locked, corrupt or tampered with."""


class TEDError(HubError, ValueError):
    """Data that breaks the TorchRL Episode Data contract (docs/design/ted.md)."""


class InvalidParameter(HubError, ValueError):
    """A user-supplied argument (id, parameter, batch size) is not acceptable."""


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3) -> str:
    """Return ``" Did you mean 'a', 'b'?"`` for the closest candidates, or ``""`` if none is close."""
    candidates = list(candidates)
    close = difflib.get_close_matches(name, candidates, n=n, cutoff=0.5)
    if not close:
        lowered = name.lower()
        close = [c for c in candidates if lowered and lowered in c.lower()][:n]
    if not close:
        return ""
    return " Did you mean " + ", ".join(repr(c) for c in close) + "?"


class CorruptFile(LoaderError):
    """A fetched upstream file is malformed (truncated, a bad CRC, not the format it claims).

    ``path`` is the local file. A loader raises it instead of a plain :class:`LoaderError` when
    the bytes of one file are at fault; the build then moves that file aside to
    ``<name>.corrupt`` (never reused: the next load downloads it again) and adds the URL it came
    from to the message.
    """

    def __init__(self, message: str, *, path: object = None) -> None:  # a str or Path
        super().__init__(message)
        self.path = path


class PreprocessError(HubError):
    """``fn`` failed (or broke its contract) while preprocessing; the message names fn and the rows."""


class PluginError(HubError):
    """An installed loader plugin is broken: it fails at import, or is registered under another name."""
