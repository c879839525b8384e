"""Output deadlines (llm/deadlines.py) over real loopback HTTP: an upstream that keeps the socket
busy without content (SSE comments one byte at a time, pings, metadata events) is cut at the
first-output or idle deadline, named by provider; content resets the idle timer; a consumer
that is slow is not the provider's fault."""

from __future__ import annotations

import asyncio
import json
import time

from cursor_byok.llm.anthropic import AnthropicAdapter
from cursor_byok.llm.events import (
    DoneEvent,
    ErrorEvent,
    ResponseEvent,
    StartEvent,
    TextDelta,
    TextStart,
)
from cursor_byok.llm.openai_chat import OpenAIChatAdapter
from cursor_byok.llm.retry import RetryingLLM, RetryPolicy
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.stream import ResponseStream
from cursor_byok.llm.types import RequestMessages, UserMessage
from tests.support.upstream import Reply, fake_upstream

REQUEST = RequestMessages(system_prompt="s", messages=(UserMessage.of_text("hi"),))
SETTINGS = ModelSettings(model="m")
GUARD_S = 20.0  # a call still open after this long is held: the defect


def chat(base_url: str, **timeouts: float) -> OpenAIChatAdapter:
    return OpenAIChatAdapter(
        ProviderSettings(name="dripper", api="openai-chat", base_url=f"{base_url}/v1", **timeouts)
    )


def dripping(prefix: list[bytes] | None = None, *, every_s: float = 0.1) -> Reply:
    """200, the `prefix` chunks, then SSE comments one byte per chunk, `every_s` apart, for
    about a minute, then open and silent."""
    drip = [bytes([b]) for b in b": keep-alive\n\n" * 40]
    reply = Reply(chunks=[*(prefix or []), *drip], delay_s=every_s, hang_after=True)
    return reply


