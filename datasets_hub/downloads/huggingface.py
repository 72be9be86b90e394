"""Sources on the Hugging Face Hub: ``hf://`` URLs and repo listings, through ``huggingface_hub``.

``hf://<repo_type>s/<repo_id>/<path_in_repo>[@<revision>]`` (``repo_type`` is ``dataset``,
``model`` or ``space``; ``hf://datasets/<owner>/<name>@<revision>/<path>`` is accepted too), e.g.
``hf://datasets/jdvakil/RoboSet_Sim/FK1-v4(expert)/x.h5``.

Files are fetched with ``huggingface_hub.hf_hub_download`` into the Hugging Face cache (its own
resume, locking and size checks) and :func:`datasets_hub.downloads.fetch.fetch` then hard-links (or copies)
them into ``<cache>/raw/<loader>/``. Read at call time: ``HF_ENDPOINT`` (a Hub mirror),
``HF_HUB_OFFLINE`` (as ``DATASETS_HUB_OFFLINE``: only files already in the Hugging Face cache are
used, without any connection), ``HF_HUB_CACHE`` / ``HF_HOME``. ``huggingface_hub`` itself reads
these once, when first imported; passing them explicitly makes a change after that import count.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from datasets_hub import env
from datasets_hub.errors import DownloadError, MissingDependency

_REPO_TYPES = {"datasets": "dataset", "models": "model", "spaces": "space"}


@dataclass(frozen=True)
class HFRef:
    repo_type: str
    repo_id: str
    path: str
    revision: str | None = None


def parse_hf_url(url: str) -> HFRef:
    """Split an ``hf://`` URL into repo type, repo id, path in repo and revision."""
    if not url.startswith("hf://"):
        raise DownloadError(f"{url!r} is not an hf:// URL")
    parts = [unquote(p) for p in url[len("hf://") :].split("/")]
    if len(parts) < 4 or parts[0] not in _REPO_TYPES or not all(parts):
        raise DownloadError(
            f"cannot parse {url!r}: expected hf://<datasets|models|spaces>/<owner>/<repo>/<path in repo>"
            f"[@<revision>], e.g. hf://datasets/jdvakil/RoboSet_Sim/FK1-v4(expert)/file.h5"
        )
    repo_type = _REPO_TYPES[parts[0]]
    owner, name, rest = parts[1], parts[2], parts[3:]
    revision = None
    if "@" in name:  # hf://datasets/owner/name@rev/path (huggingface_hub's own spelling)
        name, revision = name.split("@", 1)
    elif "@" in rest[-1]:  # hf://datasets/owner/name/path@rev
        head, tail = rest[-1].rsplit("@", 1)
        if head and tail:
            rest = [*rest[:-1], head]
            revision = tail
    return HFRef(repo_type, f"{owner}/{name}", "/".join(rest), revision or None)


hf_endpoint = env.hf_endpoint  # re-exported: loaders read them from here
hf_offline = env.hf_offline
hf_cache_dir = env.hf_cache_dir


def _import_hf():
    try:
        import huggingface_hub
    except ImportError as exc:
        raise MissingDependency("hf:// sources need huggingface_hub: pip install 'huggingface_hub>=0.23'") from exc
    return huggingface_hub


def _hint() -> str:
    endpoint = hf_endpoint() or "https://huggingface.co"
    return (
        f" (Hub endpoint {endpoint}; set HF_ENDPOINT to use a mirror, HF_TOKEN for gated or private "
        f"repos; offline, only files already in the Hugging Face cache can be used)"
    )


