"""`deliver`: an HTTP stream hands its events to a sink from the task that reads the socket,
over real loopback HTTP (tests.support.upstream). The sink gets what `recv` would return, the
terminal event exactly once, and `aclose()` never cancels a sink in the middle of an event."""

from __future__ import annotations

import asyncio
import logging

import msgspec
import pytest

from cursor_byok.llm.anthropic import AnthropicAdapter
from cursor_byok.llm.events import DoneEvent, ErrorEvent, ResponseEvent, StartEvent, TextDelta
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.types import RequestMessages, UserMessage
from tests.support.upstream import Reply, fake_upstream, fixture_bytes

KEY = "sk-ant-api03-PLANTED-secret-0123456789abcdef"
REQUEST = RequestMessages(system_prompt="Be brief.", messages=(UserMessage.of_text("hi"),))
SETTINGS = ModelSettings(model="claude-sonnet-4-5-20250929", max_output_tokens=1000)
RECORDED = fixture_bytes("anthropic", "thinking-signature.sse")


def adapter(base_url: str) -> AnthropicAdapter:
    return AnthropicAdapter(
        ProviderSettings(name="anthropic", api="anthropic", base_url=base_url, api_key=KEY)
    )


class Sink:
    """Records what it is given; `hold` makes it wait inside the next event it gets."""

    def __init__(self) -> None:
        self.events: list[ResponseEvent] = []
        self.ended = asyncio.Event()
        self.hold: asyncio.Event | None = None
        self.holding = asyncio.Event()
        self.inside = 0
        self.cancelled = False

    async def __call__(self, event: ResponseEvent) -> None:
        assert not self.ended.is_set(), f"an event after the terminal one: {event!r}"
        assert self.inside == 0, "the sink was entered twice at once"
        self.inside += 1
        try:
            self.events.append(event)
            if self.hold is not None:
                hold, self.hold = self.hold, None
                self.holding.set()
                try:
                    await hold.wait()
                except asyncio.CancelledError:
                    self.cancelled = True
                    raise
            if isinstance(event, DoneEvent | ErrorEvent):
                self.ended.set()
        finally:
            self.inside -= 1


def shape(event: ResponseEvent) -> tuple[str, object]:
    """An event without its `partial` (the assembler object, different for every stream)."""
    if isinstance(event, DoneEvent | ErrorEvent):
        return type(event).__name__, event.message
    fields = {k: v for k, v in msgspec.structs.asdict(event).items() if k != "partial"}
    return type(event).__name__, fields


async def received(stream: object) -> list[ResponseEvent]:
    out: list[ResponseEvent] = []
    while True:
        event = await stream.recv()  # type: ignore[attr-defined]
        out.append(event)
        if isinstance(event, DoneEvent | ErrorEvent):
            return out


@pytest.mark.parametrize("chunk_size", [0, 7, 4096])
async def test_a_sink_gets_what_recv_returns(chunk_size: int) -> None:
    async with fake_upstream() as up:
        up.push(Reply.sse(RECORDED, chunk_size=chunk_size))
        up.push(Reply.sse(RECORDED, chunk_size=chunk_size))
        a = adapter(up.base_url)
        expected = await received(a.send(a.prepare(REQUEST, SETTINGS)))
        sink = Sink()
        a.send(a.prepare(REQUEST, SETTINGS)).deliver(sink)
        await asyncio.wait_for(sink.ended.wait(), 5)
        await asyncio.sleep(0.01)
        assert [shape(e) for e in sink.events] == [shape(e) for e in expected]
        assert isinstance(expected[0], StartEvent) and isinstance(expected[-1], DoneEvent)


async def test_recv_and_deliver_do_not_mix() -> None:
    async with fake_upstream() as up:
        up.push(Reply.sse(RECORDED))
        a = adapter(up.base_url)
        stream = a.send(a.prepare(REQUEST, SETTINGS))
        stream.deliver(Sink())
        with pytest.raises(RuntimeError, match="sink"):
            await stream.recv()
        with pytest.raises(RuntimeError, match="once"):
            stream.deliver(Sink())
        await stream.aclose()


async def test_aclose_while_the_sink_holds_an_event_waits_for_it_then_aborts() -> None:
    async with fake_upstream() as up:
        up.push(Reply.sse(RECORDED, delay_s=0.05))
        a = adapter(up.base_url)
        stream = a.send(a.prepare(REQUEST, SETTINGS))
        sink = Sink()
        release = asyncio.Event()
        sink.hold = release
        stream.deliver(sink)
        await asyncio.wait_for(sink.holding.wait(), 5)
        await asyncio.wait_for(stream.aclose(), 1)  # returns at once: the sink is busy
        assert not sink.cancelled and not sink.ended.is_set()
        release.set()
        await asyncio.wait_for(sink.ended.wait(), 5)
        await asyncio.sleep(0.05)
        last = sink.events[-1]
        assert isinstance(last, ErrorEvent) and last.reason == "aborted"
        assert not sink.cancelled
        assert sum(isinstance(e, DoneEvent | ErrorEvent) for e in sink.events) == 1


async def test_aclose_between_events_aborts_through_the_sink_at_once() -> None:
    async with fake_upstream() as up:
        # Up to the first content event (`start` goes out with it), then silence.
        first_delta = RECORDED.index(b"\n\n", RECORDED.index(b"content_block_delta")) + 2
        up.push(Reply(chunks=[RECORDED[:first_delta]], hang_after=True))
        a = adapter(up.base_url)
        stream = a.send(a.prepare(REQUEST, SETTINGS))
        sink = Sink()
        stream.deliver(sink)
        for _ in range(200):
            if sink.events:
                break
            await asyncio.sleep(0.005)
        assert isinstance(sink.events[0], StartEvent)
        await asyncio.wait_for(stream.aclose(), 1)
        assert sink.ended.is_set()
        last = sink.events[-1]
        assert isinstance(last, ErrorEvent) and last.reason == "aborted"


async def test_a_sink_that_raises_ends_the_stream_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with fake_upstream() as up:
        up.push(Reply.sse(RECORDED))
        a = adapter(up.base_url)
        stream = a.send(a.prepare(REQUEST, SETTINGS))
        got: list[ResponseEvent] = []

        async def broken(event: ResponseEvent) -> None:
            got.append(event)
            if isinstance(event, TextDelta):
                raise RuntimeError("the consumer broke")

        with caplog.at_level(logging.ERROR, logger="cursor_byok.llm"):
            stream.deliver(broken)
            for _ in range(200):
                if any(isinstance(e, TextDelta) for e in got):
                    break
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.05)
        assert isinstance(got[-1], TextDelta)  # nothing more went to the broken sink
        assert "the consumer of a anthropic stream failed" in caplog.text
        assert KEY not in caplog.text
        await stream.aclose()


async def test_an_upstream_that_accepts_and_stays_silent_is_not_called_a_connect_timeout() -> None:
    """It accepted the connection: the error says there was no response, never "timed out
    connecting" (which sends a user looking for a network problem)."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        a = AnthropicAdapter(
            ProviderSettings(
                name="anthropic",
                api="anthropic",
                base_url=f"http://127.0.0.1:{port}",
                api_key=KEY,
                read_timeout_s=0.2,
            )
        )
        events = await received(a.send(a.prepare(REQUEST, SETTINGS)))
    finally:
        server.close()
    (error,) = events
    assert isinstance(error, ErrorEvent)
    text = error.message.error_message or ""
    assert "connected, but no response came within 0.2 s" in text
    assert "timed out connecting" not in text
