"""The OpenAI Chat body joined from the messages' kept encodings (`encode_body`, issue 28) is,
byte for byte, the JSON of `build_body` from nothing, for any sequence of histories and any
options; and a call encodes only the messages appended since the previous one."""

from __future__ import annotations

from unittest import mock

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.llm.openai_chat import ChatCompat, ChatHistory, build_body, encode_body
from cursor_byok.llm.openai_chat import request as chat
from cursor_byok.llm.prefix_memo import PrefixMemo
from cursor_byok.llm.settings import ModelSettings
from cursor_byok.llm.types import Message, RequestMessages, TextContent, ToolDefinition, UserMessage
from tests.llm.test_history_memo import compats, steps

TOOL = ToolDefinition(name="Read", description="read a file", parameters={"type": "object"})
option_sets = st.builds(
    ModelSettings,
    model=st.sampled_from(["m", "m2"]),
    max_output_tokens=st.none() | st.integers(1, 9999),
    temperature=st.none() | st.floats(0, 2, allow_nan=False),
    reasoning=st.booleans(),
    reasoning_effort=st.none() | st.sampled_from(["low", "high"]),
    extra_body=st.dictionaries(st.sampled_from(["z", "top_p", "seed"]), st.integers(0, 5)),
    cache_key=st.none() | st.just("k"),
)


@settings(max_examples=150, deadline=None)
@given(steps, compats, option_sets, st.sampled_from(["", 'sys ✓ "quoted"']), st.booleans())
def test_the_joined_body_is_the_json_of_the_built_body(
    plan: list,
    compat: ChatCompat,
    options: ModelSettings,
    system: str,
    tools: bool,  # type: ignore[type-arg]
) -> None:
    memo: PrefixMemo[ChatHistory] = PrefixMemo(4)
    histories: list[tuple[Message, ...]] = [()]
    for which, keep, more in plan:
        base = histories[which % len(histories)]
        history = base[: min(keep, len(base))] + tuple(more)
        request = RequestMessages(system, history, (TOOL,) if tools else ())
        expected = msgspec.json.encode(build_body(request, options, "p", compat, None))
        assert encode_body(request, options, "p", compat, memo) == expected
        assert encode_body(request, options, "p", compat, None) == expected
        histories.append(history)


def test_each_call_encodes_only_what_was_appended() -> None:
    memo: PrefixMemo[ChatHistory] = PrefixMemo()
    history: tuple[Message, ...] = ()
    options = ModelSettings(model="m")
    with mock.patch.object(chat, "_encode", wraps=chat._encode) as encoded:
        for turn in range(40):
            history = (*history, UserMessage(content=(TextContent(text=f"turn {turn}" * 50),)))
            before = encoded.call_count
            encode_body(RequestMessages("sys", history), options, "p", ChatCompat(), memo)
            # the new message, the system message, the model name and the options
            assert encoded.call_count - before == 4, turn


def test_a_tools_tuple_is_converted_and_encoded_once() -> None:
    # The loop hands every call the same tuple for the same context fields: its JSON is kept
    # by the tuple's identity (tools_json.py) and is the built body's, byte for byte.
    tools = (TOOL, ToolDefinition(name="Write", description="w", parameters={"type": "object"}))
    options = ModelSettings(model="m")
    compat = ChatCompat()
    convert = mock.Mock(wraps=chat.tool_definition)
    with (
        mock.patch.object(chat, "_tools_json", chat.ToolsJson(convert)),
        mock.patch.object(chat, "tool_definition", convert),
    ):
        for turn in range(5):
            message = UserMessage(content=(TextContent(text=f"{turn}"),))
            request = RequestMessages("s", (message,), tools)
            body = encode_body(request, options, "p", compat, None)
            assert body == msgspec.json.encode(build_body(request, options, "p", compat, None))
    # build_body converts on each call (5 x 2); the encoded list was converted once (2)
    assert convert.call_count == 5 * 2 + 2
