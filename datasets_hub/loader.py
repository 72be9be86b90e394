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

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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
    when known. ``identity`` tells versions of the bytes behind the same URLs apart when no sha256 is
    known (a local file's inode and modification time): it enters the raw cache key and the build
    fingerprint, so a file rewritten in place (even with the same size) is copied and converted again.
    ``in_place=True`` (a ``file://`` URL only): the user's file is read where it is, never copied into
    the cache, and enters the build fingerprint by its content (:mod:`datasets_hub.downloads.in_place`).
    """

    name: str
    urls: tuple[str, ...]
    sha256: str | None = None
    size: int | None = None
    in_place: bool = False
    identity: str | None = None

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
            in_place=bool(entry.get("in_place", False)),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "urls": list(self.urls)}
        if self.sha256:
            out["sha256"] = self.sha256
        if self.size is not None:
            out["size"] = self.size
        if self.in_place:
            out["in_place"] = True
        if self.identity is not None:
            out["identity"] = self.identity
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
    build's progress bar then shows a total, a rate and the time left). ``done_episodes`` holds the
    ids a resumed build already wrote (empty otherwise); only a ``resumable`` loader is resumed.
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
        self.done_episodes: frozenset[int] = frozenset()
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
    #: True: :meth:`episodes` skips the ids in ``ctx.done_episodes`` (never decodes or converts them) and yields the
    #: others exactly as it would have; an interrupted build then resumes (datasets_hub.build.resume)
    resumable: bool = False

    #: environment variables whose values :meth:`catalogue` depends on (e.g. a local store's root)
    catalogue_env: tuple[str, ...] = ()

    def catalogue(self) -> dict[str, dict[str, Any]]:
        """Extra ids under this loader's prefix: ``{"<name>/<x>": {"params": …, "resources": […]}}``.

        No network (that is :meth:`remote_catalogue`). The hub keeps the answer (``datasets-hub list``
        imports no loader) until the plugin's code, a variable of :attr:`catalogue_env` or one of
        the paths :meth:`catalogue_files` returns changes: the answer must depend on nothing else."""
        return {}

    def catalogue_files(self) -> list[Path]:
        """The files and folders :meth:`catalogue` read (a folder's entries changing changes it); default none."""
        return []

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

    def url_param(self, spec: DatasetSpec) -> list[str] | None:
        """The ``url=`` parameter of a loader that reads one file (a URL string, or a non-empty list of
        mirror URLs tried in order) as a list, checked; ``None`` when it is not given. Raises
        ``InvalidParameter`` for anything else."""
        from datasets_hub.errors import InvalidParameter

        url = spec.params.get("url")
        if url is None:
            return None
        urls = [url] if isinstance(url, str) else url
        if not isinstance(urls, list) or not urls or not all(isinstance(u, str) and u for u in urls):
            raise InvalidParameter(
                f"{spec.id}: url must be a URL string or a non-empty list of mirror URLs, got {url!r}"
            )
        return list(urls)

    def reject_unknown_params(self, spec: DatasetSpec, accepted: Iterable[str]) -> None:
        """Raise :class:`~datasets_hub.errors.UnknownParameter` naming the parameters of ``spec`` not in ``accepted``, with a
        did-you-mean and the accepted list: the usual first step of :meth:`check_params`."""
        from datasets_hub.errors import UnknownParameter, did_you_mean

        accepted = sorted(accepted)
        unknown = sorted(set(spec.params) - set(accepted))
        if unknown:
            from datasets_hub.torchrl_porting import refuse_torchrl_keywords

            refuse_torchrl_keywords(spec.id, self.name, unknown)  # a TorchRL keyword: what to write here
            raise UnknownParameter(
                f"{spec.id}: unknown parameter(s) {', '.join(map(repr, unknown))} for the {self.name} loader "
                f"(it accepts {', '.join(accepted)}).{did_you_mean(unknown[0], accepted)}",
                unknown,
            )

    #: the codec ``load(..., frames=None)`` stores image keys in when :meth:`frame_bytes` exceeds
    #: ``datasets_hub.build.frames.RAW_LIMIT_BYTES``: ``"jpeg"`` for camera footage (already lossy upstream),
    #: ``"png"`` where each pixel matters (small rendered or game frames, exact)
    auto_frames = "jpeg"

    def frame_bytes(self, spec: DatasetSpec) -> int | None:
        """The decoded bytes of the camera frames the build of ``spec`` would hold (every uint8 image key,
        T + 1 rows per episode), or ``None`` when unknown (the default).

        It names the build (the codec enters its fingerprint), so it comes before any download: from the
        catalogue entry, the parameters, facts upstream publishes, or a small metadata file; an upper bound
        is fine where the exact count is only in the data. ``load(..., frames=None)`` stores frames raw up
        to ``datasets_hub.build.frames.RAW_LIMIT_BYTES`` of them and as :attr:`auto_frames` above; without an
        estimate it stores them raw."""
        return None

    def resources(self, spec: DatasetSpec) -> list[Resource]:
        """What to fetch for ``spec``; the default is the catalogue entry's resources.

        A loader that derives its own URLs must honour the entry's ``resources`` (see
        :meth:`apply_catalogue_resources`) or refuse them; the core refuses an entry whose resource
        the returned list does not fetch (:meth:`check_catalogue_resources`)."""
        return list(spec.resources)

    def check_catalogue_resources(self, spec: DatasetSpec, fetched: list[Resource]) -> None:
        """Refuse a catalogue entry whose ``resources`` this loader would not fetch (a loader that
        derives its URLs and ignored the user's copy would otherwise download upstream's file
        without a word). The core calls it with what :meth:`resources` returned for ``spec``.

        Every URL of every entry resource must be among the URLs of ``fetched``; else
        ``InvalidParameter`` names the resource, its URL (redacted) and the files the loader fetches.
        A loader whose call-time parameter replaces the entry's files (``url=``) skips the check
        when that parameter is given."""
        fetched_urls = {url for r in fetched for url in r.urls}
        for pin in spec.resources:
            if not set(pin.urls) <= fetched_urls and not all(map(self.is_upstream_url, pin.urls)):
                _refuse_unused_resource(spec, self.name, pin, fetched)

    def is_upstream_url(self, url: str) -> bool:
        """Whether ``url`` is one this loader derives itself (upstream's host or its known mirrors).
        An entry resource at such a URL only pins ``sha256``/``size`` (the built-in catalogue's
        form), so it may go unused when call-time parameters pick another file; the default knows
        no such URL."""
        return False

    def apply_catalogue_resources(self, spec: DatasetSpec, derived: list[Resource]) -> list[Resource]:
        """``derived`` (the files this loader fetches for ``spec``, with the URLs it knows) with the
        catalogue entry's ``resources`` applied, matched by file name.

        An entry resource at upstream's URLs (:meth:`is_upstream_url`: the built-in catalogue's form)
        pins its file's ``sha256``/``size`` and keeps the loader's mirrors; one with a URL of its own
        (a local ``file://`` copy, a private mirror) replaces the file's URLs, so the user's copy and
        nothing else is fetched. An entry resource of the user's own that names no derived file is
        refused (``InvalidParameter`` naming its URL and the file names the loader reads)."""
        names = {r.name for r in derived}
        out = []
        for resource in derived:
            pin = next((r for r in spec.resources if r.name == resource.name), None)
            if pin is None:
                out.append(resource)
            elif all(url in resource.urls or self.is_upstream_url(url) for url in pin.urls):
                out.append(Resource(resource.name, resource.urls, pin.sha256, pin.size))
            else:
                out.append(pin)
        for pin in spec.resources:
            if pin.name not in names and not all(map(self.is_upstream_url, pin.urls)):
                _refuse_unused_resource(spec, self.name, pin, derived)
        return out

    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDictBase]:
        """Yield TED chunks of whole episodes (see the module docstring); ``files`` maps each
        resource name to its verified local path."""
        raise NotImplementedError


def frame_layout(shape: Sequence[int]) -> str | None:
    """``"hwc"``, ``"chw"`` or ``"hw"`` when uint8 rows of ``shape`` are images the build's frame codecs store
    (1 or 3 channels, at least 8 pixels a side), else None: what :meth:`Loader.frame_bytes` counts. Torch-free,
    so a loader can apply it to an upstream schema or space (``datasets-hub info`` runs without torch)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) == 2 and min(shape) >= 8:
        return "hw"
    if len(shape) == 3:
        if shape[2] in (1, 3) and min(shape[:2]) >= 8:
            return "hwc"
        if shape[0] in (1, 3) and min(shape[1:]) >= 8:
            return "chw"
    return None


def _refuse_unused_resource(spec: DatasetSpec, loader_name: str, pin: Resource, fetched: list[Resource]) -> None:
    from datasets_hub.errors import InvalidParameter
    from datasets_hub.redact import redact_url

    names = [r.name for r in fetched]
    shown = ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    raise InvalidParameter(
        f"{spec.id} ({spec.source}): the {loader_name} loader does not fetch the entry's resource {pin.name!r} "
        f"({', '.join(redact_url(u) for u in pin.urls)}); "
        + (
            f"it fetches {shown}: give the resource the name of the file it replaces "
            f"(name: {names[0]!r}) or remove it from the entry"
            if names
            else "it fetches no file (its data comes from elsewhere): remove the entry's resources"
        )
    )
