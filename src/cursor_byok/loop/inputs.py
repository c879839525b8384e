"""The semantic inputs of the loop. Transports decode their wire messages into these."""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from cursor_byok.llm import types as llm
from cursor_byok.llm.events import ResponseEvent

from .context import DEFAULT_CONTEXT, TurnContext


class _Input(msgspec.Struct, frozen=True, tag_field="input", omit_defaults=True):
    pass


class Start(_Input, frozen=True, tag="start"):
    """A run request: the user's message and the context for this turn."""

    user_message: llm.UserMessage
    context: TurnContext = DEFAULT_CONTEXT


class LLMEvent(_Input, frozen=True, tag="llm_event"):
    """One event of the stream opened for `call_id`."""

    call_id: str
    event: ResponseEvent


class ToolResult(_Input, frozen=True, tag="tool_result"):
    """The client's answer to a tool call, matched by `message.tool_call_id` only."""

    message: llm.ToolResultMessage


class UserMessage(_Input, frozen=True, tag="user_message"):
    """A follow-up user message without new context: starts a turn when idle, steers when busy."""

    message: llm.UserMessage


class Cancel(_Input, frozen=True, tag="cancel"):
    reason: str = "canceled by the user"


Input: TypeAlias = Start | LLMEvent | ToolResult | UserMessage | Cancel

# The same class, for callers that also import the LLM's UserMessage.
UserMessageInput = UserMessage
