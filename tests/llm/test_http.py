"""The shared HTTP streaming runtime, over real loopback HTTP with a toy line protocol."""

from __future__ import annotations

import asyncio

import pytest

from cursor_byok.llm.assembler import MessageAssembler
from cursor_byok.llm.events import (
    DoneEvent,
    ErrorEvent,
    ResponseEvent,
    StartEvent,
    TextDelta,
    TextStart,
)
from cursor_byok.llm.http import HttpAdapter, parse_retry_after
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.sse import SSEEvent
from cursor_byok.llm.stream import PreparedRequest, StreamEnded
from cursor_byok.llm.types import RequestMessages, UserMessage
from tests.support.upstream import Reply, fake_upstream

KEY = "sk-test-SECRET-0123456789"


class ToyDecoder:
    """data: text -> delta; data: END -> done; data: BAD -> raises."""

    def __init__(self, asm: MessageAssembler) -> None:
        self.asm = asm
        self.index: int | None = None

    def feed(self, event: SSEEvent) -> list[ResponseEvent]:
        out: list[ResponseEvent] = []
        if event.data == "BAD":
            raise ValueError("toy decoder cannot read this")
        if event.data in ("END", "END+"):
            out.extend(self.asm.close_all())
            out.append(self.asm.done("stop"))
            if event.data == "END+":  # a broken decoder: an event after the terminal one
                out.append(TextDelta(content_index=0, delta="late", partial=self.asm))
            return out
        if event.data == "LEAK":  # an in-band error echoing the key, not redacted here
            return [self.asm.fail(f"upstream says: bad key {KEY}")]
        if self.index is None:
            self.index, ev = self.asm.open_text()
            out.append(ev)
        out.append(self.asm.text_delta(self.index, event.data))
        return out

    def finish(self) -> list[ResponseEvent]:
        return [self.asm.fail("toy stream ended without END")]


