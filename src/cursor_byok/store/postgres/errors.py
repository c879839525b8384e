"""psycopg errors mapped to the store's error classes, and a URL safe to show."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg

from ..errors import (
    StoreError,
    StoreFullError,
    StoreIntegrityError,
    StoreIOError,
    StoreLockedError,
)


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


def map_error(exc: BaseException, database: str, what: str) -> BaseException:
    """A StoreError for a psycopg error (others are returned as they are). The detail keeps
    the words SQLite uses for the same failure (FOREIGN KEY, CHECK, UNIQUE), so one message
    reads alike on both backends."""
    if isinstance(exc, StoreError) or not isinstance(exc, psycopg.Error):
        return exc
    text = (exc.diag.message_primary or str(exc)).strip()
    if isinstance(exc, pg.ForeignKeyViolation):
        return StoreIntegrityError(database, f"{what} failed", f"FOREIGN KEY constraint: {text}")
    if isinstance(exc, pg.CheckViolation):
        return StoreIntegrityError(database, f"{what} failed", f"CHECK constraint: {text}")
    if isinstance(exc, pg.UniqueViolation):
        return StoreIntegrityError(database, f"{what} failed", f"UNIQUE constraint: {text}")
    if isinstance(exc, psycopg.IntegrityError | psycopg.DataError):
        return StoreIntegrityError(database, f"{what} failed", text)
    if isinstance(exc, pg.DiskFull | pg.ProgramLimitExceeded):
        return StoreFullError(database, "database server is full", f"{what}: {text}")
    if isinstance(exc, pg.LockNotAvailable | pg.QueryCanceled | pg.DeadlockDetected):
        return StoreLockedError(database, "database is locked", f"{what}: {text}")
    return StoreIOError(database, f"{what} failed", text)
