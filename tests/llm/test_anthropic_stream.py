"""Anthropic stream decoding: recorded fixtures and hand-written SSE for the gaps, fed through
SSEParser + AnthropicDecoder directly (no I/O)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from cursor_byok.llm.anthropic import AnthropicDecoder
from cursor_byok.llm.assembler import MessageAssembler
from cursor_byok.llm.events import (
    DoneEvent,
    ErrorEvent,
    ResponseEvent,
    StartEvent,
    TextDelta,
    TextEnd,
    TextStart,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from cursor_byok.llm.sse import SSEEvent, SSEParser
from cursor_byok.llm.types import TextContent, ThinkingContent, ToolCall, Usage
from tests.support.upstream import PROVIDER_FIXTURES, fixture_bytes

MODEL = "claude-sonnet-4-5-20250929"
FIXTURES = sorted(p.name for p in (PROVIDER_FIXTURES / "anthropic").glob("*.sse"))


def decode(body: bytes, *, chunk: int = 0) -> list[ResponseEvent]:
    """The native events for one stream body, as the HTTP runtime would produce them."""
    asm = MessageAssembler(api="anthropic", provider="anthropic", model=MODEL)
    out: list[ResponseEvent] = [asm.start()]
    decoder = AnthropicDecoder(asm)
    parser = SSEParser()
    chunks = [body[i : i + chunk] for i in range(0, len(body), chunk)] if chunk else [body]
    for piece in chunks:
        for sse in parser.feed(piece):
            out.extend(decoder.feed(sse))
    for sse in parser.finish():
        out.extend(decoder.feed(sse))
    if not isinstance(out[-1], DoneEvent | ErrorEvent):
        out.extend(decoder.finish())
    return out


def sse(*events: tuple[str, dict[str, Any]]) -> bytes:
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


def message_start(usage: dict[str, Any] | None = None, **extra: Any) -> tuple[str, dict[str, Any]]:
    message: dict[str, Any] = {
        "id": "msg_hand",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        **extra,
    }
    if usage is not None:
        message["usage"] = usage
    return ("message_start", {"type": "message_start", "message": message})


def block_start(index: int, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def delta(index: int, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": body})


def block_stop(index: int) -> tuple[str, dict[str, Any]]:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def message_delta(
    stop_reason: str | None, usage: dict[str, Any] | None = None, **extra: Any
) -> tuple[str, dict[str, Any]]:
    data: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": stop_reason, **extra}}
    if usage is not None:
        data["usage"] = usage
    return ("message_delta", data)


MESSAGE_STOP = ("message_stop", {"type": "message_stop"})
PING = ("ping", {"type": "ping"})


def terminal(events: list[ResponseEvent]) -> DoneEvent | ErrorEvent:
    last = events[-1]
    assert isinstance(last, DoneEvent | ErrorEvent)
    return last


def done(events: list[ResponseEvent]) -> DoneEvent:
    last = events[-1]
    assert isinstance(last, DoneEvent), last
    return last


def check_protocol(events: list[ResponseEvent]) -> None:
    """start first; exactly one terminal, last; indices contiguous from 0 in start order; deltas
    add up to each block's end content; on success every started block ended once."""
    assert isinstance(events[0], StartEvent)
    terminals = [e for e in events if isinstance(e, DoneEvent | ErrorEvent)]
    assert len(terminals) == 1 and terminals[0] is events[-1]
    starts = [
        e.content_index for e in events if isinstance(e, TextStart | ThinkingStart | ToolCallStart)
    ]
    assert starts == list(range(len(starts)))
    ends = [e.content_index for e in events if isinstance(e, TextEnd | ThinkingEnd | ToolCallEnd)]
    assert len(ends) == len(set(ends))
    if isinstance(events[-1], DoneEvent):
        assert sorted(ends) == starts
    message = terminal(events).message
    assert len(message.content) == len(starts)
    for end in events:
        if not isinstance(end, TextEnd | ThinkingEnd | ToolCallEnd):
            continue
        pieces = [
            e.delta
            for e in events
            if isinstance(e, TextDelta | ThinkingDelta | ToolCallDelta)
            and e.content_index == end.content_index
        ]
        if isinstance(end, TextEnd | ThinkingEnd):
            assert "".join(pieces) == end.content
        else:
            raw = "".join(pieces)
            if end.tool_call.arguments_error is None:
                assert (json.loads(raw) if raw else {}) == end.tool_call.arguments
            else:
                assert end.tool_call.raw_arguments == raw


