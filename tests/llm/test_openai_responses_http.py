"""OpenAI Responses adapter over real loopback HTTP: full streams, HTTP and in-band errors,
truncation, malformed data, key redaction and cancellation."""

from __future__ import annotations

import asyncio
import json

from cursor_byok.llm.events import (
    DoneEvent,
    ErrorEvent,
    ResponseEvent,
    StartEvent,
    TextDelta,
    TextStart,
    without_partial,
)
from cursor_byok.llm.openai_responses import OpenAIResponsesAdapter
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.stream import ResponseStream
from cursor_byok.llm.types import RequestMessages, Usage, UserMessage
from tests.llm.test_openai_responses_stream import check_invariants, sse
from tests.support.upstream import Reply, fake_upstream, fixture_bytes

KEY = "sk-proj-PLANTED-KEY-0123456789abcdef"
REQUEST = RequestMessages(system_prompt="Be brief.", messages=(UserMessage.of_text("Hi"),))
SETTINGS = ModelSettings(model="gpt-5.1-codex-max", reasoning=True, cache_key="conv-1")


def adapter(base_url: str) -> OpenAIResponsesAdapter:
    return OpenAIResponsesAdapter(
        ProviderSettings(name="openai", api="openai-responses", base_url=base_url, api_key=KEY)
    )


async def collect(stream: ResponseStream) -> list[ResponseEvent]:
    out: list[ResponseEvent] = []
    while True:
        ev = await stream.recv()
        out.append(ev)
        if isinstance(ev, DoneEvent | ErrorEvent):
            return out


def assert_no_key(events: list[ResponseEvent]) -> None:
    for ev in events:
        assert KEY not in repr(without_partial(ev))
    if isinstance(events[-1], DoneEvent | ErrorEvent):
        assert KEY not in repr(events[-1].message)


async def test_fixture_over_http_with_exact_request() -> None:
    body = fixture_bytes("openai-responses", "reasoning-encrypted-function-call.sse")
    async with fake_upstream() as up:
        up.push(Reply.sse(body))
        a = adapter(up.base_url)
        prepared = a.prepare(REQUEST, SETTINGS)
        events = await collect(a.send(prepared))
        check_invariants(events)
        done = events[-1]
        assert isinstance(done, DoneEvent) and done.reason == "toolUse"
        assert done.message.tool_calls[0].arguments == {"a": 12, "b": 7, "op": "add"}
        assert done.message.usage == Usage(input=134, output=28)
        assert done.message.provider == "openai" and done.message.model == "gpt-5.1-codex-max"
        (received,) = up.requests
        assert received.method == "POST" and received.path == "/responses"
        assert received.body == prepared.body
        assert received.headers["authorization"] == f"Bearer {KEY}"
        assert received.headers["session_id"] == "conv-1"
        assert json.loads(received.body)["prompt_cache_key"] == "conv-1"
        await a.aclose()


async def test_fixture_in_small_chunks_over_http() -> None:
    body = fixture_bytes("openai-responses", "text-phase-two-messages.sse")
    async with fake_upstream() as up:
        up.push(Reply.sse(body, chunk_size=97))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        check_invariants(events)
        assert isinstance(events[-1], DoneEvent) and len(events[-1].message.content) == 2
        await a.aclose()


async def test_http_401_with_openai_error_body_is_one_error_without_key() -> None:
    error = {
        "error": {
            "message": f"Incorrect API key provided: {KEY}. You can find your API key at ...",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    async with fake_upstream() as up:
        up.push(Reply.json(401, json.dumps(error)))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        assert len(events) == 1 and isinstance(events[0], ErrorEvent)
        err = events[0]
        assert err.http_status == 401 and "Incorrect API key provided" in err.error_message
        assert_no_key(events)
        await a.aclose()


async def test_http_429_and_500_report_status_and_retry_after() -> None:
    rate = {"error": {"message": "Rate limit reached", "type": "requests", "code": None}}
    async with fake_upstream() as up:
        up.push(Reply.json(429, json.dumps(rate), [("retry-after-ms", "250")]))
        up.push(
            Reply.json(500, '{"error":{"message":"The server had an error","type":"server_error"}}')
        )
        a = adapter(up.base_url)
        (e1,) = await collect(a.call(REQUEST, SETTINGS))
        (e2,) = await collect(a.call(REQUEST, SETTINGS))
        assert isinstance(e1, ErrorEvent) and e1.http_status == 429 and e1.retry_after_ms == 250
        assert "Rate limit reached" in e1.error_message
        assert isinstance(e2, ErrorEvent) and e2.http_status == 500
        await a.aclose()


async def test_in_band_error_after_200() -> None:
    body = fixture_bytes("openai-responses", "error-failed.sse")
    async with fake_upstream() as up:
        up.push(Reply.sse(body))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        (err,) = events  # no content came: a lone error, nothing was output
        assert isinstance(err, ErrorEvent) and err.http_status is None
        assert err.error_message.startswith("Error Code insufficient_quota:")
        await a.aclose()


async def test_planted_key_never_appears_in_errors() -> None:
    echoed = sse(
        {"type": "response.created", "response": {"id": "r"}},
        {"type": "error", "code": "bad_key", "message": f"key {KEY} rejected"},
    )
    failed = sse(
        {
            "type": "response.failed",
            "response": {"id": "r", "error": {"code": "x", "message": f"auth {KEY}"}},
        },
    )
    async with fake_upstream() as up:
        up.push(Reply.sse(echoed), Reply.sse(failed), Reply.events([f'{{"bad json {KEY}']))
        a = adapter(up.base_url)
        for _ in range(3):
            events = await collect(a.call(REQUEST, SETTINGS))
            assert isinstance(events[-1], ErrorEvent)
            assert "***" in events[-1].error_message or "decode" in events[-1].error_message
            assert_no_key(events)
        await a.aclose()


async def test_stream_cut_before_completed_is_an_error() -> None:
    body = fixture_bytes("openai-responses", "text-basic.sse")
    cut = body[: body.index(b"event: response.output_item.done")]
    async with fake_upstream() as up:
        up.push(Reply.sse(cut))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        err = events[-1]
        assert isinstance(err, ErrorEvent) and "without response.completed" in err.error_message
        assert err.message.text == "`arm64` (Apple Silicon)."  # seen, never committed
        await a.aclose()


async def test_malformed_chunk_ends_in_error() -> None:
    async with fake_upstream() as up:
        up.push(
            Reply.events(
                [
                    '{"type":"response.created","response":{"id":"r"}}',
                    '{"type":"response.output_text.delta","output_index":0,"delta":"Hi"}',
                    '{"type":"response.output_text.delta", "delta": ',
                    '{"type":"response.completed","response":{"status":"completed"}}',
                ]
            )
        )
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        err = events[-1]
        assert isinstance(err, ErrorEvent) and "could not decode" in err.error_message
        assert sum(isinstance(e, DoneEvent | ErrorEvent) for e in events) == 1
        await a.aclose()


async def test_aclose_aborts_at_once() -> None:
    head = sse(
        {"type": "response.created", "response": {"id": "r"}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "message", "id": "m", "content": []},
        },
        {"type": "response.output_text.delta", "output_index": 0, "item_id": "m", "delta": "Hel"},
    )
    async with fake_upstream() as up:
        reply = Reply.sse(head)
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
        assert ev.message.text == "Hel"
        assert loop.time() - t0 < 0.5
        for _ in range(50):
            if up.closed_early:
                break
            await asyncio.sleep(0.02)
        assert up.closed_early == [True]
        await a.aclose()
