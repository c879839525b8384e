"""The Store contract: record types and the protocol every backend implements.

The store keeps opaque bytes produced by others (serialized conversation state, canonical
message bytes, exact LLM request bytes, tool operation requests and results). It never decodes
them and never decides what they mean; it only guarantees atomicity, compare-and-swap on the
conversation version, dedupe keys and the append-only message history.

Messages are never deleted. A rewind is not a store operation: the runtime keeps the active
history as a view inside its state bytes (and with each turn mark), and commits it like any
other state change; the store only appends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, get_args

import msgspec

from .access_records import AccessTokenRecord as AccessTokenRecord
from .access_records import SessionTokenRecord as SessionTokenRecord
from .access_records import SignInRecord as SignInRecord
from .access_records import TokenUsage as TokenUsage
from .heads import ConversationSummary as ConversationSummary
from .heads import FirstLook as FirstLook
from .price_spans import PriceSpan
from .replica_api import ConversationClaims as ConversationClaims
from .replica_api import Replicas as Replicas

CommitStatus = Literal["committed", "conflict", "duplicate", "refused"]
CallStatus = Literal["planned", "streaming", "committed", "failed", "canceled"]
OperationStatus = Literal["planned", "sent", "completed", "canceled", "unknown"]
SaveOutcome = Literal["inserted", "updated", "unchanged", "ignored"]

CALL_STATUSES: tuple[CallStatus, ...] = ("planned", "streaming", "committed", "failed", "canceled")
OPERATION_STATUSES: tuple[OperationStatus, ...] = get_args(OperationStatus)


class ConversationRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The committed state of one conversation: state bytes plus every message it ever
    appended, in order (which of them are active is for the state bytes to say)."""

    conversation_id: str
    version: int
    state: bytes
    messages: tuple[bytes, ...]
    created_at_ms: int
    updated_at_ms: int
    # The person whose token started it (AccessTokenRecord.person); None: the operator's
    # (made with the server's own auth_token, while it was open, or stored before 0015).
    owner_id: str | None = None


class InputCommit(msgspec.Struct, frozen=True, kw_only=True):
    """The record of one input applied to a conversation: replaying it returns `result`."""

    conversation_id: str
    input_id: str
    committed_version: int
    result: bytes
    created_at_ms: int


