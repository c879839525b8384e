"""OpenAI Chat Completions stream decoding: recorded fixtures, hand-written SSE for the gaps
INDEX.md lists, and HTTP behaviour over real loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
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
)
from cursor_byok.llm.openai_chat import ChatDecoder, OpenAIChatAdapter
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.sse import SSEParser
from cursor_byok.llm.types import ZERO_USAGE, RequestMessages, Usage, UserMessage
from tests.support.upstream import Reply, fake_upstream, fixture_bytes

KEY = "sk-proj-PLANTED-key-0123456789abcdef"
REQUEST = RequestMessages(system_prompt="be brief", messages=(UserMessage.of_text("hi"),))
SETTINGS = ModelSettings(model="gpt-4o")


# -- helpers -----------------------------------------------------------------------------------


def decode(data: bytes, *, model: str = "gpt-4o", provider: str = "openai") -> list[ResponseEvent]:
    """Feed a whole SSE body through SSEParser + ChatDecoder, as the runtime does."""
    asm = MessageAssembler(api="openai-chat", provider=provider, model=model)
    events: list[ResponseEvent] = [asm.start()]
    decoder = ChatDecoder(asm)
    parser = SSEParser()
    for sse in [*parser.feed(data), *parser.finish()]:
        events.extend(decoder.feed(sse))
        if isinstance(events[-1], DoneEvent | ErrorEvent):
            break
    else:
        events.extend(decoder.finish())
    check_protocol(events)
    return events


def sse(*chunks: dict[str, Any] | str) -> bytes:
    """Hand-written SSE: each chunk a JSON object (or a literal like [DONE])."""
    out = []
    for c in chunks:
        out.append(f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n")
    return "".join(out).encode()


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return {"id": "chatcmpl-x", "model": "m", "choices": [choice], **extra}


def check_protocol(events: list[ResponseEvent]) -> None:
    """Native stream invariants: start first, one terminal last, indices in order, deltas only
    to open blocks, every block closed before done."""
    assert isinstance(events[0], StartEvent)
    terminals = [e for e in events if isinstance(e, DoneEvent | ErrorEvent)]
    assert len(terminals) == 1 and terminals[0] is events[-1]
    opened: dict[int, str] = {}
    closed: set[int] = set()
    kinds = {
        TextStart: "t",
        ThinkingStart: "k",
        ToolCallStart: "c",
        TextDelta: "t",
        ThinkingDelta: "k",
        ToolCallDelta: "c",
        TextEnd: "t",
        ThinkingEnd: "k",
        ToolCallEnd: "c",
    }
    for e in events[1:-1]:
        kind = kinds[type(e)]
        index = e.content_index  # type: ignore[attr-defined]
        if isinstance(e, TextStart | ThinkingStart | ToolCallStart):
            assert index == len(opened)
            opened[index] = kind
        else:
            assert opened.get(index) == kind and index not in closed
            if isinstance(e, TextEnd | ThinkingEnd | ToolCallEnd):
                closed.add(index)
    if isinstance(events[-1], DoneEvent):
        assert closed == set(opened)
        assert len(events[-1].message.content) == len(opened)


def counts(events: list[ResponseEvent]) -> dict[str, int]:
    return dict(Counter(type(e).__name__ for e in events))


# -- recorded fixtures ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    reason: str  # done reason, or "error"
    text: str | None = None  # exact text, or prefix when `text_len` is set
    text_len: int | None = None
    tools: tuple[tuple[str, str, dict[str, Any]], ...] = ()
    usage: Usage = ZERO_USAGE
    model: str = "gpt-4o-2024-08-06"
    error: str | None = None
    deltas: int | None = None  # text or tool-argument delta events


FIXTURES: dict[str, Facts] = {
    "text-basic.sse": Facts(
        "stop",
        "I'm unable to provide real-time weather updates. To get the ",
        159,
        usage=Usage(input=14, output=30),
        deltas=30,
    ),
    "structured-output-json.sse": Facts(
        "stop",
        '{"city":"San Francisco","temperature":61,"units":"f"}',
        usage=Usage(input=79, output=14),
        deltas=14,
    ),
    "multiple-choices-n3.sse": Facts(  # choice 0 only
        "stop",
        '{"city":"San Francisco","temperature":65,"units":"f"}',
        usage=Usage(input=79, output=42),
        deltas=14,
    ),
    "max-tokens-length.sse": Facts("length", '{"', usage=Usage(input=79, output=1), deltas=1),
    "refusal.sse": Facts(
        "error",
        "",
        usage=Usage(input=79, output=11),
        error="refusal: I'm sorry, I can't assist with that request.",
    ),
    "logprobs-content.sse": Facts("stop", "Foo!", usage=Usage(input=9, output=2), deltas=2),
    "refusal-logprobs.sse": Facts(
        "error",
        "",
        usage=Usage(input=79, output=12),
        error="refusal: I'm very sorry, but I can't assist with that.",
    ),
    "tool-call-single.sse": Facts(
        "toolUse",
        tools=(
            (
                "call_c91SqDXlYFuETYv8mUHzz6pp",
                "GetWeatherArgs",
                {"city": "Edinburgh", "country": "UK", "units": "c"},
            ),
        ),
        usage=Usage(input=76, output=24),
        deltas=14,
    ),
    "tool-calls-parallel.sse": Facts(
        "toolUse",
        tools=(
            (
                "call_JMW1whyEaYG438VE1OIflxA2",
                "GetWeatherArgs",
                {"city": "Edinburgh", "country": "GB", "units": "c"},
            ),
            (
                "call_DNYTawLBoN8fj3KN6qU9N1Ou",
                "get_stock_price",
                {"ticker": "AAPL", "exchange": "NASDAQ"},
            ),
        ),
        usage=Usage(input=149, output=60),
        deltas=20,
    ),
    "tool-call-strict.sse": Facts(
        "toolUse",
        tools=(
            (
                "call_CTf1nWJLqSeRgDqaCG27xZ74",
                "get_weather",
                {"city": "San Francisco", "state": "CA"},
            ),
        ),
        usage=Usage(input=48, output=19),
        deltas=10,
    ),
    "tool-call-non-strict.sse": Facts(
        "toolUse",
        tools=(("call_4XzlGBLtUe9dy3GVNV4jhq7h", "get_weather", {"city": "New York City"}),),
        usage=Usage(input=44, output=16),
        deltas=7,
    ),
    "text-long-json-format.sse": Facts(
        "stop",
        '\n  {\n    "location": "San Francisco, CA",\n    "weather": ',
        608,
        usage=Usage(input=19, output=177),
        deltas=177,
    ),
    "text-usage-reasoning-tokens-azure.sse": Facts(
        "stop",
        "Capital of Denmark.",
        usage=Usage(input=15, output=78, reasoning=64),
        model="gpt-5-nano-2025-08-07",
        deltas=4,
    ),
    "text-long-usage-every-chunk.sse": Facts(
        "stop",
        "**Holiday Name:** Harmony Day\n\n**Date:** Celebrated annual",
        1724,
        usage=Usage(input=16, output=300),
        model="gpt-4.1-nano-2025-04-14",
        deltas=300,
    ),
    "text-usage-obfuscation.sse": Facts(
        "stop", "Paris.", usage=Usage(input=13, output=11), model="gpt-5-2025-08-07", deltas=2
    ),
    "tool-call-then-usage.sse": Facts(
        "toolUse",
        tools=(("call_ZR5UUuTt3pf61kjwAJIYdVMj", "get_capital", {"country": "UK"}),),
        usage=Usage(input=53, output=15),
        model="gpt-4o-mini-2024-07-18",
        deltas=5,
    ),
    "text-after-tool-usage.sse": Facts(
        "stop",
        "The capital of the UK is London.",
        usage=Usage(input=78, output=9),
        model="gpt-4o-mini-2024-07-18",
        deltas=8,
    ),
}


def test_every_recorded_fixture_is_covered() -> None:
    from tests.support.upstream import PROVIDER_FIXTURES

    assert {p.name for p in (PROVIDER_FIXTURES / "openai-chat").glob("*.sse")} == set(FIXTURES)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_recorded_fixture(name: str) -> None:
    facts = FIXTURES[name]
    events = decode(fixture_bytes("openai-chat", name))
    last = events[-1]
    message = last.message  # type: ignore[union-attr]
    if facts.reason == "error":
        assert isinstance(last, ErrorEvent) and last.reason == "error"
        assert last.error_message == facts.error
        assert len(events) == 2  # a refusal never shows up as text
    else:
        assert isinstance(last, DoneEvent) and last.reason == facts.reason
        assert message.stop_reason == facts.reason
    if facts.text is not None:
        if facts.text_len is None:
            assert message.text == facts.text
        else:
            assert message.text.startswith(facts.text) and len(message.text) == facts.text_len
        text_deltas = [e.delta for e in events if isinstance(e, TextDelta)]
        assert "".join(text_deltas) == message.text
    calls = message.tool_calls
    assert [(c.id, c.name, c.arguments) for c in calls] == list(facts.tools)
    assert all(c.arguments_error is None and c.raw_arguments is None for c in calls)
    assert message.usage == facts.usage
    assert message.response_id and message.response_id.startswith("chatcmpl-")
    assert message.response_model == facts.model
    if facts.deltas is not None:
        n = sum(isinstance(e, TextDelta | ToolCallDelta) for e in events)
        assert n == facts.deltas
    # Chat closes blocks only at the end: every *_end comes after the last delta.
    ends = [i for i, e in enumerate(events) if isinstance(e, TextEnd | ToolCallEnd)]
    deltas = [i for i, e in enumerate(events) if isinstance(e, TextDelta | ToolCallDelta)]
    if ends and deltas:
        assert min(ends) > max(deltas)


def test_parallel_fixture_event_order_and_indices() -> None:
    events = decode(fixture_bytes("openai-chat", "tool-calls-parallel.sse"))
    assert counts(events) == {
        "StartEvent": 1,
        "ToolCallStart": 2,
        "ToolCallDelta": 20,
        "ToolCallEnd": 2,
        "DoneEvent": 1,
    }
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.content_index, s.name) for s in starts] == [
        (0, "GetWeatherArgs"),
        (1, "get_stock_price"),
    ]
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert [e.content_index for e in ends] == [0, 1]
    args0 = "".join(
        e.delta for e in events if isinstance(e, ToolCallDelta) and e.content_index == 0
    )
    assert args0 == '{"city": "Edinburgh", "country": "GB", "units": "c"}'


def test_azure_prompt_filter_chunk_is_ignored() -> None:
    events = decode(fixture_bytes("openai-chat", "text-usage-reasoning-tokens-azure.sse"))
    assert counts(events)["TextStart"] == 1
    assert events[-1].message.response_id == "chatcmpl-CYPS1lijGoK8gd9lYzY3r9Sx50nbt"  # type: ignore[union-attr]


def test_partial_view_is_live() -> None:
    events = decode(fixture_bytes("openai-chat", "text-basic.sse"))
    delta = next(e for e in events if isinstance(e, TextDelta))
    assert delta.partial is not None
    assert delta.partial.snapshot().text == events[-1].message.text  # type: ignore[union-attr]


# -- hand-written SSE: the gaps in INDEX.md --------------------------------------------------------


def test_reasoning_content_thinking_then_text_then_tool_call() -> None:
    """DeepSeek / llama.cpp / vLLM: reasoning in `reasoning_content` (no recording exists)."""
    body = sse(
        chunk({"role": "assistant", "content": None, "reasoning_content": ""}),
        chunk({"reasoning_content": "Let me "}),
        chunk({"reasoning_content": "look.", "content": None}),
        chunk({"content": "Checking."}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_00_abc",
                        "type": "function",
                        "function": {"name": "ls", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"/"}'}}]}),
        chunk(finish="tool_calls"),
        {
            "id": "chatcmpl-x",
            "choices": [],
            "usage": {
                "prompt_tokens": 100,
                "completion_tokens": 20,
                "prompt_cache_hit_tokens": 64,
                "prompt_cache_miss_tokens": 36,
                "completion_tokens_details": {"reasoning_tokens": 5},
            },
        },
        "[DONE]",
    )
    events = decode(body, model="deepseek-chat", provider="deepseek")
    assert [type(e).__name__ for e in events] == [
        "StartEvent",
        "ThinkingStart",
        "ThinkingDelta",
        "ThinkingDelta",
        "TextStart",
        "TextDelta",
        "ToolCallStart",
        "ToolCallDelta",
        "ToolCallDelta",
        "ThinkingEnd",
        "TextEnd",
        "ToolCallEnd",
        "DoneEvent",
    ]
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "toolUse"
    thinking, text, call = done.message.content
    assert thinking.thinking == "Let me look." and thinking.signature == "reasoning_content"  # type: ignore[union-attr]
    assert text.text == "Checking."  # type: ignore[union-attr]
    assert call.id == "call_00_abc" and call.arguments == {"path": "/"}  # type: ignore[union-attr]
    assert done.message.usage == Usage(input=36, output=20, cache_read=64, reasoning=5)


def test_reasoning_field_names_first_non_empty_wins() -> None:
    """`reasoning` (OpenRouter, Ollama), `reasoning_text`; two fields with the same text
    (chutes) are read once."""
    body = sse(
        chunk({"reasoning": "a", "reasoning_text": "a"}),
        chunk({"reasoning_content": "", "reasoning": "b"}),
        chunk({"content": "x"}, finish="stop"),
        "[DONE]",
    )
    done = decode(body)[-1]
    assert isinstance(done, DoneEvent)
    assert done.message.content[0].thinking == "ab"  # type: ignore[union-attr]
    assert done.message.content[0].signature == "reasoning"  # type: ignore[union-attr]
    body = sse(chunk({"reasoning_text": "r"}, finish="stop"), "[DONE]")
    done = decode(body)[-1]
    assert done.message.content[0].signature == "reasoning_text"  # type: ignore[union-attr]


def test_openrouter_encrypted_reasoning_details_go_on_the_tool_call() -> None:
    entry = {
        "type": "reasoning.encrypted",
        "data": "ENC+/=data",
        "id": "tool_1",
        "format": "google-gemini-v1",
        "index": 0,
    }
    body = (
        b": OPENROUTER PROCESSING\n\n"
        + sse(
            chunk({"reasoning": "think", "reasoning_details": [{"type": "reasoning.text"}]}),
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "tool_1", "function": {"name": "f", "arguments": "{}"}}
                    ],
                    "reasoning_details": [entry],
                }
            ),
        )
        + b": OPENROUTER PROCESSING\n\n"
        + sse(chunk(finish="tool_calls"), "[DONE]")
    )
    done = decode(body, provider="openrouter")[-1]
    assert isinstance(done, DoneEvent)
    call = done.message.tool_calls[0]
    assert call.thought_signature is not None
    assert json.loads(call.thought_signature) == entry


def test_parallel_calls_reusing_index_zero_with_new_ids() -> None:
    """Ollama / LiteLLM: every call on index 0; a new id there is a new call."""
    body = sse(
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x":1}'}}
                ]
            }
        ),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "b", "function": {"name": "g", "arguments": '{"y":2}'}}
                ]
            }
        ),
        chunk(finish="stop"),  # Ollama says stop; the calls still need results
        "[DONE]",
    )
    done = decode(body)[-1]
    assert isinstance(done, DoneEvent) and done.reason == "toolUse"
    assert [(c.id, c.name, c.arguments) for c in done.message.tool_calls] == [
        ("a", "f", {"x": 1}),
        ("b", "g", {"y": 2}),
    ]


def test_fragments_without_index_and_late_id_and_name() -> None:
    """vLLM parsers: no index, id only on the first fragment; other servers send the name late."""
    body = sse(
        chunk({"tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": ""}}]}),
        chunk({"tool_calls": [{"function": {"arguments": '{"a":'}}]}),
        chunk({"tool_calls": [{"function": {"arguments": "1}"}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "g"}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
        chunk(finish="tool_calls"),
        "[DONE]",
    )
    events = decode(body)
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.id, s.name) for s in starts] == [("c1", "f"), ("", "")]
    done = events[-1]
    assert [(c.id, c.name, c.arguments) for c in done.message.tool_calls] == [  # type: ignore[union-attr]
        ("c1", "f", {"a": 1}),
        ("c2", "g", {}),
    ]


def test_tool_without_arguments_and_missing_id() -> None:
    body = sse(
        chunk({"tool_calls": [{"index": 0, "function": {"name": "now", "arguments": ""}}]}),
        chunk(finish="tool_calls"),
        "[DONE]",
    )
    done = decode(body)[-1]
    call = done.message.tool_calls[0]  # type: ignore[union-attr]
    assert call.arguments == {} and call.arguments_error is None
    assert call.id.startswith("call_") and len(call.id) <= 40  # generated, replayable


def test_invalid_final_arguments_are_reported_with_raw_text() -> None:
    body = sse(
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c", "function": {"name": "f", "arguments": '{"a": 1'}}
                ]
            }
        ),
        chunk(finish="tool_calls"),
        "[DONE]",
    )
    events = decode(body)
    end = next(e for e in events if isinstance(e, ToolCallEnd))
    assert end.tool_call.arguments_error and "not valid JSON" in end.tool_call.arguments_error
    assert end.tool_call.raw_arguments == '{"a": 1'
    assert end.tool_call.arguments == {}


def test_text_after_a_tool_call_goes_to_the_one_text_block() -> None:
    body = sse(
        chunk({"content": "A"}),
        chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]}),
        chunk({"content": "B"}),
        chunk(finish="tool_calls"),
        "[DONE]",
    )
    events = decode(body)
    assert [e.content_index for e in events if isinstance(e, TextDelta)] == [0, 0]
    done = events[-1]
    assert done.message.text == "AB" and len(done.message.content) == 2  # type: ignore[union-attr]


def test_usage_cumulative_is_replaced_and_moonshot_choice_usage() -> None:
    body = sse(
        chunk({"content": "a"}, usage={"prompt_tokens": 10, "completion_tokens": 1}),
        chunk({"content": "b"}, usage={"prompt_tokens": 10, "completion_tokens": 2}),
        chunk(finish="stop", usage=None),
        "[DONE]",
    )
    assert decode(body)[-1].message.usage == Usage(input=10, output=2)  # type: ignore[union-attr]
    moonshot = {
        "id": "x",
        "choices": [
            {
                "index": 0,
                "delta": {},
                "finish_reason": "stop",
                "usage": {
                    "prompt_tokens": 50,
                    "completion_tokens": 7,
                    "prompt_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 10},
                },
            }
        ],
    }
    events = decode(sse(chunk({"content": "z"}), moonshot, "[DONE]"))
    assert events[-1].message.usage == Usage(input=20, output=7, cache_read=20, cache_write=10)  # type: ignore[union-attr]


def test_llama_cpp_timings_count_until_a_usage_chunk_comes() -> None:
    """llama.cpp's `timings` (every chunk with `timings_per_token`): the usage so far of a
    call canceled mid-answer; a usage chunk, when one comes, wins."""
    timings = {"cache_n": 35, "prompt_n": 12, "predicted_n": 2, "prompt_ms": 40.0}
    asm = MessageAssembler(api="openai-chat", provider="llama", model="m")
    asm.start()
    decoder = ChatDecoder(asm)
    for sse_event in SSEParser().feed(sse(chunk({"content": "a"}, timings=timings))):
        decoder.feed(sse_event)
    assert asm.progress().usage == Usage(input=12, output=2, cache_read=35)
    body = sse(
        chunk({"content": "a"}, timings=timings),
        chunk(finish="stop", timings={**timings, "predicted_n": 3}),
        {"id": "x", "choices": [], "usage": {"prompt_tokens": 47, "completion_tokens": 3}},
        "[DONE]",
    )
    assert decode(body)[-1].message.usage == Usage(input=47, output=3)  # type: ignore[union-attr]


def test_done_waits_for_the_usage_chunk_after_finish_reason() -> None:
    asm = MessageAssembler(api="openai-chat", provider="openai", model="m")
    asm.start()
    decoder = ChatDecoder(asm)
    parser = SSEParser()
    first = parser.feed(sse(chunk({"content": "hi"}, finish="stop")))
    assert not any(isinstance(e, DoneEvent) for s in first for e in decoder.feed(s))
    usage = {"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    for s in parser.feed(sse(usage)):
        assert decoder.feed(s) == []
    (done,) = [e for s in parser.feed(sse("[DONE]")) for e in decoder.feed(s)][-1:]
    assert isinstance(done, DoneEvent) and done.message.usage == Usage(input=3, output=1)
    assert decoder.finish() == []


@pytest.mark.parametrize(
    ("finish", "reason"),
    [("stop", "stop"), ("end", "stop"), ("length", "length"), ("function_call", "toolUse")],
)
def test_finish_reason_map(finish: str, reason: str) -> None:
    done = decode(sse(chunk({"content": "x"}, finish=finish), "[DONE]"))[-1]
    assert isinstance(done, DoneEvent) and done.reason == reason


@pytest.mark.parametrize("finish", ["content_filter", "network_error", "weird"])
def test_other_finish_reasons_are_errors(finish: str) -> None:
    err = decode(sse(chunk({"content": "x"}, finish=finish), "[DONE]"))[-1]
    assert isinstance(err, ErrorEvent) and err.reason == "error"
    assert err.error_message == f"Provider finish_reason: {finish}"
    assert err.message.text == "x"


def test_done_marker_without_finish_reason_is_an_error() -> None:
    err = decode(sse(chunk({"content": "half"}), "[DONE]"))[-1]
    assert isinstance(err, ErrorEvent)
    assert err.error_message == "stream ended without finish_reason"
    assert err.message.text == "half"


def test_eof_without_done_marker() -> None:
    err = decode(sse(chunk({"content": "cut"})))[-1]
    assert isinstance(err, ErrorEvent) and "without finish_reason" in err.error_message
    # finish_reason seen, then EOF without [DONE]: the answer is complete
    done = decode(sse(chunk({"content": "ok"}, finish="stop")))[-1]
    assert isinstance(done, DoneEvent) and done.message.text == "ok"


def test_openrouter_in_band_error_chunk() -> None:
    error_chunk = {
        "id": "gen-1",
        "object": "chat.completion.chunk",
        "model": "anthropic/claude",
        "provider": "Anthropic",
        "error": {
            "code": 502,
            "message": "Provider returned error",
            "metadata": {"raw": '{"type":"overloaded_error"}', "provider_name": "Anthropic"},
        },
        "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
    }
    events = decode(sse(chunk({"content": "par"}), error_chunk, "[DONE]"), provider="openrouter")
    err = events[-1]
    assert isinstance(err, ErrorEvent) and err.reason == "error"
    assert err.error_message == '502: Provider returned error ({"type":"overloaded_error"})'
    assert err.message.text == "par"


def test_unknown_and_odd_chunks_are_ignored() -> None:
    body = sse(
        {"object": "something.else"},
        {"choices": None},
        {"choices": [{"index": 1, "delta": {"content": "other choice"}}]},
        {"choices": [{"index": 0}]},
        {"choices": [{"index": 0, "delta": None, "content_filter_results": {}}]},
        [1, 2],  # type: ignore[arg-type]
        chunk({"content": "ok"}, finish="stop"),
        "[DONE]",
    )
    done = decode(body)[-1]
    assert isinstance(done, DoneEvent) and done.message.text == "ok"


def test_malformed_chunk_raises() -> None:
    asm = MessageAssembler(api="openai-chat", provider="openai", model="m")
    asm.start()
    decoder = ChatDecoder(asm)
    (event,) = SSEParser().feed(b'data: {"choices": [\n\n')
    with pytest.raises(msgspec.DecodeError):
        decoder.feed(event)


def test_in_band_error_text_is_redacted() -> None:
    asm = MessageAssembler(api="openai-chat", provider="openrouter", model="m")
    asm.start()
    decoder = ChatDecoder(asm, lambda s: s.replace(KEY, "***"))
    (event,) = SSEParser().feed(sse({"error": {"message": f"bad key {KEY}"}}))
    (err,) = decoder.feed(event)
    assert isinstance(err, ErrorEvent) and KEY not in err.error_message


# -- over loopback HTTP ------------------------------------------------------------------------


async def collect(stream: Any) -> list[ResponseEvent]:
    out: list[ResponseEvent] = []
    while True:
        event = await stream.recv()
        out.append(event)
        if isinstance(event, DoneEvent | ErrorEvent):
            return out


def adapter(base_url: str, *, name: str = "openai", key: str | None = KEY) -> OpenAIChatAdapter:
    return OpenAIChatAdapter(
        ProviderSettings(name=name, api="openai-chat", base_url=base_url, api_key=key)
    )


async def test_full_fixture_over_http() -> None:
    async with fake_upstream() as up:
        up.push(Reply.sse(fixture_bytes("openai-chat", "tool-calls-parallel.sse"), chunk_size=97))
        a = adapter(up.base_url + "/v1")
        prepared = a.prepare(REQUEST, SETTINGS)
        events = await collect(a.send(prepared))
        check_protocol(events)
        done = events[-1]
        assert isinstance(done, DoneEvent) and done.reason == "toolUse"
        assert len(done.message.tool_calls) == 2 and done.message.model == "gpt-4o"
        received = up.requests[0]
        assert received.method == "POST" and received.path == "/v1/chat/completions"
        assert received.body == prepared.body
        assert received.headers["authorization"] == f"Bearer {KEY}"
        assert received.headers["content-type"] == "application/json"
        assert KEY.encode() not in prepared.body
        assert all(KEY not in v for _, v in prepared.headers)
        await a.aclose()


async def test_local_server_without_key_sends_no_auth_and_azure_uses_api_key() -> None:
    async with fake_upstream() as up:
        up.push(Reply.sse(fixture_bytes("openai-chat", "logprobs-content.sse")))
        up.push(Reply.sse(fixture_bytes("openai-chat", "logprobs-content.sse")))
        local = adapter(up.base_url, name="llamacpp", key=None)
        assert isinstance((await collect(local.call(REQUEST, SETTINGS)))[-1], DoneEvent)
        assert "authorization" not in up.requests[0].headers
        azure = OpenAIChatAdapter(
            ProviderSettings(
                name="azure",
                api="openai-chat",
                base_url=up.base_url + "/openai/deployments/d1?api-version=2024-10-21",
                api_key=KEY,
            )
        )
        assert isinstance((await collect(azure.call(REQUEST, SETTINGS)))[-1], DoneEvent)
        got = up.requests[1]
        assert got.path == "/openai/deployments/d1/chat/completions?api-version=2024-10-21"
        assert got.headers["api-key"] == KEY and "authorization" not in got.headers
        await local.aclose()
        await azure.aclose()


async def test_http_errors_are_one_error_without_start_and_never_show_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    openai_401 = json.dumps(
        {
            "error": {
                "message": f"Incorrect API key provided: {KEY}. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
        }
    )
    openrouter_400 = json.dumps(
        {
            "error": {
                "code": 400,
                "message": "Provider returned error",
                "metadata": {"raw": f"bad request for key {KEY}", "provider_name": "X"},
            }
        }
    )
    async with fake_upstream() as up:
        up.push(Reply.json(401, openai_401))
        up.push(Reply.json(400, openrouter_400))
        up.push(Reply.json(429, '{"error":{"message":"Rate limit"}}', [("retry-after", "3")]))
        up.push(Reply.events([json.dumps({"error": {"message": f"mid-stream {KEY}"}})]))
        a = adapter(up.base_url)
        results = [await collect(a.call(REQUEST, SETTINGS)) for _ in range(4)]
        e401, e400, e429 = (r[0] for r in results[:3])
        for r in results[:3]:
            assert len(r) == 1 and isinstance(r[0], ErrorEvent)
        assert isinstance(e401, ErrorEvent) and e401.http_status == 401
        assert "invalid_request_error: Incorrect API key provided: ***" in e401.error_message
        assert isinstance(e400, ErrorEvent) and e400.http_status == 400
        assert "Provider returned error (bad request for key ***)" in e400.error_message
        assert isinstance(e429, ErrorEvent) and e429.retry_after_ms == 3000
        in_band = results[3]
        assert len(in_band) == 1 and isinstance(in_band[-1], ErrorEvent)  # nothing was output
        assert in_band[-1].http_status is None and "mid-stream ***" in in_band[-1].error_message
        for r in results:
            for e in r:
                assert KEY not in repr(e)
        assert KEY not in caplog.text
        await a.aclose()


async def test_malformed_chunk_over_http_ends_in_error() -> None:
    async with fake_upstream() as up:
        up.push(Reply.events([json.dumps(chunk({"content": "a"})), "{not json", "[DONE]"]))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        assert isinstance(events[-1], ErrorEvent)
        assert "could not decode" in events[-1].error_message
        await a.aclose()


async def test_truncated_stream_over_http_is_an_error() -> None:
    async with fake_upstream() as up:
        up.push(Reply.events([json.dumps(chunk({"content": "a"}))]))
        a = adapter(up.base_url)
        events = await collect(a.call(REQUEST, SETTINGS))
        assert isinstance(events[-1], ErrorEvent)
        assert events[-1].error_message == "stream ended without finish_reason"
        await a.aclose()


async def test_aclose_aborts_the_request_at_once() -> None:
    async with fake_upstream() as up:
        reply = Reply.events([json.dumps(chunk({"content": "one"}))])
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
        event = await s.recv()
        assert isinstance(event, ErrorEvent) and event.reason == "aborted"
        assert event.message.text == "one"
        assert loop.time() - t0 < 0.5
        for _ in range(50):
            if up.closed_early:
                break
            await asyncio.sleep(0.02)
        assert up.closed_early == [True]
        await a.aclose()


def test_content_as_a_list_of_parts() -> None:
    body = sse(
        chunk({"content": [{"type": "text", "text": "a"}, {"type": "image"}]}),
        chunk({"content": [{"type": "text", "text": "b"}]}, finish="stop"),
        "[DONE]",
    )
    assert decode(body)[-1].message.text == "ab"  # type: ignore[union-attr]


# -- the short path of text-delta chunks -------------------------------------------------------

_TEXTS = st.sampled_from(["ab", "h\u00e9", " ", "\u2603\n"])
# One change to a plain text chunk each (most chunks get none): what must leave the short path.
_VARIANTS: list[tuple[str, Any]] = [
    ("id", None),
    ("id", "b"),
    ("model", None),
    ("model", "gpt-4o"),
    ("usage", None),
    ("usage", {"prompt_tokens": 9, "completion_tokens": 2}),
    ("timings", {"prompt_n": 4, "predicted_n": 2}),
    ("error", None),
    ("error", {"message": "boom"}),
    ("choice.index", None),
    ("choice.index", 1),
    ("choice.finish_reason", "length"),
    ("choice.finish_reason", "stop"),
    ("choice.usage", {"prompt_tokens": 3, "completion_tokens": 1}),
    ("choice.usage", None),
    ("choices", "two"),
    ("choices", ""),
    ("choice.delta", {"content": "x", "role": "assistant"}),
    ("choice.delta", {"role": "assistant", "content": ""}),
    ("choice.delta", {"content": None}),
    ("choice.delta", {"content": ""}),
    ("choice.delta", {"content": [{"type": "text", "text": "parts"}]}),
    ("choice.delta", {"reasoning_content": "hm"}),
    ("choice.delta", {"reasoning": "hm", "content": "x"}),
    ("choice.delta", {"content": "x", "refusal": "no"}),
    ("choice.delta", {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f"}}]}),
    ("choice.delta", {}),
]


@st.composite
def _chunks(draw: st.DrawFn) -> dict[str, Any]:
    """A Chat chunk: a plain text delta (as most of a stream is), often with one change."""
    choice: dict[str, Any] = {"index": 0, "delta": {"content": draw(_TEXTS)}}
    choice["finish_reason"] = None
    out: dict[str, Any] = {"id": "a", "model": "m", "choices": [choice]}
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2]))):
        key, value = draw(st.sampled_from(_VARIANTS))
        where, _, key = key.rpartition(".")
        target = choice if where else out
        if key == "choices":
            out["choices"] = [choice, {"index": 1, "delta": {"content": "o"}}] if value else []
        elif value is None and key in ("id", "model", "index"):
            target.pop(key, None)  # absent rather than null
        else:
            target[key] = value
    return out


def _general(c: dict[str, Any]) -> dict[str, Any]:
    """`c` as the general path reads it: a `refusal: null` more in each delta changes no
    meaning and keeps the chunk off the short path (its delta has one key only)."""
    choices = [{**ch, "delta": {"refusal": None, **ch["delta"]}} for ch in c["choices"]]
    return {**c, "choices": choices}


def _outcome(chunks: list[dict[str, Any]]) -> tuple[list[tuple[Any, ...]], Any]:
    events = decode(sse(*chunks, "[DONE]"))
    seen = [
        (type(e).__name__, getattr(e, "content_index", None), getattr(e, "delta", None))
        for e in events
    ]
    last = events[-1]
    assert isinstance(last, DoneEvent | ErrorEvent)
    return seen, last.message


@settings(max_examples=400)
@given(st.lists(_chunks(), max_size=12))
def test_text_delta_short_path_decodes_as_the_general_one(chunks: list[dict[str, Any]]) -> None:
    assert _outcome(chunks) == _outcome([_general(c) for c in chunks])


def test_text_delta_short_path_keeps_new_ids_models_and_usage() -> None:
    events = decode(
        sse(
            {"choices": [{"index": 0, "delta": {"content": "a"}}]},
            {"id": "r1", "choices": [{"index": 0, "delta": {"content": "b"}}]},
            {"id": "r2", "model": "m2", "choices": [{"index": 0, "delta": {"content": "c"}}]},
            {"choices": [{"delta": {"content": "d"}, "usage": {"completion_tokens": 5}}]},
            chunk(finish="stop"),
            "[DONE]",
        )
    )
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert done.message.text == "abcd"
    assert (done.message.response_id, done.message.response_model) == ("r1", "m2")
    assert done.message.usage.output == 5


def test_text_delta_short_path_leaves_deltas_with_more_than_text() -> None:
    events = decode(
        sse(
            chunk({"content": "a"}),
            chunk({"content": "b", "reasoning_content": "hm"}),
            chunk({"content": "c", "refusal": "no"}),
            chunk(finish="stop"),
            "[DONE]",
        )
    )
    assert [type(e).__name__ for e in events[1:5]] == [
        "TextStart",
        "TextDelta",
        "ThinkingStart",
        "ThinkingDelta",
    ]
    assert isinstance(events[-1], ErrorEvent)
    assert events[-1].message.error_message == "refusal: no"