def blocks(message_content: tuple[object, ...]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for b in message_content:
        if isinstance(b, TextContent):
            out.append(("text", b.text))
        elif isinstance(b, ThinkingContent):
            out.append(("thinking", b.thinking))
        else:
            assert isinstance(b, ToolCall)
            out.append(("toolCall", (b.name, b.arguments)))
    return out


def signature_deltas(name: str) -> list[str]:
    """Independent reading of a fixture: every signature_delta, in order (to check byte-exact
    accumulation)."""
    out = []
    for line in fixture_bytes("anthropic", name).decode().splitlines():
        if line.startswith("data:") and "signature_delta" in line:
            out.append(json.loads(line[5:])["delta"]["signature"])
    return out


# -- every recorded stream -----------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("chunk", [0, 7])
def test_every_fixture_follows_the_event_protocol(name: str, chunk: int) -> None:
    check_protocol(decode(fixture_bytes("anthropic", name), chunk=chunk))


def test_fixture_list_is_complete() -> None:
    assert len(FIXTURES) == 18


# -- facts per fixture (INDEX.md) ----------------------------------------------------------


def test_text_basic() -> None:
    events = decode(fixture_bytes("anthropic", "text-basic.sse"))
    d = done(events)
    assert d.reason == "stop"
    assert blocks(d.message.content) == [("text", "Hello there!")]
    assert [e.delta for e in events if isinstance(e, TextDelta)] == ["Hello", " there", "!"]
    # message_start said output_tokens=1, message_delta 6: cumulative, so replaced, not added.
    assert d.message.usage == Usage(input=11, output=6)
    assert d.message.response_id == "msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK"
    assert d.message.response_model == "claude-3-opus-latest"
    assert d.message.model == MODEL


def test_text_sonnet45_and_short_inference_geo() -> None:
    d = done(decode(fixture_bytes("anthropic", "text-sonnet45.sse")))
    assert d.reason == "stop" and len(d.message.text) == 108
    assert d.message.text.startswith("Hello! I'm doing well, thank you for asking. How are you doi")
    assert d.message.usage == Usage(input=12, output=30)
    d = done(decode(fixture_bytes("anthropic", "text-short-inference-geo.sse")))
    assert d.message.text == "2" and d.message.usage == Usage(input=20, output=5)


def test_tool_use_basic() -> None:
    events = decode(fixture_bytes("anthropic", "tool-use-basic.sse"))
    d = done(events)
    assert d.reason == "toolUse"
    assert d.message.text == "I'll check the current weather in Paris for you."
    (call,) = d.message.tool_calls
    assert call.id == "toolu_01NRLabsLyVHZPKxbKvkfSMn" and call.name == "get_weather"
    assert call.arguments == {"location": "Paris"} and call.arguments_error is None
    assert [e.delta for e in events if isinstance(e, ToolCallDelta)] == [
        '{"locati',
        'on": "P',
        "ar",
        'is"}',
    ]
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.content_index, s.id, s.name) for s in starts] == [
        (1, "toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather")
    ]
    assert d.message.usage == Usage(input=377, output=65)


def test_text_then_tool_use() -> None:
    d = done(decode(fixture_bytes("anthropic", "text-then-tool-use.sse")))
    assert d.reason == "toolUse" and d.message.text == "I'll invoke the JSON response tool."
    (call,) = d.message.tool_calls
    assert call.name == "json"
    assert call.arguments == {
        "elements": [{"location": "San Francisco", "temperature": 58, "condition": "sunny"}]
    }
    assert d.message.usage == Usage(input=849, output=47)