class CommitResult(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of a commit.

    committed: `version` is the new version.
    conflict:  nothing changed; `version` is the current version (0 = no such conversation).
    refused:   nothing changed; the commit's `Reservation` did not fit (`reservation` says by
               how much).
    duplicate: nothing changed; `previous` is the earlier commit of this input id and `version`
               the conversation's current version.
    `ignored` lists ids of call/operation records whose update was ignored (for example a second
    completion of a client operation with a different result); the commit itself went through.
    """

    status: CommitStatus
    version: int
    previous: InputCommit | None = None
    ignored: tuple[str, ...] = ()
    reservation: ReservationTotals | None = None  # for a commit that carried a Reservation


class Reservation(msgspec.Struct, frozen=True, kw_only=True):
    """What a commit that plans a model call under a person token asks of that person's
    limits, checked and taken in the commit's own transaction (one atomic step across
    processes and replicas): the call record it plans carries `reserved_usd = amount_usd`,
    and the commit goes through only if

        spent + reserved + amount_usd <= budget_usd   (over [since_ms, until_ms)), and
        calls planned since rate_since_ms < rpm

    where spent sums the costs of the person's finished calls (every token of its chain of
    rotations) and reserved the `reserved_usd` of its calls still planned or streaming. The
    runtime says what the numbers are; the store only adds them up and compares."""

    token_id: str
    amount_usd: float = 0.0
    budget_usd: float | None = None  # None: no budget
    since_ms: int = 0
    until_ms: int = 0
    rpm: int | None = None  # None: no rate
    rate_since_ms: int = 0


class ReservationTotals(msgspec.Struct, frozen=True, kw_only=True):
    """The person's totals a Reservation was checked against (before it was taken), and which
    limit refused it (None: it was taken)."""

    spent_usd: float
    reserved_usd: float
    recent_calls: int
    oldest_recent_ms: int | None = None  # when the oldest of the recent calls was planned
    refused_by: Literal["budget", "rate"] | None = None


class LLMCallRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One upstream call. `request` is the stored form of the exact request sent (and resent
    on retry), opaque to the store: whole, or a delta on an earlier call of the same
    conversation, which is why no call record is ever deleted (transport/stored_request.py).
    `request_hash` is the sha256 of the body sent.

    Never changes once saved: conversation_id, turn_id, request, request_hash, messages_hash
    (created_at_ms keeps its first value). Once status is "committed" the record is final.
    """

    call_id: str
    conversation_id: str
    turn_id: str
    request: bytes
    request_hash: str
    messages_hash: str
    status: CallStatus
    created_at_ms: int
    assistant_hash: str | None = None
    provider: str | None = None
    model: str | None = None
    api: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    ttft_ms: int | None = None
    duration_ms: int | None = None
    cost_usd: float | None = None
    error: str | None = None
    finished_at_ms: int | None = None
    # The tool catalogue version the request was built with (loop/catalogue.py): a change
    # between two calls of a conversation explains a prompt-cache miss. None before 0005.
    catalogue_version: int | None = None
    # The context meter of the request (transport/runtime/records.py encodes it): estimated
    # when planned, scaled to the provider's usage when finished. None before 0006.
    prompt_breakdown: bytes | None = None
    # The person token the call was made under (AccessTokenRecord.token_id; a subagent's
    # calls carry the token of the run that started it). None: the server's own auth_token,
    # or no token at all. None before 0007.
    token_id: str | None = None
    # The server process that planned the call, or sends it again (ProcessLease.process_id):
    # a "planned" call whose process's lease expired is one nobody streams any more. None
    # before 0011.
    process_id: str | None = None
    # Which token counts are this server's estimates, not the provider's: "input", "output"
    # or "input,output" (a call that ended before the provider reported them). None: the
    # provider's, or none. None before 0011.
    estimated_tokens: str | None = None
    # The prices in force when the call was made (JSON, llm/models.py encode_prices), its
    # cost_usd's once its usage is known. None: unpriced (and stays so), or before 0013.
    prices: str | None = None
    # The upper bound of the call's cost reserved against its token's monthly budget when it
    # was planned (Reservation): it counts in place of the cost while the call is in flight.
    # None: nothing reserved (no budget), or before 0015.
    reserved_usd: float | None = None


class ClientOperationRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One operation executed by the client (a tool call may need several).

    Never changes once saved: conversation_id, turn_id, tool_call_id, tool_index, tool_name,
    side_effects, request. Once status is "completed" the result is kept forever.
    """

    operation_id: str
    conversation_id: str
    turn_id: str
    tool_call_id: str
    tool_index: int
    tool_name: str
    side_effects: bool
    request: bytes
    status: OperationStatus
    updated_at_ms: int
    result: bytes | None = None


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The request that started a run (opaque bytes), found again by its request_id."""

    request_id: str
    conversation_id: str
    request: bytes
    created_at_ms: int
    # The person whose token the run is made under (None: the operator's): who else's
    # appends a replica that does not hold the run refuses (migration 0016).
    owner_id: str | None = None


class SubagentLink(msgspec.Struct, frozen=True, kw_only=True):
    """A helper's conversation and the parent Task call that started it (docs/subagents.md)."""

    parent_conversation_id: str
    parent_tool_call_id: str  # the call id as sent in SubagentArgs.tool_call_id
    child_conversation_id: str
    subagent_type: str = ""
    depth: int = 1
    created_at_ms: int


class RunOutcomeRecord(msgspec.Struct, frozen=True, kw_only=True):
    """How one run ended, kept for the dashboard (observability writes it when the run is over;
    the runtime never reads it back).

    `outcome` is the runtime's word for it (ok, failed, canceled, error), opaque to the store.
    `error` is the message of a run that failed, None otherwise. `title` is the first words of
    the run's user message ("" for a run that resumed one). `model` is the model id the run
    used, or the one the client asked for when this server does not serve it."""

    request_id: str
    conversation_id: str
    outcome: str
    finished_at_ms: int
    duration_ms: int = 0
    title: str = ""
    model: str = ""
    provider: str = ""
    error: str | None = None
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0  # the sum of the costs stored with its calls
    unpriced_calls: int = 0  # its finished calls stored without a cost (0 before 0013)


