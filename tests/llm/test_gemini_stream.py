"""Gemini stream decoding: recorded streams, hand-written gaps, and HTTP behaviour over loopback."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    without_partial,
)
from cursor_byok.llm.gemini import (
    ArgumentsWriter,
    GeminiAdapter,
    GeminiDecoder,
    assign_path,
    generated_tool_call_id,
    parse_json_path,
)
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.sse import SSEParser
from cursor_byok.llm.types import (
    AssistantMessage,
    RequestMessages,
    TextContent,
    ThinkingContent,
    ToolCall,
    UserMessage,
)
from tests.support.upstream import Reply, fake_upstream, fixture_bytes

KEY = "AIzaSy-PLANTED-gemini-key-0123456789"
MODEL = "gemini-3-pro-preview"
Chunk = dict[str, Any]


# -- helpers -------------------------------------------------------------------------------


def fixture(name: str) -> bytes:
    return fixture_bytes("gemini", name)


def fixture_chunks(name: str) -> list[Chunk]:
    text = fixture(name).decode()
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def fixture_parts(name: str) -> list[Chunk]:
    return [
        part
        for chunk in fixture_chunks(name)
        for cand in chunk.get("candidates", [])
        for part in cand.get("content", {}).get("parts", [])
    ]


def signatures(name: str) -> list[str]:
    return [p["thoughtSignature"] for p in fixture_parts(name) if "thoughtSignature" in p]


def sse(*chunks: Chunk | str) -> bytes:
    out = b""
    for chunk in chunks:
        data = chunk if isinstance(chunk, str) else json.dumps(chunk)
        out += b"data: " + data.encode() + b"\n\n"
    return out


def decode(data: bytes, *, model: str = MODEL, redact: Any = None) -> list[ResponseEvent]:
    """Feed raw SSE bytes through SSEParser + GeminiDecoder, as the HTTP runtime does."""
    asm = MessageAssembler(api="gemini", provider="google", model=model)
    events: list[ResponseEvent] = [asm.start()]
    decoder = GeminiDecoder(asm, redact=redact)
    parser = SSEParser()
    for event in [*parser.feed(data), *parser.finish()]:
        events.extend(decoder.feed(event))
        if asm.terminated:
            return events
    events.extend(decoder.finish())
    return events


def terminal(events: list[ResponseEvent]) -> DoneEvent | ErrorEvent:
    last = events[-1]
    assert isinstance(last, DoneEvent | ErrorEvent)
    assert sum(isinstance(e, DoneEvent | ErrorEvent) for e in events) == 1
    return last


def done(events: list[ResponseEvent]) -> AssistantMessage:
    last = terminal(events)
    assert isinstance(last, DoneEvent), getattr(last, "error_message", last)
    return last.message


def failed(events: list[ResponseEvent]) -> ErrorEvent:
    last = terminal(events)
    assert isinstance(last, ErrorEvent), last
    return last


def tool_deltas(events: list[ResponseEvent], index: int) -> list[str]:
    return [e.delta for e in events if isinstance(e, ToolCallDelta) and e.content_index == index]


def check_protocol(events: list[ResponseEvent]) -> None:
    """start first; every block start/delta/end well-nested on its content index; one terminal."""
    assert isinstance(events[0], StartEvent)
    terminal(events)
    opened: dict[int, str] = {}
    closed: set[int] = set()
    kinds = {
        TextStart: "text",
        ThinkingStart: "thinking",
        ToolCallStart: "toolCall",
    }
    for ev in events[1:-1]:
        assert not isinstance(ev, StartEvent | DoneEvent | ErrorEvent)
        index = ev.content_index
        if type(ev) in kinds:
            assert index == len(opened), "content indices are dense and in order"
            opened[index] = kinds[type(ev)]
        else:
            assert index in opened and index not in closed
            if isinstance(ev, TextEnd | ThinkingEnd | ToolCallEnd):
                closed.add(index)
    if isinstance(events[-1], DoneEvent):
        assert closed == set(opened), "every block ends before done"
        assert len(events[-1].message.content) == len(opened)


# -- recorded streams ------------------------------------------------------------------------

ALL_FIXTURES = [
    "function-call-2.0.sse",
    "grounding-web-search.sse",
    "single-chunk-final.sse",
    "text-basic.sse",
    "text-thought-signature.sse",
    "thinking-summaries-2.5-pro.sse",
    "tool-call-gemini3-signature.sse",
    "tool-call-streamed-array-args-no-terminal.sse",
    "tool-call-streamed-nested-args-vertex.sse",
    "tool-call-thought-signature.sse",
    "tool-calls-streamed-args-parallel.sse",
    "tool-calls-streamed-mixed-thought.sse",
    "usage-thoughts-tokens.sse",
    "vertex-thought-signature-flex.sse",
]


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_every_fixture_is_well_formed_deterministic_and_totals_match(name: str) -> None:
    events = decode(fixture(name))
    check_protocol(events)
    message = done(events)
    last = fixture_chunks(name)[-1]
    assert message.response_id == last["responseId"]
    assert message.usage.total == last["usageMetadata"]["totalTokenCount"]
    again = decode(fixture(name))
    assert [without_partial(e) for e in again[1:]] == [without_partial(e) for e in events[1:]]
    # every streamed tool-call delta text concatenates to exactly the final arguments
    for index, block in enumerate(message.content):
        if isinstance(block, ToolCall):
            assert json.loads("".join(tool_deltas(events, index))) == block.arguments


def test_text_basic_crlf_and_last_usage_wins() -> None:
    events = decode(fixture("text-basic.sse"))
    message = done(events)
    assert message.text == "The capital of France is Paris.\n"
    assert [e.delta for e in events if isinstance(e, TextDelta)] == [
        "The",
        " capital of France",
        " is Paris.\n",
    ]
    assert message.stop_reason == "stop" and terminal(events).reason == "stop"
    # earlier chunks reported promptTokenCount=15; the last report (13) replaces it
    assert (message.usage.input, message.usage.output, message.usage.reasoning) == (13, 8, 0)
    assert message.response_model == "gemini-2.0-flash-exp"


def test_text_signature_on_trailing_empty_part_is_kept_byte_for_byte() -> None:
    events = decode(fixture("text-thought-signature.sse"))
    message = done(events)
    [sig] = signatures("text-thought-signature.sse")
    assert len(sig) == 916
    assert message.content == (
        TextContent(
            text='There are **3** "r"s in strawberry.\n\nst**r**awbe**rr**y', signature=sig
        ),
    )
    u = message.usage
    assert (u.input, u.output, u.cache_read, u.cache_write, u.reasoning) == (9, 208, 0, 0, 185)


def test_thinking_summaries_then_text_with_signature() -> None:
    events = decode(fixture("thinking-summaries-2.5-pro.sse"))
    message = done(events)
    thinking, text = message.content
    assert isinstance(thinking, ThinkingContent) and isinstance(text, TextContent)
    assert len(thinking.thinking) == 1575 and thinking.thinking.startswith(
        "**Clarifying User Goals"
    )
    assert thinking.signature is None
    assert len(text.text) == 1938 and text.text.startswith("This is a great question!")
    assert text.signature == signatures("thinking-summaries-2.5-pro.sse")[0]
    assert len(text.signature) == 6152
    kinds = [type(e).__name__ for e in events if not isinstance(e, TextDelta | ThinkingDelta)]
    # the thinking block is closed when the part type switches, before the text block opens
    assert kinds == [
        "StartEvent",
        "ThinkingStart",
        "ThinkingEnd",
        "TextStart",
        "TextEnd",
        "DoneEvent",
    ]
    assert sum(isinstance(e, ThinkingDelta) for e in events) == 4
    assert sum(isinstance(e, TextDelta) for e in events) == 19
    assert (message.usage.output, message.usage.reasoning) == (469 + 787, 787)


def test_function_call_single_chunk_without_signature() -> None:
    events = decode(fixture("function-call-2.0.sse"))
    message = done(events)
    assert terminal(events).reason == "toolUse"
    [call] = message.tool_calls
    assert call.name == "get_capital" and call.arguments == {"country": "France"}
    assert call.id == generated_tool_call_id("get_capital", "1lpeaMTxIpW1nvgP-O3vwQY", 0)
    assert call.thought_signature is None
    # start + one whole-arguments delta + end, back to back
    kinds = [type(e) for e in events[1:-1]]
    assert kinds == [ToolCallStart, ToolCallDelta, ToolCallEnd]
    assert tool_deltas(events, 0) == ['{"country":"France"}']


@pytest.mark.parametrize(
    ("name", "tool", "args", "sig_len"),
    [
        ("tool-call-gemini3-signature.sse", "weather", {"location": "San Francisco"}, 5488),
        ("tool-call-thought-signature.sse", "get_country", {}, 1408),
    ],
)
def test_function_call_signature_kept_on_the_call(
    name: str, tool: str, args: dict[str, Any], sig_len: int
) -> None:
    events = decode(fixture(name))
    message = done(events)
    assert terminal(events).reason == "toolUse"
    [call] = message.content
    assert isinstance(call, ToolCall)
    assert (call.name, call.arguments) == (tool, args)
    assert call.thought_signature == signatures(name)[0] and len(call.thought_signature) == sig_len
    # the trailing empty text part opens no block
    assert not any(isinstance(e, TextStart) for e in events)


def test_streamed_parallel_calls() -> None:
    events = decode(fixture("tool-calls-streamed-args-parallel.sse"))
    message = done(events)
    assert terminal(events).reason == "toolUse"
    first, second = message.content
    assert isinstance(first, ToolCall) and isinstance(second, ToolCall)
    assert (first.name, first.arguments) == ("getWeather", {"location": "Boston"})
    assert (second.name, second.arguments) == ("getWeather", {"location": "San Francisco"})
    rid = "dqHOab6xGLzWodAPkPuViA4"
    assert [first.id, second.id] == [f"getWeather_{rid}_0", f"getWeather_{rid}_1"]
    assert first.thought_signature == signatures("tool-calls-streamed-args-parallel.sse")[0]
    assert second.thought_signature is None  # Gemini signs only the first of parallel calls
    assert tool_deltas(events, 0) == ['{"location":"Boston', '"', "}"]
    assert tool_deltas(events, 1) == ['{"location":"San Francisco', '"', "}"]
    # the first call ends before the second starts
    order = [(type(e).__name__, getattr(e, "content_index", None)) for e in events]
    assert order.index(("ToolCallEnd", 0)) < order.index(("ToolCallStart", 1))
    u = message.usage
    assert (u.input, u.output, u.reasoning) == (26, 23 + 132, 132)


def test_streamed_mixed_thought_and_calls_including_a_call_without_args() -> None:
    message = done(decode(fixture("tool-calls-streamed-mixed-thought.sse")))
    thinking, *calls = message.content
    assert isinstance(thinking, ThinkingContent) and len(thinking.thinking) == 320
    assert [(c.name, c.arguments) for c in calls if isinstance(c, ToolCall)] == [
        ("read_theme", {}),  # no args at all -> {}
        ("read_screen", {"id": "A"}),
        ("read_screen", {"id": "B"}),
        ("read_screen", {"id": "C"}),
    ]
    assert len({c.id for c in message.tool_calls}) == 4
    assert message.tool_calls[0].thought_signature is not None
    assert all(c.arguments_error is None for c in message.tool_calls)


ARRAY_ARGS = {
    "operations": [
        {
            "action": "add",
            "description": "Fresh red apple",
            "itemid": "apple_001",
            "price": 0.5,
        },
        {
            "action": "add",
            "description": "Ripe yellow banana",
            "itemid": "banana_001",
            "price": 0.3,
        },
    ]
}


def test_streamed_array_args_without_terminal_call_part() -> None:
    # No trailing `functionCall: {}` part, but the stream has finishReason STOP: a success.
    events = decode(fixture("tool-call-streamed-array-args-no-terminal.sse"))
    message = done(events)
    assert terminal(events).reason == "toolUse"
    [call] = message.content
    assert isinstance(call, ToolCall) and call.name == "writeItems"
    assert call.arguments == ARRAY_ARGS
    assert json.loads("".join(tool_deltas(events, 0))) == ARRAY_ARGS
    assert len(tool_deltas(events, 0)) == 15  # 14 fragments carry text + the closing brackets
    assert (message.usage.input, message.usage.output) == (54, 74 + 121)


def test_streamed_array_args_cut_before_finish_reason_is_an_error() -> None:
    raw = fixture("tool-call-streamed-array-args-no-terminal.sse").replace(b"\r\n", b"\n")
    events_raw = [e for e in raw.split(b"\n\n") if e.strip()]
    assert b"finishReason" in events_raw[-1]
    truncated = b"\n\n".join(events_raw[:-1]) + b"\n\n"
    err = failed(decode(truncated))
    assert "without a finishReason" in err.error_message
    assert err.message.stop_reason == "error"


def test_streamed_nested_args_vertex() -> None:
    events = decode(fixture("tool-call-streamed-nested-args-vertex.sse"))
    message = done(events)
    [call] = message.tool_calls
    recipe = call.arguments["recipe"]
    assert recipe["name"] == "Lasagna"
    assert len(recipe["ingredients"]) == 10 and len(recipe["steps"]) == 10
    assert recipe["ingredients"][0] == {"amount": "16 oz", "name": "Lasagna noodles"}
    assert recipe["ingredients"][9] == {"amount": "1/2 tsp", "name": "Pepper"}
    assert recipe["steps"][0] == "Preheat oven to 375°F (190°C)."
    # strings continued over several fragments are joined
    assert recipe["steps"][1] == (
        "Cook lasagna noodles according to package directions, drain and set aside."
    )
    assert recipe["steps"][4] == "In a 9x13 baking dish, spread a thin layer of meat sauce."
    assert list(call.arguments) == ["recipe"]
    assert list(recipe) == ["ingredients", "name", "steps"]  # keys in arrival order
    assert json.loads("".join(tool_deltas(events, 0))) == call.arguments
    assert call.thought_signature == signatures("tool-call-streamed-nested-args-vertex.sse")[0]


def test_usage_is_live_mid_stream_and_replaced_not_added() -> None:
    asm = MessageAssembler(api="gemini", provider="google", model=MODEL)
    asm.start()
    decoder = GeminiDecoder(asm)
    seen = []
    for event in SSEParser().feed(fixture("usage-thoughts-tokens.sse")):
        decoder.feed(event)
        usage = asm.snapshot().usage  # the live partial view after each chunk
        seen.append((usage.input, usage.output, usage.reasoning))
    assert seen == [(18, 31 + 35, 35), (18, 79 + 35, 35), (18, 80 + 35, 35)]
    [end] = decoder.finish()
    assert isinstance(end, DoneEvent) and end.message.usage == asm.usage


def test_grounding_text_and_tool_use_prompt_tokens_count_as_input() -> None:
    message = done(decode(fixture("grounding-web-search.sse")))
    assert len(message.text) == 926
    assert message.text.startswith("### Weather in San Francisco is Mild and Partly Cloudy Today")
    assert message.usage.input == 17 + 102 and message.usage.total == 772


@pytest.mark.parametrize(
    ("name", "text", "sig_len"),
    [("single-chunk-final.sse", "Paris", 0), ("vertex-thought-signature-flex.sse", "OK", 724)],
)
def test_single_chunk_responses(name: str, text: str, sig_len: int) -> None:
    message = done(decode(fixture(name)))
    [block] = message.content
    assert isinstance(block, TextContent) and block.text == text
    assert len(block.signature or "") == sig_len


# -- hand-written streams for the gaps in the recordings -------------------------------------


def chunk(
    parts: list[Chunk] | None = None,
    *,
    finish: str | None = None,
    usage: Chunk | None = None,
    rid: str = "resp-1",
    **candidate: Any,
) -> Chunk:
    cand: Chunk = {"content": {"role": "model", "parts": parts or []}, **candidate}
    if finish:
        cand["finishReason"] = finish
    out: Chunk = {"candidates": [cand], "responseId": rid, "modelVersion": MODEL}
    if usage is not None:
        out["usageMetadata"] = usage
    return out


def test_max_tokens_is_length() -> None:
    events = decode(
        sse(chunk([{"text": "Once upon"}]), chunk([{"text": " a time"}], finish="MAX_TOKENS"))
    )
    last = terminal(events)
    assert isinstance(last, DoneEvent) and last.reason == "length"
    assert last.message.stop_reason == "length" and last.message.text == "Once upon a time"


def test_max_tokens_inside_streamed_arguments_reports_the_call() -> None:
    events = decode(
        sse(
            chunk([{"functionCall": {"name": "write", "willContinue": True}}]),
            chunk(
                [
                    {
                        "functionCall": {
                            "partialArgs": [
                                {"jsonPath": "$.text", "stringValue": "Once", "willContinue": True}
                            ],
                            "willContinue": True,
                        }
                    }
                ],
                finish="MAX_TOKENS",
            ),
        )
    )
    last = terminal(events)
    assert isinstance(last, DoneEvent) and last.reason == "length"
    [call] = last.message.tool_calls
    assert call.arguments == {} and call.arguments_error is not None
    assert call.raw_arguments is not None and "MAX_TOKENS" in call.raw_arguments


@pytest.mark.parametrize(
    "reason",
    [
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "MALFORMED_FUNCTION_CALL",
        "UNEXPECTED_TOOL_CALL",
        "OTHER",
        "SOMETHING_NEW",
    ],
)
def test_error_finish_reasons_are_errors_with_the_provider_message(reason: str) -> None:
    events = decode(
        sse(
            chunk([{"text": "Here is"}]),
            chunk([], finish=reason, finishMessage=f"Stopped because of {reason.lower()}."),
        )
    )
    err = failed(events)
    assert err.reason == "error"
    assert reason in err.error_message
    assert f"Stopped because of {reason.lower()}." in err.error_message
    assert err.message.text == "Here is"  # what was received, not committed


def test_safety_without_finish_message() -> None:
    err = failed(decode(sse(chunk([], finish="SAFETY", safetyRatings=[{"blocked": True}]))))
    assert err.error_message == "Gemini stopped with finishReason SAFETY"


def test_prompt_block_reason_is_an_error() -> None:
    body = sse(
        {
            "promptFeedback": {
                "blockReason": "PROHIBITED_CONTENT",
                "blockReasonMessage": "The prompt was blocked.",
            },
            "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7},
            "responseId": "blocked-1",
        }
    )
    err = failed(decode(body))
    assert (
        "PROHIBITED_CONTENT" in err.error_message and "The prompt was blocked." in err.error_message
    )
    assert err.message.usage.input == 7


def test_in_band_error_after_http_200() -> None:
    err_obj = {
        "error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
    }
    err = failed(decode(sse(chunk([{"text": "partial"}]), err_obj, chunk([{"text": "late"}]))))
    assert err.error_message == "Gemini stream error: UNAVAILABLE: The model is overloaded."
    assert err.message.text == "partial"


def test_in_band_error_as_a_json_array() -> None:
    body = sse('[{"error":{"code":500,"message":"Internal error","status":"INTERNAL"}}]')
    assert "INTERNAL: Internal error" in failed(decode(body)).error_message


def test_cached_tokens_and_usage_only_in_the_final_chunk() -> None:
    usage = {
        "promptTokenCount": 1000,
        "cachedContentTokenCount": 800,
        "candidatesTokenCount": 20,
        "thoughtsTokenCount": 30,
        "totalTokenCount": 1050,
    }
    body = sse(
        chunk([{"text": "a"}], usage={"trafficType": "ON_DEMAND"}),
        chunk([{"text": "b"}]),
        chunk([], finish="STOP", usage=usage),
    )
    message = done(decode(body))
    u = message.usage
    assert (u.input, u.output, u.cache_read, u.cache_write, u.reasoning) == (200, 50, 800, 0, 30)
    assert u.total == 1050
    # a chunk whose usageMetadata holds no counts (only trafficType) reports nothing
    asm = MessageAssembler(api="gemini", provider="google", model=MODEL)
    asm.start()
    decoder = GeminiDecoder(asm)
    totals = []
    for event in SSEParser().feed(body):
        decoder.feed(event)
        totals.append(asm.snapshot().usage.total)
    assert totals == [0, 0, 1050]


def test_parallel_complete_calls_in_one_chunk_with_and_without_provider_ids() -> None:
    events = decode(
        sse(
            chunk(
                [
                    {"text": "Let me check both."},
                    {
                        "functionCall": {"name": "read", "args": {"path": "a.py"}, "id": "fc-1"},
                        "thoughtSignature": "c2lnLTE=",
                    },
                    {"functionCall": {"name": "read", "args": {"path": "b.py"}}},
                    {"functionCall": {"name": "list_files"}},
                ],
                finish="STOP",
                rid="R9",
            )
        )
    )
    message = done(events)
    check_protocol(events)
    assert terminal(events).reason == "toolUse"
    assert message.text == "Let me check both."
    assert [(c.id, c.name, c.arguments, c.thought_signature) for c in message.tool_calls] == [
        ("fc-1", "read", {"path": "a.py"}, "c2lnLTE="),
        ("read_R9_1", "read", {"path": "b.py"}, None),
        ("list_files_R9_2", "list_files", {}, None),
    ]
    assert tool_deltas(events, 3) == ["{}"]


def test_duplicate_provider_ids_get_generated_ones() -> None:
    call = {"functionCall": {"name": "f", "args": {}, "id": "same"}}
    message = done(decode(sse(chunk([call, call], finish="STOP", rid="R"))))
    assert [c.id for c in message.tool_calls] == ["same", "f_R_1"]


def test_text_after_a_tool_call_opens_a_new_block_and_thinking_switches() -> None:
    events = decode(
        sse(
            chunk([{"text": "think 1", "thought": True}]),
            chunk([{"text": "answer"}, {"text": "think 2", "thought": True}]),
            chunk([{"functionCall": {"name": "f", "args": {"x": 1}}}, {"text": "after"}]),
            chunk([{"text": " the call"}], finish="STOP"),
        )
    )
    check_protocol(events)
    message = done(events)
    assert [type(b).__name__ for b in message.content] == [
        "ThinkingContent",
        "TextContent",
        "ThinkingContent",
        "ToolCall",
        "TextContent",
    ]
    assert message.content[4] == TextContent(text="after the call")
    assert terminal(events).reason == "toolUse"


def test_last_non_empty_signature_wins_on_thinking() -> None:
    message = done(
        decode(
            sse(
                chunk([{"text": "a", "thought": True, "thoughtSignature": "Zmlyc3Q="}]),
                chunk([{"text": "b", "thought": True, "thoughtSignature": ""}]),
                chunk([{"text": "", "thought": True, "thoughtSignature": "bGFzdA=="}]),
                chunk([{"text": "done"}], finish="STOP"),
            )
        )
    )
    assert message.content[0] == ThinkingContent(thinking="ab", signature="bGFzdA==")


def test_invalid_tool_arguments_are_reported_with_the_raw_text() -> None:
    events = decode(
        sse(chunk([{"functionCall": {"name": "edit", "args": '{"path": "a.py", '}}], finish="STOP"))
    )
    [call] = done(events).tool_calls
    assert call.arguments == {}
    assert call.arguments_error is not None and "not valid JSON" in call.arguments_error
    assert call.raw_arguments == '{"path": "a.py", '


def test_non_object_arguments_are_reported() -> None:
    events = decode(sse(chunk([{"functionCall": {"name": "f", "args": [1, 2]}}], finish="STOP")))
    [call] = done(events).tool_calls
    assert call.arguments_error is not None and "JSON object" in call.arguments_error
    assert call.raw_arguments == "[1,2]"


def test_conflicting_partial_args_are_reported_not_guessed() -> None:
    events = decode(
        sse(
            chunk([{"functionCall": {"name": "f", "willContinue": True}}]),
            chunk(
                [
                    {
                        "functionCall": {
                            "partialArgs": [
                                {"jsonPath": "$.a", "stringValue": "text"},
                                {"jsonPath": "$.a[0]", "numberValue": 1},
                            ],
                            "willContinue": True,
                        }
                    }
                ]
            ),
            chunk([{"functionCall": {}}], finish="STOP"),
        )
    )
    [call] = done(events).tool_calls
    assert call.arguments_error is not None
    assert call.raw_arguments is not None and "conflicting value types" in call.raw_arguments
    assert '"$.a[0]"' in call.raw_arguments


def test_streamed_call_cut_by_the_next_named_call_and_all_value_kinds() -> None:
    def partial(*args: Chunk, more: bool = True) -> Chunk:
        fc: Chunk = {"partialArgs": list(args)}
        if more:
            fc["willContinue"] = True
        return {"functionCall": fc}

    events = decode(
        sse(
            chunk([{"functionCall": {"name": "f", "willContinue": True, "id": "call-f"}}]),
            chunk(
                [
                    partial(
                        {"jsonPath": "$.flag", "boolValue": True},
                        {"jsonPath": "$.none", "nullValue": "NULL_VALUE"},
                        {"jsonPath": "$['odd key'].n", "numberValue": 2},
                        {"jsonPath": '$.s["q\\"uote"]', "stringValue": "x", "willContinue": True},
                    )
                ]
            ),
            chunk([partial({"jsonPath": '$.s["q\\"uote"]', "stringValue": "y"})]),
            # no `{}` end part: the next call closes this one
            chunk([{"functionCall": {"name": "g", "args": {"k": "v"}}}], finish="STOP"),
        )
    )
    check_protocol(events)
    first, second = done(events).tool_calls
    expected = {"flag": True, "none": None, "odd key": {"n": 2}, "s": {'q"uote': "xy"}}
    assert first.id == "call-f" and first.arguments == expected
    assert json.loads("".join(tool_deltas(events, 0))) == expected
    assert second.arguments == {"k": "v"}


def test_out_of_order_fragments_still_assemble_the_object() -> None:
    events = decode(
        sse(
            chunk([{"functionCall": {"name": "f", "willContinue": True}}]),
            chunk(
                [
                    {
                        "functionCall": {
                            "partialArgs": [
                                {"jsonPath": "$.a.x", "numberValue": 1},
                                {"jsonPath": "$.b", "numberValue": 2},
                                {"jsonPath": "$.a.y", "numberValue": 3},
                            ]
                        }
                    }
                ]
            ),
            chunk([], finish="STOP"),
        )
    )
    [call] = done(events).tool_calls
    assert call.arguments == {"a": {"x": 1, "y": 3}, "b": 2} and call.arguments_error is None


def test_stream_without_finish_reason_is_an_error() -> None:
    err = failed(decode(sse(chunk([{"text": "Hello"}]))))
    assert "without a finishReason" in err.error_message
    assert err.message.text == "Hello"
    assert "without a finishReason" in failed(decode(b"")).error_message


def test_unknown_fields_parts_and_events_are_ignored() -> None:
    body = (
        sse(
            {"someFutureField": 1},
            {"candidates": []},
            {"candidates": [{"index": 0}]},
            chunk([{"executableCode": {"code": "print(1)"}}, {"text": "ok", "futureFlag": 1}]),
            chunk([], finish="STOP"),
        )
        + b"event: ping\ndata: {}\n\n: comment\n\n"
    )
    assert done(decode(body)).text == "ok"


def test_malformed_json_chunk_raises() -> None:
    asm = MessageAssembler(api="gemini", provider="google", model=MODEL)
    asm.start()
    decoder = GeminiDecoder(asm)
    [event] = SSEParser().feed(b'data: {"candidates": [\n\n')
    with pytest.raises(ValueError):
        decoder.feed(event)


def test_decoder_redacts_in_band_error_text() -> None:
    body = sse({"error": {"code": 400, "message": f"bad key {KEY}", "status": "INVALID_ARGUMENT"}})
    err = failed(decode(body, redact=lambda t: t.replace(KEY, "***")))
    assert KEY not in err.error_message and "***" in err.error_message


# -- the partialArgs assembly on its own ---------------------------------------------------


def test_parse_json_path() -> None:
    assert parse_json_path("$.recipe.steps[10]") == ("recipe", "steps", 10)
    assert parse_json_path("$['a.b'][0][\"c\\\\d\"]") == ("a.b", 0, "c\\d")
    for bad in ["", "recipe", "$", "$.a[", "$..a"]:
        with pytest.raises(ValueError):
            parse_json_path(bad)


scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=12)
keys = st.text(max_size=6)
# Non-empty containers only: an empty {} or [] has no leaf, so no fragment can create it.
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, min_size=1, max_size=3)
        | st.dictionaries(keys, inner, min_size=1, max_size=3)
    ),
    max_leaves=10,
)
objects = st.dictionaries(keys, values, min_size=1, max_size=4)


def _quote(key: str) -> str:
    return "['" + key.replace("\\", "\\\\").replace("'", "\\'") + "']"


def _fragments(value: Any, path: str, split: int) -> list[Chunk]:
    if isinstance(value, dict):
        return [f for k, v in value.items() for f in _fragments(v, path + _quote(k), split)]
    if isinstance(value, list):
        return [f for i, v in enumerate(value) for f in _fragments(v, f"{path}[{i}]", split)]
    if isinstance(value, str):
        pieces = [value[i : i + split] for i in range(0, len(value), split)] + [""]
        return [
            {
                "jsonPath": path,
                "stringValue": p,
                **({"willContinue": True} if j < len(pieces) - 1 else {}),
            }
            for j, p in enumerate(pieces)
        ]
    if value is None:
        return [{"jsonPath": path, "nullValue": "NULL_VALUE"}]
    if isinstance(value, bool):
        return [{"jsonPath": path, "boolValue": value}]
    return [{"jsonPath": path, "numberValue": value}]


@given(objects, st.integers(1, 4))
def test_fragments_in_document_order_assemble_and_stream_exactly(
    obj: dict[str, Any], split: int
) -> None:
    fragments = _fragments(obj, "$", split)
    parts = [{"functionCall": {"partialArgs": [f], "willContinue": True}} for f in fragments]
    events = decode(
        sse(
            chunk([{"functionCall": {"name": "f", "willContinue": True}}]),
            *[chunk([p]) for p in parts],
            chunk([{"functionCall": {}}], finish="STOP"),
        )
    )
    [call] = done(events).tool_calls
    assert call.arguments == obj
    assert json.loads("".join(tool_deltas(events, 0))) == obj


def test_writer_and_assign_directly() -> None:
    writer = ArgumentsWriter()
    root: dict[str, Any] = {}
    text = ""
    for path, value, is_string, more in [
        (("a", 0, "b"), "x", True, True),
        (("a", 0, "b"), "y", True, False),
        (("a", 1), 5, False, False),
        (("c",), False, False, False),
    ]:
        assign_path(root, path, value, append=path == ("a", 0, "b") and value == "y")
        text += writer.feed(path, value, is_string=is_string, more=more)
    text += writer.close()
    assert root == {"a": [{"b": "xy"}, 5], "c": False}
    assert text == '{"a":[{"b":"xy"},5],"c":false}'
    assert ArgumentsWriter().close() == "{}"


# -- over real loopback HTTP -----------------------------------------------------------------

REQUEST = RequestMessages(system_prompt="Be brief.", messages=(UserMessage.of_text("hi"),))


def adapter(base_url: str, **kw: Any) -> GeminiAdapter:
    return GeminiAdapter(
        ProviderSettings(name="google", api="gemini", base_url=base_url, api_key=KEY, **kw)
    )


async def collect(stream: Any) -> list[ResponseEvent]:
    out: list[ResponseEvent] = []
    while True:
        ev = await stream.recv()
        out.append(ev)
        if isinstance(ev, DoneEvent | ErrorEvent):
            return out


async def test_full_fixture_over_http_in_odd_sized_chunks() -> None:
    name = "tool-call-streamed-nested-args-vertex.sse"
    async with fake_upstream() as up:
        up.push(Reply.sse(fixture(name), chunk_size=97))
        a = adapter(up.base_url + "/v1beta")
        settings = ModelSettings(model="gemini-3.1-pro-preview")
        events = await collect(a.call(REQUEST, settings))
        check_protocol(events)
        direct = decode(fixture(name), model="gemini-3.1-pro-preview")
        assert [without_partial(e) for e in events[1:]] == [without_partial(e) for e in direct[1:]]
        assert done(events).provider == "google" and done(events).api == "gemini"
        [req] = up.requests
        assert req.method == "POST"
        assert req.path == "/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent?alt=sse"
        assert req.headers["x-goog-api-key"] == KEY
        assert req.headers["content-type"] == "application/json"
        assert KEY not in req.path and KEY.encode() not in req.body
        assert req.body == a.prepare(REQUEST, settings).body
        await a.aclose()


async def test_http_429_is_one_error_without_start() -> None:
    body = json.dumps(
        {
            "error": {
                "code": 429,
                "message": "Resource has been exhausted (e.g. check quota).",
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "26s"}
                ],
            }
        }
    )
    async with fake_upstream() as up:
        up.push(Reply.json(429, body, [("retry-after", "26")]))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, ModelSettings(model=MODEL)))
        assert len(events) == 1
        [err] = events
        assert isinstance(err, ErrorEvent) and err.http_status == 429
        assert err.retry_after_ms == 26_000
        assert err.error_message == (
            "google HTTP 429: RESOURCE_EXHAUSTED: Resource has been exhausted (e.g. check quota)."
            " (retry in 26s)"
        )
        await a.aclose()


async def test_http_error_body_as_array_and_non_json() -> None:
    body = '[{"error":{"code":400,"message":"Invalid JSON payload","status":"INVALID_ARGUMENT"}}]'
    async with fake_upstream() as up:
        up.push(Reply.json(400, body), Reply.json(503, "upstream connect error"))
        a = adapter(up.base_url)
        [e1] = await collect(a.call(REQUEST, ModelSettings(model=MODEL)))
        [e2] = await collect(a.call(REQUEST, ModelSettings(model=MODEL)))
        assert isinstance(e1, ErrorEvent) and "INVALID_ARGUMENT: Invalid JSON payload" in (
            e1.error_message
        )
        assert isinstance(e2, ErrorEvent) and e2.http_status == 503
        assert "upstream connect error" in e2.error_message
        await a.aclose()


async def test_api_key_never_in_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    leak = {"error": {"code": 400, "message": f"API key not valid: {KEY}", "status": "INVALID"}}
    async with fake_upstream() as up:
        up.push(
            Reply.json(400, json.dumps(leak)),
            Reply.sse(sse(chunk([{"text": "x"}]), leak)),
            Reply.sse(sse(chunk([{"text": "x"}], finish="SAFETY", finishMessage=KEY))),
            Reply.sse(b"data: {not json " + KEY.encode() + b"\n\n"),
        )
        a = adapter(up.base_url)
        errors = []
        for _ in range(4):
            events = await collect(a.call(REQUEST, ModelSettings(model=MODEL)))
            errors.append(failed(events))
        for err in errors:
            assert KEY not in err.error_message
            assert KEY not in repr(err.message)
        assert "API key not valid" in errors[0].error_message
        assert "API key not valid" in errors[1].error_message
        assert KEY not in repr(a.provider) and KEY not in str(a.provider)
        assert KEY not in caplog.text
        assert all(KEY not in v for _, v in a.prepare(REQUEST, ModelSettings(model=MODEL)).headers)
        await a.aclose()


async def test_malformed_chunk_over_http_is_an_error_after_start() -> None:
    async with fake_upstream() as up:
        up.push(Reply.sse(sse(chunk([{"text": "a"}])) + b"data: {oops\n\n"))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, ModelSettings(model=MODEL)))
        assert isinstance(events[0], StartEvent)
        assert "could not decode" in failed(events).error_message
        await a.aclose()


async def test_truncated_body_over_http_is_an_error() -> None:
    async with fake_upstream() as up:
        up.push(Reply.sse(sse(chunk([{"text": "Hel"}]), chunk([{"text": "lo"}]))))
        a = adapter(up.base_url)
        err = failed(await collect(a.call(REQUEST, ModelSettings(model=MODEL))))
        assert "without a finishReason" in err.error_message and err.message.text == "Hello"
        await a.aclose()


async def test_aclose_aborts_the_request_at_once() -> None:
    async with fake_upstream() as up:
        reply = Reply.sse(sse(chunk([{"text": "thinking about it"}])))
        reply.hang_after = True
        up.push(reply)
        a = adapter(up.base_url)
        stream = a.call(REQUEST, ModelSettings(model=MODEL))
        assert isinstance(await stream.recv(), StartEvent)
        assert isinstance(await stream.recv(), TextStart)
        assert isinstance(await stream.recv(), TextDelta)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await stream.aclose()
        ev = await stream.recv()
        assert isinstance(ev, ErrorEvent) and ev.reason == "aborted"
        assert ev.message.stop_reason == "aborted" and ev.message.text == "thinking about it"
        assert loop.time() - t0 < 0.5
        for _ in range(50):
            if up.closed_early:
                break
            await asyncio.sleep(0.02)
        assert up.closed_early == [True]
        await a.aclose()
