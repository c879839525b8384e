"""The writer thread: the only write connection, a queue of jobs, group commit.

Every write call becomes a job on a queue owned by one dedicated thread, which holds the only
write connection. The thread takes every job waiting (up to `max_batch`), opens one
`BEGIN IMMEDIATE` transaction, runs each job inside its own SAVEPOINT (a job that fails -
conflict is not a failure, a broken constraint is - is rolled back to its savepoint alone),
COMMITs once, and only then resolves the callers' asyncio futures. A storage error (disk full,
locked, corrupt, I/O) rolls back the whole batch and every job in it gets the error; the thread
carries on.

Durability: with `synchronous="FULL"` a batch is fsynced when any of its jobs asked for a
durable commit; a batch of only non-durable jobs (`durable=False`, `save_run`,
`save_turn_marks`) runs with `synchronous=NORMAL`: it survives a crash of the process at once
and a power loss from the next durable batch on (the WAL is synced as a whole). The pragma is
set only when a batch wants another level than the previous one (docs/store.md measures what
the switch costs).

Across processes: `BEGIN IMMEDIATE` takes SQLite's write lock and `busy_timeout` waits for it,
and the version compare-and-swap decides, so two servers on one file never both append.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future as ThreadFuture
from typing import Any, Literal, TypeVar

import msgspec

from ..errors import StoreClosedError, StoreError, StoreIOError
from ..migrate import load_migrations, migrate
from .errors import BATCH_FATAL, map_error, primary, why_not_openable

T = TypeVar("T")
Synchronous = Literal["FULL", "NORMAL"]


class WriterStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of the writer thread (for benchmarks and a dashboard)."""

    batches: int
    jobs: int
    max_batch: int
    failed_batches: int
    synced_batches: int  # committed with synchronous=FULL (an fsync); the rest skipped it


class _Job:
    __slots__ = ("durable", "fn", "future", "loop", "what")

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], object],
        what: str,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
        durable: bool,
    ) -> None:
        self.fn = fn
        self.what = what
        self.loop = loop
        self.future = future
        self.durable = durable


class _BatchAbort(Exception):
    """A job met an error after which the transaction cannot go on: the whole batch fails."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


_STOP = object()
_Outcome = tuple[_Job, object, BaseException | None]
_Settlement = tuple[asyncio.Future[Any], object, BaseException | None]


def _settle(items: list[_Settlement]) -> None:
    """Runs on the caller's event loop: hands each job its value or error."""
    for future, value, exc in items:
        if future.done():  # the caller was cancelled; the write happened (or not) regardless
            continue
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(value)