class ConversationOverview(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation as an operator lists it: counts and sums over its stored LLM calls
    and run outcomes. A conversation known only from run outcomes (its runs were refused
    before it began) has version 0, no messages and no created_at_ms."""

    conversation_id: str
    last_activity_ms: int  # its last commit or its last run outcome, whichever is later
    created_at_ms: int | None = None
    version: int = 0
    message_count: int = 0
    owner_id: str | None = None  # ConversationRecord.owner_id (None too when it never began)
    title: str = ""  # the title of its first run outcome that has one
    model: str = ""  # the model of its latest run outcome
    provider: str = ""  # the provider of its latest run outcome, else of its latest call
    runs: int = 0
    failed_runs: int = 0  # run outcomes with an error
    turns: int = 0  # distinct turn ids among its LLM calls
    llm_calls: int = 0
    failed_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0  # the sum of the costs stored with its calls
    unpriced_calls: int = 0  # calls with a final status stored without a cost
    last_error: str | None = None  # the latest error of its failed calls and failed runs
    last_error_at_ms: int | None = None


class TurnMark(msgspec.Struct, frozen=True, kw_only=True):
    """A completed turn as published in a client checkpoint: its blob id, the number of
    messages the conversation had at its end, and `view`: the runtime's encoding of the
    active-history view at the end of that turn.

    The store never interprets `view`; it keeps the bytes as they are. Empty bytes mean no
    view (marks written before schema version 3 have none).
    """

    conversation_id: str
    turn: int
    blob_id: bytes
    message_count: int
    view: bytes = b""


class ProcessLease(msgspec.Struct, frozen=True, kw_only=True):
    """A server process's claim that it is alive, renewed while it runs: the calls it owns
    (LLMCallRecord.process_id) are its own to finish until the lease expires
    (`expires_at_ms`) or ends (`ended_at_ms`, a graceful stop). `host` says where `pid` means
    something (the runtime's words: a boot and PID namespace); `pid_started` tells a reused
    pid apart (0: unknown). Opaque to the store, which only keeps the rows."""

    process_id: str
    host: str
    pid: int
    pid_started: int
    started_at_ms: int
    renewed_at_ms: int
    expires_at_ms: int
    ended_at_ms: int | None = None


class CallOwner(msgspec.Struct, frozen=True, kw_only=True):
    """A process that owns "planned" calls, how many, and its lease (None: the calls name no
    process, made before 0011, or one whose lease row is gone)."""

    process_id: str | None
    calls: int
    lease: ProcessLease | None = None


class SaveResult(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of an upsert: inserted, updated, unchanged (identical), or ignored (`reason`)."""

    outcome: SaveOutcome
    reason: str = ""


class Store(Protocol):
    """What the runner needs from persistence (design §13, §16). All methods are coroutines.

    Write order the runner follows (design §13): commit state + input id + call records in one
    `commit_input`; save a CallLLM's exact request before opening the upstream stream; save a
    CallClient's waiting state and operation id before sending the exec to the client.
    """

    @property
    def replicas(self) -> Replicas | None:
        """What replicas of this database share besides its rows (PostgreSQL); None where
        processes share a file and the version compare-and-set alone decides (SQLite)."""
        ...

    async def load(self, conversation_id: str) -> ConversationRecord | None: ...

    async def head(self, conversation_id: str) -> ConversationSummary | None:
        """The conversation's version and size without its state or messages: enough to tell
        whether a copy kept in memory is still the committed one."""
        ...

    async def first_look(self, conversation_id: str) -> FirstLook:
        """`head` and `clone_source` in one read: what a run looks up first, its conversation,
        and for one the store does not hold, the source a clone note names."""
        ...

    async def find_input_commit(
        self, conversation_id: str, input_id: str
    ) -> InputCommit | None: ...

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
        """One transaction: dedupe on (conversation_id, input_id), CAS on version (a missing
        conversation is created when expected_version == 0, with `owner` as its owner_id),
        append messages at seq = expected_message_count.., record the input and upsert the
        call records. With `reserve`, the commit happens only when the reservation fits
        (status "refused" otherwise, with the totals); see Reservation.

        `turn_marks` (as save_turn_marks with unchanged=unchanged_marks) and `run_outcome` (as
        save_run_outcome) are written in this same transaction, only if it commits.

        Raises StoreIntegrityError (nothing changed) if the version matches but the stored
        message count differs from expected_message_count, or a record breaks a constraint.

        `durable=False` lets a backend return once the commit survives a crash of this process,
        before it would survive a power loss (SQLite: no fsync of its own; the next durable
        commit syncs it with everything before it). A power loss may then undo it, and only it
        and later commits, never a part of it.
        """
        ...

    async def save_llm_call(self, record: LLMCallRecord) -> SaveResult: ...

    async def reserve_llm_call(
        self, record: LLMCallRecord, reserve: Reservation
    ) -> ReservationTotals:
        """Save `record` (a charge in flight, its `reserved_usd` set) in one transaction with
        the check of `reserve` (see Reservation), only when it fits: the totals say whether
        (`refused_by` None) and what they were. A stored call planned again (a call resumed
        after a restart) takes the record's later `created_at_ms`: it counts toward the rate
        of the minute it is sent again."""
        ...

    async def get_llm_call(self, call_id: str) -> LLMCallRecord | None: ...

    async def save_client_operation(self, record: ClientOperationRecord) -> SaveResult: ...

    async def get_client_operation(self, operation_id: str) -> ClientOperationRecord | None: ...

    async def save_run(self, record: RunRecord) -> SaveResult:
        """Insert once; the same request_id again is `unchanged` (same bytes) or `ignored`.
        Not durable on its own (see `commit_input`): the next durable commit syncs it."""
        ...

    async def find_run(self, request_id: str) -> RunRecord | None: ...

    async def save_subagent_link(self, link: SubagentLink) -> SaveResult:
        """Insert once per parent call (the first child wins; another is `ignored`). Not
        durable on its own, like `save_run`: the child's first commit, durable, follows it."""
        ...

    async def find_subagent_link(
        self, parent_conversation_id: str, tool_call_id: str
    ) -> SubagentLink | None: ...

    async def list_subagent_links(
        self, parent_conversation_id: str
    ) -> tuple[SubagentLink, ...]: ...

    async def note_clone(self, conversation_id: str, source: str, at_ms: int) -> SaveResult:
        """NotifyConversationClone's note, append-only: the first note of a conversation wins
        (another source is `ignored`). Not durable on its own, like `save_run`."""
        ...

    async def clone_source(self, conversation_id: str) -> str | None: ...

    async def save_turn_marks(
        self, conversation_id: str, marks: Sequence[TurnMark], *, unchanged: int = 0
    ) -> None:
        """Replace the conversation's turn marks with `marks` (after a rewind, later ones go),
        each with its `view` bytes as given.
        `unchanged`: the first marks are stored as they are already (the caller read or wrote
        them), so only the others are written; if the store does not hold exactly that many
        (a write was lost), all are written. Not durable on its own, like `save_run`: marks
        only tell a rewind from a new turn, and losing the last ones makes the next run keep
        our history (never a wrong rewind)."""
        ...

    async def list_turn_marks(self, conversation_id: str) -> tuple[TurnMark, ...]: ...

    async def list_recent_llm_calls(
        self, limit: int = 50, *, person: str | None = None
    ) -> tuple[LLMCallRecord, ...]:
        """Newest first; `person`: the calls made under that person's tokens only."""

    async def list_price_spans(self, limit: int = 200) -> tuple[PriceSpan, ...]: ...

    async def list_conversations(self, limit: int = 50) -> tuple[ConversationSummary, ...]: ...

    async def save_run_outcome(self, record: RunOutcomeRecord) -> SaveResult:
        """Insert, or replace the row of the same request_id (a run reopened after a restart
        ends again); a replacement without a title keeps the stored title. Not durable on its
        own, like `save_run`."""
        ...

    async def list_recent_run_outcomes(
        self, limit: int = 50, *, owner: str | None = None
    ) -> tuple[RunOutcomeRecord, ...]:
        """Newest first; `owner`: of that person's conversations only."""
        ...

    async def list_conversation_overviews(
        self, limit: int = 50, *, owner: str | None = None
    ) -> tuple[ConversationOverview, ...]:
        """The most recently active first (ConversationOverview); `owner`: that person's only."""
        ...

    async def conversation_overview(self, conversation_id: str) -> ConversationOverview | None:
        """None when neither a conversation nor a run outcome has this id."""
        ...

    async def list_conversation_llm_calls(
        self, conversation_id: str, limit: int = 200
    ) -> tuple[LLMCallRecord, ...]:
        """The conversation's calls, newest first."""
        ...

    async def list_conversation_run_outcomes(
        self, conversation_id: str, limit: int = 200
    ) -> tuple[RunOutcomeRecord, ...]:
        """The conversation's run outcomes, newest first."""
        ...

    async def add_access_token(self, record: AccessTokenRecord) -> SaveResult:
        """Insert a token; `ignored` (nothing written) when an active token has its name or a
        token has its id or secret hash."""
        ...

    async def find_access_token(self, secret_hash: str) -> AccessTokenRecord | None:
        """The token (revoked or not) whose secret has this hash."""
        ...

    async def get_access_token(self, token_id: str) -> AccessTokenRecord | None: ...

    async def list_access_tokens(
        self, *, include_revoked: bool = False
    ) -> tuple[AccessTokenRecord, ...]:
        """By name, then the newest first."""
        ...

    async def revoke_access_token(self, name: str, at_ms: int) -> AccessTokenRecord | None:
        """Mark the active token of this name revoked at `at_ms`; the record as revoked, or
        None when no active token has that name."""
        ...

    async def rotate_access_token(
        self, name: str, token_id: str, secret_hash: str, at_ms: int
    ) -> AccessTokenRecord | None:
        """In one transaction: mark the active token of this name revoked at `at_ms` and add
        its successor with this id and secret hash (same name, limits and person). The
        successor, or None when no active token has that name."""
        ...

    async def token_usage(
        self, since_ms: int, until_ms: int, token_id: str | None = None
    ) -> tuple[TokenUsage, ...]:
        """Sums over the calls made under a person's tokens and created in [since_ms,
        until_ms), one per person with calls (only `token_id`'s person when given)."""
        ...

    async def token_spend(self, token_id: str, since_ms: int, until_ms: int) -> float:
        """The stored cost of the calls of the token's person (the token and those it was
        rotated from) created in [since_ms, until_ms) (the budget check before each model
        call: keep it an index-only read)."""
        ...

    async def get_server_setting(self, name: str) -> str | None:
        """A value an operator stored (`server_settings`), None when never set. Opaque text."""
        ...

    async def set_server_setting(self, name: str, value: str, at_ms: int) -> None:
        """Store `value` under `name` (replacing any), durably."""
        ...

    async def save_lease(self, lease: ProcessLease) -> None:
        """Insert or replace this process's lease (a renewal). Not durable on its own, like
        `save_run`: a lost renewal only makes the lease look older."""
        ...

    async def planned_call_owners(self) -> tuple[CallOwner, ...]:
        """Every owner of "planned" calls, with its lease (an index-only read: the planned
        calls are few)."""
        ...

    async def take_planned_calls(
        self, owner: str, owners: Sequence[str | None]
    ) -> tuple[LLMCallRecord, ...]:
        """In one transaction, make `owner` the owner of every "planned" call owned by one of
        `owners` (None: owned by no process), and return those records as they are now. Two
        processes taking the calls of the same dead owner at once: each call goes to one."""
        ...

    async def prune_leases(self, expired_before_ms: int) -> int:
        """Delete the leases expired or ended before `expired_before_ms` that own no
        "planned" call; how many went."""
        ...

    # -- signing in with a person's token (0010, docs/clients.md) -----------------------------

    async def server_secret(self, name: str, candidate: str, at_ms: int) -> str:
        """The secret stored under `name`; `candidate` is stored first when there is none (the
        first process to ask wins, every other gets the same value)."""
        ...

    async def record_sign_in(self, record: SignInRecord) -> SaveResult:
        """Store a completed sign-in; "ignored" when its login id is already taken."""
        ...

    async def claim_sign_in(
        self, login_id: str, challenge: str, at_ms: int, not_before_ms: int
    ) -> SignInRecord | None:
        """Mark the sign-in of `login_id` claimed and return it, when its challenge is
        `challenge`, it was not claimed yet and was made at `not_before_ms` or later; else None
        (nothing changes)."""
        ...

    async def add_session_token(self, record: SessionTokenRecord) -> SaveResult: ...

    async def find_session_token(self, token_hash: str, now_ms: int) -> SessionTokenRecord | None:
        """The live token with this hash: not expired at `now_ms`, its person token active."""
        ...

    async def list_session_tokens(self, now_ms: int) -> tuple[SessionTokenRecord, ...]:
        """Every live access token (not expired at `now_ms`, its person token active)."""
        ...

    async def close(self) -> None: ...
