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


def database_secrets(database: str) -> tuple[str, ...]:
    """What of the setting no log or output may show (a URL's password), longest first."""
    from .postgres.url import url_secrets

    return url_secrets(database) if is_postgres_url(database) else ()


def redact_database(text: str, database: str) -> str:
    """`text` without the setting's secrets (each replaced by `***`)."""
    for secret in database_secrets(database):
        text = text.replace(secret, "***")
    return text


async def open_store(database: str) -> AnyStore:
    """Open (creating or migrating) the database the setting names."""
    if is_postgres_url(database):
        return await PostgresStore.open(database)
    return await SQLiteStore.open(database)