def test_tool_use_without_arguments() -> None:
    d = done(decode(fixture_bytes("anthropic", "tool-use-no-args.sse")))
    assert d.reason == "toolUse" and d.message.text == "I'll update the issue list for you."
    (call,) = d.message.tool_calls
    assert call.name == "updateIssueList" and call.arguments == {}
    assert call.arguments_error is None and call.raw_arguments is None
    assert d.message.usage == Usage(input=565, output=48)


def test_max_tokens_cut_tool_json_is_reported_not_silently_empty() -> None:
    events = decode(fixture_bytes("anthropic", "max-tokens-incomplete-tool-json.sse"))
    d = done(events)
    assert d.reason == "length"
    assert len(d.message.text) == 135
    (call,) = d.message.tool_calls
    assert call.name == "make_file" and call.arguments == {}
    assert call.arguments_error is not None and "not valid JSON" in call.arguments_error
    assert call.raw_arguments is not None
    assert call.raw_arguments.startswith('{"filename": "taxes.txt", "lines_of_text": [\n"# COMPR')
    assert call.raw_arguments.endswith('\n"Filing taxes')
    # The provider never stopped the block; the end event still comes, once, before done.
    assert [type(e) for e in events[-2:]] == [ToolCallEnd, DoneEvent]
    assert d.message.usage == Usage(input=450, output=124)


def test_refusal_is_an_error_with_the_providers_explanation() -> None:
    events = decode(fixture_bytes("anthropic", "refusal-stop-details.sse"))
    err = terminal(events)
    assert isinstance(err, ErrorEvent) and err.reason == "error"
    assert "refusal" in err.error_message and "cyber" in err.error_message
    assert "This request was refused due to policy." in err.error_message
    assert err.message.stop_reason == "error"
    assert err.message.usage == Usage(input=20, output=0)


def test_thinking_signature_stored_byte_for_byte() -> None:
    events = decode(fixture_bytes("anthropic", "thinking-signature.sse"))
    d = done(events)
    thinking, text = d.message.content
    assert isinstance(thinking, ThinkingContent) and not thinking.redacted
    assert len(thinking.thinking) == 75 and thinking.thinking.startswith("The previous result was")
    assert thinking.signature == "".join(signature_deltas("thinking-signature.sse"))
    assert thinking.signature is not None and len(thinking.signature) == 332
    assert isinstance(text, TextContent) and text.text == "925 ÷ 5 = 185"
    # Empty thinking_delta fragments produce no event.
    assert all(e.delta for e in events if isinstance(e, ThinkingDelta))
    assert d.message.usage == Usage(input=69, output=53)


def test_thinking_signature_long() -> None:
    d = done(decode(fixture_bytes("anthropic", "thinking-signature-long.sse")))
    thinking, text = d.message.content
    assert isinstance(thinking, ThinkingContent) and len(thinking.thinking) == 202
    assert thinking.thinking.startswith("This is a straightforward question about")
    assert thinking.signature == "".join(signature_deltas("thinking-signature-long.sse"))
    assert len(thinking.signature) == 504
    assert isinstance(text, TextContent) and len(text.text) == 1021
    assert d.message.usage == Usage(input=43, output=282)


def test_redacted_thinking_keeps_data_as_signature() -> None:
    body = fixture_bytes("anthropic", "redacted-thinking.sse")
    datas = [
        json.loads(line[5:])["content_block"]["data"]
        for line in body.decode().splitlines()
        if line.startswith("data:") and "redacted_thinking" in line
    ]
    events = decode(body)
    d = done(events)
    first, second, text = d.message.content
    for block, data, size in ((first, datas[0], 744), (second, datas[1], 296)):
        assert isinstance(block, ThinkingContent) and block.redacted
        assert block.thinking == "" and block.signature == data and len(data) == size
    assert isinstance(text, TextContent) and len(text.text) == 359
    assert [type(e) for e in events[1:5]] == [
        ThinkingStart,
        ThinkingEnd,
        ThinkingStart,
        ThinkingEnd,
    ]
    assert d.message.usage == Usage(input=92, output=189)


