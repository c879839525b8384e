"""Which backend a `database` setting names: a `postgresql://` (or `postgres://`) URL is
PostgreSQL, anything else is the path of a SQLite file."""

from __future__ import annotations

from .postgres import PostgresStore
from .sqlite import SQLiteStore

AnyStore = SQLiteStore | PostgresStore


def is_postgres_url(database: str) -> bool:
    return database.startswith(("postgresql://", "postgres://"))


def display_name(database: str) -> str:
    """The database as logs and errors may show it (a URL loses its password)."""
    from .postgres import display_url

    return display_url(database) if is_postgres_url(database) else database


async def open_store(database: str) -> AnyStore:
    """Open (creating or migrating) the database the setting names."""
    if is_postgres_url(database):
        return await PostgresStore.open(database)
    return await SQLiteStore.open(database)
