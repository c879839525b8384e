"""psycopg errors mapped to the store's error classes."""

from __future__ import annotations

import psycopg
from psycopg import errors as pg

from ..errors import (
    StoreError,
    StoreFullError,
    StoreIntegrityError,
    StoreIOError,
    StoreLockedError,
    StoreUnreachableError,
)
from .url import display_url

__all__ = ["display_url", "map_error"]


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
    if isinstance(exc, psycopg.OperationalError):  # the connection failed, or was dropped
        return StoreUnreachableError(database, "database server unreachable", f"{what}: {text}")
    return StoreIOError(database, f"{what} failed", text)
