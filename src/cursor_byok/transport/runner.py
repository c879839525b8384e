"""The runner: executes the loop's commands and feeds every result back into `transition`.

This is the design's `run` / `runCommand` / `readLLM` (§6-7), made concrete for asyncio:

- `run(input)`: `transition` → commit (when the committed state changed) → publish the emitted
  events → `run_command`.
- `run_command(command)`: CallLLM opens the upstream stream (its exact request bytes are saved
  in the same commit that records the call, before the stream opens); CallClient sends the exec
  request (its operation is saved before it is sent); Final / Failed / Canceled end the stream.
- `read_llm`: a task that pumps upstream events into the run's inbox.

Everything that reaches `transition` goes through one inbox consumed by one task, so the inputs
of a run enter the loop one at a time; a per-conversation registry makes a new run of the same
conversation supersede (cancel) the old one first, and the store's version CAS is the final
judge across processes. The runner decides nothing itself: it only translates and executes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..config import Config, Model
from ..llm import canonical
from ..llm.events import DoneEvent, ErrorEvent, ResponseEvent, StartEvent, TextDelta
from ..llm.registry import LLMRegistry
from ..llm.stream import LLM, PreparedRequest, ResponseStream, StreamEnded
from ..llm.types import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    Usage,
)
from ..loop import (
    AwaitClient,
    AwaitLLM,
    CallClient,
    CallLLM,
    Cancel,
    Canceled,
    Command,
    ContinueLLM,
    ConversationState,
    Failed,
    Final,
    Input,
    LLMEvent,
    RuntimeState,
    Start,
    ToolResult,
    Transition,
    TurnContext,
    UserMessage,
    WaitInput,
    side_effects,
    transition,
)
from ..store.api import (
    CallStatus,
    ClientOperationRecord,
    CommitStatus,
    ConversationRecord,
    LLMCallRecord,
    RunRecord,
    SaveResult,
    Store,
    TurnMark,
)
from ..store.errors import StoreError
from . import checkpoint as checkpoints
from . import dialect
from .channel import EndError, Incoming, RunChannel
from .client_blobs import ClientBlobs
from .committed_states import CommittedStates
from .context import McpIndex
from .exec_mapping import Finished, Send, ToolExecution
from .cursor.proto import agent_pb2
from .stored_request import RequestBase, StoredRequestError, encode_request, load_request

log = logging.getLogger("cursor_byok.runner")

_state_encoder = msgspec.json.Encoder(order="deterministic")
_state_decoder = msgspec.json.Decoder(ConversationState)
_tool_call_encoder = msgspec.json.Encoder(order="deterministic")

MAX_CAS_RETRIES = 5
CHECKPOINT_BLOB_TIMEOUT_S = 5.0
# Memory for the request bases of recent conversations (one body each); a conversation whose
# base was dropped stores its next request whole.
REQUEST_BASES_MAX_BYTES = 64 * 1024 * 1024


def encode_state(state: ConversationState) -> bytes:
    """The committed state without its messages (those are stored one row each)."""
    return _state_encoder.encode(msgspec.structs.replace(state, messages=()))


def decode_state(state: bytes, messages: tuple[bytes, ...]) -> ConversationState:
    base = _state_decoder.decode(state)
    return msgspec.structs.replace(
        base, messages=tuple(canonical.decode_message(m) for m in messages)
    )


def command_record(command: Command) -> bytes:
    """What an input commit records as its result: the command, except that a model call is
    named by its call id and messages hash (its request is in its own call record already;
    repeating it in every input would be most of the bytes written before the call)."""
    match command:
        case ContinueLLM():
            return b""
        case CallLLM(call_id=call_id, messages_hash=messages_hash):
            return msgspec.json.encode(
                {"command": "call_llm", "call_id": call_id, "messages_hash": messages_hash}
            )
        case _:
            return msgspec.json.encode(command)


def cache_key(conversation_id: str) -> str:
    """A stable, non-identifying per-conversation key for provider prompt caches."""
    return "cbk-" + hashlib.sha256(conversation_id.encode()).hexdigest()[:32]


def wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class RunnerServices:
    config: Config
    store: Store
    llm_for: Callable[[Model], LLM]
    now_ms: Callable[[], int] = wall_ms
    tool_timeout_s: float = 600.0
    context_timeout_s: float = 30.0
    supersede_timeout_s: float = 15.0
    fsync_model_calls: bool = False
    on_llm_call: Callable[[LLMCallRecord], None] | None = None  # observability hook
    on_run_end: Callable[[RunSummary], None] | None = None

    @classmethod
    def from_config(cls, config: Config, store: Store, registry: LLMRegistry) -> RunnerServices:
        return cls(
            config=config,
            store=store,
            llm_for=lambda m: registry.llm(m.provider),
            tool_timeout_s=config.server.tool_timeout_s,
            fsync_model_calls=config.server.fsync_model_calls,
        )


@dataclass
class RunSummary:
    """One line per run for logs and metrics."""

    request_id: str
    conversation_id: str = ""
    model: str = ""
    provider: str = ""
    outcome: str = "unknown"
    llm_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    ttft_ms: int | None = None
    duration_ms: int = 0
    cost_usd: float = 0.0
    error: str | None = None


# -- work items of one run's inbox ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ClientWork:
    input_id: str
    event: dialect.ClientEvent


@dataclass(frozen=True, slots=True)
class _LLMWork:
    call_id: str
    event: ResponseEvent


@dataclass(frozen=True, slots=True)
class _ToolTimeout:
    operation_id: str


@dataclass(frozen=True, slots=True)
class _EarlyResult:
    operation_id: str
    done: Finished


@dataclass(frozen=True, slots=True)
class _Supersede:
    reason: str


_Work = _ClientWork | _LLMWork | _ToolTimeout | _EarlyResult | _Supersede


@dataclass(frozen=True, slots=True)
class _PendingBlob:
    """A checkpoint blob sent to the client, its acknowledgement still to come."""

    marks: list[TurnMark]
    blob: bytes
    kv_id: int
    reply: asyncio.Future[dialect.ClientEvent]


class RunFailed(Exception):
    def __init__(self, end: EndError) -> None:
        super().__init__(end.message)
        self.end = end


@dataclass(frozen=True, slots=True)
class CacheStats:
    """One of the runner's in-memory caches, for /metrics."""

    name: str
    entries: int
    bytes: int
    hits: int
    misses: int


