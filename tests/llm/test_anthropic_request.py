"""Anthropic request building: golden bytes, history replay rules, caching breakpoints.

Golden bodies live in tests/llm/golden/anthropic-<case>.json (the exact bytes sent). After a
deliberate change, regenerate them with

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/llm/test_anthropic_request.py -q

and review the diff before committing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cursor_byok.llm.anthropic import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_THINKING_BUDGET,
    INTERLEAVED_THINKING_BETA,
    AnthropicAdapter,
    messages_url,
)
from cursor_byok.llm.canonical import decode_request, encode_request
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.stream import PreparedRequest
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
    Usage,
    UserMessage,
)

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
KEY = "sk-ant-api03-request-test-key-000000"
MODEL = "claude-sonnet-4-5-20250929"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
TOOL_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

READ_SCHEMA: dict[str, Any] = {
    "type": "object",
    "$defs": {"range": {"type": "array", "items": {"type": "integer"}, "minItems": 2}},
    "properties": {
        "path": {"type": "string", "description": "File path", "pattern": "^[^\\0]+$"},
        "lines": {"$ref": "#/$defs/range"},
        "encoding": {"enum": ["utf-8", "latin-1"], "default": "utf-8"},
    },
    "required": ["path"],
    "additionalProperties": False,
}
TOOLS = (
    ToolDefinition(name="read_file", description="Read a file.", parameters=READ_SCHEMA),
    ToolDefinition(name="list_dir", description="List a directory.", parameters={}),
)


def adapter(base_url: str = "https://api.anthropic.com", **kw: Any) -> AnthropicAdapter:
    return AnthropicAdapter(
        ProviderSettings(name="anthropic", api="anthropic", base_url=base_url, api_key=KEY, **kw)
    )


def body_of(prepared: PreparedRequest) -> dict[str, Any]:
    value = msgspec.json.decode(prepared.body)
    assert isinstance(value, dict)
    return value


def assistant(*content: Any, model: str = MODEL, **kw: Any) -> AssistantMessage:
    return AssistantMessage(
        content=tuple(content), api="anthropic", provider="anthropic", model=model, **kw
    )


# Same-model tool loop: signed thinking, redacted thinking, parallel calls, grouped results.
SIGNATURE = "EvQBCkYICxgCKkAx+/=signature-bytes=="
REDACTED = "EqkECkYIBxgCKkA8AZ4noDfV5VcOJe/p3JTRB6Xz5297mrWhl3MbHSXDKTMfuB=="
USER = UserMessage(
    content=(
        TextContent(text="Why does a.py fail?"),
        TextContent(text="   "),
        ImageContent(data=PNG, mime_type="image/png"),
    )
)
TURN1 = assistant(
    ThinkingContent(thinking="Look at a.py first.\n", signature=SIGNATURE),
    ThinkingContent(thinking="", signature=REDACTED, redacted=True),
    TextContent(text="Reading both files."),
    ToolCall(id="toolu_01A", name="read_file", arguments={"path": "a.py", "lines": [1, 9]}),
    ToolCall(id="toolu_01B", name="list_dir", arguments={}),
    usage=Usage(input=10, output=20),
    stop_reason="toolUse",
    response_id="msg_01",
)
RESULTS1 = (
    ToolResultMessage(
        tool_call_id="toolu_01A", tool_name="read_file", content=(TextContent(text="x = 1/0"),)
    ),
    ToolResultMessage(
        tool_call_id="toolu_01B",
        tool_name="list_dir",
        content=(TextContent(text="permission denied"),),
        is_error=True,
    ),
)
TURN2 = assistant(
    TextContent(text="Now the traceback."),
    ToolCall(
        id="toolu_02C",
        name="read_file",
        arguments_error="arguments are not valid JSON: truncated",
        raw_arguments='{"path": "tr',
    ),
    stop_reason="toolUse",
)
RESULTS2 = (
    ToolResultMessage(
        tool_call_id="toolu_02C",
        tool_name="read_file",
        content=(
            TextContent(text="invalid arguments"),
            ImageContent(data=PNG, mime_type="image/png"),
        ),
        is_error=True,
    ),
)

# A turn from OpenAI Responses: encrypted reasoning, text signature, long odd tool ids.
ODD_ID = "call_abc|fc_+/=xyz" + "Q" * 80 + "=="
FOREIGN = AssistantMessage(
    content=(
        ThinkingContent(
            thinking="Plan: grep first.",
            signature='{"type":"reasoning","encrypted_content":"gAAA"}',
        ),
        ThinkingContent(thinking="", signature='{"encrypted_content":"only-encrypted"}'),
        TextContent(text="Searching.", signature='{"v":1,"id":"msg_foreign"}'),
        ToolCall(
            id=ODD_ID, name="grep", arguments={"q": "TODO"}, thought_signature="foreign-thought"
        ),
        ToolCall(id="call_short|fc_1", name="list_dir", arguments={}),
    ),
    api="openai-responses",
    provider="openai",
    model="gpt-5",
    stop_reason="toolUse",
    response_id="resp_foreign",
)
FOREIGN_RESULTS = (
    ToolResultMessage(tool_call_id=ODD_ID, tool_name="grep", content=(TextContent(text="a.py:3"),)),
    ToolResultMessage(
        tool_call_id="call_short|fc_1", tool_name="list_dir", content=(TextContent(text="a.py"),)
    ),
)
# Same provider and API, another model: its signature must not be replayed either.
OTHER_MODEL = assistant(
    ThinkingContent(thinking="Old model thought.", signature="sig-of-claude-3-7"),
    TextContent(text="Done with the search."),
    model="claude-3-7-sonnet-20250219",
)

CASES: dict[str, tuple[RequestMessages, ModelSettings]] = {
    "basic": (
        RequestMessages(system_prompt="You are terse.", messages=(USER,), tools=TOOLS),
        ModelSettings(model=MODEL, temperature=0.3),
    ),
    "thinking-replay": (
        RequestMessages(
            system_prompt="You fix bugs.",
            messages=(USER, TURN1, *RESULTS1, TURN2, *RESULTS2),
            tools=TOOLS,
        ),
        ModelSettings(
            model=MODEL,
            reasoning=True,
            reasoning_budget=2048,
            max_output_tokens=2000,
            temperature=1.0,
        ),
    ),
    "cross-provider": (
        RequestMessages(
            system_prompt="You fix bugs.",
            messages=(
                UserMessage.of_text("Find TODOs."),
                FOREIGN,
                *FOREIGN_RESULTS,
                OTHER_MODEL,
                UserMessage.of_text("Thanks, continue."),
            ),
            tools=TOOLS,
        ),
        ModelSettings(
            model=MODEL,
            extra_body={"tool_choice": {"type": "auto"}, "metadata": {"user_id": "u-1"}},
            extra_headers={"anthropic-beta": "context-1m-2025-08-07", "x-trace": "t1"},
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_request_bytes(case: str) -> None:
    request, settings = CASES[case]
    body = adapter().prepare(request, settings).body
    path = GOLDEN / f"anthropic-{case}.json"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(body)
    assert path.exists(), f"missing {path}; run with UPDATE_GOLDEN=1"
    assert body == path.read_bytes()


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_history_same_bytes(case: str) -> None:
    request, settings = CASES[case]
    # Equal value, distinct objects; the canonical round trip (what the store does) also sorts
    # dict keys of tool schemas and arguments, which must not change the bytes sent.
    copy = decode_request(encode_request(request))
    assert copy is not request and copy == request
    first = adapter().prepare(request, settings)
    again = adapter().prepare(copy, settings)
    assert first == again and first.body == again.body


def test_body_shape_and_defaults() -> None:
    request, _ = CASES["basic"]
    prepared = adapter().prepare(request, ModelSettings(model=MODEL))
    body = body_of(prepared)
    assert list(body) == ["model", "max_tokens", "stream", "system", "messages", "tools"]
    assert body["model"] == MODEL and body["max_tokens"] == DEFAULT_MAX_TOKENS
    assert body["stream"] is True
    assert body["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
    ]
    assert prepared.url == "https://api.anthropic.com/v1/messages" and prepared.model == MODEL
    assert dict(prepared.headers) == {
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",
    }


def test_user_parts_blank_text_dropped_and_image_as_base64_source() -> None:
    body = body_of(adapter().prepare(*CASES["basic"]))
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Why does a.py fail?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    "cache_control": {"type": "ephemeral"},
                },
            ],
        }
    ]
    assert body["temperature"] == 0.3


def test_tools_keep_the_full_schema() -> None:
    body = body_of(adapter().prepare(*CASES["basic"]))
    read, listing = body["tools"]
    assert read == {"name": "read_file", "description": "Read a file.", "input_schema": READ_SCHEMA}
    assert listing == {
        "name": "list_dir",
        "description": "List a directory.",
        "input_schema": {"type": "object"},
        "cache_control": {"type": "ephemeral"},
    }


def test_three_cache_breakpoints_system_last_tool_last_message_block() -> None:
    prepared = adapter().prepare(*CASES["thinking-replay"])
    body = body_of(prepared)
    assert prepared.body.count(b'"cache_control"') == 3
    assert "cache_control" in body["system"][-1]
    assert "cache_control" in body["tools"][-1]
    last = body["messages"][-1]["content"][-1]
    assert last["type"] == "tool_result" and last["cache_control"] == {"type": "ephemeral"}


def test_trailing_thinking_block_is_not_marked() -> None:
    request = RequestMessages(
        system_prompt="",
        messages=(
            UserMessage.of_text("hi"),
            assistant(TextContent(text="a"), ThinkingContent(thinking="t", signature="s")),
        ),
    )
    body = body_of(adapter().prepare(request, ModelSettings(model=MODEL)))
    assert "system" not in body and "tools" not in body
    content = body["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}
    assert "cache_control" not in content[1]


def test_same_model_replay_is_byte_exact() -> None:
    prepared = adapter().prepare(*CASES["thinking-replay"])
    body = body_of(prepared)
    _user, turn1, results1, turn2, results2 = body["messages"]
    assert turn1 == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Look at a.py first.\n", "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": REDACTED},
            {"type": "text", "text": "Reading both files."},
            {
                "type": "tool_use",
                "id": "toolu_01A",
                "name": "read_file",
                "input": {"path": "a.py", "lines": [1, 9]},
            },
            {"type": "tool_use", "id": "toolu_01B", "name": "list_dir", "input": {}},
        ],
    }
    assert SIGNATURE.encode() in prepared.body and REDACTED.encode() in prepared.body
    # Two results of one assistant turn: ONE user message.
    assert results1 == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01A",
                "content": [{"type": "text", "text": "x = 1/0"}],
                "is_error": False,
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01B",
                "content": [{"type": "text", "text": "permission denied"}],
                "is_error": True,
            },
        ],
    }
    # Unparsable arguments: the API needs an object, so {} is sent (the result reports it).
    assert turn2["content"][1] == {
        "type": "tool_use",
        "id": "toolu_02C",
        "name": "read_file",
        "input": {},
    }
    (result,) = results2["content"]
    assert [b["type"] for b in result["content"]] == ["text", "image"]


def test_thinking_settings() -> None:
    prepared = adapter().prepare(*CASES["thinking-replay"])
    body = body_of(prepared)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 2048 + 1024  # raised: must exceed the budget
    assert "temperature" not in body  # only without thinking
    assert dict(prepared.headers)["anthropic-beta"] == INTERLEAVED_THINKING_BETA

    def settings_body(**kw: Any) -> dict[str, Any]:
        return body_of(adapter().prepare(CASES["basic"][0], ModelSettings(model=MODEL, **kw)))

    assert settings_body(reasoning=True)["thinking"]["budget_tokens"] == DEFAULT_THINKING_BUDGET
    assert settings_body(reasoning=True)["max_tokens"] == DEFAULT_MAX_TOKENS
    high = settings_body(reasoning=True, reasoning_effort="high")
    assert high["thinking"]["budget_tokens"] == 16384 and high["max_tokens"] == 16384 + 1024
    assert settings_body(reasoning=True, reasoning_budget=10)["thinking"]["budget_tokens"] == 1024
    assert "thinking" not in settings_body(reasoning=True, reasoning_effort="none")
    assert "thinking" not in settings_body(reasoning_budget=5000)
    big = settings_body(reasoning=True, reasoning_budget=3000, max_output_tokens=32000)
    assert big["max_tokens"] == 32000


def test_extra_body_overrides_last_in_sorted_order_for_adaptive_models() -> None:
    settings = ModelSettings(
        model="claude-opus-4-7",
        reasoning=True,
        extra_body={"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}},
    )
    body = body_of(adapter().prepare(CASES["basic"][0], settings))
    assert body["thinking"] == {"type": "adaptive"}
    assert list(body)[-1] == "output_config"


def test_headers_merge_betas_and_keep_secrets_out() -> None:
    request, settings = CASES["cross-provider"]
    prepared = adapter(headers={"x-gateway-token": "gw-secret"}).prepare(request, settings)
    headers = dict(prepared.headers)
    assert headers["anthropic-beta"] == "context-1m-2025-08-07"
    assert headers["x-trace"] == "t1"
    flat = repr(prepared)
    assert KEY not in flat and "gw-secret" not in flat and "x-api-key" not in headers
    thinking = ModelSettings(model=MODEL, reasoning=True, extra_headers=settings.extra_headers)
    merged = dict(adapter().prepare(request, thinking).headers)["anthropic-beta"]
    assert merged == f"{INTERLEAVED_THINKING_BETA},context-1m-2025-08-07"
    auth = adapter(headers={"x-gateway-token": "gw-secret"}).auth_headers()
    assert auth == [("x-api-key", KEY), ("x-gateway-token", "gw-secret")]
    no_key = AnthropicAdapter(
        ProviderSettings(name="a", api="anthropic", base_url="http://localhost:1")
    )
    assert no_key.auth_headers() == []


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("https://api.anthropic.com", "https://api.anthropic.com/v1/messages"),
        ("https://api.anthropic.com/", "https://api.anthropic.com/v1/messages"),
        ("https://gw.example/anthropic/v1", "https://gw.example/anthropic/v1/messages"),
        ("https://gw.example/anthropic/v1/", "https://gw.example/anthropic/v1/messages"),
        ("https://gw.example/v1/messages", "https://gw.example/v1/messages"),
        ("http://127.0.0.1:8080/proxy", "http://127.0.0.1:8080/proxy/v1/messages"),
        ("", "https://api.anthropic.com/v1/messages"),
    ],
)
def test_url_rule(base: str, url: str) -> None:
    assert messages_url(base) == url


def test_foreign_history_drops_signatures_and_rewrites_ids_consistently() -> None:
    prepared = adapter().prepare(*CASES["cross-provider"])
    body = body_of(prepared)
    raw = prepared.body
    for foreign in (b"encrypted_content", b"msg_foreign", b"foreign-thought", b"sig-of-claude"):
        assert foreign not in raw
    assert b"|" not in raw and ODD_ID.encode() not in raw
    _user, turn, results, other, last_user = body["messages"]
    assert turn["content"][:2] == [
        {"type": "text", "text": "Plan: grep first."},  # foreign thinking -> plain text
        {"type": "text", "text": "Searching."},
    ]
    calls = [b for b in turn["content"] if b["type"] == "tool_use"]
    ids = [c["id"] for c in calls]
    assert all(TOOL_ID_RE.match(i) for i in ids) and len(set(ids)) == 2
    assert ids[1] == "call_short_fc_1"
    assert [r["tool_use_id"] for r in results["content"]] == ids
    assert other["content"] == [
        {"type": "text", "text": "Old model thought."},
        {"type": "text", "text": "Done with the search."},
    ]
    assert last_user["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_other_model_same_provider_thinking_becomes_text() -> None:
    request = RequestMessages(
        system_prompt="s", messages=(UserMessage.of_text("q"), TURN1, *RESULTS1)
    )
    body = body_of(adapter().prepare(request, ModelSettings(model="claude-opus-4-1")))
    content = body["messages"][1]["content"]
    assert content[0] == {"type": "text", "text": "Look at a.py first.\n"}
    assert all(b["type"] not in ("thinking", "redacted_thinking") for b in content)
    assert [b["id"] for b in content if b["type"] == "tool_use"] == ["toolu_01A", "toolu_01B"]


def test_unsigned_thinking_and_blank_messages() -> None:
    request = RequestMessages(
        system_prompt="  ",
        messages=(
            UserMessage.of_text("q"),
            assistant(ThinkingContent(thinking="unsigned idea"), TextContent(text="")),
            UserMessage.of_text("   "),
            UserMessage(content=(TextContent(text="bad \ud800 surrogate"),)),
        ),
    )
    body = body_of(adapter().prepare(request, ModelSettings(model=MODEL)))
    assert "system" not in body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "unsigned idea"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "bad  surrogate", "cache_control": {"type": "ephemeral"}}
            ],
        },
    ]


def test_missing_and_empty_tool_results() -> None:
    call = ToolCall(id="toolu_X", name="list_dir", arguments={})
    request = RequestMessages(
        system_prompt="s",
        messages=(
            UserMessage.of_text("q"),
            assistant(call, stop_reason="toolUse"),
            UserMessage.of_text("never mind"),  # the call got no result
            assistant(ToolCall(id="toolu_Y", name="list_dir"), stop_reason="toolUse"),
            ToolResultMessage(tool_call_id="toolu_Y", tool_name="list_dir", content=()),
        ),
    )
    body = body_of(adapter().prepare(request, ModelSettings(model=MODEL)))
    synthetic = body["messages"][2]["content"][0]
    assert synthetic["tool_use_id"] == "toolu_X" and synthetic["is_error"] is True
    assert synthetic["content"] == [{"type": "text", "text": "No result provided"}]
    empty = body["messages"][-1]["content"][0]
    assert empty == {
        "type": "tool_result",
        "tool_use_id": "toolu_Y",
        "is_error": False,
        "cache_control": {"type": "ephemeral"},
    }


def test_errored_turn_is_dropped() -> None:
    request = RequestMessages(
        system_prompt="s",
        messages=(
            UserMessage.of_text("q"),
            assistant(TextContent(text="half"), stop_reason="error", error_message="x"),
            UserMessage.of_text("again"),
        ),
    )
    body = body_of(adapter().prepare(request, ModelSettings(model=MODEL)))
    assert [m["role"] for m in body["messages"]] == ["user", "user"]


# -- prompt caching: a tool loop only appends --------------------------------------------


class _Messages(msgspec.Struct):
    messages: list[msgspec.Raw]


def _raw_messages(prepared: PreparedRequest) -> list[bytes]:
    """The serialized items of the messages array, exactly as they are in the body."""
    return [bytes(m) for m in msgspec.json.decode(prepared.body, type=_Messages).messages]


def _strip_breakpoint(raw: bytes) -> bytes:
    message = msgspec.json.decode(raw)
    for block in message["content"]:
        block.pop("cache_control", None)
    return msgspec.json.encode(message)


def test_tool_loop_requests_differ_only_by_an_appended_suffix_and_the_moved_breakpoint() -> None:
    """The third cache breakpoint sits on the last block of the last message, so it moves every
    turn. Apart from that one key, the earlier request's messages are a byte-exact prefix of the
    later one's; system and tools are byte-identical. That is what Anthropic's prefix cache
    needs: the previous breakpoint's prefix is read from cache on the next request."""
    settings = ModelSettings(model=MODEL, reasoning=True)
    first_history: tuple[Message, ...] = (USER, TURN1, *RESULTS1)
    second_history = (*first_history, TURN2, *RESULTS2)
    a = adapter()
    first = a.prepare(RequestMessages("sys", first_history, TOOLS), settings)
    second = a.prepare(RequestMessages("sys", second_history, TOOLS), settings)
    one, two = _raw_messages(first), _raw_messages(second)
    assert len(one) == 3 and len(two) == 5
    # Every item before the previous last is byte-identical as sent.
    assert one[:-1] == two[: len(one) - 1]
    # The previous last item differs only by its cache_control key.
    assert one[-1] != two[len(one) - 1]
    assert _strip_breakpoint(one[-1]) == two[len(one) - 1]
    assert [_strip_breakpoint(m) for m in one] == two[: len(one)]
    assert b'"cache_control"' not in b"".join(two[:-1])
    b1, b2 = body_of(first), body_of(second)
    assert msgspec.json.encode(b1["system"]) == msgspec.json.encode(b2["system"])
    assert msgspec.json.encode(b1["tools"]) == msgspec.json.encode(b2["tools"])
    # The body bytes before the messages array are identical too.
    head = first.body[: first.body.index(b'"messages"')]
    assert second.body.startswith(head)
