"""Shared helpers of the loop tests: building inputs and feeding them to `transition`.

The loop driven the way the runtime drives it is tested with the production runtime itself
(tests/runtime/test_run.py, test_run_conversations.py), not with a re-implementation here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from cursor_byok.llm.events import ResponseEvent
from cursor_byok.llm.faux import FauxResponse, script_events
from cursor_byok.llm.settings import ModelSettings
from cursor_byok.llm.types import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
)
from cursor_byok.llm.types import UserMessage as LLMUserMessage
from cursor_byok.loop import (
    Input,
    LLMEvent,
    RuntimeState,
    Start,
    Transition,
    TurnContext,
    transition,
)

SETTINGS = ModelSettings(model="faux-model")


def user(text: str) -> LLMUserMessage:
    return LLMUserMessage.of_text(text)


def start(text: str = "hello", context: TurnContext | None = None) -> Start:
    return Start(user_message=user(text), context=context or TurnContext())


def result(
    call_id: str, text: str = "ok", *, name: str = "Read", error: bool = False
) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call_id, tool_name=name, content=(TextContent(text=text),), is_error=error
    )


def feed(state: RuntimeState, inputs: Iterable[Input]) -> list[Transition]:
    out: list[Transition] = []
    for item in inputs:
        t = transition(state, item)
        out.append(t)
        state = t.state
    return out


def stream(
    state: RuntimeState, response: FauxResponse, *, chunk_size: int = 3
) -> tuple[list[Transition], list[ResponseEvent]]:
    """Feed one scripted response to the call the state waits for."""
    cmd_call = state.committed.waiting
    assert cmd_call is not None and hasattr(cmd_call, "call_id")
    call_id = cmd_call.call_id
    events = script_events(response, chunk_size=chunk_size)
    return feed(state, [LLMEvent(call_id=call_id, event=e) for e in events]), events


def tool_call(call_id: str, name: str = "Read", **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments or {"path": f"{call_id}.txt"})


def assistant_messages(messages: Sequence[object]) -> list[AssistantMessage]:
    return [m for m in messages if isinstance(m, AssistantMessage)]
