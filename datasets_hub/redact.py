"""Secrets never leave the process: credentials and signatures are redacted from every URL shown or stored.

A URL can carry secrets in two places: the userinfo (``https://user:password@host/…``) and the query
string of a presigned URL (``?X-Amz-Signature=…``, ``?sig=…``, ``?token=…``). :func:`redact_url`
replaces both by ``***`` / ``REDACTED`` and keeps everything else (scheme, host, path, harmless query
parameters), so a message still names the file and the host. :func:`redact_text` does the same to
every URL inside free text (an exception message), :func:`redact_value` to every string inside a
JSON-like value (a manifest's ``params``).

Redacted URLs also serve as a source's identity (:func:`datasets_hub.downloads.fetch.source_key`): two
presigned URLs of the same object, or the same URL with another password, name the same file.
Stdlib only (imported by the CLI's error path).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

__all__ = ["REDACTED", "is_secret_param", "redact_text", "redact_url", "redact_value"]

REDACTED = "REDACTED"
# Query parameters that authenticate a request (AWS S3/CloudFront, GCS, Azure SAS, generic tokens).
_SECRET_NAMES = {
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "x-goog-signature",
    "x-goog-credential",
    "signature",
    "sig",
    "token",
    "access_token",
    "id_token",
    "authorization",
    "api_key",
    "apikey",
    "policy",
    "key-pair-id",
    "awsaccesskeyid",
    "password",
    "passwd",
    "pwd",
    "secret",
    "client_secret",
}
_SECRET_WORDS = ("signature", "token", "credential", "secret", "password", "apikey", "api_key")
_URL_RE = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s'\"<>]+")


def is_secret_param(name: str) -> bool:
    """True for a query parameter name that carries a credential or a signature."""
    low = name.lower()
    return low in _SECRET_NAMES or any(word in low for word in _SECRET_WORDS)


def redact_url(url: str) -> str:
    """``url`` without its password/user and with the values of secret query parameters replaced."""
    if not isinstance(url, str) or "://" not in url:
        return url
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = "***@" + netloc.rsplit("@", 1)[1]
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(is_secret_param(k) for k, _ in pairs):
                query = urlencode(
                    [(k, REDACTED if is_secret_param(k) else v) for k, v in pairs], quote_via=quote, safe="/:"
                )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:  # not parseable as a URL (a bad port, …): hide everything after the scheme
        return url.split("://", 1)[0] + "://" + REDACTED


def strip_url(url: str) -> str:
    """``scheme://host[:port]/path`` of ``url``: no user, password, query or fragment.

    Where :func:`redact_url` keeps a URL readable (secrets masked, other parameters kept), this keeps
    only what names the place: a published folder is the same folder whatever signature or token a
    caller's URL carries, so its local copy and its messages use this form.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}"


def redact_text(text: Any) -> str:
    """``str(text)`` with every URL in it redacted (:func:`redact_url`)."""
    text = str(text)
    if "://" not in text:
        return text
    return _URL_RE.sub(lambda m: redact_url(m.group(0)), text)


def redact_value(value: Any) -> Any:
    """A copy of a JSON-like ``value`` (dicts, lists, strings) with every URL in a string redacted."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_value(v) for v in value)
    return value