class Runner:
    """Handles runs; keeps at most one active run per conversation."""

    def __init__(self, services: RunnerServices) -> None:
        self.services = services
        self._active: dict[str, Run] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # Per conversation, the last committed call's request body: the base of the next
        # call's stored delta (stored_request.py). Least recently used first; bounded in bytes.
        self._request_bases: OrderedDict[str, RequestBase] = OrderedDict()
        self._request_base_bytes = 0
        self._request_base_hits = 0
        self._request_base_misses = 0
        # Per conversation, the state of its last commit by this process: the next turn takes
        # it instead of loading and decoding the whole history when the store's version
        # still matches (committed_states.py).
        self.committed_states = CommittedStates()
        # Context blobs the clients sent, by their content hash (client_blobs.py).
        self.client_blobs = ClientBlobs()

    def request_base(self, conversation_id: str) -> RequestBase | None:
        base = self._request_bases.get(conversation_id)
        if base is None:
            self._request_base_misses += 1
        else:
            self._request_bases.move_to_end(conversation_id)
            self._request_base_hits += 1
        return base

    def cache_stats(self) -> list[CacheStats]:
        states, blobs = self.committed_states, self.client_blobs
        return [
            CacheStats("committed_states", len(states), states.size, states.hits, states.misses),
            CacheStats("client_blobs", len(blobs), blobs.size, blobs.hits, blobs.misses),
            CacheStats(
                "request_bases",
                len(self._request_bases),
                self._request_base_bytes,
                self._request_base_hits,
                self._request_base_misses,
            ),
        ]

    def remember_request(self, conversation_id: str, base: RequestBase) -> None:
        """Keep `base` (a committed call's request) for the conversation's next call."""
        old = self._request_bases.pop(conversation_id, None)
        if old is not None:
            self._request_base_bytes -= len(old.body)
        self._request_bases[conversation_id] = base
        self._request_base_bytes += len(base.body)
        while self._request_base_bytes > REQUEST_BASES_MAX_BYTES and len(self._request_bases) > 1:
            _, dropped = self._request_bases.popitem(last=False)
            self._request_base_bytes -= len(dropped.body)

    @property
    def active_runs(self) -> int:
        return len(self._active)

    async def handle(self, channel: RunChannel, info: object = None) -> None:
        # Only the shim's RunSSE can be reopened under a known request_id; an HTTP/2 Run
        # always starts with the client's own run_request.
        run = Run(self, channel, resumable=getattr(info, "transport", "runsse") != "run")
        try:
            await run.serve()
        finally:
            run.close()

    async def _claim(self, run: Run, conversation_id: str) -> asyncio.Lock:
        """Supersede an older run of the same conversation, then take its lock."""
        old = self._active.get(conversation_id)
        if old is not None and old is not run:
            old.supersede("a newer request for this conversation arrived")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(old.ended.wait(), self.services.supersede_timeout_s)
        self._active[conversation_id] = run
        return self._locks.setdefault(conversation_id, asyncio.Lock())

    def _release(self, run: Run, conversation_id: str) -> None:
        if self._active.get(conversation_id) is run:
            del self._active[conversation_id]
            lock = self._locks.get(conversation_id)
            if lock is not None and not lock.locked():
                del self._locks[conversation_id]


