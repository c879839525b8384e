"""SQLite backend of the Store: stdlib sqlite3, WAL, one writer thread with group commit.

Writes: every write call becomes a job on a queue owned by one dedicated thread, which holds the
only write connection. The thread takes every job waiting (up to `max_batch`), opens one
`BEGIN IMMEDIATE` transaction, runs each job inside its own SAVEPOINT (a job that fails - conflict
is not a failure, a broken constraint is - is rolled back to its savepoint alone), COMMITs once,
and only then resolves the callers' asyncio futures. A storage error (disk full, locked, corrupt,
I/O) rolls back the whole batch and every job in it gets the error; the thread carries on.

Durability: with `synchronous="FULL"` a batch is fsynced when any of its jobs asked for a
durable commit; a batch of only non-durable jobs (`durable=False`, `save_run`,
`save_turn_marks`) runs with `synchronous=NORMAL`: it survives a crash of the process at once
and a power loss from the next durable batch on (the WAL is synced as a whole).

Reads: point reads (a run, an input, turn marks, a conversation of at most INLINE_MESSAGES
messages) run on the calling thread with their own connection that never waits for a lock:
in WAL mode they take microseconds, less than a hop to another thread. Anything larger, or a
point read that met a lock, goes to a small pool of reader threads, each with its own
connection (`query_only`), so it never blocks the event loop; WAL gives each read a snapshot.

Across processes: `BEGIN IMMEDIATE` takes SQLite's write lock and `busy_timeout` waits for it, and
the version compare-and-swap decides, so two servers on one file never both append.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec

from .api import (
    ClientOperationRecord,
    CommitResult,
    ConversationRecord,
    ConversationSummary,
    InputCommit,
    LLMCallRecord,
    RunRecord,
    SaveResult,
    Store,
    TurnMark,
)
from .errors import (
    RecordMismatchError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreIntegrityError,
    StoreIOError,
    StoreLockedError,
)
from .migrate import load_migrations, migrate

T = TypeVar("T")
Synchronous = Literal["FULL", "NORMAL"]
INLINE_MESSAGES = 256  # a conversation up to this size loads on the caller's thread


class _TooLarge(Exception):
    """An inline read found more than it should read on the caller's thread."""


class _Deferred(Exception):
    """An inline read cannot run here (another thread, or a lock): use a reader thread."""


# Primary SQLite result codes (the low byte of the extended code).
_BUSY, _LOCKED, _NOMEM, _READONLY, _IOERR, _CORRUPT = 5, 6, 7, 8, 10, 11
_FULL, _CANTOPEN, _PROTOCOL, _CONSTRAINT, _NOTADB = 13, 14, 15, 19, 26
# Errors after which SQLite may have rolled the transaction back on its own: the batch fails.
_BATCH_FATAL = frozenset(
    {_BUSY, _LOCKED, _NOMEM, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _PROTOCOL, _NOTADB}
)

_CALL_FIELDS: tuple[str, ...] = tuple(f.name for f in msgspec.structs.fields(LLMCallRecord))
_CALL_IMMUTABLE = ("conversation_id", "turn_id", "request", "request_hash", "messages_hash")
_CALL_MUTABLE = tuple(
    f for f in _CALL_FIELDS if f not in ("call_id", "created_at_ms", *_CALL_IMMUTABLE)
)
_CALL_SELECT = f"SELECT {', '.join(_CALL_FIELDS)} FROM llm_calls"
_CALL_INSERT = (
    f"INSERT INTO llm_calls ({', '.join(_CALL_FIELDS)}) "
    f"VALUES ({', '.join('?' for _ in _CALL_FIELDS)})"
)
_CALL_UPDATE = (
    f"UPDATE llm_calls SET {', '.join(f'{f} = ?' for f in _CALL_MUTABLE)} WHERE call_id = ?"
)

_OP_FIELDS: tuple[str, ...] = tuple(f.name for f in msgspec.structs.fields(ClientOperationRecord))
_OP_IMMUTABLE = (
    "conversation_id",
    "turn_id",
    "tool_call_id",
    "tool_index",
    "tool_name",
    "side_effects",
    "request",
)
_OP_SELECT = f"SELECT {', '.join(_OP_FIELDS)} FROM client_operations"
_OP_INSERT = (
    f"INSERT INTO client_operations ({', '.join(_OP_FIELDS)}, created_at_ms) "
    f"VALUES ({', '.join('?' for _ in _OP_FIELDS)}, ?)"
)


