"""What a loader may use to reach its upstream: the offline state and the Hugging Face Hub.

The plugin contract (docs/plugins.md) lets a loader import, from the hub, only :mod:`datasets_hub.loader`,
:mod:`datasets_hub.errors`, :mod:`datasets_hub.catalogue`, the buffer layer and this module; the core
downloads every :class:`~datasets_hub.loader.Resource` a loader lists. Loaders whose upstream is a
Hugging Face repository whose files are known only after reading its metadata (LeRobot, RoboSet) fetch
that metadata and list the repository with the functions here, which honour the same settings as the
core's downloads: ``DATASETS_HUB_OFFLINE``, ``HF_HUB_OFFLINE``, ``HF_ENDPOINT`` and the Hugging Face cache.
Environment variables are read at call time.
"""

from __future__ import annotations

from pathlib import Path

from datasets_hub import env

__all__ = ["hf_download", "hf_endpoint", "hf_list_files", "offline", "offline_flag"]


def offline() -> bool:
    """True when no connection may be opened: ``DATASETS_HUB_OFFLINE=1`` or huggingface_hub's ``HF_HUB_OFFLINE``."""
    return env.offline() or env.hf_offline()


def offline_flag() -> str | None:
    """The variable that forbids connections now (``"DATASETS_HUB_OFFLINE"`` first, else ``"HF_HUB_OFFLINE"``),
    ``None`` online: what an error tells the user to unset."""
    if env.offline():
        return "DATASETS_HUB_OFFLINE"
    return "HF_HUB_OFFLINE" if env.hf_offline() else None


def hf_endpoint() -> str | None:
    """The Hugging Face Hub endpoint in use (``HF_ENDPOINT``), ``None`` for huggingface_hub's default.

    A loader that caches listings in memory keys them by it, so a mirror set later is not served
    another endpoint's answer."""
    return env.hf_endpoint()


def hf_download(url: str, *, resource_name: str) -> Path:
    """The local path of the Hub file ``url`` (``hf://datasets/<org>/<repo>[@rev]/<path>``), downloaded into
    the Hugging Face cache if needed (offline: looked up there without a connection).

    Raises :class:`~datasets_hub.errors.DownloadError` naming ``resource_name`` and the fix."""
    from datasets_hub.downloads.huggingface import download_hf

    return download_hf(url, resource_name=resource_name, offline=env.offline())


def hf_list_files(
    repo_id: str, *, repo_type: str = "dataset", revision: str | None = None, prefix: str = ""
) -> list[str]:
    """Sorted paths of the files of a Hub repository that start with ``prefix``.

    Offline, the listing comes from the snapshot in the Hugging Face cache (the files downloaded
    before); a repository never fetched is a :class:`~datasets_hub.errors.DownloadError`."""
    from datasets_hub.downloads.huggingface import list_hf_files

    return list_hf_files(repo_id, repo_type=repo_type, revision=revision, prefix=prefix)