class ToyAdapter(HttpAdapter):
    api = "toy"

    def prepare(self, request: RequestMessages, settings: ModelSettings) -> PreparedRequest:
        return PreparedRequest(
            url=self.provider.base_url + "/toy", body=b'{"x":1}', model=settings.model
        )

    def auth_headers(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {KEY}")]

    def new_decoder(self, assembler: MessageAssembler) -> ToyDecoder:
        return ToyDecoder(assembler)


REQUEST = RequestMessages(system_prompt="s", messages=(UserMessage.of_text("hi"),))
SETTINGS = ModelSettings(model="toy-1")


async def collect(stream: object) -> list[ResponseEvent]:
    out: list[ResponseEvent] = []
    while True:
        ev = await stream.recv()  # type: ignore[attr-defined]
        out.append(ev)
        if isinstance(ev, DoneEvent | ErrorEvent):
            return out


def adapter(base_url: str, **kw: float) -> ToyAdapter:
    return ToyAdapter(
        ProviderSettings(name="toy", api="faux", base_url=base_url, api_key=KEY, **kw)
    )


async def test_stream_to_done_and_exact_bytes_sent() -> None:
    async with fake_upstream() as up:
        up.push(Reply.events(["Hel", "lo", "END"]))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        assert isinstance(events[0], StartEvent)
        assert [e.delta for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
        done = events[-1]
        assert isinstance(done, DoneEvent) and done.message.text == "Hello"
        assert done.message.model == "toy-1" and done.message.provider == "toy"
        assert up.requests[0].body == b'{"x":1}'
        assert up.requests[0].headers["authorization"] == f"Bearer {KEY}"
        await a.aclose()


async def test_send_opens_the_request_before_the_first_recv() -> None:
    async with fake_upstream() as up:
        up.push(Reply.events(["x", "END"]))
        a = adapter(up.base_url)
        s = a.call(REQUEST, SETTINGS)
        for _ in range(200):  # nobody reads yet; the request still goes out
            if up.requests:
                break
            await asyncio.sleep(0.01)
        assert len(up.requests) == 1
        events = await collect(s)
        assert isinstance(events[-1], DoneEvent) and events[-1].message.text == "x"
        await a.aclose()


async def test_aclose_right_after_send_never_reaches_the_upstream() -> None:
    async with fake_upstream() as up:
        up.push(Reply.events(["x", "END"]))
        a = adapter(up.base_url)
        s = a.call(REQUEST, SETTINGS)
        await s.aclose()
        ev = await s.recv()
        assert isinstance(ev, ErrorEvent) and ev.reason == "aborted"
        await asyncio.sleep(0.1)
        assert up.requests == []
        await a.aclose()


async def test_first_token_of_a_burst_is_delivered_before_the_burst_is_decoded() -> None:
    """A provider burst (many events in one network chunk) must not hold the first token back
    until the last event of the burst is decoded."""
    body = b"".join(f"data: t{i}\n\n".encode() for i in range(3000)) + b"data: END\n\n"
    async with fake_upstream() as up:
        up.push(Reply(chunks=[body]))
        a = adapter(up.base_url)
        s = a.call(REQUEST, SETTINGS)
        events = []
        while not isinstance(ev := await s.recv(), TextDelta):
            events.append(ev)
        assert ev.delta == "t0"
        assert not s._queued_terminal  # the reader is still inside the burst
        events = [*events, ev, *await collect(s)]
        assert isinstance(events[-1], DoneEvent)
        assert len([e for e in events if isinstance(e, TextDelta)]) == 3000
        await a.aclose()


async def test_recv_after_terminal_raises() -> None:
    async with fake_upstream() as up:
        up.push(Reply.events(["END"]))
        a = adapter(up.base_url)
        s = a.call(REQUEST, SETTINGS)
        await collect(s)
        with pytest.raises(StreamEnded):
            await s.recv()
        await a.aclose()


async def test_http_error_is_one_error_event_without_start_and_without_key() -> None:
    async with fake_upstream() as up:
        body = '{"error":{"type":"auth","message":"Incorrect API key provided: ' + KEY + '"}}'
        up.push(Reply.json(401, body))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        assert len(events) == 1 and isinstance(events[0], ErrorEvent)
        err = events[0]
        assert err.http_status == 401 and err.reason == "error"
        assert "Incorrect API key" in err.error_message
        assert KEY not in err.error_message and KEY not in repr(err)
        await a.aclose()


async def test_retry_after_headers_reported() -> None:
    async with fake_upstream() as up:
        up.push(Reply.json(429, '{"error":{"message":"slow down"}}', [("retry-after", "2")]))
        up.push(Reply.json(503, "overloaded", [("retry-after-ms", "1500")]))
        a = adapter(up.base_url)
        e1 = (await collect(a.call(REQUEST, SETTINGS)))[-1]
        e2 = (await collect(a.call(REQUEST, SETTINGS)))[-1]
        assert isinstance(e1, ErrorEvent) and e1.retry_after_ms == 2000 and e1.http_status == 429
        assert isinstance(e2, ErrorEvent) and e2.retry_after_ms == 1500
        assert "overloaded" in e2.error_message
        await a.aclose()


async def test_truncated_stream_is_an_error_not_success() -> None:
    async with fake_upstream() as up:
        up.push(Reply.events(["partial"]))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        assert isinstance(events[-1], ErrorEvent)
        assert "without END" in events[-1].error_message
        assert events[-1].message.text == "partial"  # what was seen, never committed
        await a.aclose()


async def test_undecodable_stream_ends_in_error() -> None:
    async with fake_upstream() as up:
        up.push(Reply.events(["a", "BAD", "END"]))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        assert isinstance(events[-1], ErrorEvent)
        assert "could not decode" in events[-1].error_message
        await a.aclose()


async def test_connect_error_is_transient() -> None:
    a = adapter("http://127.0.0.1:9")  # discard port: nothing listens
    events = await collect(a.call(REQUEST, SETTINGS))
    assert len(events) == 1 and isinstance(events[0], ErrorEvent) and events[0].transient
    await a.aclose()


async def test_aclose_aborts_the_request_at_once() -> None:
    async with fake_upstream() as up:
        reply = Reply.events(["one"])
        reply.hang_after = True
        up.push(reply)
        a = adapter(up.base_url)
        s = a.call(REQUEST, SETTINGS)
        assert isinstance(await s.recv(), StartEvent)
        assert isinstance(await s.recv(), TextStart)
        assert isinstance(await s.recv(), TextDelta)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await s.aclose()
        ev = await s.recv()
        assert isinstance(ev, ErrorEvent) and ev.reason == "aborted"
        assert loop.time() - t0 < 0.5
        for _ in range(50):  # the upstream sees the disconnect
            if up.closed_early:
                break
            await asyncio.sleep(0.02)
        assert up.closed_early == [True]
        await a.aclose()


async def test_aclose_while_another_task_waits_in_recv() -> None:
    async with fake_upstream() as up:
        reply = Reply.events(["one"])
        reply.hang_after = True
        up.push(reply)
        a = adapter(up.base_url)
        s = a.call(REQUEST, SETTINGS)
        assert [type(await s.recv()) for _ in range(3)] == [StartEvent, TextStart, TextDelta]
        waiter = asyncio.create_task(s.recv())
        await asyncio.sleep(0.05)
        await s.aclose()
        ev = await asyncio.wait_for(waiter, 1)
        assert isinstance(ev, ErrorEvent) and ev.reason == "aborted"
        await a.aclose()


async def test_read_timeout_mid_stream() -> None:
    async with fake_upstream() as up:
        reply = Reply.events(["x"])
        reply.hang_after = True
        up.push(reply)
        a = adapter(up.base_url, read_timeout_s=0.2)
        events = await collect(a.call(REQUEST, SETTINGS))
        assert (
            isinstance(events[-1], ErrorEvent) and "no data for 0.2 s" in events[-1].error_message
        )
        await a.aclose()


def test_parse_retry_after_http_date() -> None:
    from multidict import CIMultiDict  # the headers of an aiohttp response

    h = CIMultiDict({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"})
    assert parse_retry_after(h, now=1445412480.0) == 10_000
    assert parse_retry_after(CIMultiDict({"retry-after": "soon"})) is None


@pytest.mark.parametrize("how", ["recv", "deliver"])
@pytest.mark.parametrize("script", [["a", "LEAK", "b"], ["a", "b", "END+", "c"]])
async def test_nothing_leaves_after_the_terminal_event_and_errors_are_redacted(
    how: str, script: list[str]
) -> None:
    async with fake_upstream() as up:
        up.push(Reply.events(script))
        a = adapter(up.base_url)
        stream = a.call(REQUEST, SETTINGS)
        if how == "recv":
            events = await collect(stream)
        else:
            events = []
            ended = asyncio.Event()

            async def sink(event: ResponseEvent) -> None:
                events.append(event)
                if isinstance(event, DoneEvent | ErrorEvent):
                    ended.set()

            stream.deliver(sink)
            await asyncio.wait_for(ended.wait(), 10)
            await asyncio.sleep(0.05)  # what follows the terminal event would show up now
        assert [type(e).__name__ for e in events][-2:] == [
            "TextDelta" if "LEAK" in script else "TextEnd",
            "ErrorEvent" if "LEAK" in script else "DoneEvent",
        ]
        assert KEY not in repr(events[-1])
        if "LEAK" in script:
            assert isinstance(events[-1], ErrorEvent)
            assert events[-1].error_message == "upstream says: bad key ***"
        await a.aclose()
