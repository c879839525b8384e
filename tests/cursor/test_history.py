"""Client-held history → native messages: AI-SDK JSON blobs (root_prompt_messages_json), the
inline ConversationHistory and ConversationTurnStructure blobs.

The JSON blobs are built exactly as oh-my-pi's Cursor provider builds them
(`buildRootPromptMessagesJson` / `buildCursorAssistantContent` / `buildCursorRootPromptContent`
in @oh-my-pi/pi-ai src/providers/cursor.ts): `JSON.stringify` of the objects below."""

from __future__ import annotations

import json

import pytest

from cursor_byok.llm import canonical
from cursor_byok.llm.types import (
    AssistantMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from cursor_byok.transport import cursor as d
from cursor_byok.transport.cursor import history as h
from cursor_byok.transport.cursor.proto import agent_pb2 as a

PNG = "iVBORw0KGgo="


def _js(obj: object) -> bytes:
    """JSON.stringify: compact separators, non-ASCII kept, UTF-8 bytes."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


OMP_TRANSCRIPT = [
    {"role": "system", "content": "You are a helpful assistant."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What's in src?"},
            {"type": "image", "image": f"data:image/png;base64,{PNG}", "mediaType": "image/png"},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {
                "type": "reasoning",
                "text": "List it.",
                "providerOptions": {"cursor": {"modelName": "k3"}},
                "signature": "sig==",
            },
            {"type": "text", "text": "Listing."},
            {
                "type": "tool-call",
                "toolCallId": "call_1",
                "toolName": "ls",
                "args": {"z": 1, "path": "src", "opts": {"b": True, "a": [3, {"y": 1, "x": 2}]}},
            },
        ],
    },
    {
        "role": "tool",
        "id": "call_1",
        "content": [
            {
                "type": "tool-result",
                "toolName": "ls",
                "toolCallId": "call_1",
                "result": "a.py\nb.py",
            }
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "tool-call", "toolCallId": "call_2", "toolName": "read", "args": {"path": "x"}}
        ],
    },
    {
        "role": "tool",
        "id": "call_2",
        "content": [
            {
                "type": "tool-result",
                "toolName": "read",
                "toolCallId": "call_2",
                "result": "ENOENT",
                "isError": True,
            }
        ],
    },
    {"role": "assistant", "content": [{"type": "text", "text": "Two files."}]},
]


def test_omp_transcript_decodes() -> None:
    msgs = d.history_from_root_prompt_blobs([_js(m) for m in OMP_TRANSCRIPT])
    assert [type(m).__name__ for m in msgs] == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "AssistantMessage",
    ]
    user = msgs[0]
    assert user == UserMessage(
        content=(TextContent(text="What's in src?"), ImageContent(data=PNG, mime_type="image/png"))
    )
    first = msgs[1]
    assert isinstance(first, AssistantMessage)
    assert (first.api, first.provider, first.model) == ("cursor", "cursor", "k3")
    assert first.stop_reason == "toolUse"
    assert first.content[0] == ThinkingContent(thinking="List it.", signature="sig==")
    assert first.content[1] == TextContent(text="Listing.")
    call = first.content[2]
    assert isinstance(call, ToolCall)
    assert (call.id, call.name) == ("call_1", "ls")
    assert call.arguments == {
        "opts": {"a": [3, {"x": 2, "y": 1}], "b": True},
        "path": "src",
        "z": 1,
    }
    # Byte stability: key-sorted at every depth, so a stored copy re-encodes identically.
    assert list(call.arguments) == ["opts", "path", "z"]
    assert list(call.arguments["opts"]["a"][1]) == ["x", "y"]
    encoded = canonical.encode_message(first)
    assert canonical.encode_message(canonical.decode_message(encoded)) == encoded
    assert msgs[2] == ToolResultMessage(
        tool_call_id="call_1", tool_name="ls", content=(TextContent(text="a.py\nb.py"),)
    )
    err = msgs[4]
    assert isinstance(err, ToolResultMessage) and err.is_error and err.text == "ENOENT"
    last = msgs[5]
    assert isinstance(last, AssistantMessage)
    assert last.model == "unknown" and last.stop_reason == "stop"


def test_string_content_and_empty_placeholders() -> None:
    blobs = [
        _js({"role": "user", "content": "plain"}),
        _js({"role": "user", "content": ""}),  # Cursor's checkpoint placeholders
        _js({"role": "assistant", "content": "answer", "providerOptions": {}}),
        _js({"role": "assistant", "content": []}),
    ]
    msgs = h.history_from_root_prompt_blobs(blobs)
    assert msgs == (
        UserMessage.of_text("plain"),
        AssistantMessage(
            content=(TextContent(text="answer"),), api="cursor", provider="cursor", model="unknown"
        ),
    )


def test_injected_context_user_message_is_skipped_only_before_first_answer() -> None:
    injected = {
        "role": "user",
        "content": [
            {"type": "text", "text": "<user_info>\nOS: darwin\n</user_info>"},
            {"type": "text", "text": "<rules>\nBe brief.\n</rules>"},
        ],
    }
    blobs = [
        _js({"role": "system", "content": "sys"}),
        _js(injected),
        _js({"role": "user", "content": [{"type": "text", "text": "hi"}]}),
        _js({"role": "assistant", "content": [{"type": "text", "text": "hello"}]}),
        _js(injected),
    ]
    msgs = h.history_from_root_prompt_blobs(blobs)
    assert msgs[0] == UserMessage.of_text("hi")
    assert len(msgs) == 3 and isinstance(msgs[2], UserMessage)


def test_tool_result_variants() -> None:
    blob = _js(
        {
            "role": "tool",
            "id": "c9",
            "content": [
                {
                    "type": "tool-result",
                    "toolName": "mcp",
                    "result": {"type": "text", "value": "v"},
                },
                {
                    "type": "tool-result",
                    "toolName": "mcp",
                    "toolCallId": "c10",
                    "output": {"k": [1]},
                },
                {"type": "unknown-part"},
            ],
        }
    )
    msgs = h.history_from_root_prompt_blobs([blob])
    assert [(m.tool_call_id, m.text) for m in msgs] == [("c9", "v"), ("c10", '{"k": [1]}')]  # type: ignore[union-attr]


def test_tool_call_args_as_string_or_invalid() -> None:
    blob = _js(
        {
            "role": "assistant",
            "content": [
                {"type": "tool-call", "toolCallId": "a", "toolName": "x", "args": '{"b":1,"a":2}'},
                {"type": "tool-call", "toolCallId": "b", "toolName": "x", "args": "{oops"},
                {"type": "tool-call", "toolCallId": "c", "toolName": "x"},
            ],
        }
    )
    (msg,) = h.history_from_root_prompt_blobs([blob])
    assert isinstance(msg, AssistantMessage)
    calls = msg.tool_calls
    assert calls[0].arguments == {"a": 2, "b": 1} and list(calls[0].arguments) == ["a", "b"]
    assert calls[1].arguments == {} and calls[1].arguments_error is not None
    assert calls[1].raw_arguments == "{oops"
    assert calls[2].arguments == {}


@pytest.mark.parametrize(
    ("blob", "match"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1,2]", "not a JSON object"),
        (b'{"role":"robot","content":"x"}', "unsupported role 'robot'"),
        (b'{"role":"user","content":42}', "user content must be"),
        (b'{"role":"user","content":[{"type":"text"}]}', "no text string"),
        (b'{"role":"user","content":[{"type":"image","image":"https://x/y.png"}]}', "URLs"),
        (
            b'{"role":"user","content":[{"type":"image","image":"data:image/png;base64,%%"}]}',
            "not valid base64",
        ),
        (b'{"role":"assistant","content":[{"type":"tool-call","toolName":"x"}]}', "toolCallId"),
        (
            b'{"role":"assistant","content":[{"type":"tool-call","toolCallId":"1","toolName":"x",'
            b'"args":[1]}]}',
            "must be a JSON object",
        ),
        (b'{"role":"tool","content":"x"}', "list of tool-result parts"),
        (b'{"role":"tool","content":[{"type":"tool-result","result":"x"}]}', "no toolCallId"),
    ],
)
def test_malformed_blobs_are_dialect_errors(blob: bytes, match: str) -> None:
    good = _js({"role": "user", "content": "ok"})
    with pytest.raises(d.DialectError, match=match) as info:
        h.history_from_root_prompt_blobs([good, blob])
    assert "history blob 1" in str(info.value)


def test_unknown_keys_and_parts_are_ignored() -> None:
    blob = _js(
        {
            "role": "assistant",
            "extra": 1,
            "content": [
                {"type": "source", "url": "x"},
                {"type": "text", "text": "t", "providerMetadata": {}},
            ],
        }
    )
    (msg,) = h.history_from_root_prompt_blobs([blob])
    assert isinstance(msg, AssistantMessage) and msg.text == "t"


# -- inline ConversationHistory ------------------------------------------------------------------


def test_conversation_history_all_content_kinds() -> None:
    hist = a.ConversationHistory()
    u = hist.messages.add().user
    u.content.add().text.text = "look"
    img = u.content.add().image
    img.data, img.mime_type = PNG, "image/png"
    asst = hist.messages.add().assistant
    asst.content.add().reasoning.CopyFrom(
        a.ConversationHistoryReasoningContent(text="think", signature="s")
    )
    asst.content.add().redacted_reasoning.data = "opaque"
    asst.content.add().text.text = "calling"
    asst.content.add().tool_call.CopyFrom(
        a.ConversationHistoryToolCall(tool_call_id="t1", tool_name="Read", args_json='{"path":"a"}')
    )
    tool = hist.messages.add().tool
    tool.tool_call_id, tool.tool_name, tool.is_error = "t1", "Read", True
    tool.content.add().text.text = "missing"
    wire = a.ConversationHistory.FromString(hist.SerializeToString())
    msgs = h.history_from_conversation_history(wire)
    assert msgs[0] == UserMessage(
        content=(TextContent(text="look"), ImageContent(data=PNG, mime_type="image/png"))
    )
    assistant = msgs[1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content == (
        ThinkingContent(thinking="think", signature="s"),
        ThinkingContent(thinking="", signature="opaque", redacted=True),
        TextContent(text="calling"),
        ToolCall(id="t1", name="Read", arguments={"path": "a"}),
    )
    assert assistant.provider == "cursor" and assistant.stop_reason == "toolUse"
    assert msgs[2] == ToolResultMessage(
        tool_call_id="t1", tool_name="Read", content=(TextContent(text="missing"),), is_error=True
    )


def test_conversation_history_tool_without_id_is_an_error() -> None:
    hist = a.ConversationHistory()
    hist.messages.add().tool.tool_name = "Read"
    with pytest.raises(d.DialectError, match="tool_call_id"):
        h.history_from_conversation_history(hist)


# -- turns ---------------------------------------------------------------------------------------
