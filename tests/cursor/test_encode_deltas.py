"""The frames of text and thinking deltas are written by hand (encode._text_update): byte for
byte what protobuf makes of the same messages, for any text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.llm.assembler import MessageAssembler
from cursor_byok.transport.cursor import encode
from cursor_byok.transport.cursor.encode import StreamEncoder, text_delta
from cursor_byok.transport.cursor.proto import agent_pb2 as a

# Any text a stream can carry (no lone surrogates: they are not UTF-8), lengths around the
# one- and two-byte length boundaries included.
TEXTS = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=300),
    st.sampled_from(["", "a", "\u00e9", "\u2603", "\U0001f600", "\n", "\x00"]),
    st.builds(lambda n, c: c * n, st.integers(115, 135), st.sampled_from(["x", "\u00e9"])),
    st.builds(lambda n: "y" * n, st.integers(16_370, 16_400)),
)


def protobuf_text(text: str) -> bytes:
    update = a.InteractionUpdate(text_delta=a.TextDeltaUpdate(text=text))
    return a.AgentServerMessage(interaction_update=update).SerializeToString()


def protobuf_thinking(text: str) -> bytes:
    update = a.InteractionUpdate(thinking_delta=a.ThinkingDeltaUpdate(text=text))
    return a.AgentServerMessage(interaction_update=update).SerializeToString()


def stream_frame(kind: str, text: str) -> bytes | None:
    asm = MessageAssembler(api="faux", provider="p", model="m")
    asm.start()
    index, _ = asm.open_thinking() if kind == "thinking" else asm.open_text()
    event = asm.thinking_delta(index, text) if kind == "thinking" else asm.text_delta(index, text)
    return StreamEncoder(model_call_id="c", now_ms=lambda: 0).encode(event)


@settings(max_examples=500)
@given(TEXTS)
def test_text_and_thinking_frames_are_protobufs(text: str) -> None:
    assert text_delta(text) == protobuf_text(text)
    assert encode._text_update(encode._THINKING_DELTA, text) == protobuf_thinking(text)
    expected = (protobuf_text(text), protobuf_thinking(text)) if text else (None, None)
    assert (stream_frame("text", text), stream_frame("thinking", text)) == expected


@pytest.mark.parametrize("n", [0, 1, 123, 124, 125, 126, 127, 128, 16_383, 16_384, 2**21])
def test_every_length_boundary(n: int) -> None:
    text = "z" * n
    assert text_delta(text) == protobuf_text(text)
    parsed = a.AgentServerMessage.FromString(text_delta(text))
    assert parsed.interaction_update.text_delta.text == text


def test_a_lone_surrogate_is_refused_as_protobuf_refuses_it() -> None:
    with pytest.raises(UnicodeEncodeError):
        protobuf_text("a\ud800")
    with pytest.raises(UnicodeEncodeError):
        text_delta("a\ud800")
