"""What a sqlite3 error means for the caller: the StoreError class to raise, and whether it ends
the whole write batch.

SQLite reports a primary result code in the low byte of `sqlite_errorcode`. Storage errors (full,
locked, corrupt, I/O) may have rolled the transaction back on SQLite's own initiative, so the
writer fails the whole batch on them; a broken constraint fails the one job that broke it.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import (
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreIntegrityError,
    StoreIOError,
    StoreLockedError,
)

# Primary SQLite result codes (the low byte of the extended code).
BUSY, LOCKED, NOMEM, READONLY, IOERR, CORRUPT = 5, 6, 7, 8, 10, 11
FULL, CANTOPEN, PROTOCOL, CONSTRAINT, NOTADB = 13, 14, 15, 19, 26

# Errors after which SQLite may have rolled the transaction back on its own: the batch fails.
BATCH_FATAL = frozenset(
    {BUSY, LOCKED, NOMEM, READONLY, IOERR, CORRUPT, FULL, CANTOPEN, PROTOCOL, NOTADB}
)


def primary(exc: BaseException) -> int | None:
    """The primary SQLite result code of an error (None if it did not come from SQLite)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def is_lock(exc: BaseException) -> bool:
    """Another connection holds a lock this one needs (a reader thread may wait for it)."""
    return primary(exc) in (BUSY, LOCKED)


def map_error(
    exc: BaseException, path: str, what: str, *, busy_timeout_ms: int, batch: int = 0
) -> StoreError:
    """The StoreError for `exc`, naming the database, the cause and what was being done.

    `batch`: the number of writes of the batch the error failed (0: not a batch failure)."""
    if isinstance(exc, StoreError):
        return exc
    code = primary(exc)
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    detail = f"while {what}: {exc}"
    if batch:
        detail += f"; nothing of this batch of {batch} write(s) was committed"
    if code == FULL:
        return StoreFullError(path, f"database or disk is full ({name})", detail)
    if code in (BUSY, LOCKED):
        return StoreLockedError(
            path,
            f"database is locked ({name}): another connection held it longer than "
            f"busy_timeout={busy_timeout_ms} ms",
            detail,
        )
    if code in (CORRUPT, NOTADB):
        return StoreCorruptError(
            path, f"database file is corrupt or not a database ({name})", detail
        )
    if code in (IOERR, CANTOPEN, READONLY, PROTOCOL, NOMEM):
        return StoreIOError(path, f"cannot read or write the database ({name})", detail)
    if code == CONSTRAINT:
        return StoreIntegrityError(path, f"constraint failed ({name})", detail)
    return StoreError(path, f"database error ({name})", detail)


def why_not_openable(path: str) -> str:
    """What is wrong with a database path SQLite could not open, in words a user can act on."""
    target = Path(path)
    parent = target.parent
    if target.is_dir():
        return "the path is a directory; name a file (server.database or --db)"
    if not parent.exists():
        return f"the directory {str(parent)!r} does not exist"
    if not parent.is_dir():
        return f"{str(parent)!r} is not a directory"
    if not target.exists() and not os.access(parent, os.W_OK | os.X_OK):
        return f"no permission to create a file in {str(parent)!r}"
    if target.exists() and not os.access(target, os.R_OK | os.W_OK):
        return "no permission to read and write the file"
    return "the operating system refused it"
