from __future__ import annotations

import hashlib

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cursor_byok.llm.canonical import (
    decode_message,
    decode_request,
    encode_message,
    encode_messages,
    encode_request,
    last_message_hash,
    messages_hash,
)
from cursor_byok.llm.types import (
    AssistantMessage,
    RequestMessages,
    TextContent,
    ToolCall,
    ToolDefinition,
    UserMessage,
)
from tests.llm.strategies import messages


@given(messages)
def test_decode_then_encode_is_byte_identical(message: object) -> None:
    data = encode_message(message)  # type: ignore[arg-type]
    again = decode_message(data)
    assert again == message
    assert encode_message(again) == data


@given(messages)
def test_one_encoding_per_value(message: object) -> None:
    """Rebuilding the value from its builtins (a fresh object) gives the same bytes."""
    rebuilt = msgspec.convert(msgspec.to_builtins(message), type=type(message))
    assert encode_message(rebuilt) == encode_message(message)  # type: ignore[arg-type]


def test_dict_key_order_does_not_change_bytes() -> None:
    a = ToolCall(id="1", name="Read", arguments={"b": 1, "a": {"y": 2, "x": 1}})
    b = ToolCall(id="1", name="Read", arguments={"a": {"x": 1, "y": 2}, "b": 1})
    msg = lambda c: AssistantMessage(content=(c,), api="x", provider="p", model="m")  # noqa: E731
    assert encode_message(msg(a)) == encode_message(msg(b))


def test_absent_optional_fields_are_not_encoded() -> None:
    m = UserMessage.of_text("hi")
    assert encode_message(m) == b'{"role":"user","content":[{"type":"text","text":"hi"}]}'


@given(st.lists(messages, max_size=6), st.lists(messages, max_size=3))
def test_messages_hash_is_over_ordered_encodings(first: list, more: list) -> None:  # type: ignore[type-arg]
    expected = hashlib.sha256(b"".join(encode_message(m) + b"\n" for m in first)).hexdigest()
    assert messages_hash(first) == expected
    assert encode_messages(first + more).startswith(encode_messages(first))
    if more:
        assert messages_hash(first + more) != messages_hash(first)
        assert (
            last_message_hash(first + more) == hashlib.sha256(encode_message(more[-1])).hexdigest()
        )


def test_hash_depends_on_order() -> None:
    a, b = UserMessage.of_text("a"), UserMessage.of_text("b")
    assert messages_hash([a, b]) != messages_hash([b, a])
    assert last_message_hash([]) is None


def test_request_round_trip() -> None:
    r = RequestMessages(
        system_prompt="sys",
        messages=(UserMessage.of_text("x"),),
        tools=(ToolDefinition(name="t", description="d", parameters={"type": "object"}),),
    )
    assert decode_request(encode_request(r)) == r


def test_unknown_field_is_rejected_not_dropped() -> None:
    with pytest.raises(msgspec.ValidationError):
        decode_message(b'{"role":"user","content":[],"surprise":1}')
    with pytest.raises(msgspec.ValidationError):
        decode_message(b'{"role":"robot","content":[]}')


def test_text_content_signature_survives() -> None:
    sig = '{"v":1,"id":"msg_1"}'
    m = AssistantMessage(
        content=(TextContent(text="t", signature=sig),), api="a", provider="p", model="m"
    )
    back = decode_message(encode_message(m))
    assert isinstance(back, AssistantMessage)
    assert back.content[0] == TextContent(text="t", signature=sig)
