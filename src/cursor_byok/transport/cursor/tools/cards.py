"""The IDE's card for a tool call: typed `agent_pb2.ToolCall` messages and the interaction
updates that carry them, serialized as frames.

The card is drawn from `partial_tool_call` (a placeholder while the arguments stream), filled
by `tool_call_started`, fed by `tool_call_delta` (Shell output) and closed by
`tool_call_completed`; a card that never gets its completion spins forever.
"""

from __future__ import annotations

import hashlib
import re
from typing import Literal

from ..proto import agent_pb2

__all__ = [
    "abort_frame",
    "completed_frame",
    "exec_frame",
    "placeholder",
    "sanitize_tool_call_id",
    "shell_delta_frame",
    "started_frame",
]

_ID_BAD = re.compile(r"[^a-zA-Z0-9_-]")


def sanitize_tool_call_id(tool_call_id: str) -> str:
    """The model's tool call id in Cursor's charset `^[a-zA-Z0-9_-]+$`. Ids that needed changes
    get a short hash suffix, so two different ids never map to the same one."""
    clean = _ID_BAD.sub("_", tool_call_id)
    if clean == tool_call_id and clean:
        return clean
    digest = hashlib.sha256(tool_call_id.encode()).hexdigest()[:8]
    return f"{clean or 'call'}_{digest}"


def placeholder(card: str, tool_call_id: str) -> agent_pb2.ToolCall:
    """An empty ToolCall of variant `card` (a `ToolCall.tool` oneof field name)."""
    tc = agent_pb2.ToolCall(tool_call_id=sanitize_tool_call_id(tool_call_id))
    getattr(tc, card).SetInParent()
    return tc


def started_frame(call_id: str, model_call_id: str, tc: agent_pb2.ToolCall) -> bytes:
    iu = agent_pb2.InteractionUpdate()
    iu.tool_call_started.call_id = call_id
    iu.tool_call_started.tool_call.CopyFrom(tc)
    iu.tool_call_started.model_call_id = model_call_id
    return agent_pb2.AgentServerMessage(interaction_update=iu).SerializeToString()


def completed_frame(
    call_id: str, model_call_id: str, tc: agent_pb2.ToolCall, started_at_ms: int, now_ms: int
) -> bytes:
    """tool_call_completed, stamping `tc` with its start and end (never before the start)."""
    tc.started_at_ms = max(started_at_ms, 0)
    tc.completed_at_ms = max(now_ms, started_at_ms, 0)
    iu = agent_pb2.InteractionUpdate()
    iu.tool_call_completed.call_id = call_id
    iu.tool_call_completed.tool_call.CopyFrom(tc)
    iu.tool_call_completed.model_call_id = model_call_id
    return agent_pb2.AgentServerMessage(interaction_update=iu).SerializeToString()


def shell_delta_frame(
    call_id: str, model_call_id: str, stream: Literal["stdout", "stderr"], data: str
) -> bytes:
    """A chunk of Shell output for the card."""
    iu = agent_pb2.InteractionUpdate()
    iu.tool_call_delta.call_id = call_id
    iu.tool_call_delta.model_call_id = model_call_id
    delta = iu.tool_call_delta.tool_call_delta.shell_tool_call_delta
    if stream == "stdout":
        delta.stdout.content = data
    else:
        delta.stderr.content = data
    return agent_pb2.AgentServerMessage(interaction_update=iu).SerializeToString()


def task_progress_frame(call_id: str, model_call_id: str, child_update: bytes) -> bytes:
    """A helper's card (a serialized AgentServerMessage of its own run, an interaction
    update) shown inside the parent's Task card: `tool_call_delta.task_tool_call_delta`."""
    child = agent_pb2.AgentServerMessage.FromString(child_update)
    iu = agent_pb2.InteractionUpdate()
    iu.tool_call_delta.call_id = call_id
    iu.tool_call_delta.model_call_id = model_call_id
    delta = iu.tool_call_delta.tool_call_delta.task_tool_call_delta
    delta.interaction_update.CopyFrom(child.interaction_update)
    return agent_pb2.AgentServerMessage(interaction_update=iu).SerializeToString()


def exec_frame(request: agent_pb2.ExecServerMessage) -> bytes:
    return agent_pb2.AgentServerMessage(exec_server_message=request).SerializeToString()


def abort_frame(exec_id: int) -> bytes:
    control = agent_pb2.ExecServerControlMessage(abort=agent_pb2.ExecServerAbort(id=exec_id))
    return agent_pb2.AgentServerMessage(exec_server_control_message=control).SerializeToString()
