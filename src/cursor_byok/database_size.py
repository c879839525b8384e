"""The database's size against `server.database_max_mib`: the gauge's reading and doctor's row.

PostgreSQL's size is the store's last poll (store/postgres/size.py); a SQLite database's is its
file and write-ahead log, read when asked (a stat each: cheap at scrape time).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Literal

from .store.backends import AnyStore, is_postgres_url
from .store.errors import StoreError
from .store.postgres import PostgresStore

MIB = 1 << 20
WARN_SHARE = 0.9  # doctor warns from this share of the cap on


def sqlite_size(path: str) -> int:
    total = 0
    for name in (path, f"{path}-wal"):
        with contextlib.suppress(OSError):
            total += os.stat(name).st_size
    return total


def database_size_of(store: AnyStore) -> Callable[[], float]:
    """A reading of the store's size in bytes, for the gauge."""
    if isinstance(store, PostgresStore):
        cap = store.size_cap
        return lambda: float(cap.size)
    path = str(store.path)
    return lambda: float(sqlite_size(path))


async def measured_size(path: str) -> int | None:
    """The database's size now (None: it cannot be read); doctor's reading."""
    if not is_postgres_url(path):
        return sqlite_size(path) if os.path.exists(path) else None
    try:
        store = await PostgresStore.open(path, connections=1)
    except StoreError:
        return None
    try:
        return await store.database_size()
    except StoreError:
        return None
    finally:
        await store.close()


def size_row(
    size: int | None, max_mib: int
) -> tuple[Literal["OK", "WARN", "FAIL", "SKIP"], str, str]:
    """(status, detail, next step) of doctor's `database size` row."""
    if size is None:
        return "SKIP", "the database's size cannot be read", ""
    used = f"{size / MIB:.1f} MiB"
    if not max_mib:
        return "OK", f"{used} (no cap: server.database_max_mib = 0)", ""
    cap = max_mib * MIB
    detail = f"{used} of {max_mib} MiB (server.database_max_mib)"
    if size >= cap:
        return (
            "FAIL",
            f"{detail}: full, new runs are refused (unavailable: storage full)",
            "free space (PostgreSQL: VACUUM FULL after deleting; SQLite: VACUUM) or raise "
            "server.database_max_mib",
        )
    if size >= cap * WARN_SHARE:
        return "WARN", f"{detail}: nearly full", "raise server.database_max_mib or free space"
    return "OK", detail, ""
