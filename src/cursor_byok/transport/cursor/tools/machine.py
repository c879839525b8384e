"""The state machine every tool call runs through, whatever its family.

A `ToolMachine` is sans-I/O: `start` returns the frames that open the call, `feed` takes one
exec reply and returns what it means (`Send`, `Finished` or `Ignored`). Exec ids come from the
caller's allocator and every timestamp is passed in, so a machine never reads a clock.

Each family subclass says what its card is (`CARD`), which string arguments it cannot run
without (`REQUIRED`), what its first exec request is, and which reply kinds it takes in each
phase (`HANDLERS`: phase → `ExecClientMessage.message` field name → handler). A reply kind that
is not in the table for the current phase ends the call with an "unexpected reply" error, so
a confused client gets an answer rather than a hang. The exec control messages (throw,
stream_close, heartbeat) are the same for every family and handled here.

The tables hold functions, not names: a subclass that overrides a handler lists it in its own
table. Misuse by the caller (`start` twice, `feed` before `start`, a second card for a call
that has one) raises `RuntimeError`; anything the client sends gets a `Step`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from google.protobuf.message import Message  # type: ignore[import-untyped,unused-ignore]

from ....llm.types import ImageContent, TextContent, ToolCall, ToolResultMessage, UserContent
from ....loop.context import Subagents
from ....loop.inputs import ToolEffect
from ....loop.tools import DEFAULT_BLOCK_UNTIL_MS
from ....web.page_text import DEFAULT_MAX_TEXT_CHARS
from ....web.types import JobOutcome, ServerJob
from ..mcp import McpDirectory
from ..proto import agent_pb2
from . import args as a
from . import cards

__all__ = [
    "DEFAULT_BLOCK_UNTIL_MS",
    "Finished",
    "Handlers",
    "Ignored",
    "Phase",
    "Send",
    "Started",
    "Step",
    "ToolMachine",
    "ToolSettings",
]

# DEFAULT_BLOCK_UNTIL_MS: how long Shell waits before the client moves a command to the
# background when the model gives no block_until_ms (Cursor's default; loop/tools.py says it to
# the model); the runner's own tool deadline bounds every exec.


class Phase(enum.Enum):
    """Where a call is. Replies are only taken in the phases that wait on an exec."""

    NEW = "new"  # built; `start` not called yet
    RUNNING = "running"  # the first exec request is out
    WRITING = "writing"  # StrReplace: the file was read and edited, the write is out
    RETRYING = "retrying"  # Glob: the client refused the empty pattern, the "." retry is out
    SLEEPING = "sleeping"  # AwaitShell: between two reads, until the caller's `wake`
    WORKING = "working"  # a server job (web search, image) runs; the caller `deliver`s it
    APPROVED = "approved"  # a query was approved; the exec it allowed (WebFetch's fetch) is out
    DONE = "done"  # a result exists (Finished, Started.early or complete_locally)
    ABORTED = "aborted"  # `abort` was called while an exec was out; the loop writes the result


_WAITING = frozenset(
    {Phase.RUNNING, Phase.WRITING, Phase.RETRYING, Phase.SLEEPING, Phase.WORKING, Phase.APPROVED}
)


@dataclass(frozen=True, slots=True)
class ToolSettings:
    """What a call needs from the conversation it runs in."""

    conversation_id: str
    shell_block_ms: int = DEFAULT_BLOCK_UNTIL_MS
    # RequestContextEnv.terminals_folder: where the client writes background shells' output.
    terminals_folder: str | None = None
    # The runner's deadline for one call (tool_timeout_s); a call that waits stays inside it.
    budget_ms: int | None = None
    # Whether the turn's model can see images: a Read of an image then gives the image itself.
    vision: bool = False
    mode: str = "agent"  # the conversation's mode when the call starts (SwitchMode's "from")
    # WriteShellStdin is offered: Shell asks the client to keep the command's stdin open.
    keep_stdin: bool = False
    # The turn's MCP servers and flat tools' routes, for the MCP meta-tools (mcp_meta.py).
    mcp: McpDirectory = field(default_factory=McpDirectory)
    model: str = ""  # the run's model id (a server job's per-model backends)
    # RequestContextEnv.workspace_paths[0]: where GenerateImage writes its image.
    workspace_root: str | None = None
    # Longest page text WebFetch gives the model ([web_fetch] max_text_chars).
    page_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    # Task's model choices and where this conversation sits among helpers (subagents.py).
    subagents: Subagents = field(default_factory=Subagents)


@dataclass(frozen=True, slots=True)
class Finished:
    """The call is over: `result` goes to the model, `card` (tool_call_completed) to the IDE,
    `effect` (a saved plan, an approved mode switch) to the loop with the result."""

    result: ToolResultMessage
    card: bytes
    effect: ToolEffect | None = None


@dataclass(frozen=True, slots=True)
class Started:
    """tool_call_started, then the first exec request. `early` is set when the arguments are
    unusable: no exec was sent and the answer is known now."""

    frames: tuple[bytes, ...]
    early: Finished | None = None
    # The call opens by waiting, with nothing sent: the caller `wake`s it that much later.
    wake_after_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Send:
    """The message was taken; send these frames now (maybe none). The call goes on. With
    `wake_after_ms` the call waits on nothing: the caller calls `wake` that much later. With
    `job` the call waits on the server: the caller runs the job and `deliver`s its outcome."""

    frames: tuple[bytes, ...] = ()
    wake_after_ms: int | None = None
    job: ServerJob | None = None


@dataclass(frozen=True, slots=True)
class Ignored:
    """A message this call does not take (late, stray, empty, after the end). Nothing changed;
    the caller may log `reason`."""

    reason: str


Step = Send | Finished | Ignored
# A handler gets the machine, the reply's oneof payload (ShellResult, ReadResult...) and now_ms.
Handler = Callable[[Any, Any, int], Step]
Handlers = Mapping[Phase, Mapping[str, Handler]]


class ToolMachine:
    """One tool call run on the client: `start` once, then `feed` every exec message addressed
    to it until a `Finished`. `abort` and `complete_locally` serve a call the loop ends itself."""

    CARD: ClassVar[str]  # the ToolCall.tool oneof field of this family's card
    # The answer waits on a person (a form, an approval): the question deadline bounds it.
    WAITS_ON_PERSON: ClassVar[bool] = False
    REQUIRED: ClassVar[tuple[str, ...]] = ()  # string arguments the call cannot run without
    HANDLERS: ClassVar[Handlers]

    def __init__(
        self, tool_call: ToolCall, *, call_id: str, model_call_id: str, settings: ToolSettings
    ) -> None:
        self.tool_call = tool_call
        self.call_id = call_id
        self.model_call_id = model_call_id
        self.settings = settings
        self.tool_call_id = cards.sanitize_tool_call_id(tool_call.id)
        self.args: dict[str, Any] = dict(tool_call.arguments)
        self.started_at_ms: int | None = None
        self._phase = Phase.NEW
        self._exec_ids: set[int] = set()
        self._alloc: Callable[[], int] | None = None
        self._alloc_query: Callable[[], int] | None = None

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.tool_call.name} {self.tool_call_id} {self._phase.name}>"
        )

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def exec_ids(self) -> frozenset[int]:
        """The exec ids whose answer is still waited on."""
        return frozenset(self._exec_ids)

    @classmethod
    def placeholder(cls, name: str, tool_call_id: str) -> agent_pb2.ToolCall:
        """The empty card the IDE draws while the arguments stream."""
        return cards.placeholder(cls.CARD, tool_call_id)

    # -- the caller's events -----------------------------------------------------------------

    def start(
        self,
        alloc_exec_id: Callable[[], int],
        now_ms: int,
        *,
        alloc_query_id: Callable[[], int] | None = None,
    ) -> Started:
        """`alloc_query_id` gives interaction ids for a family that asks a query (queries.py);
        without it, queries take their ids from `alloc_exec_id` too."""
        if self._phase is not Phase.NEW:
            raise RuntimeError(f"start() called on {self!r}: a call starts once")
        self._alloc = alloc_exec_id
        self._alloc_query = alloc_query_id
        self.started_at_ms = now_ms
        started = cards.started_frame(self.call_id, self.model_call_id, self._card())
        problem = self._argument_problem()
        if problem is not None:
            # Nothing goes to the client: the model reads the problem and can correct itself.
            return Started(frames=(started,), early=self._finish_error(problem, now_ms))
        answer = self._answer_now(now_ms)
        if answer is not None:  # the server answers the call itself: nothing goes out
            return Started(frames=(started,), early=answer)
        opening_wait = self._opening_wait()
        if opening_wait is not None:
            self._phase = Phase.SLEEPING
            return Started(frames=(started,), wake_after_ms=opening_wait)
        self._phase = Phase.RUNNING
        return Started(frames=(started, self._first_exec()))

    def feed(
        self,
        message: agent_pb2.ExecClientMessage | agent_pb2.ExecClientControlMessage,
        now_ms: int,
    ) -> Step:
        if self._phase is Phase.NEW:
            raise RuntimeError(f"feed() called on {self!r} before start()")
        if self._phase is Phase.DONE:
            return Ignored(f"the {self.tool_call.name} call is already over")
        if self._phase is Phase.ABORTED:
            return Ignored(f"the {self.tool_call.name} call was aborted")
        if isinstance(message, agent_pb2.ExecClientControlMessage):
            return self._feed_control(message, now_ms)
        if message.id not in self._exec_ids:
            return Ignored(f"exec {message.id} is not waited on (late or stray reply)")
        kind = message.WhichOneof("message")
        if kind is None:
            return Ignored(f"exec {message.id}: an empty reply is not an answer")
        handler = self.HANDLERS.get(self._phase, {}).get(kind)
        if handler is None:
            return self._finish_error(
                f"Error: the client answered the {self.tool_call.name} call with an unexpected "
                f"{kind} reply.",
                now_ms,
            )
        return handler(self, getattr(message, kind), now_ms)

    def wake(self, now_ms: int) -> Step:
        """The time a `Send(wake_after_ms=...)` asked for has passed."""
        if self._phase is not Phase.SLEEPING:
            return Ignored(f"the {self.tool_call.name} call is not sleeping")
        return self._on_wake(now_ms)

    def deliver(self, outcome: JobOutcome, now_ms: int) -> Step:
        """The server job a `Send(job=...)` asked for is done (or failed)."""
        if self._phase is not Phase.WORKING:
            return Ignored(f"the {self.tool_call.name} call runs no server job")
        return self._on_job_done(outcome, now_ms)

    def abort(self) -> tuple[bytes, ...]:
        """exec_server_control_message.abort for each exec still out; nothing is waited on
        after it. The result is the loop's to write (then `complete_locally` gives its card)."""
        frames = tuple(cards.abort_frame(exec_id) for exec_id in sorted(self._exec_ids))
        self._exec_ids.clear()
        if self._phase in _WAITING:
            self._phase = Phase.ABORTED
        return frames

    def complete_locally(self, result: ToolResultMessage, now_ms: int) -> bytes:
        """tool_call_completed for a call the loop answered itself (unknown tool, invalid
        arguments, canceled, timed out, outcome lost): the card with its args and an error
        result holding `result`'s text. It does not abort: call `abort` for execs still out."""
        return self.complete_with(self._error_card(result.text or "the call was not run"), now_ms)

    def complete_with(self, tc: agent_pb2.ToolCall, now_ms: int) -> bytes:
        """tool_call_completed carrying `tc`, for a call answered without the client."""
        if self._phase is Phase.DONE:
            raise RuntimeError(f"a completion for {self!r} was asked twice: its card is out")
        if self.started_at_ms is None:
            self.started_at_ms = now_ms
        self._phase = Phase.DONE
        return cards.completed_frame(
            self.call_id, self.model_call_id, tc, self.started_at_ms, now_ms
        )

    # -- what each family provides ---------------------------------------------------------

    def _card(self) -> agent_pb2.ToolCall:
        """The typed ToolCall with the call's args and no result."""
        raise NotImplementedError

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        """Put the family's error result holding `text` into `tc`."""
        raise NotImplementedError

    def _first_exec(self) -> bytes:
        raise NotImplementedError

    def _opening_wait(self) -> int | None:
        """Milliseconds to wait before anything is sent (then `_on_wake`), or None: the call
        opens with its first exec."""
        return None

    def _argument_problem(self) -> str | None:
        missing = a.missing_strings(self.args, self.REQUIRED)
        if not missing:
            return None
        return (
            f"Error: the {self.tool_call.name} call is missing the required string "
            f"argument(s) {', '.join(missing)}. Call it again with all required arguments."
        )

    def _answer_now(self, now_ms: int) -> Finished | None:
        """The call's result when the server knows it without the client (GetMcpTools);
        None sends the first exec."""
        return None

    def _on_wake(self, now_ms: int) -> Step:
        raise NotImplementedError

    def _on_job_done(self, outcome: JobOutcome, now_ms: int) -> Step:
        raise NotImplementedError

    def _on_throw(self, error: str, code: str, now_ms: int) -> Step:
        """The client threw on the exec out (`code`: " (E42)" or ""): the call failed."""
        return self._finish_error(
            f"Error: the client could not run the {self.tool_call.name} call{code}: {error}",
            now_ms,
        )

    def _on_stream_close(self, now_ms: int) -> Finished:
        """The exec stream closed while its result was still waited on."""
        return self._finish_error(
            f"Error: the client closed the {self.tool_call.name} exec stream before sending a "
            "result; the call failed.",
            now_ms,
        )

    # -- helpers for the families ----------------------------------------------------------

    def _new_card(self) -> agent_pb2.ToolCall:
        return agent_pb2.ToolCall(tool_call_id=self.tool_call_id)

    def _error_card(self, text: str) -> agent_pb2.ToolCall:
        tc = self._card()
        self._set_error(tc, text)
        return tc

    def _exec(self, field: str, request: Message) -> bytes:
        """Send `request` as the ExecServerMessage oneof `field`, under a new exec id that is
        then waited on."""
        if self._alloc is None:
            raise RuntimeError(f"{self!r} sends an exec before start()")
        exec_id = self._alloc()
        self._exec_ids.add(exec_id)
        esm = agent_pb2.ExecServerMessage(id=exec_id, exec_id=self.tool_call_id)
        getattr(esm, field).CopyFrom(request)
        return cards.exec_frame(esm)

    def _next_exec(self, phase: Phase, field: str, request: Message) -> Send:
        """Move on to a second exec: the first one's answer is in, only the new one counts."""
        self._exec_ids.clear()
        self._phase = phase
        return Send((self._exec(field, request),))

    def _sleep(self, ms: int) -> Send:
        """Wait `ms` with nothing out: the caller wakes the call (`wake`)."""
        self._exec_ids.clear()
        self._phase = Phase.SLEEPING
        return Send(wake_after_ms=ms)

    def _run_job(self, job: ServerJob, frames: tuple[bytes, ...] = ()) -> Send:
        """Wait on the server with nothing out on the client: the caller runs `job`."""
        self._exec_ids.clear()
        self._phase = Phase.WORKING
        return Send(frames, job=job)

    def _finish(
        self,
        text: str,
        tc: agent_pb2.ToolCall,
        now_ms: int,
        *,
        is_error: bool = False,
        images: tuple[ImageContent, ...] = (),
        effect: ToolEffect | None = None,
    ) -> Finished:
        self._phase = Phase.DONE
        self._exec_ids.clear()
        content: tuple[UserContent, ...] = (TextContent(text=text), *images)
        result = ToolResultMessage(
            tool_call_id=self.tool_call.id,
            tool_name=self.tool_call.name,
            content=content,
            is_error=is_error,
        )
        start = self.started_at_ms if self.started_at_ms is not None else now_ms
        card = cards.completed_frame(self.call_id, self.model_call_id, tc, start, now_ms)
        return Finished(result=result, card=card, effect=effect)

    def _finish_error(self, text: str, now_ms: int) -> Finished:
        return self._finish(text, self._error_card(text), now_ms, is_error=True)

    # -- exec control messages -------------------------------------------------------------

    def _feed_control(self, message: agent_pb2.ExecClientControlMessage, now_ms: int) -> Step:
        match message.WhichOneof("message"):
            case "heartbeat":
                if message.heartbeat.id not in self._exec_ids:
                    return Ignored(f"heartbeat for exec {message.heartbeat.id}, not waited on")
                return Send()
            case "throw":
                throw = message.throw
                if throw.id not in self._exec_ids:
                    return Ignored(f"throw for exec {throw.id}, not waited on")
                error = throw.error or "unknown error"
                code = f" ({throw.error_code})" if throw.HasField("error_code") else ""
                return self._on_throw(error, code, now_ms)
            case "stream_close":
                if message.stream_close.id not in self._exec_ids:
                    return Ignored(
                        f"stream_close for exec {message.stream_close.id}, not waited on"
                    )
                return self._on_stream_close(now_ms)
            case _:
                return Ignored("an empty exec control message")
