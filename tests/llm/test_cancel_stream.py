"""A stream closed mid-answer: the provider's connection is dropped at once (never returned to
the pool, never drained), also while the consumer's sink holds an event, and the stream says
what the call had shown so far (`progress`: the usage the provider reported, the output
decoded). Against a real slow streaming server on loopback that notes when it sees the close
and every chunk it wrote (tests/support/streaming_upstream.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from cursor_byok.llm.anthropic import AnthropicAdapter
from cursor_byok.llm.events import DoneEvent, ErrorEvent, ResponseEvent, TextDelta
from cursor_byok.llm.gemini import GeminiAdapter
from cursor_byok.llm.http import HttpAdapter
from cursor_byok.llm.openai_chat import OpenAIChatAdapter
from cursor_byok.llm.retry import RetryingLLM
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.stream import StreamProgress
from cursor_byok.llm.types import RequestMessages, Usage, UserMessage
from tests.support.streaming_upstream import (
    StreamingUpstream,
    anthropic_events,
    gemini_events,
    openai_chat_events,
    running,
)
from tests.support.upstream import Received

REQUEST = RequestMessages(system_prompt="Be brief.", messages=(UserMessage.of_text("hi"),))
SETTINGS = ModelSettings(model="slow-1", max_output_tokens=1000)
DELTAS = 5  # content deltas seen before the close
CLOSE_BOUND_S = 0.1  # the provider sees its connection close within this of `aclose()`
INTERVAL_S = 0.02


def openai_chat(url: str) -> HttpAdapter:
    return OpenAIChatAdapter(
        ProviderSettings(name="oai", api="openai-chat", base_url=url + "/v1", api_key="sk-x")
    )


def anthropic(url: str) -> HttpAdapter:
    return AnthropicAdapter(
        ProviderSettings(name="ant", api="anthropic", base_url=url, api_key="sk-ant-x")
    )


def gemini(url: str) -> HttpAdapter:
    return GeminiAdapter(ProviderSettings(name="gem", api="gemini", base_url=url, api_key="g-x"))


CASES: list[tuple[str, Callable[[str], HttpAdapter], Callable[[Received], list[bytes]], Usage]] = [
    # OpenAI (and llama.cpp) report usage only in the last chunk: nothing is known mid-stream.
    ("openai-chat", openai_chat, lambda _: openai_chat_events(400), Usage()),
    # Anthropic: input tokens in `message_start` (with a placeholder output of 1).
    ("anthropic", anthropic, lambda _: anthropic_events(400), Usage(input=1234, output=1)),
    # Gemini: the usage so far in every chunk.
    ("gemini", gemini, lambda _: gemini_events(400), Usage(input=777, output=DELTAS)),
]


class Sink:
    def __init__(self, hold_at: int | None = None) -> None:
        self.events: list[ResponseEvent] = []
        self.deltas = asyncio.Event()
        self.hold_at = hold_at  # wait inside this delta (a consumer busy with an event)
        self.release = asyncio.Event()

    async def __call__(self, event: ResponseEvent) -> None:
        self.events.append(event)
        count = sum(isinstance(e, TextDelta) for e in self.events)
        if isinstance(event, TextDelta) and count == DELTAS:
            self.deltas.set()
            if self.hold_at == count:
                await self.release.wait()


async def close_after_deltas(
    up: StreamingUpstream, make: Callable[[str], HttpAdapter], *, hold: bool
) -> tuple[float, StreamProgress, Sink]:
    adapter = make(up.base_url)
    try:
        stream = adapter.send(adapter.prepare(REQUEST, SETTINGS))
        sink = Sink(hold_at=DELTAS if hold else None)
        stream.deliver(sink)
        await asyncio.wait_for(sink.deltas.wait(), 10)
        closed_at = time.monotonic()
        await stream.aclose()
        progress = stream.progress()
        (exchange,) = up.exchanges
        assert await up.until(lambda: exchange.closed_at is not None, 2)
        sink.release.set()
        await asyncio.sleep(0.05)
        return closed_at, progress, sink
    finally:
        await adapter.aclose()


@pytest.mark.parametrize("hold", [False, True], ids=["between-events", "sink-busy"])
@pytest.mark.parametrize(("api", "make", "script", "usage"), CASES, ids=[c[0] for c in CASES])
async def test_aclose_drops_the_connection_at_once_and_keeps_the_progress(
    api: str,
    make: Callable[[str], HttpAdapter],
    script: Callable[[Received], list[bytes]],
    usage: Usage,
    hold: bool,
) -> None:
    async with running(script, interval_s=INTERVAL_S) as up:
        closed_at, progress, sink = await close_after_deltas(up, make, hold=hold)
        (exchange,) = up.exchanges
        assert exchange.closed_at is not None
        took = exchange.closed_at - closed_at
        assert took < CLOSE_BOUND_S, f"{api}: the provider saw the close {took * 1000:.0f} ms later"
        assert not exchange.completed
        # At most the chunk already on its way when the client hung up.
        chunks, _ = exchange.sent_after(closed_at)
        assert chunks <= 1, chunks
        assert progress == StreamProgress(usage=usage, chars=4 * DELTAS, deltas=DELTAS)
        last = sink.events[-1]
        assert isinstance(last, ErrorEvent) and last.reason == "aborted"
        assert sum(isinstance(e, TextDelta) for e in sink.events) == DELTAS


async def test_a_retrying_stream_reports_its_attempts_progress() -> None:
    async with running(lambda _: anthropic_events(400), interval_s=INTERVAL_S) as up:
        adapter = anthropic(up.base_url)
        try:
            stream = RetryingLLM(adapter).send(adapter.prepare(REQUEST, SETTINGS))
            sink = Sink()
            stream.deliver(sink)
            await asyncio.wait_for(sink.deltas.wait(), 10)
            await stream.aclose()
            assert stream.progress().usage == Usage(input=1234, output=1)
            assert stream.progress().deltas == DELTAS
            (exchange,) = up.exchanges
            assert await up.until(lambda: exchange.closed_at is not None, 2)
        finally:
            await adapter.aclose()


async def test_a_stream_read_to_its_end_reports_the_final_usage() -> None:
    async with running(lambda _: openai_chat_events(3), interval_s=0.001) as up:
        adapter = openai_chat(up.base_url)
        try:
            stream = adapter.send(adapter.prepare(REQUEST, SETTINGS))
            while not isinstance(await stream.recv(), DoneEvent | ErrorEvent):
                pass
            assert stream.progress() == StreamProgress(
                usage=Usage(input=900, output=3), chars=12, deltas=3
            )
        finally:
            await adapter.aclose()
