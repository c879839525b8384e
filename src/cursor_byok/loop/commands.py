"""What the runner must do next. Plain data: no closures, connections or callables."""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from cursor_byok.llm.types import AssistantMessage, RequestMessages, ToolCall


class _Command(msgspec.Struct, frozen=True, tag_field="command", omit_defaults=True):
    pass


class ContinueLLM(_Command, frozen=True, tag="continue_llm"):
    """Keep reading the current LLM stream."""


class CallLLM(_Command, frozen=True, tag="call_llm"):
    """Open a stream for `request`. A retry reuses the same call_id and exact request."""

    call_id: str
    request: RequestMessages
    messages_hash: str


class CallClient(_Command, frozen=True, tag="call_client"):
    """Run `tool_call` on the client, then feed back one ToolResult for its id."""

    operation_id: str
    tool_call: ToolCall


class WaitInput(_Command, frozen=True, tag="wait_input"):
    """Nothing to do until the next external input."""


class Final(_Command, frozen=True, tag="final"):
    message: AssistantMessage


class Failed(_Command, frozen=True, tag="failed"):
    """The turn failed. `message` describes the failure; it is not part of the history."""

    message: AssistantMessage


class Canceled(_Command, frozen=True, tag="canceled"):
    reason: str


Command: TypeAlias = ContinueLLM | CallLLM | CallClient | WaitInput | Final | Failed | Canceled

CONTINUE_LLM = ContinueLLM()
WAIT_INPUT = WaitInput()
