"""OpenAI Chat Completions request building: exact bytes, history rules, compat, caching.

Golden bodies live in tests/llm/golden/openai-chat-*.json (the exact bytes sent). After a
deliberate change, regenerate them with:

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/llm/test_openai_chat_request.py -k golden
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cursor_byok.llm.canonical import decode_message, encode_message
from cursor_byok.llm.openai_chat import (
    ChatCompat,
    OpenAIChatAdapter,
    chat_url,
    detect_compat,
    normalize_tool_call_id,
)
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

GOLDEN = Path(__file__).parent / "golden"
KEY = "sk-PLANTED-0123456789"

READ = ToolDefinition(
    name="read_file",
    description="Read a file",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
)
PNG = "iVBORw0KGgo="


def provider(name: str, base_url: str) -> ProviderSettings:
    return ProviderSettings(name=name, api="openai-chat", base_url=base_url, api_key=KEY)


OPENAI = provider("openai", "https://api.openai.com/v1")
DEEPSEEK = provider("deepseek", "https://api.deepseek.com")
OPENROUTER = provider("openrouter", "https://openrouter.ai/api/v1")
AZURE = provider("azure", "https://res.openai.azure.com/openai/v1")
LOCAL = ProviderSettings(name="local", api="openai-chat", base_url="http://127.0.0.1:8080/v1")


def body_of(p: ProviderSettings, request: RequestMessages, settings: ModelSettings) -> bytes:
    return OpenAIChatAdapter(p).prepare(request, settings).body


def messages_of(body: bytes) -> list[dict[str, Any]]:
    data: dict[str, Any] = json.loads(body)
    return list(data["messages"])


class _Body(msgspec.Struct):
    messages: list[msgspec.Raw]


def raw_messages(body: bytes) -> list[bytes]:
    """The serialized `messages` items exactly as they are in the body."""
    return [bytes(m) for m in msgspec.json.decode(body, type=_Body).messages]


def deepseek_turn(text: str = "Let me look.") -> AssistantMessage:
    return AssistantMessage(
        content=(
            ThinkingContent(thinking="User wants the file.", signature="reasoning_content"),
            TextContent(text=text),
            ToolCall(id="call_00_x1", name="read_file", arguments={"path": "a.txt", "b": 1}),
        ),
        api="openai-chat",
        provider="deepseek",
        model="deepseek-chat",
        stop_reason="toolUse",
    )


def foreign_turn() -> AssistantMessage:
    return AssistantMessage(
        content=(
            ThinkingContent(thinking="private plan", signature="ANTHROPIC-SIG-abc=="),
            TextContent(text="On it.", signature='{"v":1,"id":"msg_1"}'),
            ToolCall(
                id="call_abc|fc_+/=xyz0123456789",
                name="read_file",
                arguments={"path": "b.txt"},
                thought_signature="GEMINI-THOUGHT-SIG",
            ),
            ToolCall(id="toolu_" + "Z" * 60, name="read_file", arguments={"path": "c.txt"}),
        ),
        api="anthropic",
        provider="anthropic",
        model="claude-sonnet-4-5",
        stop_reason="toolUse",
    )


def result(call_id: str, text: str, *, image: bool = False) -> ToolResultMessage:
    content: tuple[TextContent | ImageContent, ...] = (TextContent(text=text),)
    if image:
        content = (*content, ImageContent(data=PNG, mime_type="image/png"))
    return ToolResultMessage(tool_call_id=call_id, tool_name="read_file", content=content)


# -- golden bytes --------------------------------------------------------------------------------

GOLDEN_CASES: dict[str, tuple[ProviderSettings, RequestMessages, ModelSettings]] = {
    "openai-basic": (
        OPENAI,
        RequestMessages(
            system_prompt="You are terse.",
            messages=(UserMessage.of_text("hello"),),
            tools=(READ,),
        ),
        ModelSettings(
            model="gpt-5",
            max_output_tokens=4096,
            reasoning=True,
            reasoning_effort="medium",
            cache_key="conv-123",
            extra_body={"store": False, "metadata": {"app": "byok"}},
            extra_headers={"x-trace": "t1"},
        ),
    ),
    "deepseek-tool-loop": (
        DEEPSEEK,
        RequestMessages(
            system_prompt="sys",
            messages=(
                UserMessage(
                    content=(
                        TextContent(text="look at this"),
                        ImageContent(data=PNG, mime_type="image/png"),
                    )
                ),
                deepseek_turn(),
                result("call_00_x1", "file a", image=True),
                AssistantMessage(
                    content=(
                        ToolCall(
                            id="call_00_x2",
                            name="read_file",
                            arguments_error="arguments are not valid JSON",
                            raw_arguments='{"path": "b.txt"',
                        ),
                    ),
                    api="openai-chat",
                    provider="deepseek",
                    model="deepseek-chat",
                    stop_reason="toolUse",
                ),
                result("call_00_x2", "error: bad arguments"),
            ),
            tools=(READ,),
        ),
        ModelSettings(
            model="deepseek-chat",
            max_output_tokens=8000,
            reasoning=True,
            temperature=0.2,
            cache_key="c",
        ),
    ),
    "openrouter-reasoning-details": (
        OPENROUTER,
        RequestMessages(
            system_prompt="sys",
            messages=(
                UserMessage.of_text("weather?"),
                AssistantMessage(
                    content=(
                        ThinkingContent(thinking="need weather", signature="reasoning"),
                        ToolCall(
                            id="tool_1",
                            name="read_file",
                            arguments={"path": "w"},
                            thought_signature='{"type":"reasoning.encrypted","data":"E+/=","id":"tool_1"}',
                        ),
                    ),
                    api="openai-chat",
                    provider="openrouter",
                    model="google/gemini-3-pro",
                    stop_reason="toolUse",
                ),
                result("tool_1", "sunny"),
            ),
            tools=(READ,),
        ),
        ModelSettings(model="google/gemini-3-pro", reasoning_effort="high"),
    ),
    "cross-provider": (
        OPENAI,
        RequestMessages(
            system_prompt="sys",
            messages=(
                UserMessage.of_text("go"),
                foreign_turn(),
                result("call_abc|fc_+/=xyz0123456789", "B"),
                result("toolu_" + "Z" * 60, "C"),
            ),
        ),
        ModelSettings(model="gpt-4.1"),
    ),
    "azure-minimal": (
        AZURE,
        RequestMessages(system_prompt="", messages=(UserMessage.of_text("hi"),)),
        ModelSettings(model="gpt-5-nano", max_output_tokens=100, cache_key="not-sent"),
    ),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_body(case: str) -> None:
    p, request, settings = GOLDEN_CASES[case]
    body = body_of(p, request, settings)
    path = GOLDEN / f"openai-chat-{case}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    assert path.read_bytes() == body, f"{path.name} differs; see the module docstring"
    assert KEY.encode() not in body


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_same_history_same_bytes_even_after_a_storage_round_trip(case: str) -> None:
    p, request, settings = GOLDEN_CASES[case]
    first = body_of(p, request, settings)
    assert body_of(p, request, settings) == first
    # History comes back from storage in canonical form (dict keys sorted); tool definitions
    # are rebuilt for every request and keep their schema's own key order.
    stored = msgspec.structs.replace(
        request, messages=tuple(decode_message(encode_message(m)) for m in request.messages)
    )
    assert body_of(p, stored, settings) == first


# -- body fields -------------------------------------------------------------------------------


def test_openai_body_fields_in_order() -> None:
    p, request, settings = GOLDEN_CASES["openai-basic"]
    prepared = OpenAIChatAdapter(p).prepare(request, settings)
    data = json.loads(prepared.body)
    assert list(data) == [
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_completion_tokens",
        "reasoning_effort",
        "tools",
        "prompt_cache_key",
        "metadata",
        "store",
    ]
    assert data["messages"][0] == {"role": "developer", "content": "You are terse."}
    assert data["messages"][1] == {"role": "user", "content": "hello"}
    assert data["stream_options"] == {"include_usage": True}
    assert data["prompt_cache_key"] == "conv-123"
    assert data["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file",
                "parameters": READ.parameters,
            },
        }
    ]
    assert prepared.url == "https://api.openai.com/v1/chat/completions"
    assert prepared.model == "gpt-5"
    assert ("x-trace", "t1") in prepared.headers
    assert all(k.lower() not in ("authorization", "api-key") for k, _ in prepared.headers)


def test_compat_hosts_use_max_tokens_and_no_cache_key() -> None:
    request = RequestMessages(system_prompt="s", messages=(UserMessage.of_text("x"),))
    settings = ModelSettings(
        model="m", max_output_tokens=10, reasoning=True, temperature=0.5, cache_key="k"
    )
    for p in (DEEPSEEK, OPENROUTER, LOCAL):
        data = json.loads(body_of(p, request, settings))
        assert data["max_tokens"] == 10 and "max_completion_tokens" not in data
        assert "prompt_cache_key" not in data
        assert data["messages"][0]["role"] == "system"
        assert data["temperature"] == 0.5
    deepseek = json.loads(body_of(DEEPSEEK, request, settings))
    assert deepseek["thinking"] == {"type": "enabled"}
    openrouter = json.loads(body_of(OPENROUTER, request, settings))
    assert openrouter["reasoning"] == {"enabled": True}
    local = json.loads(body_of(LOCAL, request, ModelSettings(model="m", reasoning_effort="low")))
    assert local["reasoning_effort"] == "low" and "temperature" not in local
    azure = json.loads(body_of(AZURE, request, settings))
    assert azure["max_completion_tokens"] == 10 and "prompt_cache_key" not in azure


def test_detect_compat() -> None:
    assert detect_compat(OPENAI) == ChatCompat(
        flavor="openai",
        max_tokens_field="max_completion_tokens",
        developer_role=True,
        send_prompt_cache_key=True,
    )
    proxy = provider("openai", "https://proxy.example.com/v1")
    assert detect_compat(proxy).flavor == "openai"
    assert not detect_compat(proxy).send_prompt_cache_key
    assert detect_compat(AZURE).auth_header == "api-key"
    assert detect_compat(provider("x", "https://api.deepseek.com")).flavor == "deepseek"
    assert detect_compat(provider("or", "https://openrouter.ai/api/v1")).flavor == "openrouter"
    assert detect_compat(LOCAL).flavor == "generic"
    assert chat_url("http://h/v1/") == "http://h/v1/chat/completions"
    assert chat_url("https://r/openai/v1?api-version=x") == (
        "https://r/openai/v1/chat/completions?api-version=x"
    )


def test_auth_headers() -> None:
    assert OpenAIChatAdapter(OPENAI).auth_headers() == [("authorization", f"Bearer {KEY}")]
    assert OpenAIChatAdapter(AZURE).auth_headers() == [("api-key", KEY)]
    assert OpenAIChatAdapter(LOCAL).auth_headers() == []


def test_empty_tools_only_when_the_compat_flag_asks() -> None:
    request = RequestMessages(
        system_prompt="s",
        messages=(UserMessage.of_text("x"), deepseek_turn(), result("call_00_x1", "a")),
    )
    settings = ModelSettings(model="deepseek-chat")
    assert "tools" not in json.loads(body_of(DEEPSEEK, request, settings))
    compat = msgspec.structs.replace(detect_compat(LOCAL), empty_tools_for_tool_history=True)
    data = json.loads(OpenAIChatAdapter(LOCAL, compat=compat).prepare(request, settings).body)
    assert data["tools"] == []


# -- history ---------------------------------------------------------------------------------


def test_deepseek_reasoning_content_is_sent_back_on_tool_call_turns() -> None:
    _, request, settings = GOLDEN_CASES["deepseek-tool-loop"]
    messages = messages_of(body_of(DEEPSEEK, request, settings))
    assistant = messages[2]
    assert assistant == {
        "role": "assistant",
        "content": "Let me look.",
        "reasoning_content": "User wants the file.",
        "tool_calls": [
            {
                "id": "call_00_x1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"b":1,"path":"a.txt"}'},
            }
        ],
    }
    # the raw text of invalid arguments goes back as it came
    assert messages[5]["content"] is None
    assert messages[5]["reasoning_content"] == ""  # DeepSeek wants the field on every turn
    assert messages[5]["tool_calls"][0]["function"]["arguments"] == '{"path": "b.txt"'
    # another model of the same provider gets the reasoning as plain text, the field empty
    other = messages_of(body_of(DEEPSEEK, request, ModelSettings(model="deepseek-reasoner")))
    assert other[2]["reasoning_content"] == ""
    assert other[2]["content"] == "User wants the file.\n\nLet me look."


def test_user_parts_and_tool_result_images() -> None:
    _, request, settings = GOLDEN_CASES["deepseek-tool-loop"]
    messages = messages_of(body_of(DEEPSEEK, request, settings))
    assert messages[1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "look at this"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        ],
    }
    assert messages[3] == {"role": "tool", "tool_call_id": "call_00_x1", "content": "file a"}
    assert messages[4]["role"] == "user"
    assert messages[4]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")


def test_openrouter_reasoning_details_replayed_byte_for_byte() -> None:
    _, request, settings = GOLDEN_CASES["openrouter-reasoning-details"]
    body = body_of(OPENROUTER, request, settings)
    assert (
        b'"reasoning_details":[{"type":"reasoning.encrypted","data":"E+/=","id":"tool_1"}]' in body
    )
    data = json.loads(body)
    assert data["reasoning"] == {"effort": "high"}
    assert data["messages"][2]["reasoning"] == "need weather"
    # another model: no signature, no reasoning field
    other = json.loads(body_of(OPENROUTER, request, ModelSettings(model="openai/gpt-5")))
    assert "reasoning_details" not in other["messages"][2]
    assert "reasoning" not in other["messages"][2]


def test_cross_provider_history_drops_signatures_and_rewrites_ids() -> None:
    _, request, settings = GOLDEN_CASES["cross-provider"]
    body = body_of(OPENAI, request, settings)
    for secret in (b"ANTHROPIC-SIG", b"GEMINI-THOUGHT-SIG", b"msg_1", b"fc_", b"|"):
        assert secret not in body
    messages = messages_of(body)
    assistant = messages[2]
    assert assistant["content"] == "private plan\n\nOn it."
    assert "reasoning_content" not in assistant and "reasoning_details" not in assistant
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert ids[0] == "call_abc"
    assert len(ids[1]) <= 40 and ids[1].startswith("toolu_ZZZ")
    assert [m["tool_call_id"] for m in messages[3:5]] == ids
    assert all(m["role"] == "tool" for m in messages[3:5])


def test_normalize_tool_call_id() -> None:
    assert normalize_tool_call_id("call_abc|fc_+/=xyz") == "call_abc"
    assert normalize_tool_call_id("a+b/c=d") == "a_b_c_d"
    long_a = normalize_tool_call_id("x" * 50 + "a")
    long_b = normalize_tool_call_id("x" * 50 + "b")
    assert len(long_a) == 40 and long_a != long_b


def test_same_model_replay_keeps_ids_byte_for_byte() -> None:
    odd = AssistantMessage(
        content=(ToolCall(id="call_ok|keep+/=", name="f", arguments={}),),
        api="openai-chat",
        provider="openai",
        model="gpt-4.1",
        stop_reason="toolUse",
    )
    request = RequestMessages(
        system_prompt="",
        messages=(UserMessage.of_text("x"), odd, result("call_ok|keep+/=", "r")),
    )
    messages = messages_of(body_of(OPENAI, request, ModelSettings(model="gpt-4.1")))
    assert messages[1]["tool_calls"][0]["id"] == "call_ok|keep+/="
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert messages[2]["tool_call_id"] == "call_ok|keep+/="


def test_errored_turns_dropped_and_missing_results_synthesized() -> None:
    failed = AssistantMessage(
        content=(TextContent(text="half"),),
        api="openai-chat",
        provider="openai",
        model="gpt-4.1",
        stop_reason="error",
        error_message="boom",
    )
    unanswered = AssistantMessage(
        content=(ToolCall(id="c9", name="f"),),
        api="openai-chat",
        provider="openai",
        model="gpt-4.1",
        stop_reason="toolUse",
    )
    request = RequestMessages(
        system_prompt="",
        messages=(UserMessage.of_text("a"), failed, unanswered, UserMessage.of_text("b")),
    )
    messages = messages_of(body_of(OPENAI, request, ModelSettings(model="gpt-4.1")))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[2] == {"role": "tool", "tool_call_id": "c9", "content": "No result provided"}


def test_lone_surrogates_are_stripped() -> None:
    request = RequestMessages(system_prompt="s\ud800", messages=(UserMessage.of_text("a\udfffb"),))
    data = json.loads(body_of(OPENAI, request, ModelSettings(model="m")))
    assert data["messages"][0]["content"] == "s"
    assert data["messages"][1]["content"] == "ab"


# -- prompt caching ----------------------------------------------------------------------------


def test_tool_loop_requests_differ_only_by_an_appended_suffix() -> None:
    """OpenAI caches prompt prefixes: request N+1's messages start with request N's, byte for
    byte, item by item."""
    settings = ModelSettings(model="gpt-4.1", cache_key="conv-1")
    history: list[Message] = [
        UserMessage.of_text("read a.txt"),
        foreign_turn(),  # even foreign history must serialize stably
        result("call_abc|fc_+/=xyz0123456789", "B"),
        result("toolu_" + "Z" * 60, "C"),
        UserMessage.of_text("now b.txt"),
    ]
    request = RequestMessages(system_prompt="sys", messages=tuple(history), tools=(READ,))
    first = body_of(OPENAI, request, settings)
    turn = AssistantMessage(
        content=(
            TextContent(text="Reading."),
            ToolCall(id="call_Q", name="read_file", arguments={"path": "b.txt"}),
        ),
        api="openai-chat",
        provider="openai",
        model="gpt-4.1",
        usage=msgspec.structs.replace(foreign_turn().usage, input=5),
        stop_reason="toolUse",
        response_id="chatcmpl-1",
    )
    later = RequestMessages(
        system_prompt="sys",
        messages=(*history, turn, result("call_Q", "contents of b")),
        tools=(READ,),
    )
    second = body_of(OPENAI, later, settings)
    before, after = raw_messages(first), raw_messages(second)
    assert len(after) == len(before) + 2
    assert after[: len(before)] == before
    # everything outside `messages` is identical too
    a, b = json.loads(first), json.loads(second)
    del a["messages"], b["messages"]
    assert a == b and a["prompt_cache_key"] == "conv-1"
