"""Native values the dialect hands to the runtime. No protobuf in any of them.

`RunRequest` is a decoded run request. `Inbound` is what one client message turned out to be
once the dialect decoded it and matched it to what it answers (`ClientLink.receive`): a closed
union the runtime dispatches on, exhaustively.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ...llm.types import Message, ToolResultMessage, UserMessage
from ...loop.inputs import PlanBuild, ToolEffect
from .context import ClientContext
from .mcp import McpDefinition


class RunAction(enum.StrEnum):
    USER_MESSAGE = "user_message"  # a new turn
    RESUME = "resume"  # continue the conversation's turn where it stands


@dataclass(frozen=True, slots=True)
class ContextRef:
    """A `request_context_parts` blob to fetch with get_blob_args."""

    kind: str  # "rules" | "skills" | "subagents" | "mcps"
    blob_id: bytes
    byte_length: int


@dataclass(frozen=True, slots=True)
class HistoryRefs:
    """Blob ids of the client's checkpoint (`conversation_state`)."""

    root_prompt_blob_ids: tuple[bytes, ...] = ()
    turn_blob_ids: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class RunRequest:
    conversation_id: str
    model_id: str | None
    action: RunAction
    user_message: UserMessage | None
    mode: str
    inline_context: ClientContext | None
    context_refs: tuple[ContextRef, ...] = ()
    history: HistoryRefs = field(default_factory=HistoryRefs)
    inline_history: tuple[Message, ...] = ()
    mcp_tools: tuple[McpDefinition, ...] = ()
    # The client's own system prompt addition (AgentRunRequest.custom_system_prompt): it goes
    # into the turn's context as custom instructions, after our prompt and the rules.
    custom_system_prompt: str | None = None
    # The text the user typed (UserMessage.text), without the attachments decoded around it.
    user_text: str = ""
    # execute_plan_action (the IDE's Build button): the plan to carry out; `user_message` is
    # then None and `mode` is the action's execution_mode.
    build: PlanBuild | None = None


# -- what one client message is, once matched ------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunRequested:
    """A run_request (the first message of every run; a second one is a protocol error)."""

    request: RunRequest


@dataclass(frozen=True, slots=True)
class CancelRequested:
    reason: str


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A user message sent on a run that is already going."""

    message: UserMessage
    context: ClientContext | None = None
    mode: str | None = None


@dataclass(frozen=True, slots=True)
class ResumeRequested:
    pass


@dataclass(frozen=True, slots=True)
class InteractionAnswered:
    """The client's answer to an interaction query the server asked (`id`)."""

    id: int
    kind: str  # the InteractionResponse branch: "ask_question_interaction_response", ...
    fields: dict[str, Any]  # that branch as JSON-compatible values


@dataclass(frozen=True, slots=True)
class BlobReceived:
    """The answer to a get_blob request (`kv_id`); None when the client has no such blob."""

    kv_id: int
    data: bytes | None


@dataclass(frozen=True, slots=True)
class BlobStored:
    """The answer to a set_blob request (`kv_id`)."""

    kv_id: int
    ok: bool


@dataclass(frozen=True, slots=True)
class ContextReceived:
    """The answer to a request_context request (`exec_id`); None when it gave none."""

    exec_id: int
    context: ClientContext | None


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """The tool call `operation_id` goes on; `frames` are to be sent now."""

    operation_id: str
    frames: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """The tool call `operation_id` is over: `result` for the model, `card` for the client,
    `effect` for the loop (a saved plan, an approved mode switch)."""

    operation_id: str
    result: ToolResultMessage
    card: bytes
    effect: ToolEffect | None = None


@dataclass(frozen=True, slots=True)
class Stray:
    """A reply nobody waits for (a late answer, a message a tool machine did not take)."""

    kind: str
    detail: str


@dataclass(frozen=True, slots=True)
class ClientHeartbeat:
    pass


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """A client message this server does not handle (counted per kind, logged once)."""

    kind: str


@dataclass(frozen=True, slots=True)
class Malformed:
    """A client message that cannot be read; `error` says why."""

    error: str


Inbound: TypeAlias = (
    RunRequested
    | CancelRequested
    | FollowUp
    | ResumeRequested
    | InteractionAnswered
    | BlobReceived
    | BlobStored
    | ContextReceived
    | ToolProgress
    | ToolFinished
    | Stray
    | ClientHeartbeat
    | UnknownEvent
    | Malformed
)
