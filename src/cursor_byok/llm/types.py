"""The native message model every provider adapter speaks.

Mirrors pi-ai's model: three message roles, four content block kinds, one usage record and one stop
reason set. Values are frozen msgspec structs so a message, once built, is never edited; their
canonical bytes (see `canonical.py`) are what history, hashes and prefix caches rest on.

Optional fields default to "absent" and are omitted from the canonical encoding, so adding a new
optional field later does not change the bytes of messages stored before it existed.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec


class _Value(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """Base of every native value: immutable, absent defaults left out of the encoding."""


class _Block(_Value, frozen=True, tag_field="type"):
    pass


class TextContent(_Block, frozen=True, tag="text"):
    text: str
    # Opaque provider bytes tied to this text (Responses message id/phase, Gemini thoughtSignature).
    signature: str | None = None


class ThinkingContent(_Block, frozen=True, tag="thinking"):
    thinking: str
    # Opaque, replayed byte-for-byte to the provider and model that produced it.
    signature: str | None = None
    redacted: bool = False


class ImageContent(_Block, frozen=True, tag="image"):
    data: str  # base64
    mime_type: str


class ToolCall(_Block, frozen=True, tag="toolCall"):
    id: str
    name: str
    arguments: dict[str, Any] = {}
    thought_signature: str | None = None
    # Set when the model's final argument text was not a JSON object: the raw text is kept so
    # the failure can be reported instead of silently running the tool with `{}`.
    arguments_error: str | None = None
    raw_arguments: str | None = None


UserContent: TypeAlias = TextContent | ImageContent
AssistantContent: TypeAlias = TextContent | ThinkingContent | ToolCall
StopReason: TypeAlias = Literal["stop", "length", "toolUse", "error", "aborted"]
DoneReason: TypeAlias = Literal["stop", "length", "toolUse"]
ErrorReason: TypeAlias = Literal["error", "aborted"]


class Usage(_Value, frozen=True):
    """Token counts of one response. `input` excludes cache reads and writes; `output` includes
    reasoning, which is also reported on its own."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            reasoning=self.reasoning + other.reasoning,
        )


ZERO_USAGE = Usage()


class _Message(_Value, frozen=True, tag_field="role"):
    pass


class UserMessage(_Message, frozen=True, tag="user"):
    content: tuple[UserContent, ...]

    @classmethod
    def of_text(cls, text: str) -> UserMessage:
        return cls(content=(TextContent(text=text),))

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.content if isinstance(p, TextContent))


class AssistantMessage(_Message, frozen=True, tag="assistant"):
    content: tuple[AssistantContent, ...]
    api: str
    provider: str
    model: str
    usage: Usage = ZERO_USAGE
    stop_reason: StopReason = "stop"
    error_message: str | None = None
    response_id: str | None = None
    # The model id the server echoed, only when it differs from the one requested.
    response_model: str | None = None

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextContent))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolCall))


class ToolResultMessage(_Message, frozen=True, tag="toolResult"):
    tool_call_id: str
    tool_name: str
    content: tuple[UserContent, ...]
    is_error: bool = False

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.content if isinstance(p, TextContent))


Message: TypeAlias = UserMessage | AssistantMessage | ToolResultMessage


class ToolDefinition(_Value, frozen=True):
    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema of the arguments object


class RequestMessages(_Value, frozen=True):
    """Everything a model call needs. `messages` is the conversation history (append-only);
    `system_prompt` and `tools` are rebuilt for each request."""

    system_prompt: str
    messages: tuple[Message, ...]
    tools: tuple[ToolDefinition, ...] = ()
