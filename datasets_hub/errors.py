"""The one error tree of datasets_hub.

Every error names the problem and the fix. Buffer misuse that TorchRL users expect as built-in
exceptions (wrong shapes, bad arguments) raises ``ValueError``/``TypeError``/``RuntimeError``;
everything about datasets, loaders, downloads and the cache raises a :class:`HubError`. Classes
that also derive from a built-in exception can be caught as that exception too::

    HubError
    ├── CatalogueError            a catalogue file or entry is malformed, an id is taken
    │   └── UnknownDataset        (+ KeyError) no catalogue knows the id; says "did you mean"
    ├── PluginError               a loader plugin is broken: entry point, class, declared name
    │   └── UnknownLoader         (+ KeyError) no installed plugin has that name
    ├── MissingDependency         (+ ImportError) an optional library or plugin cannot be imported
    ├── DownloadError             a source cannot be fetched (network, status, size, offline mode)
    ├── UploadError               a build cannot be pushed (network, offline mode, token, the remote refused)
    ├── ChecksumMismatch          a file does not have the bytes it should
    ├── LoaderError               a loader cannot read its upstream data
    │   └── CorruptFile           one fetched file is malformed; the build moves it aside
    ├── CacheError                the cache is unwritable, full, locked, damaged or tampered with
    ├── TEDError                  (+ ValueError) data breaks the TorchRL Episode Data contract
    ├── InvalidParameter          (+ ValueError) a user argument is not acceptable
    │   ├── UnknownParameter      a dataset parameter its loader does not take (``names``)
    │   └── InvalidArgument       (+ RuntimeError) one that TorchRL refuses with RuntimeError
    ├── WrongDataType             (+ TypeError, RuntimeError) data a buffer part cannot hold or transform
    ├── StorageExists             (+ FileExistsError, RuntimeError) a scratch_dir already holds a storage
    ├── PreprocessError           the preprocessing fn failed or broke its contract
    └── ReadOnlyError             (+ RuntimeError) a write to a read-only buffer, storage or writer

This module imports only the standard library: every layer, the buffer layer included, uses it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class HubError(Exception):
    """Base class of every datasets_hub error."""


class CatalogueError(HubError):
    """A catalogue file (``registry.yaml``, ``DATASETS_HUB_REGISTRY``) or a ``register_dataset``
    entry is malformed, or names an id that is already taken."""


class PluginError(HubError):
    """A loader plugin is installed but broken: no entry points at all, an entry point that is not
    a :class:`~datasets_hub.loader.Loader` subclass, or a class whose ``name`` differs from its
    entry-point name."""


class UnknownDataset(CatalogueError, KeyError):
    """A dataset id that no catalogue knows."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnknownLoader(PluginError, KeyError):
    """A loader name that no installed plugin provides."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class MissingDependency(HubError, ImportError):
    """An optional dependency (or a loader plugin) cannot be imported; the message has the pip line."""


class ChecksumMismatch(HubError):
    """A downloaded or cached file does not have the bytes it should."""


class DownloadError(HubError):
    """A source could not be fetched (network, HTTP status, size, offline mode)."""


class UploadError(HubError):
    """A build could not be published (no network, offline mode, authentication, the remote refused)."""


class LoaderError(HubError):
    """A loader could not read its upstream data (malformed file, unexpected layout)."""


class CacheError(HubError):
    """The cache is unusable: unwritable, full, locked, corrupt or tampered with."""


class TEDError(HubError, ValueError):
    """Data that breaks the TorchRL Episode Data contract (docs/design/ted.md)."""


class InvalidParameter(HubError, ValueError):
    """A user-supplied argument (id, parameter, batch size) is not acceptable."""


class InvalidArgument(InvalidParameter, RuntimeError):
    """An argument of a buffer part that TorchRL refuses with ``RuntimeError`` (a ``ValueError`` here):
    code ported from TorchRL that catches ``RuntimeError`` keeps working, and so does ``except ValueError``."""


class WrongDataType(HubError, TypeError, RuntimeError):
    """Data of a type a buffer part cannot hold or transform (e.g. a tensor given to a writer that ranks
    TensorDicts). TorchRL raises ``RuntimeError`` there, Python's convention is ``TypeError``: both catch it."""


class StorageExists(HubError, FileExistsError, RuntimeError):
    """A ``LazyMemmapStorage``'s ``scratch_dir`` already holds a storage and ``existsok`` is False. TorchRL raises
    ``RuntimeError`` there; ``except FileExistsError`` catches it too."""


class UnknownParameter(InvalidParameter):
    """A dataset parameter its loader does not take; ``names`` lists the unknown names."""

    def __init__(self, message: str, names: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.names = tuple(names)


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


class ReadOnlyError(HubError, RuntimeError):
    """A write to something read-only: a dataset build, a preprocessing result, a buffer with an
    ``ImmutableDatasetWriter``. The message says how to get a writable copy."""

    def __init__(self, what: str = "buffer") -> None:
        super().__init__(
            f"this {what} is read-only and cannot be written to. For a writable copy, extend a new buffer "
            "from its contents: rb2 = TensorDictReplayBuffer(storage=LazyMemmapStorage(len(rb))); rb2.extend(rb[:])"
        )


class NotShareable(HubError, RuntimeError):
    """A buffer part sent to a process being spawned (``torch.multiprocessing``) that cannot share its state
    with it: a ``ListStorage`` (Python objects), a ``TensorDictMaxValueWriter``, a storage not allocated yet. The
    child's writes would be lost, so it is refused (``RuntimeError``, as in TorchRL); the message names the fix."""
