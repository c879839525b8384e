"""Applying the numbered migrations (store/migrate.py, their PostgreSQL files) to a database.

The version lives in `cursor_byok_schema` (one row), written in the same transaction as the
migration, so a failed migration leaves neither tables nor the version behind (PostgreSQL's
DDL is transactional). A transaction-scoped advisory lock makes concurrent replicas starting
together migrate one after the other; the second finds the work done. A database whose version
is newer than this cursor-byok knows is refused, like SQLite's.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ..errors import StoreSchemaError
from ..migrate import Migration, latest_version

# The advisory lock key every cursor-byok migration takes ("CBYP" like SQLite's application_id).
MIGRATION_LOCK = 0x43425950
_MARKER = "cursor-byok"


def current_version(conn: psycopg.Connection[Any]) -> int | None:
    """The schema version recorded, 0 for an empty database; None for a database that has
    tables but is not cursor-byok's."""
    found = conn.execute("SELECT to_regclass('cursor_byok_schema') IS NOT NULL").fetchone()
    if found is not None and found[0]:
        row = conn.execute("SELECT version FROM cursor_byok_schema WHERE id = 1").fetchone()
        return 0 if row is None else int(row[0])
    other = conn.execute(
        "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() "
        "AND tablename = 'conversations'"
    ).fetchone()
    return None if other is not None and other[0] else 0


def migrate(conn: psycopg.Connection[Any], database: str, migrations: tuple[Migration, ...]) -> int:
    """Bring the database to the newest version; returns it. `conn` is in autocommit mode."""
    latest = latest_version(migrations)
    for mig in migrations:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            current = current_version(conn)
            if current is None:
                raise StoreSchemaError(
                    database,
                    "not a cursor-byok database",
                    "it has a conversations table but no cursor_byok_schema",
                )
            if current > latest:
                raise too_new(database, current, latest)
            if mig.version <= current:
                continue
            try:
                with conn.transaction():
                    conn.execute(mig.sql)
            except psycopg.Error as exc:
                raise StoreSchemaError(
                    database,
                    f"migration {mig.name} failed, nothing of it was applied",
                    (exc.diag.message_primary or str(exc)).strip(),
                ) from exc
            conn.execute(
                "CREATE TABLE IF NOT EXISTS cursor_byok_schema (id INTEGER PRIMARY KEY "
                "CHECK (id = 1), version INTEGER NOT NULL, marker TEXT NOT NULL)"
            )
            conn.execute(
                "INSERT INTO cursor_byok_schema (id, version, marker) VALUES (1, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                (mig.version, _MARKER),
            )
    with conn.transaction():
        current = current_version(conn) or 0
    if current > latest:
        raise too_new(database, current, latest)
    return current


def too_new(database: str, found: int, latest: int) -> StoreSchemaError:
    return StoreSchemaError(
        database,
        f"database schema version {found} is newer than this cursor-byok supports "
        f"(schema version {latest})",
        "upgrade cursor-byok or point it at another database",
    )