def test_input_tokens_only_in_message_delta_overwrite() -> None:
    d = done(decode(fixture_bytes("anthropic", "usage-input-tokens-in-message-delta.sse")))
    assert d.message.text == "pong" and d.message.usage == Usage(input=61, output=2)


def test_server_tool_blocks_are_not_client_tool_calls_and_cache_usage_is_read() -> None:
    d = done(decode(fixture_bytes("anthropic", "server-tool-code-exec-cache.sse")))
    assert d.reason == "stop" and d.message.tool_calls == ()
    assert blocks(d.message.content) == [
        ("text", "The sum of the squares of the numbers 1 through 12 is **650**.")
    ]
    assert d.message.usage == Usage(input=6, output=198, cache_read=6289, cache_write=3337)
    assert d.message.usage.total == 6 + 198 + 6289 + 3337


def test_mcp_tool_use_is_skipped() -> None:
    d = done(decode(fixture_bytes("anthropic", "mcp-tool-use.sse")))
    assert d.message.tool_calls == () and len(d.message.content) == 1
    assert d.message.text.startswith("The echo tool responded back with: **hello world**")
    assert len(d.message.text) == 112
    assert d.message.usage == Usage(input=1250, output=83)


def test_web_fetch_server_tool_keeps_surrounding_text() -> None:
    d = done(decode(fixture_bytes("anthropic", "web-fetch-server-tool.sse")))
    assert [len(t) for kind, t in blocks(d.message.content)] == [76, 1588]
    assert d.message.tool_calls == ()
    assert d.message.usage == Usage(input=4230, output=446)


def test_web_search_citations_text_blocks() -> None:
    d = done(decode(fixture_bytes("anthropic", "web-search-citations.sse")))
    lengths = [len(t) for kind, t in blocks(d.message.content) if kind == "text"]
    assert lengths == [79, 201, 181, 2, 85, 2, 192, 54, 166, 2, 171, 2, 84, 39, 95, 2, 255, 180]
    assert len(d.message.content) == 18 and d.message.tool_calls == ()
    assert d.message.usage == Usage(input=31772, output=644)


def test_thinking_text_server_tool_text_interleaved() -> None:
    d = done(decode(fixture_bytes("anthropic", "thinking-server-tool-code-exec.sse")))
    thinking, text1, text2 = d.message.content
    assert isinstance(thinking, ThinkingContent) and len(thinking.thinking) == 46
    assert thinking.signature == "".join(signature_deltas("thinking-server-tool-code-exec.sse"))
    assert len(thinking.signature) == 320
    assert isinstance(text1, TextContent) and text1.text == (
        "I'll calculate that expression for you right away!"
    )
    assert isinstance(text2, TextContent) and len(text2.text) == 451
    assert d.message.usage == Usage(input=4714, output=304)


def test_compaction_block_skipped_and_final_usage_replaces_start_usage() -> None:
    d = done(decode(fixture_bytes("anthropic", "compaction-usage-iterations.sse")))
    assert blocks(d.message.content) == [("text", "Hello! 👋")]
    # message_start reported cache_read 55096; the final message_delta says 0 and wins.
    assert d.message.usage == Usage(input=181, output=8, cache_read=0, cache_write=0)


# -- hand-written streams for the gaps -----------------------------------------------------


