"""PostgreSQL backend of the Store (psycopg 3): chosen by `database = "postgresql://..."`.

store.py   PostgresStore, the facade: each call one transaction of the shared SQL (store/sql/)
pool.py    the pool of connections, one transaction per call on a worker thread
replicas.py  what replicas share: LISTEN/NOTIFY watchers, the advisory locks that hold a
           conversation
conn.py    the psycopg connection as the shared SQL's connection (placeholders, values)
schema.py  the numbered migrations applied under an advisory lock, cursor_byok_schema
errors.py  psycopg errors mapped to StoreError classes
url.py     the URL without its password, and the secrets of it to mask
missing.py what stands in for PostgresStore when psycopg (the `postgres` extra) is missing
"""

from typing import TYPE_CHECKING

from .url import display_url


def _psycopg_problem() -> str | None:
    """Why psycopg cannot be imported (not installed, or no libpq), None when it can."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


if TYPE_CHECKING or (_problem := _psycopg_problem()) is None:
    from .store import PostgresStore
else:
    from .missing import missing_store

    PostgresStore = missing_store(_problem)

__all__ = ["PostgresStore", "display_url"]