def download_hf(
    url: str,
    *,
    resource_name: str,
    dest: Path | None = None,
    offline: bool = False,
    progress: bool = False,
    timeout: float = 60.0,
) -> Path:
    """Return the local path (in the Hugging Face cache) of the file ``url`` names.

    Offline (``offline`` or ``HF_HUB_OFFLINE``): the Hugging Face cache is looked up without any
    connection. Errors become :class:`DownloadError` naming the file and the fix.
    """
    ref = parse_hf_url(url)
    hf = _import_hf()
    from huggingface_hub import errors as hf_errors

    where = f"{resource_name}: {url}"
    if offline or hf_offline():
        # try_to_load_from_cache never opens a connection (hf_hub_download(local_files_only=True) may
        # still build request headers, which can contact the Hub)
        found = hf.try_to_load_from_cache(
            ref.repo_id, ref.path, cache_dir=hf_cache_dir(), revision=ref.revision, repo_type=ref.repo_type
        )
        if isinstance(found, str) and os.path.isfile(found):
            return Path(found)
        var = "DATASETS_HUB_OFFLINE" if offline else "HF_HUB_OFFLINE"
        target = f"exactly {dest}" if dest is not None else "the datasets_hub raw cache"
        raise DownloadError(
            f"{where} is not in the Hugging Face cache and offline mode ({var}=1) forbids downloading "
            f"it. Fix: copy the file to {target}, or unset {var} to download it."
        )
    kwargs = {}
    if not progress:
        kwargs["tqdm_class"] = _silent_tqdm()
    try:
        path = hf.hf_hub_download(
            ref.repo_id,
            ref.path,
            repo_type=ref.repo_type,
            revision=ref.revision,
            cache_dir=hf_cache_dir(),
            endpoint=hf_endpoint(),
            etag_timeout=timeout,
            **kwargs,
        )
    except hf_errors.RevisionNotFoundError as exc:
        raise DownloadError(
            f"{where}: revision {ref.revision!r} not found in {ref.repo_id}; check the revision{_hint()}."
        ) from exc
    except hf_errors.RemoteEntryNotFoundError as exc:
        raise DownloadError(
            f"{where}: file not found upstream: {ref.path!r} is not in {ref.repo_type} "
            f"repo {ref.repo_id}; check the path{_hint()}."
        ) from exc
    except hf_errors.RepositoryNotFoundError as exc:
        raise DownloadError(
            f"{where}: {ref.repo_type} repo {ref.repo_id!r} not found or not accessible{_hint()}."
        ) from exc
    except hf_errors.LocalEntryNotFoundError as exc:
        cause = _root_cause(exc)
        if cause is not None:
            raise DownloadError(f"{where}: {cause}{_hint()}.") from exc
        raise DownloadError(
            f"{where}: the Hub could not be reached and the file is not in the Hugging "
            f"Face cache{_hint()}. huggingface_hub reads HF_HUB_OFFLINE when first "
            f"imported; check it is unset. ({exc})"
        ) from exc
    except (hf_errors.HfHubHTTPError, OSError, ValueError) as exc:
        raise DownloadError(f"{where}: download failed: {_root_cause(exc) or exc}{_hint()}.") from exc
    except Exception as exc:  # the HTTP client's own errors (a status line that is not HTTP, …)
        cause = _root_cause(exc)
        if cause is None:
            raise
        raise DownloadError(f"{where}: {cause}{_hint()}.") from exc
    return Path(path)


def _root_cause(exc: BaseException) -> str | None:
    """What really went wrong under huggingface_hub's wrapping: a server error status or a broken
    HTTP exchange, as one teaching phrase; ``None`` when nothing more specific is known."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int) and status >= 500:
            return (
                f"the Hub answered HTTP {status} (a server error on its side, not a missing file or your "
                "network): try again later, or use a mirror"
            )
        module = type(current).__module__.split(".")[0]
        if module.startswith(("httpx", "httpcore", "h11")) or type(current).__name__ == "RemoteProtocolError":
            if "ProtocolError" in type(current).__name__:
                return (
                    f"the Hub endpoint answered something that is not HTTP ({current}); check HF_ENDPOINT "
                    "(a proxy or a wrong port?)"
                )
            return f"the connection to the Hub failed ({type(current).__name__}: {current})"
        current = current.__cause__ or current.__context__
    return None


@functools.cache
def _silent_tqdm():
    """One tqdm subclass that never draws, for huggingface_hub's ``tqdm_class``.

    Made once per process: tqdm starts a monitor thread per class (and never stops it for disabled
    bars), so a fresh class per download leaked one thread per file. ``monitor_interval = 0`` means
    this class starts none.
    """
    from tqdm.auto import tqdm

    class _Silent(tqdm):
        monitor_interval = 0

        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return _Silent


def list_hf_files(repo_id: str, repo_type: str = "dataset", revision: str | None = None, prefix: str = "") -> list[str]:
    """Sorted paths of the files in a Hub repo that start with ``prefix``.

    Offline (``DATASETS_HUB_OFFLINE`` or ``HF_HUB_OFFLINE``) the listing comes from the snapshot in
    the Hugging Face cache (only the files downloaded before); a repo never fetched is an error.
    """

    hf = _import_hf()
    from huggingface_hub import errors as hf_errors

    if env.offline() or hf_offline():
        files = _list_cached(hf, repo_id, repo_type, revision)
        if files is None:
            raise DownloadError(
                f"cannot list {repo_type} repo {repo_id} offline: nothing of it is in the "
                f"Hugging Face cache. Unset DATASETS_HUB_OFFLINE / HF_HUB_OFFLINE once to "
                f"fetch it."
            )
    else:
        try:
            api = hf.HfApi(endpoint=hf_endpoint())
            files = api.list_repo_files(repo_id, repo_type=repo_type, revision=revision)
        except hf_errors.RepositoryNotFoundError as exc:
            raise DownloadError(f"{repo_type} repo {repo_id!r} not found or not accessible{_hint()}.") from exc
        except hf_errors.RevisionNotFoundError as exc:
            raise DownloadError(f"revision {revision!r} not found in {repo_id}{_hint()}.") from exc
        except (hf_errors.HfHubHTTPError, OSError, ValueError) as exc:
            raise DownloadError(f"cannot list {repo_type} repo {repo_id}: {exc}{_hint()}.") from exc
    return sorted(f for f in files if f.startswith(prefix))


def _list_cached(hf, repo_id: str, repo_type: str, revision: str | None) -> list[str] | None:
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    cache = Path(hf_cache_dir() or constants.HF_HUB_CACHE)
    folder = cache / repo_folder_name(repo_id=repo_id, repo_type=repo_type)
    revision = revision or "main"
    ref = folder / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    snapshot = folder / "snapshots" / commit
    if not snapshot.is_dir():
        return None
    return [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()]
