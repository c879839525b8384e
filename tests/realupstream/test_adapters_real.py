"""Our adapters against a real model: llama-server with SmolLM2-135M, over real HTTP.

The same native request goes through openai-chat (/v1/chat/completions), anthropic
(/v1/messages) and openai-responses (/v1/responses); a primed history makes the model call a
tool deterministically; closing a stream mid-answer aborts it.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from cursor_byok.llm.anthropic import AnthropicAdapter
from cursor_byok.llm.events import DoneEvent, ErrorEvent, ResponseEvent, StartEvent, TextDelta
from cursor_byok.llm.http import HttpAdapter
from cursor_byok.llm.openai_chat import OpenAIChatAdapter
from cursor_byok.llm.openai_responses import OpenAIResponsesAdapter
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.types import (
    AssistantMessage,
    RequestMessages,
    TextContent,
    ToolDefinition,
    UserMessage,
)

from .conftest import (
    TOOL_CALL_EXPECTED_ARGS,
    TOOL_CALL_EXPECTED_NAME,
    TOOL_CALL_PRIMER_TEXT,
    TOOL_CALL_SYSTEM,
    LlamaServer,
)

ADAPTERS: dict[str, tuple[type[HttpAdapter], str]] = {
    "openai-chat": (OpenAIChatAdapter, "/v1"),
    "anthropic": (AnthropicAdapter, ""),
    "openai-responses": (OpenAIResponsesAdapter, "/v1"),
}


def adapter(server: LlamaServer, api: str) -> HttpAdapter:
    cls, suffix = ADAPTERS[api]
    return cls(ProviderSettings(name="llama", api=api, base_url=server.base_url + suffix))  # type: ignore[arg-type]


async def collect(stream: object, limit_s: float = 60) -> list[ResponseEvent]:
    events: list[ResponseEvent] = []
    async with asyncio.timeout(limit_s):
        while True:
            event = await stream.recv()  # type: ignore[attr-defined]
            events.append(event)
            if isinstance(event, DoneEvent | ErrorEvent):
                return events


GREETING = RequestMessages(
    system_prompt="You are a friendly assistant. Answer in one short sentence.",
    messages=(UserMessage.of_text("Say hello to Alice."),),
)


@pytest.mark.parametrize("api", list(ADAPTERS))
async def test_streamed_text(llama_server: LlamaServer, api: str) -> None:
    llm = adapter(llama_server, api)
    settings = ModelSettings(model=llama_server.model, max_output_tokens=40, temperature=0.0)
    events = await collect(llm.call(GREETING, settings))
    await llm.aclose()
    assert isinstance(events[0], StartEvent)
    done = events[-1]
    assert isinstance(done, DoneEvent), events[-1]
    assert done.reason in ("stop", "length")
    deltas = [e.delta for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1 and "".join(deltas) == done.message.text
    assert done.message.text.strip()
    assert done.message.usage.output > 0 and done.message.usage.input > 0
    assert done.message.api == api and done.message.provider == "llama"


@pytest.mark.parametrize("api", list(ADAPTERS))
async def test_one_tool_call(llama_server: LlamaServer, api: str) -> None:
    request = RequestMessages(
        system_prompt=TOOL_CALL_SYSTEM,
        messages=(
            UserMessage.of_text("What is the weather in London?"),
            AssistantMessage(
                content=(TextContent(text=TOOL_CALL_PRIMER_TEXT),),
                api=api,
                provider="llama",
                model=llama_server.model,
            ),
            UserMessage.of_text("What is the weather in Paris?"),
        ),
        tools=(
            ToolDefinition(
                name="get_weather",
                description="Get the current weather for a city.",
                parameters={
                    "type": "object",
                    "properties": {"city": {"type": "string", "description": "City name"}},
                    "required": ["city"],
                },
            ),
        ),
    )
    settings = ModelSettings(
        model=llama_server.model, max_output_tokens=64, temperature=0.0, extra_body={"seed": 1}
    )
    llm = adapter(llama_server, api)
    events = await collect(llm.call(request, settings))
    await llm.aclose()
    done = events[-1]
    assert isinstance(done, DoneEvent), done
    assert done.reason == "toolUse"
    assert len(done.message.tool_calls) == 1, done.message.tool_calls
    (call,) = done.message.tool_calls
    assert call.name == TOOL_CALL_EXPECTED_NAME
    assert call.arguments == TOOL_CALL_EXPECTED_ARGS
    assert call.arguments_error is None and call.id


async def test_abort_mid_stream(llama_server: LlamaServer) -> None:
    llm = adapter(llama_server, "openai-chat")
    request = RequestMessages(
        system_prompt="You are a storyteller.",
        messages=(UserMessage.of_text("Tell a very long story about a dragon and a knight."),),
    )
    settings = ModelSettings(model=llama_server.model, max_output_tokens=512, temperature=0.7)
    stream = llm.call(request, settings)
    deltas = 0
    async with asyncio.timeout(60):
        while deltas < 3:
            if isinstance(await stream.recv(), TextDelta):
                deltas += 1
    t0 = asyncio.get_running_loop().time()
    await stream.aclose()
    event = await stream.recv()
    assert isinstance(event, ErrorEvent) and event.reason == "aborted"
    assert asyncio.get_running_loop().time() - t0 < 1.0
    assert event.message.text  # what was seen is reported, never committed
    await llm.aclose()
    async with httpx.AsyncClient() as client:  # the upstream is still healthy
        assert (await client.get(llama_server.base_url + "/health")).status_code == 200
