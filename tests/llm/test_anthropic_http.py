"""AnthropicAdapter over real loopback HTTP (tests.support.upstream): a recorded stream end to
end, HTTP errors in Anthropic's body shape, in-band errors, key hygiene and cancellation."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cursor_byok.llm.anthropic import AnthropicAdapter
from cursor_byok.llm.events import (
    DoneEvent,
    ErrorEvent,
    ResponseEvent,
    StartEvent,
    TextDelta,
    TextStart,
)
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.types import RequestMessages, ThinkingContent, UserMessage
from tests.support.upstream import Reply, fake_upstream, fixture_bytes

KEY = "sk-ant-api03-PLANTED-secret-0123456789abcdef"
REQUEST = RequestMessages(system_prompt="Be brief.", messages=(UserMessage.of_text("hi"),))
SETTINGS = ModelSettings(model="claude-sonnet-4-5-20250929", max_output_tokens=1000)


def adapter(base_url: str, *, key: str | None = KEY, **kw: float) -> AnthropicAdapter:
    provider = ProviderSettings(
        name="anthropic", api="anthropic", base_url=base_url, api_key=key, **kw
    )
    return AnthropicAdapter(provider)


async def collect(stream: object) -> list[ResponseEvent]:
    out: list[ResponseEvent] = []
    while True:
        ev = await stream.recv()  # type: ignore[attr-defined]
        out.append(ev)
        if isinstance(ev, DoneEvent | ErrorEvent):
            return out


async def test_recorded_stream_over_http_in_small_chunks() -> None:
    async with fake_upstream() as up:
        up.push(Reply.sse(fixture_bytes("anthropic", "thinking-signature.sse"), chunk_size=13))
        a = adapter(up.base_url)
        prepared = a.prepare(REQUEST, SETTINGS)
        events = await collect(a.send(prepared))
        assert isinstance(events[0], StartEvent)
        d = events[-1]
        assert isinstance(d, DoneEvent) and d.reason == "stop"
        thinking = d.message.content[0]
        assert isinstance(thinking, ThinkingContent) and thinking.signature is not None
        assert len(thinking.signature) == 332 and d.message.text == "925 ÷ 5 = 185"
        (received,) = up.requests
        assert received.method == "POST" and received.path == "/v1/messages"
        assert received.body == prepared.body
        assert received.headers["x-api-key"] == KEY
        assert received.headers["anthropic-version"] == "2023-06-01"
        assert received.headers["content-type"] == "application/json"
        assert "authorization" not in received.headers
        await a.aclose()


async def test_base_url_ending_in_v1_is_not_doubled() -> None:
    async with fake_upstream() as up:
        up.push(Reply.sse(fixture_bytes("anthropic", "text-basic.sse")))
        a = adapter(up.base_url + "/v1/")
        events = await collect(a.call(REQUEST, SETTINGS))
        assert isinstance(events[-1], DoneEvent)
        assert up.requests[0].path == "/v1/messages"
        await a.aclose()


async def test_no_key_sends_no_key_header() -> None:
    async with fake_upstream() as up:
        up.push(Reply.sse(fixture_bytes("anthropic", "text-basic.sse")))
        a = adapter(up.base_url, key=None)
        await collect(a.call(REQUEST, SETTINGS))
        assert "x-api-key" not in up.requests[0].headers
        await a.aclose()


async def test_overloaded_529_is_one_error_without_start() -> None:
    body = (
        '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},'
        '"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}'
    )
    async with fake_upstream() as up:
        up.push(Reply.json(529, body, [("retry-after", "3")]))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        assert len(events) == 1 and isinstance(events[0], ErrorEvent)
        err = events[0]
        assert err.http_status == 529 and err.retry_after_ms == 3000 and err.reason == "error"
        assert err.error_message == (
            "anthropic HTTP 529: overloaded_error: Overloaded "
            "(request_id req_011CSHoEeqs5C35K2UUqR7Fy)"
        )
        await a.aclose()


async def test_400_invalid_request_message_is_reported() -> None:
    body = (
        '{"type":"error","error":{"type":"invalid_request_error",'
        '"message":"messages.1.content.0.thinking.signature: Invalid signature"}}'
    )
    async with fake_upstream() as up:
        up.push(Reply.json(400, body))
        a = adapter(up.base_url)
        (err,) = await collect(a.call(REQUEST, SETTINGS))
        assert isinstance(err, ErrorEvent) and err.http_status == 400
        assert "invalid_request_error: messages.1.content.0.thinking.signature" in (
            err.error_message
        )
        await a.aclose()


async def test_in_band_overloaded_error_over_http() -> None:
    stream = (
        b"event: message_start\n"
        b'data: {"type":"message_start","message":{"id":"msg_1","model":"m","usage":'
        b'{"input_tokens":3,"output_tokens":1}}}\n\n'
        b"event: content_block_start\n"
        b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'
        b"\n\n"
        b"event: content_block_delta\n"
        b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}'
        b"\n\n"
        b"event: error\n"
        b'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    )
    async with fake_upstream() as up:
        up.push(Reply.sse(stream))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        assert [type(e) for e in events] == [StartEvent, TextStart, TextDelta, ErrorEvent]
        err = events[-1]
        assert isinstance(err, ErrorEvent) and err.http_status is None
        assert err.error_message == "anthropic: overloaded_error: Overloaded"
        await a.aclose()


async def test_truncated_stream_over_http_is_an_error() -> None:
    body = fixture_bytes("anthropic", "text-basic.sse")
    cut = body[: body.index(b"event: message_delta")]
    async with fake_upstream() as up:
        up.push(Reply.sse(cut))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        err = events[-1]
        assert isinstance(err, ErrorEvent)
        assert err.error_message == "anthropic: stream ended before message_stop"
        assert err.message.text == "Hello there!"
        await a.aclose()


async def test_malformed_chunk_over_http_is_an_error() -> None:
    body = fixture_bytes("anthropic", "text-basic.sse").replace(
        b'"text":" there"}}', b'"text":" there"', 1
    )
    async with fake_upstream() as up:
        up.push(Reply.sse(body))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        err = events[-1]
        assert isinstance(err, ErrorEvent) and "could not decode" in err.error_message
        assert sum(isinstance(e, DoneEvent | ErrorEvent) for e in events) == 1
        await a.aclose()


async def test_planted_key_never_appears(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    echo = '{"type":"error","error":{"type":"authentication_error","message":"bad key ' + KEY
    in_band = (
        "event: message_start\n"
        'data: {"type":"message_start","message":{"id":"msg_1","usage":{}}}\n\n'
        "event: error\n"
        'data: {"type":"error","error":{"type":"api_error","message":"upstream said ' + KEY + '"}}'
        "\n\n"
    )
    async with fake_upstream() as up:
        up.push(Reply.json(401, echo + '"}}'))
        up.push(Reply.sse(in_band.encode()))
        up.push(Reply.json(500, "plain text with " + KEY))
        a = adapter(up.base_url)
        errors: list[ErrorEvent] = []
        for _ in range(3):
            last = (await collect(a.call(REQUEST, SETTINGS)))[-1]
            assert isinstance(last, ErrorEvent)
            errors.append(last)
        await a.aclose()
    unreachable = adapter("http://127.0.0.1:9")
    last = (await collect(unreachable.call(REQUEST, SETTINGS)))[-1]
    assert isinstance(last, ErrorEvent)
    errors.append(last)
    await unreachable.aclose()
    assert "bad key ***" in errors[0].error_message
    assert "upstream said ***" in errors[1].error_message
    for err in errors:
        print(err.error_message, repr(err))
        assert KEY not in err.error_message and KEY not in repr(err)
    prepared = adapter("http://x").prepare(REQUEST, SETTINGS)
    assert KEY not in repr(prepared) and KEY.encode() not in prepared.body
    assert KEY not in repr(adapter("http://x").provider)
    assert KEY not in caplog.text
    captured = capsys.readouterr()
    assert KEY not in captured.out and KEY not in captured.err


async def test_aclose_aborts_the_request_at_once() -> None:
    head = fixture_bytes("anthropic", "text-basic.sse")
    head = head[: head.index(b"event: content_block_stop")]
    async with fake_upstream() as up:
        reply = Reply.sse(head)
        reply.hang_after = True
        up.push(reply)
        a = adapter(up.base_url)
        s = a.call(REQUEST, SETTINGS)
        seen: list[ResponseEvent] = []
        while len([e for e in seen if isinstance(e, TextDelta)]) < 3:
            seen.append(await s.recv())
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await s.aclose()
        ev = await s.recv()
        assert isinstance(ev, ErrorEvent) and ev.reason == "aborted"
        assert ev.message.stop_reason == "aborted" and ev.message.text == "Hello there!"
        assert loop.time() - t0 < 0.5
        for _ in range(50):
            if up.closed_early:
                break
            await asyncio.sleep(0.02)
        assert up.closed_early == [True]
        await a.aclose()
