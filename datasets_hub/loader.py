"""The plugin contract every loader follows (docs/design/plugins.md).

A loader is a class registered under the entry-point group ``datasets_hub.loaders``; the
entry-point name is the loader's ``name`` and the prefix of its dataset ids. The core owns
downloading, checksums, locks, atomic builds and the memmap layout; a loader only says what to
fetch (:meth:`Loader.resources`) and turns fetched files into TED chunks (:meth:`Loader.episodes`).

Rules for loaders: import upstream libraries inside methods (``import datasets_hub`` must stay
light), never write to the cache, never print (report facts with :meth:`LoaderContext.note`),
and re-raise upstream errors as ``LoaderError(...) from exc``.

The TED chunk a loader yields (a ``TensorDict`` with batch size ``[N]``, N >= 1):

- whole episodes only, in a deterministic order, rows of an episode contiguous; a chunk is not
  modified after it is yielded (the core may still be writing it in the background);
- ``"episode"``: int64 ``[N]``, one id per episode, unique over the whole dataset;
- per-step keys at the root: ``"action"`` and any others (``"info", ...`` for upstream infos);
- ``("next", "reward")`` ``[N, 1]``; ``("next", "terminated")`` and ``("next", "truncated")``
  bool ``[N, 1]`` (``("next", "done")`` is derived as their union);
- observation-like keys appear twice, ``K`` at time t and ``("next", K)`` at t+1, with the same
  dtype and per-row shape. The core stores them once per episode (T+1 rows) when
  ``next[K][t] == K[t+1]`` inside every episode, and stores ``("next", K)`` separately otherwise;
- root ``done``/``terminated``/``truncated`` and ``step`` may be omitted; the core produces them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `datasets-hub list` and the catalogue must not pay for importing torch
    from tensordict import TensorDictBase


@dataclass(frozen=True)
class Resource:
    """One upstream file to fetch.

    ``name`` is the file's path under ``<cache>/raw/<loader>/`` (relative, no ``..``); ``urls`` are
    mirrors tried in order: ``http(s)://…``, ``hf://<repo_type>s/<repo_id>/<path>[@<revision>]`` for
    the Hugging Face Hub, or ``file://…`` for a local copy. ``sha256`` and ``size`` are checked
    when known.
    """

    name: str
    urls: tuple[str, ...]
    sha256: str | None = None
    size: int | None = None

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> Resource:
        urls = entry.get("urls", entry.get("url"))
        if isinstance(urls, str):
            urls = [urls]
        if not urls:
            raise ValueError(f"resource {entry!r} has no 'url' or 'urls'")
        # the file name from the URL's path: never its query (a presigned URL's signature) or credentials
        from urllib.parse import unquote, urlsplit

        name = entry.get("name") or unquote(urlsplit(str(urls[0])).path.rstrip("/").rsplit("/", 1)[-1]) or "download"
        size = entry.get("size", entry.get("bytes"))
        return cls(
            name=str(name),
            urls=tuple(str(u) for u in urls),
            sha256=entry.get("sha256"),
            size=None if size is None else int(size),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "urls": list(self.urls)}
        if self.sha256:
            out["sha256"] = self.sha256
        if self.size is not None:
            out["size"] = self.size
        return out


@dataclass
class DatasetSpec:
    """A catalogue entry with the user's overrides applied: what one build is made from."""

    id: str
    loader: str
    params: dict[str, Any] = field(default_factory=dict)
    resources: list[Resource] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)  # license, citation, description, scores…
    source: str = "registry.yaml"  # where the entry came from, for error messages

    @property
    def name(self) -> str:
        """The id without its ``<loader>/`` prefix."""
        return self.id.split("/", 1)[1] if "/" in self.id else self.id


class LoaderContext:
    """What the core lends a loader during a build.

    ``chunk_rows`` is the number of transitions a chunk should hold at most (whole episodes may
    exceed it); ``note(key, value)`` records a fact for the dataset card (e.g. rows whose next
    observation upstream does not know); ``progress(n)`` reports n more source rows read, and
    ``expect(total)`` how many it will read in all, when the loader knows it before reading (the
    build's progress bar then shows a total, a rate and the time left).
    """

    def __init__(
        self,
        chunk_rows: int = 65536,
        progress: Callable[[int], None] | None = None,
        raw_dir: Path | None = None,
        expect: Callable[[int | None], None] | None = None,
    ) -> None:
        self.chunk_rows = int(chunk_rows)
        self.notes: dict[str, Any] = {}
        self.raw_dir = raw_dir
        self._progress = progress
        self._expect = expect

    def expect(self, total: int | None) -> None:
        """The number of source rows ``progress`` will report in all (``None``: unknown)."""
        if self._expect is not None:
            self._expect(total)

    def note(self, key: str, value: Any) -> None:
        self.notes[key] = value

    def progress(self, n: int) -> None:
        if self._progress is not None:
            self._progress(n)


class Loader:
    """Base class of loader plugins; subclasses set the class attributes and the two methods."""

    name: str = ""
    requires: tuple[str, ...] = ()  # import names the loader needs at build time
    install_hint: str = ""  # the exact pip line that provides ``requires``
    format_version: int = 1  # bump when conversion output changes: old builds are not reused
    downloads: bool = True  # False: the data is generated here (no download; `list` shows "local")

    def catalogue(self) -> dict[str, dict[str, Any]]:
        """Extra ids under this loader's prefix: ``{"<name>/<x>": {"params": …, "resources": […]}}``."""
        return {}

    def entry_for(self, dataset_id: str) -> dict[str, Any] | None:
        """An entry for an id under this loader's prefix that no catalogue lists, or ``None``.

        For loaders that accept open-ended ids (e.g. ``lerobot/<org>/<name>`` for any Hub repo in
        that format): return ``{"params": …, "description": …}`` and the id resolves like a catalogue
        entry. The default accepts nothing, so unknown ids get "did you mean …"."""
        return None

    def remote_catalogue(self) -> dict[str, dict[str, Any]]:
        """Ids a remote service lists (may use the network). Never called while listing: only on
        demand (``datasets-hub list --refresh``), in a thread with a timeout; the core caches the result."""
        return {}

    def check_params(self, spec: DatasetSpec) -> None:
        """Reject parameters this loader does not understand (raise ``InvalidParameter``)."""
        return None

    def reject_unknown_params(self, spec: DatasetSpec, accepted: Iterable[str]) -> None:
        """Raise :class:`~datasets_hub.errors.UnknownParameter` naming the parameters of ``spec`` not in ``accepted``, with a
        did-you-mean and the accepted list: the usual first step of :meth:`check_params`."""
        from datasets_hub.errors import UnknownParameter, did_you_mean

        accepted = sorted(accepted)
        unknown = sorted(set(spec.params) - set(accepted))
        if unknown:
            raise UnknownParameter(
                f"{spec.id}: unknown parameter(s) {', '.join(map(repr, unknown))} for the {self.name} loader "
                f"(it accepts {', '.join(accepted)}).{did_you_mean(unknown[0], accepted)}",
                unknown,
            )

    def resources(self, spec: DatasetSpec) -> list[Resource]:
        """What to fetch for ``spec``; the default is the catalogue entry's resources."""
        return list(spec.resources)

    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDictBase]:
        """Yield TED chunks of whole episodes (see the module docstring); ``files`` maps each
        resource name to its verified local path."""
        raise NotImplementedError