class Writer:
    """The writer thread and its queue. `start()` opens and migrates the database on the thread;
    `run(job)` queues a job and waits for the COMMIT of its batch."""

    def __init__(
        self,
        path: str,
        *,
        synchronous: Synchronous,
        busy_timeout_ms: int,
        max_batch: int,
        max_size_bytes: int | None,
    ) -> None:
        self.path = path
        self.synchronous: Synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self.stopped = False  # the thread has ended: no job will run any more
        self._max_batch = max(1, max_batch)
        self._initial_max_size = max_size_bytes
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name="store-writer", daemon=True)
        self._ready: ThreadFuture[None] = ThreadFuture()
        self._sync: Synchronous = synchronous  # the level the connection is at now
        self._default_max_pages = 0
        self._page_size = 4096
        self._batches = 0
        self._jobs = 0
        self._largest_batch = 0
        self._failed_batches = 0
        self._synced_batches = 0

    # ------------------------------------------------------------------ used by the store

    async def start(self) -> None:
        """Start the thread; returns once the database is open and migrated (or raises why
        it could not be)."""
        self._thread.start()
        await asyncio.wrap_future(self._ready)

    async def run(self, fn: Callable[[sqlite3.Connection], T], what: str, *, durable: bool) -> T:
        """Queue `fn` (run inside the batch's transaction, on the writer thread) and return its
        value once the batch is committed. `what` names the write in error messages."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Job(fn, what, loop, future, durable))
        return await future

    async def stop(self) -> None:
        """Finish the queued jobs, close the connection and end the thread."""
        self._queue.put(_STOP)
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join)

    def stats(self) -> WriterStats:
        return WriterStats(
            batches=self._batches,
            jobs=self._jobs,
            max_batch=self._largest_batch,
            failed_batches=self._failed_batches,
            synced_batches=self._synced_batches,
        )

    def apply_size_limit(self, conn: sqlite3.Connection, max_bytes: int | None) -> int:
        """Cap the file at `max_bytes` (None: SQLite's default); returns the effective cap.
        Runs on the writer thread (inside a job, or while opening)."""
        pages = self._default_max_pages if max_bytes is None else -(-max_bytes // self._page_size)
        got = int(conn.execute(f"PRAGMA max_page_count = {int(pages)}").fetchone()[0])
        return got * self._page_size

    # ------------------------------------------------------------------ the thread

    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise StoreIOError(self.path, why_not_openable(self.path), str(exc)) from None
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreIOError(self.path, "cannot use WAL journal mode", f"got {mode!r}")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA journal_size_limit = 67108864")
            migrate(conn, self.path, load_migrations())
            self._page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
            self._default_max_pages = int(conn.execute("PRAGMA max_page_count").fetchone()[0])
            if self._initial_max_size is not None:
                self.apply_size_limit(conn, self._initial_max_size)
        except BaseException as exc:
            conn.close()
            raise self._map(exc, "opening the database") from exc
        return conn

    def _main(self) -> None:
        try:
            conn = self._open()
        except BaseException as exc:
            self.stopped = True
            self._ready.set_exception(exc)
            return
        self._ready.set_result(None)
        try:
            stop = False
            while not stop:
                first = self._queue.get()
                if first is _STOP:
                    break
                batch = [first]
                while len(batch) < self._max_batch:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stop = True
                        break
                    batch.append(item)
                jobs = [j for j in batch if isinstance(j, _Job)]
                try:
                    self._run_batch(conn, jobs)
                except BaseException as exc:  # pragma: no cover - last line of defence
                    _rollback_quietly(conn)
                    self._fail(jobs, exc)
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            self.stopped = True
            while True:  # writes that raced with close()
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, _Job):
                    self._fail([item], StoreClosedError(self.path, "store is closed"))

    def _run_batch(self, conn: sqlite3.Connection, jobs: list[_Job]) -> None:
        self._batches += 1
        self._jobs += len(jobs)
        self._largest_batch = max(self._largest_batch, len(jobs))
        outcomes: list[_Outcome] = []
        what = jobs[0].what if len(jobs) == 1 else f"committing {len(jobs)} writes"
        try:
            self._set_synchronous(conn, any(job.durable for job in jobs))
            conn.execute("BEGIN IMMEDIATE")
            # A job alone needs no savepoint: when it fails, the transaction is rolled back
            # (two statements fewer for the common batch of one).
            alone = len(jobs) == 1
            for job in jobs:
                if not alone:
                    conn.execute("SAVEPOINT job")
                try:
                    value = job.fn(conn)
                except Exception as exc:
                    if primary(exc) in BATCH_FATAL or not conn.in_transaction:
                        raise _BatchAbort(exc) from exc
                    if alone:
                        conn.execute("ROLLBACK")
                    else:
                        conn.execute("ROLLBACK TO job")
                        conn.execute("RELEASE job")
                    if isinstance(exc, sqlite3.Error):
                        exc = self._map(exc, job.what)
                    outcomes.append((job, None, exc))
                else:
                    if not alone:
                        conn.execute("RELEASE job")
                    outcomes.append((job, value, None))
            if conn.in_transaction:  # not when a job alone failed and was rolled back
                conn.execute("COMMIT")
                if self._sync == "FULL":
                    self._synced_batches += 1
        except (sqlite3.Error, _BatchAbort) as exc:
            cause = exc.cause if isinstance(exc, _BatchAbort) else exc
            _rollback_quietly(conn)
            self._failed_batches += 1
            for job in jobs:  # a fresh exception each: callers may add notes or tracebacks
                self._fail([job], self._map(cause, what, batch=len(jobs)))
            return
        self._resolve(outcomes)

    def _set_synchronous(self, conn: sqlite3.Connection, durable: bool) -> None:
        """FULL (an fsync at COMMIT) when a job of the batch asked for a durable commit, else
        NORMAL; a store opened with NORMAL never fsyncs a commit. Set before BEGIN, and only
        when the level changes."""
        if self.synchronous != "FULL":
            return
        wanted: Synchronous = "FULL" if durable else "NORMAL"
        if wanted != self._sync:
            conn.execute(f"PRAGMA synchronous = {wanted}")
            self._sync = wanted

    def _map(self, exc: BaseException, what: str, batch: int = 0) -> StoreError:
        return map_error(exc, self.path, what, busy_timeout_ms=self.busy_timeout_ms, batch=batch)

    def _fail(self, jobs: list[_Job], exc: BaseException) -> None:
        self._resolve([(job, None, exc) for job in jobs])

    @staticmethod
    def _resolve(outcomes: list[_Outcome]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[_Settlement]] = {}
        for job, value, exc in outcomes:
            by_loop.setdefault(job.loop, []).append((job.future, value, exc))
        for loop, items in by_loop.items():
            # RuntimeError: the caller's loop is closed; nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, items)


def _rollback_quietly(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
