"""Shared helpers for the tool machine tests: an exec id allocator, starting a call, client
replies, and decoding the frames a machine returns."""

from __future__ import annotations

from typing import Any

from cursor_byok.llm.types import ToolCall
from cursor_byok.transport.cursor.mcp import McpTool
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import (
    Finished,
    Ignored,
    Send,
    Started,
    Step,
    ToolMachine,
    machine_for,
)

T0 = 1_700_000_000_000
CALL_ID = "llm1-0"
MODEL_CALL_ID = "conv:1:llm1"


class Ids:
    def __init__(self, start: int = 1) -> None:
        self.next = start

    def __call__(self) -> int:
        n = self.next
        self.next += 1
        return n


def decode(frames: tuple[bytes, ...]) -> list[a.AgentServerMessage]:
    return [a.AgentServerMessage.FromString(f) for f in frames]


def machine(
    name: str,
    args: dict[str, Any],
    mcp: McpTool | None = None,
    call_id: str = "toolu_1",
    **options: Any,
) -> ToolMachine:
    """`options`: machine_for's other keywords (vision, mcp_directory, ...)."""
    return machine_for(
        ToolCall(id=call_id, name=name, arguments=args),
        call_id=CALL_ID,
        model_call_id=MODEL_CALL_ID,
        conversation_id="conv",
        mcp=mcp,
        **options,
    )


def begin(
    name: str,
    args: dict[str, Any],
    mcp: McpTool | None = None,
    call_id: str = "toolu_1",
    **options: Any,
) -> tuple[ToolMachine, Started, Ids]:
    ids = Ids()
    tool = machine(name, args, mcp, call_id, **options)
    return tool, tool.start(ids, T0), ids


def start(
    name: str,
    args: dict[str, Any],
    mcp: McpTool | None = None,
    call_id: str = "toolu_1",
    **options: Any,
) -> tuple[ToolMachine, list[a.AgentServerMessage], Ids]:
    tool, started, ids = begin(name, args, mcp, call_id, **options)
    assert started.early is None, started.early
    return tool, decode(started.frames), ids


def reply(exec_id: int, **oneof: Any) -> a.ExecClientMessage:
    return a.ExecClientMessage(id=exec_id, **oneof)


def stream(exec_id: int, **event: Any) -> a.ExecClientMessage:
    return reply(exec_id, shell_stream=a.ShellStream(**event))


def close(exec_id: int) -> a.ExecClientControlMessage:
    return a.ExecClientControlMessage(stream_close=a.ExecClientStreamClose(id=exec_id))


def heartbeat(exec_id: int) -> a.ExecClientControlMessage:
    return a.ExecClientControlMessage(heartbeat=a.ExecClientHeartbeat(id=exec_id))


def finished(step: Step | None) -> Finished:
    assert isinstance(step, Finished), step
    return step


def sent(step: Step) -> list[a.AgentServerMessage]:
    """The frames of a Send, decoded."""
    assert isinstance(step, Send), step
    return decode(step.frames)


def ignored(step: Step) -> str:
    assert isinstance(step, Ignored), step
    assert step.reason
    return step.reason


def completed(done: Finished) -> a.ToolCall:
    """The card of a Finished: tool_call_completed for this call, stamped from T0."""
    return completed_card(done.card)


def completed_card(card: bytes, started_at_ms: int = T0) -> a.ToolCall:
    update = a.AgentServerMessage.FromString(card).interaction_update
    assert update.WhichOneof("message") == "tool_call_completed"
    c = update.tool_call_completed
    assert c.call_id == CALL_ID and c.model_call_id == MODEL_CALL_ID
    assert c.tool_call.started_at_ms == started_at_ms
    assert c.tool_call.completed_at_ms >= started_at_ms
    return c.tool_call


def started_card(out: list[a.AgentServerMessage]) -> a.ToolCall:
    update = out[0].interaction_update
    assert update.WhichOneof("message") == "tool_call_started"
    s = update.tool_call_started
    assert s.call_id == CALL_ID and s.model_call_id == MODEL_CALL_ID
    assert s.tool_call.tool_call_id == "toolu_1"
    return s.tool_call


def esm(out: list[a.AgentServerMessage], i: int = 1) -> a.ExecServerMessage:
    assert out[i].WhichOneof("message") == "exec_server_message"
    return out[i].exec_server_message
