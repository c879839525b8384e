"""OpenAI Responses request building: golden bytes, replay, cross-provider rules, prefix caching.

Regenerate the golden files deliberately with
`UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/llm/test_openai_responses_request.py`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cursor_byok.llm.canonical import decode_message, encode_message
from cursor_byok.llm.events import DoneEvent
from cursor_byok.llm.openai_responses import OpenAIResponsesAdapter, normalize_tool_call_id
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.types import (
    AssistantMessage,
    ImageContent,
    Message,
    RequestMessages,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDefinition,
    ToolResultMessage,
    UserMessage,
)
from tests.llm.test_openai_responses_stream import parse, raw_items
from tests.support.upstream import fixture_bytes

GOLDEN = Path(__file__).parent / "golden"
KEY = "sk-proj-PLANTED-KEY-0123456789abcdef"
MODEL = "gpt-5.1-codex-max"
PROVIDER = ProviderSettings(
    name="openai", api="openai-responses", base_url="https://api.example.test/v1/", api_key=KEY
)
ADAPTER = OpenAIResponsesAdapter(PROVIDER)
TOOLS = (
    ToolDefinition(
        name="read_file",
        description="Read a file.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
    ),
    ToolDefinition(name="list_dir", description="List the workspace.", parameters={}),
)
REASONING_SIG = (
    '{"id":"rs_1","type":"reasoning","encrypted_content":"gAAAAENC==",'
    '"summary":[{"type":"summary_text","text":"Plan the read."}]}'
)


class _Body(msgspec.Struct):
    input: list[msgspec.Raw]


def input_items(body: bytes) -> list[bytes]:
    """The serialized `input` items, each exactly as its bytes appear in the body."""
    return [bytes(item) for item in msgspec.json.decode(body, type=_Body).input]


def assistant(*content: Any, model: str = MODEL, **kw: Any) -> AssistantMessage:
    fields: dict[str, Any] = {"api": "openai-responses", "provider": "openai", "model": model}
    fields.update(kw)
    return AssistantMessage(content=tuple(content), **fields)


def result(call_id: str, text: str, **kw: Any) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call_id, tool_name="read_file", content=(TextContent(text=text),), **kw
    )


def full_history() -> tuple[Message, ...]:
    long_id = "msg_" + "x" * 80
    return (
        UserMessage(
            content=(
                TextContent(text="Look at a.py and this screenshot."),
                ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
            )
        ),
        assistant(
            ThinkingContent(thinking="Plan the read.", signature=REASONING_SIG),
            TextContent(text="Reading it.", signature='{"v":1,"id":"msg_1","phase":"commentary"}'),
            ToolCall(id="call_1|fc_1", name="read_file", arguments={"path": "a.py"}),
        ),
        result("call_1|fc_1", "print('hi')"),
        # Anthropic turn: its signature must go, its tool id must be rewritten.
        AssistantMessage(
            content=(
                ThinkingContent(thinking="Check the dir too.", signature="ErUBCkYIBxgCKkD"),
                ToolCall(id="toolu_01A", name="list_dir", thought_signature="ts"),
            ),
            api="anthropic",
            provider="anthropic",
            model="claude-sonnet-4-5",
        ),
        ToolResultMessage(
            tool_call_id="toolu_01A",
            tool_name="list_dir",
            content=(
                TextContent(text="a.py"),
                ImageContent(data="R0lGOD=", mime_type="image/gif"),
            ),
        ),
        # Same provider and API, another model: no reasoning replay, no fc_ item id.
        assistant(
            ThinkingContent(thinking="Other model thought.", signature=REASONING_SIG),
            ToolCall(id="call_9|fc_9", name="read_file", arguments={"path": "b.py"}),
            model="gpt-4.1",
        ),
        result("call_9|fc_9", "missing", is_error=True),
        assistant(TextContent(text="Done.", signature=json.dumps({"v": 1, "id": long_id}))),
        UserMessage.of_text("Thanks. Now list again."),
    )


FULL_SETTINGS = ModelSettings(
    model=MODEL,
    max_output_tokens=4096,
    reasoning=True,
    reasoning_effort="high",
    temperature=0.2,
    extra_body={"service_tier": "flex", "parallel_tool_calls": True},
    extra_headers={"x-trace": "t1"},
    cache_key="conv-123",
)

GOLDEN_CASES: dict[str, tuple[RequestMessages, ModelSettings]] = {
    "simple": (
        RequestMessages(system_prompt="Be brief.", messages=(UserMessage.of_text("Hi"),)),
        ModelSettings(model="gpt-4o"),
    ),
    "full": (
        RequestMessages(system_prompt="You are a coder.", messages=full_history(), tools=TOOLS),
        FULL_SETTINGS,
    ),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_request_bytes(case: str) -> None:
    request, settings = GOLDEN_CASES[case]
    body = ADAPTER.prepare(request, settings).body
    path = GOLDEN / f"openai-responses-{case}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(body)
    assert body == path.read_bytes()
    assert ADAPTER.prepare(request, settings).body == body  # same history, same bytes


def test_full_request_shape() -> None:
    request, settings = GOLDEN_CASES["full"]
    prepared = ADAPTER.prepare(request, settings)
    assert prepared.url == "https://api.example.test/v1/responses"
    assert prepared.model == MODEL
    body = json.loads(prepared.body)
    assert list(body) == [
        "model",
        "input",
        "stream",
        "store",
        "prompt_cache_key",
        "max_output_tokens",
        "temperature",
        "reasoning",
        "include",
        "tools",
        "parallel_tool_calls",
        "service_tier",
    ]
    assert body["stream"] is True and body["store"] is False
    assert body["prompt_cache_key"] == "conv-123"
    assert body["reasoning"] == {"effort": "high", "summary": "auto"}
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["tools"][1] == {
        "type": "function",
        "name": "list_dir",
        "description": "List the workspace.",
        "parameters": {},
        "strict": False,
    }
    items = body["input"]
    assert items[0] == {"role": "developer", "content": "You are a coder."}
    assert items[1]["content"][1] == {
        "type": "input_image",
        "detail": "auto",
        "image_url": "data:image/png;base64,iVBORw0KGgo=",
    }
    assert items[2] == json.loads(REASONING_SIG)  # replayed verbatim
    assert items[3] == {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "id": "msg_1",
        "content": [{"type": "output_text", "text": "Reading it.", "annotations": []}],
        "phase": "commentary",
    }
    assert items[4] == {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "read_file",
        "arguments": '{"path":"a.py"}',
    }
    assert items[5] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "print('hi')",
    }
    # another model of this provider: thinking becomes text, the call keeps no fc_ item id
    other_text, other_call = items[9], items[10]
    assert other_text["content"][0]["text"] == "Other model thought." and "id" not in other_text
    assert other_call == {
        "type": "function_call",
        "call_id": "call_9",
        "name": "read_file",
        "arguments": '{"path":"b.py"}',
    }
    long_text = items[12]
    assert re.fullmatch(r"msg_[0-9a-f]{16}", long_text["id"])
    assert items[-1] == {
        "role": "user",
        "content": [{"type": "input_text", "text": "Thanks. Now list again."}],
    }


def test_headers_and_auth() -> None:
    request, settings = GOLDEN_CASES["full"]
    prepared = ADAPTER.prepare(request, settings)
    headers = dict(prepared.headers)
    assert headers["session_id"] == "conv-123" and headers["x-trace"] == "t1"
    assert headers["content-type"] == "application/json"
    assert "authorization" not in headers and KEY not in repr(prepared)
    assert ADAPTER.auth_headers() == [("authorization", f"Bearer {KEY}")]
    keyless = OpenAIResponsesAdapter(
        ProviderSettings(
            name="local", api="openai-responses", base_url="http://x", headers={"api-key": "k"}
        )
    )
    assert keyless.auth_headers() == [("api-key", "k")]
    simple = ADAPTER.prepare(*GOLDEN_CASES["simple"])
    assert "session_id" not in dict(simple.headers)


def test_without_reasoning_the_system_prompt_is_a_system_message() -> None:
    body = json.loads(ADAPTER.prepare(*GOLDEN_CASES["simple"]).body)
    assert body["input"][0] == {"role": "system", "content": "Be brief."}
    for key in ("reasoning", "include", "temperature", "max_output_tokens", "prompt_cache_key"):
        assert key not in body
    settings = ModelSettings(model="o4-mini", reasoning=True)
    body = json.loads(
        ADAPTER.prepare(RequestMessages(system_prompt="", messages=()), settings).body
    )
    assert body["reasoning"] == {"effort": "medium", "summary": "auto"} and body["input"] == []


def test_extra_body_replaces_keys_and_goes_last() -> None:
    settings = ModelSettings(model="m", extra_body={"store": True, "metadata": {"a": "b"}})
    body = json.loads(ADAPTER.prepare(GOLDEN_CASES["simple"][0], settings).body)
    assert list(body)[-2:] == ["metadata", "store"] and body["store"] is True


def test_fixture_reasoning_round_trips_byte_for_byte() -> None:
    """Stream -> AssistantMessage -> storage -> next request: the reasoning item bytes we send
    back are exactly the bytes the provider gave us."""
    name = "reasoning-encrypted-function-call.sse"
    done = parse(fixture_bytes(name=name, api_dir="openai-responses"))[-1]
    assert isinstance(done, DoneEvent)
    stored = decode_message(encode_message(done.message))
    assert isinstance(stored, AssistantMessage)
    stored = msgspec.structs.replace(stored, model=MODEL)  # the parse helper's model name
    call = stored.tool_calls[0]
    history = (UserMessage.of_text("12+7?"), stored, result(call.id, "19"))
    body = ADAPTER.prepare(RequestMessages(system_prompt="", messages=history), FULL_SETTINGS).body
    items = input_items(body)
    assert items[1] == raw_items(name, "reasoning")[0]
    assert json.loads(items[2]) == {
        "type": "function_call",
        "id": "fc_01830d662ab3856501693c32151234819091cfca267e98cc5f",
        "call_id": "call_AB6AaRZ1FYZB2RwS6A5vbdqn",
        "name": "calculator",
        "arguments": '{"a":12,"b":7,"op":"add"}',
    }
    assert json.loads(items[3])["call_id"] == "call_AB6AaRZ1FYZB2RwS6A5vbdqn"


@pytest.mark.parametrize(
    "signature",
    [
        None,
        '{"id":"rs_2","type":"reasoning","encrypted_content":null,"summary":[]}',
        '{"id":"rs_3","type":"reasoning","summary":[]}',
        "not json",
        '["reasoning"]',
    ],
)
def test_reasoning_without_encrypted_content_is_not_replayed(signature: str | None) -> None:
    """Nor are the item ids of that turn: OpenAI rejects an fc_/msg_ item whose reasoning item
    is missing, and ids are optional on input items."""
    history = (
        UserMessage.of_text("q"),
        assistant(
            ThinkingContent(thinking="secret plan", signature=signature),
            TextContent(text="a", signature='{"v":1,"id":"msg_a"}'),
            ToolCall(id="call_1|fc_1", name="list_dir"),
        ),
        result("call_1|fc_1", "ok"),
    )
    body = ADAPTER.prepare(RequestMessages(system_prompt="", messages=history), FULL_SETTINGS).body
    items = [json.loads(i) for i in input_items(body)]
    assert [i.get("type") for i in items] == [
        None,
        "message",
        "function_call",
        "function_call_output",
    ]
    assert "id" not in items[1] and "id" not in items[2] and items[2]["call_id"] == "call_1"
    assert b"secret plan" not in body  # never leaks as text either


def test_foreign_history_drops_signatures_and_rewrites_ids_consistently() -> None:
    odd = "call_abc|fc_+/=xyz" + "Q" * 400
    odd2 = "call_" + "é" * 70 + "__"
    foreign = AssistantMessage(
        content=(
            ThinkingContent(thinking="Foreign thought.", signature="SIG-FOREIGN-THINKING"),
            TextContent(text="Calling.", signature='{"v":1,"id":"msg_foreign"}'),
            ToolCall(id=odd, name="read_file", arguments={"p": 1}, thought_signature="SIG-TS"),
            ToolCall(id=odd2, name="list_dir"),
        ),
        api="openai-responses",
        provider="azure",
        model=MODEL,
    )
    history = (
        UserMessage.of_text("go"),
        foreign,
        result(odd, "one"),
        result(odd2, "two"),
    )
    body = ADAPTER.prepare(RequestMessages(system_prompt="", messages=history), FULL_SETTINGS).body
    for secret in (b"SIG-FOREIGN-THINKING", b"SIG-TS", b"msg_foreign", b"+/="):
        assert secret not in body
    items = [json.loads(i) for i in input_items(body)]
    thought, text, call1, call2, out1, out2 = items[1:]
    assert thought["content"][0]["text"] == "Foreign thought." and "id" not in thought
    assert text["content"][0]["text"] == "Calling." and "id" not in text
    assert call1["call_id"] == "call_abc" and re.fullmatch(r"fc_[0-9a-f]{16}", call1["id"])
    assert out1["call_id"] == call1["call_id"] and out2["call_id"] == call2["call_id"]
    assert "id" not in call2
    for call in (call1, call2):
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", call["call_id"])
        assert not call["call_id"].endswith("_")


def test_normalize_tool_call_id() -> None:
    assert normalize_tool_call_id("toolu_01A") == "toolu_01A"
    assert normalize_tool_call_id("a b|item") == "a_b|fc_" + normalize_tool_call_id("x|item")[-16:]
    assert normalize_tool_call_id("!!!") == "call"
    assert len(normalize_tool_call_id("c" * 200)) == 64


def test_invalid_arguments_are_replayed_as_produced() -> None:
    call = ToolCall(
        id="call_1|fc_1",
        name="read_file",
        arguments_error="arguments are not valid JSON",
        raw_arguments='{"path": "a.py"',
    )
    history = (UserMessage.of_text("q"), assistant(call), result("call_1|fc_1", "bad args"))
    body = ADAPTER.prepare(RequestMessages(system_prompt="", messages=history), FULL_SETTINGS).body
    assert json.loads(input_items(body)[1])["arguments"] == '{"path": "a.py"'


def test_lone_surrogates_are_stripped() -> None:
    history = (UserMessage.of_text("bad \ud800 text"),)
    body = ADAPTER.prepare(
        RequestMessages(system_prompt="s\udfff", messages=history), FULL_SETTINGS
    ).body
    assert b"bad  text" in body


def test_tool_loop_requests_differ_only_by_an_appended_suffix() -> None:
    """Prefix caching: request N+1's input items start with request N's, byte for byte."""
    request, settings = GOLDEN_CASES["full"]
    first = ADAPTER.prepare(request, settings)
    turn = assistant(
        ThinkingContent(thinking="List it.", signature=REASONING_SIG.replace("rs_1", "rs_7")),
        ToolCall(id="call_7|fc_7", name="list_dir"),
    )
    longer = msgspec.structs.replace(
        request, messages=(*request.messages, turn, result("call_7|fc_7", "a.py b.py"))
    )
    second = ADAPTER.prepare(longer, settings)
    a, b = input_items(first.body), input_items(second.body)
    assert len(b) == len(a) + 3
    for i, item in enumerate(a):
        assert b[i] == item, f"input item {i} changed"
    one, two = json.loads(first.body), json.loads(second.body)
    del one["input"], two["input"]
    assert one == two  # model, tools, cache key, reasoning: all unchanged
    assert dict(first.headers)["session_id"] == dict(second.headers)["session_id"]