def _primary(exc: BaseException) -> int | None:
    """The primary SQLite result code of an error (None if it did not come from SQLite)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


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
        durable: bool = True,
    ) -> None:
        self.fn = fn
        self.what = what
        self.loop = loop
        self.future = future
        self.durable = durable


class _BatchAbort(Exception):
    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


_STOP = object()
_Outcome = tuple[_Job, object, BaseException | None]


def _settle(items: list[tuple[asyncio.Future[Any], object, BaseException | None]]) -> None:
    for future, value, exc in items:
        if future.done():  # the caller was cancelled; the write happened (or not) regardless
            continue
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(value)


class SQLiteStore:
    """The Store protocol over one SQLite file. Create with `await SQLiteStore.open(path)`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout_ms: int = 5000,
        readers: int = 4,
        max_batch: int = 512,
        max_size_bytes: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        """Prefer `await SQLiteStore.open(...)`: the constructor does no I/O; `start()` does."""
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
        self.path = os.path.abspath(os.fspath(path))
        self.synchronous: Synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self._max_batch = max(1, max_batch)
        self._initial_max_size = max_size_bytes
        self._clock = clock or _now_ms
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._closed = False  # no new calls (set by close() or when the writer stops)
        self._close_called = False
        self._started = False
        self._writer = threading.Thread(target=self._writer_main, name="store-writer", daemon=True)
        self._ready: ThreadFuture[None] = ThreadFuture()
        self._readers = ThreadPoolExecutor(
            max_workers=max(1, readers), thread_name_prefix="store-reader"
        )
        self._local = threading.local()
        self._inline: tuple[int, sqlite3.Connection] | None = None  # (thread id, connection)
        self._writer_sync: Synchronous = synchronous
        self._reader_conns: list[sqlite3.Connection] = []
        self._reader_lock = threading.Lock()
        self._default_max_pages = 0
        self._page_size = 4096
        self._batches = 0
        self._jobs = 0
        self._largest_batch = 0
        self._failed_batches = 0
        self._synced_batches = 0

    # ------------------------------------------------------------------ life cycle

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout_ms: int = 5000,
        readers: int = 4,
        max_batch: int = 512,
        max_size_bytes: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> SQLiteStore:
        """Open (creating if needed) and migrate the database, start the writer thread.

        Raises StoreCorruptError (not a database), StoreSchemaError (newer schema, failed
        migration), StoreLockedError, StoreIOError.
        """
        store = cls(
            path,
            synchronous=synchronous,
            busy_timeout_ms=busy_timeout_ms,
            readers=readers,
            max_batch=max_batch,
            max_size_bytes=max_size_bytes,
            clock=clock,
        )
        await store.start()
        return store

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._writer.start()
        try:
            await asyncio.wrap_future(self._ready)
        except BaseException:
            self._closed = self._close_called = True
            self._readers.shutdown(wait=False)
            raise

    async def close(self) -> None:
        """Finish the queued writes, then close every connection. Idempotent."""
        if self._close_called:
            return
        self._close_called = True
        self._closed = True
        self._queue.put(_STOP)
        if self._writer.is_alive():
            await asyncio.to_thread(self._writer.join)
        await asyncio.to_thread(self._readers.shutdown, True)
        with self._reader_lock:
            conns, self._reader_conns = self._reader_conns, []
        if self._inline is not None:
            conns.append(self._inline[1])
            self._inline = None
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    async def __aenter__(self) -> SQLiteStore:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def stats(self) -> WriterStats:
        return WriterStats(
            batches=self._batches,
            jobs=self._jobs,
            max_batch=self._largest_batch,
            failed_batches=self._failed_batches,
            synced_batches=self._synced_batches,
        )

    # ------------------------------------------------------------------ reads

    async def load(self, conversation_id: str) -> ConversationRecord | None:
        def read(conn: sqlite3.Connection, limit: int | None) -> ConversationRecord | None:
            row = conn.execute(
                "SELECT version, state, message_count, created_at_ms, updated_at_ms "
                "FROM conversations WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            if row is None:
                return None
            if limit is not None and row[2] > limit:
                raise _TooLarge()
            bodies = conn.execute(
                "SELECT body FROM messages WHERE conversation_id = ? ORDER BY seq",
                (conversation_id,),
            ).fetchall()
            if len(bodies) != row[2]:
                raise StoreCorruptError(
                    self.path,
                    "message history does not match the conversation",
                    f"conversation {conversation_id!r} records {row[2]} messages, "
                    f"found {len(bodies)}",
                )
            return ConversationRecord(
                conversation_id=conversation_id,
                version=row[0],
                state=row[1],
                messages=tuple(b[0] for b in bodies),
                created_at_ms=row[3],
                updated_at_ms=row[4],
            )

        return await self._read(
            lambda conn: read(conn, None),
            f"loading conversation {conversation_id!r}",
            snapshot=True,
            inline=lambda conn: read(conn, INLINE_MESSAGES),
        )

    async def head(self, conversation_id: str) -> ConversationSummary | None:
        def read(conn: sqlite3.Connection) -> ConversationSummary | None:
            row = conn.execute(
                "SELECT version, message_count, created_at_ms, updated_at_ms "
                "FROM conversations WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            if row is None:
                return None
            return ConversationSummary(
                conversation_id=conversation_id,
                version=row[0],
                message_count=row[1],
                created_at_ms=row[2],
                updated_at_ms=row[3],
            )

        return await self._read(read, f"reading conversation {conversation_id!r}", inline=read)

    async def find_input_commit(self, conversation_id: str, input_id: str) -> InputCommit | None:
        def read(conn: sqlite3.Connection) -> InputCommit | None:
            return _find_input(conn, conversation_id, input_id)

        return await self._read(read, f"reading input {input_id!r}", inline=read)

    async def get_llm_call(self, call_id: str) -> LLMCallRecord | None:
        def read(conn: sqlite3.Connection) -> LLMCallRecord | None:
            return _get_call(conn, call_id)

        return await self._read(read, f"reading llm call {call_id!r}")

    async def get_client_operation(self, operation_id: str) -> ClientOperationRecord | None:
        def read(conn: sqlite3.Connection) -> ClientOperationRecord | None:
            return _get_operation(conn, operation_id)

        return await self._read(read, f"reading client operation {operation_id!r}")

    async def list_recent_llm_calls(self, limit: int = 50) -> tuple[LLMCallRecord, ...]:
        def read(conn: sqlite3.Connection) -> tuple[LLMCallRecord, ...]:
            rows = conn.execute(
                f"{_CALL_SELECT} ORDER BY created_at_ms DESC, call_id LIMIT ?", (limit,)
            ).fetchall()
            return tuple(_call_from_row(r) for r in rows)

        return await self._read(read, "listing llm calls")

    async def list_conversations(self, limit: int = 50) -> tuple[ConversationSummary, ...]:
        def read(conn: sqlite3.Connection) -> tuple[ConversationSummary, ...]:
            rows = conn.execute(
                "SELECT conversation_id, version, message_count, created_at_ms, updated_at_ms "
                "FROM conversations ORDER BY updated_at_ms DESC, conversation_id LIMIT ?",
                (limit,),
            ).fetchall()
            return tuple(
                ConversationSummary(
                    conversation_id=r[0],
                    version=r[1],
                    message_count=r[2],
                    created_at_ms=r[3],
                    updated_at_ms=r[4],
                )
                for r in rows
            )

        return await self._read(read, "listing conversations")

    async def list_stream_diagnostics(self, call_id: str) -> tuple[tuple[int, bytes], ...]:
        """Debugging aid only: never feed these back into a conversation's messages."""

        def read(conn: sqlite3.Connection) -> tuple[tuple[int, bytes], ...]:
            rows = conn.execute(
                "SELECT event_index, event FROM stream_diagnostics WHERE call_id = ? "
                "ORDER BY event_index",
                (call_id,),
            ).fetchall()
            return tuple((int(r[0]), bytes(r[1])) for r in rows)

        return await self._read(read, f"reading diagnostics of {call_id!r}")

    # ------------------------------------------------------------------ writes

    async def commit_input(
        self,
        conversation_id: str,
        *,
        input_id: str,
        expected_version: int,
        state: bytes,
        append_messages: Sequence[bytes],
        expected_message_count: int,
        result: bytes,
        llm_calls: Sequence[LLMCallRecord] = (),
        client_operations: Sequence[ClientOperationRecord] = (),
        durable: bool = True,
    ) -> CommitResult:
        if expected_version < 0 or expected_message_count < 0:
            raise ValueError("expected_version and expected_message_count must be >= 0")
        messages = tuple(append_messages)
        for value in (state, result, *messages):
            if not isinstance(value, bytes | bytearray | memoryview):
                raise TypeError(f"state, messages and result are bytes, not {type(value)!r}")
        calls = tuple(llm_calls)
        operations = tuple(client_operations)
        path = self.path
        clock = self._clock

        def job(conn: sqlite3.Connection) -> CommitResult:
            now = clock()
            previous = _find_input(conn, conversation_id, input_id)
            if previous is not None:
                return CommitResult(
                    status="duplicate",
                    version=_current_version(conn, conversation_id),
                    previous=previous,
                )
            if expected_version == 0:
                if expected_message_count != 0:
                    raise StoreIntegrityError(
                        path,
                        "a new conversation starts with expected_message_count=0",
                        f"conversation {conversation_id!r}, got {expected_message_count}",
                    )
                cur = conn.execute(
                    "INSERT INTO conversations (conversation_id, version, state, message_count, "
                    "created_at_ms, updated_at_ms) VALUES (?, 1, ?, ?, ?, ?) "
                    "ON CONFLICT (conversation_id) DO NOTHING",
                    (conversation_id, state, len(messages), now, now),
                )
            else:
                cur = conn.execute(
                    "UPDATE conversations SET version = version + 1, state = ?, "
                    "message_count = message_count + ?, updated_at_ms = ? "
                    "WHERE conversation_id = ? AND version = ? AND message_count = ?",
                    (
                        state,
                        len(messages),
                        now,
                        conversation_id,
                        expected_version,
                        expected_message_count,
                    ),
                )
            if cur.rowcount != 1:
                row = conn.execute(
                    "SELECT version, message_count FROM conversations WHERE conversation_id = ?",
                    (conversation_id,),
                ).fetchone()
                if row is None or row[0] != expected_version:
                    return CommitResult(status="conflict", version=0 if row is None else row[0])
                raise StoreIntegrityError(
                    path,
                    "message count mismatch: messages are append-only",
                    f"conversation {conversation_id!r} at version {expected_version} has "
                    f"{row[1]} messages, the commit expected {expected_message_count}",
                )
            version = expected_version + 1
            for i, body in enumerate(messages):  # one execute per row beats executemany here
                conn.execute(
                    "INSERT INTO messages (conversation_id, seq, appended_version, body) "
                    "VALUES (?, ?, ?, ?)",
                    (conversation_id, expected_message_count + i, version, body),
                )
            conn.execute(
                "INSERT INTO input_commits (conversation_id, input_id, committed_version, "
                "result, created_at_ms) VALUES (?, ?, ?, ?, ?)",
                (conversation_id, input_id, version, result, now),
            )
            ignored: list[str] = []
            for call in calls:
                if _upsert_call(conn, path, call).outcome == "ignored":
                    ignored.append(call.call_id)
            for op in operations:
                if _upsert_operation(conn, path, op, now).outcome == "ignored":
                    ignored.append(op.operation_id)
            return CommitResult(status="committed", version=version, ignored=tuple(ignored))

        return await self._write(
            job, f"committing input {input_id!r} to {conversation_id!r}", durable=durable
        )

    async def truncate_messages(
        self,
        conversation_id: str,
        *,
        keep: int,
        expected_version: int,
        state: bytes | None = None,
    ) -> CommitResult:
        if keep < 0 or expected_version < 0:
            raise ValueError("keep and expected_version must be >= 0")
        path = self.path
        clock = self._clock

        def job(conn: sqlite3.Connection) -> CommitResult:
            now = clock()
            row = conn.execute(
                "SELECT version, message_count FROM conversations WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            if row is None or row[0] != expected_version:
                return CommitResult(status="conflict", version=0 if row is None else row[0])
            count = int(row[1])
            if keep > count:
                raise StoreIntegrityError(
                    path,
                    "cannot rewind forward",
                    f"conversation {conversation_id!r} has {count} messages, keep={keep}",
                )
            version = expected_version + 1
            cur = conn.execute(
                "UPDATE conversations SET version = ?, message_count = ?, "
                "state = COALESCE(?, state), updated_at_ms = ? "
                "WHERE conversation_id = ? AND version = ?",
                (version, keep, state, now, conversation_id, expected_version),
            )
            if cur.rowcount != 1:  # pragma: no cover - we hold the write lock
                return CommitResult(status="conflict", version=row[0])
            conn.execute(
                "INSERT INTO message_rewinds (conversation_id, version, keep, previous_count, "
                "created_at_ms) VALUES (?, ?, ?, ?, ?)",
                (conversation_id, version, keep, count, now),
            )
            conn.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND seq >= ?",
                (conversation_id, keep),
            )
            return CommitResult(status="committed", version=version)

        return await self._write(job, f"rewinding {conversation_id!r} to {keep} messages")

    async def save_run(self, record: RunRecord) -> SaveResult:
        def job(conn: sqlite3.Connection) -> SaveResult:
            row = conn.execute(
                "SELECT request FROM runs WHERE request_id = ?", (record.request_id,)
            ).fetchone()
            if row is not None:
                if bytes(row[0]) == record.request:
                    return SaveResult(outcome="unchanged")
                return SaveResult(outcome="ignored", reason="another request has this id")
            conn.execute(
                "INSERT INTO runs (request_id, conversation_id, request, created_at_ms) "
                "VALUES (?, ?, ?, ?)",
                (record.request_id, record.conversation_id, record.request, record.created_at_ms),
            )
            return SaveResult(outcome="inserted")

        return await self._write(job, f"saving run {record.request_id!r}", durable=False)

    async def find_run(self, request_id: str) -> RunRecord | None:
        def read(conn: sqlite3.Connection) -> RunRecord | None:
            row = conn.execute(
                "SELECT request_id, conversation_id, request, created_at_ms FROM runs "
                "WHERE request_id = ?",
                (request_id,),
            ).fetchone()
            if row is None:
                return None
            return RunRecord(
                request_id=row[0],
                conversation_id=row[1],
                request=bytes(row[2]),
                created_at_ms=row[3],
            )

        return await self._read(read, f"reading run {request_id!r}", inline=read)

    async def save_turn_marks(
        self, conversation_id: str, marks: Sequence[TurnMark], *, unchanged: int = 0
    ) -> None:
        clock = self._clock
        marks = tuple(marks)
        keep = min(max(unchanged, 0), len(marks))

        def job(conn: sqlite3.Connection) -> None:
            first = 0
            if keep:
                # The caller's marks number their turns from 1: holding exactly `keep` rows up
                # to the last unchanged turn means none of them was lost.
                held = conn.execute(
                    "SELECT count(*) FROM turn_marks WHERE conversation_id = ? AND turn <= ?",
                    (conversation_id, marks[keep - 1].turn),
                ).fetchone()[0]
                if held == keep:
                    first = keep
            if first:
                conn.execute(
                    "DELETE FROM turn_marks WHERE conversation_id = ? AND turn > ?",
                    (conversation_id, marks[first - 1].turn),
                )
            else:
                conn.execute("DELETE FROM turn_marks WHERE conversation_id = ?", (conversation_id,))
            conn.executemany(
                "INSERT INTO turn_marks (conversation_id, turn, blob_id, message_count, "
                "created_at_ms) VALUES (?, ?, ?, ?, ?)",
                [
                    (conversation_id, m.turn, m.blob_id, m.message_count, clock())
                    for m in marks[first:]
                ],
            )

        await self._write(job, f"saving turn marks of {conversation_id!r}", durable=False)

    async def list_turn_marks(self, conversation_id: str) -> tuple[TurnMark, ...]:
        def read(conn: sqlite3.Connection) -> tuple[TurnMark, ...]:
            rows = conn.execute(
                "SELECT turn, blob_id, message_count FROM turn_marks WHERE conversation_id = ? "
                "ORDER BY turn",
                (conversation_id,),
            ).fetchall()
            return tuple(
                TurnMark(
                    conversation_id=conversation_id,
                    turn=r[0],
                    blob_id=bytes(r[1]),
                    message_count=r[2],
                )
                for r in rows
            )

        return await self._read(read, f"reading turn marks of {conversation_id!r}", inline=read)

    async def save_llm_call(self, record: LLMCallRecord) -> SaveResult:
        path = self.path

        def job(conn: sqlite3.Connection) -> SaveResult:
            return _upsert_call(conn, path, record)

        return await self._write(job, f"saving llm call {record.call_id!r}")

    async def save_client_operation(self, record: ClientOperationRecord) -> SaveResult:
        path = self.path
        clock = self._clock

        def job(conn: sqlite3.Connection) -> SaveResult:
            return _upsert_operation(conn, path, record, clock())

        return await self._write(job, f"saving client operation {record.operation_id!r}")

    async def append_stream_diagnostics(
        self, call_id: str, events: Sequence[tuple[int, bytes]]
    ) -> None:
        """Debugging aid: raw stream events by index; an index already stored is kept."""
        rows = [(call_id, int(i), bytes(e)) for i, e in events]

        def job(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO stream_diagnostics (call_id, event_index, event) VALUES (?, ?, ?) "
                "ON CONFLICT (call_id, event_index) DO NOTHING",
                rows,
            )

        await self._write(job, f"saving diagnostics of {call_id!r}")

    async def set_size_limit(self, max_bytes: int | None) -> int:
        """Cap the database size (PRAGMA max_page_count); None lifts the cap.

        Commits that would grow the file beyond it fail with StoreFullError. The cap cannot go
        below the current size. Returns the effective limit in bytes.
        """
        return await self._write(
            lambda conn: self._apply_size_limit(conn, max_bytes), "setting the size limit"
        )

    # ------------------------------------------------------------------ machinery

    def _check_open(self) -> None:
        if self._closed or not self._started:
            state = "closed" if self._closed else "not started (use SQLiteStore.open)"
            raise StoreClosedError(self.path, f"store is {state}")

    async def _write(
        self, fn: Callable[[sqlite3.Connection], T], what: str, *, durable: bool = True
    ) -> T:
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Job(fn, what, loop, future, durable))
        return await future

    async def _read(
        self,
        fn: Callable[[sqlite3.Connection], T],
        what: str,
        *,
        snapshot: bool = False,
        inline: Callable[[sqlite3.Connection], T] | None = None,
    ) -> T:
        """`inline`: the read to try first on the calling thread (it may raise _TooLarge);
        `fn` runs on a reader thread when there is none or it cannot run here."""
        self._check_open()
        if inline is not None:
            try:
                return self._read_inline(inline, what, snapshot=snapshot)
            except (_Deferred, _TooLarge):
                pass
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._read_sync, fn, what, snapshot)

    def _read_inline(
        self, fn: Callable[[sqlite3.Connection], T], what: str, *, snapshot: bool
    ) -> T:
        """Run a small read on the calling thread; raises _Deferred when it must not."""
        conn = self._inline_conn(what)
        try:
            return self._run_read(conn, fn, snapshot)
        except sqlite3.Error as exc:
            self._rollback_quietly(conn)
            if _primary(exc) in (_BUSY, _LOCKED):
                raise _Deferred() from exc  # a reader thread may wait for it; this one may not
            raise self._map_error(exc, what) from exc
        except BaseException:
            self._rollback_quietly(conn)
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
                raise self._map_error(exc, what) from exc
            self._inline = (me, conn)
        owner, conn = self._inline
        if owner != me:
            raise _Deferred()
        return conn

    @staticmethod
    def _run_read(
        conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T], snapshot: bool
    ) -> T:
        if not snapshot:
            return fn(conn)
        conn.execute("BEGIN")
        value = fn(conn)
        conn.execute("COMMIT")
        return value

    def _read_sync(self, fn: Callable[[sqlite3.Connection], T], what: str, snapshot: bool) -> T:
        try:
            return self._run_read(self._reader(), fn, snapshot)
        except sqlite3.Error as exc:
            self._rollback_quietly(getattr(self._local, "conn", None))
            raise self._map_error(exc, what) from exc
        except BaseException:
            self._rollback_quietly(getattr(self._local, "conn", None))
            raise

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,  # closed by close() from another thread, never shared
            )
            conn.execute("PRAGMA query_only = ON")
            with self._reader_lock:
                self._reader_conns.append(conn)
            self._local.conn = conn
        return conn

    @staticmethod
    def _rollback_quietly(conn: sqlite3.Connection | None) -> None:
        if conn is not None and conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    def _map_error(self, exc: BaseException, what: str, batch: int = 0) -> StoreError:
        if isinstance(exc, StoreError):
            return exc
        primary = _primary(exc)
        name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
        detail = f"while {what}: {exc}"
        if batch:
            detail += f"; nothing of this batch of {batch} write(s) was committed"
        if primary == _FULL:
            return StoreFullError(self.path, f"database or disk is full ({name})", detail)
        if primary in (_BUSY, _LOCKED):
            return StoreLockedError(
                self.path,
                f"database is locked ({name}): another connection held it longer than "
                f"busy_timeout={self.busy_timeout_ms} ms",
                detail,
            )
        if primary in (_CORRUPT, _NOTADB):
            return StoreCorruptError(
                self.path, f"database file is corrupt or not a database ({name})", detail
            )
        if primary in (_IOERR, _CANTOPEN, _READONLY, _PROTOCOL, _NOMEM):
            return StoreIOError(self.path, f"cannot read or write the database ({name})", detail)
        if primary == _CONSTRAINT:
            return StoreIntegrityError(self.path, f"constraint failed ({name})", detail)
        return StoreError(self.path, f"database error ({name})", detail)

    # ---- writer thread

    def _open_writer(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_ms / 1000,
                isolation_level=None,
            )
        except sqlite3.Error as exc:
            raise StoreIOError(self.path, _why_not_openable(self.path), str(exc)) from None
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
                self._apply_size_limit(conn, self._initial_max_size)
        except BaseException as exc:
            conn.close()
            raise self._map_error(exc, "opening the database") from exc
        return conn

    def _apply_size_limit(self, conn: sqlite3.Connection, max_bytes: int | None) -> int:
        pages = self._default_max_pages if max_bytes is None else -(-max_bytes // self._page_size)
        got = int(conn.execute(f"PRAGMA max_page_count = {int(pages)}").fetchone()[0])
        return got * self._page_size

    def _writer_main(self) -> None:
        try:
            conn = self._open_writer()
        except BaseException as exc:
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
                    self._rollback_quietly(conn)
                    self._fail(jobs, exc)
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            self._closed = True
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
            if self.synchronous == "FULL":
                wanted: Synchronous = "FULL" if any(job.durable for job in jobs) else "NORMAL"
                if wanted != self._writer_sync:
                    conn.execute(f"PRAGMA synchronous = {wanted}")
                    self._writer_sync = wanted
            conn.execute("BEGIN IMMEDIATE")
            for job in jobs:
                conn.execute("SAVEPOINT job")
                try:
                    value = job.fn(conn)
                except Exception as exc:
                    if _primary(exc) in _BATCH_FATAL or not conn.in_transaction:
                        raise _BatchAbort(exc) from exc
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    if isinstance(exc, sqlite3.Error):
                        exc = self._map_error(exc, job.what)
                    outcomes.append((job, None, exc))
                else:
                    conn.execute("RELEASE job")
                    outcomes.append((job, value, None))
            conn.execute("COMMIT")
            if self._writer_sync == "FULL":
                self._synced_batches += 1
        except (sqlite3.Error, _BatchAbort) as exc:
            cause = exc.cause if isinstance(exc, _BatchAbort) else exc
            self._rollback_quietly(conn)
            self._failed_batches += 1
            for job in jobs:
                self._fail([job], self._map_error(cause, what, batch=len(jobs)))
            return
        self._resolve(outcomes)

    def _fail(self, jobs: list[_Job], exc: BaseException) -> None:
        self._resolve([(job, None, exc) for job in jobs])

    @staticmethod
    def _resolve(outcomes: list[_Outcome]) -> None:
        by_loop: dict[
            asyncio.AbstractEventLoop,
            list[tuple[asyncio.Future[Any], object, BaseException | None]],
        ] = {}
        for job, value, exc in outcomes:
            by_loop.setdefault(job.loop, []).append((job.future, value, exc))
        for loop, items in by_loop.items():
            # RuntimeError: the caller's loop is closed; nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, items)


def _why_not_openable(path: str) -> str:
    """What is wrong with a database path SQLite could not open, in words a user can act on."""
    target = Path(path)
    parent = target.parent
    if target.is_dir():
        return "the path is a directory; name a file (server.database or --db)"
    if not parent.exists():
        return f"the directory {str(parent)!r} does not exist"
    if not parent.is_dir():
        return f"{str(parent)!r} is not a directory"
    if not target.exists() and not os.access(parent, os.W_OK | os.X_OK):
        return f"no permission to create a file in {str(parent)!r}"
    if target.exists() and not os.access(target, os.R_OK | os.W_OK):
        return "no permission to read and write the file"
    return "the operating system refused it"


# ---------------------------------------------------------------------- row helpers


def _current_version(conn: sqlite3.Connection, conversation_id: str) -> int:
    row = conn.execute(
        "SELECT version FROM conversations WHERE conversation_id = ?", (conversation_id,)
    ).fetchone()
    return 0 if row is None else int(row[0])


def _find_input(
    conn: sqlite3.Connection, conversation_id: str, input_id: str
) -> InputCommit | None:
    row = conn.execute(
        "SELECT committed_version, result, created_at_ms FROM input_commits "
        "WHERE conversation_id = ? AND input_id = ?",
        (conversation_id, input_id),
    ).fetchone()
    if row is None:
        return None
    return InputCommit(
        conversation_id=conversation_id,
        input_id=input_id,
        committed_version=row[0],
        result=row[1],
        created_at_ms=row[2],
    )


def _call_from_row(row: Sequence[Any]) -> LLMCallRecord:
    return LLMCallRecord(**dict(zip(_CALL_FIELDS, row, strict=True)))


def _get_call(conn: sqlite3.Connection, call_id: str) -> LLMCallRecord | None:
    row = conn.execute(f"{_CALL_SELECT} WHERE call_id = ?", (call_id,)).fetchone()
    return None if row is None else _call_from_row(row)


def _operation_from_row(row: Sequence[Any]) -> ClientOperationRecord:
    values = dict(zip(_OP_FIELDS, row, strict=True))
    values["side_effects"] = bool(values["side_effects"])
    return ClientOperationRecord(**values)


def _get_operation(conn: sqlite3.Connection, operation_id: str) -> ClientOperationRecord | None:
    row = conn.execute(f"{_OP_SELECT} WHERE operation_id = ?", (operation_id,)).fetchone()
    return None if row is None else _operation_from_row(row)


def _mismatch(path: str, kind: str, key: str, fields: Sequence[str]) -> RecordMismatchError:
    return RecordMismatchError(
        path,
        f"{kind} {key!r} was saved before with a different {', '.join(fields)}",
        "these fields never change once saved; nothing was written",
    )


def _upsert_call(conn: sqlite3.Connection, path: str, record: LLMCallRecord) -> SaveResult:
    stored = _get_call(conn, record.call_id)
    if stored is None:
        conn.execute(_CALL_INSERT, msgspec.structs.astuple(record))
        return SaveResult(outcome="inserted")
    differ = [f for f in _CALL_IMMUTABLE if getattr(stored, f) != getattr(record, f)]
    if differ:
        raise _mismatch(path, "llm call", record.call_id, differ)
    if msgspec.structs.replace(record, created_at_ms=stored.created_at_ms) == stored:
        return SaveResult(outcome="unchanged")
    if stored.status == "committed":
        return SaveResult(
            outcome="ignored",
            reason=f"llm call {record.call_id!r} is committed; its record is final",
        )
    conn.execute(_CALL_UPDATE, (*(getattr(record, f) for f in _CALL_MUTABLE), record.call_id))
    return SaveResult(outcome="updated")


def _upsert_operation(
    conn: sqlite3.Connection, path: str, record: ClientOperationRecord, now: int
) -> SaveResult:
    stored = _get_operation(conn, record.operation_id)
    if stored is None:
        conn.execute(_OP_INSERT, (*msgspec.structs.astuple(record), now))
        return SaveResult(outcome="inserted")
    differ = [f for f in _OP_IMMUTABLE if getattr(stored, f) != getattr(record, f)]
    if differ:
        raise _mismatch(path, "client operation", record.operation_id, differ)
    if stored.status == "completed":
        if record.status == "completed" and record.result == stored.result:
            return SaveResult(outcome="unchanged")
        return SaveResult(
            outcome="ignored",
            reason=f"client operation {record.operation_id!r} is completed; "
            "its result is kept forever",
        )
    if record == stored:
        return SaveResult(outcome="unchanged")
    conn.execute(
        "UPDATE client_operations SET status = ?, result = ?, updated_at_ms = ? "
        "WHERE operation_id = ?",
        (record.status, record.result, record.updated_at_ms, record.operation_id),
    )
    return SaveResult(outcome="updated")


if TYPE_CHECKING:

    def _conforms(store: SQLiteStore) -> Store:  # mypy checks SQLiteStore against the protocol
        return store