def chat_chunk(**delta: str) -> bytes:
    body = {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": delta}]}
    return f"data: {json.dumps(body)}\n\n".encode()


def chat_end() -> list[bytes]:
    last = {
        "id": "c1",
        "model": "m",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
    return [f"data: {json.dumps(last)}\n\n".encode(), b"data: [DONE]\n\n"]


async def received(stream: ResponseStream) -> tuple[list[ResponseEvent], float]:
    """Every event, and the seconds until the terminal one (bounded by GUARD_S)."""
    t0 = time.monotonic()
    out: list[ResponseEvent] = []
    async with asyncio.timeout(GUARD_S):
        while True:
            event = await stream.recv()
            out.append(event)
            if isinstance(event, DoneEvent | ErrorEvent):
                return out, time.monotonic() - t0


async def test_comments_dripped_a_byte_at_a_time_miss_the_first_output_deadline() -> None:
    async with fake_upstream() as up:
        up.push(dripping())
        a = chat(up.base_url, first_output_timeout_s=0.5)
        events, took = await received(a.call(REQUEST, SETTINGS))
        await a.aclose()
    # A lone error: nothing was output, so it counts as a failure before output.
    (error,) = events
    assert isinstance(error, ErrorEvent) and error.reason == "error" and error.transient
    text = error.error_message
    assert text.startswith("dripper: no output within 0.5 s (first_output_timeout_s)"), text
    assert "answered" in text
    assert 0.4 <= took < 5.0, took


async def test_pings_and_metadata_events_are_not_output() -> None:
    """Anthropic's `message_start`, `ping` and an opened (still empty) thinking block are
    decoded events, but none is a text, thinking or tool-call delta."""

    def event(kind: str, data: dict[str, object]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

    start = event(
        "message_start",
        {
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude",
                "content": [],
                "usage": {"input_tokens": 3, "output_tokens": 1},
            }
        },
    )
    block = event(
        "content_block_start",
        {"index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
    )
    pings = [event("ping", {}) for _ in range(300)]
    async with fake_upstream() as up:
        up.push(Reply(chunks=[start, block, *pings], delay_s=0.05, hang_after=True))
        a = AnthropicAdapter(
            ProviderSettings(
                name="claude-proxy",
                api="anthropic",
                base_url=up.base_url,
                api_key="sk-ant-PLANTED-0123456789",
                first_output_timeout_s=0.6,
            )
        )
        events, took = await received(a.call(REQUEST, SETTINGS))
        await a.aclose()
    (error,) = events  # the held start and thinking block are dropped with the failure
    assert isinstance(error, ErrorEvent) and error.transient
    assert error.error_message.startswith("claude-proxy: no output within 0.6 s")
    assert 0.5 <= took < 5.0, took


async def test_an_upstream_silent_before_its_response_head_misses_the_first_output_deadline() -> (
    None
):
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await asyncio.sleep(GUARD_S)
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        a = chat(f"http://127.0.0.1:{port}", first_output_timeout_s=0.5)
        events, took = await received(a.call(REQUEST, SETTINGS))
        await a.aclose()
    finally:
        server.close()
    (error,) = events
    assert isinstance(error, ErrorEvent) and error.transient
    assert error.error_message == (
        "dripper: no response within 0.5 s (first_output_timeout_s); gave up"
    )
    assert 0.4 <= took < 5.0, took


async def test_a_drip_after_output_misses_the_idle_deadline() -> None:
    async with fake_upstream() as up:
        up.push(dripping([chat_chunk(role="assistant", content="Hel")]))
        a = chat(up.base_url, first_output_timeout_s=5, idle_timeout_s=0.5)
        events, took = await received(a.call(REQUEST, SETTINGS))
        await a.aclose()
    assert [type(e) for e in events] == [StartEvent, TextStart, TextDelta, ErrorEvent]
    error = events[-1]
    assert isinstance(error, ErrorEvent) and not error.transient  # after output
    assert error.error_message == "dripper: no output for 0.5 s (idle_timeout_s); gave up"
    assert error.message.content and error.message.text == "Hel"
    # The first delta comes after one drip interval, then the idle deadline.
    assert 0.5 <= took < 5.0, took


async def test_content_resets_the_idle_timer() -> None:
    """Ten deltas 0.2 s apart take about 2 s, twice the idle deadline: each one resets it."""
    deltas = [chat_chunk(content=f"{i} ") for i in range(10)]
    async with fake_upstream() as up:
        up.push(Reply(chunks=[*deltas, *chat_end()], delay_s=0.2))
        a = chat(up.base_url, first_output_timeout_s=1.0, idle_timeout_s=1.0)
        events, took = await received(a.call(REQUEST, SETTINGS))
        await a.aclose()
    done = events[-1]
    assert isinstance(done, DoneEvent), done
    assert done.message.text == "".join(f"{i} " for i in range(10))
    assert took >= 1.5, took  # longer than either deadline


async def test_a_first_output_miss_is_retried_with_the_same_bytes() -> None:
    async with fake_upstream() as up:
        up.push(dripping())
        up.push(Reply(chunks=[chat_chunk(role="assistant", content="ok"), *chat_end()]))
        a = chat(up.base_url, first_output_timeout_s=0.5)
        llm = RetryingLLM(a, RetryPolicy(base_delay_s=0.01))
        stream = llm.call(REQUEST, SETTINGS)
        events, _ = await received(stream)
        await a.aclose()
    assert isinstance(events[-1], DoneEvent) and events[-1].message.text == "ok"
    assert stream.attempts == 2
    assert sum(isinstance(e, StartEvent) for e in events) == 1  # the missed try output nothing
    first, second = up.requests
    assert first.body == second.body and first.path == second.path


async def test_a_slow_consumer_is_not_the_providers_fault() -> None:
    """The sink holds one event longer than the idle deadline while the provider's bytes are
    all there: no deadline is missed."""
    deltas = [chat_chunk(content=f"{i}") for i in range(3)]
    async with fake_upstream() as up:
        up.push(Reply(chunks=[*deltas, *chat_end()]))
        a = chat(up.base_url, first_output_timeout_s=0.3, idle_timeout_s=0.3)
        stream = a.send(a.prepare(REQUEST, SETTINGS))
        got: list[ResponseEvent] = []
        ended = asyncio.Event()

        async def slow(event: ResponseEvent) -> None:
            got.append(event)
            if isinstance(event, TextDelta) and event.delta == "0":
                await asyncio.sleep(0.8)
            if isinstance(event, DoneEvent | ErrorEvent):
                ended.set()

        stream.deliver(slow)
        await asyncio.wait_for(ended.wait(), GUARD_S)
        await a.aclose()
    assert isinstance(got[-1], DoneEvent), got[-1]
    assert got[-1].message.text == "012"
