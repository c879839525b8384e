"""The connections of a PostgresStore: a small pool, one transaction per call on a worker thread.

A call takes a connection from the queue, runs its transaction on one of the pool's threads and
gives the connection back once no statement of it is running. A connection the server dropped
is replaced on its next use; the first one is opened (and the schema migrated on it) at start,
the others on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg

from ..errors import StoreClosedError, StoreUnreachableError
from ..migrate import load_migrations
from ..sql import Conn
from .conn import PgConn
from .errors import map_error
from .schema import migrate
from .url import redact_url

T = TypeVar("T")
log = logging.getLogger("cursor_byok.store")
# A retry of the whole transaction, once: two writers inserting the same new key (two saves
# of one new call record) make the second fail on the key; run again, it finds the row.
_RETRY = (pg.UniqueViolation, pg.SerializationFailure, pg.DeadlockDetected)


class _Slot:
    """One pooled connection; replaced when the server dropped it."""

    __slots__ = ("conn",)

    def __init__(self, conn: psycopg.Connection[Any] | None) -> None:
        self.conn = conn


class Pool:
    """`connections` connections to `url`, named `path` (no password) in errors."""

    def __init__(self, url: str, path: str, *, connections: int, connect_timeout_s: float) -> None:
        self.url = url
        self.path = path
        self._connections = max(1, connections)
        self._connect_timeout_s = connect_timeout_s
        self._free: asyncio.Queue[_Slot] = asyncio.Queue()
        self._slots: list[_Slot] = []
        self._executor = ThreadPoolExecutor(self._connections, thread_name_prefix="store-pg")

    def connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, int(self._connect_timeout_s))
            )
        except psycopg.Error as exc:
            raise StoreUnreachableError(
                self.path,
                "cannot connect to the database server",
                redact_url(_first_line(exc), self.url),  # libpq may quote a malformed URL
            ) from None

    async def start(self) -> int:
        """Connect and migrate; returns the schema version. On failure call `close()`."""
        loop = asyncio.get_running_loop()
        first = await loop.run_in_executor(self._executor, self.connect)
        self._slots.append(_Slot(first))
        try:
            schema_version = await loop.run_in_executor(
                self._executor, migrate, first, self.path, load_migrations("postgresql")
            )
        except psycopg.Error as exc:  # the server went away, the user may not create...
            raise map_error(exc, self.path, "migrating the database") from exc
        for _ in range(self._connections - 1):
            self._slots.append(_Slot(None))  # connected on first use
        for slot in self._slots:
            self._free.put_nowait(slot)
        return schema_version

    async def close(self) -> None:
        """Wait for the transactions under way, then close every connection."""

        def close_all() -> None:
            for slot in self._slots:
                if slot.conn is not None:
                    with contextlib.suppress(Exception):
                        slot.conn.close()

        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
        close_all()

    def _transaction(
        self,
        slot: _Slot,
        fn: Callable[[Conn], T],
        what: str,
        write: bool,
        durable: bool,
        snapshot: bool,
    ) -> T:
        conflicts = drops = 0
        while True:
            if slot.conn is None or slot.conn.closed or slot.conn.broken:
                if slot.conn is not None:
                    with contextlib.suppress(Exception):
                        slot.conn.close()
                slot.conn = None
                slot.conn = self.connect()
            conn = slot.conn
            body_done = False
            try:
                with conn.transaction():
                    if snapshot:
                        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    if write and not durable:
                        conn.execute("SET LOCAL synchronous_commit = off")
                    result = fn(PgConn(conn))
                    body_done = True
                return result
            except _RETRY as exc:
                conflicts += 1
                if conflicts == 2:
                    raise map_error(exc, self.path, what) from exc
            except psycopg.OperationalError as exc:
                # The server dropped the connection before this transaction's COMMIT was sent
                # (it restarted: every pooled connection is stale, and is only found so when
                # used): the server rolled it back, so it runs again on a new connection. A
                # connection lost during COMMIT may have committed: that is not run again.
                if conn.broken and not body_done and drops < 2:
                    drops += 1
                    log.info(
                        "%s: connection lost (%s); %s again", self.path, _first_line(exc), what
                    )
                    continue
                raise map_error(exc, self.path, what) from exc
            except psycopg.Error as exc:
                raise map_error(exc, self.path, what) from exc

    async def run(
        self,
        fn: Callable[[Conn], T],
        what: str,
        *,
        write: bool,
        durable: bool = True,
        snapshot: bool = False,
    ) -> T:
        """`fn` in one transaction on a pooled connection; `what` names it in errors."""
        slot = await self._free.get()
        loop = asyncio.get_running_loop()
        pool = self._free
        try:
            work = self._executor.submit(
                self._transaction, slot, fn, what, write, durable, snapshot
            )
        except RuntimeError:  # the executor was shut down by close()
            pool.put_nowait(slot)
            raise StoreClosedError(self.path, "store is closed") from None

        def give_back(_: object) -> None:
            # On the worker thread once the transaction is over (or on cancellation before it
            # started): the connection goes back only when no statement of it is running.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(pool.put_nowait, slot)

        work.add_done_callback(give_back)
        return await asyncio.wrap_future(work)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