def test_parallel_tool_calls_with_interleaved_fragments() -> None:
    body = sse(
        message_start({"input_tokens": 10, "output_tokens": 1}),
        block_start(0, {"type": "text", "text": ""}),
        delta(0, {"type": "text_delta", "text": "Both."}),
        block_stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_A", "name": "read", "input": {}}),
        block_start(2, {"type": "tool_use", "id": "toolu_B", "name": "grep", "input": {}}),
        delta(1, {"type": "input_json_delta", "partial_json": ""}),
        delta(2, {"type": "input_json_delta", "partial_json": '{"pattern": '}),
        delta(1, {"type": "input_json_delta", "partial_json": '{"path": "a.py"'}),
        PING,
        delta(2, {"type": "input_json_delta", "partial_json": '"def "}'}),
        delta(1, {"type": "input_json_delta", "partial_json": "}"}),
        block_stop(2),
        block_stop(1),
        message_delta("tool_use", {"output_tokens": 40}),
        MESSAGE_STOP,
    )
    events = decode(body)
    check_protocol(events)
    d = done(events)
    assert d.reason == "toolUse"
    a, b = d.message.tool_calls
    assert (a.id, a.name, a.arguments) == ("toolu_A", "read", {"path": "a.py"})
    assert (b.id, b.name, b.arguments) == ("toolu_B", "grep", {"pattern": "def "})
    assert [(e.content_index, e.delta) for e in events if isinstance(e, ToolCallDelta)] == [
        (2, '{"pattern": '),
        (1, '{"path": "a.py"'),
        (2, '"def "}'),
        (1, "}"),
    ]
    assert [e.content_index for e in events if isinstance(e, ToolCallEnd)] == [2, 1]
    assert d.message.usage == Usage(input=10, output=40)


