"""PostgreSQL backend of the Store (psycopg 3): chosen by `database = "postgresql://..."`.

store.py   PostgresStore, the facade: each call one transaction of the shared SQL (store/sql/)
pool.py    the pool of connections, one transaction per call on a worker thread
replicas.py  what replicas share: LISTEN/NOTIFY watchers, the advisory locks that hold a
           conversation
conn.py    the psycopg connection as the shared SQL's connection (placeholders, values)
schema.py  the numbered migrations applied under an advisory lock, cursor_byok_schema
errors.py  psycopg errors mapped to StoreError classes; the URL without its password
"""

from .errors import display_url
from .store import PostgresStore

__all__ = ["PostgresStore", "display_url"]
