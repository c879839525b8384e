"""Reads: point reads on the caller's thread, anything larger on a pool of reader threads.

Point reads (a run, an input, turn marks, a conversation of at most INLINE_MESSAGES messages)
run on the calling thread with their own connection that never waits for a lock: in WAL mode
they take microseconds, less than a hop to another thread. Anything larger, or a point read
that met a lock, goes to a small pool of reader threads, each with its own connection
(`query_only`), so it never blocks the event loop; WAL gives each read a snapshot. Reads never
wait for the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..errors import StoreError
from ..sql.rows import TooLarge
from .errors import is_lock, map_error

T = TypeVar("T")
INLINE_MESSAGES = 256  # a conversation up to this size loads on the caller's thread


class _Deferred(Exception):
    """An inline read cannot run here (another thread, or a lock): use a reader thread."""


class Reads:
    """The inline connection (owned by the first thread that reads) and the reader pool."""

    def __init__(self, path: str, *, busy_timeout_ms: int, threads: int) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, threads), thread_name_prefix="store-reader"
        )
        self._local = threading.local()
        self._inline: tuple[int, sqlite3.Connection] | None = None  # (thread id, connection)
        self._pool_conns: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()

    async def run(
        self,
        fn: Callable[[sqlite3.Connection], T],
        what: str,
        *,
        snapshot: bool = False,
        inline: Callable[[sqlite3.Connection], T] | None = None,
    ) -> T:
        """`inline`: the read to try first on the calling thread (it may raise TooLarge);
        `fn` runs on a reader thread when there is none or it cannot run here. `snapshot`:
        inside one read transaction. `what` names the read in error messages."""
        if inline is not None:
            try:
                return self._read_inline(inline, what, snapshot=snapshot)
            except (_Deferred, TooLarge):
                pass
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._read_on_pool, fn, what, snapshot)

    @property
    def pool_connections(self) -> int:
        """How many reader threads have opened their connection (0: none was needed yet)."""
        with self._pool_lock:
            return len(self._pool_conns)

    async def close(self) -> None:
        """Wait for the reads under way, then close every connection."""
        await asyncio.to_thread(self._pool.shutdown, True)
        with self._pool_lock:
            conns, self._pool_conns = self._pool_conns, []
        if self._inline is not None:
            conns.append(self._inline[1])
            self._inline = None
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def abandon(self) -> None:
        """The store never opened: stop the pool without waiting (no read has run)."""
        self._pool.shutdown(wait=False)

    # ------------------------------------------------------------------ on the caller's thread

    def _read_inline(
        self, fn: Callable[[sqlite3.Connection], T], what: str, *, snapshot: bool
    ) -> T:
        """Run a small read on the calling thread; raises _Deferred when it must not."""
        conn = self._inline_conn(what)
        try:
            return _run_read(conn, fn, snapshot)
        except sqlite3.Error as exc:
            _rollback_quietly(conn)
            if is_lock(exc):
                raise _Deferred() from exc  # a reader thread may wait for it; this one may not
            raise self._map(exc, what) from exc
        except BaseException:
            _rollback_quietly(conn)
            raise

    def _inline_conn(self, what: str) -> sqlite3.Connection:
        me = threading.get_ident()
        if self._inline is None:
            try:
                conn = sqlite3.connect(
                    self.path, timeout=0, isolation_level=None, check_same_thread=False
                )
                conn.execute("PRAGMA query_only = ON")
            except sqlite3.Error as exc:
                raise self._map(exc, what) from exc
            self._inline = (me, conn)
        owner, conn = self._inline
        if owner != me:
            raise _Deferred()
        return conn

    # ------------------------------------------------------------------ on a reader thread

    def _read_on_pool(self, fn: Callable[[sqlite3.Connection], T], what: str, snapshot: bool) -> T:
        try:
            return _run_read(self._pool_conn(), fn, snapshot)
        except sqlite3.Error as exc:
            _rollback_quietly(getattr(self._local, "conn", None))
            raise self._map(exc, what) from exc
        except BaseException:
            _rollback_quietly(getattr(self._local, "conn", None))
            raise

    def _pool_conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,  # closed by close() from another thread, never shared
            )
            conn.execute("PRAGMA query_only = ON")
            with self._pool_lock:
                self._pool_conns.append(conn)
            self._local.conn = conn
        return conn

    def _map(self, exc: BaseException, what: str) -> StoreError:
        return map_error(exc, self.path, what, busy_timeout_ms=self.busy_timeout_ms)


def _run_read(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T], snapshot: bool) -> T:
    if not snapshot:
        return fn(conn)
    conn.execute("BEGIN")
    value = fn(conn)
    conn.execute("COMMIT")
    return value


def _rollback_quietly(conn: sqlite3.Connection | None) -> None:
    if conn is not None and conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
