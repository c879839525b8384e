"""PostgresStore where psycopg cannot be imported: the `postgres` extra is not installed.

The server runs on SQLite without it; a `postgresql://` database then fails to open with one
line that names the extra, wherever a store is opened (serve, doctor, token).
"""

from __future__ import annotations

from typing import NoReturn

from ..errors import BackendMissingError
from .url import display_url

INSTALL = "pip install 'cursor-byok[postgres]'"


def missing_store(reason: str) -> type:
    """A class standing in for PostgresStore: no store is ever an instance of it, and `open`
    raises BackendMissingError naming the extra and why psycopg did not import."""

    class PostgresStore:
        @classmethod
        async def open(cls, url: str, **_: object) -> NoReturn:
            raise BackendMissingError(
                display_url(url), "PostgreSQL needs the postgres extra", f"{INSTALL}; {reason}"
            )

    return PostgresStore
