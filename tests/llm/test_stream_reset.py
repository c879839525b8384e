"""A provider connection reset mid-stream (SO_LINGER 0: the client reads ECONNRESET), for every
adapter and every body framing: the error the client sees, and the log, name the reset.

The close-delimited body (no Content-Length, not chunked: HTTP/1.0-style SSE, some proxies) is
the case that read as a clean end before: aiohttp ends such a body when the connection ends,
reset or not, so the decoder only saw a stream without its end marker ("stream ended without
finish_reason")."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cursor_byok.llm.events import DoneEvent, ErrorEvent, ResponseEvent, StartEvent
from cursor_byok.llm.registry import ADAPTERS
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.types import RequestMessages, UserMessage
from tests.support.raw_server import Act, scripted
from tests.support.upstream import fixture_bytes

KEY = "sk-reset-test-SECRET-0123456789"
REQUEST = RequestMessages(system_prompt="Be brief.", messages=(UserMessage.of_text("hi"),))
NO_HANG_S = 10.0

# Per adapter: a recorded stream, and how many of its first events carry text but not its end.
STREAMS = {
    "openai-chat": ("openai-chat", "text-basic.sse", 6),
    "openai-responses": ("openai-responses", "text-basic.sse", 6),
    "anthropic": ("anthropic", "text-basic.sse", 5),
    "gemini": ("gemini", "text-basic.sse", 2),
}
FRAMINGS = ("close-delimited", "chunked", "content-length")


def first_events(api: str) -> bytes:
    """The recorded stream's first events: text went out, the end marker did not."""
    directory, name, count = STREAMS[api]
    events = fixture_bytes(directory, name).replace(b"\r\n", b"\n").split(b"\n\n")
    return b"\n\n".join(events[:count]) + b"\n\n"


def response_head(framing: str, body: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    if framing == "chunked":
        return head + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(body), body)
    if framing == "content-length":  # more announced than will come
        return head + b"Content-Length: %d\r\n\r\n" % (len(body) * 4) + body
    return head + b"Connection: close\r\n\r\n" + body


async def call(api: str, port: int) -> list[ResponseEvent]:
    provider = ProviderSettings(
        name=f"my-{api}", api=api, base_url=f"http://127.0.0.1:{port}", api_key=KEY
    )
    adapter = ADAPTERS[api](provider)
    events: list[ResponseEvent] = []
    try:
        async with asyncio.timeout(NO_HANG_S):
            stream = adapter.call(REQUEST, ModelSettings(model="m", max_output_tokens=100))
            while True:
                event = await stream.recv()
                events.append(event)
                if isinstance(event, DoneEvent | ErrorEvent):
                    break
    finally:
        await adapter.aclose()
    return events


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize("api", sorted(ADAPTERS))
async def test_a_reset_mid_stream_is_named_a_reset(
    api: str, framing: str, caplog: pytest.LogCaptureFixture
) -> None:
    body = first_events(api)
    async with scripted([response_head(framing, body), 0.1, Act.RESET]) as server:
        with caplog.at_level(logging.WARNING, logger="cursor_byok.llm"):
            events = await call(api, server.port)
    assert isinstance(events[0], StartEvent)  # text went out before the reset
    end = events[-1]
    assert isinstance(end, ErrorEvent), end
    assert end.message.text  # what came before the reset is kept
    assert end.error_message.startswith(
        f"my-{api}: the provider connection was reset mid-stream (ECONNRESET after "
    ), end.error_message
    assert end.error_message.endswith("bytes of the response body); the answer is cut short")
    assert "ended without" not in end.error_message
    assert KEY not in end.error_message
    logged = [r.getMessage() for r in caplog.records if r.name == "cursor_byok.llm"]
    assert any(
        m.startswith(f"my-{api}: the provider connection was reset mid-stream") for m in logged
    ), logged


@pytest.mark.parametrize("api", sorted(ADAPTERS))
async def test_a_clean_close_of_a_close_delimited_stream_is_still_read_as_its_end(
    api: str,
) -> None:
    """A FIN after the whole stream is the body's normal end: not a reset, the call is done."""
    directory, name, _ = STREAMS[api]
    body = fixture_bytes(directory, name)
    async with scripted([response_head("close-delimited", body), Act.CLOSE]) as server:
        events = await call(api, server.port)
    assert isinstance(events[-1], DoneEvent), events[-1]


async def test_a_reset_before_any_text_is_transient() -> None:
    """Nothing was output: the retry policy may send the same bytes again."""
    head = response_head("close-delimited", b"")
    async with scripted([head, 0.1, Act.RESET]) as server:
        events = await call("openai-chat", server.port)
    (end,) = events
    assert isinstance(end, ErrorEvent) and end.transient
    assert "the provider connection was reset mid-stream" in end.error_message
