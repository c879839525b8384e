"""One run's conversation with its client, on the dialect's side: ids and what they answer.

The server asks the client for things over the run's stream: blobs (KV ids), its context and
tool executions (exec ids), interaction queries (interaction ids). `ClientLink` allocates the
ids, builds the requests, keeps the tool machines of the calls in flight, and turns each client
message into one native `Inbound` value, matched to what it answers:

- a reply to a tool's exec goes to that tool's machine and comes back as `ToolProgress` (frames
  to send, the call goes on) or `ToolFinished` (its result and card);
- an interaction response to a tool's query (CreatePlan, AskQuestion, SwitchMode) goes to that
  tool's machine the same way; one to a query the runtime asked itself is
  `InteractionAnswered`;
- a reply to `request_context_args` is `ContextReceived`;
- KV replies are `BlobReceived` / `BlobStored`;
- anything that answers nothing awaited is `Stray`, a message the dialect cannot read
  `Malformed`: never a silent drop.

Sans-I/O: the caller sends the frames and waits for answers; the clock is injected.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import assert_never

from google.protobuf.message import DecodeError  # type: ignore[import-untyped,unused-ignore]

from ...llm.types import ToolCall, ToolResultMessage
from ...loop.context import McpRoute, Subagents
from ...loop.todos import TodoUpdate
from ...web.page_text import DEFAULT_MAX_TEXT_CHARS
from ...web.types import JobOutcome
from . import encode
from .context import decode_request_context
from .decode import DialectError, ExecControl, ExecReply, KvReply, decode_client_message
from .mcp import McpDirectory, McpTool
from .mcp_files import read_exec, read_text
from .proto import agent_pb2
from .tools import (
    Finished,
    Ignored,
    QueryMachine,
    Send,
    Started,
    TodoWriteMachine,
    ToolMachine,
    machine_for,
)
from .values import (
    BlobReceived,
    BlobStored,
    CancelRequested,
    ClientHeartbeat,
    ContextReceived,
    DefinitionRead,
    FollowUp,
    Inbound,
    InteractionAnswered,
    Malformed,
    ResumeRequested,
    RunRequested,
    Stray,
    ToolFinished,
    ToolProgress,
    UnknownEvent,
)

__all__ = ["ClientLink", "parse_client_message"]

# A client's GetBlobResult.error message is logged; this much of it.
MAX_BLOB_ERROR_CHARS = 200


def parse_client_message(payload: bytes) -> agent_pb2.AgentClientMessage:
    """Raises ValueError when `payload` is not an AgentClientMessage."""
    try:
        return agent_pb2.AgentClientMessage.FromString(payload)
    except DecodeError:
        raise ValueError("not an AgentClientMessage") from None


class ClientLink:
    def __init__(
        self,
        *,
        conversation_id: str,
        now_ms: Callable[[], int],
        vision: bool = False,
        page_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    ) -> None:
        self.conversation_id = conversation_id
        self.page_text_chars = page_text_chars  # WebFetch's limit ([web_fetch] max_text_chars)
        # Whether the run's model sees images (a Read of an image then attaches it); the
        # runtime sets it once the model is known.
        self.vision = vision
        self.model_id = ""  # the run's model id, for a server job's per-model settings
        self._now_ms = now_ms
        self._exec_ids = 0
        self._kv_ids = 0
        self._interaction_ids = 0
        self._context_execs: set[int] = set()
        self._definition_execs: set[int] = set()  # reads of MCP definition files
        self._tools: dict[str, ToolMachine] = {}  # operation id → its machine
        self._exec_owner: dict[int, str] = {}  # exec id → operation id
        self._query_owner: dict[int, str] = {}  # interaction id → operation id (tool queries)

    # -- client messages ------------------------------------------------------------------

    def receive(self, message: bytes | object) -> Inbound:
        """What one client message is (its bytes, or the AgentClientMessage the transport
        already parsed)."""
        if isinstance(message, bytes | bytearray | memoryview):
            try:
                message = parse_client_message(bytes(message))
            except ValueError as exc:
                return Malformed(str(exc))
        if not isinstance(message, agent_pb2.AgentClientMessage):
            return Malformed(f"not an AgentClientMessage: {type(message).__name__}")
        if message.WhichOneof("message") == "interaction_response":
            owner = self._query_owner.get(message.interaction_response.id)
            if owner is not None:
                return self._query_reply(owner, message.interaction_response)
        try:
            decoded = decode_client_message(message)
        except DialectError as exc:
            return Malformed(str(exc))
        match decoded:
            case ExecReply() | ExecControl():
                return self._exec(decoded)
            case KvReply():
                return self._kv(decoded)
            case (
                RunRequested()
                | CancelRequested()
                | FollowUp()
                | ResumeRequested()
                | InteractionAnswered()
                | ClientHeartbeat()
                | UnknownEvent()
            ):
                return decoded
            case _:
                assert_never(decoded)

    def _kv(self, reply: KvReply) -> Inbound:
        m = reply.message
        kind = m.WhichOneof("message")
        if kind == "get_blob_result":
            r = m.get_blob_result
            ok = not r.HasField("error") and r.HasField("blob_data")
            error = ""
            if r.HasField("error"):
                # logged: one line, bounded, whatever the client wrote
                text = r.error.message[:MAX_BLOB_ERROR_CHARS]
                error = "".join(c if c.isprintable() else " " for c in text) or "no message"
            return BlobReceived(
                kv_id=reply.id, data=bytes(r.blob_data) if ok else None, error=error
            )
        if kind == "set_blob_result":
            return BlobStored(kv_id=reply.id, ok=not m.set_blob_result.HasField("error"))
        return Stray("kv", f"kv reply {reply.id} carries nothing")

    def _exec(self, reply: ExecReply | ExecControl) -> Inbound:
        exec_id = reply.id
        if exec_id in self._context_execs:
            return self._context_reply(reply)
        if exec_id in self._definition_execs:
            return self._definition_reply(reply)
        operation_id = self._exec_owner.get(exec_id)
        machine = self._tools.get(operation_id) if operation_id is not None else None
        if operation_id is None or machine is None:
            what = reply.kind if isinstance(reply, ExecControl) else "reply"
            return Stray("exec", f"exec {what} for id {exec_id}, which nothing waits on")
        return self._step(operation_id, machine, machine.feed(reply.message, self._now_ms()))

    def wake_tool(self, operation_id: str) -> Inbound:
        """The time a `ToolProgress.wake_after_ms` asked for has passed."""
        machine = self._tools.get(operation_id)
        if machine is None:
            return Stray("wake", f"tool call {operation_id} is over")
        return self._step(operation_id, machine, machine.wake(self._now_ms()))

    def deliver_job(self, operation_id: str, outcome: JobOutcome) -> Inbound:
        """The server job a `ToolProgress.job` asked for is done."""
        machine = self._tools.get(operation_id)
        if machine is None:
            return Stray("job", f"tool call {operation_id} is over")
        return self._step(operation_id, machine, machine.deliver(outcome, self._now_ms()))

    def _step(
        self, operation_id: str, machine: ToolMachine, step: Send | Finished | Ignored
    ) -> Inbound:
        match step:
            case Send(frames=frames, wake_after_ms=wake, job=job):
                self._own(operation_id, machine)
                return ToolProgress(operation_id, frames, wake, job)
            case Finished(result=result, card=card, effect=effect):
                self._forget(operation_id)
                return ToolFinished(operation_id, result, card, effect)
            case Ignored(reason=reason):
                return Stray("exec", f"{machine.tool_call.name} call {operation_id}: {reason}")
            case _:
                assert_never(step)

    def _query_reply(self, operation_id: str, response: agent_pb2.InteractionResponse) -> Inbound:
        machine = self._tools.get(operation_id)
        if not isinstance(machine, QueryMachine):
            self._query_owner.pop(response.id, None)
            return Stray("interaction", f"response {response.id}, which nothing waits on")
        step = machine.answer(response, self._now_ms())
        match step:
            case Finished(result=result, card=card, effect=effect):
                self._forget(operation_id)
                return ToolFinished(operation_id, result, card, effect)
            case Ignored(reason=reason):
                return Stray(
                    "interaction", f"{machine.tool_call.name} call {operation_id}: {reason}"
                )
            case Send(frames=frames, wake_after_ms=wake, job=job):
                # An approval may send the exec it allowed (WebFetch): its exec id was
                # allocated (and so owned) through `start_tool`'s allocator.
                return ToolProgress(operation_id, frames, wake, job)
            case _:
                assert_never(step)

    def _context_reply(self, reply: ExecReply | ExecControl) -> Inbound:
        if isinstance(reply, ExecControl):
            if reply.kind != "throw":
                return Stray("exec", f"request_context {reply.kind} after its answer")
            self._context_execs.discard(reply.id)
            return ContextReceived(exec_id=reply.id, context=None)
        self._context_execs.discard(reply.id)
        m = reply.message
        if m.WhichOneof("message") != "request_context_result":
            return ContextReceived(exec_id=reply.id, context=None)
        r = m.request_context_result
        if r.WhichOneof("result") != "success":
            return ContextReceived(exec_id=reply.id, context=None)
        return ContextReceived(
            exec_id=reply.id, context=decode_request_context(r.success.request_context)
        )

    def _definition_reply(self, reply: ExecReply | ExecControl) -> Inbound:
        if isinstance(reply, ExecControl):
            if reply.kind != "throw":
                return Stray("exec", f"definition read {reply.kind} after its answer")
            self._definition_execs.discard(reply.id)
            return DefinitionRead(exec_id=reply.id, text=None, error=reply.error or "it failed")
        self._definition_execs.discard(reply.id)
        text, error = read_text(reply.message)
        return DefinitionRead(exec_id=reply.id, text=text, error=error)

    # -- requests to the client -------------------------------------------------------------

    def _next_exec_id(self) -> int:
        self._exec_ids += 1
        return self._exec_ids

    def _next_kv_id(self) -> int:
        self._kv_ids += 1
        return self._kv_ids

    def next_interaction_id(self) -> int:
        self._interaction_ids += 1
        return self._interaction_ids

    def get_blob(self, blob_id: bytes) -> tuple[int, bytes]:
        """(kv id, the get_blob_args frame)."""
        kv_id = self._next_kv_id()
        return kv_id, encode.get_blob(kv_id, blob_id)

    def set_blob(self, data: bytes) -> tuple[int, bytes]:
        """(kv id, the set_blob_args frame); the blob's id is the SHA-256 of `data`."""
        kv_id = self._next_kv_id()
        return kv_id, encode.set_blob(kv_id, data)

    def read_definition(self, path: str) -> tuple[int, bytes]:
        """(exec id, the read_args frame) for an MCP tool's definition file."""
        exec_id = self._next_exec_id()
        self._definition_execs.add(exec_id)
        return exec_id, read_exec(exec_id, path)

    def request_context(self) -> tuple[int, bytes]:
        """(exec id, the request_context_args frame)."""
        exec_id = self._next_exec_id()
        self._context_execs.add(exec_id)
        return exec_id, encode.request_context_exec(exec_id)

    # -- tools ------------------------------------------------------------------------------

    def _machine(
        self,
        call: ToolCall,
        llm_call_id: str,
        content_index: int,
        route: McpRoute | None,
        terminals_folder: str | None = None,
        budget_ms: int | None = None,
        mode: str = "agent",
        keep_stdin: bool = False,
        mcp_directory: McpDirectory | None = None,
        workspace_root: str | None = None,
        subagents: Subagents | None = None,
    ) -> ToolMachine:
        return machine_for(
            call,
            call_id=encode.call_id_for(llm_call_id, content_index),
            model_call_id=llm_call_id,
            conversation_id=self.conversation_id,
            mcp=McpTool.of_route(route) if route is not None else None,
            terminals_folder=terminals_folder,
            budget_ms=budget_ms,
            vision=self.vision,
            mode=mode,
            keep_stdin=keep_stdin,
            mcp_directory=mcp_directory,
            model=self.model_id,
            workspace_root=workspace_root,
            page_text_chars=self.page_text_chars,
            subagents=subagents,
        )

    def tool_running(self, operation_id: str) -> bool:
        return operation_id in self._tools

    def waits_on_person(self, operation_id: str) -> bool:
        """Whether the call in flight waits on a person (a question form, an approval)."""
        machine = self._tools.get(operation_id)
        return machine is not None and machine.WAITS_ON_PERSON

    def start_tool(
        self,
        operation_id: str,
        call: ToolCall,
        *,
        llm_call_id: str,
        content_index: int,
        route: McpRoute | None = None,
        terminals_folder: str | None = None,
        budget_ms: int | None = None,
        mode: str = "agent",
        keep_stdin: bool = False,
        mcp_directory: McpDirectory | None = None,
        workspace_root: str | None = None,
        subagents: Subagents | None = None,
    ) -> Started:
        """tool_call_started and the first exec (or interaction query) of the call; `early`
        when the call cannot run and its answer is known at once (nothing was sent).
        `terminals_folder` is the client's, `budget_ms` the runner's deadline for the call,
        `mcp_directory` the turn's MCP servers and routes (the meta-tools resolve with it)."""
        machine = self._machine(
            call,
            llm_call_id,
            content_index,
            route,
            terminals_folder,
            budget_ms,
            mode,
            keep_stdin,
            mcp_directory,
            workspace_root,
            subagents,
        )
        self._tools[operation_id] = machine

        def alloc_exec() -> int:
            exec_id = self._next_exec_id()
            self._exec_owner[exec_id] = operation_id
            return exec_id

        def alloc_query() -> int:
            query_id = self.next_interaction_id()
            self._query_owner[query_id] = operation_id
            return query_id

        started = machine.start(alloc_exec, self._now_ms(), alloc_query_id=alloc_query)
        if started.early is not None:
            self._forget(operation_id)
        return started

    def abort_tool(self, operation_id: str) -> tuple[bytes, ...]:
        """The abort frames of a call in flight (none when it is not); it is forgotten."""
        machine = self._tools.get(operation_id)
        if machine is None:
            return ()
        frames = machine.abort()
        self._forget(operation_id)
        return frames

    def local_card(
        self,
        call: ToolCall,
        result: ToolResultMessage,
        *,
        llm_call_id: str,
        content_index: int,
        route: McpRoute | None = None,
        todos: TodoUpdate | None = None,
    ) -> tuple[bytes, ...]:
        """The card frames of a call the loop answered itself: its completion (an error card),
        or for a TodoWrite it applied (`todos`) the started and completed cards of the list."""
        machine = self._machine(call, llm_call_id, content_index, route)
        if todos is not None and isinstance(machine, TodoWriteMachine):
            return machine.complete_todos(todos, result, self._now_ms())
        return (machine.complete_locally(result, self._now_ms()),)

    def _own(self, operation_id: str, machine: ToolMachine) -> None:
        for exec_id in machine.exec_ids:
            self._exec_owner[exec_id] = operation_id

    def _forget(self, operation_id: str) -> None:
        self._tools.pop(operation_id, None)
        for exec_id in [e for e, op in self._exec_owner.items() if op == operation_id]:
            del self._exec_owner[exec_id]
        for query_id in [q for q, op in self._query_owner.items() if op == operation_id]:
            del self._query_owner[query_id]
