"""SQLiteStore: the Store protocol over one SQLite file.

The facade checks arguments on the caller's thread, builds the job (writes, sql/jobs.py) or the
read (sql/rows.py), and hands it to the writer thread (writer.py) or to the reads (reads.py).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from ..api import (
    AccessTokenRecord,
    CallOwner,
    ClientOperationRecord,
    CommitResult,
    ConversationOverview,
    ConversationRecord,
    ConversationSummary,
    FirstLook,
    InputCommit,
    LLMCallRecord,
    ProcessLease,
    Reservation,
    ReservationTotals,
    RunOutcomeRecord,
    RunRecord,
    SaveResult,
    SessionTokenRecord,
    SignInRecord,
    Store,
    SubagentLink,
    TokenUsage,
    TurnMark,
)
from ..errors import StoreClosedError
from ..price_spans import PriceSpan
from ..sql import activity, jobs, leases, links, rows, sign_in, tokens
from . import binding
from .reads import INLINE_MESSAGES, Reads
from .writer import Synchronous, Writer, WriterStats

T = TypeVar("T")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


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
        """Prefer `await SQLiteStore.open(...)`: the constructor does no I/O; `start()` does.

        `clock` gives the time in ms stored with each write (default: the wall clock)."""
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
        binding.install()
        self.path = os.path.abspath(os.fspath(path))
        self.synchronous: Synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self._clock = clock or _now_ms
        self._closed = False  # no new calls
        self._started = False
        self._writer = Writer(
            self.path,
            synchronous=synchronous,
            busy_timeout_ms=busy_timeout_ms,
            max_batch=max_batch,
            max_size_bytes=max_size_bytes,
        )
        self._reads = Reads(self.path, busy_timeout_ms=busy_timeout_ms, threads=readers)

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
        try:
            await self._writer.start()
        except BaseException:
            self._closed = True
            self._reads.abandon()
            raise

    async def close(self) -> None:
        """Finish the queued writes, then close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._writer.stop()
        await self._reads.close()

    async def __aenter__(self) -> SQLiteStore:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def stats(self) -> WriterStats:
        return self._writer.stats()

    # ------------------------------------------------------------------ reads

    @property
    def replicas(self) -> None:
        """None: processes on one SQLite file share it; its version check decides."""
        return None

    async def load(self, conversation_id: str) -> ConversationRecord | None:
        path = self.path
        return await self._read(
            lambda conn: rows.load_conversation(conn, path, conversation_id),
            f"loading conversation {conversation_id!r}",
            snapshot=True,
            inline=lambda conn: rows.load_conversation(
                conn, path, conversation_id, INLINE_MESSAGES
            ),
        )

    async def head(self, conversation_id: str) -> ConversationSummary | None:
        def read(conn: sqlite3.Connection) -> ConversationSummary | None:
            return rows.head(conn, conversation_id)

        return await self._read(read, f"reading conversation {conversation_id!r}", inline=read)

    async def first_look(self, conversation_id: str) -> FirstLook:
        def read(conn: sqlite3.Connection) -> FirstLook:
            return rows.first_look(conn, conversation_id)

        return await self._read(read, f"reading conversation {conversation_id!r}", inline=read)

    async def find_input_commit(self, conversation_id: str, input_id: str) -> InputCommit | None:
        def read(conn: sqlite3.Connection) -> InputCommit | None:
            return rows.find_input(conn, conversation_id, input_id)

        return await self._read(read, f"reading input {input_id!r}", inline=read)

    async def get_llm_call(self, call_id: str) -> LLMCallRecord | None:
        return await self._read(
            lambda conn: rows.get_call(conn, call_id), f"reading llm call {call_id!r}"
        )

    async def get_client_operation(self, operation_id: str) -> ClientOperationRecord | None:
        return await self._read(
            lambda conn: rows.get_operation(conn, operation_id),
            f"reading client operation {operation_id!r}",
        )

    async def list_recent_llm_calls(
        self, limit: int = 50, *, person: str | None = None
    ) -> tuple[LLMCallRecord, ...]:
        return await self._read(
            lambda conn: activity.recent_calls(conn, limit, person), "listing llm calls"
        )

    async def list_price_spans(self, limit: int = 200) -> tuple[PriceSpan, ...]:
        return await self._read(lambda conn: activity.price_spans(conn, limit), "listing prices")

    async def list_conversations(self, limit: int = 50) -> tuple[ConversationSummary, ...]:
        return await self._read(
            lambda conn: rows.list_conversations(conn, limit), "listing conversations"
        )

    async def list_recent_run_outcomes(
        self, limit: int = 50, *, owner: str | None = None
    ) -> tuple[RunOutcomeRecord, ...]:
        return await self._read(
            lambda conn: activity.recent_outcomes(conn, limit, owner), "listing run outcomes"
        )

    async def list_conversation_overviews(
        self, limit: int = 50, *, owner: str | None = None
    ) -> tuple[ConversationOverview, ...]:
        return await self._read(
            lambda conn: activity.overviews(conn, limit, owner),
            "listing conversations",
            snapshot=True,
        )

    async def conversation_overview(self, conversation_id: str) -> ConversationOverview | None:
        return await self._read(
            lambda conn: activity.overview(conn, conversation_id),
            f"reading conversation {conversation_id!r}",
            snapshot=True,
        )

    async def list_conversation_llm_calls(
        self, conversation_id: str, limit: int = 200
    ) -> tuple[LLMCallRecord, ...]:
        return await self._read(
            lambda conn: activity.conversation_calls(conn, conversation_id, limit),
            f"listing llm calls of {conversation_id!r}",
        )

    async def list_conversation_run_outcomes(
        self, conversation_id: str, limit: int = 200
    ) -> tuple[RunOutcomeRecord, ...]:
        return await self._read(
            lambda conn: activity.conversation_outcomes(conn, conversation_id, limit),
            f"listing run outcomes of {conversation_id!r}",
        )

    async def find_run(self, request_id: str) -> RunRecord | None:
        def read(conn: sqlite3.Connection) -> RunRecord | None:
            return rows.find_run(conn, request_id)

        return await self._read(read, f"reading run {request_id!r}", inline=read)

    async def save_subagent_link(self, link: SubagentLink) -> SaveResult:
        return await self._write(
            lambda conn: links.save_link(conn, link),
            f"saving the helper link of {link.child_conversation_id!r}",
            durable=False,
        )

    async def find_subagent_link(
        self, parent_conversation_id: str, tool_call_id: str
    ) -> SubagentLink | None:
        def read(conn: sqlite3.Connection) -> SubagentLink | None:
            return links.find_link(conn, parent_conversation_id, tool_call_id)

        return await self._read(read, f"reading a helper link of {parent_conversation_id!r}")

    async def list_subagent_links(self, parent_conversation_id: str) -> tuple[SubagentLink, ...]:
        return await self._read(
            lambda conn: links.list_links(conn, parent_conversation_id),
            f"listing the helpers of {parent_conversation_id!r}",
        )

    async def note_clone(self, conversation_id: str, source: str, at_ms: int) -> SaveResult:
        return await self._write(
            lambda conn: links.note_clone(conn, conversation_id, source, at_ms),
            f"noting {conversation_id!r} as a clone",
            durable=False,
        )

    async def clone_source(self, conversation_id: str) -> str | None:
        # Asked for every conversation new to this server: a point read, on the event loop's
        # thread like `head` (a reader thread's hop cost more than the read, issue 28).
        def read(conn: sqlite3.Connection) -> str | None:
            return links.clone_source(conn, conversation_id)

        return await self._read(read, f"reading the clone note of {conversation_id!r}", inline=read)

    async def list_turn_marks(self, conversation_id: str) -> tuple[TurnMark, ...]:
        def read(conn: sqlite3.Connection) -> tuple[TurnMark, ...]:
            return rows.list_turn_marks(conn, conversation_id)

        return await self._read(read, f"reading turn marks of {conversation_id!r}", inline=read)

    async def list_stream_diagnostics(self, call_id: str) -> tuple[tuple[int, bytes], ...]:
        """Debugging aid only: never feed these back into a conversation's messages."""
        return await self._read(
            lambda conn: rows.list_stream_diagnostics(conn, call_id),
            f"reading diagnostics of {call_id!r}",
        )

    async def find_access_token(self, secret_hash: str) -> AccessTokenRecord | None:
        def read(conn: sqlite3.Connection) -> AccessTokenRecord | None:
            return tokens.find(conn, secret_hash)

        return await self._read(read, "looking up a token", inline=read)

    async def get_access_token(self, token_id: str) -> AccessTokenRecord | None:
        def read(conn: sqlite3.Connection) -> AccessTokenRecord | None:
            return tokens.get(conn, token_id)

        return await self._read(read, f"reading token {token_id!r}", inline=read)

    async def list_access_tokens(
        self, *, include_revoked: bool = False
    ) -> tuple[AccessTokenRecord, ...]:
        return await self._read(
            lambda conn: tokens.listing(conn, include_revoked), "listing tokens"
        )

    async def token_usage(
        self, since_ms: int, until_ms: int, token_id: str | None = None
    ) -> tuple[TokenUsage, ...]:
        return await self._read(
            lambda conn: tokens.usage(conn, since_ms, until_ms, token_id),
            "summing the usage of tokens",
        )

    async def token_spend(self, token_id: str, since_ms: int, until_ms: int) -> float:
        # On a reader thread, not inline: it scans the month's index entries of the token.
        return await self._read(
            lambda conn: tokens.spend(conn, token_id, since_ms, until_ms),
            f"summing the spend of token {token_id!r}",
        )

    async def get_server_setting(self, name: str) -> str | None:
        def read(conn: sqlite3.Connection) -> str | None:
            return tokens.get_setting(conn, name)

        return await self._read(read, f"reading setting {name!r}", inline=read)

    # ------------------------------------------------------------------ writes

    async def set_server_setting(self, name: str, value: str, at_ms: int) -> None:
        await self._write(
            lambda conn: tokens.set_setting(conn, name, value, at_ms), f"setting {name!r}"
        )

    async def rotate_access_token(
        self, name: str, token_id: str, secret_hash: str, at_ms: int
    ) -> AccessTokenRecord | None:
        return await self._write(
            lambda conn: tokens.rotate(conn, name, token_id, secret_hash, at_ms),
            f"rotating token {name!r}",
        )

    async def add_access_token(self, record: AccessTokenRecord) -> SaveResult:
        return await self._write(
            lambda conn: tokens.add(conn, record), f"adding token {record.name!r}"
        )

    async def revoke_access_token(self, name: str, at_ms: int) -> AccessTokenRecord | None:
        return await self._write(
            lambda conn: tokens.revoke(conn, name, at_ms), f"revoking token {name!r}"
        )

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
        owner: str | None = None,
        reserve: Reservation | None = None,
        turn_marks: Sequence[TurnMark] | None = None,
        unchanged_marks: int = 0,
        run_outcome: RunOutcomeRecord | None = None,
    ) -> CommitResult:
        if expected_version < 0 or expected_message_count < 0:
            raise ValueError("expected_version and expected_message_count must be >= 0")
        messages = tuple(append_messages)
        for value in (state, result, *messages):
            if not isinstance(value, bytes | bytearray | memoryview):
                raise TypeError(f"state, messages and result are bytes, not {type(value)!r}")
        calls = tuple(llm_calls)
        operations = tuple(client_operations)
        marks = None if turn_marks is None else tuple(turn_marks)
        path = self.path
        clock = self._clock

        def job(conn: sqlite3.Connection) -> CommitResult:
            return jobs.commit_input(
                conn,
                path,
                clock(),
                conversation_id,
                input_id=input_id,
                expected_version=expected_version,
                state=state,
                messages=messages,
                expected_message_count=expected_message_count,
                result=result,
                calls=calls,
                operations=operations,
                owner=owner,
                reserve=reserve,
                turn_marks=marks,
                unchanged_marks=unchanged_marks,
                run_outcome=run_outcome,
            )

        # A non-durable commit may run on this thread (sqlite/writer.py, "Inline").
        size = None
        if not durable:
            size = len(state) + len(result) + sum(len(m) for m in messages)
            size += sum(len(c.request) + len(c.prompt_breakdown or b"") for c in calls)
        what = f"committing input {input_id!r} to {conversation_id!r}"
        return await self._write(job, what, durable=durable, inline_bytes=size)

    async def save_run(self, record: RunRecord) -> SaveResult:
        return await self._write(
            lambda conn: jobs.save_run(conn, record),
            f"saving run {record.request_id!r}",
            durable=False,
        )

    async def save_run_outcome(self, record: RunOutcomeRecord) -> SaveResult:
        return await self._write(
            lambda conn: activity.save_outcome(conn, record),
            f"saving the outcome of run {record.request_id!r}",
            durable=False,
        )

    async def save_turn_marks(
        self, conversation_id: str, marks: Sequence[TurnMark], *, unchanged: int = 0
    ) -> None:
        marks = tuple(marks)
        keep = min(max(unchanged, 0), len(marks))
        clock = self._clock
        await self._write(
            lambda conn: jobs.save_turn_marks(conn, conversation_id, marks, keep, clock),
            f"saving turn marks of {conversation_id!r}",
            durable=False,
        )

    async def save_llm_call(self, record: LLMCallRecord) -> SaveResult:
        path = self.path
        return await self._write(
            lambda conn: jobs.upsert_call(conn, path, record), f"saving llm call {record.call_id!r}"
        )

    async def reserve_llm_call(
        self, record: LLMCallRecord, reserve: Reservation
    ) -> ReservationTotals:
        path = self.path
        return await self._write(
            lambda conn: jobs.reserve_call(conn, path, record, reserve),
            f"reserving for call {record.call_id!r}",
        )

    async def save_client_operation(self, record: ClientOperationRecord) -> SaveResult:
        path = self.path
        clock = self._clock
        return await self._write(
            lambda conn: jobs.upsert_operation(conn, path, record, clock()),
            f"saving client operation {record.operation_id!r}",
        )

    # ------------------------------------------------------------------ process leases

    async def save_lease(self, lease: ProcessLease) -> None:
        await self._write(
            lambda conn: leases.save_lease(conn, lease),
            f"renewing the lease of process {lease.process_id!r}",
            durable=False,
        )

    async def planned_call_owners(self) -> tuple[CallOwner, ...]:
        return await self._read(leases.planned_call_owners, "reading the owners of planned calls")

    async def take_planned_calls(
        self, owner: str, owners: Sequence[str | None]
    ) -> tuple[LLMCallRecord, ...]:
        names = tuple(owners)
        return await self._write(
            lambda conn: leases.take_planned_calls(conn, owner, names),
            "taking the planned calls of stopped processes",
        )

    async def prune_leases(self, expired_before_ms: int) -> int:
        return await self._write(
            lambda conn: leases.prune_leases(conn, expired_before_ms),
            "pruning old process leases",
            durable=False,
        )

    async def append_stream_diagnostics(
        self, call_id: str, events: Sequence[tuple[int, bytes]]
    ) -> None:
        """Debugging aid: raw stream events by index; an index already stored is kept."""
        prepared = [(int(i), bytes(e)) for i, e in events]
        await self._write(
            lambda conn: jobs.append_stream_diagnostics(conn, call_id, prepared),
            f"saving diagnostics of {call_id!r}",
        )

    async def set_size_limit(self, max_bytes: int | None) -> int:
        """Cap the database size (PRAGMA max_page_count); None lifts the cap.

        Commits that would grow the file beyond it fail with StoreFullError. The cap cannot go
        below the current size. Returns the effective limit in bytes.
        """
        writer = self._writer
        return await self._write(
            lambda conn: writer.apply_size_limit(conn, max_bytes), "setting the size limit"
        )

    # ------------------------------------------------------------------ hand-over

    def _check_open(self) -> None:
        if self._closed or self._writer.stopped or not self._started:
            state = "not started (use SQLiteStore.open)" if not self._started else "closed"
            raise StoreClosedError(self.path, f"store is {state}")

    # ------------------------------------------------------------------ signing in (0010)

    async def server_secret(self, name: str, candidate: str, at_ms: int) -> str:
        return await self._write(
            lambda conn: sign_in.server_secret(conn, name, candidate, at_ms),
            f"reading the server secret {name!r}",
        )

    async def record_sign_in(self, record: SignInRecord) -> SaveResult:
        return await self._write(
            lambda conn: sign_in.record_sign_in(conn, record), "recording a sign-in"
        )

    async def claim_sign_in(
        self, login_id: str, challenge: str, at_ms: int, not_before_ms: int
    ) -> SignInRecord | None:
        return await self._write(
            lambda conn: sign_in.claim_sign_in(conn, login_id, challenge, at_ms, not_before_ms),
            "claiming a sign-in",
        )

    async def add_session_token(self, record: SessionTokenRecord) -> SaveResult:
        return await self._write(
            lambda conn: sign_in.add_session_token(conn, record), "storing a session token"
        )

    async def find_session_token(self, token_hash: str, now_ms: int) -> SessionTokenRecord | None:
        return await self._read(
            lambda conn: sign_in.find_session_token(conn, token_hash, now_ms),
            "looking up a session token",
        )

    async def list_session_tokens(self, now_ms: int) -> tuple[SessionTokenRecord, ...]:
        return await self._read(
            lambda conn: sign_in.list_session_tokens(conn, now_ms), "listing session tokens"
        )

    async def _write(
        self,
        fn: Callable[[sqlite3.Connection], T],
        what: str,
        *,
        durable: bool = True,
        inline_bytes: int | None = None,
    ) -> T:
        self._check_open()
        return await self._writer.run(fn, what, durable=durable, inline_bytes=inline_bytes)

    async def _read(
        self,
        fn: Callable[[sqlite3.Connection], T],
        what: str,
        *,
        snapshot: bool = False,
        inline: Callable[[sqlite3.Connection], T] | None = None,
    ) -> T:
        self._check_open()
        return await self._reads.run(fn, what, snapshot=snapshot, inline=inline)


if TYPE_CHECKING:

    def _conforms(store: SQLiteStore) -> Store:  # mypy checks SQLiteStore against the protocol
        return store
