"""OpenAI Responses stream decoding: the recorded streams of INDEX.md and hand-written SSE for
its gaps, fed through SSEParser + ResponsesDecoder directly (no sockets)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

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
from cursor_byok.llm.openai_responses import ResponsesDecoder
from cursor_byok.llm.sse import SSEParser
from cursor_byok.llm.types import TextContent, ThinkingContent, ToolCall, Usage
from tests.support.upstream import PROVIDER_FIXTURES, fixture_bytes

API_DIR = "openai-responses"


def parse(body: bytes, *, chunk: int = 0) -> list[ResponseEvent]:
    """A whole stream through the parser and decoder, as the HTTP runtime would drive it."""
    asm = MessageAssembler(api="openai-responses", provider="openai", model="test-model")
    decoder = ResponsesDecoder(asm)
    parser = SSEParser()
    out: list[ResponseEvent] = [asm.start()]
    chunks = [body[i : i + chunk] for i in range(0, len(body), chunk)] if chunk else [body]
    for part in chunks:
        for sse in parser.feed(part):
            out.extend(decoder.feed(sse))
    for sse in parser.finish():
        out.extend(decoder.feed(sse))
    if not asm.terminated:
        out.extend(decoder.finish())
    return out


def sse(*events: dict[str, Any], named: bool = True) -> bytes:
    """Hand-written Responses SSE: `event: <type>` + `data: <json>` per event."""
    out = []
    for ev in events:
        head = f"event: {ev['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(ev)}\n\n")
    return "".join(out).encode()


def check_invariants(events: list[ResponseEvent]) -> None:
    """Protocol shape every stream must have, whatever its content."""
    assert isinstance(events[0], StartEvent)
    terminals = [e for e in events if isinstance(e, DoneEvent | ErrorEvent)]
    assert len(terminals) == 1 and events[-1] is terminals[0]
    deltas: dict[int, list[str]] = {}
    kinds: dict[int, str] = {}
    ended: set[int] = set()
    for e in events[1:-1]:
        if isinstance(e, TextStart | ThinkingStart | ToolCallStart):
            assert e.content_index == len(kinds), "content indices are dense and ordered"
            kinds[e.content_index] = type(e).__name__
            deltas[e.content_index] = []
        elif isinstance(e, TextDelta | ThinkingDelta | ToolCallDelta):
            assert e.content_index in kinds and e.content_index not in ended
            deltas[e.content_index].append(e.delta)
        elif isinstance(e, TextEnd | ThinkingEnd):
            ended.add(e.content_index)
            assert "".join(deltas[e.content_index]) == e.content, "deltas join to the final"
        elif isinstance(e, ToolCallEnd):
            ended.add(e.content_index)
            raw = e.tool_call.raw_arguments
            joined = "".join(deltas[e.content_index])
            if raw is None:
                assert (json.loads(joined) if joined else {}) == e.tool_call.arguments
            else:
                assert joined == raw
    final = final_message(events)
    if isinstance(events[-1], DoneEvent):
        assert ended == set(kinds), "every started block ended before done"
    assert len(final.content) == len(kinds)


def final_message(events: list[ResponseEvent]) -> Any:
    last = events[-1]
    assert isinstance(last, DoneEvent | ErrorEvent)
    return last.message


def raw_items(name: str, item_type: str) -> list[bytes]:
    """The raw `item` JSON of each output_item.done of a type, sliced from the fixture text."""

    class Env(msgspec.Struct):
        type: str
        item: msgspec.Raw = msgspec.Raw()

    out = []
    for ev in SSEParser().feed(fixture_bytes(API_DIR, name)):
        env = msgspec.json.decode(ev.data, type=Env)
        is_done = env.type == "response.output_item.done"
        if is_done and msgspec.json.decode(env.item).get("type") == item_type:
            out.append(bytes(env.item))
    return out


ALL_FIXTURES = sorted(p.name for p in (PROVIDER_FIXTURES / API_DIR).glob("*.sse"))


@pytest.mark.parametrize("name", ALL_FIXTURES)
@pytest.mark.parametrize("chunk", [0, 7])
def test_every_fixture_keeps_the_protocol(name: str, chunk: int) -> None:
    events = parse(fixture_bytes(API_DIR, name), chunk=chunk)
    check_invariants(events)
    assert final_message(events).response_id


# -- fixture facts (INDEX.md) -----------------------------------------------------------------


def test_text_basic() -> None:
    events = parse(fixture_bytes(API_DIR, "text-basic.sse"))
    msg = final_message(events)
    assert isinstance(events[-1], DoneEvent) and events[-1].reason == "stop"
    assert msg.text == "`arm64` (Apple Silicon)."
    assert msg.usage == Usage(input=444, output=12)
    assert msg.response_id == "resp_0b0392bd3bb81302006994e83ac0ac819396f3f5aa5f239e03"
    assert msg.response_model == "gpt-5.2-2025-12-11"
    (block,) = msg.content
    sig = json.loads(block.signature)
    assert sig == {"v": 1, "id": "msg_0b0392bd3bb81302006994e83b32748193aa637cdb31658266"}


@pytest.mark.parametrize(
    ("name", "text", "usage"),
    [
        ("reasoning-encrypted-final-text.sse", "The final result is **570**.", (299, 12)),
        ("text-after-function.sse", "The capital of France is Paris.", (278, 9)),
        ("logprobs-text.sse", "The capital of Minas Gerais is Belo Horizonte.", (25, 10)),
    ],
)
def test_text_fixtures(name: str, text: str, usage: tuple[int, int]) -> None:
    events = parse(fixture_bytes(API_DIR, name))
    msg = final_message(events)
    assert isinstance(events[-1], DoneEvent) and events[-1].reason == "stop"
    assert msg.text == text
    assert (msg.usage.input, msg.usage.output, msg.usage.cache_read) == (*usage, 0)


def test_two_messages_with_phase_and_cached_tokens() -> None:
    msg = final_message(parse(fixture_bytes(API_DIR, "text-phase-two-messages.sse")))
    first, second = msg.content
    assert isinstance(first, TextContent) and isinstance(second, TextContent)
    assert len(first.text) == 153 and first.text.startswith("Got it — I’ll quickly check")
    assert len(second.text) == 1485 and second.text.startswith("Here are a few **AI headlines")
    assert json.loads(first.signature or "")["phase"] == "commentary"
    assert json.loads(second.signature or "")["phase"] == "final_answer"
    assert msg.usage == Usage(input=7112 - 3072, output=463, cache_read=3072, reasoning=64)


def test_reasoning_summary_encrypted_and_function_call() -> None:
    name = "reasoning-encrypted-function-call.sse"
    events = parse(fixture_bytes(API_DIR, name))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "toolUse"
    thinking, call = done.message.content
    assert isinstance(thinking, ThinkingContent) and isinstance(call, ToolCall)
    assert len(thinking.thinking) == 163
    assert thinking.thinking.startswith("**Calculating step-by-step using calculator**\n\nI'll")
    # The signature is the reasoning item exactly as received, encrypted content included.
    assert thinking.signature is not None
    assert thinking.signature.encode() == raw_items(name, "reasoning")[0]
    assert json.loads(thinking.signature)["encrypted_content"].startswith("gAAAAABpPDIVOKrs")
    assert call.name == "calculator"
    assert call.id == (
        "call_AB6AaRZ1FYZB2RwS6A5vbdqn|fc_01830d662ab3856501693c32151234819091cfca267e98cc5f"
    )
    assert call.arguments == {"a": 12, "b": 7, "op": "add"}
    assert done.message.usage == Usage(input=134, output=28)
    assert sum(isinstance(e, ToolCallDelta) for e in events) == 13


def test_reasoning_summary_cached_fixture() -> None:
    msg = final_message(parse(fixture_bytes(API_DIR, "reasoning-summary-text-cached.sse")))
    thinking, text = msg.content
    assert thinking.thinking == "**Counting character occurrences**"
    assert len(text.text) == 138 and text.text.startswith("There are **3** letter")
    assert msg.usage == Usage(input=19, output=105, reasoning=44)
    # encrypted_content is null here: kept verbatim, but not replayable (see request tests).
    assert json.loads(thinking.signature)["encrypted_content"] is None


def test_long_reasoning_summary_parts_are_joined_with_blank_lines() -> None:
    events = parse(fixture_bytes(API_DIR, "reasoning-summary-long.sse"))
    msg = final_message(events)
    thinking, text = msg.content
    # INDEX.md counts the four parts' text without separators: 2022 chars + 3 x "\n\n".
    assert len(thinking.thinking) == 2022 + 3 * 2
    assert thinking.thinking.startswith("**Providing street crossing instructions**\n\nThe user")
    assert thinking.thinking.count("\n\n**") == 3  # four summary parts
    assert len(text.text) == 1251 and text.text.startswith("I'm not a road safety professional")
    assert msg.usage == Usage(input=13, output=1680, reasoning=1408)
    assert json.loads(thinking.signature)["encrypted_content"]
    assert sum(isinstance(e, ThinkingDelta) for e in events) == 383 + 3  # + separators


@pytest.mark.parametrize(
    ("name", "tool", "call_id", "args", "usage"),
    [
        (
            "function-call-basic.sse",
            "get_capital",
            "call_kL0PCQV7M2WMoVX8V8OtYSAL",
            {"country": "France"},
            Usage(input=255, output=16),
        ),
        (
            "function-call-tool-search.sse",
            "get_weather",
            "call_Q7pq6EfVGRnauPLWSSYBGJ1l",
            {"location": "San Francisco, CA", "unit": "fahrenheit"},
            Usage(input=467, output=26),
        ),
        (
            "reasoning-encrypted-function-usage.sse",
            "final_result",
            "call_CWXgs68YprAjp6t0371hiPOI",
            {"result": 6666},
            Usage(input=53, output=469, reasoning=448),
        ),
    ],
)
def test_function_call_fixtures(
    name: str, tool: str, call_id: str, args: dict[str, Any], usage: Usage
) -> None:
    done = parse(fixture_bytes(API_DIR, name))[-1]
    assert isinstance(done, DoneEvent) and done.reason == "toolUse"
    (call,) = done.message.tool_calls
    assert call.name == tool and call.arguments == args and call.arguments_error is None
    assert call.id.startswith(call_id + "|fc_")
    assert done.message.usage == usage


def test_encrypted_reasoning_without_summary() -> None:
    msg = final_message(parse(fixture_bytes(API_DIR, "moderation-text.sse")))
    thinking, text = msg.content
    assert thinking.thinking == "" and json.loads(thinking.signature)["encrypted_content"]
    assert text.text == "Paris."
    assert msg.usage == Usage(input=13, output=59)


def test_hosted_web_search_items_are_ignored() -> None:
    events = parse(fixture_bytes(API_DIR, "web-search-annotations.sse"))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "stop"
    kinds = [type(b).__name__ for b in done.message.content]
    assert kinds == ["ThinkingContent"] * 7 + ["TextContent"]
    assert len(done.message.text) == 3645
    assert done.message.usage == Usage(
        input=31073 - 3712, output=4416, cache_read=3712, reasoning=3712
    )


def test_image_generation_item_is_ignored() -> None:
    done = parse(fixture_bytes(API_DIR, "image-generation-partial.sse"))[-1]
    assert isinstance(done, DoneEvent) and done.reason == "stop"
    assert [type(b).__name__ for b in done.message.content] == ["ThinkingContent", "TextContent"]
    assert done.message.usage == Usage(
        input=2941 - 1920, output=1249, cache_read=1920, reasoning=1024
    )


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("custom-tool-call.sse", "custom_tool_call write_sql"),
        ("apply-patch-tool.sse", "apply_patch_call"),
    ],
)
def test_client_executed_items_we_cannot_run_end_in_error(name: str, what: str) -> None:
    events = parse(fixture_bytes(API_DIR, name))
    err = events[-1]
    assert isinstance(err, ErrorEvent) and err.reason == "error"
    assert what in err.error_message
    assert err.message.content == ()
    assert err.message.usage.output > 0  # usage of the failed turn is still reported


def test_in_band_error_then_failed() -> None:
    events = parse(fixture_bytes(API_DIR, "error-failed.sse"))
    err = events[-1]
    assert isinstance(err, ErrorEvent)
    assert err.error_message.startswith(
        "Error Code insufficient_quota: You exceeded your current quota"
    )
    assert [type(e).__name__ for e in events] == ["StartEvent", "ErrorEvent"]


def test_response_failed_alone() -> None:
    body = sse(
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        {
            "type": "response.failed",
            "response": {
                "id": "resp_1",
                "status": "failed",
                "error": {"code": "server_error", "message": "The model crashed."},
            },
        },
    )
    err = parse(body)[-1]
    assert isinstance(err, ErrorEvent) and err.error_message == "server_error: The model crashed."


# -- hand-written streams for the gaps --------------------------------------------------------


def delta(kind: str, oi: int, item_id: str, text: str) -> dict[str, Any]:
    return {"type": f"response.{kind}.delta", "output_index": oi, "item_id": item_id, "delta": text}


CREATED = {"type": "response.created", "response": {"id": "resp_h", "status": "in_progress"}}


def completed(usage: dict[str, Any] | None = None, status: str = "completed") -> dict[str, Any]:
    response: dict[str, Any] = {"id": "resp_h", "status": status}
    if usage is not None:
        response["usage"] = usage
    return {"type": "response.completed", "response": response}


def fc_added(oi: int, n: int, name: str) -> dict[str, Any]:
    item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": name}
    return {
        "type": "response.output_item.added",
        "output_index": oi,
        "item": item | {"arguments": ""},
    }


def fc_delta(oi: int, n: int, delta: str) -> dict[str, Any]:
    return {
        "type": "response.function_call_arguments.delta",
        "output_index": oi,
        "item_id": f"fc_{n}",
        "delta": delta,
    }


def fc_done(oi: int, n: int, name: str, arguments: str) -> list[dict[str, Any]]:
    item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": name}
    return [
        {
            "type": "response.function_call_arguments.done",
            "output_index": oi,
            "item_id": f"fc_{n}",
            "arguments": arguments,
        },
        {
            "type": "response.output_item.done",
            "output_index": oi,
            "item": item | {"arguments": arguments, "status": "completed"},
        },
    ]


def test_parallel_calls_interleaved_no_args_and_invalid_args() -> None:
    body = sse(
        CREATED,
        fc_added(0, 1, "read_file"),
        fc_added(1, 2, "list_dir"),
        fc_added(2, 3, "broken"),
        fc_delta(1, 2, ""),
        fc_delta(0, 1, '{"pa'),
        fc_delta(2, 3, '{"x": '),
        fc_delta(0, 1, 'th":"a.py"}'),
        *fc_done(1, 2, "list_dir", ""),
        *fc_done(0, 1, "read_file", '{"path":"a.py"}'),
        *fc_done(2, 3, "broken", '{"x": tru'),
        completed({"input_tokens": 10, "output_tokens": 5}),
    )
    events = parse(body)
    check_invariants(events)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "toolUse"
    a, b, c = done.message.tool_calls
    assert (a.id, a.name, a.arguments) == ("call_1|fc_1", "read_file", {"path": "a.py"})
    assert (b.id, b.name, b.arguments, b.arguments_error) == ("call_2|fc_2", "list_dir", {}, None)
    assert c.arguments == {} and c.arguments_error and c.raw_arguments == '{"x": tru'
    # the "tru" tail came only with arguments.done and was emitted as a delta
    assert [e.delta for e in events if isinstance(e, ToolCallDelta) and e.content_index == 2] == [
        '{"x": ',
        "tru",
    ]
    ends = [e.content_index for e in events if isinstance(e, ToolCallEnd)]
    assert ends == [1, 0, 2]  # each block closes when the provider closes its item


def test_incomplete_max_output_tokens_is_length() -> None:
    body = sse(
        CREATED,
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []},
        },
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "item_id": "msg_1",
            "delta": "Hel",
        },
        {
            "type": "response.incomplete",
            "response": {
                "id": "resp_h",
                "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
                "usage": {"input_tokens": 9, "output_tokens": 16},
            },
        },
    )
    events = parse(body)
    check_invariants(events)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "length"
    assert done.message.text == "Hel" and done.message.usage == Usage(input=9, output=16)


def test_incomplete_content_filter_is_an_error() -> None:
    body = sse(
        CREATED,
        {
            "type": "response.incomplete",
            "response": {
                "id": "resp_h",
                "status": "incomplete",
                "incomplete_details": {"reason": "content_filter"},
            },
        },
    )
    err = parse(body)[-1]
    assert isinstance(err, ErrorEvent) and err.error_message.startswith("content_filter")


def test_refusal_is_streamed_as_text_then_ends_in_error() -> None:
    refusal = "I'm sorry, I can't help with that."
    item = {"type": "message", "id": "msg_r", "role": "assistant"}
    body = sse(
        CREATED,
        {"type": "response.output_item.added", "output_index": 0, "item": item | {"content": []}},
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "item_id": "msg_r",
            "part": {"type": "refusal", "refusal": ""},
        },
        {
            "type": "response.refusal.delta",
            "output_index": 0,
            "item_id": "msg_r",
            "delta": refusal[:9],
        },
        {
            "type": "response.refusal.delta",
            "output_index": 0,
            "item_id": "msg_r",
            "delta": refusal[9:],
        },
        {
            "type": "response.refusal.done",
            "output_index": 0,
            "item_id": "msg_r",
            "refusal": refusal,
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": item | {"content": [{"type": "refusal", "refusal": refusal}]},
        },
        completed({"input_tokens": 3, "output_tokens": 9}),
    )
    events = parse(body)
    check_invariants(events)
    assert "".join(e.delta for e in events if isinstance(e, TextDelta)) == refusal
    err = events[-1]
    assert isinstance(err, ErrorEvent) and err.error_message == f"refusal: {refusal}"
    assert err.message.usage == Usage(input=3, output=9)


def test_stream_without_completed_is_an_error() -> None:
    body = sse(
        CREATED,
        delta("output_text", 0, "m", "Hi"),
    )
    events = parse(body)
    err = events[-1]
    assert isinstance(err, ErrorEvent) and "without response.completed" in err.error_message
    assert err.message.text == "Hi"  # opened lazily without output_item.added


def test_usage_is_replaced_not_added() -> None:
    early = {"input_tokens": 100, "output_tokens": 1}
    body = sse(
        CREATED,
        {"type": "response.in_progress", "response": {"id": "resp_h", "usage": early}},
        completed(
            {
                "input_tokens": 120,
                "input_tokens_details": {"cached_tokens": 100},
                "output_tokens": 30,
                "output_tokens_details": {"reasoning_tokens": 20},
            }
        ),
    )
    msg = final_message(parse(body))
    assert msg.usage == Usage(input=20, output=30, cache_read=100, reasoning=20)


def test_usage_only_in_the_final_event_and_null_before() -> None:
    body = sse(
        {"type": "response.created", "response": {"id": "resp_h", "usage": None}},
        completed({"input_tokens": 7, "output_tokens": 2}),
    )
    done = parse(body)[-1]
    assert isinstance(done, DoneEvent) and done.message.usage == Usage(input=7, output=2)


def test_raw_reasoning_text_deltas() -> None:
    """LM Studio / gpt-oss stream raw reasoning as response.reasoning_text.* (no summary)."""
    item = {"type": "reasoning", "id": "rs_1", "summary": []}
    body = sse(
        CREATED,
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {
            "type": "response.reasoning_text.delta",
            "output_index": 0,
            "item_id": "rs_1",
            "delta": "Let ",
        },
        {
            "type": "response.reasoning_text.delta",
            "output_index": 0,
            "item_id": "rs_1",
            "delta": "me.",
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": item | {"content": [{"type": "reasoning_text", "text": "Let me."}]},
        },
        completed(),
        named=False,
    )
    events = parse(body)
    check_invariants(events)
    (thinking,) = final_message(events).content
    assert thinking.thinking == "Let me."


def test_unknown_events_and_items_are_ignored() -> None:
    body = sse(
        CREATED,
        {"type": "response.something_new", "output_index": 0, "weird": [1, 2]},
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "future_item"}},
        {"type": "response.output_item.done", "output_index": 0, "item": {"type": "future_item"}},
        {"type": "response.output_text.delta"},  # no delta
        {"type": "response.function_call_arguments.delta", "output_index": 9, "delta": "{}"},
        completed(),
    )
    done = parse(body)[-1]
    assert isinstance(done, DoneEvent) and done.message.content == ()


def test_malformed_json_raises() -> None:
    asm = MessageAssembler(api="openai-responses", provider="openai", model="m")
    asm.start()
    decoder = ResponsesDecoder(asm)
    (ev,) = SSEParser().feed(b'event: response.output_text.delta\ndata: {"type": "resp\n\n')
    with pytest.raises(msgspec.DecodeError):
        decoder.feed(ev)


def test_in_band_error_is_redacted() -> None:
    key = "sk-proj-PLANTED-abcdef0123456789"
    asm = MessageAssembler(api="openai-responses", provider="openai", model="m")
    asm.start()
    decoder = ResponsesDecoder(asm, redact=lambda text: text.replace(key, "***"))
    body = sse({"type": "error", "code": "invalid_api_key", "message": f"Bad key {key}"})
    (ev,) = SSEParser().feed(body)
    (err,) = decoder.feed(ev)
    assert isinstance(err, ErrorEvent)
    assert err.error_message == "Error Code invalid_api_key: Bad key ***"
    assert key not in repr(err)


def test_items_without_output_index_are_matched_by_item_id() -> None:
    """llama.cpp's /v1/responses sends no output_index; output_item.done must close the call
    opened by output_item.added, not open a second one."""
    item = '{"id":"fc_1","type":"function_call","call_id":"call_1","name":"get_weather"'
    lines = [
        ("response.created", '{"type":"response.created","response":{"id":"resp_1"}}'),
        (
            "response.output_item.added",
            '{"type":"response.output_item.added","item":' + item + ',"arguments":""}}',
        ),
        (
            "response.function_call_arguments.delta",
            '{"type":"response.function_call_arguments.delta","delta":"{\\"city\\": \\"Paris\\"}",'
            '"item_id":"fc_1"}',
        ),
        (
            "response.output_item.done",
            '{"type":"response.output_item.done","item":'
            + item
            + ',"arguments":"{\\"city\\": \\"Paris\\"}","status":"completed"}}',
        ),
        (
            "response.completed",
            '{"type":"response.completed","response":{"id":"resp_1","status":"completed",'
            '"output":[]}}',
        ),
    ]
    body = "".join(f"event: {e}\ndata: {d}\n\n" for e, d in lines).encode()
    events = parse(body)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "toolUse"
    (call,) = done.message.tool_calls
    assert call.arguments == {"city": "Paris"} and call.id == "call_1|fc_1"