def test_in_band_overloaded_error_after_http_200() -> None:
    body = sse(
        message_start({"input_tokens": 5, "output_tokens": 1}),
        block_start(0, {"type": "text", "text": ""}),
        delta(0, {"type": "text_delta", "text": "Half an ans"}),
        (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
    )
    events = decode(body)
    check_protocol(events)
    err = terminal(events)
    assert isinstance(err, ErrorEvent) and err.reason == "error"
    assert err.error_message == "anthropic: overloaded_error: Overloaded"
    assert err.transient
    assert err.message.text == "Half an ans"  # what was seen; never appended to history


def test_in_band_error_without_message_keeps_the_raw_data() -> None:
    events = decode(sse(message_start(), ("error", {"type": "error", "detail": "odd"})))
    err = terminal(events)
    assert isinstance(err, ErrorEvent) and '"detail":"odd"' in err.error_message
    assert not err.transient


def test_stream_without_message_stop_is_an_error() -> None:
    body = sse(
        message_start({"input_tokens": 5, "output_tokens": 1}),
        block_start(0, {"type": "text", "text": ""}),
        delta(0, {"type": "text_delta", "text": "cut"}),
        block_stop(0),
        message_delta("end_turn", {"output_tokens": 2}),
    )
    err = terminal(decode(body))
    assert isinstance(err, ErrorEvent)
    assert err.error_message == "anthropic: stream ended before message_stop"
    assert err.message.text == "cut" and err.message.usage == Usage(input=5, output=2)


def test_usage_only_in_the_final_chunk() -> None:
    body = sse(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        delta(0, {"type": "text_delta", "text": "ok"}),
        block_stop(0),
        message_delta(
            "end_turn",
            {
                "input_tokens": 7,
                "output_tokens": 3,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 20,
            },
        ),
        MESSAGE_STOP,
    )
    d = done(decode(body))
    assert d.message.usage == Usage(input=7, output=3, cache_read=100, cache_write=20)


def test_null_usage_fields_do_not_overwrite() -> None:
    body = sse(
        message_start(
            {
                "input_tokens": 9,
                "output_tokens": 1,
                "cache_read_input_tokens": 50,
                "cache_creation_input_tokens": 4,
            }
        ),
        message_delta(
            "end_turn",
            {"input_tokens": None, "output_tokens": 12, "cache_read_input_tokens": None},
        ),
        MESSAGE_STOP,
    )
    d = done(decode(body))
    assert d.message.usage == Usage(input=9, output=12, cache_read=50, cache_write=4)


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [
        ("end_turn", "stop"),
        ("pause_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "toolUse"),
    ],
)
def test_stop_reason_map(stop_reason: str, expected: str) -> None:
    d = done(decode(sse(message_start(), message_delta(stop_reason), MESSAGE_STOP)))
    assert d.reason == expected and d.message.stop_reason == expected


@pytest.mark.parametrize("stop_reason", ["refusal", "sensitive", "model_context_window_exceeded"])
def test_error_stop_reasons_name_themselves(stop_reason: str) -> None:
    err = terminal(decode(sse(message_start(), message_delta(stop_reason), MESSAGE_STOP)))
    assert isinstance(err, ErrorEvent) and err.reason == "error"
    assert repr(stop_reason) in err.error_message


def test_missing_stop_reason_is_judged_by_content() -> None:
    body = sse(
        message_start(),
        block_start(0, {"type": "tool_use", "id": "toolu_X", "name": "ls", "input": {}}),
        block_stop(0),
        message_delta(None),
        MESSAGE_STOP,
    )
    assert done(decode(body)).reason == "toolUse"
    assert done(decode(sse(message_start(), MESSAGE_STOP))).reason == "stop"


def test_tool_input_given_whole_in_block_start() -> None:
    body = sse(
        message_start(),
        block_start(0, {"type": "tool_use", "id": "toolu_W", "name": "ls", "input": {"d": "/"}}),
        block_stop(0),
        message_delta("tool_use"),
        MESSAGE_STOP,
    )
    events = decode(body)
    check_protocol(events)
    (call,) = done(events).message.tool_calls
    assert call.arguments == {"d": "/"}


def test_unknown_events_blocks_and_deltas_are_ignored() -> None:
    body = sse(
        message_start(),
        ("brand_new_event", {"type": "brand_new_event", "x": 1}),
        block_start(0, {"type": "future_block", "stuff": []}),
        delta(0, {"type": "future_delta", "x": "y"}),
        block_stop(0),
        block_start(1, {"type": "text", "text": "Hi"}),
        delta(1, {"type": "citations_delta", "citation": {"type": "char_location"}}),
        delta(1, {"type": "future_delta"}),
        delta(1, {"type": "text_delta", "text": " there"}),
        delta(7, {"type": "text_delta", "text": "index never opened"}),
        block_stop(1),
        block_stop(9),
        message_delta("end_turn"),
        MESSAGE_STOP,
    )
    events = decode(body)
    check_protocol(events)
    assert blocks(done(events).message.content) == [("text", "Hi there")]
    # Initial text in content_block_start is surfaced as a delta.
    assert [e.delta for e in events if isinstance(e, TextDelta)] == ["Hi", " there"]


def test_malformed_json_raises_for_the_runtime_to_report() -> None:
    asm = MessageAssembler(api="anthropic", provider="anthropic", model=MODEL)
    asm.start()
    decoder = AnthropicDecoder(asm)
    decoder.feed(SSEEvent(event="message_start", data=json.dumps(message_start()[1])))
    with pytest.raises(msgspec.DecodeError):
        decoder.feed(SSEEvent(event="content_block_delta", data='{"type":"content_block_del'))
    with pytest.raises(ValueError, match="JSON object"):
        decoder.feed(SSEEvent(event="content_block_delta", data="[1, 2]"))


def test_events_after_the_terminal_are_ignored() -> None:
    asm = MessageAssembler(api="anthropic", provider="anthropic", model=MODEL)
    asm.start()
    decoder = AnthropicDecoder(asm)
    decoder.feed(SSEEvent(event="message_start", data=json.dumps(message_start()[1])))
    out = decoder.feed(SSEEvent(event="message_stop", data='{"type":"message_stop"}'))
    assert isinstance(out[-1], DoneEvent)
    assert decoder.feed(SSEEvent(event="message_stop", data="not even json")) == []
    assert decoder.finish() == []


def test_decoder_errors_are_redacted() -> None:
    key = "sk-ant-PLANTED-KEY-123456"
    asm = MessageAssembler(api="anthropic", provider="anthropic", model=MODEL)
    asm.start()
    decoder = AnthropicDecoder(asm, lambda text: text.replace(key, "***"))
    data = {"type": "error", "error": {"type": "authentication_error", "message": f"bad {key}"}}
    (err,) = decoder.feed(SSEEvent(event="error", data=json.dumps(data)))
    assert isinstance(err, ErrorEvent)
    assert key not in err.error_message and "***" in err.error_message
