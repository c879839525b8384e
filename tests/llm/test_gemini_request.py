"""Gemini request building: golden bytes, history replay rules, caching prefix property.

Regenerate the golden files deliberately with:
    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/llm/test_gemini_request.py -k golden
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cursor_byok.llm.canonical import decode_request, encode_request
from cursor_byok.llm.gemini import (
    DEFAULT_BASE_URL,
    SKIP_SIGNATURE,
    GeminiAdapter,
    build_body,
    is_valid_signature,
    normalize_tool_call_id,
)
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.transforms import Target, transform_messages
from cursor_byok.llm.types import (
    AssistantMessage,
    ImageContent,
    Message,
    RequestMessages,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDefinition,
    ToolResultMessage,
    UserMessage,
)
from tests.llm.test_gemini_stream import decode, done, fixture

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
KEY = "AIzaSy-PLANTED-request-key-987654321"
PROVIDER = "google"
G3 = "gemini-3-pro-preview"
G25 = "gemini-2.5-flash"

Json = dict[str, Any]


def adapter(base_url: str = DEFAULT_BASE_URL, **headers: str) -> GeminiAdapter:
    return GeminiAdapter(
        ProviderSettings(
            name=PROVIDER, api="gemini", base_url=base_url, api_key=KEY, headers=headers
        )
    )


def body_of(request: RequestMessages, settings: ModelSettings) -> Json:
    data: Json = json.loads(adapter().prepare(request, settings).body)
    return data


def contents(messages: tuple[Message, ...], model: str = G3) -> list[Json]:
    request = RequestMessages(system_prompt="sys", messages=messages)
    result: list[Json] = body_of(request, ModelSettings(model=model))["contents"]
    return result


def gemini_msg(
    *content: Any, model: str = G3, response_id: str | None = "resp-A"
) -> AssistantMessage:
    stop: StopReason = "toolUse" if any(isinstance(c, ToolCall) for c in content) else "stop"
    return AssistantMessage(
        content=content,
        api="gemini",
        provider=PROVIDER,
        model=model,
        stop_reason=stop,
        response_id=response_id,
    )


def result(call_id: str, name: str, text: str, *, is_error: bool = False) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call_id,
        tool_name=name,
        content=(TextContent(text=text),),
        is_error=is_error,
    )


SIG_A = "c2lnbmF0dXJlLUE="  # base64 of "signature-A"
SIG_B = "c2lnbmF0dXJlLUI="
SIG_C = "c2lnbmF0dXJlLUM="
PNG = "iVBORw0KGgo="

TOOLS = (
    ToolDefinition(
        name="read_file",
        description="Read a file from the workspace.",
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "range": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "minItems": 2,
                    "maxItems": 2,
                },
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
    ToolDefinition(
        name="list_dir",
        description="List the workspace root.",
        parameters={"type": "object", "properties": {}},
    ),
)

# -- golden bytes ----------------------------------------------------------------------------


def _basic() -> tuple[RequestMessages, ModelSettings]:
    request = RequestMessages(
        system_prompt="You are a coding agent.",
        messages=(
            UserMessage(
                content=(
                    TextContent(text="What is in this screenshot?"),
                    ImageContent(data=PNG, mime_type="image/png"),
                )
            ),
        ),
        tools=TOOLS,
    )
    settings = ModelSettings(
        model=G25,
        max_output_tokens=1024,
        reasoning=True,
        reasoning_budget=2048,
        temperature=0.2,
        extra_body={
            "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
            "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "OFF"}],
        },
        extra_headers={"x-goog-user-project": "demo"},
    )
    return request, settings


def _tool_loop() -> tuple[RequestMessages, ModelSettings]:
    first = gemini_msg(
        ThinkingContent(thinking="I should read both files.", signature=SIG_A),
        TextContent(text="Reading them now.", signature=SIG_B),
        ToolCall(
            id="read_file_resp-A_0",
            name="read_file",
            arguments={"path": "a.py"},
            thought_signature=SIG_C,
        ),
        ToolCall(id="fc-given-by-model", name="read_file", arguments={"path": "b.py"}),
        ToolCall(id="list_dir_resp-A_2", name="list_dir"),
    )
    shot = ToolResultMessage(
        tool_call_id="list_dir_resp-A_2",
        tool_name="list_dir",
        content=(TextContent(text="a.py b.py"), ImageContent(data=PNG, mime_type="image/png")),
    )
    request = RequestMessages(
        system_prompt="You are a coding agent.",
        messages=(
            UserMessage.of_text("Compare a.py and b.py"),
            first,
            result("read_file_resp-A_0", "read_file", "print('a')"),
            result("fc-given-by-model", "read_file", "No such file", is_error=True),
            shot,
            gemini_msg(TextContent(text="a.py prints a; b.py is missing.")),
            UserMessage.of_text("Thanks"),
        ),
        tools=TOOLS,
    )
    return request, ModelSettings(model=G3, reasoning=True, reasoning_effort="high")


ODD_ID = "call_abc|fc_+/=xyz" + "Q" * 80


def _cross_provider() -> tuple[RequestMessages, ModelSettings]:
    openai = AssistantMessage(
        content=(
            ThinkingContent(thinking="Plan: list, then read.", signature='{"id":"rs_1","enc":"x"}'),
            TextContent(text="Listing.", signature='{"v":1,"id":"msg_1"}'),
            ToolCall(id=ODD_ID, name="list_dir", thought_signature='{"reasoning_details":1}'),
        ),
        api="openai-responses",
        provider="openai",
        model="gpt-5",
        stop_reason="toolUse",
    )
    anthropic_failed = AssistantMessage(
        content=(TextContent(text="half an answer"),),
        api="anthropic",
        provider="anthropic",
        model="claude-sonnet-4-5",
        stop_reason="error",
        error_message="overloaded",
    )
    anthropic = AssistantMessage(
        content=(
            ThinkingContent(thinking="Read a.py next.", signature="EqQBCkYIBxgCKkD"),
            ToolCall(id="toolu_01A", name="read_file", arguments={"path": "a.py"}),
            ToolCall(id="toolu_01B", name="read_file", arguments={"path": "b.py"}),
        ),
        api="anthropic",
        provider="anthropic",
        model="claude-sonnet-4-5",
        stop_reason="toolUse",
    )
    request = RequestMessages(
        system_prompt="You are a coding agent.",
        messages=(
            UserMessage.of_text("What is in a.py?"),
            openai,
            result(ODD_ID, "list_dir", "a.py b.py"),
            anthropic_failed,
            UserMessage.of_text("Try again"),
            anthropic,
            result("toolu_01A", "read_file", "print('a')"),
            # toolu_01B never got a result: a synthetic error result is added
            UserMessage.of_text("Go on"),
        ),
        tools=TOOLS,
    )
    return request, ModelSettings(model=G3)


GOLDEN_CASES = {"basic": _basic, "tool-loop": _tool_loop, "cross-provider": _cross_provider}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden(case: str) -> None:
    request, settings = GOLDEN_CASES[case]()
    body = adapter().prepare(request, settings).body
    path = GOLDEN / f"gemini-{case}.json"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(body)
    assert body == path.read_bytes(), f"{path.name} differs; UPDATE_GOLDEN=1 regenerates it"


def test_golden_basic_shape() -> None:
    request, settings = _basic()
    body = body_of(request, settings)
    assert list(body) == [
        "systemInstruction",
        "tools",
        "contents",
        "generationConfig",
        "safetySettings",
        "toolConfig",
    ]
    assert body["systemInstruction"] == {"parts": [{"text": "You are a coding agent."}]}
    decls = body["tools"][0]["functionDeclarations"]
    assert decls[0]["parametersJsonSchema"] == TOOLS[0].parameters  # full JSON Schema, as given
    assert body["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "What is in this screenshot?"},
                {"inlineData": {"mimeType": "image/png", "data": PNG}},
            ],
        }
    ]
    assert body["generationConfig"] == {
        "temperature": 0.2,
        "maxOutputTokens": 1024,
        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 2048},
    }


def test_golden_tool_loop_shape() -> None:
    request, settings = _tool_loop()
    user, model, results, answer, thanks = body_of(request, settings)["contents"]
    assert model == {
        "role": "model",
        "parts": [
            {"thought": True, "text": "I should read both files.", "thoughtSignature": SIG_A},
            {"text": "Reading them now.", "thoughtSignature": SIG_B},
            {
                "functionCall": {"name": "read_file", "args": {"path": "a.py"}},
                "thoughtSignature": SIG_C,
            },
            {
                "functionCall": {
                    "name": "read_file",
                    "args": {"path": "b.py"},
                    "id": "fc-given-by-model",
                }
            },
            {"functionCall": {"name": "list_dir", "args": {}}},
        ],
    }
    # all results of the turn in one user turn; Gemini 3 nests images in the response
    assert results == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "read_file", "response": {"output": "print('a')"}}},
            {
                "functionResponse": {
                    "name": "read_file",
                    "response": {"error": "No such file"},
                    "id": "fc-given-by-model",
                }
            },
            {
                "functionResponse": {
                    "name": "list_dir",
                    "response": {"output": "a.py b.py"},
                    "parts": [{"inlineData": {"mimeType": "image/png", "data": PNG}}],
                }
            },
        ],
    }
    assert answer == {"role": "model", "parts": [{"text": "a.py prints a; b.py is missing."}]}
    assert user == {"role": "user", "parts": [{"text": "Compare a.py and b.py"}]}
    assert thanks == {"role": "user", "parts": [{"text": "Thanks"}]}
    config = body_of(request, settings)["generationConfig"]
    assert config == {"thinkingConfig": {"includeThoughts": True, "thinkingLevel": "high"}}


def test_cross_provider_history_drops_foreign_signatures_and_rewrites_ids() -> None:
    request, settings = _cross_provider()
    raw = adapter().prepare(request, settings).body
    body = json.loads(raw)
    # no foreign signature, raw foreign id or failed turn survives, anywhere in the bytes
    for foreign in [b"rs_1", b"msg_1", b"reasoning_details", b"EqQBCkYIBxgCKkD", b"call_abc|"]:
        assert foreign not in raw
    assert b"toolu_01" not in raw and b"half an answer" not in raw
    turns = body["contents"]
    assert [t["role"] for t in turns] == ["user", "model", "user", "user", "model", "user", "user"]
    openai_turn, anthropic_turn = turns[1], turns[4]
    assert openai_turn["parts"] == [
        {"text": "Plan: list, then read."},  # foreign thinking becomes plain text
        {"text": "Listing."},
        # Gemini 3 needs a signed first call: Google's documented skip value stands in
        {"functionCall": {"name": "list_dir", "args": {}}, "thoughtSignature": SKIP_SIGNATURE},
    ]
    assert anthropic_turn["parts"][1]["thoughtSignature"] == SKIP_SIGNATURE
    assert "thoughtSignature" not in anthropic_turn["parts"][2]
    assert turns[5]["parts"] == [
        {"functionResponse": {"name": "read_file", "response": {"output": "print('a')"}}},
        {"functionResponse": {"name": "read_file", "response": {"error": "No result provided"}}},
    ]
    # the ids the history carries are rewritten consistently for the call and its result
    target = Target(api="gemini", provider=PROVIDER, model=G3)
    history = transform_messages(request.messages, target, normalize_tool_call_id)
    call_ids = [c.id for m in history if isinstance(m, AssistantMessage) for c in m.tool_calls]
    result_ids = [m.tool_call_id for m in history if isinstance(m, ToolResultMessage)]
    assert call_ids == result_ids
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", i) for i in call_ids)
    assert call_ids[0] != ODD_ID and call_ids[0].startswith("call_abc_fc_")


def test_foreign_calls_unsigned_for_gemini_2() -> None:
    request, _ = _cross_provider()
    body = body_of(request, ModelSettings(model=G25))
    assert SKIP_SIGNATURE.encode() not in json.dumps(body).encode()


# -- replay to the same model ---------------------------------------------------------------


def fixture_message(name: str, model: str) -> AssistantMessage:
    message = done(decode(fixture(name), model=model))
    assert message.provider == PROVIDER and message.api == "gemini"
    return message


def test_recorded_call_signature_replayed_byte_for_byte_to_the_same_model() -> None:
    message = fixture_message("tool-call-gemini3-signature.sse", G3)
    [call] = message.tool_calls
    signature = call.thought_signature
    assert signature is not None and len(signature) == 5488
    history = (
        UserMessage.of_text("weather?"),
        message,
        result(call.id, "weather", "sunny"),
    )
    request = RequestMessages(system_prompt="", messages=history)
    raw = adapter().prepare(request, ModelSettings(model=G3)).body
    assert b'"thoughtSignature":"' + signature.encode() + b'"' in raw
    body = json.loads(raw)
    assert "systemInstruction" not in body
    assert body["contents"][1] == {
        "role": "model",
        "parts": [
            {
                "functionCall": {"name": "weather", "args": {"location": "San Francisco"}},
                "thoughtSignature": signature,
            }
        ],
    }
    # a generated id is ours: neither the call nor its result carries it
    assert body["contents"][2] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "weather", "response": {"output": "sunny"}}}],
    }
    # the stored message survives the canonical store round trip with identical request bytes
    again = decode_request(encode_request(request))
    assert adapter().prepare(again, ModelSettings(model=G3)).body == raw


def test_recorded_text_and_thinking_replayed_to_the_same_model() -> None:
    message = fixture_message("thinking-summaries-2.5-pro.sse", "gemini-2.5-pro")
    parts = contents((UserMessage.of_text("q"), message), model="gemini-2.5-pro")[1]["parts"]
    assert parts[0]["thought"] is True and "thoughtSignature" not in parts[0]
    assert parts[1]["thoughtSignature"] == message.content[1].signature  # type: ignore[union-attr]
    assert len(parts[1]["thoughtSignature"]) == 6152


def test_signatures_dropped_for_another_model_of_the_same_provider() -> None:
    message = fixture_message("tool-call-gemini3-signature.sse", G3)
    history = (UserMessage.of_text("weather?"), message, result("x", "weather", "sunny"))
    for model in ["gemini-3-flash-preview", G25]:
        raw = json.dumps(contents(history, model=model))
        assert message.tool_calls[0].thought_signature not in raw  # type: ignore[operator]


def test_signatures_dropped_for_another_provider_name() -> None:
    message = msgspec.structs.replace(
        fixture_message("vertex-thought-signature-flex.sse", G3), provider="vertex"
    )
    parts = contents((UserMessage.of_text("q"), message))[1]["parts"]
    assert parts == [{"text": "OK"}]


def test_invalid_base64_signature_is_dropped() -> None:
    message = gemini_msg(
        TextContent(text="hi", signature="not base64!"),
        ThinkingContent(thinking="hmm", signature="bad*sig"),
        ToolCall(id="f_resp-A_0", name="f", thought_signature="%%%"),
        model=G25,
    )
    parts = contents((UserMessage.of_text("q"), message), model=G25)[1]["parts"]
    assert parts == [
        {"text": "hi"},
        {"thought": True, "text": "hmm"},
        {"functionCall": {"name": "f", "args": {}}},
    ]
    assert is_valid_signature(SIG_A) and is_valid_signature("YWJj") and is_valid_signature("YWI")
    assert is_valid_signature(SKIP_SIGNATURE)
    assert not is_valid_signature("YWJjZ") and not is_valid_signature("")
    assert not is_valid_signature("YW==J") and not is_valid_signature("a b")


def test_empty_parts_and_empty_messages_are_skipped() -> None:
    turns = contents(
        (
            UserMessage(content=(TextContent(text=""), TextContent(text="hello"))),
            gemini_msg(TextContent(text=""), ThinkingContent(thinking="")),
            UserMessage(content=(TextContent(text=""),)),
            gemini_msg(TextContent(text="", signature=SIG_A)),
        )
    )
    assert turns == [
        {"role": "user", "parts": [{"text": "hello"}]},
        {"role": "model", "parts": [{"text": "", "thoughtSignature": SIG_A}]},
    ]


def test_tool_result_images_before_gemini_3_follow_as_a_user_turn() -> None:
    history = (
        UserMessage.of_text("shot"),
        gemini_msg(ToolCall(id="shot_resp-A_0", name="shot"), model=G25),
        ToolResultMessage(
            tool_call_id="shot_resp-A_0",
            tool_name="shot",
            content=(ImageContent(data=PNG, mime_type="image/png"),),
        ),
    )
    turns = contents(history, model=G25)
    assert turns[2:] == [
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "shot", "response": {"output": ""}}}],
        },
        {
            "role": "user",
            "parts": [
                {"text": "Tool result image:"},
                {"inlineData": {"mimeType": "image/png", "data": PNG}},
            ],
        },
    ]


def test_lone_surrogates_are_stripped() -> None:
    request = RequestMessages(
        system_prompt="sys\ud800tem",
        messages=(UserMessage.of_text("bad \udc00 text"),),
        tools=(ToolDefinition(name="t", description="d\ud83d", parameters={"type": "object"}),),
    )
    body = body_of(request, ModelSettings(model=G25))
    assert body["systemInstruction"]["parts"][0]["text"] == "system"
    assert body["contents"][0]["parts"][0]["text"] == "bad  text"
    assert body["tools"][0]["functionDeclarations"][0]["description"] == "d"


# -- settings, URL and headers ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (ModelSettings(model=G25), None),
        (ModelSettings(model=G25, reasoning=True), {"includeThoughts": True}),
        (
            ModelSettings(model=G25, reasoning=True, reasoning_effort="medium"),
            {"includeThoughts": True, "thinkingBudget": 8192},
        ),
        (
            ModelSettings(model=G3, reasoning=True, reasoning_effort="low"),
            {"includeThoughts": True, "thinkingLevel": "low"},
        ),
        (
            ModelSettings(model="gemini-3-flash-preview", reasoning=True, reasoning_effort="xhigh"),
            {"includeThoughts": True, "thinkingLevel": "high"},
        ),
        (
            ModelSettings(model=G3, reasoning=True, reasoning_budget=512, reasoning_effort="low"),
            {"includeThoughts": True, "thinkingBudget": 512},
        ),
        (ModelSettings(model=G25, reasoning_budget=512), None),  # reasoning off: no config
    ],
)
def test_thinking_config(settings: ModelSettings, expected: Json | None) -> None:
    request = RequestMessages(system_prompt="", messages=(UserMessage.of_text("q"),))
    config = body_of(request, settings).get("generationConfig", {})
    assert config.get("thinkingConfig") == expected


def test_temperature_zero_is_sent_and_extra_body_overrides_in_place() -> None:
    request = RequestMessages(system_prompt="", messages=(UserMessage.of_text("q"),))
    settings = ModelSettings(
        model=G25, temperature=0.0, extra_body={"zeta": 1, "contents": [], "alpha": True}
    )
    body = body_of(request, settings)
    assert body["generationConfig"] == {"temperature": 0.0}
    assert list(body) == ["contents", "generationConfig", "alpha", "zeta"]
    assert body["contents"] == []


def test_url_headers_and_auth_kept_apart() -> None:
    request = RequestMessages(system_prompt="", messages=(UserMessage.of_text("q"),))
    settings = ModelSettings(model="models/gemini-2.5-flash", extra_headers={"x-extra": "1"})
    a = adapter("https://proxy.example/v1beta/", **{"x-proxy-token": "t0k"})
    prepared = a.prepare(request, settings)
    assert prepared.url == (
        "https://proxy.example/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )
    assert prepared.model == "models/gemini-2.5-flash" and prepared.method == "POST"
    assert prepared.headers == (
        ("content-type", "application/json"),
        ("accept", "text/event-stream"),
        ("x-extra", "1"),
    )
    assert KEY not in repr(prepared) and "t0k" not in repr(prepared)
    assert a.auth_headers() == [("x-proxy-token", "t0k"), ("x-goog-api-key", KEY)]
    empty = GeminiAdapter(ProviderSettings(name="g", api="gemini", base_url=""))
    assert empty.prepare(request, ModelSettings(model=G25)).url.startswith(DEFAULT_BASE_URL + "/")
    assert empty.auth_headers() == []


def test_same_history_always_gives_identical_bytes() -> None:
    for case in GOLDEN_CASES.values():
        request, settings = case()
        first = adapter().prepare(request, settings).body
        assert adapter().prepare(request, settings).body == first
        assert adapter().prepare(decode_request(encode_request(request)), settings).body == first
        assert build_body(request, settings, PROVIDER) == json.loads(first)


# -- prompt caching: a tool loop only appends ------------------------------------------------


def _items(request: RequestMessages, settings: ModelSettings) -> list[bytes]:
    body = msgspec.json.decode(adapter().prepare(request, settings).body)
    return [msgspec.json.encode(item) for item in body["contents"]]


def test_tool_loop_requests_differ_only_by_an_appended_suffix() -> None:
    settings = ModelSettings(model=G3, reasoning=True)
    first_turn = fixture_message("tool-calls-streamed-args-parallel.sse", G3)
    h: tuple[Message, ...] = (
        UserMessage.of_text("Weather in Boston and SF?"),
        first_turn,
        *(
            result(c.id, c.name, f"sunny in {c.arguments['location']}")
            for c in first_turn.tool_calls
        ),
    )
    second_turn = fixture_message("tool-call-gemini3-signature.sse", G3)
    h2 = (
        *h,
        second_turn,
        result(second_turn.tool_calls[0].id, "weather", "foggy"),
    )
    r1 = RequestMessages(system_prompt="You are helpful.", messages=h, tools=TOOLS)
    r2 = RequestMessages(system_prompt="You are helpful.", messages=h2, tools=TOOLS)
    a, b = _items(r1, settings), _items(r2, settings)
    assert len(b) == len(a) + 2
    assert b[: len(a)] == a  # item by item, as bytes
    # and everything before `contents` is identical
    raw1 = adapter().prepare(r1, settings).body
    raw2 = adapter().prepare(r2, settings).body
    head = raw1.index(b'"contents":')
    assert raw1[:head] == raw2[:head]
