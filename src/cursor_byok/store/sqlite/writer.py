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

Inline: a non-durable write asked for while the thread has nothing queued or under way
(`run(..., inline_bytes=N)`, a model call's commit) runs on the caller's thread, on the same
connection under the same lock, and returns without two thread hops: the hop to the thread
and back costs about 0.3 ms on a 2-core VM, five times the commit's own work (a 5 KB commit:
0.06 ms). It never waits: SQLite's write lock held by another process, or a write bigger than
`INLINE_BYTES`, sends it to the thread as before. Order holds: a write runs inline only when
every write asked for before it is committed.

Checkpoints: SQLite's automatic WAL checkpoint would run inside whichever COMMIT crosses its
threshold, on the caller's thread for an inline one; it is off (`wal_autocheckpoint = 0`) and
the thread runs a PASSIVE checkpoint every `CHECKPOINT_EVERY` commits instead, which is about
SQLite's own threshold (1,000 pages) for commits of a few pages each.

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
INLINE_BYTES = 64 * 1024  # a larger write goes to the thread, whoever asks
CHECKPOINT_EVERY = 200  # commits between the thread's WAL checkpoints


class WriterStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of the writer thread (for benchmarks and a dashboard)."""

    batches: int
    jobs: int
    max_batch: int
    failed_batches: int
    synced_batches: int  # committed with synchronous=FULL (an fsync); the rest skipped it
    inline_writes: int = 0  # run on the caller's thread (counted in batches and jobs too)
    checkpoints: int = 0  # WAL checkpoints the thread ran


class _Job:
    __slots__ = ("durable", "fn", "future", "loop", "what")

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], object],
        what: str,
        loop: asyncio.AbstractEventLoop | None,
        future: asyncio.Future[Any] | None,
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
_CHECKPOINT = object()  # wakes the thread for a checkpoint an inline commit made due
_NOT_INLINE = object()
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
        self._inline_writes = 0
        self._checkpoints = 0
        self._since_checkpoint = 0
        # The write connection once open; used under `_conn_lock`, by the thread for each
        # batch and by an inline write. `_queued`: writes queued or under way on the thread.
        self._conn: sqlite3.Connection | None = None
        self._conn_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._queued = 0

    # ------------------------------------------------------------------ used by the store

    async def start(self) -> None:
        """Start the thread; returns once the database is open and migrated (or raises why
        it could not be)."""
        self._thread.start()
        await asyncio.wrap_future(self._ready)

    async def run(
        self,
        fn: Callable[[sqlite3.Connection], T],
        what: str,
        *,
        durable: bool,
        inline_bytes: int | None = None,
    ) -> T:
        """Queue `fn` (run inside the batch's transaction, on the writer thread) and return its
        value once the batch is committed. `what` names the write in error messages.
        `inline_bytes`: about how much a non-durable write writes, when it may run on this
        thread (see the module's docstring); None: on the writer thread."""
        if inline_bytes is not None and not durable and inline_bytes <= INLINE_BYTES:
            value = self._inline(fn, what)
            if value is not _NOT_INLINE:
                if isinstance(value, _Failed):
                    raise value.error
                return value  # type: ignore[return-value]  # fn's own value
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._count_lock:
            self._queued += 1
        self._queue.put(_Job(fn, what, loop, future, durable))
        return await future

    def _inline(self, fn: Callable[[sqlite3.Connection], object], what: str) -> object:
        """Run `fn` in a transaction of its own here and now, or `_NOT_INLINE` when it
        cannot: the thread has writes queued or under way (they go first), or another process
        holds SQLite's write lock (the thread waits for it, this thread must not)."""
        if not self._conn_lock.acquire(blocking=False):
            return _NOT_INLINE
        try:
            conn = self._conn
            if conn is None or self._queued:
                return _NOT_INLINE
            self._set_synchronous(conn, False)
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error:
                return _NOT_INLINE
            finally:
                conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            ((_, value, exc),) = self._commit(conn, [_Job(fn, what, None, None, False)], True)
            self._inline_writes += 1
            due = self._since_checkpoint >= CHECKPOINT_EVERY
        finally:
            self._conn_lock.release()
        if due:
            self._queue.put(_CHECKPOINT)
        return _Failed(exc) if exc is not None else value

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
            inline_writes=self._inline_writes,
            checkpoints=self._checkpoints,
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
            # Used by this thread and, under the lock, by an inline write's thread.
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
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
            conn.execute("PRAGMA wal_autocheckpoint = 0")  # the thread checkpoints instead
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
        self._conn = conn
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
                with self._conn_lock:
                    try:
                        if jobs:
                            self._run_batch(conn, jobs)
                        if self._since_checkpoint >= CHECKPOINT_EVERY:
                            self._checkpoint(conn)
                    except BaseException as exc:  # pragma: no cover - last line of defence
                        _rollback_quietly(conn)
                        self._fail(jobs, exc)
                with self._count_lock:
                    self._queued -= len(jobs)
        finally:
            with self._conn_lock:
                self._conn = None
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

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """Copy the WAL's commits into the database file (PASSIVE: never waits for readers;
        what they still read stays for the next one)."""
        self._since_checkpoint = 0
        with contextlib.suppress(sqlite3.Error):  # busy elsewhere: the next one does it
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self._checkpoints += 1

    def _run_batch(self, conn: sqlite3.Connection, jobs: list[_Job]) -> None:
        self._resolve(self._commit(conn, jobs))

    def _commit(
        self, conn: sqlite3.Connection, jobs: list[_Job], begun: bool = False
    ) -> list[_Outcome]:
        """Run `jobs` in one transaction (`begun`: BEGIN IMMEDIATE was run already); what
        each job gave, or the error it gets."""
        self._batches += 1
        self._jobs += len(jobs)
        self._largest_batch = max(self._largest_batch, len(jobs))
        outcomes: list[_Outcome] = []
        what = jobs[0].what if len(jobs) == 1 else f"committing {len(jobs)} writes"
        try:
            if not begun:
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
                self._since_checkpoint += 1
                if self._sync == "FULL":
                    self._synced_batches += 1
        except (sqlite3.Error, _BatchAbort) as exc:
            cause = exc.cause if isinstance(exc, _BatchAbort) else exc
            _rollback_quietly(conn)
            self._failed_batches += 1
            # A fresh exception each: callers may add notes or tracebacks.
            return [(job, None, self._map(cause, what, batch=len(jobs))) for job in jobs]
        return outcomes

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
            if job.loop is not None and job.future is not None:  # None: an inline write
                by_loop.setdefault(job.loop, []).append((job.future, value, exc))
        for loop, items in by_loop.items():
            # RuntimeError: the caller's loop is closed; nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, items)


class _Failed:
    """What an inline write raised, to raise in its caller."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _rollback_quietly(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
