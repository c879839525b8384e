"""Versioned schema migrations: numbered SQL files applied in order, each in one transaction.

Files live in `cursor_byok/store/migrations/NNNN_name.sql` (loaded with importlib.resources) and
must be numbered 1, 2, 3... without gaps. One numbered list serves both backends: where
PostgreSQL needs other SQL (types, triggers), `NNNN_name.postgresql.sql` beside the shared file
is what PostgreSQL runs for that number; a number with only `NNNN_name.sql` runs the same SQL
on both, and a `NNNN_name.sqlite.sql` alone would be SQLite's. The PostgreSQL side of applying
them is in store/postgres/schema.py. `PRAGMA user_version` holds the number of the last one
applied; it is written inside the same transaction as the migration, so a failed migration
leaves neither tables nor the version behind. A database whose version is newer than the
newest file is refused.
"""

from __future__ import annotations

import re
import sqlite3
from importlib import resources
from typing import Literal

import msgspec

from .errors import StoreSchemaError

APPLICATION_ID = 0x43425950  # "CBYP": marks a cursor-byok database in the file header.
_SQLITE_ERROR = 1
_SQLITE_CONSTRAINT = 19
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+?)(?:\.(sqlite|postgresql))?\.sql$")
Dialect = Literal["sqlite", "postgresql"]


class Migration(msgspec.Struct, frozen=True):
    version: int
    name: str
    sql: str


def load_migrations(dialect: Dialect = "sqlite") -> tuple[Migration, ...]:
    """The migrations `dialect` runs, in order: per number, the file of that dialect if there is
    one, else the shared file."""
    folder = resources.files("cursor_byok.store").joinpath("migrations")
    shared: dict[int, Migration] = {}
    own: dict[int, Migration] = {}
    for entry in folder.iterdir():
        m = _NAME.match(entry.name)
        if m is None:
            continue
        mig = Migration(int(m.group(1)), entry.name, entry.read_text(encoding="utf-8"))
        if m.group(3) is None:
            shared[mig.version] = mig
        elif m.group(3) == dialect:
            own[mig.version] = mig
    found = sorted({**shared, **own}.values(), key=lambda mig: mig.version)
    for expected, mig in enumerate(found, start=1):
        if mig.version != expected:
            raise RuntimeError(f"store migrations must be numbered 1..n without gaps: {mig.name}")
    return tuple(found)


def latest_version(migrations: tuple[Migration, ...] | None = None) -> int:
    migs = load_migrations() if migrations is None else migrations
    return migs[-1].version if migs else 0


def split_statements(sql: str) -> list[str]:
    """Split a script into complete statements (trigger bodies stay whole).

    `executescript` cannot be used: it commits any open transaction first.
    """
    statements: list[str] = []
    pending = ""
    for piece in sql.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            text = _strip_comments(pending).strip()
            if text and text != ";":
                statements.append(pending.strip())
            pending = ""
    if _strip_comments(pending).strip(" \n\t;"):
        raise ValueError(f"incomplete SQL statement at the end of a migration: {pending[:80]!r}")
    return statements


def _strip_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


def migrate(conn: sqlite3.Connection, database: str, migrations: tuple[Migration, ...]) -> int:
    """Bring the database to the newest version; returns it. `conn` must be in autocommit mode."""
    latest = latest_version(migrations)
    current = _user_version(conn)
    if current > latest:
        raise _too_new(database, current, latest)
    app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    if app_id not in (0, APPLICATION_ID):
        raise StoreSchemaError(
            database, "not a cursor-byok database", f"application_id is {app_id:#x}"
        )
    for mig in migrations:
        if mig.version <= current:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have migrated while we waited for the write lock.
            current = _user_version(conn)
            if current > latest:
                raise _too_new(database, current, latest)
            if mig.version <= current:
                conn.execute("COMMIT")
                continue
            for statement in split_statements(mig.sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {mig.version}")
            conn.execute("COMMIT")
            current = mig.version
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            # Only a statement the file got wrong is a schema error; full, locked, corrupt and
            # I/O errors are the caller's to map like any other.
            if exc.sqlite_errorcode & 0xFF not in (_SQLITE_ERROR, _SQLITE_CONSTRAINT):
                raise
            raise StoreSchemaError(
                database, f"migration {mig.name} failed, nothing of it was applied", str(exc)
            ) from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return current


def _user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _too_new(database: str, found: int, latest: int) -> StoreSchemaError:
    return StoreSchemaError(
        database,
        f"database schema version {found} is newer than this cursor-byok supports "
        f"(schema version {latest})",
        "upgrade cursor-byok or point it at another database file",
    )
