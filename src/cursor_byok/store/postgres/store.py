"""PostgresStore: the Store protocol over one PostgreSQL database (psycopg 3).

Every call takes a connection from a small pool (pool.py), runs one transaction on a worker
thread and gives the connection back. The SQL is the one both backends run (store/sql/), so the
compare-and-set, dedupe and record rules are one copy: `UPDATE ... WHERE version = ? AND
message_count = ?` takes the row lock, a concurrent committer waits for it and then finds the
version moved (a conflict) or its own input id recorded (a duplicate). The replicas' claims
and appends travel by LISTEN/NOTIFY and advisory locks (signals.py, replicas.py). Why psycopg
and not asyncpg: docs/store.md ("PostgreSQL").

Durability: a commit returns once PostgreSQL has flushed it (synchronous_commit as the server
has it); `durable=False` and the writes the protocol calls not durable on their own run with
`SET LOCAL synchronous_commit = off`: they survive a crash of this process at once, and a crash
of the database server from its next WAL flush (a fraction of a second) on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from ..api import (
    AccessTokenRecord,
    CallOwner,
    ClientOperationRecord,
    CommitResult,
    ConversationClaims,
    ConversationOverview,
    ConversationRecord,
    ConversationSummary,
    InputCommit,
    LLMCallRecord,
    ProcessLease,
    Replicas,
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
from ..sql import Conn, activity, jobs, leases, links, rows, sign_in, tokens
from .clones import CloneNotes
from .errors import display_url
from .pool import Pool
from .replicas import Holds, Watcher
from .signals import ReplicaSignals
from .size import SizeCap

T = TypeVar("T")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class PostgresStore(ReplicaSignals, CloneNotes):
    """The Store protocol over PostgreSQL. Create with `await PostgresStore.open(url)`."""

    def __init__(
        self,
        url: str,
        *,
        connections: int = 4,
        connect_timeout_s: float = 10.0,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.url = url
        self.path = display_url(url)  # the name in errors: never the password
        self._clock = clock or _now_ms
        self._closed = False
        self._started = False
        self._pool = Pool(
            url, self.path, connections=connections, connect_timeout_s=connect_timeout_s
        )
        self.schema_version = 0
        self._watchers: list[Watcher] = []
        # The holds of this process's runs: one connection, one thread (session-level advisory
        # locks belong to the connection that took them).
        self._holds = Holds(self._pool)
        self._holds_executor = ThreadPoolExecutor(1, thread_name_prefix="store-pg-holds")
        self.size_cap = SizeCap(self.path)  # server.database_max_mib (size.py)

    # ------------------------------------------------------------------ life cycle

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        connections: int = 4,
        connect_timeout_s: float = 10.0,
        clock: Callable[[], int] | None = None,
    ) -> PostgresStore:
        """Connect and migrate. Raises StoreIOError (cannot connect), StoreSchemaError."""
        store = cls(url, connections=connections, connect_timeout_s=connect_timeout_s, clock=clock)
        await store.start()
        return store

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        try:
            self.schema_version = await self._pool.start()
        except BaseException:
            self._closed = True
            await self._pool.close()
            raise

    async def close(self) -> None:
        """Wait for the calls under way, then close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self.size_cap.stop()
        for watcher in self._watchers:
            await asyncio.to_thread(watcher.stop)
        await asyncio.get_running_loop().run_in_executor(None, self._holds_executor.shutdown, True)
        self._holds.close()
        await self._pool.close()

    async def __aenter__(self) -> PostgresStore:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ the transactions

    def _check_open(self) -> None:
        if self._closed or not self._started:
            state = "not started (use PostgresStore.open)" if not self._started else "closed"
            raise StoreClosedError(self.path, f"store is {state}")

    # ------------------------------------------------------------------ signing in (0010)

    async def server_secret(self, name: str, candidate: str, at_ms: int) -> str:
        return await self._run(
            lambda conn: sign_in.server_secret(conn, name, candidate, at_ms),
            f"reading the server secret {name!r}",
            write=True,
        )

    async def record_sign_in(self, record: SignInRecord) -> SaveResult:
        return await self._run(
            lambda conn: sign_in.record_sign_in(conn, record), "recording a sign-in", write=True
        )

    async def claim_sign_in(
        self, login_id: str, challenge: str, at_ms: int, not_before_ms: int
    ) -> SignInRecord | None:
        return await self._run(
            lambda conn: sign_in.claim_sign_in(conn, login_id, challenge, at_ms, not_before_ms),
            "claiming a sign-in",
            write=True,
        )

    async def add_session_token(self, record: SessionTokenRecord) -> SaveResult:
        return await self._run(
            lambda conn: sign_in.add_session_token(conn, record),
            "storing a session token",
            write=True,
        )

    async def find_session_token(self, token_hash: str, now_ms: int) -> SessionTokenRecord | None:
        return await self._run(
            lambda conn: sign_in.find_session_token(conn, token_hash, now_ms),
            "looking up a session token",
            write=False,
        )

    async def list_session_tokens(self, now_ms: int) -> tuple[SessionTokenRecord, ...]:
        return await self._run(
            lambda conn: sign_in.list_session_tokens(conn, now_ms),
            "listing session tokens",
            write=False,
        )

    async def _run(
        self,
        fn: Callable[[Conn], T],
        what: str,
        *,
        write: bool,
        durable: bool = True,
        snapshot: bool = False,
        capped: bool = False,
    ) -> T:
        self._check_open()
        if capped:  # what grows a conversation: refused while at the size cap (size.py)
            self.size_cap.check(what)
        return await self._pool.run(fn, what, write=write, durable=durable, snapshot=snapshot)

    async def set_size_limit(self, max_bytes: int | None) -> int:
        """Cap the database's size (size.py: polled; past it, writes that could grow it fail
        with StoreFullError); None lifts the cap. Returns the cap in bytes (0: none)."""
        await self.size_cap.start(max_bytes, self.database_size)
        return max_bytes or 0

    async def database_size(self) -> int:
        """The database's size on disk (pg_database_size), in bytes."""

        def measure(conn: Conn) -> int:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
            return int(row[0])

        return await self._run(measure, "reading the database's size", write=False)

    # ------------------------------------------------------------------ reads

    async def find_subagent_link(
        self, parent_conversation_id: str, tool_call_id: str
    ) -> SubagentLink | None:
        return await self._run(
            lambda conn: links.find_link(conn, parent_conversation_id, tool_call_id),
            f"reading a helper link of {parent_conversation_id!r}",
            write=False,
        )

    async def list_subagent_links(self, parent_conversation_id: str) -> tuple[SubagentLink, ...]:
        return await self._run(
            lambda conn: links.list_links(conn, parent_conversation_id),
            f"listing the helpers of {parent_conversation_id!r}",
            write=False,
        )

    async def find_access_token(self, secret_hash: str) -> AccessTokenRecord | None:
        return await self._run(
            lambda conn: tokens.find(conn, secret_hash), "looking up a token", write=False
        )

    async def get_access_token(self, token_id: str) -> AccessTokenRecord | None:
        return await self._run(
            lambda conn: tokens.get(conn, token_id), f"reading token {token_id!r}", write=False
        )

    async def list_access_tokens(
        self, *, include_revoked: bool = False
    ) -> tuple[AccessTokenRecord, ...]:
        return await self._run(
            lambda conn: tokens.listing(conn, include_revoked), "listing tokens", write=False
        )

    async def token_usage(
        self, since_ms: int, until_ms: int, token_id: str | None = None
    ) -> tuple[TokenUsage, ...]:
        return await self._run(
            lambda conn: tokens.usage(conn, since_ms, until_ms, token_id),
            "summing the usage of tokens",
            write=False,
        )

    async def token_spend(self, token_id: str, since_ms: int, until_ms: int) -> float:
        return await self._run(
            lambda conn: tokens.spend(conn, token_id, since_ms, until_ms),
            f"summing the spend of token {token_id!r}",
            write=False,
        )

    async def get_server_setting(self, name: str) -> str | None:
        return await self._run(
            lambda conn: tokens.get_setting(conn, name), f"reading setting {name!r}", write=False
        )

    async def set_server_setting(self, name: str, value: str, at_ms: int) -> None:
        await self._run(
            lambda conn: tokens.set_setting(conn, name, value, at_ms),
            f"setting {name!r}",
            write=True,
        )

    @property
    def replicas(self) -> Replicas:
        """Replicas on one PostgreSQL share claims, holds and appends (signals.py)."""
        return self

    async def load(self, conversation_id: str) -> ConversationRecord | None:
        path = self.path
        return await self._run(
            lambda conn: rows.load_conversation(conn, path, conversation_id),
            f"loading conversation {conversation_id!r}",
            write=False,
            snapshot=True,
        )

    async def head(self, conversation_id: str) -> ConversationSummary | None:
        return await self._run(
            lambda conn: rows.head(conn, conversation_id),
            f"reading conversation {conversation_id!r}",
            write=False,
        )

    async def find_input_commit(self, conversation_id: str, input_id: str) -> InputCommit | None:
        return await self._run(
            lambda conn: rows.find_input(conn, conversation_id, input_id),
            f"reading input {input_id!r}",
            write=False,
        )

    async def get_llm_call(self, call_id: str) -> LLMCallRecord | None:
        return await self._run(
            lambda conn: rows.get_call(conn, call_id), f"reading llm call {call_id!r}", write=False
        )

    async def get_client_operation(self, operation_id: str) -> ClientOperationRecord | None:
        return await self._run(
            lambda conn: rows.get_operation(conn, operation_id),
            f"reading client operation {operation_id!r}",
            write=False,
        )

    async def list_recent_llm_calls(
        self, limit: int = 50, *, person: str | None = None
    ) -> tuple[LLMCallRecord, ...]:
        return await self._run(
            lambda conn: activity.recent_calls(conn, limit, person),
            "listing llm calls",
            write=False,
        )

    async def list_price_spans(self, limit: int = 200) -> tuple[PriceSpan, ...]:
        return await self._run(
            lambda conn: activity.price_spans(conn, limit), "listing prices", write=False
        )

    async def list_conversations(self, limit: int = 50) -> tuple[ConversationSummary, ...]:
        return await self._run(
            lambda conn: rows.list_conversations(conn, limit), "listing conversations", write=False
        )

    async def list_recent_run_outcomes(
        self, limit: int = 50, *, owner: str | None = None
    ) -> tuple[RunOutcomeRecord, ...]:
        return await self._run(
            lambda conn: activity.recent_outcomes(conn, limit, owner), "listing runs", write=False
        )

    async def list_conversation_overviews(
        self, limit: int = 50, *, owner: str | None = None
    ) -> tuple[ConversationOverview, ...]:
        overviews = activity.overviews
        return await self._run(
            lambda conn: overviews(conn, limit, owner), "listing chats", write=False, snapshot=True
        )

    async def conversation_overview(self, conversation_id: str) -> ConversationOverview | None:
        return await self._run(
            lambda conn: activity.overview(conn, conversation_id),
            f"reading conversation {conversation_id!r}",
            write=False,
            snapshot=True,
        )

    async def list_conversation_llm_calls(
        self, conversation_id: str, limit: int = 200
    ) -> tuple[LLMCallRecord, ...]:
        return await self._run(
            lambda conn: activity.conversation_calls(conn, conversation_id, limit),
            f"listing llm calls of {conversation_id!r}",
            write=False,
        )

    async def list_conversation_run_outcomes(
        self, conversation_id: str, limit: int = 200
    ) -> tuple[RunOutcomeRecord, ...]:
        return await self._run(
            lambda conn: activity.conversation_outcomes(conn, conversation_id, limit),
            f"listing run outcomes of {conversation_id!r}",
            write=False,
        )

    async def find_run(self, request_id: str) -> RunRecord | None:
        return await self._run(
            lambda conn: rows.find_run(conn, request_id), f"reading run {request_id!r}", write=False
        )

    async def list_turn_marks(self, conversation_id: str) -> tuple[TurnMark, ...]:
        return await self._run(
            lambda conn: rows.list_turn_marks(conn, conversation_id),
            f"reading turn marks of {conversation_id!r}",
            write=False,
        )

    async def list_stream_diagnostics(self, call_id: str) -> tuple[tuple[int, bytes], ...]:
        """Debugging aid only: never feed these back into a conversation's messages."""
        return await self._run(
            lambda conn: rows.list_stream_diagnostics(conn, call_id),
            f"reading diagnostics of {call_id!r}",
            write=False,
        )

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
        owner: str | None = None,
        reserve: Reservation | None = None,
        turn_marks: Sequence[TurnMark] | None = None,
        unchanged_marks: int = 0,
        run_outcome: RunOutcomeRecord | None = None,
    ) -> CommitResult:
        if expected_version < 0 or expected_message_count < 0:
            raise ValueError("expected_version and expected_message_count must be >= 0")
        messages = tuple(bytes(m) for m in append_messages)
        for value in (state, result, *append_messages):
            if not isinstance(value, bytes | bytearray | memoryview):
                raise TypeError(f"state, messages and result are bytes, not {type(value)!r}")
        calls = tuple(llm_calls)
        operations = tuple(client_operations)
        marks = None if turn_marks is None else tuple(turn_marks)
        path, clock = self.path, self._clock

        def job(conn: Conn) -> CommitResult:
            return jobs.commit_input(
                conn,
                path,
                clock(),
                conversation_id,
                input_id=input_id,
                expected_version=expected_version,
                state=bytes(state),
                messages=messages,
                expected_message_count=expected_message_count,
                result=bytes(result),
                calls=calls,
                operations=operations,
                owner=owner,
                reserve=reserve,
                turn_marks=marks,
                unchanged_marks=unchanged_marks,
                run_outcome=run_outcome,
            )

        what = f"committing input {input_id!r} to {conversation_id!r}"
        return await self._run(job, what, write=True, durable=durable, capped=True)

    async def save_subagent_link(self, link: SubagentLink) -> SaveResult:
        return await self._run(
            lambda conn: links.save_link(conn, link),
            f"saving the helper link of {link.child_conversation_id!r}",
            write=True,
            durable=False,
        )

    async def add_access_token(self, record: AccessTokenRecord) -> SaveResult:
        # Two adds of one name at once: the partial unique index refuses the second (a storage
        # error naming it), the check in tokens.add answers every other case.
        return await self._run(
            lambda conn: tokens.add(conn, record), f"adding token {record.name!r}", write=True
        )

    async def revoke_access_token(self, name: str, at_ms: int) -> AccessTokenRecord | None:
        return await self._run(
            lambda conn: tokens.revoke(conn, name, at_ms), f"revoking token {name!r}", write=True
        )

    async def rotate_access_token(
        self, name: str, token_id: str, secret_hash: str, at_ms: int
    ) -> AccessTokenRecord | None:
        return await self._run(
            lambda conn: tokens.rotate(conn, name, token_id, secret_hash, at_ms),
            f"rotating token {name!r}",
            write=True,
        )

    async def save_run(self, record: RunRecord) -> SaveResult:
        return await self._run(
            lambda conn: jobs.save_run(conn, record),
            f"saving run {record.request_id!r}",
            write=True,
            capped=True,
            durable=False,
        )

    async def save_run_outcome(self, record: RunOutcomeRecord) -> SaveResult:
        return await self._run(
            lambda conn: activity.save_outcome(conn, record),
            f"saving the outcome of run {record.request_id!r}",
            write=True,
            durable=False,
        )

    async def save_turn_marks(
        self, conversation_id: str, marks: Sequence[TurnMark], *, unchanged: int = 0
    ) -> None:
        marks = tuple(marks)
        keep = min(max(unchanged, 0), len(marks))
        clock = self._clock
        await self._run(
            lambda conn: jobs.save_turn_marks(conn, conversation_id, marks, keep, clock),
            f"saving turn marks of {conversation_id!r}",
            write=True,
            durable=False,
        )

    async def save_llm_call(self, record: LLMCallRecord) -> SaveResult:
        path = self.path
        return await self._run(
            lambda conn: jobs.upsert_call(conn, path, record),
            f"saving llm call {record.call_id!r}",
            write=True,
            capped=True,
        )

    async def reserve_llm_call(
        self, record: LLMCallRecord, reserve: Reservation
    ) -> ReservationTotals:
        path = self.path
        return await self._run(
            lambda conn: jobs.reserve_call(conn, path, record, reserve),
            f"reserving for call {record.call_id!r}",
            write=True,
        )

    async def save_client_operation(self, record: ClientOperationRecord) -> SaveResult:
        path = self.path
        clock = self._clock
        return await self._run(
            lambda conn: jobs.upsert_operation(conn, path, record, clock()),
            f"saving client operation {record.operation_id!r}",
            write=True,
            capped=True,
        )

    # ------------------------------------------------------------------ process leases

    async def save_lease(self, lease: ProcessLease) -> None:
        await self._run(
            lambda conn: leases.save_lease(conn, lease),
            f"renewing the lease of process {lease.process_id!r}",
            write=True,
            durable=False,
        )

    async def planned_call_owners(self) -> tuple[CallOwner, ...]:
        return await self._run(
            leases.planned_call_owners, "reading the owners of planned calls", write=False
        )

    async def take_planned_calls(
        self, owner: str, owners: Sequence[str | None]
    ) -> tuple[LLMCallRecord, ...]:
        names = tuple(owners)
        return await self._run(
            lambda conn: leases.take_planned_calls(conn, owner, names),
            "taking the planned calls of stopped processes",
            write=True,
        )

    async def prune_leases(self, expired_before_ms: int) -> int:
        return await self._run(
            lambda conn: leases.prune_leases(conn, expired_before_ms),
            "pruning old process leases",
            write=True,
            durable=False,
        )

    async def append_stream_diagnostics(
        self, call_id: str, events: Sequence[tuple[int, bytes]]
    ) -> None:
        """Debugging aid: raw stream events by index; an index already stored is kept."""
        prepared = [(int(i), bytes(e)) for i, e in events]
        await self._run(
            lambda conn: jobs.append_stream_diagnostics(conn, call_id, prepared),
            f"saving diagnostics of {call_id!r}",
            write=True,
            capped=True,
        )


if TYPE_CHECKING:

    def _conforms(store: PostgresStore) -> Store:  # mypy checks it against the protocol
        return store

    def _claims(store: PostgresStore) -> ConversationClaims:
        return store
