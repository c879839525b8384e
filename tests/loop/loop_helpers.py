"""Shared helpers of the loop tests: feeding inputs and a recursive async driver."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cursor_byok.llm.events import ResponseEvent
from cursor_byok.llm.faux import FauxLLM, FauxResponse, script_events
from cursor_byok.llm.settings import ModelSettings
from cursor_byok.llm.stream import ResponseStream
from cursor_byok.llm.types import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
)
from cursor_byok.llm.types import UserMessage as LLMUserMessage
from cursor_byok.loop import (
    CallClient,
    CallLLM,
    Canceled,
    Command,
    ContinueLLM,
    Failed,
    Final,
    Input,
    LLMEvent,
    RuntimeState,
    Start,
    ToolResult,
    Transition,
    TurnContext,
    WaitInput,
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


ToolRunner = Callable[[ToolCall], ToolResultMessage]


def echo_tool(call: ToolCall) -> ToolResultMessage:
    return result(call.id, f"{call.name} ran with {sorted(call.arguments.items())}", name=call.name)


@dataclass
class Driver:
    """The design's `run` / `run_command` / `read_llm`, recursive and async, over an LLM.

    CallClient only records the command (the client runs the tool later); the test feeds the
    result back with another `run`, as the transport does for a Bidi append."""

    llm: FauxLLM
    published: list[ResponseEvent] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)
    outbox: list[CallClient] = field(default_factory=list)
    streams: list[ResponseStream] = field(default_factory=list)

    def _publish(self, t: Transition) -> None:
        self.published.extend(t.emit)
        if not isinstance(t.command, ContinueLLM):
            self.commands.append(t.command)

    async def run(self, state: RuntimeState, item: Input) -> Transition:
        t = transition(state, item)
        self._publish(t)
        if isinstance(t.command, Final | Failed | Canceled | WaitInput):
            return t
        return await self.run_command(t.state, t.command)

    async def run_command(self, state: RuntimeState, command: Command) -> Transition:
        match command:
            case CallLLM():
                s = self.llm.call(command.request, SETTINGS)
                self.streams.append(s)
                return await self.read_llm(state, command.call_id, s)
            case CallClient():
                self.outbox.append(command)
                return Transition(state, (), WaitInput())
            case WaitInput() | Final() | Failed() | Canceled():
                return Transition(state, (), command)
            case ContinueLLM():
                raise AssertionError("ContinueLLM without a stream")

    async def read_llm(self, state: RuntimeState, call_id: str, s: ResponseStream) -> Transition:
        event = await s.recv()
        t = transition(state, LLMEvent(call_id=call_id, event=event))
        self._publish(t)
        if isinstance(t.command, ContinueLLM):
            return await self.read_llm(t.state, call_id, s)
        return await self.run_command(t.state, t.command)

    async def converse(
        self, state: RuntimeState, first: Input, tool: ToolRunner = echo_tool
    ) -> Transition:
        """Run `first`, then answer every client call with `tool` until the turn ends."""
        t = await self.run(state, first)
        while isinstance(t.command, WaitInput) and self.outbox:
            call = self.outbox.pop(0)
            t = await self.run(t.state, ToolResult(message=tool(call.tool_call)))
        return t


def assistant_messages(messages: Sequence[object]) -> list[AssistantMessage]:
    return [m for m in messages if isinstance(m, AssistantMessage)]
