"""Native stream events: what every adapter emits, whatever the provider's wire format.

A stream is `start`, then per content block `*_start`, `*_delta`..., `*_end`, and exactly one
terminal event: `done` (the final AssistantMessage) or `error`. A request that fails before the
provider output anything (a text, thinking or tool-call delta) yields a lone `error` with no
`start`.

`content_index` is a position in the assistant message's content, never a provider index.
`partial` is a live view of the message being assembled (see `PartialView`), shared by every event
of one stream: a consumer that keeps it must snapshot it. It compares by identity; compare event
values with `without_partial`.
"""

from __future__ import annotations

import enum
from typing import Literal, Protocol, TypeAlias

import msgspec

from .types import AssistantMessage, DoneReason, ErrorReason, ToolCall


class PartialView(Protocol):
    """The message accumulated so far. Cheap to hold; `snapshot()` costs O(message size)."""

    def snapshot(self) -> AssistantMessage: ...


class _Event(msgspec.Struct, frozen=True, tag_field="type", omit_defaults=True):
    pass


class StartEvent(_Event, frozen=True, tag="start"):
    partial: PartialView | None = msgspec.field(default=None)


class TextStart(_Event, frozen=True, tag="text_start"):
    content_index: int
    partial: PartialView | None = None


class TextDelta(_Event, frozen=True, tag="text_delta"):
    content_index: int
    delta: str
    partial: PartialView | None = None


class TextEnd(_Event, frozen=True, tag="text_end"):
    content_index: int
    content: str
    partial: PartialView | None = None


class ThinkingStart(_Event, frozen=True, tag="thinking_start"):
    content_index: int
    partial: PartialView | None = None


class ThinkingDelta(_Event, frozen=True, tag="thinking_delta"):
    content_index: int
    delta: str
    partial: PartialView | None = None


class ThinkingEnd(_Event, frozen=True, tag="thinking_end"):
    content_index: int
    content: str
    partial: PartialView | None = None


class ToolCallStart(_Event, frozen=True, tag="toolcall_start"):
    content_index: int
    id: str
    name: str
    partial: PartialView | None = None


class ToolCallDelta(_Event, frozen=True, tag="toolcall_delta"):
    content_index: int
    delta: str  # raw JSON text fragment of the arguments
    partial: PartialView | None = None


class ToolCallEnd(_Event, frozen=True, tag="toolcall_end"):
    content_index: int
    tool_call: ToolCall
    partial: PartialView | None = None


class DoneEvent(_Event, frozen=True, tag="done"):
    reason: DoneReason
    message: AssistantMessage


class ErrorKind(enum.StrEnum):
    """What a provider's error means, where the loop acts on it (each adapter recognises its
    own provider's bodies)."""

    CONTEXT_LENGTH = "context_length"  # the request is over the model's context window


class ContextLimit(msgspec.Struct, frozen=True, omit_defaults=True):
    """What a provider said about its window when it refused a request as too long, where its
    answer gives the numbers (each adapter reads its own provider's shape). 0: not given."""

    window: int = 0  # the provider's context window, in its tokens
    prompt: int = 0  # its count of the refused request


class ErrorEvent(_Event, frozen=True, tag="error"):
    """Terminal failure. `message` carries what was received (stop_reason error/aborted and
    `error_message`); it is never appended to history."""

    reason: ErrorReason
    message: AssistantMessage
    # Facts for a retry policy outside the loop; meaningful only when no other event came first.
    http_status: int | None = None
    retry_after_ms: int | None = None
    transient: bool = False
    kind: ErrorKind | None = None
    context_limit: ContextLimit | None = None  # with kind CONTEXT_LENGTH, when given

    @property
    def error_message(self) -> str:
        return self.message.error_message or self.reason


ResponseEvent: TypeAlias = (
    StartEvent
    | TextStart
    | TextDelta
    | TextEnd
    | ThinkingStart
    | ThinkingDelta
    | ThinkingEnd
    | ToolCallStart
    | ToolCallDelta
    | ToolCallEnd
    | DoneEvent
    | ErrorEvent
)
TerminalEvent: TypeAlias = DoneEvent | ErrorEvent
EventType: TypeAlias = Literal[
    "start",
    "text_start",
    "text_delta",
    "text_end",
    "thinking_start",
    "thinking_delta",
    "thinking_end",
    "toolcall_start",
    "toolcall_delta",
    "toolcall_end",
    "done",
    "error",
]


def is_terminal(event: ResponseEvent) -> bool:
    return isinstance(event, DoneEvent | ErrorEvent)


def without_partial(event: ResponseEvent) -> ResponseEvent:
    """The event as a plain value (for comparison, logging and storage)."""
    if getattr(event, "partial", None) is None:
        return event
    return msgspec.structs.replace(event, partial=None)
