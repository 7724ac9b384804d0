"""Credentials out of URLs: the one place that decides what in a URL is a secret.

A secret is the password of the user info (``user:secret@host``) and the value of a query
parameter whose name says it holds one (``password``, ``passwd``, ``pwd``, ``secret``, ``token``,
``api_key``, ``sslpassword``...). ``redact_url`` masks them (``***``) in every URL the project
prints, logs or writes to a summary; ``strip_credentials`` removes them from a URL that is
stored to be opened again (the crawl config in Redis and in the crawl database's meta table),
whose reader takes the secrets from its own environment (``PGPASSWORD``, ``~/.pgpass``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlsplit

MASK = "***"
_SECRET_NAME = re.compile(
    r"pass(word|wd)?|pwd|secret|token|api[-_]?key|apikey|auth|credentials?|signature|sig",
    re.IGNORECASE,
)
# The name part of a parameter, e.g. "sslpassword", "access_token", "client-secret".
_SECRET_IN_NAME = re.compile(r"pass(word|wd)|secret|token|api[-_]?key", re.IGNORECASE)

_KEYWORD_SECRET = re.compile(r"(\b\w*(?:pass(?:word|wd)?|pwd|secret|token)\w*\s*=\s*)(?:'[^']*'|\S+)",
                             re.IGNORECASE)


def is_secret_parameter(name: str) -> bool:
    """True if a query parameter called ``name`` holds a credential."""
    name = unquote(name)
    return bool(_SECRET_NAME.fullmatch(name) or _SECRET_IN_NAME.search(name))


def redact_url(url: str) -> str:
    """``url`` with its credentials masked (``***``), for showing; never raises."""
    return _rewrite(url, MASK)


def strip_credentials(url: str) -> str:
    """``url`` without its credentials (password and secret parameters removed), for storing
    a URL that is opened again elsewhere; never raises."""
    return _rewrite(url, None)


def _rewrite(url: str, mask: str | None) -> str:
    try:
        parts = urlsplit(url)
    except (ValueError, TypeError, AttributeError):
        return _unparsable(url)
    if not parts.scheme and not parts.netloc:  # a libpq "key=value" string, a path, a word
        return _KEYWORD_SECRET.sub(lambda m: m.group(1) + (mask or ""), url)
    netloc = _rewrite_userinfo(parts.netloc, mask)
    query = _rewrite_query(parts.query, mask)
    if netloc == parts.netloc and query == parts.query:
        return url
    text = f"{parts.scheme}:" if parts.scheme else ""
    text += f"//{netloc}{parts.path}" + (f"?{query}" if query else "")
    return text + (f"#{parts.fragment}" if parts.fragment else "")


def _rewrite_userinfo(netloc: str, mask: str | None) -> str:
    userinfo, at, hostport = netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    if not colon:
        return netloc
    if mask is not None:
        return f"{user}:{mask}@{hostport}"
    return f"{user}@{hostport}" if user else hostport


def _rewrite_query(query: str, mask: str | None) -> str:
    if not query:
        return query
    kept = []
    for pair in query.split("&"):
        name, equals, _ = pair.partition("=")
        if not is_secret_parameter(name):
            kept.append(pair)
        elif mask is not None:
            kept.append(f"{name}={mask}" if equals else name)
    return "&".join(kept)


def _unparsable(url: object) -> str:
    """What is shown of a string that is not even a URL: its scheme at most."""
    text = url if isinstance(url, str) else repr(url)
    scheme, sep, _ = text.partition("://")
    return f"{scheme}://{MASK}" if sep else MASK


def without_credentials(values: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``values`` (e.g. the settings) whose URL strings have no credentials, to store."""
    return {key: strip_credentials(value) if isinstance(value, str) and "://" in value else value
            for key, value in values.items()}
