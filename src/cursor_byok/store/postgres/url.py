"""A PostgreSQL URL safe to show, and its secrets (no psycopg needed: errors name the database
without it, and logs and CLI output mask what of it must not be shown)."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit


def _userinfo_and_host(url: str) -> tuple[str, str, str]:
    """(scheme, userinfo, the rest up to the query) of a URL, however malformed: userinfo is
    what comes before the last `@` of the part before the query ("" without one)."""
    scheme, _, rest = url.partition("://")
    head = rest.split("?", 1)[0].split("#", 1)[0]
    userinfo, at, host = head.rpartition("@")
    return scheme, userinfo if at else "", host if at else head


def display_url(url: str) -> str:
    """The URL without its password or query (which may hold one): what errors and logs show.
    Never raises: a URL urllib cannot split (a bad port, a stray `[`) loses its password by
    hand."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit((parts.scheme, f"{user}{host}", parts.path, "", ""))
    except ValueError:
        scheme, userinfo, rest = _userinfo_and_host(url)
        user = userinfo.partition(":")[0]
        return f"{scheme}://{user}@{rest}" if user else f"{scheme}://{rest}"


def url_secrets(url: str) -> tuple[str, ...]:
    """What of a database URL no output may show: its password as written and decoded, the
    pieces of it libpq may cut at `@`, `:` or `/` when the URL is malformed (4 characters or
    more), and a `password=` query value. Longest first."""
    found: set[str] = set()
    _, userinfo, _ = _userinfo_and_host(url)
    _, colon, password = userinfo.partition(":")
    if colon and password:
        for form in (password, unquote(password)):
            found.add(form)
            found.update(re.split(r"[@:/]", form))
    for key, value in parse_qsl(url.partition("?")[2], keep_blank_values=True):
        if key == "password" and value:
            found.add(value)
    return tuple(sorted((s for s in found if len(s) >= 4), key=len, reverse=True))


def redact_url(text: str, url: str) -> str:
    """`text` with every secret of `url` (url_secrets) replaced by `***`."""
    for secret in url_secrets(url):
        text = text.replace(secret, "***")
    return text