class Run:
    def __init__(self, runner: Runner, channel: RunChannel, *, resumable: bool = True) -> None:
        self.runner = runner
        self.resumable = resumable
        self.services = runner.services
        self.channel = channel
        self.store = runner.services.store
        self.inbox: asyncio.Queue[_Work] = asyncio.Queue()
        self.ended = asyncio.Event()
        self.summary = RunSummary(request_id=channel.request_id)
        self._t0 = time.monotonic()
        self._exec_ids = 0
        self._kv_ids = 0
        self._exec_waiters: dict[int, asyncio.Future[dialect.ClientEvent]] = {}
        self._kv_waiters: dict[int, asyncio.Future[dialect.ClientEvent]] = {}
        self._pumps: dict[str, asyncio.Task[None]] = {}
        self._streams: dict[str, ResponseStream] = {}
        self._closing: set[asyncio.Future[None]] = set()
        self._run_saved: asyncio.Future[SaveResult] | None = None
        self._encoders: dict[str, dialect.StreamEncoder] = {}
        self._prepared: dict[str, PreparedRequest] = {}
        self._llm_records: dict[str, LLMCallRecord] = {}
        self._llm_t0: dict[str, float] = {}
        self._llm_first: dict[str, float] = {}
        self._tool: ToolExecution | None = None
        self._tool_owner: dict[str, tuple[ToolCall, str]] = {}  # tool call id -> (call, LLM call)
        self._tool_op: ClientOperationRecord | None = None
        self._tool_timer: asyncio.Task[None] | None = None
        self._checkpoint_blob: _PendingBlob | None = None
        self._unreported: list[LLMCallRecord] = []  # finished calls not yet given to metrics
        # This conversation's turn marks as this run knows them (None: not read yet). The run
        # holds the conversation, and marks are only written by the run that holds it.
        self._marks: list[TurnMark] | None = None
        self._done = False
        self.model: Model | None = None
        self.mcp = McpIndex.empty()
        self.state = RuntimeState.new("")
        self.version = 0
        self.stored_count = 0  # messages of this conversation already in the store
        self.turn_id = ""  # the turn this run drives, once it started or resumed one
        self.conversation_id = ""

    # -- lifecycle -----------------------------------------------------------------------

    async def serve(self) -> None:
        conversation_id = ""
        try:
            first = await self._first_message()
            if first is None:
                return
            # Replies to what the run asked resolve their waiters the moment they arrive (no
            # task in between); every other client message joins the inbox, in order.
            self.channel.route(self._on_client_message)
            event = self._decode(first)
            if not isinstance(event, dialect.RunRequestEvent):
                raise RunFailed(
                    dialect.bad_request_end("the first message of a run must be a run_request")
                )
            request = event.request
            conversation_id = request.conversation_id
            self.conversation_id = conversation_id
            self.summary.conversation_id = conversation_id
            self.model = self._resolve_model(request.model_id)
            self.summary.model = self.model.id
            self.summary.provider = self.model.provider.name
            if self.resumable:
                # Only a RunSSE can be reopened by request_id after a restart (`_first_message`),
                # so only its run request is kept. Not awaited here: queued before the first
                # commit, it usually shares its transaction; awaited once the run has begun.
                self._run_saved = asyncio.ensure_future(
                    self.store.save_run(
                        RunRecord(
                            request_id=self.channel.request_id,
                            conversation_id=conversation_id,
                            request=first.message.SerializeToString(),
                            created_at_ms=self.services.now_ms(),
                        )
                    )
                )
            lock = await self.runner._claim(self, conversation_id)
            async with lock:
                await self._begin(first.input_id, request)
                self.turn_id = self.state.committed.turn_id
                if self._run_saved is not None:
                    await self._run_saved
                while not self._done:
                    await self._process(await self.inbox.get())
        except RunFailed as exc:
            self._end(exc.end, outcome="failed")
        except StoreError as exc:
            log.error("store error in run %s: %s", self.channel.request_id, exc)
            self._end(dialect.internal_end(f"storage error: {exc}"), outcome="error")
        except dialect.DialectError as exc:
            self._end(dialect.bad_request_end(str(exc)), outcome="failed")
        except asyncio.CancelledError:
            self._end(dialect.canceled_end("the server is shutting down"), outcome="canceled")
            raise
        except Exception as exc:  # a bug must end this run, never the server
            log.exception("run %s failed", self.channel.request_id)
            self._end(dialect.internal_end(f"internal error: {type(exc).__name__}"), "error")
        finally:
            if conversation_id:
                self.runner._release(self, conversation_id)
            if not self.channel.finished:
                self.channel.finish(dialect.internal_end("the run ended unexpectedly"))
            self.ended.set()

    async def _first_message(self) -> Incoming | None:
        """The run request: from the client, or from the store when this request_id is known
        (a client that reconnects after a restart does not send its appends again). Both are
        asked at once; the first that has it wins (they hold the same bytes)."""
        if not self.resumable:
            return await self.channel.receive()
        received = asyncio.ensure_future(self.channel.receive())
        stored = asyncio.ensure_future(self.store.find_run(self.channel.request_id))
        try:
            await asyncio.wait({received, stored}, return_when=asyncio.FIRST_COMPLETED)
            if received.done():
                return received.result()
            record = await stored
            if record is None:
                return await received
            received.cancel()  # an inbox get: cancelling it loses nothing
            message = agent_pb2.AgentClientMessage.FromString(record.request)
            return Incoming(f"{self.channel.request_id}:0", message)
        finally:
            if not stored.done():
                stored.add_done_callback(_consume_exception)
            elif not received.done():
                received.cancel()

    def _background(self, work: Awaitable[None], what: str) -> None:
        """A write nobody waits for; its failure is logged, never lost silently."""
        task = asyncio.ensure_future(work)
        self._closing.add(task)
        request_id = self.channel.request_id

        def done(future: asyncio.Future[None]) -> None:
            self._closing.discard(future)
            if not future.cancelled() and (exc := future.exception()) is not None:
                log.error("run %s: saving %s failed: %s", request_id, what, exc)

        task.add_done_callback(done)

    def close(self) -> None:
        self._report_calls()
        self.channel.route(None)
        if self._run_saved is not None and not self._run_saved.done():
            self._run_saved.add_done_callback(_consume_exception)
        for task in (self._tool_timer, *self._pumps.values()):
            if task is not None and not task.done():
                task.cancel()
        self._drop_checkpoint_blob()
        self._close_streams()

    def _close_streams(self) -> None:
        """Abort every open upstream stream (their readers end with an `aborted` event)."""
        for stream in self._streams.values():
            task = asyncio.ensure_future(stream.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        self._streams.clear()

    def supersede(self, reason: str) -> None:
        self.inbox.put_nowait(_Supersede(reason))

    def _end(self, error: EndError | None, outcome: str) -> None:
        if self._done:
            return
        self._done = True
        self.summary.outcome = outcome
        if error is not None:
            self.summary.error = error.message
        self.summary.duration_ms = int((time.monotonic() - self._t0) * 1000)
        self.channel.finish(error)
        self._report_calls()
        if self.services.on_run_end is not None:
            # After the transport has written the end: logs and metrics are not on its path.
            asyncio.get_running_loop().call_soon(self.services.on_run_end, self.summary)

    def _resolve_model(self, model_id: str | None) -> Model:
        config = self.services.config
        model = config.model(model_id) if model_id else None
        if model is None and model_id is None and len(config.models) == 1:
            model = next(iter(config.models.values()))
        if model is None:
            known = ", ".join(sorted(config.models)) or "none are configured"
            asked = repr(model_id) if model_id else "no model"
            raise RunFailed(
                dialect.bad_request_end(f"unknown model {asked}; this server offers: {known}")
            )
        return model

    # -- client side ------------------------------------------------------------------------

    def _decode(self, incoming: Incoming) -> dialect.ClientEvent:
        return dialect.decode_client_message(incoming.message)

    def _on_client_message(self, incoming: Incoming) -> None:
        """Route a client message: replies to waiters, the rest into the inbox in order."""
        try:
            event = self._decode(incoming)
        except dialect.DialectError as exc:
            log.warning("run %s: ignored a client message: %s", self.channel.request_id, exc)
            return
        match event:
            case dialect.KvReply(id=kv_id) if kv_id in self._kv_waiters:
                waiter = self._kv_waiters.pop(kv_id)
                if not waiter.done():
                    waiter.set_result(event)
            case dialect.ExecReply(id=exec_id) | dialect.ExecControl(id=exec_id) if (
                exec_id in self._exec_waiters
            ):
                if isinstance(event, dialect.ExecControl) and event.kind != "throw":
                    return  # stream_close / heartbeat after the reply we waited for
                waiter = self._exec_waiters.pop(exec_id)
                if not waiter.done():
                    waiter.set_result(event)
            case dialect.ClientHeartbeatEvent():
                pass
            case _:
                self.inbox.put_nowait(_ClientWork(incoming.input_id, event))

    def _next_exec_id(self) -> int:
        self._exec_ids += 1
        return self._exec_ids

    def _next_kv_id(self) -> int:
        self._kv_ids += 1
        return self._kv_ids

    async def _ask(
        self,
        waiters: dict[int, asyncio.Future[dialect.ClientEvent]],
        request_id: int,
        message: agent_pb2.AgentServerMessage,
        what: str,
        *,
        timeout: float | None = None,
    ) -> dialect.ClientEvent:
        future: asyncio.Future[dialect.ClientEvent] = asyncio.get_running_loop().create_future()
        waiters[request_id] = future
        self.channel.send(message)
        limit = self.services.context_timeout_s if timeout is None else timeout
        try:
            async with asyncio.timeout(limit):  # one loop turn less than wait_for
                return await future
        except TimeoutError:
            raise RunFailed(
                dialect.bad_request_end(f"the client did not answer {what} within {limit:g} s")
            ) from None
        finally:
            waiters.pop(request_id, None)

    async def _get_blob(self, blob_id: bytes) -> bytes | None:
        kv_id = self._next_kv_id()
        reply = await self._ask(
            self._kv_waiters, kv_id, dialect.get_blob(kv_id, blob_id), "a blob request"
        )
        assert isinstance(reply, dialect.KvReply)
        return dialect.blob_data(reply)

    async def _get_blobs(self, blob_ids: Sequence[bytes]) -> list[bytes | None]:
        """The client's blobs (None: it has no such blob): those already fetched by any run
        from the server's cache, the others asked for all at once (one round trip, not one
        per blob)."""
        cache = self.runner.client_blobs
        found = [cache.get(blob_id) for blob_id in blob_ids]
        missing = [i for i, data in enumerate(found) if data is None]
        if missing:
            fetched = await asyncio.gather(*(self._get_blob(blob_ids[i]) for i in missing))
            for i, data in zip(missing, fetched, strict=True):
                found[i] = data
                if data is not None:
                    cache.put(blob_ids[i], data)
        return found

    # -- the start of a run -----------------------------------------------------------------

    async def _begin(self, input_id: str, request: dialect.RunRequest) -> None:
        stored = await self._load_committed(request.conversation_id)
        # Input commits belong to a stored conversation: without one there is nothing to find.
        previous = (
            await self.store.find_input_commit(request.conversation_id, input_id)
            if stored is not None
            else None
        )
        if stored is not None:
            state, self.version = stored
            self.state = RuntimeState.of(state)
            self.stored_count = len(state.messages)
            await self._rewind_if_behind(request)
        else:
            self._marks = []  # a conversation new to this server has no turns published yet
            history = await self._client_history(request)
            committed = msgspec.structs.replace(
                ConversationState.new(request.conversation_id), messages=tuple(history)
            )
            self.state = RuntimeState.of(committed)
            self.version = 0
            # What the first commit adds is counted by `advance`.
            self.runner.committed_states.remember(request.conversation_id, 0, committed, 0)

        if request.action == "resume":
            await self._resume()
            return
        if previous is not None:
            await self._resume()  # the same run request again: continue, never apply twice
            return
        if request.user_message is None:
            raise RunFailed(dialect.bad_request_end("the run request carries no user message"))
        if self.state.committed.status in ("WaitingLLM", "WaitingClient"):
            # A turn left unfinished by a run that is gone: close it before the new one.
            await self.run(
                Cancel(reason="interrupted by a new message"),
                f"{input_id}:interrupt",
                execute=False,
            )
        context = await self._context(request)
        await self.run(Start(user_message=request.user_message, context=context), input_id)

    async def _load_committed(self, conversation_id: str) -> tuple[ConversationState, int] | None:
        """The conversation's committed state and version: kept from this process's last
        commit when the store still holds exactly that version, else loaded and decoded."""
        states = self.runner.committed_states
        head = await self.store.head(conversation_id)
        if head is None:
            states.forget(conversation_id)
            return None
        kept = states.get(conversation_id, head)
        if kept is not None:
            return kept
        record = await self.store.load(conversation_id)
        if record is None:
            return None
        return self._remember_record(record), record.version

    def _remember_record(self, record: ConversationRecord) -> ConversationState:
        state = decode_state(record.state, record.messages)
        size = len(record.state) + sum(len(m) for m in record.messages)
        self.runner.committed_states.remember(record.conversation_id, record.version, state, size)
        return state

    async def _rewind_if_behind(self, request: dialect.RunRequest) -> None:
        """The client wins when its checkpoint is behind ours: a checkpoint listing a strict
        prefix of the turns we published means the user rewound to the last of them."""
        client_turns = request.history.turn_blob_ids
        if not client_turns:
            return
        marks = await self._turn_marks(request.conversation_id)
        ours = [m.blob_id for m in marks]
        if len(client_turns) >= len(ours) or list(client_turns) != ours[: len(client_turns)]:
            return
        keep = marks[len(client_turns) - 1].message_count
        c = self.state.committed
        if keep >= len(c.messages) or c.status in ("WaitingLLM", "WaitingClient"):
            return
        rewound = msgspec.structs.replace(
            c, messages=c.messages[:keep], waiting=None, status="Ready", queued=()
        )
        outcome = await self.store.truncate_messages(
            request.conversation_id,
            keep=keep,
            expected_version=self.version,
            state=encode_state(rewound),
        )
        self.runner.committed_states.forget(request.conversation_id)
        if outcome.status != "committed":
            raise RunFailed(dialect.internal_end("the conversation changed during a rewind"))
        self.version = outcome.version
        self.stored_count = keep
        self.state = RuntimeState.of(rewound)
        self._marks = marks[: len(client_turns)]
        await self.store.save_turn_marks(
            request.conversation_id, self._marks, unchanged=len(self._marks)
        )
        log.info(
            "conversation %s rewound by the client to turn %d (%d messages)",
            request.conversation_id,
            len(client_turns),
            keep,
        )

    async def _turn_marks(self, conversation_id: str) -> list[TurnMark]:
        """This conversation's published turns: kept with its committed state while that is
        current, else read from the store (and kept from then on)."""
        if self._marks is None:
            states = self.runner.committed_states
            marks = states.turn_marks(conversation_id, self.version)
            if marks is None:
                marks = list(await self.store.list_turn_marks(conversation_id))
                states.set_turn_marks(conversation_id, self.version, marks)
            self._marks = marks
        return list(self._marks)

    async def _client_history(self, request: dialect.RunRequest) -> list[Message]:
        """History the client holds for a conversation this server has never seen."""
        if request.inline_history:
            return list(request.inline_history)
        fetched = await self._get_blobs(request.history.root_prompt_blob_ids)
        blobs = [data for data in fetched if data is not None]
        return list(dialect.history_from_root_prompt_blobs(blobs))

    async def _context(self, request: dialect.RunRequest) -> TurnContext:
        parts: list[dialect.ContextPart] = []
        fetched = await self._get_blobs([ref.blob_id for ref in request.context_refs])
        for ref, data in zip(request.context_refs, fetched, strict=True):
            if data is not None:
                parts.append(dialect.decode_request_context_part(ref.kind, data))
        inline = request.inline_context
        if inline is None and not request.context_refs:
            exec_id = self._next_exec_id()
            reply = await self._ask(
                self._exec_waiters,
                exec_id,
                dialect.request_context_exec(exec_id),
                "the request for its context",
            )
            inline = dialect.request_context_from_reply(reply)
        context, self.mcp = dialect.merge_context(
            inline, parts, request.mcp_tools, mode=request.mode
        )
        return context

    async def _resume(self) -> None:
        """Continue a conversation from its committed state (after a crash or reconnect)."""
        c = self.state.committed
        waiting = c.waiting
        if c.status == "WaitingLLM" and isinstance(waiting, AwaitLLM):
            llm_record = await self.store.get_llm_call(waiting.call_id)
            if llm_record is None:
                raise RunFailed(dialect.internal_end("the interrupted model call was not recorded"))
            self._llm_records[waiting.call_id] = llm_record
            try:
                prepared = await load_request(
                    llm_record.request, llm_record.request_hash, self._stored_request
                )
            except StoredRequestError as exc:
                raise RunFailed(
                    dialect.internal_end(f"the interrupted model call cannot be resent: {exc}")
                ) from None
            await self._open_llm(waiting.call_id, prepared)
        elif c.status == "WaitingClient" and isinstance(waiting, AwaitClient):
            await self._resume_tool(waiting)
        elif c.status == "Final":
            last = c.messages[-1] if c.messages else None
            if isinstance(last, AssistantMessage):
                self._replay_final(last)
            self._finish_ok(last.usage if isinstance(last, AssistantMessage) else Usage())
        elif c.status == "Failed":
            self._end(
                dialect.provider_error_end("the previous attempt of this turn failed"), "failed"
            )
        elif c.status == "Canceled":
            self._end(dialect.canceled_end("the turn was canceled"), "canceled")
        else:
            self._end(dialect.bad_request_end("there is nothing to resume"), "failed")

    async def _stored_request(self, call_id: str) -> bytes | None:
        record = await self.store.get_llm_call(call_id)
        return record.request if record is not None else None

    async def _resume_tool(self, waiting: AwaitClient) -> None:
        op = await self.store.get_client_operation(waiting.operation_id)
        call = waiting.calls[waiting.next]
        if op is not None and op.status == "completed" and op.result is not None:
            result = canonical.decode_message(op.result)
            assert isinstance(result, ToolResultMessage)
            await self.run(ToolResult(message=result), f"{waiting.operation_id}:result")
            return
        if op is not None and op.side_effects:
            tool = self._new_tool(call, waiting.call_id)
            done = tool.unknown_outcome_result(self.services.now_ms())
            await self._tool_finished(waiting.operation_id, done, op)
            return
        await self._run_command(CallClient(operation_id=waiting.operation_id, tool_call=call))

    def _replay_final(self, message: AssistantMessage) -> None:
        """Deliver a committed answer the client may not have seen, without calling the model."""
        encoder = dialect.StreamEncoder(model_call_id="replay", now_ms=self.services.now_ms)
        text = message.text
        if text:
            for out in encoder.encode(TextDelta(content_index=0, delta=text)):
                self.channel.send(out)

    # -- run / run_command ------------------------------------------------------------------

    async def _process(self, work: _Work) -> None:
        match work:
            case _LLMWork(call_id=call_id, event=event):
                await self._on_llm_event(call_id, event)
            case _ClientWork(input_id=input_id, event=event):
                await self._on_client_event(input_id, event)
            case _ToolTimeout(operation_id=op_id):
                tool, op = self._tool, self._tool_op
                if tool is not None and op is not None and op.operation_id == op_id:
                    for message in tool.abort_messages():
                        self.channel.send(message)
                    done = tool.timeout_result(self.services.now_ms())
                    await self._tool_finished(op_id, done, op)
            case _EarlyResult(operation_id=op_id, done=done):
                op = self._tool_op
                if op is not None and op.operation_id == op_id:
                    await self._tool_finished(op_id, done, op)
            case _Supersede(reason=reason):
                await self.run(Cancel(reason=reason), None)
        if not self._done and not self._streams and self._tool is None:
            # Nothing of this run is in flight: end instead of waiting forever.
            status = self.state.committed.status
            if self.turn_id and self.state.committed.turn_id != self.turn_id:
                # A lost race: another run (here or in another process) moved the
                # conversation to a turn of its own; this run's answer was not kept.
                self._end(
                    dialect.canceled_end("the conversation was continued by another request"),
                    "canceled",
                )
            elif status == "Final":
                self._finish_ok(self.summary.usage)
            elif status == "Canceled":
                self._end(dialect.canceled_end("the turn was canceled"), "canceled")
            elif status in ("WaitingLLM", "WaitingClient"):
                # A lost race: another run (here or in another process) moved the conversation
                # on, and what it waits for is not ours.
                self._end(
                    dialect.canceled_end("the conversation was continued by another request"),
                    "canceled",
                )
            else:
                self._end(dialect.internal_end(f"the turn stopped in state {status}"), "error")

    async def _on_client_event(self, input_id: str, event: dialect.ClientEvent) -> None:
        match event:
            case dialect.CancelEvent(reason=reason):
                await self.run(Cancel(reason=reason or "canceled by the user"), input_id)
            case dialect.FollowUpUserMessage(message=follow_up):
                await self.run(UserMessage(message=follow_up), input_id)
            case dialect.ExecReply(id=exec_id) | dialect.ExecControl(id=exec_id):
                tool, op = self._tool, self._tool_op
                if tool is None or op is None or exec_id not in tool.exec_ids:
                    return  # late reply for an operation that already ended
                step = tool.feed(event.message, self.services.now_ms())
                match step:
                    case Send(messages=outgoing):
                        for out in outgoing:
                            self.channel.send(out)
                    case Finished():
                        await self._tool_finished(op.operation_id, step, op)
            case dialect.RunRequestEvent():
                log.warning("run %s: a second run_request was ignored", self.channel.request_id)
            case _:
                pass

    async def _on_llm_event(self, call_id: str, event: ResponseEvent) -> None:
        now = time.monotonic()
        if call_id not in self._llm_first and not isinstance(event, StartEvent | ErrorEvent):
            self._llm_first[call_id] = now
        if isinstance(event, DoneEvent):
            for call in event.message.tool_calls:
                self._tool_owner[call.id] = (call, call_id)
        if isinstance(event, DoneEvent | ErrorEvent):
            self._streams.pop(call_id, None)
            self._pumps.pop(call_id, None)
            self.summary.usage = self.summary.usage + event.message.usage
        await self.run(LLMEvent(call_id=call_id, event=event), f"{call_id}:end")

    async def run(self, input: Input, input_id: str | None, *, execute: bool = True) -> None:
        """transition → commit → publish → run_command (design §6 `run`). With `execute`
        false the command is not run (closing a turn left behind by a run that is gone)."""
        for _ in range(MAX_CAS_RETRIES):
            t = transition(self.state, input)
            if t.state is self.state:
                return  # an input that does not apply in this state: nothing happened
            before = self.state.committed
            if t.state.committed is before:
                self.state = t.state  # pending only: in-memory, never stored
                self._publish(t, input, before)
                await self._run_command(t.command)
                return
            prepared = self._prepare(t.command)
            if execute and isinstance(t.command, Final):
                self._checkpoint_blob = await self._send_checkpoint_blob(t.state.committed)
            outcome = await self._commit(input, input_id, t, prepared)
            if outcome != "committed":
                self._drop_checkpoint_blob()
            if outcome == "committed":
                self._publish(t, input, before)
                if execute:
                    await self._run_command(t.command, prepared)
                return
            if outcome == "duplicate":
                await self._resume()  # applied before (another process): continue from there
                return
        raise RunFailed(dialect.internal_end("the conversation kept changing under this run"))

    def _prepare(self, command: Command) -> PreparedRequest | None:
        if not isinstance(command, CallLLM):
            return None
        assert self.model is not None
        llm = self.services.llm_for(self.model)
        settings = msgspec.structs.replace(
            self.model.settings, cache_key=cache_key(self.conversation_id)
        )
        return llm.prepare(command.request, settings)

    async def _commit(
        self,
        input: Input,
        input_id: str | None,
        t: Transition,
        prepared: PreparedRequest | None,
    ) -> CommitStatus:
        after = t.state.committed
        # A new conversation seeded from the client's history stores the seed with its first
        # commit, so count from what the store holds, not from the previous state.
        appended = after.messages[self.stored_count :]
        calls: list[LLMCallRecord] = []
        ops: list[ClientOperationRecord] = []
        now = self.services.now_ms()
        if isinstance(input, LLMEvent) and input.call_id in self._llm_records:
            calls.append(self._finished_call_record(input.call_id, input.event, t.command, now))
        next_base: RequestBase | None = None
        if isinstance(t.command, CallLLM) and prepared is not None:
            stored, next_base = encode_request(
                prepared, self.runner.request_base(self.conversation_id), t.command.call_id
            )
            record = LLMCallRecord(
                call_id=t.command.call_id,
                conversation_id=self.conversation_id,
                turn_id=after.turn_id,
                request=stored,
                request_hash=hashlib.sha256(prepared.body).hexdigest(),
                messages_hash=t.command.messages_hash,
                status="planned",
                created_at_ms=now,
                provider=self.model.provider.name if self.model else None,
                model=prepared.model,
                api=self.model.provider.api if self.model else None,
            )
            self._llm_records[t.command.call_id] = record
            calls.append(record)
        if isinstance(t.command, CallClient):
            ops.append(self._operation_record(t.command, after, now))
        result = command_record(t.command)
        appended_bytes = [canonical.encode_message(m) for m in appended]
        outcome = await self.store.commit_input(
            self.conversation_id,
            input_id=input_id or f"{after.last_commit_id}",
            expected_version=self.version,
            state=encode_state(after),
            append_messages=appended_bytes,
            expected_message_count=self.stored_count,
            result=result,
            llm_calls=calls,
            client_operations=ops,
            # Losing a commit whose command is a model call costs at most that call again (same
            # bytes); every commit that sends a tool or ends a turn is fsynced, with all before.
            durable=self.services.fsync_model_calls or not isinstance(t.command, CallLLM),
        )
        if outcome.status == "committed":
            self.runner.committed_states.advance(
                self.conversation_id,
                self.version,
                outcome.version,
                after,
                sum(len(m) for m in appended_bytes),
            )
            self.version = outcome.version
            self.stored_count = len(after.messages)
            self.state = t.state
            if next_base is not None:
                self.runner.remember_request(self.conversation_id, next_base)
            if self.services.on_llm_call is not None:
                # Metrics after what the client waits for: the next call, or for the call that
                # ends the turn, the end of the stream.
                self._unreported.extend(r for r in calls if r.status != "planned")
                if not isinstance(t.command, Final):
                    self._report_calls()
            return "committed"
        # Another writer moved the conversation (or this input was already applied): reload.
        record_now = await self.store.load(self.conversation_id)
        if record_now is None:
            raise RunFailed(dialect.internal_end("the conversation disappeared from the store"))
        log.info(
            "conversation %s changed under this run (%s at version %d); reloaded at version %d",
            self.conversation_id,
            outcome.status,
            self.version,
            record_now.version,
        )
        self.state = RuntimeState.of(self._remember_record(record_now))
        self.version = record_now.version
        self.stored_count = len(record_now.messages)
        return outcome.status

    def _report_calls(self) -> None:
        on_llm_call = self.services.on_llm_call
        if on_llm_call is not None and self._unreported:
            loop = asyncio.get_running_loop()
            for record in self._unreported:
                loop.call_soon(on_llm_call, record)
        self._unreported.clear()

    def _finished_call_record(
        self, call_id: str, event: ResponseEvent, command: Command, now: int
    ) -> LLMCallRecord:
        record = self._llm_records[call_id]
        if not isinstance(event, DoneEvent | ErrorEvent):
            return record
        message = event.message
        usage = message.usage
        t0 = self._llm_t0.get(call_id)
        first = self._llm_first.get(call_id)
        ttft = int((first - t0) * 1000) if t0 is not None and first is not None else None
        duration = int((time.monotonic() - t0) * 1000) if t0 is not None else None
        if ttft is not None and self.summary.ttft_ms is None:
            self.summary.ttft_ms = ttft
        cost = self._cost(usage)
        self.summary.cost_usd += cost or 0.0
        self.summary.llm_calls += 1
        accepted = isinstance(event, DoneEvent) and not isinstance(command, Failed)
        if accepted:
            status: CallStatus = "committed"
        elif isinstance(event, ErrorEvent) and event.reason == "aborted":
            status = "canceled"
        else:
            status = "failed"
        updated = msgspec.structs.replace(
            record,
            status=status,
            assistant_hash=(
                hashlib.sha256(canonical.encode_message(message)).hexdigest() if accepted else None
            ),
            input_tokens=usage.input,
            output_tokens=usage.output,
            cache_read_tokens=usage.cache_read,
            cache_write_tokens=usage.cache_write,
            reasoning_tokens=usage.reasoning,
            ttft_ms=ttft,
            duration_ms=duration,
            cost_usd=cost,
            error=(
                message.error_message
                if isinstance(event, ErrorEvent)
                else (command.message.error_message if isinstance(command, Failed) else None)
            ),
            finished_at_ms=now,
        )
        self._llm_records[call_id] = updated
        return updated

    def _cost(self, usage: Usage) -> float | None:
        prices = self.model.prices if self.model is not None else None
        if prices is None:
            return None
        return (
            usage.input * prices.input
            + usage.output * prices.output
            + usage.cache_read * prices.cache_read
            + usage.cache_write * prices.cache_write
        ) / 1_000_000

    def _operation_record(
        self, command: CallClient, state: ConversationState, now: int
    ) -> ClientOperationRecord:
        waiting = state.waiting
        index = waiting.next if isinstance(waiting, AwaitClient) else 0
        mcp_names = self.mcp.names()
        return ClientOperationRecord(
            operation_id=command.operation_id,
            conversation_id=self.conversation_id,
            turn_id=state.turn_id,
            tool_call_id=command.tool_call.id,
            tool_index=index,
            tool_name=command.tool_call.name,
            side_effects=side_effects(command.tool_call.name, mcp_names),
            request=_tool_call_encoder.encode(command.tool_call),
            status="sent",
            updated_at_ms=now,
        )

    def _publish(self, t: Transition, input: Input, before: ConversationState) -> None:
        if isinstance(input, LLMEvent):
            encoder = self._encoders.get(input.call_id)
            if encoder is not None:
                for event in t.emit:
                    for message in encoder.encode(event):
                        self.channel.send(message)
        self._complete_local_results(input, before, t.state.committed)

    def _complete_local_results(
        self, input: Input, before: ConversationState, after: ConversationState
    ) -> None:
        """Tool calls the loop answered itself (invalid arguments, unknown tool, canceled) still
        get a completed card on the client, so no placeholder spins forever."""
        if len(after.messages) <= len(before.messages):
            return
        from_client = input.message.tool_call_id if isinstance(input, ToolResult) else None
        for message in after.messages[len(before.messages) :]:
            if not isinstance(message, ToolResultMessage) or message.tool_call_id == from_client:
                continue
            owner = self._tool_owner.get(message.tool_call_id)
            if owner is None:
                continue
            call, llm_call_id = owner
            tool = self._new_tool(call, llm_call_id)
            self.channel.send(tool.local_completion(message, self.services.now_ms()))

    async def _run_command(self, command: Command, prepared: PreparedRequest | None = None) -> None:
        """Design §6 `runCommand`."""
        match command:
            case ContinueLLM() | WaitInput():
                return
            case CallLLM(call_id=call_id):
                if prepared is None:
                    prepared = self._prepare(command)
                assert prepared is not None
                await self._open_llm(call_id, prepared)
            case CallClient():
                self._start_tool(command)
            case Final():
                # The protocol's order: turn_ended (the client stops showing "generating"),
                # then the final checkpoint, then the end of the stream.
                self.channel.send(dialect.turn_ended(self.summary.usage))
                await self._publish_checkpoint()
                self._end(None, "ok")
            case Failed(message=message):
                text = message.error_message or "the model call failed"
                self._stop_everything()
                self._end(dialect.provider_error_end(text), "failed")
            case Canceled(reason=reason):
                self._stop_everything()
                self._end(dialect.canceled_end(reason), "canceled")

    async def _send_checkpoint_blob(self, c: ConversationState) -> _PendingBlob:
        """Send this turn's checkpoint blob; its acknowledgement is awaited later
        (`_publish_checkpoint`). Called before the turn's last commit is queued, so the client's
        round trip overlaps the commit and this work does not compete with it."""
        marks = [
            m
            for m in await self._turn_marks(self.conversation_id)
            if m.message_count <= len(c.messages)
        ]
        blob = _turn_blob(self.conversation_id, len(marks) + 1, c)
        kv_id = self._next_kv_id()
        reply: asyncio.Future[dialect.ClientEvent] = asyncio.get_running_loop().create_future()
        self._kv_waiters[kv_id] = reply
        self.channel.send(dialect.set_blob(kv_id, blob))
        return _PendingBlob(marks, blob, kv_id, reply)

    def _drop_checkpoint_blob(self) -> None:
        pending, self._checkpoint_blob = self._checkpoint_blob, None
        if pending is not None:
            self._kv_waiters.pop(pending.kv_id, None)
            pending.reply.cancel()

    async def _publish_checkpoint(self) -> None:
        """Tell the client where the conversation stands: one blob per completed turn, each
        stored on the client (set_blob answered) before a checkpoint references it. A later run
        that sends back a prefix of these turns was rewound (see `_rewind_if_behind`)."""
        c = self.state.committed
        pending, self._checkpoint_blob = self._checkpoint_blob, None
        if pending is None:
            pending = await self._send_checkpoint_blob(c)
        try:
            # Usually answered while the turn's last commit was written.
            async with asyncio.timeout(CHECKPOINT_BLOB_TIMEOUT_S):
                reply = await pending.reply
        except TimeoutError:
            return  # a client that keeps no blobs: no checkpoint, the turn still ends well
        finally:
            self._kv_waiters.pop(pending.kv_id, None)
        if not checkpoints.set_blob_ok(reply):
            return
        marks, blob = pending.marks, pending.blob
        marks.append(
            TurnMark(
                conversation_id=self.conversation_id,
                turn=len(marks) + 1,
                blob_id=hashlib.sha256(blob).digest(),
                message_count=len(c.messages),
            )
        )
        # Published before the marks are stored, and the turn ends without waiting for them:
        # should the write be lost, the next run's turns are simply not a prefix of ours and
        # our history stands (never a wrong rewind).
        self.channel.send(checkpoints.checkpoint([m.blob_id for m in marks]))
        self._marks = list(marks)
        self.runner.committed_states.set_turn_marks(self.conversation_id, self.version, marks)
        # The marks before this turn's are what the store holds (read from it, or written by
        # an earlier turn: a lost write makes the store rewrite them all).
        self._background(
            self.store.save_turn_marks(self.conversation_id, marks, unchanged=len(marks) - 1),
            "turn marks",
        )

    def _finish_ok(self, usage: Usage) -> None:
        self.channel.send(dialect.turn_ended(usage))
        self._end(None, "ok")

    def _stop_everything(self) -> None:
        if self._tool is not None:
            for message in self._tool.abort_messages():
                self.channel.send(message)
            self._tool = None
            self._tool_op = None
        if self._tool_timer is not None:
            self._tool_timer.cancel()
            self._tool_timer = None
        self._close_streams()

    # -- read_llm ---------------------------------------------------------------------------

    async def _open_llm(self, call_id: str, prepared: PreparedRequest) -> None:
        assert self.model is not None
        llm = self.services.llm_for(self.model)
        self._encoders[call_id] = dialect.StreamEncoder(
            model_call_id=call_id, now_ms=self.services.now_ms
        )
        self._llm_t0[call_id] = time.monotonic()
        stream = llm.send(prepared)
        self._streams[call_id] = stream
        self._pumps[call_id] = asyncio.create_task(self._read_llm(call_id, stream))

    async def _read_llm(self, call_id: str, stream: ResponseStream) -> None:
        """Design §7.2 `readLLM`: each upstream event becomes an input of this run."""
        try:
            while True:
                event = await stream.recv()
                self.inbox.put_nowait(_LLMWork(call_id, event))
                if isinstance(event, DoneEvent | ErrorEvent):
                    return
        except StreamEnded:
            return

    # -- tools ------------------------------------------------------------------------------

    def _new_tool(self, call: ToolCall, llm_call_id: str) -> ToolExecution:
        index = _content_index(self.state.committed.messages, call)
        return ToolExecution(
            call,
            call_id=dialect.call_id_for(llm_call_id, index),
            model_call_id=llm_call_id,
            mcp=self.mcp,
            conversation_id=self.conversation_id,
        )

    def _start_tool(self, command: CallClient) -> None:
        waiting = self.state.committed.waiting
        llm_call_id = waiting.call_id if isinstance(waiting, AwaitClient) else "unknown"
        tool = self._new_tool(command.tool_call, llm_call_id)
        self._tool = tool
        self._tool_op = self._operation_record(
            command, self.state.committed, self.services.now_ms()
        )
        for message in tool.start(self._next_exec_id, self.services.now_ms()):
            self.channel.send(message)
        if tool.finished_early is not None:
            # Unusable arguments: the error result is known without asking the client.
            self.inbox.put_nowait(_EarlyResult(command.operation_id, tool.finished_early))
            return
        if self._tool_timer is not None:
            self._tool_timer.cancel()
        self._tool_timer = asyncio.create_task(self._tool_deadline(command.operation_id))

    async def _tool_deadline(self, operation_id: str) -> None:
        await asyncio.sleep(self.services.tool_timeout_s)
        self.inbox.put_nowait(_ToolTimeout(operation_id))

    async def _tool_finished(
        self, operation_id: str, done: Finished, op: ClientOperationRecord
    ) -> None:
        self._tool = None
        self._tool_op = None
        if self._tool_timer is not None:
            self._tool_timer.cancel()
            self._tool_timer = None
        if done.completed is not None:
            self.channel.send(done.completed)
        completed = msgspec.structs.replace(
            op,
            status="completed",
            result=canonical.encode_message(done.result),
            updated_at_ms=self.services.now_ms(),
        )
        await self.store.save_client_operation(completed)
        await self.run(ToolResult(message=done.result), f"{operation_id}:result")


def _consume_exception(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _turn_blob(conversation_id: str, turn: int, state: ConversationState) -> bytes:
    """A small, stable description of a completed turn; its SHA-256 is the turn's blob id."""
    return msgspec.json.encode(
        {
            "cursor_byok_turn": turn,
            "conversation_id": conversation_id,
            "message_count": len(state.messages),
            "messages_hash": canonical.messages_hash(state.messages),
        },
        order="deterministic",
    )


def _content_index(messages: tuple[Message, ...], call: ToolCall) -> int:
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            for i, block in enumerate(message.content):
                if isinstance(block, ToolCall) and block.id == call.id:
                    return i
    return 0
