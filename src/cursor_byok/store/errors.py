"""Errors raised by a Store. Every one names the database and the cause.

Storage-level errors (full, locked, corrupt, I/O) fail a whole write batch: nothing of it is
committed and the store stays usable once the cause is gone. Contract errors (integrity,
record mismatch) fail only the one call that caused them.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class. `database` names the file (or DSN) and `cause` is a short machine-ish reason."""

    def __init__(self, database: str, cause: str, detail: str = "") -> None:
        self.database = database
        self.cause = cause
        self.detail = detail
        text = f"{database}: {cause}"
        if detail:
            text = f"{text} ({detail})"
        super().__init__(text)


class StoreFullError(StoreError):
    """The disk, or the configured size limit, is full. Nothing of the batch was committed."""


class StoreLockedError(StoreError):
    """Another connection or process held the write lock beyond the busy timeout."""


class StoreCorruptError(StoreError):
    """The file is not a database, or a page of it is malformed."""


class StoreIOError(StoreError):
    """The operating system refused a read or write (permissions, vanished file, I/O error)."""


class StoreUnreachableError(StoreIOError):
    """The database server cannot be reached now (it restarts, the network is down): nothing
    of the call was committed, and the next call connects again."""


class StoreSchemaError(StoreError):
    """The schema cannot be used: made by a newer version, or a migration failed."""


class StoreIntegrityError(StoreError):
    """A call broke the store's contract (a constraint, an append-only rule, a message count).

    Only that call fails; it changed nothing.
    """


class RecordMismatchError(StoreIntegrityError):
    """A record was saved again with a different value for a field that never changes
    (for example the exact request bytes of an LLM call)."""


class BackendMissingError(StoreError):
    """The database names a backend whose driver is not installed (PostgreSQL without the
    `postgres` extra). Nothing was opened."""


class StoreClosedError(StoreError):
    """The store was closed."""
