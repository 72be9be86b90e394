"""Every environment variable the hub reads, read at call time (never at import: tests and
long-lived processes change them).

========================================  ====================================================
``DATASETS_HUB_CACHE``                    cache root (:func:`cache_root`)
``XDG_CACHE_HOME``                        its default's parent (``~/.cache`` when unset)
``DATASETS_HUB_OFFLINE``                  1/true/yes/on: never open a connection (:func:`offline`)
``DATASETS_HUB_REGISTRY``                 extra catalogue YAML files, ``os.pathsep``-separated
``DATASETS_HUB_ENDPOINT_<LOADER>``        mirror base URL replacing a loader's upstream host
``HF_ENDPOINT``, ``HF_HUB_OFFLINE``,      huggingface_hub's own variables, honoured for ``hf://``
``HF_HUB_CACHE``, ``HF_HOME``             sources
========================================  ====================================================

Only the standard library and :mod:`datasets_hub.errors`: anything may import this module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from urllib.parse import urlsplit

from datasets_hub.errors import DownloadError

TRUE_VALUES = frozenset({"1", "true", "yes", "on"})


def flag(name: str) -> bool:
    """True when the variable ``name`` is set to 1/true/yes/on (any case, surrounding blanks ignored)."""
    return os.environ.get(name, "").strip().lower() in TRUE_VALUES


def cache_root() -> Path:
    """The cache root: ``$DATASETS_HUB_CACHE``, else ``$XDG_CACHE_HOME/datasets_hub``, else ``~/.cache/datasets_hub``."""
    explicit = os.environ.get("DATASETS_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "datasets_hub").absolute()


#: Inside :func:`connections_refused`: the list that records each refusal; ``None`` outside.
_REFUSALS: ContextVar[list[str] | None] = ContextVar("datasets_hub_refusals", default=None)


def offline() -> bool:
    """True when ``DATASETS_HUB_OFFLINE`` forbids every connection, or inside :func:`connections_refused`."""
    if flag("DATASETS_HUB_OFFLINE"):
        return True
    refusals = _REFUSALS.get()
    if refusals is None:
        return False
    refusals.append("offline() answered True inside connections_refused()")
    return True


@contextmanager
def connections_refused() -> Iterator[list[str]]:
    """Within the block, :func:`offline` answers True in this thread (and context) whatever the variables say.

    For answers that must come from local facts only (``info`` names a build without downloading); the list
    it yields gains an entry each time a caller asked and was refused, so the caller knows the answer may
    differ from an online one (and does not record it as final)."""
    refusals: list[str] = []
    token = _REFUSALS.set(refusals)
    try:
        yield refusals
    finally:
        _REFUSALS.reset(token)


def registry_paths() -> list[Path]:
    """The extra catalogue files ``DATASETS_HUB_REGISTRY`` names, in order (blank entries skipped)."""
    extra = os.environ.get("DATASETS_HUB_REGISTRY", "")
    return [Path(p).expanduser() for p in extra.split(os.pathsep) if p.strip()]


def endpoint_env_var(loader: str) -> str:
    """The mirror variable of ``loader``: ``DATASETS_HUB_ENDPOINT_<LOADER>`` (non-alphanumerics -> ``_``)."""
    return "DATASETS_HUB_ENDPOINT_" + re.sub(r"[^A-Z0-9]", "_", loader.upper())


def endpoint_for(loader: str) -> str | None:
    """The mirror base URL set for ``loader``, without a trailing slash, or ``None``.

    A value that is not an http(s) URL with a host is a :class:`DownloadError` naming the variable.
    """
    var = endpoint_env_var(loader)
    base = os.environ.get(var, "").strip()
    if not base:
        return None
    if urlsplit(base).scheme not in ("http", "https") or not urlsplit(base).netloc:
        raise DownloadError(
            f"{var}={base!r} is not an http(s) base URL; set it to e.g. "
            f"'http://mirror.example.org/path' or unset it to use the upstream hosts."
        )
    return base.rstrip("/")


def hf_endpoint() -> str | None:
    """``HF_ENDPOINT`` as set now (``None``: huggingface_hub's default)."""
    value = os.environ.get("HF_ENDPOINT", "").strip().rstrip("/")
    return value or None


def hf_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` forbids huggingface_hub connections."""
    return flag("HF_HUB_OFFLINE")


def hf_cache_dir() -> str | None:
    """huggingface_hub's cache: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``None`` (its default)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expanduser(os.environ["HF_HOME"]), "hub")
    return None
